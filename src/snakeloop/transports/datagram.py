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

import collections
import logging
import socket
import sys
import warnings
from asyncio import constants, transports, trsock

from .errors import report_transport_error
from .flowcontrol import FlowControlMixin
from .recvbuffer import RECV_BUFFER_SIZE, recv_buffer

__all__ = ["DatagramSocketTransport"]

logger = logging.getLogger("asyncio")

_PY313 = sys.version_info >= (3, 13)
# 3.13 counts 8 bytes of header per queued datagram in the write buffer
# size, and sends empty datagrams instead of dropping them.
_HEADER_SIZE = 8 if _PY313 else 0
_DROP_EMPTY = not _PY313
_RETRY = (BlockingIOError, InterruptedError)

UDP_READ_SIZE = 64 * 1024


def _set_result_unless_cancelled(fut, result):
    if not fut.cancelled():
        fut.set_result(result)


class DatagramSocketTransport(FlowControlMixin, transports.Transport, transports.DatagramTransport):
    """A UDP or Unix datagram socket, driven by readiness callbacks.

    ``address`` is the fixed destination of a "connected" endpoint
    (``remote_addr``): ``sendto`` then refuses any other address.
    """

    max_size = RECV_BUFFER_SIZE
    _sock = None
    _loop = None

    def __init__(self, loop, sock, protocol, address=None, waiter=None, extra=None):
        transports.BaseTransport.__init__(self, extra)
        self._loop = loop
        self._extra["socket"] = trsock.TransportSocket(sock)
        try:
            self._extra["sockname"] = sock.getsockname()
        except OSError:
            self._extra["sockname"] = None
        if "peername" not in self._extra:
            try:
                self._extra["peername"] = sock.getpeername()
            except OSError:
                self._extra["peername"] = None
        self._sock = sock
        self._sock_fd = sock.fileno()
        self._connected = bool(self._extra["peername"])
        self._address = address
        self._recv_view = recv_buffer(loop)
        self._udp = sock.family in (socket.AF_INET, socket.AF_INET6)
        self._protocol = protocol
        self._protocol_connected = True
        self._buffer = collections.deque()  # (bytes, address) pairs
        self._buffer_size = 0
        self._conn_lost = 0  # >0 once connection_lost is scheduled
        self._closing = False
        self._paused = False
        self._set_write_buffer_limits()
        loop._transports[self._sock_fd] = self
        loop.call_soon(protocol.connection_made, self)
        # Reading starts after connection_made has run.
        loop.call_soon(self._add_reader)
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None)

    def __repr__(self):
        info = [self.__class__.__name__]
        if self._sock is None:
            info.append("closed")
        elif self._closing:
            info.append("closing")
        info.append(f"fd={self._sock_fd}")
        loop = self._loop
        if loop is not None and not loop.is_closed():
            info.append("read=polling" if self._sock_fd in loop._readers else "read=idle")
            state = "polling" if self._sock_fd in loop._writers else "idle"
            info.append(f"write=<{state}, bufsize={self.get_write_buffer_size()}>")
        return "<{}>".format(" ".join(info))

    def __del__(self, _warn=warnings.warn):
        if self._sock is not None:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self._sock.close()

    # -- protocol ----------------------------------------------------------------

    def set_protocol(self, protocol):
        self._protocol = protocol
        self._protocol_connected = True

    def get_protocol(self):
        return self._protocol

    # -- reading -----------------------------------------------------------------

    def is_closing(self):
        return self._closing

    def is_reading(self):
        return not self._closing and not self._paused

    def pause_reading(self):
        if not self.is_reading():
            return
        self._paused = True
        self._loop._remove_reader(self._sock_fd)
        if self._loop.get_debug():
            logger.debug("%r pauses reading", self)

    def resume_reading(self):
        if self._closing or not self._paused:
            return
        self._paused = False
        self._add_reader()
        if self._loop.get_debug():
            logger.debug("%r resumes reading", self)

    def _add_reader(self):
        if not self.is_reading():
            return
        self._loop._add_reader(self._sock_fd, self._read_ready)

    def _read_ready(self):
        if self._conn_lost:
            return
        try:
            if self._udp:
                data, addr = self._sock.recvfrom(UDP_READ_SIZE)
            else:
                nbytes, addr = self._sock.recvfrom_into(self._recv_view)
                data = bytes(self._recv_view[:nbytes])
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

    def get_write_buffer_size(self):
        return self._buffer_size

    def sendto(self, data, addr=None):
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
        if self._conn_lost:
            # Closed: drop it, and say so once the caller keeps trying.
            if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return
        if not self._buffer:
            # Nothing queued: try to send it right away.
            try:
                if self._connected:
                    self._sock.send(data)
                else:
                    self._sock.sendto(data, addr)
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
        # Queue a private copy: the caller may reuse a mutable buffer.
        self._buffer.append((bytes(data), addr))
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

    # -- closing -----------------------------------------------------------------

    def close(self):
        if self._closing:
            return
        self._closing = True
        self._loop._remove_reader(self._sock_fd)
        if not self._buffer:
            self._conn_lost += 1
            self._loop._remove_writer(self._sock_fd)
            self._loop.call_soon(self._call_connection_lost, None)
        # Otherwise _sendto_ready calls connection_lost once the queue is out.

    def abort(self):
        self._force_close(None)

    def _fatal_error(self, exc, message="Fatal error on transport"):
        report_transport_error(self, exc, message, expected=isinstance(exc, OSError))
        self._force_close(exc)

    def _force_close(self, exc):
        if self._conn_lost:
            return
        if self._buffer:
            self._buffer.clear()
            self._buffer_size = 0
            self._loop._remove_writer(self._sock_fd)
        if not self._closing:
            self._closing = True
            self._loop._remove_reader(self._sock_fd)
        self._conn_lost += 1
        self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc):
        try:
            if self._protocol_connected:
                self._protocol.connection_lost(exc)
        finally:
            loop = self._loop
            if loop._transports.get(self._sock_fd) is self:
                del loop._transports[self._sock_fd]
            self._sock.close()
            self._sock = None
            self._protocol = None
            self._loop = None
