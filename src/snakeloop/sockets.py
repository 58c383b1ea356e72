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

__all__ = ["NOT_NONBLOCKING", "SocketMixin", "check_ssl_socket", "wait_readable", "wait_writable"]

_T = TypeVar("_T")

_HAS_IPV6 = hasattr(socket, "AF_INET6")
_INET_FAMILIES = (socket.AF_INET, socket.AF_INET6) if _HAS_IPV6 else (socket.AF_INET,)
_RETRY = (BlockingIOError, InterruptedError)
NOT_NONBLOCKING = "the socket must be non-blocking"

# recv(n) makes a bytes object of n bytes and shrinks it to what arrived.
# Past about 64 KiB glibc may serve that with mmap/munmap, which costs
# several times the copy in a fresh process: larger reads of plain
# sockets go through the loop's shared buffer instead.
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


def check_ssl_socket(sock: socket.socket) -> None:
    """Refuse an ``ssl.SSLSocket``: its I/O does not map to readiness."""
    # If the ssl module was never imported, no SSLSocket can exist.
    ssl = sys.modules.get("ssl")
    if ssl is not None and isinstance(sock, ssl.SSLSocket):
        raise TypeError("Socket cannot be of type SSLSocket")


async def wait_readable(
    loop: LoopContract,
    fd: int,
    callback: Callable[..., object],
    fut: asyncio.Future[_T],
    *args: Any,
) -> _T:
    """Register ``callback(fut, fd, *args)`` for reading ``fd``; await ``fut``.

    On the way out the registration is removed, unless another operation
    has since taken the fd over.
    """
    loop._ensure_fd_no_transport(fd)
    handle = loop._add_reader(fd, callback, fut, fd, *args)
    try:
        return await fut
    finally:
        loop._remove_reader_handle(fd, handle)
        del fut, handle  # no cycle through a raised exception's frame


async def wait_writable(
    loop: LoopContract,
    fd: int,
    callback: Callable[..., object],
    fut: asyncio.Future[_T],
    *args: Any,
) -> _T:
    """Register ``callback(fut, fd, *args)`` for writing ``fd``; await ``fut``.

    On the way out the registration is removed, unless another operation
    has since taken the fd over.
    """
    loop._ensure_fd_no_transport(fd)
    handle = loop._add_writer(fd, callback, fut, fd, *args)
    try:
        return await fut
    finally:
        loop._remove_writer_handle(fd, handle)
        del fut, handle


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

    def _read_finished(self, fd, fut, result, exc):
        self._remove_reader(fd)
        if exc is None:
            fut.set_result(result)
        else:
            fut.set_exception(exc)

    def _write_finished(self, fd, fut, result, exc):
        self._remove_writer(fd)
        if exc is None:
            fut.set_result(result)
        else:
            fut.set_exception(exc)

    def _retry(self, fut, fd, finished, operation, sock, *args):
        """Try ``operation(self, sock, *args)`` again, now that ``fd`` is ready.

        The operations (``_recv`` & co. above) look the socket's method up on
        every attempt: code (CPython's tests among it) may replace a socket's
        method while a call waits, and a bound method captured at registration
        would keep retrying the old one.  ``finished`` is ``_read_finished`` or
        ``_write_finished``.
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
            finished(fd, fut, None, exc)
            # The error's traceback keeps this frame, and a future left in it
            # would make future -> error -> traceback -> frame -> future, a cycle.
            fut = None
        else:
            finished(fd, fut, result, None)

    def _retry_when(self, readable, operation, sock, *args):
        """Await ``operation(self, sock, *args)``, tried again each time ``sock`` is
        readable (or, with ``readable`` false, writable)."""
        if readable:
            wait, finished = wait_readable, self._read_finished
        else:
            wait, finished = wait_writable, self._write_finished
        fd = sock.fileno()
        return wait(self, fd, self._retry, self.create_future(), finished, operation, sock, *args)

    # -- receiving ------------------------------------------------------------

    async def sock_recv(self, sock: socket.socket, n: int) -> bytes:
        """Receive up to ``n`` bytes from the connected socket ``sock``."""
        self._check_sock(sock)
        try:
            return _recv(self, sock, n)
        except _RETRY:
            pass
        return await self._retry_when(True, _recv, sock, n)

    async def sock_recv_into(self, sock: socket.socket, buf: WriteableBuffer) -> int:
        """Receive into the writable buffer ``buf``; return the byte count."""
        self._check_sock(sock)
        try:
            return sock.recv_into(buf)
        except _RETRY:
            pass
        return await self._retry_when(True, _recv_into, sock, buf)

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
        try:
            return _recvfrom(self, sock, bufsize)
        except _RETRY:
            pass
        return await self._retry_when(True, _recvfrom, sock, bufsize)

    async def sock_recvfrom_into(
        self, sock: socket.socket, buf: WriteableBuffer, nbytes: int = 0
    ) -> tuple[int, _RetAddress]:
        """Receive one datagram into ``buf``: ``(nbytes, address)``."""
        self._check_sock(sock)
        if not nbytes:
            # Every buffer a socket takes has a length; typeshed's Buffer
            # protocol does not say so.
            nbytes = len(buf)  # type: ignore[arg-type]
        try:
            return sock.recvfrom_into(buf, nbytes)
        except _RETRY:
            pass
        return await self._retry_when(True, _recvfrom_into, sock, buf, nbytes)

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
        return await wait_writable(
            self,
            sock.fileno(),
            self._on_sendall,
            self.create_future(),
            sock,
            _Unsent(view[sent:]),
        )

    def _on_sendall(self, fut, fd, sock, unsent):
        if fut.done():
            return
        view = unsent.view
        try:
            sent = sock.send(view)
        except _RETRY:
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._write_finished(fd, fut, None, exc)
            fut = None  # the error's traceback keeps this frame
            return
        if sent == len(view):
            self._write_finished(fd, fut, None, None)
        else:
            unsent.view = view[sent:]

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
        try:
            return sock.sendto(data, address)
        except _RETRY:
            pass
        return await self._retry_when(False, _sendto, sock, data, address)

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
        return await wait_writable(
            self, sock.fileno(), self._on_connect, self.create_future(), sock, address
        )

    def _on_connect(self, fut, fd, sock, address):
        if fut.done():
            return
        try:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        except _RETRY:
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._write_finished(fd, fut, None, exc)
            fut = None  # the error's traceback keeps this frame
            return
        if err:
            # OSError(errno, ...) picks the subclass (ConnectionRefusedError...).
            self._write_finished(fd, fut, None, OSError(err, f"Connect call failed {address}"))
        else:
            self._write_finished(fd, fut, None, None)

    async def sock_accept(self, sock: socket.socket) -> tuple[socket.socket, _RetAddress]:
        """Accept a connection: ``(conn, address)``, ``conn`` non-blocking."""
        self._check_sock(sock)
        try:
            conn, address = sock.accept()
        except _RETRY:
            pass
        else:
            conn.setblocking(False)
            return conn, address
        return await self._retry_when(True, _accept, sock)
