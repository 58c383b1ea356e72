"""What a loop has been doing, always on: ``loop.metrics()``.

A snakeloop loop counts its iterations, polls, callbacks, I/O events, timer
lag and idle time as it runs, and keeps the last slow callbacks with the
task and the lines that were slow.  ``loop.metrics()`` returns a frozen
``LoopMetrics`` snapshot; two snapshots give rates::

    prev = loop.metrics()
    ...
    cur = loop.metrics()
    print(snakeloop.metrics.utilization(prev, cur))    # busy fraction

``Loop(metrics=...)`` (or ``SNAKELOOP_METRICS``) chooses how much:

- ``True`` (the default): counters, and slow-callback attribution.  A slow
  stretch of callbacks is found from the clock reads the loop makes anyway;
  the loop then times every callback for ``WINDOW`` seconds (at most once
  every ``WINDOW_EVERY`` seconds) to name the task and lines;
- ``"exact"``: every callback timed, all the time;
- ``"sampled"``: as ``True``, plus a daemon thread that looks at the loop
  thread's stack every 20 ms and reports a frame held for 100 ms or more
  (code that holds the GIL in C, which no callback timing splits up);
- ``False``: nothing is kept, and ``loop.metrics()`` raises.

Durations are in the loop's clock: real seconds on the default clock,
virtual seconds on a ``VirtualClock``.  The counts are taken in the run
loop's own variables and published every 256 iterations, before each poll
that may wait, and when the loop stops (``_core.counters``).  A snapshot
taken while the loop runs, from a callback or another thread, therefore
lacks what happened since then (at most 256 iterations' worth; the idle
time is always up to date); one taken after ``run_until_complete`` or
``run_forever`` returns is exact.

Exporters: ``prometheus_text(loop)`` (no dependency) and
``snakeloop.metrics.otel.register(meter, loop)`` (imports OpenTelemetry
when called).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any

from .._core.counters import LAG_BUCKETS

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "LAG_BUCKET_BOUNDS",
    "METRICS_MODES",
    "LoopMetrics",
    "SlowCallback",
    "metrics_mode",
    "prometheus_text",
    "slow_callback_logging",
    "snapshot",
    "utilization",
]

# What Loop(metrics=...) takes, and SNAKELOOP_METRICS spells.
METRICS_MODES = (False, True, "sampled", "exact")
_FROM_ENVIRONMENT: dict[str, bool | str] = {
    "0": False,
    "false": False,
    "off": False,
    "1": True,
    "true": True,
    "on": True,
    "sampled": "sampled",
    "exact": "exact",
}

# Upper bounds of the timer lag histogram's buckets, in seconds; the last
# bucket has none.
LAG_BUCKET_BOUNDS: tuple[float, ...] = tuple(2.0**i / 1000.0 for i in range(LAG_BUCKETS - 1))


def slow_callback_logging(option: object) -> bool:
    """Whether ``Loop(log_slow_callbacks=option)`` logs slow callbacks outside debug mode
    (None: ``SNAKELOOP_LOG_SLOW_CALLBACKS``, off when unset).

    Off by default because asyncio logs nothing there: a slow stretch goes to the
    metrics, their ring of records and the instruments' ``slow_callback`` hook.
    """
    if option is None:
        value = os.environ.get("SNAKELOOP_LOG_SLOW_CALLBACKS", "").strip().lower()
        if not value:
            return False
        choice = _FROM_ENVIRONMENT.get(value)
        if choice is not True and choice is not False:
            raise ValueError(
                "SNAKELOOP_LOG_SLOW_CALLBACKS must be one of 0, 1, true, false, on or off "
                f"(or unset), got {value!r}"
            )
        return choice
    if option is True or option is False:
        return option
    raise ValueError(f"log_slow_callbacks must be True, False or None, got {option!r}")


def metrics_mode(option: object) -> bool | str:
    """The mode ``Loop(metrics=option)`` asks for (None: the environment's)."""
    if option is None:
        value = os.environ.get("SNAKELOOP_METRICS", "").strip().lower()
        if not value:
            return True
        if value not in _FROM_ENVIRONMENT:
            raise ValueError(
                f"SNAKELOOP_METRICS must be one of 0, 1, true, false, on, off, sampled or "
                f"exact (or unset), got {value!r}"
            )
        return _FROM_ENVIRONMENT[value]
    if option is True or option is False:
        return option
    if option == "sampled" or option == "exact":
        return str(option)
    raise ValueError(f"metrics must be True, False, 'sampled' or 'exact', got {option!r}")


@dataclasses.dataclass(frozen=True)
class SlowCallback:
    """One callback or task step that ran longer than ``slow_callback_duration``.

    ``segment`` is ``"app/views.py:40 → app/views.py:52"``: where the task
    stood when the step began (the await it resumed from) and where it
    stood when the step ended (the next await, or the line that finished
    it).  A side is ``?`` when it could not be known: the loop saw the step
    was slow only afterwards, outside a timing window, so only its end is
    known.  ``task_name`` and ``coro_qualname`` are None for a callback
    that steps no task; ``callback_label`` then names it.  ``iteration`` is
    the loop's iteration count when it was recorded, ``wall_time`` the
    ``time.time()``.
    """

    duration: float
    task_name: str | None
    coro_qualname: str | None
    segment: str | None
    callback_label: str
    iteration: int
    wall_time: float


@dataclasses.dataclass(frozen=True)
class LoopMetrics:
    """A snapshot of one loop's metrics (see the module docstring).

    Totals count from the loop's creation; ``timer_lag_max`` is the peak since
    creation or the last ``loop.metrics(reset_peaks=True)``, and so is
    ``ready_max``.
    """

    mode: bool | str
    # Loop seconds spent in run_forever; idle is the part spent in polls that
    # could block; busy is the rest.  utilization = busy / uptime.
    uptime: float
    idle: float
    busy: float
    utilization: float
    iterations: int
    # Polls made, and polls skipped because callbacks were ready and either
    # no fd but the loop's own was watched or the iteration before polled.
    polls: int
    polls_skipped: int
    # Callbacks run, I/O events polled, and the events of polls that did not
    # wait (callbacks were ready): I/O arriving faster than the loop serves it.
    callbacks: int
    io_events: int
    io_backlog: int
    # Timers run; how late each iteration's earliest due timer ran (loop
    # seconds): peak, sum, count and a histogram (LAG_BUCKET_BOUNDS).
    timers_fired: int
    timer_lag_max: float
    timer_lag_sum: float
    timer_lag_count: int
    timer_lag_hist: tuple[int, ...]
    # Callbacks taken from the ready queue (I/O callbacks run straight from
    # a poll are not in it), and the most one iteration took (a peak, as
    # timer_lag_max): a burst shows here, a steady load does not.
    ready_total: int
    ready_max: int
    # Stretches between two clock reads longer than slow_callback_duration,
    # and the last 32 slow callbacks attributed (oldest first).
    slow_iterations: int
    slow_callbacks: tuple[SlowCallback, ...]
    # Gauges, read when the snapshot is taken: callbacks waiting in the
    # ready queue, executor jobs not finished, timers pending, fds watched,
    # tasks not done.
    ready_depth: int
    executor_jobs: int
    timers_pending: int
    fds: int
    tasks_alive: int
    # time.time() when the snapshot was taken.
    taken_at: float

    @property
    def timer_lag_mean(self) -> float:
        return self.timer_lag_sum / self.timer_lag_count if self.timer_lag_count else 0.0


def utilization(prev: LoopMetrics, cur: LoopMetrics) -> float:
    """The busy fraction of the loop between two snapshots (0.0 if no time passed)."""
    elapsed = cur.uptime - prev.uptime
    if elapsed <= 0:
        return 0.0
    return min(1.0, max(0.0, (cur.busy - prev.busy) / elapsed))


def snapshot(loop: Any, *, reset_peaks: bool = False) -> LoopMetrics:
    """``loop.metrics()``: a snapshot of a snakeloop loop's metrics."""
    counters = loop._counters
    recorder = loop._metrics_recorder
    if recorder is None:
        raise RuntimeError(
            "this loop keeps no metrics: it was made with metrics=False (or "
            "SNAKELOOP_METRICS=0); make it with metrics=True to read loop.metrics()"
        )
    now = loop.time()
    uptime = counters.uptime
    started = counters.run_started
    if started is not None:
        uptime += now - started
    idle = counters.idle_until(now)
    busy = max(0.0, uptime - idle)
    result = LoopMetrics(
        mode=recorder.mode,
        uptime=uptime,
        idle=idle,
        busy=busy,
        utilization=busy / uptime if uptime > 0 else 0.0,
        iterations=counters.iterations,
        polls=counters.polls,
        polls_skipped=counters.polls_skipped,
        callbacks=counters.callbacks,
        io_events=counters.io_events,
        io_backlog=counters.io_backlog,
        timers_fired=counters.timers_fired,
        timer_lag_max=counters.lag_max,
        timer_lag_sum=counters.lag_sum,
        timer_lag_count=counters.lag_count,
        timer_lag_hist=tuple(counters.lag_hist),
        ready_total=counters.ready_total,
        ready_max=counters.ready_max,
        slow_iterations=counters.slow_iterations,
        slow_callbacks=recorder.recent(),
        ready_depth=len(loop._ready),
        executor_jobs=loop._executor_jobs(),
        timers_pending=loop._timer_count(),
        fds=len(loop._watched_fds()),
        tasks_alive=_tasks_alive(loop),
        taken_at=time.time(),
    )
    if reset_peaks:
        counters.reset_peaks()
    return result


def _tasks_alive(loop: Any) -> int:
    # Not asyncio.all_tasks(): on 3.11, read from another thread while the loop makes tasks,
    # it retries for minutes once many tasks are registered, as on PyPy they soon are
    # (see _insight.registry).
    from .._insight.registry import tasks_of

    for _ in range(3):
        try:
            return len(tasks_of(loop))
        except RuntimeError:  # the task set changed size while it was read
            continue
    return -1


# (name, type, LoopMetrics field, help) of each exported series.
_PROMETHEUS_SERIES = (
    ("uptime_seconds_total", "counter", "uptime", "Loop seconds spent running."),
    ("idle_seconds_total", "counter", "idle", "Loop seconds spent waiting in polls."),
    ("busy_seconds_total", "counter", "busy", "Loop seconds spent running callbacks."),
    ("iterations_total", "counter", "iterations", "Loop iterations."),
    ("polls_total", "counter", "polls", "Polls of the OS for I/O."),
    ("polls_skipped_total", "counter", "polls_skipped", "Polls skipped with work ready."),
    ("callbacks_total", "counter", "callbacks", "Callbacks run."),
    ("io_events_total", "counter", "io_events", "I/O events polled."),
    ("io_backlog_total", "counter", "io_backlog", "I/O events found by polls that did not wait."),
    ("timers_fired_total", "counter", "timers_fired", "Timers run."),
    (
        "slow_iterations_total",
        "counter",
        "slow_iterations",
        "Stretches of callbacks longer than slow_callback_duration.",
    ),
    ("ready_total", "counter", "ready_total", "Callbacks taken from the ready queue."),
    ("ready_max", "gauge", "ready_max", "Most callbacks one iteration took from the ready queue."),
    ("ready_depth", "gauge", "ready_depth", "Callbacks waiting in the ready queue."),
    ("executor_jobs", "gauge", "executor_jobs", "Executor jobs not finished."),
    ("timers_pending", "gauge", "timers_pending", "Timers scheduled."),
    ("fds", "gauge", "fds", "File descriptors watched."),
    ("tasks_alive", "gauge", "tasks_alive", "Tasks not done."),
)


def prometheus_text(loop: asyncio.AbstractEventLoop, *, prefix: str = "snakeloop_") -> str:
    """The loop's metrics in Prometheus' text exposition format (version 0.0.4)."""
    m: LoopMetrics = loop.metrics()  # type: ignore[attr-defined]
    lines: list[str] = []

    for name, kind, field, help_text in _PROMETHEUS_SERIES:
        lines.append(f"# HELP {prefix}{name} {help_text}")
        lines.append(f"# TYPE {prefix}{name} {kind}")
        lines.append(f"{prefix}{name} {_number(getattr(m, field))}")
    name = f"{prefix}timer_lag_seconds"
    lines.append(f"# HELP {name} How late each iteration's earliest due timer ran.")
    lines.append(f"# TYPE {name} histogram")
    running = 0
    for bound, count in zip(LAG_BUCKET_BOUNDS, m.timer_lag_hist, strict=False):
        running += count
        lines.append(f'{name}_bucket{{le="{_number(bound)}"}} {running}')
    lines.append(f'{name}_bucket{{le="+Inf"}} {m.timer_lag_count}')
    lines.append(f"{name}_sum {_number(m.timer_lag_sum)}")
    lines.append(f"{name}_count {m.timer_lag_count}")
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return repr(float(value))
