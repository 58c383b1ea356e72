"""Callback and timer ordering, on both loops, driven by a fake clock."""

from __future__ import annotations

import contextvars
import gc
import random
import socket
import time
import weakref

import pytest
from _loopkit import LOOP_KINDS, NO_REFCOUNTING, REFCOUNTED, FakeClock, loop_ctx, run_once
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import snakeloop

HYPO = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


class Token:
    """An argument we can hold a weak reference to."""


# ---------------------------------------------------------------- call_soon


def test_call_soon_is_fifo(fake_loop):
    seen = []
    for i in range(200):
        fake_loop.call_soon(seen.append, i)
    run_once(fake_loop)
    assert seen == list(range(200))


def test_call_soon_passes_args(fake_loop):
    seen = []
    fake_loop.call_soon(lambda *a: seen.append(a), 1, "two", None)
    run_once(fake_loop)
    assert seen == [(1, "two", None)]


def test_callbacks_added_during_iteration_wait_for_next(fake_loop):
    seen = []

    def first():
        seen.append("first")
        fake_loop.call_soon(seen.append, "added-by-first")

    fake_loop.call_soon(first)
    fake_loop.call_soon(seen.append, "second")
    run_once(fake_loop)
    assert seen == ["first", "second"]
    run_once(fake_loop)
    assert seen == ["first", "second", "added-by-first"]


def test_self_rescheduling_callback_runs_once_per_iteration(fake_loop):
    count = []
    keep_going = [True]

    def again():
        count.append(1)
        if keep_going[0]:
            fake_loop.call_soon(again)

    fake_loop.call_soon(again)
    for n in range(1, 6):
        run_once(fake_loop)
        assert len(count) == n
    keep_going[0] = False
    run_once(fake_loop)
    run_once(fake_loop)
    assert len(count) == 6


def test_call_soon_context_is_used(fake_loop):
    var = contextvars.ContextVar("var", default="outer")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "inner")
    seen = []
    fake_loop.call_soon(lambda: seen.append(var.get()), context=ctx)
    fake_loop.call_soon(lambda: seen.append(var.get()))
    run_once(fake_loop)
    assert seen == ["inner", "outer"]


def test_a_context_already_entered_is_reported_as_context_run_reports_it(fake_loop, asyncio_errors):
    # The loop runs inside ctx, so the callback's ctx.run cannot enter it.  The
    # default handler logs it: from 3.12 a custom handler would itself be run
    # in the handle's context, and fail the same way.
    fake_loop.set_exception_handler(None)
    ctx = contextvars.copy_context()
    ran = []
    fake_loop.call_soon(ran.append, 1, context=ctx)
    ctx.run(run_once, fake_loop)
    assert ran == []
    [record] = asyncio_errors
    assert record.getMessage().startswith("Exception in callback ")
    error = record.exc_info[1]
    assert type(error) is RuntimeError
    assert str(error) == f"cannot enter context: {ctx} is already entered"


class RunsInPlace:
    """Not a contextvars.Context: asyncio's Handle only calls its run()."""

    def __init__(self):
        self.calls = []

    def run(self, callback, *args):
        self.calls.append(args)
        return callback(*args)


def test_a_context_that_is_not_a_context_has_its_run_called(fake_loop):
    duck = RunsInPlace()
    seen = []
    fake_loop.call_soon(seen.append, "a", context=duck)
    fake_loop.call_soon(seen.clear, context=duck)
    fake_loop.call_soon(seen.append, "b", context=duck)
    run_once(fake_loop)
    assert seen == ["b"]
    assert duck.calls == [("a",), (), ("b",)]


@pytest.mark.parametrize("readable", [1, 2], ids=["one-fd", "two-fds"])
def test_readers_run_in_the_context_current_when_they_were_added(fake_loop, readable):
    # One readable fd takes the run loop's lone-reader path, two its batch.
    var = contextvars.ContextVar("var", default="unset")
    pairs = [socket.socketpair() for _ in range(readable)]
    seen = []
    done = fake_loop.create_future()

    def on_readable(sock):
        sock.recv(1)
        seen.append(var.get())
        var.set("changed by the callback")
        if len(seen) == readable:
            done.set_result(None)

    try:
        for index, (ours, _) in enumerate(pairs):
            var.set(f"when added {index}")
            fake_loop.add_reader(ours, on_readable, ours)
        var.set("after")
        for _, theirs in pairs:
            theirs.send(b"x")
        fake_loop.run_until_complete(done)
        assert sorted(seen) == [f"when added {index}" for index in range(readable)]
        assert var.get() == "after"
    finally:
        for ours, theirs in pairs:
            fake_loop.remove_reader(ours)
            ours.close()
            theirs.close()


# ------------------------------------------------------------------- timers


def test_timers_fire_by_deadline(fake_loop, fake_clock):
    seen = []
    for delay in (5, 1, 3, 2, 4):
        fake_loop.call_later(delay, seen.append, delay)
    fake_clock.advance(10)
    run_once(fake_loop)
    assert seen == [1, 2, 3, 4, 5]


def test_timer_not_fired_before_deadline(fake_loop, fake_clock):
    seen = []
    fake_loop.call_later(2.0, seen.append, "due")
    fake_clock.advance(1.0)
    run_once(fake_loop)
    assert seen == []
    fake_clock.advance(0.5)
    run_once(fake_loop)
    assert seen == []
    fake_clock.advance(0.5)
    run_once(fake_loop)
    assert seen == ["due"]


def test_timers_fire_progressively(fake_loop, fake_clock):
    seen = []
    for delay in (3, 1, 2):
        fake_loop.call_later(delay, seen.append, delay)
    expected = []
    for delay in (1, 2, 3):
        fake_clock.advance(1)
        run_once(fake_loop)
        expected.append(delay)
        assert seen == expected


# The stdlib heap is not stable: timers with equal deadlines fire in an
# unspecified order there.  An unseeded snakeloop loop promises insertion order,
# so the exact (deadline, insertion) order is checked on it; a seeded one
# shuffles equal deadlines (perturbation "timer_ties"), which asyncio allows, so
# there and on stdlib only the deadline order is checked.


def keeps_ties_in_insertion_order(loop) -> bool:
    return isinstance(loop, snakeloop.Loop) and "timer_ties" not in loop.perturbation


def assert_timer_order(loop, fired, whens, cancelled=()):
    """fired: seqs in firing order; whens: deadline per seq."""
    live = [seq for seq in range(len(whens)) if seq not in cancelled]
    if keeps_ties_in_insertion_order(loop):
        assert fired == sorted(live, key=lambda seq: (whens[seq], seq))
    else:
        assert sorted(fired) == live
        fired_whens = [whens[seq] for seq in fired]
        assert fired_whens == sorted(fired_whens)


@pytest.mark.unseeded("equal deadlines fire in insertion order only on an unseeded loop")
def test_equal_deadlines_fire_in_insertion_order(fake_snakeloop, fake_clock):
    seen = []
    when = fake_snakeloop.time() + 1.0
    for i in range(100):
        fake_snakeloop.call_at(when, seen.append, i)
    fake_clock.advance(1.0)
    run_once(fake_snakeloop)
    assert seen == list(range(100))


def test_equal_deadlines_all_fire_in_one_iteration(fake_loop, fake_clock):
    seen = []
    when = fake_loop.time() + 1.0
    for i in range(100):
        fake_loop.call_at(when, seen.append, i)
    fake_clock.advance(1.0)
    run_once(fake_loop)
    assert sorted(seen) == list(range(100))


@pytest.mark.unseeded("equal deadlines fire in insertion order only on an unseeded loop")
def test_call_later_and_call_at_with_same_deadline_keep_insertion_order(fake_snakeloop, fake_clock):
    seen = []
    now = fake_snakeloop.time()
    fake_snakeloop.call_later(2.0, seen.append, "later-1")
    fake_snakeloop.call_at(now + 2.0, seen.append, "at-2")
    fake_snakeloop.call_later(2.0, seen.append, "later-3")
    fake_clock.advance(2.0)
    run_once(fake_snakeloop)
    assert seen == ["later-1", "at-2", "later-3"]


def test_many_timers_fire_sorted(fake_loop, fake_clock):
    rng = random.Random(1234)
    seen = []
    whens = []
    now = fake_loop.time()
    for seq in range(2000):
        when = now + rng.choice([0.0, 0.5, 1.0]) + rng.randrange(50) / 10
        fake_loop.call_at(when, seen.append, seq)
        whens.append(when)
    fake_clock.advance(100)
    run_once(fake_loop)
    assert_timer_order(fake_loop, seen, whens)


def test_cancel_in_the_middle(fake_loop, fake_clock):
    seen = []
    handles = [fake_loop.call_later(1.0 + (i % 3), seen.append, i) for i in range(10)]
    for i in (0, 4, 5, 9):
        handles[i].cancel()
    fake_clock.advance(5.0)
    run_once(fake_loop)
    assert_timer_order(fake_loop, seen, [h.when() for h in handles], cancelled={0, 4, 5, 9})


def test_timer_cancelled_by_earlier_timer_in_same_iteration(fake_loop, fake_clock):
    seen = []
    handles = {}

    def a():
        seen.append("a")
        handles["b"].cancel()

    fake_loop.call_later(1.0, a)
    handles["b"] = fake_loop.call_later(1.5, seen.append, "b")
    fake_loop.call_later(2.0, seen.append, "c")
    fake_clock.advance(2.0)
    run_once(fake_loop)
    assert seen == ["a", "c"]
    assert handles["b"].cancelled()


def test_soon_callback_cancelled_by_earlier_callback(fake_loop):
    seen = []
    handles = {}

    def a():
        seen.append("a")
        handles["b"].cancel()

    fake_loop.call_soon(a)
    handles["b"] = fake_loop.call_soon(seen.append, "b")
    fake_loop.call_soon(seen.append, "c")
    run_once(fake_loop)
    assert seen == ["a", "c"]


def test_ready_callbacks_run_before_newly_due_timers(fake_loop, fake_clock):
    seen = []
    fake_loop.call_later(1.0, seen.append, "timer")
    fake_clock.advance(1.0)
    fake_loop.call_soon(seen.append, "soon")
    run_once(fake_loop)
    assert seen == ["soon", "timer"]


def test_call_soon_from_timer_waits_for_next_iteration(fake_loop, fake_clock):
    seen = []

    def timer():
        seen.append("timer")
        fake_loop.call_soon(seen.append, "soon-from-timer")
        fake_loop.call_later(0, seen.append, "later0-from-timer")

    fake_loop.call_later(1.0, timer)
    fake_clock.advance(1.0)
    run_once(fake_loop)
    assert seen == ["timer"]
    run_once(fake_loop)
    assert seen == ["timer", "soon-from-timer", "later0-from-timer"]


@pytest.mark.parametrize("delta", [-100.0, -1.0, -1e-9, 0.0])
def test_call_at_in_the_past_fires_next_iteration(fake_loop, delta):
    seen = []
    fake_loop.call_at(fake_loop.time() + delta, seen.append, "past")
    run_once(fake_loop)
    assert seen == ["past"]


@pytest.mark.parametrize("delay", [-5.0, 0, 0.0])
def test_call_later_non_positive_fires_next_iteration(fake_loop, delay):
    seen = []
    fake_loop.call_later(delay, seen.append, delay)
    run_once(fake_loop)
    assert seen == [delay]


def test_past_timers_keep_deadline_order(fake_loop):
    seen = []
    now = fake_loop.time()
    fake_loop.call_at(now - 1, seen.append, "minus1")
    fake_loop.call_at(now - 3, seen.append, "minus3")
    fake_loop.call_at(now - 2, seen.append, "minus2")
    run_once(fake_loop)
    assert seen == ["minus3", "minus2", "minus1"]


def test_timer_handle_when_is_stable(fake_loop, fake_clock):
    when = fake_loop.time() + 1.25
    handle = fake_loop.call_at(when, lambda: None)
    later = fake_loop.call_later(3.5, lambda: None)
    later_when = later.when()
    assert handle.when() == when
    assert later_when == fake_loop.time() + 3.5
    fake_clock.advance(2)
    run_once(fake_loop)
    assert handle.when() == when
    assert later.when() == later_when
    later.cancel()
    assert later.when() == later_when
    assert later.cancelled()


def test_loop_time_follows_clock(fake_loop, fake_clock):
    assert fake_loop.time() == fake_clock.now
    fake_clock.advance(42.5)
    assert fake_loop.time() == fake_clock.now


def test_timer_handles_compare_by_deadline(fake_loop):
    now = fake_loop.time()
    a = fake_loop.call_at(now + 1, lambda: None)
    b = fake_loop.call_at(now + 2, lambda: None)
    assert a < b
    assert b > a
    assert a <= b
    assert a != b
    assert a != b
    a.cancel()
    b.cancel()


@pytest.mark.skipif(not REFCOUNTED, reason=NO_REFCOUNTING)
@pytest.mark.parametrize("how", ["call_soon", "call_later", "call_at"])
def test_cancel_drops_callback_and_args_at_once(fake_loop, how):
    arg = Token()
    arg_ref = weakref.ref(arg)

    class Owner:
        def method(self, value):
            raise AssertionError("cancelled callback ran")

    owner = Owner()
    owner_ref = weakref.ref(owner)
    if how == "call_soon":
        handle = fake_loop.call_soon(owner.method, arg)
    elif how == "call_later":
        handle = fake_loop.call_later(1.0, owner.method, arg)
    else:
        handle = fake_loop.call_at(fake_loop.time() + 1.0, owner.method, arg)
    del arg, owner
    gc.collect()
    assert arg_ref() is not None, "the handle must keep its args alive until cancelled"
    assert owner_ref() is not None
    handle.cancel()
    # no gc.collect(): the references must be dropped by cancel() itself
    assert arg_ref() is None
    assert owner_ref() is None
    assert handle.cancelled()
    run_once(fake_loop)


@pytest.mark.skipif(not REFCOUNTED, reason=NO_REFCOUNTING)
@pytest.mark.parametrize("last", ["handle", "future callback"])
def test_a_run_callback_holds_nothing_while_the_loop_waits(any_loop_vt, last):
    # What the last callback of an iteration was given (a Handle's args, or the
    # future a done callback gets) is freed before the loop blocks in its poll:
    # asyncio's iteration drops its handle as it ends.  Here only that freeing
    # wakes the loop: the weak references' callbacks write the byte it waits for
    # once both are dead (the first dies as the second callback is dequeued).
    loop = any_loop_vt
    a, b = socket.socketpair()
    seen = []
    refs = []

    def freed(ref):
        if not any(ref() for ref in refs):
            b.send(b"x")

    def consume(arg):
        seen.append("ran")

    def schedule_handle():
        token = Token()
        refs.append(weakref.ref(token, freed))
        loop.call_soon(consume, token)

    def schedule_future_callback():
        fut = loop.create_future()
        refs.append(weakref.ref(fut, freed))
        fut.add_done_callback(consume)
        fut.set_result(None)

    def on_readable():
        loop.remove_reader(a.fileno())
        seen.append("woken")
        loop.stop()

    def guard():
        seen.append("still held after 5 s")
        loop.stop()

    loop.add_reader(a.fileno(), on_readable)
    order = [schedule_handle, schedule_future_callback]
    if last == "handle":
        order.reverse()
    for schedule in order:
        schedule()
    timer = loop.call_later(5.0, guard)
    try:
        loop.run_forever()
    finally:
        timer.cancel()
        a.close()
        b.close()
    assert seen == ["ran", "ran", "woken"]


def test_cancel_is_idempotent(fake_loop):
    seen = []
    handle = fake_loop.call_soon(seen.append, 1)
    handle.cancel()
    handle.cancel()
    assert handle.cancelled()
    run_once(fake_loop)
    assert seen == []


def test_cancel_after_run_is_harmless(fake_loop, fake_clock):
    seen = []
    handle = fake_loop.call_later(1, seen.append, 1)
    fake_clock.advance(1)
    run_once(fake_loop)
    assert seen == [1]
    handle.cancel()
    assert handle.cancelled()
    run_once(fake_loop)
    assert seen == [1]


def test_cancelled_timers_are_not_kept_forever(fake_loop, fake_clock):
    # Schedule and cancel far-future timers many times; the loop still runs
    # quickly and nothing fires.
    seen = []
    for i in range(5000):
        fake_loop.call_later(1e6, seen.append, i).cancel()
    fake_loop.call_later(1, seen.append, "live")
    fake_clock.advance(1)
    run_once(fake_loop)
    assert seen == ["live"]
    fake_clock.advance(2e6)
    run_once(fake_loop)
    assert seen == ["live"]


# ------------------------------------------------------------ hypothesis

OFFSETS = st.one_of(
    st.sampled_from([0.0, -0.0, -1.0, -1e-9, 1e-12, 1e-9, 0.5, 1.0, 1.0, 2.5, 7.0]),
    st.floats(min_value=-5.0, max_value=10.0, allow_nan=False, allow_infinity=False),
)

TIMER_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("at"), OFFSETS),
        st.tuples(st.just("later"), OFFSETS),
        st.tuples(st.just("cancel"), st.integers(min_value=0, max_value=200)),
    ),
    max_size=60,
)


@pytest.mark.parametrize("kind", LOOP_KINDS)
@HYPO
@given(ops=TIMER_OPS)
def test_timer_heap_order_hypothesis(kind, ops):
    clock = FakeClock()
    with loop_ctx(kind, clock=clock) as loop:
        fired = []
        handles = []
        cancelled = set()
        now = loop.time()
        for op, arg in ops:
            if op == "at":
                handles.append(loop.call_at(now + arg, fired.append, len(handles)))
            elif op == "later":
                handles.append(loop.call_later(arg, fired.append, len(handles)))
            elif handles:
                idx = arg % len(handles)
                handles[idx].cancel()
                cancelled.add(idx)
        whens = [h.when() for h in handles]
        for i, (_op, arg) in enumerate(o for o in ops if o[0] != "cancel"):
            assert whens[i] == now + arg
        clock.advance(100.0)
        run_once(loop)
        assert_timer_order(loop, fired, whens, cancelled)
        assert [h.when() for h in handles] == whens


GRID_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("at"), st.integers(min_value=-8, max_value=40)),
        st.tuples(st.just("later"), st.integers(min_value=-8, max_value=40)),
        st.tuples(st.just("cancel"), st.integers(min_value=0, max_value=200)),
        st.tuples(st.just("advance"), st.integers(min_value=0, max_value=12)),
    ),
    max_size=80,
)


@pytest.mark.parametrize("kind", LOOP_KINDS)
@HYPO
@given(ops=GRID_OPS)
def test_timer_order_with_interleaved_advances_hypothesis(kind, ops):
    # Deadlines sit on a 0.25 s grid; the clock stops half-way between grid
    # points, so there is never a doubt whether a timer is due.
    clock = FakeClock(start=1000.125)
    with loop_ctx(kind, clock=clock) as loop:
        fired = []
        handles = []
        pending = {}  # seq -> when
        whens = []
        model_fired = []
        for op, arg in ops:
            base = loop.time() - 0.125
            if op in ("at", "later"):
                seq = len(handles)
                if op == "at":
                    h = loop.call_at(base + arg * 0.25, fired.append, seq)
                else:
                    h = loop.call_later(arg * 0.25 - 0.125, fired.append, seq)
                handles.append(h)
                whens.append(h.when())
                pending[seq] = h.when()
            elif op == "cancel":
                if handles:
                    seq = arg % len(handles)
                    handles[seq].cancel()
                    pending.pop(seq, None)
            else:
                clock.advance(arg * 0.25)
                run_once(loop)
                now = loop.time()
                due = sorted((w, s) for s, w in pending.items() if w <= now)
                for _, s in due:
                    del pending[s]
                model_fired.append([s for _, s in due])
                check_batch(loop, fired[len(flatten(model_fired[:-1])) :], model_fired[-1], whens)
                assert len(fired) == len(flatten(model_fired))
        clock.advance(1000.0)
        run_once(loop)
        model_fired.append([s for _, s in sorted((w, s) for s, w in pending.items())])
        check_batch(loop, fired[len(flatten(model_fired[:-1])) :], model_fired[-1], whens)
        assert len(fired) == len(flatten(model_fired))


def flatten(batches):
    return [s for batch in batches for s in batch]


def check_batch(loop, got, expected, whens):
    """One iteration's firings: exact where ties keep insertion order, else deadline-sorted."""
    if keeps_ties_in_insertion_order(loop):
        assert got == expected
    else:
        assert sorted(got) == sorted(expected)
        assert [whens[s] for s in got] == sorted(whens[s] for s in got)


# ------------------------------------------------------------- real clock


@pytest.mark.slow
@pytest.mark.parametrize("kind", LOOP_KINDS)
@pytest.mark.parametrize("delay", [0.001, 0.0155, 0.05])
def test_real_clock_timer_never_fires_early(kind, delay):
    """With the real clock a timer fires at or after its deadline, not long after.

    Guards the poll-timeout rounding: a timeout rounded down makes the loop
    wake early, and the timer must then not fire before its time.  Also by
    time.monotonic itself: compiled, the run loop reads the clock in C, and
    that read must be the clock loop.time() reads.
    """
    with loop_ctx(kind) as loop:
        fired = []
        start = loop.time()
        started = time.monotonic()
        loop.call_later(delay, lambda: (fired.append((loop.time(), time.monotonic())), loop.stop()))
        watchdog = loop.call_later(10, loop.stop)
        loop.run_forever()
        watchdog.cancel()
        assert fired, "timer did not fire"
        elapsed = fired[0][0] - start
        assert elapsed >= delay - 1e-6
        assert elapsed < delay + 1.0
        assert fired[0][1] - started >= delay - 1e-6
