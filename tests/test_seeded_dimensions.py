"""Seeded scheduling, the opt-in dimensions: timer_delay, chunking_writes.

Each dimension is checked the same way: its choices are recorded, a seed
replays them (same fingerprint), some seed changes what the program sees,
and the rule asyncio keeps is kept under every seed (a timer never runs
before its deadline nor out of order; a stream's bytes arrive whole and in
order, and ``drain()`` waits for a slow reader; datagrams stay whole).
"""

from __future__ import annotations

import asyncio

import pytest

import snakeloop
from snakeloop.perturbation import IMPLEMENTED
from snakeloop.seeding import parse_perturb

pytestmark = pytest.mark.timeout(120)

SEEDS = range(200)


def run_seeded(main, seed, perturb, **options):
    if seed is None:
        loop = snakeloop.new_event_loop(**options)
    else:
        loop = snakeloop.new_event_loop(seed=seed, perturb=perturb, **options)
    try:
        return loop.run_until_complete(main()), loop.schedule_fingerprint(), loop.schedule_trace()
    finally:
        loop.close()


def test_the_opt_in_dimensions_are_available_and_off_by_default():
    for name in ("timer_delay",):
        assert name in IMPLEMENTED
        assert name in parse_perturb("all", available=IMPLEMENTED)
        assert name not in parse_perturb("default", available=IMPLEMENTED)


# -- timer_delay -------------------------------------------------------------------------


class Timers:
    """Timers set by a busy task, each remembering when it was set and when it ran."""

    def __init__(self, loop):
        self.loop = loop
        self.tick = 0
        self.events = 0  # one count for every set and every run, to order them
        self.timers = []

    def set(self, when):
        timer = {"when": when, "seq": len(self.timers), "set": self.events, "tick": self.tick}
        self.events += 1
        self.timers.append(timer)
        self.loop.call_at(when, self.run, timer)

    def run(self, timer):
        timer["ran"] = self.events
        timer["ran_tick"] = self.tick
        # The loop runs timers due within its clock's resolution, as asyncio does.
        timer["ran_at"] = self.loop.time() + self.loop.get_clock().resolution
        self.events += 1


def timers_around_a_busy_task(scale):
    async def main():
        loop = asyncio.get_running_loop()
        timers = Timers(loop)
        for step in range(60):
            timers.tick = step
            now = loop.time()
            if step % 3 == 0:
                timers.set(now)  # due at once
                timers.set(now)  # a tie with it
                timers.set(now - scale)  # overdue
                timers.set(now + scale * (1 + step / 100))  # runs after the busy part
            await asyncio.sleep(0)
        await asyncio.sleep(scale * 3)
        return timers.timers

    return main


def check_timers(timers):
    """asyncio's promise: never before the deadline, and in deadline order (FIFO in a tie)."""
    for timer in timers:
        assert "ran" in timer, timer  # none starved
        assert timer["ran_at"] >= timer["when"], timer
    for a in timers:
        for b in timers:
            # b was waiting when a ran and is due first: b ran first.
            if b["set"] < a["ran"] and (b["when"], b["seq"]) < (a["when"], a["seq"]):
                assert b["ran"] < a["ran"], (a, b)


def waits(timers, now_due):
    """For each timer that was due when set: the busy task's steps it waited (1 unperturbed)."""
    return [t["ran_tick"] - t["tick"] for t in timers if t["when"] <= now_due(t)]


def test_timer_delay_keeps_deadlines_and_order_and_waits_one_iteration_at_most():
    main = timers_around_a_busy_task(scale=1.0)
    plain, _, _ = run_seeded(main, None, None, clock=snakeloop.VirtualClock())
    check_timers(plain)
    due = [t for t in plain if t["seq"] % 4 != 3]
    assert {t["ran_tick"] - t["tick"] for t in due} == {1}
    delayed = 0
    for seed in SEEDS:
        timers, _, trace = run_seeded(main, seed, "timer_delay", clock=snakeloop.VirtualClock())
        check_timers(timers)
        steps = [t["ran_tick"] - t["tick"] for t in timers if t["seq"] % 4 != 3]
        assert set(steps) <= {1, 2}, (seed, steps)  # one iteration late at most
        held = [d for d in trace if d.kind == "timer_delay"]
        assert (2 in steps) == bool(held), (seed, held)
        delayed += bool(held)
    assert 20 < delayed < 200, delayed  # p=0.1 for each of 20 chances


def check_timer_decisions(trace):
    for decision in trace:
        assert decision.kind == "timer_delay"
        # "due timers wait behind N ready": only while callbacks are ready.
        words = decision.detail.split()
        assert words[:4] == ["due", "timers", "wait", "behind"], decision
        assert int(words[4]) > 0, decision


def test_timer_delay_with_the_real_clock():
    main = timers_around_a_busy_task(scale=0.002)
    for seed in range(40):
        timers, _, trace = run_seeded(main, seed, "timer_delay")
        check_timers(timers)
        check_timer_decisions(trace)


def test_timer_delay_is_recorded_and_replays():
    main = timers_around_a_busy_task(scale=1.0)
    runs = {}
    for seed in range(5):
        timers, fingerprint, trace = run_seeded(
            main, seed, "timer_delay", clock=snakeloop.VirtualClock()
        )
        runs[seed] = ([t["ran_tick"] for t in timers], fingerprint)
        check_timer_decisions(trace)
    for seed, recorded in runs.items():
        timers, fingerprint, _ = run_seeded(
            main, seed, "timer_delay", clock=snakeloop.VirtualClock()
        )
        assert ([t["ran_tick"] for t in timers], fingerprint) == recorded
    assert len({fingerprint for _, fingerprint in runs.values()}) == len(runs)
