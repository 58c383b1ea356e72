# cython: annotation_typing=False
"""Stream transports for connected TCP and Unix sockets.

OS facts this module relies on:

* The socket is non-blocking.  ``send`` may take only part of the data
  (or none: ``BlockingIOError``); the rest waits in the write buffer until
  epoll reports the socket writable.  ``recv`` returns ``b""`` only at EOF.
* A write is tried at once when the buffer is empty, so a small reply costs
  one syscall and no poll.  ``sendmsg`` sends many buffered chunks in one
  syscall, up to ``SC_IOV_MAX`` of them.
* Reads ask ``recv`` for 64 KiB.  ``recv(n)`` allocates an ``n``-byte
  ``bytes`` object, reads straight into it and shrinks it to the received
  size, so the data is copied once, by the kernel, and a small read leaves
  nothing for glibc to trim.
* A read that fills all 64 KiB means a bulk transfer: until a read returns
  under 16 KiB, reads ask for 256 KiB, so a 100 KiB message is one read and
  one send.  (Stopping at the first read under 64 KiB would flip back and
  forth on a 100 KiB message, read as 64 + 36 KiB every time.)  Before the
  first bulk read, ``allocator.keep_large_reads_on_heap`` makes sure glibc
  serves 256 KiB from the heap, not with mmap, mremap and munmap per read
  (see that module).  Reading into the loop's shared buffer and copying out
  avoided that too, but with 50 connections streaming 100 KiB messages the
  exact-size copies made glibc trim and regrow the heap (4,039 ``brk`` calls
  against 127 in a 2 s run), and the server spent 1.7x the CPU per message.
* ``shutdown(SHUT_WR)`` sends FIN after everything queued in the kernel;
  the socket stays readable (half-close).
* ``TCP_NODELAY`` is set on TCP sockets: request/response protocols would
  otherwise wait for Nagle's algorithm on every small write.
* The fd is unregistered from epoll before the socket is closed, so a
  reused fd number never inherits this transport's registration.
"""

from __future__ import annotations

import itertools
import logging
import socket
import sys
from asyncio import constants, protocols, transports
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

if False:  # Cython reads this import when it compiles the module (setup.py)
    import cython
else:
    from .._core import cythonshim as cython
from .allocator import keep_large_reads_on_heap
from .recvbuffer import RECV_BUFFER_SIZE
from .socketbase import SocketTransportBase, show_as

if not cython.compiled:
    from .socketcalls import sock_recv, sock_send

if TYPE_CHECKING:
    import asyncio
    from contextvars import Context

    from .._core.contract import LoopContract

__all__ = ["AcceptingServer", "SocketTransport", "set_nodelay"]

logger = logging.getLogger("asyncio")

_PY312 = sys.version_info >= (3, 12)
_PY313 = sys.version_info >= (3, 13)
_HAS_SENDMSG = hasattr(socket.socket, "sendmsg")
try:
    _IOV_MAX = max(16, __import__("os").sysconf("SC_IOV_MAX"))
except (AttributeError, ValueError, OSError):
    _IOV_MAX = 16

READ_SIZE = 64 * 1024
# Whether this build may call the socket's fd itself (see _read_data).
_C_CALLS = cython.compiled
BULK_READ_SIZE = RECV_BUFFER_SIZE  # asyncio's largest read, 256 KiB
BULK_READ_MIN = 16 * 1024


class AcceptingServer(Protocol):
    """What a listening server offers the connections it accepted."""

    def _attach(self, transport: transports.BaseTransport) -> None: ...

    def _detach(self, transport: transports.BaseTransport) -> None: ...


def set_nodelay(sock: socket.socket) -> None:
    if (
        hasattr(socket, "TCP_NODELAY")
        and sock.family in (socket.AF_INET, socket.AF_INET6)
        and sock.type == socket.SOCK_STREAM
        and sock.proto == socket.IPPROTO_TCP
    ):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class SocketTransport(SocketTransportBase):
    """A connected TCP or Unix stream socket, driven by readiness callbacks."""

    __slots__ = (
        "_buffered_protocol",
        "_bulk_reads",
        "_chunk_size",
        "_empty_waiter",
        "_eof",
        "_eof_received",
        "_send_at_once",
        "_server",
    )

    _start_tls_compatible = True
    _sendfile_compatible = constants._SendfileMode.TRY_NATIVE

    def __init__(
        self,
        loop: LoopContract,
        sock: socket.socket,
        protocol: protocols.BaseProtocol,
        waiter: asyncio.Future[None] | None = None,
        extra: dict[str, Any] | None = None,
        server: AcceptingServer | None = None,
        context: Context | None = None,
    ) -> None:
        SocketTransportBase.__init__(self, loop, sock, extra, context)
        write_chunking = loop._write_chunking
        if write_chunking is not None:
            # A seeded loop's ``chunking_writes``: every send of this transport
            # takes a drawn part of what it is offered (snakeloop.chunking).
            self._sock = write_chunking.view(sock)
            self._direct_calls = False
        self._buffered_protocol: bool | None = None  # set_protocol says which reader fits
        # A seeded loop's ``chunking`` (snakeloop.chunking) draws the size of
        # each read: its size function, or None.  Chunked reads of a
        # Protocol take the bulk branch of _read_data for good, so the
        # choice costs a bulk read one test and a small read none.
        chunking = loop._chunking
        self._chunk_size = None if chunking is None else chunking.size
        self._bulk_reads = chunking is not None  # see _recv_bulk and the module docstring
        self.set_protocol(protocol)
        self._server = server
        self._eof = False
        self._eof_received = False  # the peer's EOF was seen and kept open
        self._empty_waiter = None
        self._send_at_once = True  # see _refresh_send_at_once
        if server is not None:
            server._attach(self)  # type: ignore[arg-type]  # a Transport by show_as
        set_nodelay(sock)
        self._start(waiter)

    # -- protocol --------------------------------------------------------------

    def set_protocol(self, protocol: protocols.BaseProtocol) -> None:
        buffered = isinstance(protocol, protocols.BufferedProtocol)
        previous = self._buffered_protocol
        self._buffered_protocol = buffered
        self._protocol = protocol
        self._protocol_connected = True
        if previous is None or previous == buffered or self._loop is None:
            return
        loop = self._loop
        reader = loop._get_reader(self._sock_fd)
        if reader is not None:
            # Switch the registered reader to the new kind of protocol.  In the
            # context the old one had: asyncio keeps its reader and only
            # changes what it calls.
            loop._add_reader(self._sock_fd, *self._reader(), context=reader.get_context())

    def _reader(self):
        """The read callback for the protocol's kind, and its arguments."""
        # Made when needed, not kept in an attribute: a bound method stored
        # on the transport would make it a reference cycle of its own, and
        # every closed transport would wait for the cyclic collector.
        if not self._buffered_protocol:
            return (self._read_data,)
        if self._chunk_size is None:
            return (self._read_into_protocol_buffer,)
        return (self._read_into_protocol_buffer, self._chunk_size)

    # -- reading ---------------------------------------------------------------

    def _add_reader(self):
        if not self.is_reading() or self._eof_received:
            # After a kept-open EOF there is nothing left to read: watching
            # again would report the same EOF a second time.
            return
        loop = self._loop
        context = self._context
        loop._add_reader(self._sock_fd, *self._reader(), context=context)

    # The compiled build calls recv(2) and send(2) on the fd itself when it may
    # (socketcalls.pxd); the pure build always calls the socket's methods.  One copy
    # serves both: _C_CALLS is False there, and tested first, a module constant
    # costs it less than the transport's _direct_calls field.

    def _read_data(self):
        if self._conn_lost:
            return
        try:
            if self._bulk_reads:
                data = self._recv_bulk()
            else:
                if _C_CALLS and self._direct_calls:
                    data = sock_recv(self._sock_fd, READ_SIZE)
                else:
                    data = self._sock.recv(READ_SIZE)
                if len(data) == READ_SIZE:
                    keep_large_reads_on_heap()
                    self._bulk_reads = True
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not data:
            self._read_eof()
            return
        try:
            self._protocol.data_received(data)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")

    def _recv_bulk(self):
        chunk_size = self._chunk_size
        if chunk_size is not None:
            return self._sock.recv(chunk_size(self._sock_fd, READ_SIZE))
        if _C_CALLS and self._direct_calls:
            data = sock_recv(self._sock_fd, BULK_READ_SIZE)
        else:
            data = self._sock.recv(BULK_READ_SIZE)
        self._bulk_reads = len(data) >= BULK_READ_MIN
        return data

    def _read_into_protocol_buffer(self, chunk_size=None):
        # chunk_size: see __init__; given to the reader's handle when set.
        if self._conn_lost:
            return
        try:
            buf = self._protocol.get_buffer(-1)
            if not len(buf):
                raise RuntimeError("get_buffer() returned an empty buffer")
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.get_buffer() call failed.")
            return
        try:
            if chunk_size is None:
                nbytes = self._sock.recv_into(buf)
            else:
                nbytes = self._sock.recv_into(
                    buf, chunk_size(self._sock_fd, memoryview(buf).nbytes)
                )
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not nbytes:
            self._read_eof()
            return
        try:
            self._protocol.buffer_updated(nbytes)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.buffer_updated() call failed.")

    def _read_eof(self):
        if self._loop.get_debug():
            logger.debug("%r received EOF", self)
        try:
            keep_open = self._protocol.eof_received()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.eof_received() call failed.")
            return
        if keep_open:
            # Half-closed: the protocol may still write.
            self._eof_received = True
            self._loop._remove_reader(self._sock_fd)
        else:
            self.close()

    # -- writing ---------------------------------------------------------------

    def _refresh_send_at_once(self):
        # write() may skip its checks and send at once exactly when
        # nothing is buffered, no EOF was written, no sendfile runs and the
        # connection is not lost.  A change that can only rule that out
        # (buffering, write_eof, sendfile starting, the connection lost)
        # clears the flag where it happens; the two that can end it (the
        # buffer drained, sendfile done) recompute it here.
        self._send_at_once = not (
            self._buffer or self._eof or self._conn_lost or self._empty_waiter is not None
        )

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        if not (self._send_at_once and type(data) is bytes and data):
            # Everything but the common case: asyncio's checks, in its order.
            if not self._may_write(data):
                return
            if self._buffer:
                self._buffer_data(data)
                self._maybe_pause_protocol()
                return
        try:
            if _C_CALLS and self._direct_calls and type(data) is bytes:
                n = sock_send(self._sock_fd, data)
            else:
                n = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal write error on socket transport")
            return
        if n != len(data):
            self._buffer_unsent(data, n)

    def _buffer_unsent(self, data, sent):
        """Buffer what a write's send left (all but ``sent`` bytes) until writable."""
        if sent:
            data = memoryview(data)[sent:]
        loop = self._loop
        context = self._context
        loop._add_writer(self._sock_fd, self._write_ready, context=context)
        self._buffer_data(data)
        self._maybe_pause_protocol()

    def _may_write(self, data):
        """Raise for bad writes; False for writes that are dropped."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"data argument must be a bytes-like object, not {type(data).__name__!r}"
            )
        if self._eof:
            raise RuntimeError("Cannot call write() after write_eof()")
        if self._empty_waiter is not None:
            raise RuntimeError("unable to write; sendfile is in progress")
        if not data:
            return False
        if self._conn_lost:
            if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return False
        return True

    def _buffer_data(self, data):
        # Keep a private copy of mutable buffers: the caller may reuse its
        # bytearray as soon as write() returns.
        if type(data) is not bytes:
            data = bytes(data)
        if data:
            # An empty chunk (from writelines) would never be consumed: the
            # buffer would never drain, and close() never finish
            # (python/cpython#155888).
            self._queue_buffer().append(data)
            self._buffer_size += len(data)
            self._send_at_once = False

    if _PY312:

        def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview[Any]]) -> None:
            if self._eof:
                raise RuntimeError("Cannot call writelines() after write_eof()")
            if self._empty_waiter is not None:
                raise RuntimeError("unable to writelines; sendfile is in progress")
            if not list_of_data:
                return
            if self._conn_lost:
                # Dropped like write()'s data (python/cpython#136234).
                if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                    logger.warning("socket.send() raised exception.")
                self._conn_lost += 1
                return
            was_empty = not self._buffer
            for data in list_of_data:
                self._buffer_data(data)
            if was_empty:
                self._write_ready()
                if self._buffer:
                    loop = self._loop
                    context = self._context
                    loop._add_writer(self._sock_fd, self._write_ready, context=context)
            self._maybe_pause_protocol()

    else:
        # asyncio's: write() of the chunks joined.
        writelines = transports.WriteTransport.writelines  # type: ignore[assignment]

    def _write_ready(self):
        if self._conn_lost or not self._buffer:
            return
        buffer = self._buffer
        try:
            if len(buffer) == 1 or not _HAS_SENDMSG:
                sent = self._sock.send(buffer[0])
            else:
                sent = self._sock.sendmsg(itertools.islice(buffer, _IOV_MAX))
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._loop._remove_writer(self._sock_fd)
            buffer.clear()
            self._buffer_size = 0
            self._fatal_error(exc, "Fatal write error on socket transport")
            if self._empty_waiter is not None:
                self._empty_waiter.set_exception(exc)
            return
        self._consume(sent)
        self._maybe_resume_protocol()  # may write more
        if not self._buffer:
            self._loop._remove_writer(self._sock_fd)
            if self._empty_waiter is not None:
                self._empty_waiter.set_result(None)
            if self._closing:
                # close() met a non-empty buffer, so connection_lost is due
                # now, unless a close() or abort() from resume_writing() above
                # has scheduled it already (python/cpython#156512).  Counting
                # it as lost makes later write()/abort() calls no-ops instead
                # of touching the released socket and loop.
                if not self._conn_lost:
                    self._conn_lost += 1
                    self._call_connection_lost(None)
            elif self._eof:
                self._sock.shutdown(socket.SHUT_WR)
            else:
                self._refresh_send_at_once()

    def _consume(self, nbytes):
        """Drop ``nbytes`` sent bytes from the front of the buffer."""
        self._buffer_size -= nbytes
        buffer = self._buffer
        while nbytes:
            chunk = buffer[0]
            size = len(chunk)
            if size <= nbytes:
                buffer.popleft()
                nbytes -= size
            else:
                buffer[0] = memoryview(chunk)[nbytes:]
                break

    def write_eof(self) -> None:
        if self._closing or self._eof:
            return
        self._eof = True
        self._send_at_once = False
        if not self._buffer:
            self._sock.shutdown(socket.SHUT_WR)

    def can_write_eof(self) -> bool:
        return True

    # -- sendfile support (used by loop.sendfile) ----------------------------

    def _make_empty_waiter(self):
        if self._empty_waiter is not None:
            raise RuntimeError("Empty waiter is already set")
        self._empty_waiter = self._loop.create_future()
        self._send_at_once = False
        if not self._buffer:
            self._empty_waiter.set_result(None)
        return self._empty_waiter

    def _reset_empty_waiter(self):
        self._empty_waiter = None
        self._refresh_send_at_once()

    # -- closing ---------------------------------------------------------------

    def _lose_connection(self, exc):
        self._send_at_once = False
        super()._lose_connection(exc)

    def _call_connection_lost(self, exc):
        try:
            super()._call_connection_lost(exc)
        finally:
            server = self._server
            if server is not None:
                server._detach(self)
                self._server = None
            if self._empty_waiter is not None:
                self._empty_waiter.set_exception(ConnectionError("Connection is closed by peer"))


show_as(SocketTransport, transports._FlowControlMixin)
