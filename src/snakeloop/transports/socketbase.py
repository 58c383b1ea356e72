"""What the stream and datagram socket transports share.

The socket and its extra info, reading switched on and off, the repr, and
the end of a transport: ``close()`` once the write buffer is out,
``abort()`` and fatal errors at once, and ``connection_lost`` exactly once,
after which the socket is closed and the transport lets go of the loop.

OS facts this module relies on:

* The fd is unregistered from epoll (``_remove_reader``/``_remove_writer``)
  before the socket is closed, so a reused fd number never inherits this
  transport's registration.
* ``getpeername`` fails on an unconnected socket: ``peername`` is then None.
"""

from __future__ import annotations

import collections
import logging
import socket
import warnings
from asyncio import protocols, trsock
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.futures import _set_result_unless_cancelled
from .errors import report_transport_error
from .flowcontrol import FlowControlMixin
from .recvbuffer import RECV_BUFFER_SIZE

if TYPE_CHECKING:
    from .._core.contract import LoopContract

__all__ = ["SocketTransportBase"]

logger = logging.getLogger("asyncio")


class SocketTransportBase(FlowControlMixin):
    """Needs ``_add_reader()`` (start watching for reads) from the subclass."""

    max_size = RECV_BUFFER_SIZE
    # Set by _attach_socket, dropped once connection_lost has run.  Before
    # and after, the state flags (_closing, _conn_lost) keep every method
    # but __repr__ and __del__ off them, and those two check for None.
    _sock: socket.socket = None  # type: ignore[assignment]
    _loop: LoopContract = None  # type: ignore[assignment]
    _protocol: protocols.BaseProtocol
    _extra: dict[str, Any]  # asyncio.BaseTransport's slot

    def _attach_socket(self, loop, sock):
        """The first half of ``__init__``: the socket, its extra info, state."""
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
        self._buffer = collections.deque()
        self._buffer_size = 0
        self._conn_lost = 0  # >0 once connection_lost is scheduled
        self._closing = False
        self._paused = False
        self._set_write_buffer_limits()

    def _add_reader(self) -> None:
        """Start watching the socket for reads, if the transport reads now."""
        raise NotImplementedError

    def _start(self, waiter):
        """The last step of ``__init__``: tell the protocol, then read."""
        loop = self._loop
        loop._attach_transport(self._sock_fd, self)
        loop.call_soon(self._protocol.connection_made, self)
        # Reading starts after connection_made has run.
        loop.call_soon(self._add_reader)
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None)

    def __repr__(self) -> str:
        info = [self.__class__.__name__]
        if self._sock is None:
            info.append("closed")
        elif self._closing:
            info.append("closing")
        info.append(f"fd={self._sock_fd}")
        loop = self._loop
        if loop is not None and not loop.is_closed():
            reading = loop._get_reader(self._sock_fd) is not None
            info.append("read=polling" if reading else "read=idle")
            state = "idle" if loop._get_writer(self._sock_fd) is None else "polling"
            info.append(f"write=<{state}, bufsize={self.get_write_buffer_size()}>")
        return "<{}>".format(" ".join(info))

    def __del__(self, _warn: Callable[..., object] = warnings.warn) -> None:
        if self._sock is not None:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self._sock.close()

    def get_protocol(self) -> protocols.BaseProtocol:
        return self._protocol

    # -- reading ---------------------------------------------------------------

    def is_closing(self) -> bool:
        return self._closing

    def is_reading(self) -> bool:
        return not self._closing and not self._paused

    def pause_reading(self) -> None:
        if not self.is_reading():
            return
        self._paused = True
        self._loop._remove_reader(self._sock_fd)
        if self._loop.get_debug():
            logger.debug("%r pauses reading", self)

    def resume_reading(self) -> None:
        if self._closing or not self._paused:
            return
        self._paused = False
        self._add_reader()
        if self._loop.get_debug():
            logger.debug("%r resumes reading", self)

    def get_write_buffer_size(self) -> int:
        return self._buffer_size

    # -- closing ---------------------------------------------------------------

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._loop._remove_reader(self._sock_fd)
        if not self._buffer:
            self._loop._remove_writer(self._sock_fd)
            self._lose_connection(None)
        # Otherwise the writer calls connection_lost once the buffer is out.

    def abort(self) -> None:
        self._force_close(None)

    def _fatal_error(self, exc, message="Fatal error on transport"):
        # Resets and broken pipes are the peer's doing, not a bug here.
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
        self._lose_connection(exc)

    def _lose_connection(self, exc):
        """Count the connection as lost and schedule ``connection_lost(exc)``."""
        self._conn_lost += 1
        self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc):
        try:
            if self._protocol_connected:
                self._protocol.connection_lost(exc)
        finally:
            self._loop._detach_transport(self._sock_fd, self)
            self._sock.close()
            self._sock = None
            self._protocol = None
            self._loop = None
