"""Pipe transports: what ``connect_read_pipe`` and ``connect_write_pipe`` return.

OS facts this module relies on:

* Only pipes, FIFOs, sockets and character devices (ttys, PTYs,
  ``/dev/null``) can be watched for readiness.  A regular file is always
  "ready" and epoll refuses it with EPERM, so the file type is checked with
  ``fstat`` before anything is registered.
* ``O_NONBLOCK`` belongs to the open file description, not to the fd: a
  ``dup()`` of the fd, or another process holding the same pipe, sees the
  change too.  asyncio sets it all the same, and so does this module.
* A read end returns ``b""`` once every write end is closed and the buffer
  is drained: that is EOF.
* A PTY master's ``read()`` fails with EIO on Linux once the slave side is
  closed.  That is how a PTY says EOF, so it is not worth an error report.
* The write end of a pipe never has data to read.  When the last read end
  closes, poll and epoll report an error condition on it (POLLERR), which
  the backends pass on as "readable".  Watching the write end for reading
  is therefore how the transport learns that the reader is gone before a
  write fails.  A socket reports the peer's close the same way.  Character
  devices give no such signal, so nothing is watched for them.
* Writing to a pipe whose reader is gone fails with EPIPE
  (``BrokenPipeError``): CPython sets SIGPIPE to "ignore" at start-up, so
  the write returns an error instead of killing the process.
* A non-blocking write to a pipe may be partial (or fail with EAGAIN) as
  soon as the pipe buffer (64 KiB by default on Linux) is full; the rest is
  buffered here and written when the fd reports writable.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import stat
import warnings
from asyncio import constants
from typing import TYPE_CHECKING, Any

from .._core.futures import _set_result_unless_cancelled
from .errors import report_transport_error
from .flowcontrol import FlowControlMixin

if TYPE_CHECKING:
    from .._core.contract import LoopContract

__all__ = ["ReadPipeTransport", "WritePipeTransport"]

logger = logging.getLogger("asyncio")


def _schedule_connection_lost(transport: Any, exc: BaseException | None) -> None:
    loop = transport._loop
    if loop.is_closed():
        # Nothing will ever run connection_lost() (say, a transport closed by
        # a finalizer after its loop was closed): release the fd now instead
        # of raising "Event loop is closed" from call_soon().
        transport._drop_pipe()
    else:
        loop.call_soon(transport._call_connection_lost, exc)


class _PipeEnd:
    """What both pipe transports do alike: take the pipe, and say what they are."""

    _extra: dict[str, Any]
    _loop: Any
    _pipe: Any
    _fileno: Any
    _protocol: Any
    _closing: bool

    def _take_pipe(self, loop: LoopContract, pipe: Any, protocol: Any, refusal: str) -> int:
        """Hold ``pipe`` and make it non-blocking; its ``st_mode``.

        A file that is not a pipe, socket or character device is refused with
        ``ValueError(refusal)``, asyncio's message for each transport.
        """
        self._extra["pipe"] = pipe
        self._loop = loop
        self._pipe = pipe
        self._fileno = pipe.fileno()
        self._protocol = protocol
        mode = os.fstat(self._fileno).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            # Drop the pipe first so that __del__ does not call it unclosed.
            self._pipe = None
            self._fileno = None
            self._protocol = None
            raise ValueError(refusal)
        os.set_blocking(self._fileno, False)
        return mode

    def _live_state(self) -> list[str]:
        """What __repr__ says of an open pipe whose loop still runs."""
        raise NotImplementedError

    def __repr__(self) -> str:
        info = [self.__class__.__name__]
        if self._pipe is None:
            info.append("closed")
        elif self._closing:
            info.append("closing")
        info.append(f"fd={self._fileno}")
        loop = self._loop
        if self._pipe is not None and loop is not None and not loop.is_closed():
            info += self._live_state()
        elif self._pipe is not None:
            info.append("open")
        else:
            info.append("closed")
        return "<{}>".format(" ".join(info))


class ReadPipeTransport(_PipeEnd, asyncio.ReadTransport):
    """Reads a pipe, FIFO, socket or character device into a protocol."""

    # One read per readiness event takes at most this much, as in asyncio.
    max_size = 256 * 1024

    _extra: dict[str, Any]

    def __init__(
        self,
        loop: LoopContract,
        pipe: Any,
        protocol: asyncio.BaseProtocol,
        waiter: asyncio.Future[None] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(extra)
        self._closing = False
        self._paused = False
        self._polling = False
        self._take_pipe(loop, pipe, protocol, "Pipe transport is for pipes/sockets only.")

        loop.call_soon(protocol.connection_made, self)
        # Reading starts only after connection_made() has run.
        loop.call_soon(self._start_reading)
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None)

    def _start_reading(self) -> None:
        if not self.is_reading():
            return
        self._loop._add_reader(self._fileno, self._read_ready)
        self._polling = True

    def _stop_reading(self) -> None:
        self._polling = False
        self._loop._remove_reader(self._fileno)

    def is_reading(self) -> bool:
        return not self._paused and not self._closing

    def _live_state(self) -> list[str]:
        return ["polling" if self._polling else "idle"]

    def _read_ready(self) -> None:
        try:
            data = os.read(self._fileno, self.max_size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal_error(exc, "Fatal read error on pipe transport")
            return
        if data:
            self._protocol.data_received(data)
            return
        if self._loop.get_debug():
            logger.info("%r was closed by peer", self)
        self._closing = True
        self._stop_reading()
        self._loop.call_soon(self._protocol.eof_received)
        self._loop.call_soon(self._call_connection_lost, None)

    def pause_reading(self) -> None:
        if not self.is_reading():
            return
        self._paused = True
        self._stop_reading()
        if self._loop.get_debug():
            logger.debug("%r pauses reading", self)

    def resume_reading(self) -> None:
        if self._closing or not self._paused:
            return
        self._paused = False
        self._loop._add_reader(self._fileno, self._read_ready)
        self._polling = True
        if self._loop.get_debug():
            logger.debug("%r resumes reading", self)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._close(None)

    def __del__(self, _warn: Any = warnings.warn) -> None:
        if self._pipe is not None:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self._pipe.close()

    def _fatal_error(
        self, exc: BaseException, message: str = "Fatal error on pipe transport"
    ) -> None:
        # A PTY whose other side closed: EOF, not an error worth a report.
        pty_closed = isinstance(exc, OSError) and exc.errno == errno.EIO
        report_transport_error(self, exc, message, expected=pty_closed)
        self._close(exc)

    def _close(self, exc: BaseException | None) -> None:
        self._closing = True
        self._stop_reading()
        _schedule_connection_lost(self, exc)

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._drop_pipe()

    def _drop_pipe(self) -> None:
        self._polling = False
        self._pipe.close()
        self._pipe = None
        self._protocol = None
        # Done with the loop: only __repr__ still looks, and checks for None.
        self._loop = None  # type: ignore[assignment]


class WritePipeTransport(_PipeEnd, FlowControlMixin, asyncio.WriteTransport):
    """Buffers writes to a pipe, FIFO, socket or character device."""

    _extra: dict[str, Any]

    def __init__(
        self,
        loop: LoopContract,
        pipe: Any,
        protocol: asyncio.BaseProtocol,
        waiter: asyncio.Future[None] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        # Not super(): that would run asyncio's _FlowControlMixin.__init__,
        # whose work FlowControlMixin's defaults and the lines below do.
        asyncio.BaseTransport.__init__(self, extra)
        self._buffer = bytearray()
        self._conn_lost = 0
        self._closing = False  # set by close() and write_eof()
        self._writing = False
        self._set_write_buffer_limits()
        mode = self._take_pipe(
            loop, pipe, protocol, "Pipe transport is only for pipes, sockets and character devices"
        )
        loop.call_soon(protocol.connection_made, self)
        if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
            # Readable means the reader went away (see the module docstring);
            # watched only once connection_made() has run.
            loop.call_soon(self._watch_reader_gone)
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None)

    def _live_state(self) -> list[str]:
        return ["polling" if self._writing else "idle", f"bufsize={self.get_write_buffer_size()}"]

    def get_write_buffer_size(self) -> int:
        return len(self._buffer)

    def _watch_reader_gone(self) -> None:
        # Skipped when closed in the meantime: a reader added now would stay
        # registered for an fd that connection_lost() is about to close.
        if not self._closing:
            self._loop._add_reader(self._fileno, self._read_ready)

    def _read_ready(self) -> None:
        # The read end was closed.
        if self._loop.get_debug():
            logger.info("%r was closed by peer", self)
        if self._buffer:
            self._close(BrokenPipeError())
        else:
            self._close()

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            # asyncio checks this with an assert; the same exception type.
            raise AssertionError(repr(data))
        if isinstance(data, bytearray):
            data = memoryview(data)
        if not data:
            return

        if self._conn_lost or self._closing:
            if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("pipe closed by peer or os.write(pipe, data) raised exception.")
            self._conn_lost += 1
            return

        if not self._buffer:
            # Nothing queued: try to write at once.
            try:
                n = os.write(self._fileno, data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._conn_lost += 1
                self._fatal_error(exc, "Fatal write error on pipe transport")
                return
            if n == len(data):
                return
            if n > 0:
                data = memoryview(data)[n:]
            self._loop._add_writer(self._fileno, self._write_ready)
            self._writing = True

        self._buffer += data
        self._maybe_pause_protocol()

    def _write_ready(self) -> None:
        try:
            n = os.write(self._fileno, self._buffer)
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._buffer.clear()
            self._conn_lost += 1
            # With the buffer now empty, _close() would not remove the writer.
            self._stop_writing()
            self._fatal_error(exc, "Fatal write error on pipe transport")
            return
        if n == len(self._buffer):
            self._buffer.clear()
            self._stop_writing()
            self._maybe_resume_protocol()  # may write more
            if self._closing:
                self._loop._remove_reader(self._fileno)
                self._call_connection_lost(None)
            return
        if n > 0:
            del self._buffer[:n]

    def _stop_writing(self) -> None:
        self._writing = False
        self._loop._remove_writer(self._fileno)

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if self._closing:
            return
        self._closing = True
        if not self._buffer or self._loop.is_closed():
            self._buffer.clear()
            self._loop._remove_reader(self._fileno)
            _schedule_connection_lost(self, None)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._pipe is not None and not self._closing:
            # Closing a write pipe is write_eof(): flush, then close.
            self.write_eof()

    def __del__(self, _warn: Any = warnings.warn) -> None:
        if self._pipe is not None:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self._pipe.close()

    def abort(self) -> None:
        self._close(None)

    def _fatal_error(
        self, exc: BaseException, message: str = "Fatal error on pipe transport"
    ) -> None:
        # EPIPE and friends go to connection_lost(), not to the handler.
        report_transport_error(self, exc, message, expected=isinstance(exc, OSError))
        self._close(exc)

    def _close(self, exc: BaseException | None = None) -> None:
        self._closing = True
        if self._buffer:
            self._stop_writing()
        self._buffer.clear()
        self._loop._remove_reader(self._fileno)
        _schedule_connection_lost(self, exc)

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._drop_pipe()

    def _drop_pipe(self) -> None:
        self._pipe.close()
        self._pipe = None
        self._protocol = None
        # Done with the loop: only __repr__ still looks, and checks for None.
        self._loop = None  # type: ignore[assignment]
