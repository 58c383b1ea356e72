"""Unix signal handlers that run as loop callbacks.

OS and CPython facts this module relies on:

* CPython's C-level signal handler writes the signal number, one byte, to
  the fd given to ``signal.set_wakeup_fd``, then runs the Python-level
  handler later, between bytecodes of the main thread.  The byte is what
  wakes a loop blocked in ``epoll_wait``; the Python-level handler here is
  a no-op.
* A byte is dropped when that fd's buffer is full.  asyncio shares one
  self-pipe between signal bytes and thread wakeups, so a flood of
  ``call_soon_threadsafe`` can fill it and lose signals.  snakeloop gives
  signals a pipe of their own; threads wake the loop through a separate
  eventfd that cannot fill up.  A pipe holds one byte per signal: 65,536 of
  them by default, and up to 1 MiB where ``F_SETPIPE_SZ`` allows (a Unix
  socketpair, by contrast, charges each one-byte send for a whole buffer
  and fills after a few hundred).  The pipe is drained on every iteration it
  is readable.
* Standard signals are not queued by the kernel: a signal raised while
  the same one is pending is merged into it.  That is delivery, not loss;
  every signal that reaches the C handler reaches its callback.
* ``set_wakeup_fd`` works only in the main thread and takes a
  non-blocking fd; it returns the fd it replaces, which is restored when
  the last handler is removed or the loop closes.
* ``siginterrupt(sig, False)`` makes interrupted syscalls restart instead
  of failing with EINTR in code that does not retry.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import warnings
from asyncio.coroutines import iscoroutine, iscoroutinefunction

from ._core.handles import Handle
from ._io import READABLE

__all__ = ["SignalsMixin"]

logger = logging.getLogger("asyncio")

_PIPE_SIZE = 1 << 20


def _sighandler_noop(signum, frame):
    """The Python-level handler: the wakeup byte does the work."""


def _check_signal(sig):
    if not isinstance(sig, int):
        raise TypeError(f"sig must be an int, not {sig!r}")
    if sig not in signal.valid_signals():
        raise ValueError(f"invalid signal number {sig}")


class SignalsMixin:
    """``add_signal_handler`` and ``remove_signal_handler``."""

    def _init_signals(self):
        self._signal_handlers = {}
        self._signal_rfd = -1  # our wakeup pipe, opened on first use
        self._signal_wfd = -1
        self._previous_wakeup_fd = -1

    def _open_signal_pipe(self):
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            import fcntl

            fcntl.fcntl(wfd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        except (ImportError, AttributeError, OSError):
            pass  # the default 64 KiB is still 65,536 pending signals
        self._signal_rfd = rfd
        self._signal_wfd = wfd
        # Watched by the backend but kept out of the reader table: run_once
        # reads it while it collects the ready fds (see _signal_fd in the
        # core), and user code cannot replace or remove it with
        # add_reader/remove_reader.
        self._io.register(rfd, READABLE)
        self._signal_fd = rfd

    def _read_signals(self):
        while True:
            try:
                data = os.read(self._signal_rfd, 65536)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                return
            for signum in data:
                self._handle_signal(signum)

    def _handle_signal(self, sig):
        handle = self._signal_handlers.get(sig)
        if handle is None:
            return
        if handle._cancelled:
            self.remove_signal_handler(sig)
        else:
            self._ready.append(handle)

    def add_signal_handler(self, sig, callback, *args):
        """Run ``callback(*args)`` on the loop when signal ``sig`` arrives."""
        if iscoroutine(callback) or iscoroutinefunction(callback):
            raise TypeError("coroutines cannot be used with add_signal_handler()")
        _check_signal(sig)
        self._check_closed()
        if self._signal_rfd < 0:
            self._open_signal_pipe()
        try:
            # Raises ValueError outside the main thread.
            previous = signal.set_wakeup_fd(self._signal_wfd)
        except (ValueError, OSError) as exc:
            raise RuntimeError(str(exc)) from None
        if not self._signal_handlers and previous != self._signal_wfd:
            self._previous_wakeup_fd = previous
        handle = Handle(callback, args, self, None)
        self._signal_handlers[sig] = handle
        try:
            signal.signal(sig, _sighandler_noop)
            signal.siginterrupt(sig, False)
        except OSError as exc:
            del self._signal_handlers[sig]
            if not self._signal_handlers:
                self._restore_wakeup_fd()
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught") from None
            raise

    def remove_signal_handler(self, sig):
        """Remove the handler of ``sig``; True if there was one."""
        _check_signal(sig)
        try:
            del self._signal_handlers[sig]
        except KeyError:
            return False
        handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        try:
            signal.signal(sig, handler)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught") from None
            raise
        if not self._signal_handlers:
            self._restore_wakeup_fd()
        return True

    def _restore_wakeup_fd(self):
        try:
            signal.set_wakeup_fd(self._previous_wakeup_fd)
        except (ValueError, OSError) as exc:
            logger.info("set_wakeup_fd(%d) failed: %s", self._previous_wakeup_fd, exc)
        self._previous_wakeup_fd = -1

    def _close_signals(self):
        if sys.is_finalizing():
            if self._signal_handlers:
                warnings.warn(
                    f"Closing the loop {self!r} on interpreter shutdown "
                    f"stage, skipping signal handlers removal",
                    ResourceWarning,
                    stacklevel=1,
                    source=self,
                )
                self._signal_handlers.clear()
        else:
            for sig in list(self._signal_handlers):
                self.remove_signal_handler(sig)
        self._close_signal_pipe()

    def _close_signal_pipe(self):
        self._signal_fd = -1
        if self._signal_rfd >= 0:
            # The backend is still open here: loop.close() closes it last,
            # and after fork() it is the no-op stand-in.
            self._io.unregister(self._signal_rfd)
            os.close(self._signal_rfd)
            os.close(self._signal_wfd)
            self._signal_rfd = self._signal_wfd = -1

    def _drop_signals_after_fork(self):
        """In a forked child: stop the inherited wakeup fd, close our copies.

        The handlers stay installed at the Python level (the child may run a
        new loop that replaces them); only this loop's fds are let go.
        """
        if self._signal_wfd < 0:
            return
        try:
            previous = signal.set_wakeup_fd(-1)
            if previous != self._signal_wfd:
                # Somebody else's wakeup fd: put it back.
                signal.set_wakeup_fd(previous)
        except (ValueError, OSError):
            pass
        self._close_signal_pipe()
