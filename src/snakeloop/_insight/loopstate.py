"""The report's ``Loop:`` line: time, clock, ready callbacks, timers, watched fds.

Read from any thread: each collection is copied in one step (and the copy is
retried if the loop changes it meanwhile), never iterated while live.
"""

from __future__ import annotations

from typing import Any

from .model import FdLine, LoopState

# Members of snakeloop's loop that the loop contract (_core/contract.py) does
# not list yet, though the report needs them: the timer table (for the timer
# count) and the creation sites that test and virtual-time modes record.
# They are read here only, by name, until the contract offers them.
_TIMER_TABLE = "_timers"
_STDLIB_TIMER_HEAP = "_scheduled"
TASK_SITES = "_task_sites"


def loop_private(target: Any, name: str) -> Any:
    return getattr(target, name, None)


def _retrying(read: Any, default: Any) -> Any:
    for _ in range(10):
        try:
            return read()
        except RuntimeError:  # "changed size during iteration", from another thread
            continue
    return default


def is_virtual(loop: Any) -> bool:
    get_clock = getattr(loop, "get_clock", None)
    if get_clock is None:
        return False
    try:
        return bool(getattr(get_clock(), "is_virtual", False))
    except Exception:
        return False


def timer_count(loop: Any) -> int | None:
    """Timers that will still fire; None when the loop keeps them in a way not known here."""
    table = loop_private(loop, _TIMER_TABLE)
    if isinstance(table, dict):
        entries = _retrying(lambda: list(table.values()), [])
        count = 0
        for entry in entries:
            handles = entry if isinstance(entry, list) else (entry,)
            count += sum(1 for handle in list(handles) if not handle.cancelled())
        return count
    heap = loop_private(loop, _STDLIB_TIMER_HEAP)
    if isinstance(heap, list):
        return sum(1 for handle in list(heap) if not handle.cancelled())
    return None


def _describe(loop: Any, fd: int, fileobj: Any) -> str:
    try:
        from ..pending import describe_fd  # type: ignore[attr-defined,import-not-found,unused-ignore]
    except ImportError:
        return f"fd {fd}"
    try:
        return str(describe_fd(loop, fd, fileobj))
    except Exception:
        return f"fd {fd}"


def loop_state(loop: Any) -> LoopState:
    watched = getattr(loop, "_watched_fds", None)
    fds = _retrying(watched, []) if watched is not None else []
    ready = getattr(loop, "_ready", None)
    return LoopState(
        time=loop.time(),
        virtual=is_virtual(loop),
        ready=len(ready) if ready is not None else 0,
        timers=timer_count(loop),
        fds=[
            FdLine(fd, _describe(loop, fd, fileobj), bool(reading), bool(writing))
            for fd, fileobj, reading, writing in sorted(fds, key=lambda entry: entry[0])
        ],
    )
