"""poll(2) backend: the portable fallback where epoll is missing.

OS facts this module relies on:

* poll keeps no kernel state: the interest set is passed on every call, so
  closing an fd needs no unregistration in the kernel, only here.
* ``POLLERR``, ``POLLHUP`` and ``POLLNVAL`` are reported whether asked for
  or not; the loop wakes both the reader and the writer on them, so each
  sees the error.
* The timeout is in milliseconds; it is rounded up so timers never fire
  early.
"""

from __future__ import annotations

import select

from ._events import READABLE, WRITABLE

__all__ = ["PollBackend"]

# The loop's bits are poll's own (see _events), so masks pass through.
assert select.POLLIN == READABLE and select.POLLOUT == WRITABLE


class PollBackend:
    """Readiness through poll(2)."""

    __slots__ = ("_poller",)

    def __init__(self) -> None:
        self._poller = select.poll()

    def fileno(self) -> int:
        return -1

    def register(self, fd: int, events: int) -> None:
        self._poller.register(fd, events)

    def modify(self, fd: int, events: int) -> None:
        self._poller.modify(fd, events)

    def unregister(self, fd: int) -> None:
        try:
            self._poller.unregister(fd)
        except KeyError:
            pass

    def poll(self, timeout: float | None) -> list[tuple[int, int]]:
        if timeout is not None:
            # Milliseconds, rounded up so a timer never fires early.
            timeout = -(-timeout * 1000.0 // 1) if timeout > 0 else 0
        return self._poller.poll(timeout)

    def close(self) -> None:
        # poll keeps no kernel state: dropping the poller is all closing does.
        try:
            del self._poller
        except AttributeError:
            pass  # closed already
