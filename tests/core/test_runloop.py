"""White-box tests of the core loop (src/snakeloop/_core/runloop.py) on a fake clock.

They read the core's own tables, so they run on snakeloop only:

- ``_scheduled``: a min-heap of deadlines;
- ``_timers``: deadline -> TimerHandle, or a list of them in the order they
  were set when several share the deadline;
- ``_timer_cancelled_count``: how many cancelled handles those entries still
  hold, which decides when the heap is rebuilt and whether an iteration looks
  for cancelled timers at all;
- ``_ready``: Handles and plain ``(callback, arg, context)`` entries, run in
  the order they were queued.

Behaviour that both loops share is tested differentially in
tests/test_ordering.py and tests/test_io_ordering.py.
"""

from __future__ import annotations

import asyncio

from _loopkit import FakeClock, loop_ctx, run_once


def cancelled_entries(loop) -> int:
    """How many cancelled handles the timer table still holds."""
    count = 0
    for entry in loop._timers.values():
        for handle in entry if isinstance(entry, list) else (entry,):
            count += handle.cancelled()
    return count


def assert_timer_tables_consistent(loop) -> None:
    """The heap, the deadline table and the counter agree with each other."""
    scheduled = loop._scheduled
    assert sorted(scheduled) == sorted(loop._timers)
    assert len(set(scheduled)) == len(scheduled)
    for i in range(1, len(scheduled)):
        assert scheduled[(i - 1) // 2] <= scheduled[i], "heap order broken"
    for when, entry in loop._timers.items():
        handles = entry if isinstance(entry, list) else [entry]
        if isinstance(entry, list):
            assert len(entry) >= 2, "a list entry holds two or more handles"
        for handle in handles:
            assert handle.when() == when
            assert handle._scheduled
    assert loop._timer_cancelled_count == cancelled_entries(loop)


class HookClock(FakeClock):
    """A fake clock that runs ``hook`` (once) when the loop next reads it."""

    def __init__(self) -> None:
        super().__init__()
        self.hook = None

    def monotonic(self) -> float:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return super().monotonic()


# ------------------------------------------------------- the cancelled counter


def test_cancelled_timer_fired_with_a_live_one_is_uncounted(fake_snakeloop, fake_clock):
    # Step 1 drops cancelled timers only while they are the earliest, so a
    # cancelled timer behind a live one comes due in step 4.
    loop = fake_snakeloop
    seen = []
    loop.call_later(1, seen.append, "live")
    loop.call_later(2, seen.append, "cancelled").cancel()
    assert loop._timer_cancelled_count == 1
    fake_clock.advance(3)
    run_once(loop)
    assert seen == ["live"]
    assert loop._scheduled == []
    assert loop._timers == {}
    assert loop._timer_cancelled_count == 0


def test_timer_cancelled_in_the_iteration_it_comes_due_is_uncounted():
    # The case: a single timer, cancelled after step 1 looked at the
    # heap and before step 4 pops it (here, by the clock read of step 4).
    clock = HookClock()
    seen = []
    with loop_ctx("snakeloop", clock=clock) as loop:
        timer = loop.call_later(1, seen.append, "timer")
        clock.advance(1)
        clock.hook = timer.cancel
        run_once(loop)
        assert clock.hook is None, "the hook did not run"
        assert seen == []
        assert timer.cancelled()
        assert loop._scheduled == []
        assert loop._timer_cancelled_count == 0


def test_no_cancelled_timer_search_once_none_is_left(fake_snakeloop, fake_clock, monkeypatch):
    # A stale count made every later iteration call the head-drop method.
    loop = fake_snakeloop
    loop.call_later(1, lambda: None)
    loop.call_later(2, lambda: None).cancel()
    fake_clock.advance(3)
    run_once(loop)
    calls = []
    drop = loop._drop_cancelled_timers_at_top
    monkeypatch.setattr(loop, "_drop_cancelled_timers_at_top", lambda: calls.append(drop()))
    for _ in range(20):
        run_once(loop)
    assert calls == []


def test_cancelling_a_foreign_timer_handle_is_not_counted(fake_snakeloop):
    # asyncio.TimerHandle.cancel() tells its loop through
    # _timer_handle_cancelled(); a handle the user built himself was never in
    # this loop's heap.
    loop = fake_snakeloop
    handle = asyncio.TimerHandle(loop.time() + 1, lambda: None, (), loop)
    handle.cancel()
    assert handle.cancelled()
    assert loop._timer_cancelled_count == 0
    run_once(loop)
    assert_timer_tables_consistent(loop)
