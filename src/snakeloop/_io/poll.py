"""poll(2) backend: the portable fallback where epoll is missing.

OS facts this module relies on:

* poll keeps no kernel state: the interest set is passed on every call, so
  closing an fd needs no unregistration in the kernel, only here.
* ``POLLERR``, ``POLLHUP`` and ``POLLNVAL`` are reported whether asked for
  or not; they wake both the reader and the writer so each sees the error.
* The timeout is in milliseconds; it is rounded up so timers never fire
  early.
"""

from __future__ import annotations

import select

from ._events import READABLE, WRITABLE

__all__ = ["PollBackend"]

_TO_POLL = (0, select.POLLIN, select.POLLOUT, select.POLLIN | select.POLLOUT)
_NOT_OUT = ~select.POLLOUT
_NOT_IN = ~select.POLLIN


class PollBackend:
    """Readiness through poll(2)."""

    __slots__ = ("_poller",)

    def __init__(self) -> None:
        self._poller = select.poll()

    def fileno(self) -> int:
        return -1

    def register(self, fd: int, events: int) -> None:
        self._poller.register(fd, _TO_POLL[events])

    def modify(self, fd: int, events: int) -> None:
        self._poller.modify(fd, _TO_POLL[events])

    def unregister(self, fd: int) -> None:
        try:
            self._poller.unregister(fd)
        except KeyError:
            pass

    def poll(self, timeout: float | None) -> list[tuple[int, int]]:
        if timeout is not None:
            timeout = -(-timeout * 1000.0 // 1) if timeout > 0 else 0
        ready = []
        for fd, ev in self._poller.poll(timeout):
            mask = 0
            if ev & _NOT_OUT:
                mask = READABLE
            if ev & _NOT_IN:
                mask |= WRITABLE
            ready.append((fd, mask))
        return ready

    def close(self) -> None:
        self._poller = None
