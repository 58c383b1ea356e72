"""The TLS state machine: an ``ssl.SSLObject`` between two ``ssl.MemoryBIO``.

``TLSMachine`` holds the state of one TLS connection and moves it through
the handshake, the exchange of data and the shutdown, with the flow control
of both sides.  It is driven from two faces: ``SSLProtocol`` (``tls``), the
protocol of the plain transport below, feeds it ciphertext and connection
events; ``SSLTransport`` (``ssltransport``), the application's transport,
hands it plaintext and closes it.  It touches no socket and owns no timer
beyond its two timeouts.

TLS and OpenSSL facts this module relies on
-------------------------------------------

* An ``SSLObject`` made by ``SSLContext.wrap_bio`` never touches a socket.
  Bytes from the peer are written into the *incoming* BIO; whatever OpenSSL
  wants sent appears in the *outgoing* BIO.  Any call may leave bytes there,
  ``read()`` included (TLS 1.3 KeyUpdate answers, TLS 1.2 renegotiation,
  alerts), so the outgoing BIO is drained after every call that can make
  progress.
* ``SSLWantReadError`` is not a failure: it means "nothing more can be done
  until more bytes arrive from the peer".  A memory BIO can always grow, so
  ``SSLWantWriteError`` does not occur.  OpenSSL sometimes reports a memory
  BIO that ran dry as ``SSL_ERROR_SYSCALL`` with no errno, which Python
  raises as ``SSLSyscallError``; it is treated like ``SSLWantReadError``
  (asyncio does the same).
* ``read()`` returning ``b''`` (or ``0`` when reading into a buffer) means
  the peer's ``close_notify`` arrived: a clean end of the TLS stream.  A TCP
  FIN without ``close_notify`` would be a truncation; this module never
  calls ``write_eof()`` on the incoming BIO, so OpenSSL never reports that
  as ``SSLEOFError``: the transport's ``eof_received()`` handles it instead.
* TLS 1.3: a client's ``do_handshake()`` returns as soon as it has queued
  its Finished message, before the server has checked it.  A server that
  then rejects the client (say, a missing client certificate) sends an
  alert that the client only sees on its next ``read()``, after its
  application already got ``connection_made()``.  Servers also send
  NewSessionTicket messages after the handshake; the client's ``read()``
  consumes them silently and may then raise ``SSLWantReadError`` with no
  application data at all.
* Without ``SSL_MODE_ENABLE_PARTIAL_WRITE`` (CPython does not set it)
  ``SSLObject.write()`` takes all of its argument or raises.  During a TLS
  1.2 renegotiation it can raise ``SSLWantReadError``; the data then stays
  in the write backlog and is retried, unchanged, after the next read.
* ``unwrap()`` queues our ``close_notify`` and then raises
  ``SSLWantReadError`` until the peer's ``close_notify`` has been read;
  once both are exchanged it returns.  If the peer's came first (we saw
  ``read()`` return ``b''``), ``unwrap()`` completes at once.
* ``MemoryBIO.pending`` counts buffered bytes: the outgoing one is part of
  the application's write-buffer size, the incoming one drives pausing the
  transport underneath.
"""

from __future__ import annotations

import collections
import logging
import ssl
import sys
from asyncio import BaseProtocol, Future, constants, exceptions, protocols
from typing import TYPE_CHECKING, Any

from .ssltransport import SSLTransport
from .tlsstates import (
    _APP_EOF,
    _APP_INIT,
    _APP_MADE,
    _FLUSHING,
    _HANDSHAKE,
    _NEXT_STATE,
    _SHUTDOWN,
    _STATE_NAMES,
    _UNWRAPPED,
    _WRAPPED,
)

if TYPE_CHECKING:
    from .._core.contract import LoopContract

__all__ = ["SSL_HANDSHAKE_TIMEOUT", "SSL_SHUTDOWN_TIMEOUT", "TLSMachine"]

logger = logging.getLogger("asyncio")

_PY314 = sys.version_info >= (3, 14)

SSL_HANDSHAKE_TIMEOUT = constants.SSL_HANDSHAKE_TIMEOUT
SSL_SHUTDOWN_TIMEOUT = constants.SSL_SHUTDOWN_TIMEOUT

# Write-side limits of the application transport and read-side limits of the
# incoming BIO, in KiB: asyncio's values, so that pausing happens at the
# same byte counts.
_WRITE_HIGH_KIB = constants.FLOW_CONTROL_HIGH_WATER_SSL_WRITE
_READ_HIGH_KIB = constants.FLOW_CONTROL_HIGH_WATER_SSL_READ

# "Call me again when more bytes have arrived" (see the module docstring).
_AGAIN = (ssl.SSLWantReadError, ssl.SSLSyscallError)


def _limits(high, low, default_kib):
    """asyncio's defaulting rules for a (high, low) pair of water marks."""
    if high is None:
        high = default_kib * 1024 if low is None else 4 * low
    if low is None:
        low = high // 4
    if not high >= low >= 0:
        raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
    return high, low


def _default_context(server_side, server_hostname):
    if server_side:
        raise ValueError("Server side SSL needs a valid SSLContext")
    # ssl=True on a client: the secure defaults (verification, hostname
    # checking, TLS >= 1.2).  An empty or missing server_hostname is the one
    # documented way to switch hostname checking off.
    context = ssl.create_default_context()
    if not server_hostname:
        context.check_hostname = False
    return context


class TLSMachine:
    """One TLS connection's state, and the moves between its states.

    The application transport exists from the start (``_app_transport``),
    but the application protocol hears nothing before the handshake is
    done.  With ``call_connection_made=False`` (``start_tls``) the protocol
    is assumed to be connected already and gets no second
    ``connection_made``.
    """

    # Size of the buffer the stream transport receives into, and of the
    # chunks taken out of the SSLObject for a non-buffered application.
    max_size = 256 * 1024

    def __init__(
        self,
        loop: LoopContract,
        app_protocol: BaseProtocol,
        sslcontext: ssl.SSLContext | None,
        waiter: Future[Any] | None,
        server_side: bool = False,
        server_hostname: str | None = None,
        call_connection_made: bool = True,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> None:
        if ssl_handshake_timeout is None:
            ssl_handshake_timeout = SSL_HANDSHAKE_TIMEOUT
        elif ssl_handshake_timeout <= 0:
            raise ValueError(
                f"ssl_handshake_timeout should be a positive number, got {ssl_handshake_timeout}"
            )
        if ssl_shutdown_timeout is None:
            ssl_shutdown_timeout = SSL_SHUTDOWN_TIMEOUT
        elif ssl_shutdown_timeout <= 0:
            raise ValueError(
                f"ssl_shutdown_timeout should be a positive number, got {ssl_shutdown_timeout}"
            )
        if not sslcontext:
            sslcontext = _default_context(server_side, server_hostname)

        self._loop = loop
        self._waiter = waiter
        self._server_side = server_side
        self._server_hostname = server_hostname if server_hostname and not server_side else None
        self._sslcontext = sslcontext
        self._ssl_handshake_timeout = ssl_handshake_timeout
        self._ssl_shutdown_timeout = ssl_shutdown_timeout
        # More keys (peercert, cipher, ...) are added once the handshake is done.
        self._extra = {"sslcontext": sslcontext}

        # Shared with the loop's other readers: buffer_updated() copies the
        # ciphertext into the incoming BIO before anything else runs.
        self._recv_view = loop._shared_recv_buffer()
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._sslobj = sslcontext.wrap_bio(
            self._incoming,
            self._outgoing,
            server_side=server_side,
            server_hostname=self._server_hostname,
        )
        # The C object behind the SSLObject: the same read()/write()/
        # pending(), without a Python-level wrapper call for every record.
        self._sslobj_c = getattr(self._sslobj, "_sslobj", self._sslobj)

        self._state = _UNWRAPPED
        self._app_state = _APP_INIT if call_connection_made else _APP_MADE
        # The transport below (see the contract in ``tls``); set by connection_made().
        self._transport: Any = None
        self._eof_received = False
        # Counts connection_lost and writes after it, for the warning asyncio
        # logs when an application keeps writing to a dead connection.
        self._conn_lost = 0
        self._handshake_start_time = None
        self._handshake_timeout_handle = None
        self._shutdown_timeout_handle = None

        # Plaintext the SSLObject has not taken yet (see the renegotiation
        # note in the module docstring); usually empty.
        self._write_backlog: collections.deque[bytes | bytearray | memoryview] = collections.deque()
        self._write_backlog_size = 0

        self._app_protocol: Any = None  # None once connection_lost was called
        self._app_protocol_is_buffer = False
        self._app_get_buffer = None
        self._app_buffer_updated = None
        self._set_app_protocol(app_protocol)

        # Flow control, four flags:
        # - _ssl_writing_paused: the transport below asked us to stop
        #   writing; ciphertext waits in the outgoing BIO;
        # - _app_writing_paused: we asked the application to stop writing;
        # - _app_reading_paused: the application asked not to get data;
        #   ciphertext waits in the incoming BIO;
        # - _ssl_reading_paused: we asked the transport below to stop reading,
        #   because the incoming BIO is over its high-water mark.
        self._ssl_writing_paused = False
        self._app_writing_paused = False
        self._app_reading_paused = False
        self._ssl_reading_paused = False
        self._write_high = self._write_low = 0
        self._set_write_buffer_limits()
        self._read_high = self._read_low = 0
        self._set_read_buffer_limits()

        self._app_transport: SSLTransport | None = SSLTransport(loop, self)

    def _set_app_protocol(self, app_protocol):
        self._app_protocol = app_protocol
        if isinstance(app_protocol, protocols.BufferedProtocol):
            self._app_protocol_is_buffer = True
            self._app_get_buffer = app_protocol.get_buffer
            self._app_buffer_updated = app_protocol.buffer_updated
        else:
            self._app_protocol_is_buffer = False
            self._app_get_buffer = self._app_buffer_updated = None

    def _wakeup_waiter(self, exc=None):
        waiter = self._waiter
        if waiter is None:
            return
        self._waiter = None
        if not waiter.cancelled():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    def _get_extra_info(self, name, default=None):
        if name in self._extra:
            return self._extra[name]
        if self._transport is not None:
            return self._transport.get_extra_info(name, default)
        return default

    def _set_state(self, new_state):
        # A wrong move is a bug in this module, not something a peer can
        # cause; fail loudly instead of carrying on in a confused state.
        if new_state != _UNWRAPPED and _NEXT_STATE.get(self._state) != new_state:
            old, new = _STATE_NAMES[self._state], _STATE_NAMES[new_state]
            raise RuntimeError(f"cannot switch state from {old} to {new}")
        self._state = new_state

    def _cancel_timers(self):
        if self._shutdown_timeout_handle is not None:
            self._shutdown_timeout_handle.cancel()
            self._shutdown_timeout_handle = None
        if self._handshake_timeout_handle is not None:
            self._handshake_timeout_handle.cancel()
            self._handshake_timeout_handle = None

    def _advance(self):
        """New ciphertext is in the incoming BIO: move the state machine."""
        state = self._state
        if state == _HANDSHAKE:
            self._do_handshake()
        elif state == _WRAPPED:
            self._do_read()
        elif state == _FLUSHING:
            self._do_flush()
        elif state == _SHUTDOWN:
            self._do_shutdown()

    # -- handshake ----------------------------------------------------------

    def _start_handshake(self):
        if self._loop.get_debug():
            logger.debug("%r starts SSL handshake", self)
            self._handshake_start_time = self._loop.time()
        else:
            self._handshake_start_time = None
        self._set_state(_HANDSHAKE)
        # The timer is what frees the fd of a peer that connects and then
        # says nothing (or too little) forever.
        self._handshake_timeout_handle = self._loop.call_later(
            self._ssl_handshake_timeout, self._check_handshake_timeout
        )
        self._do_handshake()

    def _check_handshake_timeout(self):
        self._handshake_timeout_handle = None
        if self._state == _HANDSHAKE:
            self._fatal_error(
                ConnectionAbortedError(
                    f"SSL handshake is taking longer than {self._ssl_handshake_timeout} "
                    "seconds: aborting the connection"
                )
            )

    def _do_handshake(self):
        try:
            self._sslobj.do_handshake()
        except _AGAIN:
            self._process_outgoing()
        except ssl.SSLError as exc:
            self._on_handshake_complete(exc)
        else:
            self._on_handshake_complete(None)

    def _on_handshake_complete(self, handshake_exc):
        if self._handshake_timeout_handle is not None:
            self._handshake_timeout_handle.cancel()
            self._handshake_timeout_handle = None

        sslobj = self._sslobj
        exc = handshake_exc
        if exc is None:
            self._set_state(_WRAPPED)
            try:
                peercert = sslobj.getpeercert()
            except Exception as err:
                exc = err
        if exc is not None:
            self._set_state(_UNWRAPPED)
            if isinstance(exc, ssl.CertificateError):
                msg = "SSL handshake failed on verifying the certificate"
            else:
                msg = "SSL handshake failed"
            # OpenSSL has queued a fatal alert saying why (unknown CA,
            # certificate required, ...).  asyncio drops it with the
            # connection, leaving the peer a bare reset; TLS says to send it.
            alert = self._outgoing.read()
            if alert and self._transport is not None and not self._eof_received:
                self._transport.write(alert)
            self._fatal_error(exc, msg)
            self._wakeup_waiter(exc)
            return

        if self._loop.get_debug() and self._handshake_start_time is not None:
            elapsed = self._loop.time() - self._handshake_start_time
            logger.debug("%r: SSL handshake took %.1f ms", self, elapsed * 1e3)

        self._extra.update(
            peercert=peercert,
            cipher=sslobj.cipher(),
            compression=sslobj.compression(),
            ssl_object=sslobj,
        )
        if self._app_state == _APP_INIT:
            self._app_state = _APP_MADE
            self._app_protocol.connection_made(self._app_transport)
        self._wakeup_waiter()
        # The handshake may have left ciphertext to send (our Finished, a
        # server's session tickets) and the peer's first application data
        # may already sit in the incoming BIO.
        self._do_read()
        if self._state == _WRAPPED and self._app_reading_paused:
            self._process_outgoing()

    # -- shutdown ------------------------------------------------------------

    def _start_shutdown(self):
        if self._state == _FLUSHING and self._shutdown_timeout_handle is None:
            # The peer's EOF came while the application had paused reading,
            # and now the application closes: nobody will take the plaintext
            # that is left, so finish now.  (asyncio returns here and keeps
            # the fd open until a resume_reading() that never comes.)
            if self._app_transport is not None:
                self._app_transport._closed = True
            self._set_state(_SHUTDOWN)
            self._do_shutdown()
            return
        if self._state in (_FLUSHING, _SHUTDOWN, _UNWRAPPED):
            return
        if self._app_transport is not None:
            self._app_transport._closed = True
        if self._state == _HANDSHAKE:
            # Nothing the application wrote can have been sent yet, and a
            # half-done handshake cannot be shut down politely.
            self._abort(None)
            return
        self._set_state(_FLUSHING)
        self._shutdown_timeout_handle = self._loop.call_later(
            self._ssl_shutdown_timeout, self._check_shutdown_timeout
        )
        self._do_flush()

    def _check_shutdown_timeout(self):
        self._shutdown_timeout_handle = None
        if self._state in (_FLUSHING, _SHUTDOWN) and self._transport is not None:
            self._force_close_below(exceptions.TimeoutError("SSL shutdown timed out"))

    def _do_flush(self):
        # Hand over whatever plaintext has arrived and send what is still
        # queued, then ask for the peer's close_notify.
        self._do_read()
        self._set_state(_SHUTDOWN)
        self._do_shutdown()

    def _do_shutdown(self):
        try:
            if not self._eof_received:
                self._sslobj.unwrap()
        except _AGAIN:
            self._process_outgoing()
        except ssl.SSLError as exc:
            self._on_shutdown_complete(exc)
        else:
            self._process_outgoing()
            self._call_eof_received()
            self._on_shutdown_complete(None)

    def _on_shutdown_complete(self, shutdown_exc):
        handle = self._shutdown_timeout_handle
        if handle is not None and (shutdown_exc is not None or not _PY314):
            handle.cancel()
            self._shutdown_timeout_handle = None
        if shutdown_exc is not None:
            self._fatal_error(shutdown_exc)
            return
        transport = self._transport
        if transport is None:
            return
        if _PY314 and self._shutdown_timeout_handle is None:
            # As asyncio from 3.14: the close() below flushes the transport's
            # buffer first, which a peer that reads nothing can hold up for
            # ever, so the timeout (started now if the peer began the
            # shutdown) runs on until connection_lost cancels it.
            self._shutdown_timeout_handle = self._loop.call_later(
                self._ssl_shutdown_timeout, self._check_shutdown_timeout
            )
        # Our close_notify must reach the transport even if it had asked us
        # to pause: its close() flushes its buffer, not our BIO.
        pending = self._outgoing.read()
        if pending:
            transport.write(pending)
        self._loop.call_soon(transport.close)

    def _abort(self, exc):
        self._set_state(_UNWRAPPED)
        if self._transport is not None:
            self._force_close_below(exc)

    def _force_close_below(self, exc):
        transport = self._transport
        force_close = getattr(transport, "_force_close", None)
        if force_close is not None:
            force_close(exc)
        else:
            transport.abort()

    # -- application data out --------------------------------------------

    def _write_appdata(self, list_of_data):
        if self._state in (_FLUSHING, _SHUTDOWN, _UNWRAPPED):
            if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("SSL connection is closed")
            self._conn_lost += 1
            return
        backlog = self._write_backlog
        size = 0
        for data in list_of_data:
            backlog.append(data)
            size += len(data)
        self._write_backlog_size += size
        try:
            if self._state == _WRAPPED:
                self._do_write()
        except Exception as exc:
            self._fatal_error(exc, "Fatal error on SSL protocol")

    def _do_write(self):
        backlog = self._write_backlog
        write = self._sslobj_c.write
        try:
            while backlog:
                data = backlog[0]
                count = write(data)
                if count < len(data):
                    backlog[0] = memoryview(data)[count:]
                else:
                    backlog.popleft()
                self._write_backlog_size -= count
        except _AGAIN:
            pass
        self._process_outgoing()

    def _process_outgoing(self):
        if self._outgoing.pending and not self._ssl_writing_paused and self._transport:
            self._transport.write(self._outgoing.read())
        self._control_app_writing()

    # -- application data in ---------------------------------------------

    def _do_read(self):
        if self._state not in (_WRAPPED, _FLUSHING):
            return
        try:
            if not self._app_reading_paused:
                if self._app_protocol_is_buffer:
                    self._do_read_buffered()
                else:
                    self._do_read_copied()
                # Reading can unblock a write stuck on a renegotiation, and
                # can itself produce records to send.
                if self._write_backlog:
                    self._do_write()
                else:
                    self._process_outgoing()
            self._control_ssl_reading()
        except Exception as exc:
            self._fatal_error(exc, "Fatal error on SSL protocol")

    def _do_read_buffered(self):
        # A memoryview, so that reading at an offset fills the application's
        # buffer instead of a copy of it (slicing a bytearray copies).
        with memoryview(self._app_get_buffer(self._incoming.pending)) as buf:
            wants = len(buf)
            if not wants:
                raise RuntimeError("get_buffer() returned an empty buffer")
            sslobj = self._sslobj_c
            read = sslobj.read
            incoming = self._incoming
            offset = 0
            count = 1
            try:
                count = read(wants, buf)
                if count > 0:
                    offset = count
                    while offset < wants:
                        if not incoming.pending and not sslobj.pending():
                            break  # the next read could only want more bytes
                        count = read(wants - offset, buf[offset:])
                        if count <= 0:
                            break
                        offset += count
                    else:
                        # The application's buffer is full: come back for the
                        # rest on the next iteration rather than hog the loop.
                        self._loop.call_soon(self._do_read)
            except _AGAIN:
                pass
        if offset:
            self._app_buffer_updated(offset)
        if not count:
            self._on_close_notify()

    def _do_read_copied(self):
        sslobj = self._sslobj_c
        read = sslobj.read
        incoming = self._incoming
        max_size = self.max_size
        chunks = []
        chunk = b"-"
        try:
            while True:
                chunk = read(max_size)
                if not chunk:
                    break
                chunks.append(chunk)
                # Nothing left in the BIO nor decrypted inside OpenSSL: the
                # next read could only raise SSLWantReadError, which costs
                # more than asking.
                if not incoming.pending and not sslobj.pending():
                    break
        except _AGAIN:
            pass
        if chunks:
            self._app_protocol.data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if not chunk:
            self._on_close_notify()

    def _on_close_notify(self):
        self._call_eof_received()
        self._start_shutdown()

    def _call_eof_received(self):
        try:
            if self._app_state == _APP_MADE:
                self._app_state = _APP_EOF
                keep_open = self._app_protocol.eof_received()
                if keep_open:
                    logger.warning(
                        "returning true from eof_received() has no effect when using ssl"
                    )
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Error calling eof_received()")

    # -- flow control: application writes ----------------------------------

    def _get_write_buffer_size(self):
        return self._outgoing.pending + self._write_backlog_size

    def _set_write_buffer_limits(self, high=None, low=None):
        self._write_high, self._write_low = _limits(high, low, _WRITE_HIGH_KIB)

    def _control_app_writing(self):
        size = self._get_write_buffer_size()
        # asyncio pauses at size >= high; "size > 0" keeps a high-water mark
        # of zero from pausing an empty buffer, which asyncio does and which
        # leaves a drain() waiting until some unrelated I/O happens.
        if not self._app_writing_paused:
            if size >= self._write_high and size > 0:
                self._app_writing_paused = True
                self._call_app_flow("pause_writing")
        elif size <= self._write_low:
            self._app_writing_paused = False
            self._call_app_flow("resume_writing")

    def _call_app_flow(self, name):
        if self._app_protocol is None:
            return  # connection_lost was the last word
        try:
            getattr(self._app_protocol, name)()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            self._loop.call_exception_handler(
                {
                    "message": f"protocol.{name}() failed",
                    "exception": exc,
                    "transport": self._app_transport,
                    "protocol": self,
                }
            )

    # -- flow control: application reads ------------------------------------

    def _pause_reading(self):
        self._app_reading_paused = True

    def _resume_reading(self):
        if self._app_reading_paused:
            self._app_reading_paused = False
            self._loop.call_soon(self._resume_after_pause)

    def _resume_after_pause(self):
        state = self._state
        if state == _WRAPPED:
            self._do_read()
        elif state == _FLUSHING:
            self._do_flush()
        elif state == _SHUTDOWN:
            self._do_shutdown()

    def _set_read_buffer_limits(self, high=None, low=None):
        self._read_high, self._read_low = _limits(high, low, _READ_HIGH_KIB)

    def _control_ssl_reading(self):
        transport = self._transport
        if transport is None:
            return
        size = self._incoming.pending
        if not self._ssl_reading_paused:
            if size >= self._read_high:
                self._ssl_reading_paused = True
                transport.pause_reading()
        elif size <= self._read_low:
            self._ssl_reading_paused = False
            transport.resume_reading()

    # -- errors ----------------------------------------------------------------

    def _fatal_error(self, exc, message="Fatal error on transport"):
        if self._transport is not None:
            self._force_close_below(exc)
        # A peer resetting, timing out or sending garbage is the network's
        # doing (OSError covers ssl.SSLError): not worth an error report.
        if isinstance(exc, OSError):
            if self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=True)
        elif not isinstance(exc, exceptions.CancelledError):
            self._loop.call_exception_handler(
                {
                    "message": message,
                    "exception": exc,
                    "transport": self._transport,
                    "protocol": self,
                }
            )
