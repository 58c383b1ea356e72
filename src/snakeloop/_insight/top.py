"""``top``: one screen of a snapshot's loops, their metrics and tasks, as plain text.

Rates and utilization are over the interval since the previous snapshot of
the same loop; on the first screen, over the loop's whole uptime.
"""

from __future__ import annotations

import time
from typing import Any

LAG_BUCKETS = (
    "<1ms",
    "1-2ms",
    "2-4ms",
    "4-8ms",
    "8-16ms",
    "16-32ms",
    "32-64ms",
    "64-128ms",
    "128-256ms",
    "256-512ms",
    "512ms-1s",
    ">=1s",
)
BAR_WIDTH = 40
SLOWEST_SHOWN = 5
TASKS_SHOWN = 20


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _rate(now: dict[str, Any], before: dict[str, Any] | None, field: str) -> float:
    if before is None:
        span = now["uptime"]
        count = now[field]
    else:
        span = now["uptime"] - before["uptime"]
        count = now[field] - before[field]
    return count / span if span > 0 else 0.0


def _utilization(now: dict[str, Any], before: dict[str, Any] | None) -> float:
    if before is None:
        span, busy = now["uptime"], now["busy"]
    else:
        span, busy = now["uptime"] - before["uptime"], now["busy"] - before["busy"]
    return busy / span if span > 0 else 0.0


def _histogram(hist: list[int]) -> list[str]:
    peak = max(hist) if hist else 0
    lines = []
    for label, count in zip(LAG_BUCKETS, hist, strict=False):
        bar = "#" * (round(BAR_WIDTH * count / peak) if peak else 0)
        if count and not bar:
            bar = "#"
        lines.append(f"    {label:>9} {bar:<{BAR_WIDTH}} {count}")
    return lines


def _slowest(records: list[dict[str, Any]]) -> list[str]:
    if not records:
        return ["  slowest recent callbacks: none"]
    lines = [
        "  slowest recent callbacks:",
        f"    {'duration':>10}  {'task':<20} {'coroutine':<30} segment",
    ]
    ranked = sorted(records, key=lambda record: record["duration"], reverse=True)
    for record in ranked[:SLOWEST_SHOWN]:
        task = record.get("task_name") or "-"
        coro = record.get("coro_qualname") or record.get("callback_label") or "-"
        segment = record.get("segment") or "-"
        lines.append(f"    {_ms(record['duration']):>10}  {task:<20} {coro:<30} {segment}")
    return lines


def _metrics_lines(now: dict[str, Any], before: dict[str, Any] | None) -> list[str]:
    span = "since start" if before is None else "since last screen"
    lag_count = now["timer_lag_count"]
    lag_mean = now["timer_lag_sum"] / lag_count if lag_count else 0.0
    lines = [
        f"  utilization {_utilization(now, before) * 100:5.1f}% ({span}), "
        f"uptime {now['uptime']:.1f} s, mode {now['mode']}",
        f"  iterations/s {_rate(now, before, 'iterations'):.1f}  "
        f"callbacks/s {_rate(now, before, 'callbacks'):.1f}  "
        f"io events/s {_rate(now, before, 'io_events'):.1f} "
        f"(total {now['io_events']}, backlog {now['io_backlog']})",
        f"  tasks {now['tasks_alive']}  fds {now['fds']}  "
        f"executor jobs {now['executor_jobs']}  timers pending {now['timers_pending']}  "
        f"ready {now['ready_depth']}  slow iterations {now['slow_iterations']}",
        f"  timer lag over {lag_count} iterations that ran timers: "
        f"max {_ms(now['timer_lag_max'])}, mean {_ms(lag_mean)}",
    ]
    return lines + _histogram(list(now["timer_lag_hist"])) + _slowest(now["slow_callbacks"])


def _innermost(task: dict[str, Any]) -> str:
    if not task["frames"]:
        return ""
    frame = task["frames"][-1]
    return f"{frame['function']} {frame['file']}:{frame['line']}"


def _task_lines(graph: dict[str, Any] | None) -> list[str]:
    tasks = (graph or {}).get("tasks", [])
    lines = [f"  {len(tasks)} pending tasks:"]
    for task in tasks[:TASKS_SHOWN]:
        lines.append(f"    {task['name']:<20} {task['state']:<8} {_innermost(task)}")
    if len(tasks) > TASKS_SHOWN:
        lines.append(f"    ... {len(tasks) - TASKS_SHOWN} more")
    return lines


def _thread_text(loop: dict[str, Any]) -> str:
    thread = loop.get("thread")
    if not thread:
        return "not running"
    tid = thread.get("native_id") or thread.get("ident")
    return f"running in thread {tid} ({thread.get('name') or '?'})"


def render(snapshot: dict[str, Any], previous: dict[str, Any] | None = None) -> str:
    """The screen for ``snapshot``; ``previous``, an earlier snapshot of the process,
    gives the interval for rates."""
    before_metrics = {loop["id"]: loop.get("metrics") for loop in (previous or {}).get("loops", [])}
    when = time.strftime("%H:%M:%S", time.localtime(snapshot["time"]))
    lines = [
        f"snakeloop top - pid {snapshot['pid']} - Python {snapshot['python']} - "
        f"snakeloop {snapshot['snakeloop']} - {when}",
    ]
    loops = snapshot.get("loops", [])
    if not loops:
        lines.append("no live snakeloop loop in this process")
    for loop in loops:
        lines.append("")
        lines.append(f"loop {loop['id']}, {_thread_text(loop)}")
        if loop.get("error"):
            lines.append(f"  could not be read: {loop['error']}")
        metrics = loop.get("metrics")
        if metrics is None:
            lines.append("  no metrics: this loop does not keep them")
        else:
            lines += _metrics_lines(metrics, before_metrics.get(loop["id"]))
        lines += _task_lines(loop.get("graph"))
    return "\n".join(lines) + "\n"
