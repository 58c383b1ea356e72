"""Publish a loop's metrics through OpenTelemetry.

``register(meter, loop)`` adds observable instruments to an OpenTelemetry
``Meter``; the SDK reads ``loop.metrics()`` at each collection.  This module
imports nothing from OpenTelemetry itself: the meter comes from the caller,
who has it installed.  Counters are monotonic totals since the loop was
made; gauges are read at collection.  Attributes: ``loop`` (an id, to tell
several loops apart).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

__all__ = ["register"]

# Seconds a snapshot serves the series of one collection.
_SHARED_FOR = 0.05

# (instrument name, kind, LoopMetrics field, unit, description)
_SERIES = (
    ("snakeloop.uptime", "counter", "uptime", "s", "Loop seconds spent running"),
    ("snakeloop.idle", "counter", "idle", "s", "Loop seconds spent waiting in polls"),
    ("snakeloop.busy", "counter", "busy", "s", "Loop seconds spent running callbacks"),
    ("snakeloop.iterations", "counter", "iterations", "1", "Loop iterations"),
    ("snakeloop.polls", "counter", "polls", "1", "Polls of the OS for I/O"),
    ("snakeloop.callbacks", "counter", "callbacks", "1", "Callbacks run"),
    ("snakeloop.io_events", "counter", "io_events", "1", "I/O events polled"),
    ("snakeloop.io_backlog", "counter", "io_backlog", "1", "I/O events of polls that did not wait"),
    ("snakeloop.timers_fired", "counter", "timers_fired", "1", "Timers run"),
    ("snakeloop.timer_lag", "counter", "timer_lag_sum", "s", "Total lateness of due timers"),
    ("snakeloop.slow_iterations", "counter", "slow_iterations", "1", "Slow stretches"),
    ("snakeloop.utilization", "gauge", "utilization", "1", "Busy fraction since start"),
    ("snakeloop.timer_lag_max", "gauge", "timer_lag_max", "s", "Peak timer lateness"),
    ("snakeloop.ready_max", "gauge", "ready_max", "1", "Peak callbacks in one iteration"),
    ("snakeloop.ready_depth", "gauge", "ready_depth", "1", "Callbacks waiting"),
    ("snakeloop.executor_jobs", "gauge", "executor_jobs", "1", "Executor jobs not finished"),
    ("snakeloop.timers_pending", "gauge", "timers_pending", "1", "Timers scheduled"),
    ("snakeloop.fds", "gauge", "fds", "1", "File descriptors watched"),
    ("snakeloop.tasks_alive", "gauge", "tasks_alive", "1", "Tasks not done"),
)


def register(meter: Any, loop: asyncio.AbstractEventLoop) -> list[Any]:
    """Add the loop's series to ``meter``; returns the instruments made.

    ``meter`` is an ``opentelemetry.metrics.Meter`` (for instance
    ``opentelemetry.metrics.get_meter("myapp")``).  Each series is read
    from one ``loop.metrics()`` snapshot per collection.
    """
    from opentelemetry.metrics import Observation  # the caller has OpenTelemetry

    attributes = {"loop": f"{id(loop):#x}"}
    cache: list[Any] = [float("-inf"), None]

    def read(field: str) -> float:
        # The series of one collection are read within moments of each
        # other: they share one snapshot instead of taking one each.
        now = time.monotonic()
        if now - cache[0] > _SHARED_FOR:
            cache[0] = now
            cache[1] = loop.metrics()  # type: ignore[attr-defined]
        return float(getattr(cache[1], field))

    made = []
    for name, kind, field, unit, description in _SERIES:

        def callback(options: Any, field: str = field) -> list[Any]:
            return [Observation(read(field), attributes)]

        if kind == "counter":
            made.append(
                meter.create_observable_counter(
                    name, callbacks=[callback], unit=unit, description=description
                )
            )
        else:
            made.append(
                meter.create_observable_gauge(
                    name, callbacks=[callback], unit=unit, description=description
                )
            )
    return made
