"""What a forked child does with the snakeloop loops it inherited.

OS and CPython facts this module relies on:

* ``fork()`` copies every fd, the epoll fd included, so parent and child
  share one epoll instance and its interest list.  An ``epoll_ctl()`` in
  the child (an inherited transport closing, say) would change what the
  parent's loop is told, and an ``epoll_wait()`` in the child would take
  events meant for the parent.
* Closing the child's copy of an fd (the epoll fd, a pidfd, a socket) only
  drops a reference: the open file description, and whatever the parent
  registered for it, lives on while the parent holds its copy.
* Only the thread that called ``fork()`` exists in the child, and CPython
  makes it the main thread there, so ``signal.set_wakeup_fd`` is allowed.
* The signal wakeup fd is process state and survives ``fork()``: a child
  still pointing it at the parent's signal pipe would send its signals
  to the parent's handlers.  asyncio resets it in the child from 3.12 on;
  snakeloop does it on every version.
* CPython's running-loop record is ignored in a child (3.11 stores the pid
  with it; 3.12+ clears it at fork), so ``get_running_loop()`` there never
  returns the parent's loop.  3.12+ also gives the child a fresh policy
  state, so ``get_event_loop()`` makes a new loop; on 3.11 the same reset
  is done here when the policy holds an inherited snakeloop loop.
* ``os.register_at_fork(after_in_child=...)`` runs in the child right after
  ``fork()`` (also for ``multiprocessing``'s fork start method), and not
  after ``posix_spawn``/``vfork``+``exec``, which ``subprocess`` uses.
* CPython hands an exception raised by an at-fork hook to
  ``sys.unraisablehook`` ("Exception ignored in: <function ...>") and goes
  on; asyncio's own hook (3.12+) lets its errors go that way.

In the child, an inherited loop is closed: every use of it raises
``RuntimeError("Event loop is closed")`` at once, instead of failing later
or quietly sharing the parent's epoll instance.  ``loop._disown_after_fork()``
has each part of the loop drop what belongs to the parent; its fd copies
are closed (which leaves the parent's alone, see above) and ``close()`` is a
no-op.  A child forked from inside a running loop that returns into that
loop gets a ``RuntimeError`` out of ``run_forever`` at its next poll.  What
fails while a loop is disowned does not stop the other parts or loops from
being disowned, and is then raised out of the hook, so it is reported.
"""

from __future__ import annotations

import os
import sys
import weakref
from asyncio import events
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from .._core.contract import LoopContract

__all__ = ["INHERITED_LOOP_MESSAGE", "InheritedBackend", "call_each", "live_loops", "track"]

INHERITED_LOOP_MESSAGE = (
    "this event loop was inherited from the parent process through fork() "
    "and cannot do I/O in the child; create a new event loop in the child"
)

# Every live snakeloop loop, for the at-fork hook; weak, so it keeps none
# of them alive.
_loops: weakref.WeakSet[Any] = weakref.WeakSet()


def track(loop: LoopContract) -> None:
    """Have ``loop._disown_after_fork()`` called in any child forked while it is alive."""
    _loops.add(loop)


def live_loops() -> list[Any]:
    """Every snakeloop loop of this process that is still alive (closed ones too).

    Safe from a signal handler or another thread: the set is copied, and the
    copy retried when a loop is made or collected meanwhile.
    """
    for _ in range(10):
        try:
            return list(_loops)
        except RuntimeError:  # "Set changed size during iteration"
            continue
    return []


class InheritedBackend:
    """Stands in for the parent's I/O backend in a forked child."""

    __slots__ = ()

    def fileno(self) -> int:
        return -1

    def register(self, fd: int, events: int) -> None:
        raise RuntimeError(INHERITED_LOOP_MESSAGE)

    def modify(self, fd: int, events: int) -> None:
        raise RuntimeError(INHERITED_LOOP_MESSAGE)

    def unregister(self, fd: int) -> None:
        # The registration belongs to the parent: leave it there.
        pass

    def poll(self, timeout: float | None) -> NoReturn:
        raise RuntimeError(INHERITED_LOOP_MESSAGE)

    def close(self) -> None:
        pass


def _raise_all(failures: list[Exception], message: str) -> None:
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise ExceptionGroup(message, failures)


def call_each(*steps: Callable[[], object]) -> None:
    """Call every step, even after one has failed; then raise what failed.

    One failure is raised as it is, several as an ``ExceptionGroup``.
    """
    failures = []
    for step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - raised below, after the other steps
            failures.append(exc)
    _raise_all(failures, "disowning a loop in a forked child failed")


def _reset_policy_311(disowned: list[Any]) -> None:
    policy: Any = getattr(events, "_event_loop_policy", None)
    local = getattr(policy, "_local", None)
    if local is not None and getattr(local, "_loop", None) in disowned:
        policy._local = type(local)()


def _after_fork_in_child() -> None:
    disowned = list(_loops)
    _loops.clear()
    failures = []
    for loop in disowned:
        try:
            loop._disown_after_fork()
        except Exception as exc:  # noqa: BLE001 - raised below, after the other loops
            exc.add_note(f"while disowning {loop!r} in a forked child")
            failures.append(exc)
    if sys.version_info < (3, 12) and disowned:
        try:
            _reset_policy_311(disowned)
        except Exception as exc:  # noqa: BLE001 - raised below
            failures.append(exc)
    # Raised out of the hook, CPython reports them through sys.unraisablehook.
    _raise_all(failures, "disowning snakeloop loops in a forked child failed")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
