"""Telling a deadlock from a wait, and what the loop does about one.

The loop asks only when it is about to block with no timer: the core's
``poll(None)`` (``Loop._poll_checking_for_deadlock``, after a grace period) or the virtual-time
driver.  A loop is deadlocked when nothing can ever wake it: no signal
handler, no executor job, child or outside peer, no other thread.

Two readings of "nothing":

- in production (``on_deadlock="log"``), any watched fd may still bring an
  event (a client from another process), and so may a Python-level signal
  handler; only a loop watching nothing is deadlocked, and the report is
  logged once at ERROR on the ``snakeloop`` logger;
- in tests (``"raise"``: virtual time, the pytest plugin), listeners and
  connections whose peers are all inside this loop cannot be woken from
  outside: a test that waits on them hangs, so ``DeadlockError`` is raised
  with those fds named.

Signals never count as a deadlock: a program that waits only for a signal
handler waits on purpose.
"""

from __future__ import annotations

import logging
import signal
from typing import TYPE_CHECKING, Any

from . import insight, pending
from .exceptions import DeadlockError

if TYPE_CHECKING:
    from ._core.contract import LoopMixinBase

__all__ = ["report_deadlock", "what_can_wake"]

logger = logging.getLogger("snakeloop")


def _python_signal_handlers() -> list[str]:
    """Signals with a Python handler that could wake the loop (not the defaults).

    SIGINT's default handler and the one ``asyncio.Runner`` installs only
    stop the program; they do not count as a wait.
    """
    names = []
    for sig in signal.valid_signals():
        try:
            handler: Any = signal.getsignal(sig)
        except (ValueError, OSError):
            continue
        if not callable(handler) or handler is signal.default_int_handler:
            continue
        func = getattr(handler, "func", None)  # asyncio.Runner's functools.partial
        if getattr(func, "__name__", "") == "_on_sigint":
            continue
        names.append(signal.Signals(sig).name)
    return names


def what_can_wake(loop: LoopMixinBase, *, test_mode: bool) -> list[pending.Pending]:
    """What may still wake ``loop``, which has nothing ready and no timer; [] if nothing."""
    found: list[pending.Pending] = []
    if loop._has_signal_handlers():
        found.append(pending.Pending("signal", "signal handlers (add_signal_handler)", None))
    if not test_mode:
        for name in _python_signal_handlers():
            found.append(pending.Pending("signal", f"Python signal handler for {name}", None))
        for fd, fileobj, _, _ in loop._watched_fds():
            found.append(pending.Pending("fd", pending.describe_fd(loop, fd, fileobj), None))
    driver = loop._virtual_time
    marks = driver.marks() if driver is not None else []
    found.extend(pending.external_work(loop, reply_window=0.0, marks=marks))
    found.extend(pending.wake_sources(loop))
    return found


def report_deadlock(loop: LoopMixinBase, *, mode: str, virtual: bool) -> None:
    """Raise ``DeadlockError`` (``mode="raise"``) or log the report (``"log"``)."""
    if mode == "ignore":
        return
    fds = loop._watched_fds()
    note = None
    if fds:
        described = ", ".join(pending.describe_fd(loop, fd, obj) for fd, obj, _, _ in fds)
        note = (
            f"fds watched: {described} (nothing outside this loop is connected to them, "
            "and no other thread or process of this program can reach them)"
        )
    message = insight.deadlock_message(loop, virtual=virtual, fds_note=note)
    if mode == "raise":
        error = DeadlockError(message, insight.format_text(insight.task_graph(loop)))
        loop._emit_deadlock(error)
        raise error
    if loop._wants_deadlock_hook():
        loop._emit_deadlock(DeadlockError(message, insight.format_text(insight.task_graph(loop))))
    logger.error("%s", message)
