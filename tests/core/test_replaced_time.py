"""A replaced ``loop.time`` is the loop's clock, as on asyncio (issue 32).

asyncio's loop reads its clock through ``self.time()`` for every deadline: ``call_later``,
the poll timeout, and which timers are due.  So a test that patches ``time`` on the loop
(``mock.patch.object``, a plain assignment) or a subclass that overrides it moves the whole
timeline, and removing it brings the loop's own clock back with every deadline left as the
number it was.  Each scenario runs on the stdlib loop and on snakeloop and must give the
same result; the snakeloop-only ones say what asyncio has no counterpart for.

The replaced clocks here are numbers the test moves by hand, or real time run fast: no test
waits on real time for longer than a few milliseconds.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from unittest import mock

import pytest
from _loopkit import assert_same, loop_ctx, new_loop, snakeloop_module


async def _two_turns() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def _issue_example(loop: asyncio.AbstractEventLoop) -> list[int]:
    """The reproduction of the issue: a timer at +75 s fires once the mock says +75 s."""

    async def main() -> list[int]:
        now = loop.time()
        fired: list[int] = []
        with mock.patch.object(loop, "time") as fake:
            fake.return_value = now
            loop.call_at(loop.time() + 75.0, fired.append, 1)
            fake.return_value = now + 75.0
            await _two_turns()
        return fired

    return loop.run_until_complete(main())


def test_a_patched_time_decides_when_timers_fire():
    assert assert_same(_issue_example)[1] == [1]


def _by_hand(loop: asyncio.AbstractEventLoop) -> list[object]:
    """``loop.time = f`` and ``del loop.time``, with call_later and call_at, while running."""
    seen: list[object] = []

    async def main() -> None:
        real = loop.time()
        offset = [0.0]
        loop.time = lambda: real + offset[0]  # type: ignore[method-assign]
        seen.append(loop.time() == real)
        # call_later reads the replacement; call_at takes the number as given.
        loop.call_later(10.0, seen.append, "later 10")
        loop.call_at(real + 5.0, seen.append, "at +5")
        far = loop.call_at(real + 1000.0, seen.append, "at +1000")
        await _two_turns()
        seen.append("none yet")
        offset[0] = 5.0
        await _two_turns()
        offset[0] = 10.0
        await _two_turns()
        del loop.time
        seen.append(type(loop.time).__name__)
        seen.append(abs(loop.time() - time.monotonic()) < 1.0)
        try:
            del loop.time
        except AttributeError as exc:
            seen.append(str(exc).split("'")[-2])
        # Back on the real clock: the +1000 s timer is still +1000 s away, and a new
        # short timer fires as usual.
        done = loop.create_future()
        loop.call_later(0.001, done.set_result, "real")
        seen.append(await done)
        seen.append(round(far.when() - real, 6))
        far.cancel()

    loop.run_until_complete(main())
    return seen


def test_assigning_and_deleting_time_as_on_asyncio():
    seen = assert_same(_by_hand)[1]
    assert seen == [
        True,
        "none yet",
        "at +5",
        "later 10",
        "method",
        True,
        "time",
        "real",
        1000.0,
    ]


def _subclass_loop(kind: str) -> asyncio.AbstractEventLoop:
    base = type(new_loop_unclosed(kind))

    class Skewed(base):  # type: ignore[valid-type, misc]
        """A loop whose clock runs ahead of the real one by ``skew`` (as looptime's)."""

        skew = 0.0

        def time(self) -> float:
            return super().time() + self.skew

    return Skewed()


def new_loop_unclosed(kind: str) -> asyncio.AbstractEventLoop:
    loop = new_loop(kind)
    loop.close()
    return loop


@pytest.mark.parametrize("kind", ["stdlib", "snakeloop"])
def test_a_subclass_time_is_the_clock(kind):
    loop = _subclass_loop(kind)
    try:

        async def main() -> list[str]:
            fired: list[str] = []
            loop.call_later(30.0, fired.append, "later 30")
            timeout_hit = False
            try:
                async with asyncio.timeout(60.0):
                    await _two_turns()
                    loop.skew += 30.0  # type: ignore[attr-defined]
                    await _two_turns()
                    fired.append("in timeout")
                    loop.skew += 30.0  # type: ignore[attr-defined]
                    await asyncio.sleep(3600)
            except TimeoutError:
                timeout_hit = True
            fired.append(f"timeout {timeout_hit}")
            return fired

        assert loop.run_until_complete(main()) == ["later 30", "in timeout", "timeout True"]
    finally:
        loop.close()


def _timeout_on_a_patched_clock(loop: asyncio.AbstractEventLoop) -> object:
    async def main() -> object:
        now = loop.time()
        with mock.patch.object(loop, "time", return_value=now):
            try:
                async with asyncio.timeout(10.0):
                    loop.call_soon(setattr, loop.time, "return_value", now + 10.0)
                    await asyncio.Event().wait()
            except TimeoutError:
                return "timed out"
        return "not timed out"

    return loop.run_until_complete(main())


def test_asyncio_timeout_follows_a_patched_clock():
    assert assert_same(_timeout_on_a_patched_clock)[1] == "timed out"


def _ahead_clock(loop: asyncio.AbstractEventLoop) -> object:
    """A clock 99.99 s ahead of the loop's, at its rate: the poll waits for what the
    replacement says is left of a timer set for +100 s, about 10 ms, not 100 s."""

    async def main() -> object:
        start_real = time.monotonic()
        base = loop.time()
        due = loop.create_future()
        loop.call_at(base + 100.0, due.set_result, "due")
        loop.time = lambda: base + 99.99 + (time.monotonic() - start_real)  # type: ignore[method-assign]
        try:
            got = await due
        finally:
            del loop.time
        return got, time.monotonic() - start_real < 5.0

    return loop.run_until_complete(main())


def test_the_poll_waits_for_what_the_replacement_says_is_left():
    assert assert_same(_ahead_clock)[1] == ("due", True)


def test_patched_time_is_seen_by_the_compiled_fast_path_too():
    """A plain loop reads its clock in C when compiled: a replacement must end that."""
    sl = snakeloop_module()
    loop = sl.new_event_loop()
    try:
        assert _issue_example(loop) == [1]
        # And with nothing replaced again, timers fire on the real clock.
        fired: list[int] = []
        loop.call_later(0.001, fired.append, 2)
        loop.run_until_complete(asyncio.sleep(0.01))
        assert fired == [2]
        # The loop's own bound method again, as an instance attribute's removal gives.
        assert inspect.ismethod(loop.time) and loop.time.__self__ is loop
    finally:
        loop.close()


def test_a_moved_replacement_is_no_slow_callback(caplog):
    """snakeloop reports long stretches of callbacks outside debug mode; asyncio reports
    nothing.  A replaced clock that jumps 75 s between two reads made no callback slow."""
    sl = snakeloop_module()
    loop = sl.new_event_loop()
    try:
        before = loop.metrics().slow_iterations
        with caplog.at_level(logging.WARNING, logger="snakeloop"):
            assert _issue_example(loop) == [1]
        assert loop.metrics().slow_iterations == before
        assert not [r for r in caplog.records if "without a pause" in r.getMessage()]
    finally:
        loop.close()


def test_virtual_time_waits_in_real_time_for_a_replaced_clock():
    """On a VirtualClock loop, a replaced ``time`` is the clock the timers are due by, as on
    asyncio; virtual time cannot move it, so an idle loop waits in real time for what the
    replacement says is left, as asyncio's would.  Once it is removed, virtual time jumps
    to the next timer again."""
    sl = snakeloop_module()
    clock = sl.VirtualClock()
    with loop_ctx("snakeloop", clock=clock) as loop:

        async def main() -> tuple[bool, float, float]:
            start_real = time.monotonic()
            base = loop.time()
            due = loop.create_future()
            loop.call_at(base + 100.0, due.set_result, None)
            loop.time = lambda: base + 99.99 + (time.monotonic() - start_real)  # type: ignore[method-assign]
            try:
                await due  # about 10 ms of real time
            finally:
                del loop.time
            virtual_moved = clock.monotonic() - base
            await asyncio.sleep(3600.0)  # virtual: no real wait
            return time.monotonic() - start_real < 5.0, virtual_moved, clock.monotonic() - base

        fast, moved, total = loop.run_until_complete(main())
        assert fast
        assert moved < 1.0  # virtual time stood still while the replacement ruled
        assert total >= 3600.0


@pytest.mark.parametrize("kind", ["stdlib", "snakeloop"])
def test_time_looks_like_asyncios_method(kind):
    """``loop.time`` is a bound method of the loop; on the class it calls like one."""
    loop = new_loop(kind)
    try:
        assert inspect.ismethod(loop.time) and loop.time.__self__ is loop
        assert loop.time == loop.time
        assert abs(type(loop).time(loop) - loop.time()) < 1.0
        assert "bound method" in repr(loop.time)
    finally:
        loop.close()
    # After close, as before it: a number from the loop's clock.
    assert abs(loop.time() - time.monotonic()) < 1.0
