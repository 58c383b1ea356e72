"""Waking a loop that is blocked in poll, from another thread.

OS facts this module relies on:

* An eventfd is one fd holding a 64-bit counter: every write adds to it and
  one read drains it whole.  Writes never fail for being "full" until the
  counter nears 2**64, so a flood of wakeups cannot lose one (a self-pipe
  can fill up and drop bytes).
* Where eventfd is missing, a non-blocking socketpair is used instead; a
  full buffer there means a wakeup is already pending, so dropping that
  write loses nothing.
* Both ends are created close-on-exec, so subprocesses do not inherit them.
"""

from __future__ import annotations

import os
import socket

__all__ = ["Waker"]


class Waker:
    """An fd that becomes readable when ``wake()`` is called."""

    __slots__ = ("_rfd", "_wfd", "_sock_pair", "wake")

    def __init__(self) -> None:
        if hasattr(os, "eventfd"):
            fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._rfd = self._wfd = fd
            self._sock_pair = None
            self.wake = self._wake_eventfd
        else:  # pragma: no cover - non-Linux fallback
            r, w = socket.socketpair()
            r.setblocking(False)
            w.setblocking(False)
            self._sock_pair = (r, w)
            self._rfd = r.fileno()
            self._wfd = w.fileno()
            self.wake = self._wake_socket

    def fileno(self) -> int:
        return self._rfd

    def _wake_eventfd(self) -> None:
        try:
            os.eventfd_write(self._wfd, 1)
        except OSError:
            # Closed under us by loop.close() racing a late thread: nobody is
            # left to wake.
            pass

    def _wake_socket(self) -> None:  # pragma: no cover - non-Linux fallback
        try:
            os.write(self._wfd, b"\0")
        except OSError:
            pass

    def drain(self) -> None:
        try:
            if self._sock_pair is None:
                os.eventfd_read(self._rfd)
            else:  # pragma: no cover - non-Linux fallback
                while os.read(self._rfd, 4096):
                    pass
        except OSError:
            pass

    def close(self) -> None:
        if self._sock_pair is None:
            if self._rfd >= 0:
                os.close(self._rfd)
        else:  # pragma: no cover - non-Linux fallback
            for s in self._sock_pair:
                s.close()
        self._rfd = self._wfd = -1
