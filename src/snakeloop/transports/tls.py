"""TLS on top of a plain stream transport, driven through ``ssl.MemoryBIO``.

``SSLProtocol`` is the protocol of an ordinary stream transport (TCP, Unix,
or another TLS transport).  It feeds the ciphertext it receives to an
``ssl.SSLObject`` and hands the application a second transport,
``SSLTransport``, whose ``write()`` encrypts and whose protocol receives
plaintext.  asyncio is layered the same way, and user code as well as
CPython's tests rely on that layering (``start_tls`` swaps the protocol of
a live transport), so the behaviour, messages and callback order follow
asyncio; the code is snakeloop's own.

The connection's state and its moves are ``tlsmachine.TLSMachine``, which
``SSLProtocol`` extends with the methods the transport below calls; the
application's transport is ``ssltransport.SSLTransport``.

The contract with the stream transport and with ``create_connection``
----------------------------------------------------------------------

What ``SSLProtocol`` needs from the transport below it (the stream
transport, or a ``SSLTransport`` for TLS over TLS):

* it calls ``connection_made(transport)`` once; then ``get_buffer(n)`` and
  ``buffer_updated(nbytes)`` (``data_received(data)`` also works),
  ``eof_received()`` and ``pause_writing()``/``resume_writing()``; and
  finally ``connection_lost(exc)`` exactly once, through ``call_soon``;
* it calls ``buffer_updated()`` right after filling the buffer that
  ``get_buffer()`` returned, before any other read on the loop: all the
  TLS connections of a loop share one receive buffer (readiness-based
  transports always do this);
* it honours the return value of ``eof_received()``: true keeps the
  transport open with reading stopped, false closes it;
* it offers ``write(data)``, ``close()`` (flush, then ``connection_lost``),
  ``pause_reading()``/``resume_reading()`` (idempotent, no-ops once closing),
  ``get_extra_info(name, default)``, and ``_force_close(exc)``: drop the
  buffer, stop I/O, close the fd and call ``connection_lost(exc)`` soon.
  ``abort()`` is used when ``_force_close`` is missing;
* for ``loop.start_tls()``: ``_start_tls_compatible = True``,
  ``is_reading()``, and ``set_protocol(p)`` that switches to buffered reads
  when ``p`` is an ``asyncio.BufferedProtocol``.

How ``create_connection``/``create_server``/``connect_accepted_socket``
use it when ``ssl=`` is given (``create_unix_*`` likewise)::

    waiter = loop.create_future()
    ssl_protocol = SSLProtocol(
        loop, app_protocol, sslcontext, waiter,
        server_side, server_hostname,
        ssl_handshake_timeout=ssl_handshake_timeout,
        ssl_shutdown_timeout=ssl_shutdown_timeout)
    <stream transport>(loop, sock, ssl_protocol, extra=..., server=...)
    app_transport = ssl_protocol.app_transport
    try:
        await waiter                  # the handshake
    except BaseException:
        app_transport.close()         # aborts a handshake still running
        waiter = None                 # the exception must not pin the protocol
        raise
    return app_transport              # what the caller gets

* ``sslcontext`` may be ``None`` (``ssl=True`` on a client): the protocol
  then builds ``ssl.create_default_context()``, with hostname checking off
  when ``server_hostname`` is empty.  ``server_side=True`` without a context
  raises ``ValueError('Server side SSL needs a valid SSLContext')``.
* ``ssl_handshake_timeout``/``ssl_shutdown_timeout`` of ``None`` mean
  asyncio's defaults (60 s and 30 s); a value ``<= 0`` raises asyncio's
  ``ValueError``.  Checks such as "only meaningful with ssl" or the
  ``server_hostname`` rules belong to the caller, as in asyncio.
* The application's ``connection_made`` runs once the handshake is done,
  then the waiter completes.  On failure the waiter gets the exception, the
  stream transport has been force-closed, and the application protocol is
  never called.  (With ``call_connection_made=False``, as ``start_tls``
  uses, the protocol was connected before, and a failed handshake ends in
  its ``connection_lost(exc)``; a timed-out one, as in asyncio, does not.)

Where snakeloop differs from asyncio, on purpose
------------------------------------------------

Each of these fixes an asyncio bug; everything else is meant to match.

* A failed handshake sends the alert OpenSSL queued before the connection
  is dropped, so the peer sees "unknown CA" or "certificate required"
  instead of a bare reset or EOF.
* The handshake's last flight (a TLS 1.3 client's Finished) is sent even
  if the application paused reading in ``connection_made()``; asyncio
  holds it back, and the server's handshake stalls.
* ``close()`` after the peer's EOF arrived while reading was paused
  finishes the shutdown; asyncio does nothing and the fd stays open.
* ``is_closing()`` is true once the peer ended the stream, since writes
  are dropped from then on; asyncio says so only at ``connection_lost``.
* A ``BufferedProtocol`` whose ``get_buffer()`` returns a ``bytearray`` gets
  its data; asyncio fills a copy of the buffer's tail instead.
* ``set_write_buffer_limits(high=0)`` does not pause an empty buffer.
* Our ``close_notify`` reaches the transport below even if that transport
  had paused our writing when the shutdown completed.
* After a second ``close()`` the transport acts closed instead of raising
  ``AttributeError``.
* The receive buffer (256 KiB) is shared by the loop's TLS connections
  instead of allocated per connection.
"""

from __future__ import annotations

import logging
from asyncio import BaseTransport, protocols

from .ssltransport import SSLTransport
from .tlsmachine import SSL_HANDSHAKE_TIMEOUT, SSL_SHUTDOWN_TIMEOUT, TLSMachine
from .tlsstates import (
    _APP_EOF,
    _APP_LOST,
    _APP_MADE,
    _FLUSHING,
    _HANDSHAKE,
    _SHUTDOWN,
    _STATE_NAMES,
    _UNWRAPPED,
    _WRAPPED,
)

__all__ = ["SSLProtocol", "SSLTransport", "SSL_HANDSHAKE_TIMEOUT", "SSL_SHUTDOWN_TIMEOUT"]

logger = logging.getLogger("asyncio")


class SSLProtocol(TLSMachine, protocols.BufferedProtocol):
    """The protocol of the plain transport; runs TLS for the application.

    ``TLSMachine`` as the transport below sees it: that transport hands the
    connection's events and its ciphertext to the methods below.
    """

    def __repr__(self) -> str:
        return f"<snakeloop.SSLProtocol {_STATE_NAMES[self._state]}>"

    @property
    def app_transport(self) -> SSLTransport | None:
        """The transport to hand to the application (``None`` once lost)."""
        return self._app_transport

    # -- the transport below calls these ---------------------------------

    def connection_made(self, transport: BaseTransport) -> None:
        self._transport = transport
        self._start_handshake()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._write_backlog.clear()
        self._write_backlog_size = 0
        self._outgoing.read()
        self._conn_lost += 1
        app_transport = self._app_transport
        if app_transport is not None:
            # Nothing to flush any more: no "unclosed transport" warning.
            app_transport._closed = True
        # A connection that died during the handshake was never announced
        # to a new protocol, so there is nothing to take back.
        if self._state != _HANDSHAKE and self._app_state in (_APP_MADE, _APP_EOF):
            self._app_state = _APP_LOST
            self._loop.call_soon(self._app_protocol.connection_lost, exc)
        self._set_state(_UNWRAPPED)
        # Break every cycle here: the application may keep its transport,
        # but not the protocol, the transport below or the context alive.
        self._transport = None
        self._app_transport = None
        self._app_protocol = None
        self._app_get_buffer = self._app_buffer_updated = None
        self._wakeup_waiter(exc)
        self._cancel_timers()

    def get_buffer(self, n: int) -> memoryview:
        # Always the whole buffer: the size hint is only a minimum.
        return self._recv_view

    def buffer_updated(self, nbytes: int) -> None:
        self._incoming.write(self._recv_view[:nbytes])
        self._advance()

    def data_received(self, data: bytes) -> None:
        # For transports below that do not do buffered reads.
        self._incoming.write(data)
        self._advance()

    def eof_received(self) -> bool | None:
        self._eof_received = True
        try:
            if self._loop.get_debug():
                logger.debug("%r received EOF", self)
            state = self._state
            if state == _HANDSHAKE:
                self._on_handshake_complete(ConnectionResetError())
            elif state == _WRAPPED:
                self._set_state(_FLUSHING)
                if self._app_reading_paused:
                    # Plaintext may still be waiting for the application;
                    # keep the transport until it resumes and takes it.
                    return True
                self._do_flush()
            elif state == _FLUSHING:
                self._do_write()
                self._set_state(_SHUTDOWN)
                self._do_shutdown()
            elif state == _SHUTDOWN:
                self._do_shutdown()
        except Exception:
            self._transport.close()
            raise
        return None

    def pause_writing(self) -> None:
        self._ssl_writing_paused = True

    def resume_writing(self) -> None:
        self._ssl_writing_paused = False
        self._process_outgoing()
