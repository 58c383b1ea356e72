"""The ``sock_*`` coroutines: one socket operation at a time, awaited.

Each one tries its system call at once and only when the kernel says
"not yet" (``BlockingIOError``) registers a readiness callback and waits
on a future.  The callback retries the call; the one that finishes
unregisters itself before it sets the future, so a completed operation
leaves nothing behind, and a cancelled one unregisters in the waiting
coroutine's ``finally``.  Only the registration made by this call is
removed: if another operation has since taken the fd over, its callback
stays.

OS facts this module relies on:

* The socket must be non-blocking (``gettimeout() == 0``); a blocking one
  would stall the whole loop.  asyncio checks this in debug mode only, and
  so does snakeloop.
* ``recv``/``recvfrom`` return as soon as any data is there; ``send`` may
  take only part of the buffer, and ``sendall`` here resends the rest from
  a memoryview offset, without copying.
* A non-blocking ``connect`` to a remote host fails with ``EINPROGRESS``
  (``BlockingIOError``) and completes in the background; the socket turns
  writable when it is done, and ``SO_ERROR`` then says whether it
  succeeded.  ``EINTR`` during ``connect`` also leaves it running in the
  background (Python does not retry ``connect``).  Unix-domain connects
  complete or fail at once.
* ``accept`` on Linux does not hand the listener's ``O_NONBLOCK`` to the new
  socket; asyncio makes the accepted socket non-blocking, and so does this
  module.
* ``connect`` wants a numeric address: host names of ``AF_INET``/
  ``AF_INET6`` sockets are resolved first with ``getaddrinfo`` in the
  default executor (numeric ones skip it).
* ``recv(n)`` allocates ``n`` bytes and shrinks the result to what
  arrived.  For ``n`` above about 64 KiB glibc serves that allocation with
  mmap/munmap in a fresh process, several times the cost of the copy, so
  large reads go through the loop's shared 256 KiB buffer and are copied
  out at their real size.
"""

from __future__ import annotations

import socket
import sys
from typing import TYPE_CHECKING, Any, TypeVar

from ._core.contract import LoopMixinBase
from .dns import ensure_resolved
from .transports.recvbuffer import RECV_BUFFER_SIZE

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable
    from socket import _Address, _RetAddress

    from _typeshed import ReadableBuffer, WriteableBuffer

    from ._core.contract import LoopContract

__all__ = ["NOT_NONBLOCKING", "SocketMixin", "check_ssl_socket", "wait_ready"]

_T = TypeVar("_T")

_HAS_IPV6 = hasattr(socket, "AF_INET6")
_INET_FAMILIES = (socket.AF_INET, socket.AF_INET6) if _HAS_IPV6 else (socket.AF_INET,)
_RETRY = (BlockingIOError, InterruptedError)
NOT_NONBLOCKING = "the socket must be non-blocking"

# recv(n) makes a bytes object of n bytes and shrinks it to what arrived.
# Past about 64 KiB glibc may serve that with mmap/munmap, which costs
# several times the copy in a fresh process: larger reads of plain
# sockets go through the loop's shared buffer instead.
# What an operation returns when it made progress but is not done (sock_sendall).
_NOT_YET = object()
_BIG_READ = 65536
_Socket = socket.socket


def _recv(loop, sock, n):
    if _BIG_READ < n <= RECV_BUFFER_SIZE and type(sock) is _Socket:
        view = loop._shared_recv_buffer()
        return bytes(view[: sock.recv_into(view, n)])
    return sock.recv(n)


def _recvfrom(loop, sock, n):
    if _BIG_READ < n <= RECV_BUFFER_SIZE and type(sock) is _Socket:
        view = loop._shared_recv_buffer()
        nbytes, addr = sock.recvfrom_into(view, n)
        return bytes(view[:nbytes]), addr
    return sock.recvfrom(n)


def _recv_into(loop, sock, buf):
    return sock.recv_into(buf)


def _recvfrom_into(loop, sock, buf, nbytes):
    return sock.recvfrom_into(buf, nbytes)


def _sendto(loop, sock, data, address):
    return sock.sendto(data, address)


def _accept(loop, sock):
    conn, address = sock.accept()
    conn.setblocking(False)
    return conn, address


def _send_rest(loop, sock, unsent):
    view = unsent.view
    sent = sock.send(view)
    if sent == len(view):
        return None
    unsent.view = view[sent:]
    return _NOT_YET


def _connect_result(loop, sock, address):
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        # OSError(errno, ...) picks the subclass (ConnectionRefusedError...).
        raise OSError(err, f"Connect call failed {address}")
    return None


def check_ssl_socket(sock: socket.socket) -> None:
    """Refuse an ``ssl.SSLSocket``: its I/O does not map to readiness."""
    # If the ssl module was never imported, no SSLSocket can exist.
    ssl = sys.modules.get("ssl")
    if ssl is not None and isinstance(sock, ssl.SSLSocket):
        raise TypeError("Socket cannot be of type SSLSocket")


async def wait_ready(
    loop: LoopContract,
    fd: int,
    writable: bool,
    callback: Callable[..., object],
    fut: asyncio.Future[_T],
    *args: Any,
) -> _T:
    """Register ``callback(fut, fd, *args)`` for reading ``fd`` (or, with
    ``writable``, for writing it); await ``fut``.

    On the way out the registration is removed, unless another operation
    has since taken the fd over.
    """
    loop._ensure_fd_no_transport(fd)
    if writable:
        handle = loop._add_writer(fd, callback, fut, fd, *args)
    else:
        handle = loop._add_reader(fd, callback, fut, fd, *args)
    try:
        return await fut
    finally:
        if writable:
            loop._remove_writer_handle(fd, handle)
        else:
            loop._remove_reader_handle(fd, handle)
        del fut, handle  # no cycle through a raised exception's frame


class _Unsent:
    """What ``sock_sendall`` still has to send, as a view into the caller's data."""

    __slots__ = ("view",)

    def __init__(self, view: memoryview) -> None:
        self.view = view


class SocketMixin(LoopMixinBase):
    """``sock_recv`` & co. on top of ``_add_reader``/``_add_writer``."""

    # -- shared plumbing ------------------------------------------------------

    def _check_sock(self, sock):
        """asyncio's checks of a ``sock_*`` argument, in its order."""
        check_ssl_socket(sock)
        if self._debug and sock.gettimeout() != 0:
            raise ValueError(NOT_NONBLOCKING)

    def _finished(self, writable, fd, fut, result, exc):
        """Unregister the operation on ``fd`` that ended, and settle its future."""
        if writable:
            self._remove_writer(fd)
        else:
            self._remove_reader(fd)
        if exc is None:
            fut.set_result(result)
        else:
            fut.set_exception(exc)

    def _retry(self, fut, fd, writable, operation, sock, *args):
        """Try ``operation(self, sock, *args)`` again, now that ``fd`` is ready.

        The operations (``_recv`` & co. above) look the socket's method up on
        every attempt: code (CPython's tests among it) may replace a socket's
        method while a call waits, and a bound method captured at registration
        would keep retrying the old one.
        """
        if fut.done():
            return
        try:
            result = operation(self, sock, *args)
        except _RETRY:
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._finished(writable, fd, fut, None, exc)
            # The error's traceback keeps this frame, and a future left in it
            # would make future -> error -> traceback -> frame -> future, a cycle.
            fut = None
        else:
            if result is not _NOT_YET:
                self._finished(writable, fd, fut, result, None)

    async def _now_or_when_ready(self, writable, operation, sock, *args):
        """``operation(self, sock, *args)`` at once, or, if the kernel says "not yet",
        as ``_when_ready`` does."""
        try:
            return operation(self, sock, *args)
        except _RETRY:
            pass
        return await self._when_ready(writable, operation, sock, *args)

    def _when_ready(self, writable, operation, sock, *args):
        """Await ``operation(self, sock, *args)``, tried each time ``sock`` is readable
        (or, with ``writable``, writable) until it is done."""
        fd = sock.fileno()
        return wait_ready(
            self, fd, writable, self._retry, self.create_future(), writable, operation, sock, *args
        )

    # -- receiving ------------------------------------------------------------

    async def sock_recv(self, sock: socket.socket, n: int) -> bytes:
        """Receive up to ``n`` bytes from the connected socket ``sock``."""
        self._check_sock(sock)
        return await self._now_or_when_ready(False, _recv, sock, n)

    async def sock_recv_into(self, sock: socket.socket, buf: WriteableBuffer) -> int:
        """Receive into the writable buffer ``buf``; return the byte count."""
        self._check_sock(sock)
        return await self._now_or_when_ready(False, _recv_into, sock, buf)

    # A seeded loop with ``chunking`` has these two in place of sock_recv and
    # sock_recv_into (installed on the loop instance, so an unseeded loop's
    # reads carry no test for it).  They run the same operations on a view
    # of the socket whose reads take a drawn size at most
    # (snakeloop.chunking.ChunkedSocket); a datagram socket's are left whole.

    async def _sock_recv_chunked(self, sock: socket.socket, n: int) -> bytes:
        check_ssl_socket(sock)  # before the view hides what the socket is
        return await SocketMixin.sock_recv(self, self._chunking.view(sock), n)

    async def _sock_recv_into_chunked(self, sock: socket.socket, buf: WriteableBuffer) -> int:
        check_ssl_socket(sock)
        return await SocketMixin.sock_recv_into(self, self._chunking.view(sock), buf)

    async def sock_recvfrom(self, sock: socket.socket, bufsize: int) -> tuple[bytes, _RetAddress]:
        """Receive one datagram: ``(data, address)``."""
        self._check_sock(sock)
        return await self._now_or_when_ready(False, _recvfrom, sock, bufsize)

    async def sock_recvfrom_into(
        self, sock: socket.socket, buf: WriteableBuffer, nbytes: int = 0
    ) -> tuple[int, _RetAddress]:
        """Receive one datagram into ``buf``: ``(nbytes, address)``."""
        self._check_sock(sock)
        if not nbytes:
            # Every buffer a socket takes has a length; typeshed's Buffer
            # protocol does not say so.
            nbytes = len(buf)  # type: ignore[arg-type]
        return await self._now_or_when_ready(False, _recvfrom_into, sock, buf, nbytes)

    # -- sending --------------------------------------------------------------

    async def sock_sendall(self, sock: socket.socket, data: ReadableBuffer) -> None:
        """Send all of ``data``; partial sends resume when writable."""
        self._check_sock(sock)
        try:
            sent = sock.send(data)
        except _RETRY:
            sent = 0
        if sent == len(data):  # type: ignore[arg-type]  # as for sock_recvfrom_into
            return None
        view = memoryview(data)
        if view.itemsize != 1:
            view = view.cast("B")
        return await self._when_ready(True, _send_rest, sock, _Unsent(view[sent:]))

    async def _sock_sendall_chunked(self, sock: socket.socket, data: ReadableBuffer) -> None:
        # sock_sendall of a seeded loop with ``chunking_writes`` (installed on
        # that loop only): each send of a stream socket takes a drawn part
        # (snakeloop.chunking.SendingInChunks); a datagram socket is left whole.
        check_ssl_socket(sock)
        await SocketMixin.sock_sendall(self, self._write_chunking.view(sock), data)

    async def sock_sendto(
        self, sock: socket.socket, data: ReadableBuffer, address: _Address
    ) -> int:
        """Send one datagram to ``address``; return the bytes sent."""
        self._check_sock(sock)
        return await self._now_or_when_ready(True, _sendto, sock, data, address)

    # -- connecting and accepting --------------------------------------------

    async def sock_connect(self, sock: socket.socket, address: _Address) -> None:
        """Connect ``sock`` to ``address``, resolving a host name first."""
        self._check_sock(sock)
        if sock.family in _INET_FAMILIES:
            infos = await ensure_resolved(
                self, address, family=sock.family, type=sock.type, proto=sock.proto
            )
            address = infos[0][4]
        try:
            sock.connect(address)
        except _RETRY:
            # EINPROGRESS (or EINTR): the connection goes on in the kernel.
            pass
        else:
            return None
        return await self._when_ready(True, _connect_result, sock, address)

    async def sock_accept(self, sock: socket.socket) -> tuple[socket.socket, _RetAddress]:
        """Accept a connection: ``(conn, address)``, ``conn`` non-blocking."""
        self._check_sock(sock)
        return await self._now_or_when_ready(False, _accept, sock)
