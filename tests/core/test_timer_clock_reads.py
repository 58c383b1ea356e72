"""How soon a busy loop sees a timer come due, and what its clock reads time, on the real clock.

While callbacks keep the loop busy, each iteration decides whether the earliest timer is
due.  Compiled, on Linux, it first reads the coarse clock (runloop.pxd), and the precise
one only when a timer could be due; after a quick iteration, while every timer is more
than a second away, it reads none for a run of iterations, 7 at first and up to 63 while
the iterations stay quick.  These tests pin what that may change and what it may not:

- a timer due soon fires in the first iteration whose clock read shows it due, as on
  asyncio;
- a far timer fires at most a run of skipped reads (``_COARSE_SKIPS_MAX``, 63) after that,
  also when the iterations turn slow inside a run;
- a timer set while the loop skips its reads is looked at in the next iteration;
- a wait for a timer ends the skips, so the timer fires when the wait ends;
- a slow stretch with a timer pending is seen once, and quick iterations are never one;
- iterations of most of a tick never make a slow stretch: a tick seen to pass starts the
  runs of skipped reads short again.

Timers are set in real time here: a fake clock would take the compiled build off the C
clock.  The counts are of a ``call_soon`` chain's callbacks, so they hold on a slow
machine too.
"""

from __future__ import annotations

import time

import pytest
from _loopkit import LOOP_KINDS, loop_ctx

import snakeloop

pytestmark = pytest.mark.unseeded(
    "counts the iterations an unseeded loop takes to see a timer due; a seed may hold "
    "a due timer back on purpose (timer_delay)"
)

# The iterations of a call_soon chain that may start at or after a timer's deadline
# before the timer runs: the one whose clock read came just before the deadline, and
# the next, whose chain callback was queued before the timer.
NEXT_ITERATION = 2
# Compiled, a far timer may be seen this many iterations later (runloop._COARSE_SKIPS_MAX).
SKIPPED_READS = 63
# Linux's id of the coarse clock, whose tick the compiled loop reads; the time module
# does not name it.
CLOCK_MONOTONIC_COARSE = 6


def _chain_until_timer(loop, delay, *, before=None):
    """Run a call_soon chain until a timer ``delay`` seconds away has run.

    ``before`` (a count of callbacks) sets the timer from the chain, after that many,
    rather than before the chain starts.  Returns how many chain callbacks started at or
    after the timer's deadline before it ran.
    """
    late = 0
    fired = False
    deadline = None
    count = 0

    def fire():
        nonlocal fired
        fired = True

    def set_timer():
        nonlocal deadline
        deadline = loop.call_later(delay, fire).when()

    def step():
        nonlocal late, count
        if fired:
            loop.stop()
            return
        count += 1
        if count == before:
            set_timer()
        elif deadline is not None and time.monotonic() >= deadline:
            late += 1
        loop.call_soon(step)

    if before is None:
        set_timer()
    loop.call_soon(step)
    loop.run_forever()
    return late


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_a_near_timer_fires_in_the_first_iteration_that_sees_it_due(kind):
    with loop_ctx(kind) as loop:
        assert _chain_until_timer(loop, 0.03) <= NEXT_ITERATION


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_a_timer_set_among_far_ones_is_seen_at_once(kind):
    # The far timers let a compiled loop skip its clock reads; a timer due now
    # ends the skips.  It is set after eight chain lengths in a row, so that one
    # of them falls inside a run of skipped reads (at least seven iterations in
    # eight).
    with loop_ctx(kind) as loop:
        far = [loop.call_later(3600 + i, lambda: None) for i in range(10)]
        try:
            lates = [_chain_until_timer(loop, 0, before=2_000 + i) for i in range(8)]
        finally:
            for handle in far:
                handle.cancel()
    assert max(lates) <= NEXT_ITERATION, lates


@pytest.mark.slow
def test_a_far_timer_fires_a_few_iterations_after_it_is_due_at_most():
    # 1.2 s: more than the second of headroom under which a compiled loop reads
    # its clock every iteration.
    with loop_ctx("snakeloop") as loop:
        assert _chain_until_timer(loop, 1.2) <= NEXT_ITERATION + SKIPPED_READS


@pytest.mark.slow
def test_a_timer_is_late_by_one_run_of_skipped_reads_at_most_when_iterations_turn_slow():
    # Quick iterations let a compiled loop's runs of skipped reads grow to 63.
    # Then every callback takes 20 ms: the run under way may outlast the second
    # of headroom, and the timer come due inside it.  The read that ends the
    # run sees it, so it is late by one run at most; runs that kept growing
    # with the chain's speed would hold it back for thousands of iterations.
    with loop_ctx("snakeloop") as loop:
        # Well above 20 ms: no slow stretch opens a timing window here.
        loop.slow_callback_duration = 10.0
        fired = False
        late = slow_steps = 0
        slow_from = time.monotonic() + 0.1

        def fire():
            nonlocal fired
            fired = True

        deadline = loop.call_later(1.2, fire).when()

        def step():
            nonlocal late, slow_steps
            if fired:
                loop.stop()
                return
            now = time.monotonic()
            if now >= deadline:
                late += 1
            if now >= slow_from:
                slow_steps += 1
                if slow_steps > 200:  # 4 s: the timer was held back
                    loop.stop()
                    return
                _spin(0.02)
            loop.call_soon(step)

        loop.call_soon(step)
        loop.run_forever()
    assert fired
    assert late <= NEXT_ITERATION + SKIPPED_READS


def _polls_between_chain_end_and_timer(loop, chain_length, delay):
    """Polls from the end of a call_soon chain to a timer ``delay`` seconds away running."""
    poll = loop._poll
    polls = 0
    at_chain_end = None
    after = None
    remaining = chain_length

    def counted_poll(timeout):
        nonlocal polls
        polls += 1
        return poll(timeout)

    def fire():
        nonlocal after
        after = polls - at_chain_end
        loop.stop()

    def step():
        nonlocal remaining, at_chain_end
        remaining -= 1
        if remaining:
            loop.call_soon(step)
        else:
            at_chain_end = polls

    loop._poll = counted_poll
    try:
        loop.call_later(delay, fire)
        loop.call_soon(step)
        loop.run_forever()
    finally:
        loop._poll = poll
    return after


@pytest.mark.slow
def test_after_a_wait_a_due_timer_fires_in_the_iteration_the_wait_ends():
    # A quick chain with every timer over a second away lets a compiled loop
    # skip its clock reads; the chain then ends, and the loop waits for the
    # timer.  The wait ends when it is due, so it fires after that one poll.
    # Skips left over from before the wait would hold it back for one more
    # poll at least (one that does not wait).  1.1 s: past the second of
    # headroom that allows the skips.
    with loop_ctx("snakeloop") as loop:
        far = loop.call_later(3600, lambda: None)
        try:
            polls = [_polls_between_chain_end_and_timer(loop, n, 1.1) for n in (5_001, 5_006)]
        finally:
            far.cancel()
    assert polls == [1, 1]


def _spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.slow
def test_with_a_timer_pending_quick_iterations_are_never_slow_and_a_slow_one_is_seen_once(
    caplog,
):
    loop = snakeloop.new_event_loop(log_slow_callbacks=True)
    try:
        # Above the default: a scheduling hiccup of a loaded machine is not a slow stretch.
        loop.slow_callback_duration = 0.2
        far = loop.call_later(3600, lambda: None)
        end = time.monotonic() + 0.3
        count = 0

        def quick():
            nonlocal count
            count += 1
            if time.monotonic() < end:
                loop.call_soon(quick)
            else:
                loop.stop()

        loop.call_soon(quick)
        loop.run_forever()
        assert count > 1000
        assert loop.metrics().slow_iterations == 0

        # 0.25 s in one callback, then quick ones: the stretch is seen when the loop
        # next reads a clock, a few iterations later at most, and only then.
        end = time.monotonic() + 0.4
        loop.call_soon(_spin, 0.25)
        loop.call_soon(quick)
        loop.run_forever()
        assert loop.metrics().slow_iterations == 1
        far.cancel()
    finally:
        loop.close()
    assert any("seconds without a pause" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_iterations_of_most_of_a_tick_never_make_a_slow_stretch():
    # A read that finds a tick gone starts the runs of skipped reads at seven
    # again.  With every iteration 0.8 of a tick long, a run and its read then
    # take 6.4 ticks, far from the 40 that are slow here; runs that grew to 63
    # (as after quick iterations) would take 51.  No iteration is slow, so no
    # stretch may be.
    tick = time.clock_getres(CLOCK_MONOTONIC_COARSE)
    loop = snakeloop.new_event_loop()
    try:
        loop.slow_callback_duration = 40 * tick
        far = loop.call_later(3600, lambda: None)
        count = 0

        def step():
            nonlocal count
            count += 1
            _spin(0.8 * tick)
            if count < 400:
                loop.call_soon(step)
            else:
                loop.stop()

        loop.call_soon(step)
        loop.run_forever()
        far.cancel()
        assert loop.metrics().slow_iterations == 0
    finally:
        loop.close()
