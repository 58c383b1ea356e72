# cython: annotation_typing=False
"""The run loop's totals, behind ``loop.metrics()``.

``CoreLoop._run_iterations`` counts in the fields of its ``_Run`` (C fields,
compiled), which cost less than these totals' own, and adds them here in one
call (``add``): every ``FLUSH_EVERY`` iterations, before a poll that may
block, and when it returns.  So a reader in another thread, or a callback of the
loop itself, sees totals at most ``FLUSH_EVERY`` iterations old while the
loop is busy, and exact ones while it waits or after it stops.

Durations are in the loop's clock (real seconds on the default clock,
virtual seconds on a ``VirtualClock``), because they are read from the
clock reads the iteration already makes: the loop reads no clock for its
metrics that it would not read anyway, except around a poll that may
block, which is about to sleep.
"""

from __future__ import annotations

__all__ = ["FLUSH_AFTER", "FLUSH_EVERY", "LAG_BUCKETS", "LoopCounters"]

# Iterations between two flushes of the run loop's local counts.
FLUSH_EVERY = 256

# Before a poll that may wait, the counts are flushed when the last flush is
# older than this many seconds (of the loop's clock).
FLUSH_AFTER = 0.05

# Timer lag histogram: bucket i < LAG_BUCKETS - 1 holds lags under 2**i ms
# (and at least 2**(i-1) ms for i > 0); the last one holds 1024 ms and more.
LAG_BUCKETS = 12


class LoopCounters:
    """Totals since the loop was made; mutated only by the loop's thread."""

    __slots__ = (
        "iterations",
        "polls",
        "polls_skipped",
        "callbacks",
        "ready_total",
        "ready_max",
        "io_events",
        "io_backlog",
        "idle",
        "timers_fired",
        "lag_max",
        "lag_sum",
        "lag_count",
        "lag_hist",
        "slow_iterations",
        "uptime",
        "run_started",
        "wait_started",
        "wait_ended",
        "timed",
    )

    def __init__(self):
        self.iterations = 0
        self.polls = 0
        self.polls_skipped = 0
        self.callbacks = 0
        self.ready_total = 0
        # The most callbacks one iteration took from the ready queue (a peak).
        self.ready_max = 0
        self.io_events = 0
        self.io_backlog = 0
        self.idle = 0.0
        self.timers_fired = 0
        self.lag_max = 0.0
        self.lag_sum = 0.0
        self.lag_count = 0
        self.lag_hist = [0] * LAG_BUCKETS
        self.slow_iterations = 0
        # Loop time spent in finished runs, and when the current one began
        # (None while the loop is not running).
        self.uptime = 0.0
        self.run_started = None
        # When the last poll that may wait began and ended, while its idle
        # time is still in the run loop's locals (None once it is published).
        self.wait_started = None
        self.wait_ended = 0.0
        # Whether the run loop times its polls that have no timer (two clock
        # reads it would not make otherwise): off with metrics=False.
        self.timed = True

    def add(
        self,
        iterations: int,
        polls: int,
        ready_total: int,
        ready_max: int,
        io_callbacks: int,
        lone_io: int,
        io_events: int,
        io_backlog: int,
        idle: float,
        timers_fired: int,
        lags: list[float],
    ) -> None:
        """Fold in one stretch of the run loop's local counts.

        ``lone_io`` counts iterations that were one I/O event and its one
        callback (the run loop's shortcut), counted as both.  ``lags`` lists
        how late each iteration's earliest due timer ran
        (loop seconds); it is kept as a list there because appending costs
        the iteration less than updating a histogram.
        """
        self.iterations += iterations
        self.polls += polls
        # An iteration that did not poll skipped it (see steps 2-3).
        self.polls_skipped += iterations - polls
        self.ready_total += ready_total
        if ready_max > self.ready_max:
            self.ready_max = ready_max
        self.callbacks += ready_total + io_callbacks + lone_io
        self.io_events += io_events + lone_io
        self.io_backlog += io_backlog
        self.idle += idle
        # The poll whose idle time this holds, if it was the last, is in.
        self.wait_started = None
        self.timers_fired += timers_fired
        if lags:
            hist = self.lag_hist
            last = LAG_BUCKETS - 1
            for lag in lags:
                if lag < 0.0:
                    # Due within one clock resolution: not late.
                    lag = 0.0
                elif lag > self.lag_max:
                    self.lag_max = lag
                self.lag_sum += lag
                bucket = int(lag * 1000.0).bit_length()
                hist[bucket if bucket < last else last] += 1
            self.lag_count += len(lags)

    def idle_until(self, now: float) -> float:
        """Idle time up to ``now``, with that of the last poll that may wait.

        That poll's idle time stays in the run loop's locals until the next
        flush; ``wait_started`` and ``wait_ended`` (before ``wait_started``
        while it waits) say what it was, so a reader during a long wait (a
        ``top`` of a quiet server) or just after one sees it.
        """
        started = self.wait_started
        if started is None:
            return self.idle
        ended = self.wait_ended
        return self.idle + ((ended if ended >= started else now) - started)

    def reset_peaks(self) -> None:
        """Start the peaks (``lag_max``, ``ready_max``) over."""
        self.lag_max = 0.0
        self.ready_max = 0
