"""The transport of a connected stream socket: plain, or TLS over plain.

``create_connection``, ``create_unix_connection``, ``connect_accepted_socket``
and a TLS server's accept path all end here once they hold a connected,
non-blocking socket.  Without ``sslcontext`` the socket transport is the
application's transport.  With it, ``SSLProtocol`` becomes the protocol of the
socket transport and hands the application ``SSLTransport``, and the caller
awaits ``waiter``, which completes once the handshake is done::

    waiter = loop.create_future()
    app_transport = stream_transport(loop, sock, app_protocol, waiter, sslcontext=...)
    try:
        await waiter                  # the handshake
    except BaseException:
        app_transport.close()         # aborts a handshake still running
        waiter = None                 # the exception must not pin the protocol
        raise

``sslcontext=True`` (a client's ``ssl=True``) asks ``SSLProtocol`` for the
default client context.  The plain accept path builds ``SocketTransport``
itself: one call fewer per accepted connection.

``context`` is the one the socket transport runs its callbacks in (see
``SocketTransportBase``), the TLS layer's included, as in asyncio.
"""

from __future__ import annotations

import socket
import ssl
from asyncio import BaseProtocol, Future, Transport
from typing import TYPE_CHECKING, Any

from .stream import SocketTransport
from .tls import SSLProtocol

if TYPE_CHECKING:
    from contextvars import Context

    from .._core.contract import LoopContract
    from .stream import AcceptingServer

__all__ = ["stream_transport"]


def stream_transport(
    loop: LoopContract,
    sock: socket.socket,
    protocol: BaseProtocol,
    waiter: Future[Any] | None,
    *,
    extra: dict[str, Any] | None = None,
    server: AcceptingServer | None = None,
    sslcontext: ssl.SSLContext | bool | None = None,
    server_side: bool = False,
    server_hostname: str | None = None,
    ssl_handshake_timeout: float | None = None,
    ssl_shutdown_timeout: float | None = None,
    context: Context | None = None,
) -> Transport:
    """The transport the application gets for ``sock``; ``waiter`` completes when it is ready."""
    if not sslcontext:
        # An asyncio.Transport to isinstance() (socketbase.show_as), not to a type checker.
        return SocketTransport(loop, sock, protocol, waiter, extra, server, context)  # type: ignore[return-value]
    ssl_protocol = SSLProtocol(
        loop,
        protocol,
        None if isinstance(sslcontext, bool) else sslcontext,
        waiter,
        server_side,
        server_hostname,
        ssl_handshake_timeout=ssl_handshake_timeout,
        ssl_shutdown_timeout=ssl_shutdown_timeout,
    )
    SocketTransport(loop, sock, ssl_protocol, extra=extra, server=server, context=context)
    app_transport = ssl_protocol._app_transport
    assert app_transport is not None  # only connection_lost() drops it
    return app_transport
