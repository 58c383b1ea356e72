# cython: annotation_typing=False
"""What the stream and datagram socket transports share.

The socket and its extra info, reading switched on and off, write flow
control, the repr, and the end of a transport: ``close()`` once the write
buffer is out, ``abort()`` and fatal errors at once, and ``connection_lost``
exactly once, after which the socket is closed and the transport lets go of
the loop.

The compiled build (setup.py) turns these classes into C types, typed by
``socketbase.pxd`` and its siblings: a read or a write is then C code from
the loop's call to the protocol's.  A C type cannot derive from a Python
class, so none of them derives from asyncio's transport classes, in either
build: ``__class__`` answers ``isinstance()`` instead (``show_as``), as for
snakeloop's futures, and each class defines or borrows every method those
asyncio classes would give it.

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
from typing import TYPE_CHECKING, Any

if False:  # Cython reads this import when it compiles the module (setup.py)
    import cython
else:
    from .._core import cythonshim as cython
from .._core.classviews import isinstance_view
from .._core.futures import _set_result_unless_cancelled
from .errors import report_transport_error
from .flowcontrol import checked_limits, tell_protocol
from .recvbuffer import RECV_BUFFER_SIZE
from .socketcalls import calls_reach_the_fd

if not cython.compiled:
    # The C function socketbase.pxd cimports, for the compiled build only.
    from .._core.cythonshim import drop_empty_dict

if TYPE_CHECKING:
    from contextvars import Context

    from .._core.contract import LoopContract

__all__ = ["SocketTransportBase", "show_as"]

logger = logging.getLogger("asyncio")

# Each transport class -> the class its instances show isinstance() (show_as).
_ISINSTANCE_VIEWS: dict[type, type] = {}

_set_class = object.__dict__["__class__"].__set__


def show_as(cls: type, asyncio_kind: type) -> None:
    """Make ``isinstance(transport, C)`` true for a ``cls`` instance wherever it is for
    ``asyncio_kind``'s.

    Only ``cls`` itself: a subclass is its own ``__class__``, so that its class
    attributes stay reachable through it.
    """
    _ISINSTANCE_VIEWS[cls] = isinstance_view(cls, asyncio_kind)


class SocketTransportBase:
    """Needs ``_add_reader()`` (start watching for reads) from the subclass."""

    # Slots keep every attribute inside the object (C fields when compiled);
    # __dict__ stays available for attributes that user code sets, as on
    # asyncio's transports.
    __slots__ = (
        "__dict__",
        "__weakref__",
        "_buffer",
        "_buffer_size",
        "_closing",
        "_conn_lost",
        "_context",
        "_direct_calls",
        "_extra",
        "_high_water",
        "_loop",
        "_low_water",
        "_paused",
        "_protocol",
        "_protocol_connected",
        "_protocol_paused",
        "_sock",
        "_sock_fd",
    )

    max_size = RECV_BUFFER_SIZE

    if cython.compiled:
        # Cython calls this from tp_new (see _core/emptydict.pxd): without a
        # dict, a protocol's transport.write() is a specialized method call.
        def __cinit__(self):
            drop_empty_dict(self)

    _sock: socket.socket
    _loop: LoopContract
    _buffer: collections.deque[Any] | None
    _protocol: protocols.BaseProtocol
    _context: Context | None

    def __init__(
        self,
        loop: LoopContract,
        sock: socket.socket,
        extra: dict[str, Any] | None,
        context: Context | None = None,
    ) -> None:
        # _sock and _loop are None before this and once connection_lost has
        # run; the state flags (_closing, _conn_lost) keep every method but
        # __repr__ and __del__ off them then, and those two check for None.
        self._sock = None  # type: ignore[assignment]
        self._loop = loop
        # The context every callback of this transport runs in: the protocol's,
        # its readers' and writers'.  asyncio gives stream transports one from
        # 3.15 on (python/cpython#140947), so that a resume_reading() from a
        # task does not move the protocol into the task's context.  None (a
        # datagram transport, or before 3.15): each callback runs in a copy of
        # the context current when it was scheduled or registered.
        self._context = context
        self._extra = {} if extra is None else extra
        self._extra["socket"] = trsock.TransportSocket(sock)
        if "sockname" not in self._extra:
            # An accepted connection's came with the peername (Listener._addresses_of).
            try:
                self._extra["sockname"] = sock.getsockname()
            except OSError:
                self._extra["sockname"] = None
        if "peername" not in self._extra:
            try:
                self._extra["peername"] = sock.getpeername()
            except OSError:
                self._extra["peername"] = None
        self._sock_fd = sock.fileno()
        # Whether reads and writes call recv(2), send(2) & co. on the fd itself
        # (socketcalls.pxd): in the compiled build, for a plain socket.socket.
        # A flag, not a test of cython.compiled where they read or write: it
        # costs the pure build less.
        self._direct_calls = cython.compiled and calls_reach_the_fd(sock)
        # The write buffer is made by the first write that cannot go at once:
        # an empty deque holds a block of 64 slots (about 760 bytes), which was
        # a third of what an idle connection cost (issue 33).  Every reader of
        # it tests it for truth first, which None passes as an empty one does.
        self._buffer = None
        self._buffer_size = 0
        self._conn_lost = 0  # >0 once connection_lost is scheduled
        self._closing = False
        self._paused = False
        self._protocol_connected = False
        self._protocol_paused = False
        self._high_water, self._low_water = checked_limits()
        self._sock = sock

    # isinstance(transport, asyncio.Transport) holds as on the stdlib loop:
    # when the type check fails, isinstance() consults __class__ (show_as).
    @property  # type: ignore[misc]
    def __class__(self):
        cls = type(self)
        return _ISINSTANCE_VIEWS.get(cls, cls)

    @__class__.setter
    def __class__(self, cls):
        _set_class(self, cls)

    def _queue_buffer(self):
        """The write buffer, for a write that waits: made here the first time (see __init__)."""
        buffer = self._buffer
        if buffer is None:
            self._buffer = buffer = collections.deque()
        return buffer

    def _add_reader(self) -> None:
        """Start watching the socket for reads, if the transport reads now."""
        raise NotImplementedError

    def _start(self, waiter):
        """The last step of ``__init__``: tell the protocol, then read."""
        loop = self._loop
        loop._attach_transport(self._sock_fd, self)
        # The protocol through a local: its attribute lookup is user code,
        # which could replace it (docs/design.md, "Reentrancy").
        protocol = self._protocol
        context = self._context
        loop.call_soon(protocol.connection_made, self, context=context)
        # Reading starts after connection_made has run.
        loop.call_soon(self._add_reader, context=context)
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None, context=context)

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

    # Kept where a finalizer run at interpreter shutdown still finds it.
    _warn = staticmethod(warnings.warn)

    def __del__(self) -> None:
        if self._sock is not None:
            self._warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self._sock.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

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

    # -- write flow control (flowcontrol) -----------------------------------------

    def get_write_buffer_size(self) -> int:
        return self._buffer_size

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (self._low_water, self._high_water)

    def _set_write_buffer_limits(self, high=None, low=None):
        self._high_water, self._low_water = checked_limits(high, low)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._set_write_buffer_limits(high, low)
        self._maybe_pause_protocol()

    def _maybe_pause_protocol(self):
        # The marks are read into locals, which hold them while they are
        # compared: they are the caller's numbers (docs/design.md, "Reentrancy").
        high = self._high_water
        if self._buffer_size > high and not self._protocol_paused:
            self._protocol_paused = True
            tell_protocol(self, "pause_writing")

    def _maybe_resume_protocol(self):
        low = self._low_water
        if self._protocol_paused and self._buffer_size <= low:
            self._protocol_paused = False
            tell_protocol(self, "resume_writing")

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
        # Fields passed to a call go through locals (docs/design.md, "Reentrancy").
        loop = self._loop
        context = self._context
        loop.call_soon(self._call_connection_lost, exc, context=context)

    def _call_connection_lost(self, exc):
        try:
            if self._protocol_connected:
                self._protocol.connection_lost(exc)
        finally:
            self._loop._detach_transport(self._sock_fd, self)
            self._sock.close()
            self._sock = None  # type: ignore[assignment]
            self._protocol = None  # type: ignore[assignment]
            self._loop = None  # type: ignore[assignment]
