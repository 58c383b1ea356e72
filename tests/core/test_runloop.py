"""White-box tests of the core loop (src/snakeloop/_core/runloop.py) on a fake clock.

They read the core's own tables, so they run on snakeloop only:

- ``_scheduled``: the timer heap: interpreted, a min-heap of deadlines
  beside ``_timers`` (deadline -> TimerHandle, or a list of them in firing
  order); compiled, a min-heap of the TimerHandles themselves.  Both are
  read through ``_pending_timers()``, which lists each deadline's timers in
  the order they will fire;
- ``cancel()`` lets go of a timer at once in both builds: it leaves
  ``_pending_timers()``.  Compiled, it leaves the heap, and each timer in the
  heap knows its place (``_heap_index``).  Interpreted, it leaves ``_timers``,
  and its bare deadline stays in the heap (``BARE_DEADLINES``) until it
  surfaces or the heap is rebuilt;
- ``_timer_cancelled_count``: interpreted, how many bare deadlines the heap
  holds, which decides when the heap is rebuilt and whether an iteration looks
  for them at all; compiled, 0;
- ``_ready``: Handles and plain ``(callback, arg, context)`` entries, run in
  the order they were queued.

Behaviour that both loops share is tested differentially in
tests/test_ordering.py and tests/test_io_ordering.py.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref

import pytest
from _loopkit import FakeClock, collect_unless_refcounted, loop_ctx, run_once
from hypothesis import given, settings
from hypothesis import strategies as st

import snakeloop
from snakeloop._core.runloop import plain_queue

# Interpreted, a cancelled timer's deadline stays in the heap until it surfaces
# or the heap is rebuilt; compiled, cancel() takes the timer out of the heap.
BARE_DEADLINES = not snakeloop.COMPILED


def bare_deadlines(loop) -> int:
    """How many deadlines in the heap have no timer behind them."""
    if snakeloop.COMPILED:
        return 0
    return len(loop._scheduled) - len(loop._timers)


def assert_timer_tables_consistent(loop) -> None:
    """The heap, the deadline table and the counter agree with each other."""
    scheduled = loop._scheduled
    pending = loop._pending_timers()
    deadlines = [when for when, _ in pending]
    assert deadlines == sorted(set(deadlines)), "one entry per deadline, in order"
    if snakeloop.COMPILED:
        key = [(timer._deadline, timer._seq) for timer in scheduled]
        assert len(set(key)) == len(key)
        assert sum(len(timers) for _, timers in pending) == len(scheduled)
        assert [timer._heap_index for timer in scheduled] == list(range(len(scheduled)))
    else:
        key = scheduled
        assert sorted(loop._timers) == deadlines
        assert set(scheduled) >= set(deadlines), "each live deadline is in the heap"
        for entry in loop._timers.values():
            if isinstance(entry, list):
                assert len(entry) >= 2, "a list entry holds two or more handles"
    for i in range(1, len(key)):
        assert key[(i - 1) // 2] <= key[i], "heap order broken"
    for when, timers in pending:
        for handle in timers:
            assert handle.when() == when
            assert handle._scheduled
            assert not handle.cancelled(), "cancel() lets go of a timer at once"
    assert loop._timer_cancelled_count == bare_deadlines(loop)


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
    live = loop.call_later(1, seen.append, "live")
    cancelled = loop.call_later(2, seen.append, "cancelled")
    cancelled.cancel()
    assert not cancelled._scheduled
    assert loop._pending_timers() == [(live.when(), [live])]
    assert loop._timer_cancelled_count == bare_deadlines(loop) == (1 if BARE_DEADLINES else 0)
    fake_clock.advance(3)
    run_once(loop)
    assert seen == ["live"]
    assert loop._scheduled == []
    assert loop._pending_timers() == []
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
    drop = loop._drop_cancelled_deadlines_at_top
    monkeypatch.setattr(loop, "_drop_cancelled_deadlines_at_top", lambda: calls.append(drop()))
    for _ in range(20):
        run_once(loop)
    assert calls == []


def test_a_cancelled_timer_is_freed_at_once_while_its_deadline_is_pending(fake_snakeloop):
    # A server re-arming an idle timeout per request: kept until its deadline,
    # each cancelled timer would live on for the collector to find.
    loop = fake_snakeloop
    live = loop.call_later(1, lambda: None)
    timer = loop.call_later(3600, lambda: None)
    ref = weakref.ref(timer)
    timer.cancel()
    del timer
    collect_unless_refcounted()
    assert ref() is None, "the loop still holds a cancelled timer"
    run_once(loop)
    assert loop._pending_timers() == [(live.when(), [live])]
    assert_timer_tables_consistent(loop)


def test_a_deadline_cancelled_and_set_again_fires_its_new_timer_once(fake_snakeloop, fake_clock):
    # Interpreted, the heap then holds the deadline twice: the cancelled
    # timer's, bare, and the new one's.
    loop = fake_snakeloop
    seen = []
    when = loop.time() + 1
    loop.call_at(when, seen.append, "old").cancel()
    loop.call_at(when, seen.append, "new")
    later = loop.call_at(when + 1, seen.append, "later")
    assert_timer_tables_consistent(loop)
    assert loop._pending_timers()[0][1][0].when() == when
    fake_clock.advance(1.5)
    run_once(loop)
    assert seen == ["new"]
    assert loop._pending_timers() == [(later.when(), [later])]
    assert loop._timer_cancelled_count == 0
    assert_timer_tables_consistent(loop)


def test_cancelling_one_of_a_deadlines_timers_keeps_the_others_in_order(fake_snakeloop, fake_clock):
    loop = fake_snakeloop
    seen = []
    when = loop.time() + 1
    handles = [loop.call_at(when, seen.append, i) for i in range(3)]
    handles[1].cancel()
    assert loop._pending_timers() == [(when, [handles[0], handles[2]])]
    handles[0].cancel()
    assert loop._pending_timers() == [(when, [handles[2]])]
    assert loop._timer_cancelled_count == 0, "the deadline still has a timer"
    assert_timer_tables_consistent(loop)
    fake_clock.advance(1)
    run_once(loop)
    assert seen == [2]


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


def test_cancel_is_counted_once_and_only_while_in_the_heap(fake_snakeloop, fake_clock):
    loop = fake_snakeloop
    timer = loop.call_later(1, lambda: None)
    timer.cancel()
    timer.cancel()
    assert loop._timer_cancelled_count == (1 if BARE_DEADLINES else 0)
    assert not timer._scheduled
    assert_timer_tables_consistent(loop)
    fired = loop.call_later(1, lambda: None)
    fake_clock.advance(2)
    run_once(loop)
    assert not fired._scheduled
    fired.cancel()  # after it ran: nothing in the heap to count
    assert loop._timer_cancelled_count == 0
    assert_timer_tables_consistent(loop)


# ------------------------------------------------------------ the timer heap


def test_timers_of_one_deadline_are_kept_in_the_order_they_were_set(fake_snakeloop):
    loop = fake_snakeloop
    now = loop.time()
    handles = [loop.call_at(now + when, lambda: None) for when in (5, 1, 3, 1, 5, 5, 2)]
    assert loop._pending_timers() == [
        (now + 1, [handles[1], handles[3]]),
        (now + 2, [handles[6]]),
        (now + 3, [handles[2]]),
        (now + 5, [handles[0], handles[4], handles[5]]),
    ]
    assert_timer_tables_consistent(loop)


def test_fired_timers_leave_both_tables(fake_snakeloop, fake_clock):
    loop = fake_snakeloop
    seen = []
    early = [loop.call_later(1, seen.append, i) for i in range(3)]
    late = loop.call_later(2, seen.append, "late")
    fake_clock.advance(1.5)
    run_once(loop)
    assert seen == [0, 1, 2]
    assert [h._scheduled for h in early] == [False] * 3
    assert loop._pending_timers() == [(late.when(), [late])]
    assert_timer_tables_consistent(loop)


def test_a_cancelled_timer_on_top_is_dropped_before_the_poll(fake_snakeloop):
    loop = fake_snakeloop
    first = loop.call_later(1, lambda: None)
    second = loop.call_later(2, lambda: None)
    third = loop.call_later(3, lambda: None)
    first.cancel()
    third.cancel()
    run_once(loop)  # nothing is due: step 1 alone changes the tables
    assert not first._scheduled
    assert not third._scheduled
    assert [when for when, _ in loop._pending_timers()] == [second.when()]
    if BARE_DEADLINES:
        assert loop._scheduled == [second.when(), third.when()], (
            "only the earliest bare deadlines are dropped"
        )
        assert loop._timer_cancelled_count == 1
    else:
        assert len(loop._scheduled) == 1
        assert loop._timer_cancelled_count == 0
    assert_timer_tables_consistent(loop)


@pytest.mark.parametrize(
    ("cancel", "left"),
    [((1,), [0, 2]), ((0, 2), [1]), ((0, 1, 2), [])],
    ids=["middle", "all-but-one", "all"],
)
def test_cancelled_timers_sharing_the_top_deadline(fake_snakeloop, fake_clock, cancel, left):
    loop = fake_snakeloop
    when = loop.time() + 1
    seen = []
    handles = [loop.call_at(when, seen.append, i) for i in range(3)]
    later = loop.call_at(when + 1, lambda: None)
    for i in cancel:
        handles[i].cancel()
    run_once(loop)
    pending = dict(loop._pending_timers())
    kept = [handles[i] for i in left]
    assert [timer for timer in pending.get(when, []) if not timer.cancelled()] == kept
    assert pending[later.when()] == [later]
    assert all(handles[i]._scheduled for i in left)
    assert_timer_tables_consistent(loop)
    fake_clock.advance(1)
    run_once(loop)
    assert seen == left
    assert loop._pending_timers() == [(later.when(), [later])]
    assert_timer_tables_consistent(loop)


def test_heap_is_rebuilt_by_the_cancel_that_leaves_most_of_a_large_heap_bare(
    fake_snakeloop, fake_clock
):
    loop = fake_snakeloop
    seen = []
    handles = [loop.call_later(1 + i, seen.append, i) for i in range(150)]
    # Cancel from the end, so step 1's drop from the top cannot find them.
    for k, handle in enumerate(reversed(handles[50:]), 1):
        handle.cancel()
        if not BARE_DEADLINES:
            expected = (150 - k, 0)
        elif k <= 75:
            expected = (150, k)
        else:
            # The 76th is more than half of 150: the heap keeps the 74 live deadlines.
            expected = (74, k - 76)
        assert (len(loop._scheduled), loop._timer_cancelled_count) == expected, k
    assert not any(h._scheduled for h in handles[50:])
    assert_timer_tables_consistent(loop)
    fake_clock.advance(1000)
    run_once(loop)
    assert seen == list(range(50))
    assert loop._scheduled == []
    assert loop._timer_cancelled_count == 0


def test_heap_is_not_rebuilt_for_100_entries_or_fewer(fake_snakeloop):
    loop = fake_snakeloop
    handles = [loop.call_later(1 + i, lambda: None) for i in range(100)]
    for handle in handles[1:]:
        handle.cancel()
    run_once(loop)
    if BARE_DEADLINES:
        # The live timer on top stops step 1: the bare deadlines wait.
        assert len(loop._scheduled) == 100
        assert loop._timer_cancelled_count == 99
    else:
        assert len(loop._scheduled) == 1
        assert loop._timer_cancelled_count == 0
    assert_timer_tables_consistent(loop)


def test_cancelling_anywhere_in_a_heap_keeps_it_a_heap_and_the_rest_fire_in_order(
    fake_snakeloop, fake_clock
):
    # Compiled, the last entry fills the cancelled timer's place and goes up
    # or down from there.  Set in this order, the heap is [1, 10, 2, 11, 12,
    # 3, 4]: taking 11 out moves 4 up past 10, taking 1 out moves 3 down
    # past 2, and 12 is then the last entry itself.
    loop = fake_snakeloop
    seen = []
    deadlines = [1, 10, 2, 11, 12, 3, 4]
    handles = [loop.call_later(d, seen.append, i) for i, d in enumerate(deadlines)]
    cancelled = {3, 0, 4}
    for i in (3, 0, 4):
        handles[i].cancel()
        assert_timer_tables_consistent(loop)
    fake_clock.advance(20)
    run_once(loop)
    live = [i for i in range(len(deadlines)) if i not in cancelled]
    assert seen == sorted(live, key=lambda i: (deadlines[i], i))
    assert loop._scheduled == []


def test_cancel_after_close_and_after_set_clock(fake_snakeloop):
    loop = fake_snakeloop
    moved = loop.call_later(1, lambda: None)
    kept = loop.call_later(2, lambda: None)
    loop.set_clock(snakeloop.VirtualClock(start=100.0))
    assert_timer_tables_consistent(loop)
    moved.cancel()
    assert_timer_tables_consistent(loop)
    assert [timers for _, timers in loop._pending_timers() if not timers[0].cancelled()] == [[kept]]
    loop.close()
    kept.cancel()
    assert kept.cancelled()


# ----------------------------------------------------- handles, made again
# Compiled, a freed Handle's memory is kept for the next one (a Cython
# freelist): nothing of the old handle may show through the new one.


def test_a_handle_made_after_one_is_freed_starts_fresh(fake_snakeloop):
    loop = fake_snakeloop
    loop.set_debug(True)
    first = loop.call_soon(print, "first")
    first.cancel()
    assert first._repr is not None and first._source_traceback
    ref = weakref.ref(first)
    del first
    run_once(loop)
    collect_unless_refcounted()
    assert ref() is None
    loop.set_debug(False)
    seen = []
    handles = [loop.call_soon(seen.append, i) for i in range(300)]
    for handle in handles:
        assert not handle.cancelled()
        assert handle._repr is None and handle._source_traceback is None
        assert isinstance(handle, asyncio.Handle)
        assert not isinstance(handle, asyncio.TimerHandle)
    assert ref() is None
    del handles
    run_once(loop)
    assert seen == list(range(300))


def test_a_handle_subclass_is_made_and_freed_as_its_own_class(fake_snakeloop):
    handle_class = type(fake_snakeloop.call_soon(lambda: None))

    class Tagged(handle_class):
        __slots__ = ()

    loop = fake_snakeloop
    seen = []
    tagged = [Tagged(seen.append, ("tagged",), loop, None) for _ in range(10)]
    del tagged
    plain = [loop.call_soon(seen.append, "plain") for _ in range(10)]
    assert {type(handle) for handle in plain} == {handle_class}
    assert type(Tagged(seen.append, ("tagged",), loop, None)) is Tagged
    del plain
    run_once(loop)
    assert seen == ["plain"] * 10


# -------------------------------------------------------------- batch order


def test_one_iteration_runs_ready_callbacks_then_due_timers_by_deadline_then_fifo(
    fake_snakeloop, fake_clock
):
    loop = fake_snakeloop
    seen = []
    now = loop.time()
    loop.call_at(now + 2, seen.append, "t2")
    loop.call_at(now + 1, seen.append, "t1a")
    loop.call_soon(seen.append, "soon1")
    loop.call_at(now + 1, seen.append, "t1b")
    loop.call_at(now + 3, seen.append, "t3")
    loop.call_soon(seen.append, "soon2")
    fake_clock.advance(2.5)
    run_once(loop)
    assert seen == ["soon1", "soon2", "t1a", "t1b", "t2"]
    assert [when for when, _ in loop._pending_timers()] == [now + 3]


def test_timers_due_within_one_resolution_fire_and_not_at_it():
    clock = FakeClock(resolution=0.5)
    seen = []
    with loop_ctx("snakeloop", clock=clock) as loop:
        now = loop.time()
        loop.call_at(now + 0.49, seen.append, "within")
        loop.call_at(now + 0.5, seen.append, "at")
        run_once(loop)
        assert seen == ["within"]
        assert [when for when, _ in loop._pending_timers()] == [now + 0.5]


def test_what_a_batch_queues_waits_for_the_next_iteration(fake_snakeloop, fake_clock):
    loop = fake_snakeloop
    seen = []

    def timer():
        seen.append("timer")
        loop.call_soon(seen.append, "from-timer")
        assert list(loop._ready)[-1]._callback == seen.append

    loop.call_later(1, timer)
    loop.call_soon(seen.append, "soon")
    fake_clock.advance(1)
    run_once(loop)
    assert seen == ["soon", "timer"]
    run_once(loop)
    assert seen == ["soon", "timer", "from-timer"]


# ------------------------------------------------------------ plain entries


VAR = contextvars.ContextVar("VAR", default="unset")


def test_plain_entries_run_in_fifo_order_with_handles_in_their_context(fake_snakeloop):
    loop = fake_snakeloop
    seen = []
    context = contextvars.copy_context()
    context.run(VAR.set, "plain")

    def record(arg):
        seen.append((arg, VAR.get()))

    loop.call_soon(record, "handle-1")
    assert plain_queue(loop) is loop._ready
    loop._ready.append((record, "plain", context))
    loop.call_soon(record, "handle-2")
    run_once(loop)
    assert seen == [("handle-1", "unset"), ("plain", "plain"), ("handle-2", "unset")]


def test_a_plain_entry_that_raises_is_reported_as_the_handle_it_stands_for(
    fake_snakeloop, loop_errors
):
    loop = fake_snakeloop

    def fail(arg):
        raise ValueError(arg)

    loop.call_soon(fail, "by-handle")
    loop._ready.append((fail, "plain", contextvars.copy_context()))
    run_once(loop)
    assert len(loop_errors) == 2
    by_handle, plain = loop_errors
    assert isinstance(plain["handle"], asyncio.Handle)
    assert plain["handle"]._callback is fail
    assert plain["handle"]._args == ("plain",)
    assert plain["message"] == by_handle["message"].replace("by-handle", "plain")
    assert str(plain["exception"]) == "plain"


def test_keyboard_interrupt_in_a_plain_entry_keeps_the_rest_queued(fake_snakeloop):
    loop = fake_snakeloop
    seen = []
    context = contextvars.copy_context()

    def interrupt(arg):
        raise KeyboardInterrupt

    loop._ready.append((interrupt, None, context))
    loop._ready.append((seen.append, "plain", context))
    loop.call_soon(seen.append, "handle")
    with pytest.raises(KeyboardInterrupt):
        run_once(loop)
    assert seen == []
    run_once(loop)
    assert seen == ["plain", "handle"]


def test_plain_entry_queued_before_debug_mode_runs_as_a_handle(fake_snakeloop):
    loop = fake_snakeloop
    seen = []
    loop._ready.append((seen.append, "plain", contextvars.copy_context()))
    loop.set_debug(True)
    run_once(loop)
    assert seen == ["plain"]


def test_plain_queue_follows_the_rule(fake_snakeloop):
    loop = fake_snakeloop
    assert plain_queue(loop) is loop._ready
    loop.set_debug(True)
    assert plain_queue(loop) is None  # a Handle records where it was made
    loop.set_debug(False)
    with loop_ctx("stdlib") as other:
        assert plain_queue(other) is None  # another loop has no such deque
    closed = snakeloop.new_event_loop()
    closed.close()
    assert plain_queue(closed) is None  # call_soon raises there


class WatchingLoop(snakeloop.Loop):
    """Records every callback scheduled through call_soon."""

    _accepts_plain_callbacks = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.scheduled = []

    def call_soon(self, callback, *args, context=None):
        self.scheduled.append(callback.__name__)
        return super().call_soon(callback, *args, context=context)


class PlainWatchingLoop(WatchingLoop):
    _accepts_plain_callbacks = True


@pytest.mark.parametrize(
    ("loop_class", "expected"),
    [
        (PlainWatchingLoop, ["set_result"]),
        (
            WatchingLoop,
            ["_step", "set_result", "_step", "_step", "_wakeup", "_run_until_complete_cb"],
        ),
    ],
    ids=["plain", "refusing"],
)
def test_a_loop_that_refuses_plain_entries_sees_every_callback_through_call_soon(
    loop_class, expected
):
    # Plain entries are what snakeloop's own futures and tasks queue.
    loop = loop_class(stdlib_futures=False)
    try:
        assert (plain_queue(loop) is not None) == loop._accepts_plain_callbacks

        async def child():
            await asyncio.sleep(0)
            return 1

        async def main():
            fut = loop.create_future()
            loop.call_soon(fut.set_result, 2)
            return await loop.create_task(child()) + await fut

        assert loop.run_until_complete(main()) == 3
        # The steps of both tasks, the wake-up of the main one when the
        # child is done, and run_until_complete's done callback.
        assert loop.scheduled == expected
    finally:
        loop.close()


class _TaskHooks(snakeloop.Instrument):
    def before_task_step(self, task):
        pass


def test_plain_queue_follows_debug_mode_the_ready_queue_and_close(monkeypatch):
    def done_callback_entry(loop):
        fut = loop.create_future()
        fut.add_done_callback(lambda f: None)
        fut.set_result(None)
        return loop._ready.pop()

    monkeypatch.delenv("PYTHONASYNCIODEBUG", raising=False)
    loop = snakeloop.Loop(stdlib_futures=False)
    try:
        assert plain_queue(loop) is loop._ready
        assert type(done_callback_entry(loop)) is tuple
        loop.set_debug(True)
        assert plain_queue(loop) is None
        # In debug mode a done callback is a Handle that says where it was made.
        entry = done_callback_entry(loop)
        assert isinstance(entry, asyncio.Handle) and entry._source_traceback
        loop.set_debug(False)
        assert plain_queue(loop) is loop._ready

        # Task hooks swap the ready queue for a deque subclass that reports
        # task steps in its append, which a plain entry (appended with
        # deque's own) would skip: entries go through call_soon meanwhile.
        hooks = _TaskHooks()
        plain_deque = loop._ready
        loop.add_instrument(hooks)
        assert loop._ready is not plain_deque
        assert plain_queue(loop) is None
        assert isinstance(done_callback_entry(loop), asyncio.Handle)
        loop.remove_instrument(hooks)
        assert plain_queue(loop) is loop._ready
        assert type(done_callback_entry(loop)) is tuple
    finally:
        loop.close()
    assert plain_queue(loop) is None
    fut = loop.create_future()
    fut.add_done_callback(lambda f: None)
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        fut.set_result(None)

    monkeypatch.setenv("PYTHONASYNCIODEBUG", "1")
    loop = snakeloop.Loop()
    try:
        assert loop.get_debug() and plain_queue(loop) is None
    finally:
        loop.close()


# -------------------------------------------------- the property, on random runs

# Deadlines sit on a 0.25 s grid and the clock stops half-way between grid
# points, so whether a timer is due is never a matter of rounding.
GRID = 0.25

TIMER = st.tuples(
    st.sampled_from(["at", "later"]),
    st.integers(min_value=-4, max_value=12),
    st.none() | st.integers(min_value=-3, max_value=3),
)
SCHEDULE_OPS = st.lists(
    st.one_of(
        # A timer at a grid point (relative to now), by call_at or call_later,
        # that cancels another one when it fires: ``victim`` counts from
        # its own number (modulo the number of timers so far).
        TIMER,
        TIMER,
        st.tuples(st.just("cancel"), st.integers(min_value=0, max_value=300)),
        st.tuples(st.just("advance"), st.integers(min_value=0, max_value=8)),
        st.tuples(st.just("run")),
        # Many timers at distinct deadlines, most of them cancelled: the
        # heap gets large enough to be rebuilt.
        st.tuples(
            st.just("crowd"),
            st.integers(min_value=20, max_value=160),
            st.integers(min_value=0, max_value=3),
        ),
    ),
    min_size=4,
    max_size=50,
)


class Model:
    """What the heap must do: fire due timers by deadline, then in the order set."""

    def __init__(self) -> None:
        self.timers: list[dict] = []  # seq, when, handle, victim, state
        self.fired: list[int] = []

    def add(self, handle, victim) -> None:
        self.timers.append(
            {"seq": len(self.timers), "when": handle.when(), "handle": handle, "victim": victim}
        )

    def cancel(self, index: int) -> None:
        timer = self.timers[index % len(self.timers)]
        timer["handle"].cancel()

    def run(self, now: float, resolution: float) -> None:
        due = [
            t
            for t in self.timers
            if t["when"] < now + resolution
            and not t["handle"].cancelled()
            and t["seq"] not in self.fired
        ]
        due.sort(key=lambda t: (t["when"], t["seq"]))
        for timer in due:
            # A timer cancelled by one that fired before it in this batch
            # does not run.
            if timer.get("cancelled_in_batch"):
                continue
            self.fired.append(timer["seq"])
            victim = timer["victim"]
            if victim is not None:
                target = self.timers[(timer["seq"] + victim) % len(self.timers)]
                if target["seq"] not in self.fired:
                    target["cancelled_in_batch"] = True


@settings(derandomize=True, database=None, deadline=None, max_examples=300)
@given(ops=SCHEDULE_OPS)
def test_random_schedules_keep_the_count_and_fire_in_deadline_then_fifo_order(ops):
    clock = FakeClock(start=1000 + GRID / 2)
    model = Model()
    fired: list[int] = []

    def fire(seq: int, victim: int | None) -> None:
        fired.append(seq)
        if victim is not None:
            model.timers[(seq + victim) % len(model.timers)]["handle"].cancel()

    with loop_ctx("snakeloop", clock=clock) as loop:
        for op in ops:
            grid_now = loop.time() - GRID / 2
            if op[0] in ("at", "later"):
                _, steps, victim = op
                seq = len(model.timers)
                when = grid_now + steps * GRID
                if op[0] == "at":
                    handle = loop.call_at(when, fire, seq, victim)
                else:
                    handle = loop.call_later(when - loop.time(), fire, seq, victim)
                model.add(handle, victim)
            elif op[0] == "cancel":
                if model.timers:
                    model.cancel(op[1])
            elif op[0] == "advance":
                clock.advance(op[1] * GRID)
            elif op[0] == "crowd":
                _, count, kept_every = op
                for i in range(count):
                    seq = len(model.timers)
                    handle = loop.call_at(grid_now + (1 + i) * GRID, fire, seq, None)
                    model.add(handle, None)
                    if not kept_every or i % (kept_every + 1):
                        handle.cancel()
            else:
                model.run(loop.time(), clock.resolution)
                run_once(loop)
                assert fired == model.fired
            assert_timer_tables_consistent(loop)
        # Everything left fires, in order, and the tables end empty.
        clock.advance(100)
        model.run(loop.time(), clock.resolution)
        run_once(loop)
        assert fired == model.fired
        assert loop._scheduled == []
        assert loop._timer_cancelled_count == 0
