"""VirtualClock on its own and as a loop's clock: ticks, jumps, set_clock."""

from __future__ import annotations

import asyncio
import gc
import math
import time

import pytest

import snakeloop
from snakeloop import VirtualClock

TASK_KINDS = [False, True]  # Loop(stdlib_futures=...)


def test_ten_sleeps_of_a_tenth_make_exactly_one_second():
    async def main():
        loop = asyncio.get_running_loop()
        for _ in range(10):
            await asyncio.sleep(0.1)
        return loop.time()

    assert snakeloop.run(main(), clock=VirtualClock()) == 1.0


@pytest.mark.parametrize("resolution", [1e-6, 1e-3, 1e-9])
def test_readings_are_whole_ticks(resolution):
    clock = VirtualClock(resolution=resolution)
    for _ in range(7):
        clock.jump(0.3)
    ticks = round(1 / resolution)
    assert clock.now == round(2.1 * ticks) / ticks
    assert clock.now == 2.1


def test_jump_moves_time_forward_and_refuses_to_go_back():
    clock = VirtualClock(start=5.0)
    clock.jump(2.5)
    assert clock.now == 7.5
    with pytest.raises(ValueError, match=r"^time can't go backwards$"):
        clock.jump(-1)
    with pytest.raises(TypeError, match="jump\\(\\) takes a number of seconds"):
        clock.jump("1")  # type: ignore[arg-type]
    assert clock.now == 7.5


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"resolution": 0.3}, ValueError, "whole number of ticks"),
        ({"resolution": 0}, ValueError, "whole number of ticks"),
        ({"rate": -1}, ValueError, "rate must be a finite number >= 0"),
        ({"stall_timeout": -1}, ValueError, "stall_timeout must be a finite number >= 0"),
        ({"autojump_threshold": "1"}, TypeError, "autojump_threshold must be a number"),
        ({"external_time": "fast"}, ValueError, "external_time must be 'frozen' or 'real'"),
        ({"start": "later"}, TypeError, "start must be a number of seconds or 'continue'"),
        ({"start": float("nan")}, ValueError, "start must be finite"),
        ({"end": "soon"}, TypeError, "end must be a loop time in seconds or None"),
    ],
)
def test_bad_options_name_the_mistake(kwargs, error, message):
    with pytest.raises(error, match=message):
        VirtualClock(**kwargs)


def test_rate_lets_time_flow_between_jumps():
    clock = VirtualClock(rate=1000.0)
    first = clock.now
    time.sleep(0.01)
    assert clock.now - first >= 9.0  # 10 ms of real time at 1000x


@pytest.mark.parametrize("stdlib_futures", TASK_KINDS)
def test_loop_time_is_the_clock(stdlib_futures):
    clock = VirtualClock(start=100.0)
    loop = snakeloop.new_event_loop(clock=clock, stdlib_futures=stdlib_futures)
    try:
        assert loop.get_clock() is clock
        assert loop.time() == 100.0
        clock.jump(1.5)
        assert loop.time() == 101.5
    finally:
        loop.close()


def test_a_clock_belongs_to_one_open_loop():
    clock = VirtualClock()
    loop = snakeloop.new_event_loop(clock=clock)
    try:
        with pytest.raises(RuntimeError, match=r"^VirtualClock is already attached to <Loop "):
            snakeloop.new_event_loop(clock=clock)
    finally:
        loop.close()
    gc.collect()  # the refused loop
    other = snakeloop.new_event_loop(clock=clock)  # free again once the first closed
    other.close()


def test_set_clock_refuses_a_running_loop():
    async def main():
        asyncio.get_running_loop().set_clock(VirtualClock())

    with pytest.raises(RuntimeError, match=r"^cannot change the clock of a running loop$"):
        snakeloop.run(main())


def test_set_clock_keeps_each_timers_remaining_delay():
    loop = snakeloop.new_event_loop()
    try:
        fired = []
        later = loop.call_later(5.0, lambda: fired.append(loop.time()))
        loop.call_later(5.0, lambda: fired.append("same deadline, second"))
        sooner = loop.call_later(2.0, lambda: fired.append(loop.time()))
        clock = VirtualClock(start=0.0)
        # What each timer has left when the clock changes, from its own
        # deadline: on a loaded machine the real clock moves by milliseconds
        # between the calls above.
        left_later, left_sooner = later.when() - loop.time(), sooner.when() - loop.time()
        loop.set_clock(clock)
        loop.call_later(6.0, loop.stop)
        loop.run_forever()
        assert fired[0] == pytest.approx(left_sooner, abs=1e-3)
        assert fired[1] == pytest.approx(left_later, abs=1e-3)
        assert fired[2] == "same deadline, second"
        assert loop.time() == 6.0
    finally:
        loop.close()


def test_set_clock_keeps_timers_whose_deadlines_the_move_makes_equal():
    """Deadlines one double apart can round to one deadline after the move: both
    timers stay, and fire in their old order (once, the later was lost)."""
    first = VirtualClock(start=1.0)
    loop = snakeloop.new_event_loop(clock=first)
    try:
        fired = []
        near = 2.0
        nearer_after = math.nextafter(near, 3.0)
        loop.call_at(nearer_after, fired.append, "second")
        loop.call_at(near, fired.append, "first")
        loop.call_at(near, fired.append, "first, tied")
        loop.set_clock(VirtualClock(start=2.0**20))
        pending = loop._pending_timers()
        assert len(pending) == 1, pending  # one deadline now
        assert pending[0][0] == near + (2.0**20 - 1.0)
        loop.call_at(pending[0][0] + 1, loop.stop)
        loop.run_forever()
        assert fired == ["first", "first, tied", "second"]
    finally:
        loop.close()


def test_continue_keeps_time_from_going_backwards():
    first = VirtualClock(start=50.0)
    loop = snakeloop.new_event_loop(clock=first)
    try:

        async def sleep_and_read(seconds):
            await asyncio.sleep(seconds)
            return loop.time()

        assert loop.run_until_complete(sleep_and_read(10)) == 60.0
        loop.set_clock(VirtualClock(start="continue"))
        assert loop.time() == 60.0
        assert loop.run_until_complete(sleep_and_read(1)) == 61.0
    finally:
        loop.close()


def test_set_clock_back_to_a_real_clock_stops_jumping():
    loop = snakeloop.new_event_loop(clock=VirtualClock())
    try:
        loop.set_clock(snakeloop.MonotonicClock())
        assert loop._virtual_time is None
        started = time.monotonic()
        loop.run_until_complete(asyncio.sleep(0.05))
        assert time.monotonic() - started >= 0.04
    finally:
        loop.close()


def test_set_clock_refuses_what_is_not_a_clock():
    loop = snakeloop.new_event_loop()
    try:
        with pytest.raises(TypeError, match="a clock needs a resolution and a monotonic"):
            loop.set_clock(object())  # type: ignore[arg-type]
    finally:
        loop.close()


def test_repr_says_what_time_it_is():
    clock = VirtualClock(start=3.0)
    assert repr(clock) == "<VirtualClock now=3.0 autojump=True external_time='frozen'>"


def test_without_autojump_a_rate_moves_time():
    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(5)  # 5 virtual s at 100 per real s: 50 ms
        return loop.time()

    wall = time.monotonic()
    assert snakeloop.run(main(), clock=VirtualClock(autojump=False, rate=100.0)) >= 5.0
    assert time.monotonic() - wall >= 0.04


def test_without_autojump_or_rate_time_stalls_with_the_reason():
    async def main():
        await asyncio.sleep(5)

    with pytest.raises(snakeloop.StallError, match="autojump=False and rate=0"):
        snakeloop.run(main(), clock=VirtualClock(autojump=False, stall_timeout=0.1))


def test_a_deadline_between_ticks_is_reached():
    """A timer re-armed until loop.time() >= deadline ends: time moves a tick, never stands."""

    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.001)
        deadline = loop.time() + 0.05  # 0.051000000000000004: just after the 0.051 tick
        while loop.time() < deadline:
            await asyncio.sleep(deadline - loop.time())
        return loop.time(), deadline

    now, deadline = snakeloop.run(main(), clock=VirtualClock())
    assert deadline < now <= deadline + 1e-6
    assert now == 0.051001
