# cython: annotation_typing=False
"""The datagram transport: UDP and Unix datagram sockets.

OS facts this module relies on:

* One ``recvfrom`` returns exactly one datagram, whole or cut to the buffer
  size, so a read must ask for as much as the biggest datagram asyncio
  accepts (256 KiB).  A UDP datagram carries at most 65,535 bytes (the
  16-bit length field), so UDP sockets ask ``recvfrom`` for 64 KiB: it
  reads straight into a ``bytes`` object and shrinks it, one copy.  Unix
  datagrams go up to the socket's send buffer size; those sockets read into
  one reusable 256 KiB buffer per loop and copy out the received bytes
  (asking ``recvfrom`` for 256 KiB every time would make glibc map and unmap
  memory on each call in a fresh process).
* ``sendto`` on a non-blocking datagram socket sends the whole datagram or
  raises; ``BlockingIOError`` means the socket's send buffer is full (on
  Linux mostly with Unix datagram sockets whose peer does not read, or a
  UDP socket under a burst).  Datagrams that do not fit are queued in
  order and sent when epoll reports the socket writable.
* Errors of a datagram socket do not end it: ICMP "port unreachable" for a
  connected UDP socket shows up as ``ConnectionRefusedError`` from a later
  ``send``/``recv``; ``EMSGSIZE`` comes from a datagram that is too big.
  They go to ``protocol.error_received()`` and the transport carries on.
* ``send`` (rather than ``sendto``) is used on a connected socket, which
  has a peer address; ``getpeername`` fails on an unconnected one.
* Empty datagrams are legal.  asyncio drops them before 3.13 and sends
  them from 3.13 on; snakeloop does what the running Python's asyncio does.
* The fd is unregistered from epoll before the socket is closed, so a
  reused fd number never inherits this transport's registration.
"""

from __future__ import annotations

import logging
import socket
import sys
from asyncio import constants, protocols, transports
from typing import TYPE_CHECKING, Any

if False:  # Cython reads this import when it compiles the module (setup.py)
    import cython
else:
    from .._core import cythonshim as cython
from .socketbase import SocketTransportBase, show_as

if not cython.compiled:
    from .socketcalls import (
        SOCKADDR_STORAGE_SIZE,
        sock_recvfrom_inet,
        sock_send,
        sock_sendto_peer,
    )

if TYPE_CHECKING:
    import asyncio
    from socket import _Address

    from .._core.contract import LoopContract

__all__ = ["DatagramSocketTransport"]

logger = logging.getLogger("asyncio")

_PY312 = sys.version_info >= (3, 12)
_PY313 = sys.version_info >= (3, 13)
# 3.13 counts 8 bytes of header per queued datagram in the write buffer
# size, and sends empty datagrams instead of dropping them.
_HEADER_SIZE = 8 if _PY313 else 0
_DROP_EMPTY = not _PY313
_RETRY = (BlockingIOError, InterruptedError)

UDP_READ_SIZE = 64 * 1024
# Whether this build may call the socket's fd itself (see _read_ready).
_C_CALLS = cython.compiled


# asyncio's selector datagram transport is an asyncio.DatagramTransport only
# from 3.12 on (python/cpython#90352, not backported); on 3.11 it is a plain
# Transport.  What isinstance() sees follows the running Python, so it
# answers alike.
if sys.version_info >= (3, 12):

    class _DatagramKind(transports._FlowControlMixin, transports.DatagramTransport):
        __slots__ = ()

else:
    _DatagramKind = transports._FlowControlMixin


class DatagramSocketTransport(SocketTransportBase):
    """A UDP or Unix datagram socket, driven by readiness callbacks.

    ``address`` is the fixed destination of a "connected" endpoint
    (``remote_addr``): ``sendto`` then refuses any other address.
    """

    __slots__ = ("_address", "_connected", "_recv_view", "_udp")

    # A DatagramProtocol, or whatever set_protocol() was given: asyncio does
    # not check either.
    _protocol: Any
    # Compiled build only (C fields, in datagram.pxd): the raw sockaddr of the
    # sender of the last datagram read, and its address tuple, so that a
    # datagram from the same sender gets the same tuple and sendto() to that
    # very tuple skips parsing it (socketcalls.pxd).
    _peer: bytearray
    _peer_address: Any

    # What asyncio's Transport has and its datagram transport leaves alone:
    # they raise NotImplementedError.
    write = transports.WriteTransport.write
    writelines = transports.WriteTransport.writelines
    write_eof = transports.WriteTransport.write_eof
    can_write_eof = transports.WriteTransport.can_write_eof

    def __init__(
        self,
        loop: LoopContract,
        sock: socket.socket,
        protocol: protocols.DatagramProtocol,
        address: _Address | None = None,
        waiter: asyncio.Future[None] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        SocketTransportBase.__init__(self, loop, sock, extra)
        self._connected = bool(self._extra["peername"])
        self._address = address
        self._recv_view = loop._shared_recv_buffer()
        self._udp = sock.family in (socket.AF_INET, socket.AF_INET6)
        if self._direct_calls and self._udp:
            self._peer = bytearray(SOCKADDR_STORAGE_SIZE)
        self._protocol = protocol
        self._protocol_connected = True
        # The write buffer holds (bytes, address) pairs.
        self._start(waiter)

    # -- protocol ----------------------------------------------------------------

    def set_protocol(self, protocol: protocols.BaseProtocol) -> None:
        self._protocol = protocol
        self._protocol_connected = True

    # -- reading -----------------------------------------------------------------

    def _add_reader(self):
        if not self.is_reading():
            return
        # No context of its own (``_context`` stays None): asyncio gives one to
        # stream transports only, 3.15 included, so a datagram's callbacks run
        # in a copy of the context that registered them.
        self._loop._add_reader(self._sock_fd, self._read_ready)

    # The compiled build calls recvfrom(2), send(2) and sendto(2) on the fd itself
    # when it may (socketcalls.pxd); the pure build always calls the socket's
    # methods.  One copy serves both: _C_CALLS is False there, and tested first, a
    # module constant costs it less than the transport's _direct_calls field.

    def _read_ready(self):
        if self._conn_lost:
            return
        try:
            if not self._udp:
                nbytes, addr = self._sock.recvfrom_into(self._recv_view)
                data = bytes(self._recv_view[:nbytes])
            elif _C_CALLS and self._direct_calls:
                data, addr = sock_recvfrom_inet(
                    self._sock_fd, UDP_READ_SIZE, self._peer, self._peer_address
                )
                self._peer_address = addr
            else:
                data, addr = self._sock.recvfrom(UDP_READ_SIZE)
        except _RETRY:
            return
        except OSError as exc:
            self._protocol.error_received(exc)
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on datagram transport")
            return
        self._protocol.datagram_received(data, addr)

    # -- writing -----------------------------------------------------------------

    def sendto(self, data: bytes | bytearray | memoryview, addr: _Address | None = None) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"data argument must be a bytes-like object, not {type(data).__name__!r}"
            )
        if _DROP_EMPTY and not data:
            return
        if self._address:
            if addr not in (None, self._address):
                raise ValueError(f"Invalid address: must be None or {self._address}")
            addr = self._address
        if self._conn_lost and (self._address or self._sock is None):
            # Closed: drop it, and say so once the caller keeps trying.
            # Only with a fixed remote address, as asyncio: a closing
            # transport without one still sends, and reports its errors
            # to error_received (once the socket is gone, asyncio fails
            # on it; this drops the datagram instead).
            if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return
        if not self._buffer:
            # Nothing queued: try to send it right away.
            try:
                if self._connected:
                    if _C_CALLS and self._direct_calls and type(data) is bytes:
                        sock_send(self._sock_fd, data)
                    else:
                        self._sock.send(data)
                elif (
                    _C_CALLS
                    and addr is self._peer_address
                    and addr is not None
                    and self._direct_calls
                    and type(data) is bytes
                ):
                    # The sender of the last datagram read (socketcalls.pxd).
                    sock_sendto_peer(self._sock_fd, data, self._peer, self._sock, addr)
                else:
                    # A None address reaches the socket, which raises
                    # TypeError, as it does under asyncio.
                    self._sock.sendto(data, addr)  # type: ignore[arg-type]
                return
            except _RETRY:
                self._loop._add_writer(self._sock_fd, self._sendto_ready)
            except OSError as exc:
                self._protocol.error_received(exc)
                return
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal write error on datagram transport")
                return
        self._queue(data, addr)

    def _queue(self, data, addr):
        """Queue a datagram that cannot go now, behind those already queued."""
        # A private copy: the caller may reuse a mutable buffer.
        self._queue_buffer().append((bytes(data), addr))
        self._buffer_size += len(data) + _HEADER_SIZE
        self._maybe_pause_protocol()

    def _sendto_ready(self):
        buffer = self._buffer
        sock = self._sock
        connected = self._connected
        while buffer:
            data, addr = buffer[0]
            try:
                if connected:
                    sock.send(data)
                else:
                    sock.sendto(data, addr)
            except _RETRY:
                break
            except OSError as exc:
                self._drop_first()
                self._protocol.error_received(exc)
                # The writer stays registered and sends the rest next time.
                return
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._drop_first()
                self._fatal_error(exc, "Fatal write error on datagram transport")
                return
            self._drop_first()
        self._maybe_resume_protocol()  # may queue more
        if not buffer:
            self._loop._remove_writer(self._sock_fd)
            if self._closing:
                self._conn_lost += 1
                self._call_connection_lost(None)

    def _drop_first(self):
        data = self._buffer.popleft()[0]
        self._buffer_size -= len(data) + _HEADER_SIZE


show_as(DatagramSocketTransport, _DatagramKind)
