"""Unix signal handlers that run as loop callbacks: the loop's ``SignalHandlers``.

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
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from ._core.callbackcheck import is_coroutine_callback
from ._core.handles import Handle

if TYPE_CHECKING:
    from ._core.contract import LoopMixinBase

__all__ = ["SignalHandlers"]

logger = logging.getLogger("asyncio")

_PIPE_SIZE = 1 << 20


def _sighandler_noop(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler: the wakeup byte does the work."""


def _check_signal(sig: object) -> None:
    if not isinstance(sig, int):
        raise TypeError(f"sig must be an int, not {sig!r}")
    if sig not in signal.valid_signals():
        raise ValueError(f"invalid signal number {sig}")


class SignalHandlers:
    """A loop's signal handlers, and the wakeup pipe their signals arrive through.

    ``loop`` is used only through the loop contract (``_check_closed``,
    ``_ready``, ``_add_internal_reader``, ``_remove_internal_reader``) and
    its public methods.  The pipe is opened on the first handler and read by
    the core during dispatch, so a handler runs in the iteration that saw
    its signal.
    """

    __slots__ = ("_loop", "_handlers", "_rfd", "_wfd", "_previous_wakeup_fd")

    def __init__(self, loop: LoopMixinBase) -> None:
        self._loop = loop
        self._handlers: dict[int, Handle] = {}
        self._rfd = -1  # the wakeup pipe, opened on first use
        self._wfd = -1
        self._previous_wakeup_fd = -1

    def _open_pipe(self) -> None:
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            import fcntl

            fcntl.fcntl(wfd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        except (ImportError, AttributeError, OSError):
            pass  # the default 64 KiB is still 65,536 pending signals
        try:
            # Kept out of the reader table: user code cannot replace or
            # remove it with add_reader/remove_reader.
            self._loop._add_internal_reader(rfd, self._drain)
        except BaseException:
            os.close(rfd)
            os.close(wfd)
            raise
        self._rfd = rfd
        self._wfd = wfd

    def _drain(self) -> None:
        """Queue the handler of every signal number waiting in the pipe."""
        while True:
            try:
                data = os.read(self._rfd, 65536)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                return
            for signum in data:
                self._handle_signal(signum)

    def _handle_signal(self, sig: int) -> None:
        handle = self._handlers.get(sig)
        if handle is None:
            return
        if handle._cancelled:
            self._loop.remove_signal_handler(sig)
        elif self._loop._signal_inbox is not None:
            self._loop._signal_inbox.put(0, handle)  # a seeded loop defers it, in order
        else:
            self._loop._ready.append(handle)

    def has_handlers(self) -> bool:
        """Whether a handler is installed: a signal can still wake the loop."""
        return bool(self._handlers)

    def add(self, sig: int, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        """``loop.add_signal_handler(sig, callback, *args)``."""
        if is_coroutine_callback(callback):
            raise TypeError("coroutines cannot be used with add_signal_handler()")
        _check_signal(sig)
        self._loop._check_closed()
        if self._rfd < 0:
            self._open_pipe()
        try:
            # Raises ValueError outside the main thread.
            previous = signal.set_wakeup_fd(self._wfd)
        except (ValueError, OSError) as exc:
            raise RuntimeError(str(exc)) from None
        if not self._handlers and previous != self._wfd:
            self._previous_wakeup_fd = previous
        handle = Handle(callback, args, self._loop, None)
        self._handlers[sig] = handle
        try:
            signal.signal(sig, _sighandler_noop)
            signal.siginterrupt(sig, False)
        except OSError as exc:
            del self._handlers[sig]
            if not self._handlers:
                self._restore_wakeup_fd()
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught") from None
            raise

    def remove(self, sig: int) -> bool:
        """``loop.remove_signal_handler(sig)``: True if there was a handler."""
        _check_signal(sig)
        try:
            del self._handlers[sig]
        except KeyError:
            return False
        handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        try:
            signal.signal(sig, handler)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught") from None
            raise
        if not self._handlers:
            self._restore_wakeup_fd()
        return True

    def _restore_wakeup_fd(self) -> None:
        try:
            signal.set_wakeup_fd(self._previous_wakeup_fd)
        except (ValueError, OSError) as exc:
            logger.info("set_wakeup_fd(%d) failed: %s", self._previous_wakeup_fd, exc)
        self._previous_wakeup_fd = -1

    def close(self) -> None:
        """The loop is closing: remove every handler, close the pipe."""
        loop = self._loop
        if sys.is_finalizing():
            if self._handlers:
                warnings.warn(
                    f"Closing the loop {loop!r} on interpreter shutdown "
                    f"stage, skipping signal handlers removal",
                    ResourceWarning,
                    stacklevel=1,
                    source=loop,
                )
                self._handlers.clear()
        else:
            for sig in list(self._handlers):
                loop.remove_signal_handler(sig)
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self._rfd >= 0:
            # The loop's backend is still open here: loop.close() closes it
            # last, and after fork() it is the no-op stand-in.
            self._loop._remove_internal_reader(self._rfd)
            os.close(self._rfd)
            os.close(self._wfd)
            self._rfd = self._wfd = -1

    def disown_after_fork(self) -> None:
        """In a forked child: stop the inherited wakeup fd, close our copies.

        The handlers stay installed at the Python level (the child may run a
        new loop that replaces them); only this loop's fds are let go.
        """
        if self._wfd < 0:
            return
        previous = signal.set_wakeup_fd(-1)
        if previous != self._wfd:
            # Somebody else's wakeup fd: put it back.
            signal.set_wakeup_fd(previous)
        self._close_pipe()
