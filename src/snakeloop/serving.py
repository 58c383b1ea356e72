"""TCP and Unix stream servers: ``create_server``, ``create_unix_server``, ``Server``.

With asyncio's argument checks and messages.  Each listening socket of a
server is a ``listeners.Listener``, which accepts its connections; the
socket file of a Unix server is ``unixpaths``'s.

OS facts this module relies on:

* ``IPV6_V6ONLY`` is set on IPv6 listeners, so an IPv4 and an IPv6 socket
  can both bind the same port when a host resolves to both families.
* A Unix socket path left by a dead server makes ``bind`` fail with
  ``EADDRINUSE``; a path that is a socket is removed before binding.  The
  socket file's own facts, and where its filesystem calls run, are in
  ``unixpaths``.
"""

from __future__ import annotations

import collections.abc
import contextvars
import errno
import itertools
import logging
import os
import socket
import sys
import weakref
from asyncio import AbstractEventLoop, BaseProtocol, Future, base_events, exceptions, tasks, trsock
from collections.abc import Callable, Sequence
from os import PathLike
from ssl import SSLContext
from typing import Any

from . import unixpaths
from ._core.contract import LoopMixinBase
from .dns import AddrInfo, ensure_resolved
from .listeners import Listener
from .newkeywords import ABSENT, hide_absent, since, unexpected_keyword
from .sockets import check_ssl_socket

__all__ = ["Server", "ServingMixin"]

logger = logging.getLogger("asyncio")

_PY312 = sys.version_info >= (3, 12)
_PY313 = sys.version_info >= (3, 13)
_HAS_IPV6 = hasattr(socket, "AF_INET6")
# A cancelled serve_forever() closes the server's connections too from 3.14 on
# (gh-123720), and in whichever patch release took that fix: asked of asyncio's
# own method, not of the version.
_SERVE_FOREVER_CLOSES_CLIENTS = (
    "close_clients" in base_events.Server.serve_forever.__code__.co_names
)
# From 3.15 on (python/cpython#140947) a server keeps the context current when
# it is made, and each connection it accepts runs in a copy of it: its protocol
# factory, its transport's callbacks, and its TLS handshake task.  Asked of
# asyncio's own Server, as above.
_SERVERS_HAVE_A_CONTEXT = "copy_context" in base_events.Server.__init__.__code__.co_names


async def _first_iteration(server: Server) -> None:
    """Let the listeners' registration go through before create_server returns."""
    try:
        await tasks.sleep(0)
    except BaseException:
        # Cancelled: nobody will ever see this server, so stop it, or its
        # sockets stay open and watched under fd numbers the process will
        # reuse.
        server.close()
        raise


def _set_reuseport(sock: socket.socket) -> None:
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ValueError("reuse_port not supported by socket module")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    except OSError:
        raise ValueError(
            "reuse_port not supported by socket module, SO_REUSEPORT defined but not implemented."
        ) from None


class Server(base_events.Server):
    """Listening sockets and the connections accepted through them.

    An ``asyncio.Server``, as the stdlib loop's servers are (type checkers
    take ``create_server()``'s result for one), but it shares no code or
    state with asyncio's: every method is this class's own, and asyncio's
    ``__init__`` is not called.
    """

    def __init__(self, loop: AbstractEventLoop, listeners: list[Listener]) -> None:
        self._loop = loop
        self._listeners: list[Listener] | None = listeners  # None once closed
        for listener in listeners:
            listener.server = self
        # The connections still open, kept as asyncio keeps them: before 3.13 a
        # count, from 3.13 a WeakSet of the transports, for close_clients() and
        # abort_clients().  An entry of that set is about 150 bytes of an idle
        # connection's 1.5 KB, which servers before 3.13 do not pay.  Weak: a
        # transport nobody references must still be collectable, so its "unclosed
        # transport" warning can fire (and, as in asyncio, it then counts no more).
        self._active_count = 0
        self._clients: weakref.WeakSet[Any] | None = weakref.WeakSet() if _PY313 else None
        self._waiters: list[Future[Any]] | None = []
        self._serving = False
        self._serving_forever_fut: Future[None] | None = None
        self._context = contextvars.copy_context() if _SERVERS_HAVE_A_CONTEXT else None

    def __repr__(self) -> str:
        return f"<{self.__class__.__name__} sockets={self.sockets!r}>"

    def _attach(self, transport: Any) -> None:
        if self._clients is None:
            self._active_count += 1
        else:
            self._clients.add(transport)

    def _detach(self, transport: Any) -> None:
        if self._clients is None:
            self._active_count -= 1
        else:
            self._clients.discard(transport)
        if self._no_clients() and self._listeners is None:
            self._wakeup()

    def _no_clients(self) -> bool:
        if self._clients is None:
            return self._active_count == 0
        return not self._clients

    def _wakeup(self) -> None:
        waiters = self._waiters
        self._waiters = None
        # Woken twice: iterating None raises asyncio's TypeError.
        for waiter in waiters:  # type: ignore[union-attr]
            if not waiter.done():
                waiter.set_result(None if _PY312 else waiter)

    def _start_serving(self) -> None:
        if self._serving:
            return
        self._serving = True
        # Closed: iterating None raises asyncio's TypeError.
        for listener in self._listeners:  # type: ignore[union-attr]
            listener.start(self._context)

    def get_loop(self) -> AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    @property
    def sockets(self) -> tuple[trsock.TransportSocket, ...]:  # type: ignore[override]
        # typeshed says tuple[socket, ...]; asyncio's servers too return
        # TransportSocket wrappers, which are not sockets.
        if self._listeners is None:
            return ()
        return tuple(trsock.TransportSocket(listener.sock) for listener in self._listeners)

    def close(self) -> None:
        listeners = self._listeners
        if listeners is None:
            return
        self._listeners = None
        for listener in listeners:
            listener.close()
        self._serving = False
        if self._serving_forever_fut is not None and not self._serving_forever_fut.done():
            self._serving_forever_fut.cancel()
            self._serving_forever_fut = None
        if self._no_clients():
            self._wakeup()

    if _PY313:

        def close_clients(self) -> None:
            for transport in self._clients.copy():  # type: ignore[union-attr]  # set from 3.13
                transport.close()

        def abort_clients(self) -> None:
            for transport in self._clients.copy():  # type: ignore[union-attr]  # set from 3.13
                transport.abort()

    async def start_serving(self) -> None:
        self._start_serving()
        # One iteration, so the listening sockets are registered on return.
        await tasks.sleep(0)

    async def serve_forever(self) -> None:
        if self._serving_forever_fut is not None:
            raise RuntimeError(f"server {self!r} is already being awaited on serve_forever()")
        if self._listeners is None:
            raise RuntimeError(f"server {self!r} is closed")
        self._start_serving()
        self._serving_forever_fut = self._loop.create_future()
        try:
            await self._serving_forever_fut
        except exceptions.CancelledError:
            try:
                self.close()
                if _SERVE_FOREVER_CLOSES_CLIENTS:
                    self.close_clients()
                await self.wait_closed()
            finally:
                raise
        finally:
            self._serving_forever_fut = None

    async def wait_closed(self) -> None:
        if _PY312:
            # Wait until the server is closed and every connection is gone.
            if self._waiters is None:
                return
        elif self._listeners is None or self._waiters is None:
            # 3.11 returns at once once the server is closed.
            return
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        await waiter


class ServingMixin(LoopMixinBase):
    """Stream servers for the loop."""

    # -- servers ----------------------------------------------------------------

    async def _server_addrinfos(
        self, host: str | None, port: int | str | None, family: int, flags: int
    ) -> Sequence[AddrInfo]:
        infos = await ensure_resolved(
            self, (host, port), family=family, type=socket.SOCK_STREAM, flags=flags
        )
        if not infos:
            raise OSError(f"getaddrinfo({host!r}) returned empty list")
        return infos

    @hide_absent
    async def create_server(
        self,
        protocol_factory: Callable[[], BaseProtocol],
        host: str | Sequence[str] | None = None,
        port: int | str | None = None,
        *,
        family: int = socket.AF_UNSPEC,
        flags: int = socket.AI_PASSIVE,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: SSLContext | bool | None = None,
        reuse_address: bool | None = None,
        reuse_port: bool | None = None,
        keep_alive: bool | None = since((3, 13), None),
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        start_serving: bool = True,
    ) -> Server:
        """Listen on ``host``/``port`` (or ``sock``); return a Server."""
        if not _PY313 and keep_alive is not ABSENT:
            raise unexpected_keyword(ServingMixin.create_server, "keep_alive")
        if isinstance(ssl, bool):
            raise TypeError("ssl argument must be an SSLContext or None")
        if ssl_handshake_timeout is not None and ssl is None:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if ssl_shutdown_timeout is not None and ssl is None:
            raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        if sock is not None:
            check_ssl_socket(sock)
        if host is not None or port is not None:
            if sock is not None:
                raise ValueError("host/port and sock can not be specified at the same time")
            if reuse_address is None:
                reuse_address = os.name == "posix" and sys.platform != "cygwin"
            sockets = []
            hosts: Sequence[str | None]
            if host == "":
                hosts = [None]
            elif isinstance(host, str) or not isinstance(host, collections.abc.Iterable):
                hosts = [host]
            else:
                hosts = host
            found = await tasks.gather(
                *[self._server_addrinfos(h, port, family, flags) for h in hosts]
            )
            infos = set(itertools.chain.from_iterable(found))
            completed = False
            try:
                for af, socktype, proto, _canonname, sa in infos:
                    try:
                        sock = socket.socket(af, socktype, proto)
                    except OSError:
                        # The address family is not supported here.
                        if self._debug:
                            logger.warning(
                                "create_server() failed to create socket.socket(%r, %r, %r)",
                                af,
                                socktype,
                                proto,
                                exc_info=True,
                            )
                        continue
                    sockets.append(sock)
                    if reuse_address:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, True)
                    if reuse_port:
                        _set_reuseport(sock)
                    if keep_alive:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, True)
                    if _HAS_IPV6 and af == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, True)
                    try:
                        sock.bind(sa)
                    except OSError as err:
                        reason = str(err.strerror).lower()
                        msg = f"error while attempting to bind on address {sa!r}: {reason}"
                        if err.errno == errno.EADDRNOTAVAIL:
                            # The family is not enabled on this host.
                            sockets.pop()
                            sock.close()
                            if self._debug:
                                logger.warning(msg)
                            continue
                        raise OSError(err.errno, msg) from None
                if not sockets:
                    raise OSError(
                        f"could not bind on any address out of {[info[4] for info in infos]!r}"
                    )
                completed = True
            finally:
                if not completed:
                    for s in sockets:
                        s.close()
        else:
            if sock is None:
                raise ValueError("Neither host/port nor sock were specified")
            if sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A Stream Socket was expected, got {sock!r}")
            sockets = [sock]

        listeners = []
        for s in sockets:
            s.setblocking(False)
            listeners.append(
                Listener(
                    self,
                    s,
                    protocol_factory,
                    ssl,
                    backlog,
                    ssl_handshake_timeout,
                    ssl_shutdown_timeout,
                )
            )
        server = Server(self, listeners)
        if start_serving:
            server._start_serving()
            await _first_iteration(server)
        if self._debug:
            logger.info("%r is serving", server)
        return server

    @hide_absent
    async def create_unix_server(
        self,
        protocol_factory: Callable[[], BaseProtocol],
        path: str | PathLike[str] | None = None,
        *,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: bool | None | SSLContext = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        start_serving: bool = True,
        cleanup_socket: bool = since((3, 13), True),
    ) -> Server:
        """Listen on a Unix socket; return a Server."""
        if not _PY313 and cleanup_socket is not ABSENT:
            raise unexpected_keyword(ServingMixin.create_unix_server, "cleanup_socket")
        if isinstance(ssl, bool):
            raise TypeError("ssl argument must be an SSLContext or None")
        if ssl_handshake_timeout is not None and not ssl:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if ssl_shutdown_timeout is not None and not ssl:
            raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        if path is not None:
            if sock is not None:
                raise ValueError("path and sock can not be specified at the same time")
            path = os.fspath(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                unix_inode = await self._bind_unix_path(sock, path, cleanup_socket)
            except BaseException:
                sock.close()
                raise
        else:
            if sock is None:
                raise ValueError("path was not specified, and no sock specified")
            if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A UNIX Domain Stream Socket was expected, got {sock!r}")
            unix_inode = await self._note_unix_inode(sock) if cleanup_socket else None
        sock.setblocking(False)
        listener = Listener(
            self,
            sock,
            protocol_factory,
            ssl,
            backlog,
            ssl_handshake_timeout,
            ssl_shutdown_timeout,
            unix_inode,
        )
        server = Server(self, [listener])
        if start_serving:
            server._start_serving()
            await _first_iteration(server)
        return server

    async def _bind_unix_path(
        self, sock: socket.socket, path: str | bytes, cleanup_socket: bool
    ) -> int | None:
        # The filesystem work (stale file, bind, inode) is done in the
        # worker thread; errors are logged and raised here, in asyncio's order.
        # Returns the inode of the socket file to remove at close(), if any.
        call = self._call_blocking(unixpaths.bind_path, sock, path, cleanup_socket)
        cancelled = await call.finish()
        if cancelled is not None:
            if call.ran():
                inode = call.result().inode
                if inode is not None:
                    # Leave the path as closing the server would have.
                    await self._call_blocking(unixpaths.remove_if_same_inode, path, inode).finish()
            raise cancelled
        outcome = call.result()
        if outcome.stale_error is not None:
            logger.error(
                "Unable to check or remove stale UNIX socket %r: %r", path, outcome.stale_error
            )
        exc = outcome.bind_error
        if exc is not None:
            if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
                raise OSError(errno.EADDRINUSE, f"Address {path!r} is already in use") from None
            raise exc
        if outcome.inode_error is not None:
            raise outcome.inode_error
        return outcome.inode

    async def _note_unix_inode(self, sock: socket.socket) -> int | None:
        # A socket bound by the caller: the inode of its file, to remove at
        # close(), if it has one.
        bound = sock.getsockname()
        if not unixpaths.has_file(bound):
            return None
        call = self._call_blocking(unixpaths.inode_of, bound)
        cancelled = await call.finish()
        if cancelled is not None:
            raise cancelled
        return call.result()
