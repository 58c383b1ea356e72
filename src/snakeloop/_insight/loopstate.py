"""The report's ``Loop:`` line: time, clock, ready callbacks, timers, watched fds.

Read from any thread: each collection is copied in one step (and the copy is
retried if the loop changes it meanwhile), never iterated while live.
"""

from __future__ import annotations

from typing import Any

from .model import FdLine, LoopState

# The creation sites that test and virtual-time modes record (a contract
# member); read with getattr, since a report may be asked of another loop.
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
    count = getattr(loop, "_timer_count", None)
    if count is not None:
        return _retrying(count, None)  # type: ignore[no-any-return]
    return None  # another kind of loop: its timers are its own business


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
