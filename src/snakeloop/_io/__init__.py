"""The OS multiplexer behind one narrow interface.

A backend watches file descriptors for readiness and nothing else:

* ``register(fd, events)``, ``modify(fd, events)``, ``unregister(fd)``;
* ``poll(timeout) -> list[(fd, events)]`` where ``timeout`` is seconds,
  ``None`` blocks and ``0`` returns at once (a method, or any callable
  attribute: the epoll backend hands out epoll's own);
* ``close()`` and ``fileno()``.

``events`` is a mask of ``READABLE`` and ``WRITABLE``.  The loop keeps the
table of which callback belongs to which fd; a backend knows only masks.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ._events import READABLE, WRITABLE

if TYPE_CHECKING:
    from .epoll import EpollBackend
    from .poll import PollBackend

    class IOBackend(Protocol):
        """The interface above, for the type checker: what ``Loop(io_backend=)`` takes."""

        def register(self, fd: int, events: int) -> None: ...
        def modify(self, fd: int, events: int) -> None: ...
        def unregister(self, fd: int) -> None: ...
        def poll(self, timeout: float | None, /) -> list[tuple[int, int]]: ...
        def close(self) -> None: ...
        def fileno(self) -> int: ...


__all__ = ["READABLE", "WRITABLE", "default_backend"]


def default_backend(epoll_wait: Callable[[int], Any] | None = None) -> EpollBackend | PollBackend:
    """The best backend this platform has: epoll, else poll.

    ``epoll_wait(fd)``, given, makes the epoll backend's ``poll`` (see
    ``EpollBackend``).
    """
    if hasattr(select, "epoll"):
        from .epoll import EpollBackend

        return EpollBackend(epoll_wait)
    from .poll import PollBackend

    return PollBackend()
