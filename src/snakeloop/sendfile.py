"""``sock_sendfile`` and ``loop.sendfile``: a file to a stream, zero-copy when possible.

Two paths, as in asyncio:

* **native**: ``os.sendfile`` moves the bytes from the page cache to the
  socket inside the kernel.  The calls run in the loop's worker thread
  (``offload``), since a page-cache miss makes them read the disk: one
  burst of calls until the socket is full or the file ends, then the loop
  itself waits for the socket to become writable.  For
  ``loop.sendfile(transport, ...)`` the transport first stops reading and
  drains its write buffer, and hands its socket over for the duration (it
  refuses ``write()`` meanwhile).
* **fallback**: read the file in blocks (in the default executor, since a
  file read can block) and send them: with ``sock_sendall`` for a socket,
  through ``transport.write`` for a transport, waiting whenever the
  transport pauses writing.  For the transport, the protocol is swapped
  for a small one that turns pause/resume into a future, and swapped back
  at the end.

OS facts this module relies on:

* ``os.sendfile(out_fd, in_fd, offset, count)`` reads at ``offset`` and
  does not move the file's own position; the position is set with
  ``lseek`` once at the end, to just after the last byte sent, also on
  error and on cancellation.
* On a non-blocking socket it sends what fits in the socket buffer and
  returns that count, raises ``BlockingIOError`` when nothing fits, and
  returns 0 at the end of the file.
* It needs a file with a descriptor that supports mmap-like reads
  (regular files).  When the very first attempt fails with an ``OSError``,
  nothing has been sent and the fallback takes over; a failure after some
  bytes went out is the caller's error.  ``ENOTCONN`` after the peer went
  away mid-transfer is reported as ``ConnectionError``, as asyncio does.
* A single ``sendfile`` call is capped below 2 GiB on 32-bit builds.
"""

from __future__ import annotations

import errno
import io
import os
import socket
import sys
from asyncio import constants, protocols
from asyncio import transports as aio_transports
from asyncio.exceptions import SendfileNotAvailableError
from typing import IO, TYPE_CHECKING

from ._core.contract import LoopMixinBase
from .sockets import NOT_NONBLOCKING, check_ssl_socket, wait_ready

if TYPE_CHECKING:
    import asyncio

__all__ = ["SendfileMixin", "check_sendfile_params"]

_SendfileMode = constants._SendfileMode
_RETRY = (BlockingIOError, InterruptedError)
_MAX_CHUNK = sys.maxsize // 2 + 1

# Bytes one worker burst may send before it hands back to the loop: a burst
# costs a thread round trip (about 50 us), and a cancel waits for it to end.
_BURST_BYTES = 4 * 1024 * 1024

# Blocks of the transport fallback.  asyncio uses 16 KiB; a larger block
# saves executor round trips and still fits the default 64 KiB high-water
# mark of a transport.
_TRANSPORT_FALLBACK_BLOCK = 64 * 1024


def check_sendfile_params(
    sock: socket.socket, file: IO[bytes], offset: int, count: int | None
) -> None:
    """asyncio's argument checks for ``sock_sendfile``, with its messages."""
    if "b" not in getattr(file, "mode", "b"):
        raise ValueError("file should be opened in binary mode")
    if sock.type != socket.SOCK_STREAM:
        raise ValueError("only SOCK_STREAM type sockets are supported")
    if count is not None:
        if not isinstance(count, int):
            raise TypeError(f"count must be a positive integer (got {count!r})")
        if count <= 0:
            raise ValueError(f"count must be a positive integer (got {count!r})")
    if not isinstance(offset, int):
        raise TypeError(f"offset must be a non-negative integer (got {offset!r})")
    if offset < 0:
        raise ValueError(f"offset must be a non-negative integer (got {offset!r})")


class _Burst:
    """What one run of ``_send_burst`` did."""

    __slots__ = ("sent", "attempts", "end_of_file", "error")

    def __init__(self) -> None:
        self.sent = 0
        self.attempts = 0
        self.end_of_file = False
        self.error: OSError | None = None


def _send_burst(out_fd, in_fd, offset, count, chunk) -> _Burst:
    """In the worker: ``os.sendfile`` until the socket is full or the file ends.

    Also stops after ``count`` bytes (None: no limit) and after
    ``_BURST_BYTES``, so a cancel never waits long for the burst to end.
    Errors are returned, with the bytes sent before them.
    """
    burst = _Burst()
    while burst.sent < _BURST_BYTES:
        size = chunk
        if count is not None:
            size = min(count - burst.sent, _MAX_CHUNK)
            if size <= 0:
                break
        burst.attempts += 1
        try:
            sent = os.sendfile(out_fd, in_fd, offset + burst.sent, size)
        except _RETRY:
            break  # the socket is full: the loop waits until it is writable
        except OSError as exc:
            # Without the worker's traceback: it would lead, through the
            # worker's frames, back to this burst, a cycle; and the loop
            # thread raises the error with a traceback of its own.
            burst.error = exc.with_traceback(None)
            break
        if sent == 0:
            burst.end_of_file = True
            break
        burst.sent += sent
    return burst


class SendfileMixin(LoopMixinBase):
    """``sock_sendfile`` and ``sendfile``; builds on ``SocketMixin``."""

    # -- sockets ------------------------------------------------------------------

    async def sock_sendfile(
        self,
        sock: socket.socket,
        file: IO[bytes],
        offset: int = 0,
        count: int | None = None,
        *,
        fallback: bool | None = True,
    ) -> int:
        """Send ``file`` over the stream socket ``sock``; return the bytes sent.

        ``os.sendfile`` is used when the file allows it; otherwise the file
        is read and sent with ``sock_sendall``, unless ``fallback`` is false
        (then ``SendfileNotAvailableError``).  The file position ends just
        after the last byte sent.
        """
        if self._debug and sock.gettimeout() != 0:
            raise ValueError(NOT_NONBLOCKING)
        check_ssl_socket(sock)
        check_sendfile_params(sock, file, offset, count)
        try:
            return await self._sock_sendfile_native(sock, file, offset, count)
        except SendfileNotAvailableError:
            if not fallback:
                raise
        return await self._sock_sendfile_fallback(sock, file, offset, count)

    async def _sock_sendfile_native(self, sock, file, offset, count):
        if not hasattr(os, "sendfile"):
            raise SendfileNotAvailableError("os.sendfile() is not available")
        try:
            fileno = file.fileno()
        except (AttributeError, io.UnsupportedOperation):
            raise SendfileNotAvailableError("not a regular file") from None
        try:
            size = os.fstat(fileno).st_size
        except OSError:
            raise SendfileNotAvailableError("not a regular file") from None
        chunk = min(count or size, _MAX_CHUNK)
        if not chunk:
            return 0  # an empty file, and no count: nothing to send
        fd = sock.fileno()
        total = 0
        attempts = 0
        try:
            while True:
                left = None
                if count:
                    left = count - total
                    if left <= 0:
                        break
                # In the loop's worker thread: a page-cache miss reads the disk.
                call = self._call_blocking(_send_burst, fd, fileno, offset + total, left, chunk)
                cancelled = await call.finish()
                if not call.ran():
                    raise cancelled
                burst = call.result()
                total += burst.sent
                attempts += burst.attempts
                if cancelled is not None:
                    raise cancelled
                exc = burst.error
                if exc is not None:
                    burst = None
                    error = exc
                    if (
                        attempts > 1
                        and exc.errno == errno.ENOTCONN
                        and type(exc) is not ConnectionError
                    ):
                        # The peer went away mid-transfer: report it the
                        # same way on every POSIX system.
                        error = ConnectionError("socket is not connected", errno.ENOTCONN)
                    try:
                        if total == 0:
                            # Most likely a file sendfile() cannot read from:
                            # nothing went out, so the fallback can take over.
                            raise SendfileNotAvailableError("os.sendfile call failed") from error
                        if error is exc:
                            raise exc
                        raise error from exc
                    finally:
                        # The raised error's traceback keeps this frame, and
                        # ``error`` and ``exc`` lead back to it (or are it).
                        error = exc = None
                if burst.end_of_file or (count and total >= count):
                    break
                await self._sendfile_writable(fd)
        finally:
            # Just after the last byte sent, even when none was (the offset is
            # at or past the end): asyncio does so since gh-150107.
            os.lseek(fileno, offset + total, os.SEEK_SET)
        return total

    async def _sendfile_writable(self, fd):
        await wait_ready(self, fd, True, self._on_sendfile_writable, self.create_future())

    def _on_sendfile_writable(self, fut, fd):
        if not fut.done():
            self._remove_writer(fd)
            fut.set_result(None)

    async def _sock_sendfile_fallback(self, sock, file, offset, count):
        # Offset 0 too: the file may be positioned elsewhere (gh-150107).
        if hasattr(file, "seek"):
            file.seek(offset)
        # Read the size at call time: asyncio's tests patch it.
        blocksize = constants.SENDFILE_FALLBACK_READBUFFER_SIZE
        if count:
            blocksize = min(count, blocksize)
        buf = memoryview(bytearray(blocksize))
        total = 0
        try:
            while True:
                if count:
                    blocksize = min(count - total, blocksize)
                    if blocksize <= 0:
                        break
                view = buf[:blocksize]
                nread = await self.run_in_executor(None, file.readinto, view)
                if not nread:
                    break  # end of file
                await self.sock_sendall(sock, view[:nread])
                total += nread
            return total
        finally:
            if total > 0 and hasattr(file, "seek"):
                file.seek(offset + total)

    # -- transports -----------------------------------------------------------------

    async def sendfile(
        self,
        transport: aio_transports.WriteTransport,
        file: IO[bytes],
        offset: int = 0,
        count: int | None = None,
        *,
        fallback: bool = True,
    ) -> int:
        """Send ``file`` through ``transport``; return the bytes sent.

        A plain socket transport lends its socket to ``sock_sendfile``
        (zero-copy).  Others (TLS) get the file through ``write()`` with
        flow control, unless ``fallback`` is false.
        """
        if transport.is_closing():
            raise RuntimeError("Transport is closing")
        mode = getattr(transport, "_sendfile_compatible", _SendfileMode.UNSUPPORTED)
        if mode is _SendfileMode.UNSUPPORTED:
            raise RuntimeError(f"sendfile is not supported for transport {transport!r}")
        if mode is _SendfileMode.TRY_NATIVE:
            try:
                return await self._sendfile_native(transport, file, offset, count)
            except SendfileNotAvailableError:
                if not fallback:
                    raise
        if not fallback:
            raise RuntimeError(
                f"fallback is disabled and native sendfile is not "
                f"supported for transport {transport!r}"
            )
        return await self._sendfile_fallback(transport, file, offset, count)

    async def _sendfile_native(self, transp, file, offset, count):
        fd = transp._sock_fd
        # While the socket is lent out, the fd is not the transport's: the
        # sock_* calls below may register callbacks on it.
        lent = self._detach_transport(fd, transp)
        resume_reading = transp.is_reading()
        transp.pause_reading()
        try:
            # Bytes already written go out first; write() is refused from
            # here on ("sendfile is in progress").
            waiter = transp._make_empty_waiter()
        except BaseException:
            # Another sendfile holds the transport: leave it to that one.
            self._restore_transport(transp, fd, resume_reading, lent)
            raise
        try:
            await waiter
            return await self.sock_sendfile(transp._sock, file, offset, count, fallback=False)
        finally:
            transp._reset_empty_waiter()
            self._restore_transport(transp, fd, resume_reading, lent)

    def _restore_transport(self, transp, fd, resume_reading, lent):
        if resume_reading:
            transp.resume_reading()
        # Give the fd back unless the transport closed meanwhile.  While the
        # transport's socket is open, the fd number is not anybody else's.
        if lent and getattr(transp, "_sock", None) is not None:
            self._attach_transport(fd, transp)

    async def _sendfile_fallback(self, transp, file, offset, count):
        if hasattr(file, "seek"):  # offset 0 too, as above
            file.seek(offset)
        blocksize = min(count, _TRANSPORT_FALLBACK_BLOCK) if count else _TRANSPORT_FALLBACK_BLOCK
        buf = memoryview(bytearray(blocksize))
        total = 0
        proto = _FallbackProtocol(self, transp)
        try:
            while True:
                if count:
                    blocksize = min(count - total, blocksize)
                    if blocksize <= 0:
                        return total
                view = buf[:blocksize]
                nread = await self.run_in_executor(None, file.readinto, view)
                if not nread:
                    return total  # end of file
                await proto.drain()
                transp.write(view[:nread])
                total += nread
        finally:
            if total > 0 and hasattr(file, "seek"):
                file.seek(offset + total)
            proto.restore()


class _FallbackProtocol(protocols.Protocol):
    """Stands in for the transport's protocol while the fallback writes.

    Reading is paused, so nothing but flow control and connection loss can
    reach it; those it turns into the future ``drain()`` waits on, and
    ``connection_lost`` is passed on to the real protocol.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, transp: aio_transports.BaseTransport
    ) -> None:
        if not isinstance(transp, aio_transports._FlowControlMixin):
            raise TypeError("transport should be _FlowControlMixin instance")
        self._loop = loop
        self._transport = transp
        self._proto = transp.get_protocol()
        self._resume_reading = transp.is_reading()
        self._resume_writing = bool(getattr(transp, "_protocol_paused", False))
        transp.pause_reading()
        transp.set_protocol(self)
        # A future while writing is paused, else None.
        self._writable: asyncio.Future[bool] | None = (
            loop.create_future() if self._resume_writing else None
        )

    async def drain(self) -> None:
        if self._transport.is_closing():
            raise ConnectionError("Connection closed by peer")
        writable = self._writable
        if writable is not None:
            await writable

    def connection_made(self, transport: aio_transports.BaseTransport) -> None:
        raise RuntimeError("Invalid state: connection should have been established already.")

    def connection_lost(self, exc: Exception | None) -> None:
        writable = self._writable
        if writable is not None and not writable.done():
            # The peer went away before the whole file was written: that is
            # an error for the caller even when the close was clean.
            if exc is None:
                writable.set_exception(ConnectionError("Connection is closed by peer"))
            else:
                writable.set_exception(exc)
        self._proto.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        writable = self._writable
        if writable is not None:
            self._writable = None
            writable.set_result(False)

    def data_received(self, data: bytes) -> None:
        raise RuntimeError("Invalid state: reading should be paused")

    def eof_received(self) -> bool | None:
        raise RuntimeError("Invalid state: reading should be paused")

    def restore(self) -> None:
        self._transport.set_protocol(self._proto)
        if self._resume_reading:
            self._transport.resume_reading()
        writable = self._writable
        if writable is not None:
            if writable.done():
                # Set by connection_lost after drain() stopped looking at
                # it: mark its exception retrieved, the caller got one.
                if not writable.cancelled():
                    writable.exception()
            else:
                writable.cancel()  # nobody waits on it any more
        if self._resume_writing:
            self._proto.resume_writing()
