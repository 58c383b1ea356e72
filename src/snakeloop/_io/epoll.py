"""epoll backend (Linux).

OS facts this module relies on:

* epoll watches open file descriptions, not fd numbers.  Closing an fd
  removes it from the interest list only once every duplicate of it is
  closed, so the loop must ``unregister`` before a transport closes its
  socket, or a dup()ed or inherited copy keeps reporting events for an fd
  number that may since have been reused.
* ``EPOLLERR`` and ``EPOLLHUP`` are always reported, whether asked for or
  not.  The loop wakes both callbacks of the fd on them, so whichever is
  registered runs and sees the error from its own syscall.
* Level-triggered mode is used: an fd that stays ready is reported on every
  poll until it is drained, which is what asyncio's readiness callbacks
  expect.
* The epoll fd is created with ``EPOLL_CLOEXEC`` (Python's default), so
  child processes never inherit it.  After ``fork()`` the child still shares
  the parent's epoll instance through the inherited fd; a loop created in
  the child makes its own.
* ``epoll_wait`` interrupted by a signal is retried by Python (PEP 475)
  after the signal handler ran, with the timeout recomputed.
* The timeout has millisecond granularity; Python rounds it up, so a timer
  never fires early because of the poll.
* CPython's ``epoll.poll`` takes None or -1 to block without end; PyPy's
  refuses None (TypeError: must be real number), so there the backend
  hands -1 on for it.
"""

from __future__ import annotations

import select
import sys
from collections.abc import Callable
from typing import Any

from ._events import READABLE, WRITABLE

__all__ = ["EpollBackend"]

_POLL_TAKES_NONE = sys.implementation.name != "pypy"

# The loop's bits are epoll's own (see _events), so masks pass through.
assert select.EPOLLIN == READABLE and select.EPOLLOUT == WRITABLE


class EpollBackend:
    """Readiness through one epoll instance."""

    __slots__ = ("_epoll", "_waiter", "poll")

    def __init__(self, wait: Callable[[int], Any] | None = None) -> None:
        self._epoll = select.epoll()
        # poll(timeout) -> [(fd, events)] is epoll's own method: None blocks,
        # and the masks need no translation (see _events), so the loop calls
        # straight into C.  ``wait``, given, makes a waiter from the epoll fd
        # whose poll the loop calls instead: the compiled build's EpollWait,
        # the same call without the 12 KiB allocation of its event array on
        # every poll (see the loop's default_backend call).  It has a close().
        self._waiter = None if wait is None else wait(self._epoll.fileno())
        if self._waiter is not None:
            self.poll = self._waiter.poll
        elif _POLL_TAKES_NONE:
            self.poll = self._epoll.poll
        else:
            self.poll = self._poll_without_none

    def _poll_without_none(self, timeout: float | None = None) -> list[tuple[int, int]]:
        return self._epoll.poll(-1 if timeout is None else timeout)

    def fileno(self) -> int:
        return self._epoll.fileno()

    def register(self, fd: int, events: int) -> None:
        self._epoll.register(fd, events)

    def modify(self, fd: int, events: int) -> None:
        self._epoll.modify(fd, events)

    def unregister(self, fd: int) -> None:
        try:
            self._epoll.unregister(fd)
        except OSError:
            # Already closed by its owner: the kernel dropped it for us.
            pass

    def close(self) -> None:
        if self._waiter is not None:
            self._waiter.close()
        self._epoll.close()
