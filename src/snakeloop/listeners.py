"""A server's listening sockets, one ``Listener`` each: the accept path.

A ``Listener`` holds everything that accepting a connection on its socket
needs (the protocol factory, the TLS context and timeouts, the backlog, the
server the connections belong to, and from 3.15 the server's context) and the
state of its socket: the loop's
reader registration, the retry timer of an fd shortage, and the Unix socket
file to remove at close.  ``Server`` starts and stops serving through its
listeners; the loop keeps no table of them.

OS facts this module relies on:

* ``accept()`` on a non-blocking listening socket raises ``BlockingIOError``
  once the backlog is empty; up to ``backlog`` connections are accepted per
  readiness event, so one busy listener cannot starve the loop.
* When the process is out of fds (``EMFILE``/``ENFILE``) or memory
  (``ENOBUFS``/``ENOMEM``), the listening socket stays readable with the
  connection still queued in the kernel.  Polling it again at once would
  spin.  snakeloop stops watching that socket for one second
  (``ACCEPT_RETRY_DELAY``) and then tries again: pending connections wait
  in the kernel's backlog instead of being accepted and dropped (libuv's
  choice).  The exception handler hears of it once per episode, not once
  per retry, so a long fd shortage does not flood the log.
* A Unix server's socket file outlives ``close()`` of its socket; the file
  is removed then, unless another server has bound the same path since
  (``unixpaths``).
"""

from __future__ import annotations

import errno
import logging
import socket
import ssl
from asyncio import BaseProtocol, BaseTransport, TimerHandle, constants, trsock
from collections.abc import Callable
from contextvars import Context, copy_context
from typing import TYPE_CHECKING, Any

from . import unixpaths
from .transports.connected import stream_transport
from .transports.stream import SocketTransport

if TYPE_CHECKING:
    from ._core.contract import LoopMixinBase
    from ._core.handles import Handle
    from .transports.stream import AcceptingServer

__all__ = ["Listener"]

logger = logging.getLogger("asyncio")

# accept() failures that mean "out of resources, the connection is still queued".
_OUT_OF_RESOURCES = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))


class Listener:
    """One listening socket of a server, and the accepting of its connections.

    ``server`` is set by the ``Server`` the listener is given to.  ``loop``
    is typed as the loop's mixins see it (the contract and all of asyncio's
    public API): the TLS accept path needs ``create_task``, which the
    contract does not list.
    """

    __slots__ = (
        "server",
        "sock",
        "_loop",
        "_protocol_factory",
        "_ssl_context",
        "_ssl_handshake_timeout",
        "_ssl_shutdown_timeout",
        "_backlog",
        "_context",
        "_unix_inode",
        "_reader",
        "_retry",
        "_starved",
        "_sockname",
        "_peer_host",
    )

    server: AcceptingServer

    def __init__(
        self,
        loop: LoopMixinBase,
        sock: socket.socket,
        protocol_factory: Callable[[], BaseProtocol],
        ssl_context: ssl.SSLContext | None,
        backlog: int,
        ssl_handshake_timeout: float | None,
        ssl_shutdown_timeout: float | None,
        unix_inode: int | None = None,
    ) -> None:
        self.sock = sock
        self._loop = loop
        self._protocol_factory = protocol_factory
        self._ssl_context = ssl_context
        self._ssl_handshake_timeout = ssl_handshake_timeout
        self._ssl_shutdown_timeout = ssl_shutdown_timeout
        self._backlog = backlog
        self._context: Context | None = None  # the server's, given to start()
        # The inode of the socket file this server created, or None.
        self._unix_inode = unix_inode
        self._reader: Handle | None = None
        self._retry: TimerHandle | None = None
        # accept() ran out of resources and the handler was told; reset by
        # the next accept() that does not.
        self._starved = False
        # The last connection's sockname and peer host (see _addresses_of).
        self._sockname: Any = None
        self._peer_host: Any = None

    def __repr__(self) -> str:
        if self._reader is not None:
            state = "accepting"
        elif self._retry is not None:
            state = "paused"
        else:
            state = "idle"
        return f"<Listener {state} {self.sock!r}>"

    def start(self, context: Context | None = None) -> None:
        """Listen, and accept connections from the next loop iteration on.

        ``context``: the server's, of which each connection gets a copy (3.15
        on); None before 3.15, where each callback of a connection runs in a
        copy of the context that scheduled it.
        """
        self._context = context
        self.sock.listen(self._backlog)
        self._reader = self._loop._add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        """Stop accepting, close the socket and remove its Unix socket file."""
        # Unregistered by what the socket says now, registered or not, as
        # asyncio does: a socket closed behind the server's back raises
        # ValueError for fd -1 instead of unregistering whatever has its old
        # fd number by now.
        self._reader = None
        self._loop._remove_reader(self.sock.fileno())
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        sock = self.sock
        inode = self._unix_inode
        if inode is None:
            sock.close()
            return
        path = sock.getsockname()
        sock.close()
        # In the loop thread: close() is synchronous and the file must be
        # gone when it returns, as with asyncio (docs/design.md, "No
        # blocking calls").
        err = unixpaths.remove_if_same_inode(path, inode)
        if err is not None:
            logger.error("Unable to clean up listening UNIX socket %r: %r", path, err)

    # -- the accept path -------------------------------------------------------

    def _accept(self) -> None:
        sock = self.sock
        loop = self._loop
        for _ in range(self._backlog):
            try:
                conn, addr = sock.accept()
                if loop._debug:
                    logger.debug("%r got a new connection from %r: %r", self.server, addr, conn)
                conn.setblocking(False)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                # Nothing left to accept, or the peer gave up already.
                self._starved = False
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                self._pause(exc)
                return
            self._starved = False
            self._hand_over(conn, self._addresses_of(conn, addr))

    def _addresses_of(self, conn: socket.socket, addr: Any) -> dict[str, Any]:
        """A new connection's extra info: its peername and sockname, as asyncio has them.

        The connections of one listener have the same sockname (unless it is bound to
        a wildcard address of several local ones), and most come from the host the
        last one came from: the last one's tuple and host string are reused rather
        than held again by each connection, about 200 of an idle connection's 1,400
        bytes.
        """
        try:
            sockname = conn.getsockname()
        except OSError:
            sockname = None
        else:
            if sockname == self._sockname:
                sockname = self._sockname
            else:
                self._sockname = sockname
        if type(addr) is tuple and addr:
            host = addr[0]
            last = self._peer_host
            if host != last:
                self._peer_host = host
            elif host is not last:
                addr = (last, *addr[1:])
        return {"peername": addr, "sockname": sockname}

    def _hand_over(self, conn: socket.socket, extra: dict[str, Any]) -> None:
        """Give an accepted connection its protocol and transport."""
        server_context = self._context
        if server_context is None:
            if self._ssl_context:
                self._loop.create_task(self._accept_tls(conn, extra, None))
            else:
                # asyncio accepts in a task of its own, in a copy of the
                # current context: what one connection's factory sets is not
                # seen by the next one's.
                copy_context().run(self._accept_plain, conn, extra, None)
            return
        # One context per connection, as asyncio's accept task has from 3.15:
        # the factory, the handshake and every callback of the transport run
        # in it, and none of them sees another connection's variables.
        context = server_context.copy()
        if self._ssl_context:
            self._loop.create_task(self._accept_tls(conn, extra, context), context=context)
        else:
            context.run(self._accept_plain, conn, extra, context)

    def _pause(self, exc: OSError) -> None:
        if not self._starved:
            self._starved = True
            self._loop.call_exception_handler(
                {
                    "message": "socket.accept() out of system resource",
                    "exception": exc,
                    "socket": trsock.TransportSocket(self.sock),
                }
            )
        self._reader = None
        self._loop._remove_reader(self.sock.fileno())
        self._retry = self._loop.call_later(constants.ACCEPT_RETRY_DELAY, self._resume)

    def _resume(self) -> None:
        self._retry = None
        if self.sock.fileno() < 0:
            return  # closed behind the server's back (close() cancels this timer)
        self._reader = self._loop._add_reader(self.sock.fileno(), self._accept)

    def _accept_plain(
        self, conn: socket.socket, extra: dict[str, Any], context: Context | None
    ) -> None:
        # No task per connection: the transport schedules connection_made.
        protocol = None
        try:
            protocol = self._protocol_factory()
            SocketTransport(self._loop, conn, protocol, None, extra, self.server, context)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            conn.close()
            if self._loop._debug:
                self._report_accept_error(exc, protocol, None)

    async def _accept_tls(
        self, conn: socket.socket, extra: dict[str, Any], context: Context | None
    ) -> None:
        protocol = None
        transport = None
        try:
            protocol = self._protocol_factory()
            waiter = self._loop.create_future()
            transport = stream_transport(
                self._loop,
                conn,
                protocol,
                waiter,
                extra=extra,
                server=self.server,
                sslcontext=self._ssl_context,
                server_side=True,
                ssl_handshake_timeout=self._ssl_handshake_timeout,
                ssl_shutdown_timeout=self._ssl_shutdown_timeout,
                context=context,
            )
            try:
                await waiter
            except BaseException:
                transport.close()
                # The handshake task is done with this connection; drop the
                # references so the transport is not kept alive by the frame.
                del waiter
                raise
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            if self._loop._debug:
                self._report_accept_error(exc, protocol, transport)

    def _report_accept_error(
        self,
        exc: BaseException,
        protocol: BaseProtocol | None,
        transport: BaseTransport | None,
    ) -> None:
        # The context is built here, not in the caller: the error's traceback
        # keeps the caller's frame, and a context dict left in it would hold
        # the error (a cycle).
        context: dict[str, Any] = {
            "message": "Error on transport creation for incoming connection",
            "exception": exc,
        }
        if protocol is not None:
            context["protocol"] = protocol
        if transport is not None:
            context["transport"] = transport
        self._loop.call_exception_handler(context)
