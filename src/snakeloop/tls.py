"""``loop.start_tls()``: upgrade a live stream transport to TLS.

The TLS machinery itself is ``transports.tls.SSLProtocol``; this mixin only
swaps it in as the protocol of an existing transport, the way asyncio does:
reading is paused first, so that no byte reaches the new protocol before its
``connection_made()`` ran, then resumed on the next iteration; on a server,
what a StreamReader already read past the STARTTLS line goes to the TLS
protocol first (python/cpython#142352).  The caller gets the
application-side ``TLSTransport`` once the handshake is done.  If the
handshake fails or the caller is cancelled, the transport below is closed:
its fd has no other owner left.
"""

from __future__ import annotations

import ssl
from asyncio import protocols, streams, transports
from typing import cast

from ._core.contract import LoopMixinBase
from .transports.tls import SSLProtocol

__all__ = ["TLSMixin"]


class TLSMixin(LoopMixinBase):
    """``start_tls``; needs ``create_future`` and ``call_soon``."""

    async def start_tls(
        self,
        transport: transports.BaseTransport,
        protocol: protocols.BaseProtocol,
        sslcontext: ssl.SSLContext,
        *,
        server_side: bool = False,
        server_hostname: str | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> transports.Transport | None:
        """Upgrade ``transport`` to TLS; return the transport ``protocol`` uses from now on.

        Typed as typeshed types asyncio's: the result is None if the
        connection was lost between the handshake and this return.
        """
        if not isinstance(sslcontext, ssl.SSLContext):
            raise TypeError(
                f"sslcontext is expected to be an instance of ssl.SSLContext, got {sslcontext!r}"
            )
        if not getattr(transport, "_start_tls_compatible", False):
            raise TypeError(f"transport {transport!r} is not supported by start_tls()")

        waiter = self.create_future()
        ssl_protocol = SSLProtocol(
            self,
            protocol,
            sslcontext,
            waiter,
            server_side,
            server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
            call_connection_made=False,
        )

        # A transport that may start TLS is a stream socket's: it reads too.
        stream = cast(transports.Transport, transport)
        stream.pause_reading()
        if server_side:
            _hand_over_stream_buffer(protocol, ssl_protocol)
        stream.set_protocol(ssl_protocol)
        conmade_cb = self.call_soon(ssl_protocol.connection_made, stream)
        resume_cb = self.call_soon(stream.resume_reading)
        try:
            await waiter
        except BaseException:
            stream.close()
            conmade_cb.cancel()
            resume_cb.cancel()
            # The exception (kept by the caller) must not pin the protocol.
            del waiter, ssl_protocol
            raise
        return ssl_protocol._app_transport


def _hand_over_stream_buffer(protocol: protocols.BaseProtocol, ssl_protocol: SSLProtocol) -> None:
    """Give the TLS protocol what a server's StreamReader read past the STARTTLS line.

    A client may send its ClientHello right behind the line that asked for TLS; the
    reader then holds the start of the handshake, which the TLS protocol would wait for
    for ever (python/cpython#142352, which asyncio fixes the same way from 3.14).
    """
    if not isinstance(protocol, streams.StreamReaderProtocol):
        return
    reader = getattr(protocol, "_stream_reader", None)
    buffer = getattr(reader, "_buffer", None)
    if buffer:
        ssl_protocol._incoming.write(buffer)
        buffer.clear()
