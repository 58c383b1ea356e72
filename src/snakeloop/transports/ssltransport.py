"""``SSLTransport``: the transport the application of a TLS connection sees.

It forwards everything to its ``SSLProtocol`` (``tls``), which runs TLS over
the plain transport below; see that module for how the two fit together.
"""

from __future__ import annotations

import warnings
from asyncio import BaseProtocol, constants, sslproto, transports
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .tlsstates import _FLUSHING

if TYPE_CHECKING:
    from .._core.contract import LoopContract

__all__ = ["SSLTransport"]

# asyncio's TLS transport says it is closing once the transport below is, where
# its protocol has the method that asks (3.14 on).
_LOWER_CLOSING_CLOSES = hasattr(sslproto.SSLProtocol, "_is_transport_closing")


class SSLTransport(transports._FlowControlMixin):
    """The transport the application sees: plaintext in, plaintext out.

    It only forwards to its ``SSLProtocol``.  It derives from asyncio's
    ``_FlowControlMixin`` (as asyncio's own TLS transport does) because
    ``loop.sendfile``'s fallback path insists on that type.
    """

    _start_tls_compatible = True
    _sendfile_compatible = constants._SendfileMode.FALLBACK

    # ``ssl_protocol`` is a ``tls.SSLProtocol``, typed Any because that module
    # imports this one; None once a second close() let go of it.
    def __init__(self, loop: LoopContract, ssl_protocol: Any) -> None:
        self._loop = loop
        self._ssl_protocol = ssl_protocol
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<snakeloop.SSLTransport {state}>"

    def __del__(self, _warn: Any = warnings.warn) -> None:
        if not self._closed:
            self._closed = True
            _warn("unclosed transport <snakeloop.SSLTransport>", ResourceWarning, source=self)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        proto = self._ssl_protocol
        if proto is None:
            return default
        return proto._get_extra_info(name, default)

    def set_protocol(self, protocol: BaseProtocol) -> None:
        self._ssl_protocol._set_app_protocol(protocol)

    def get_protocol(self) -> BaseProtocol:
        return self._ssl_protocol._app_protocol

    def is_closing(self) -> bool:
        # Also true once the peer ended the stream (a bare FIN, with no
        # close_notify before it): from then on writes are dropped, so a
        # writer that checks is_closing() must stop.  asyncio only says so
        # after connection_lost, and such a writer spins until then.
        proto = self._ssl_protocol
        if self._closed:
            return True
        if proto is None:
            return False
        if proto._state >= _FLUSHING:
            return True
        if _LOWER_CLOSING_CLOSES:
            # As asyncio's from 3.14: closing as soon as the transport below is
            # (closed or aborted beneath us, or failed), not at connection_lost.
            below = proto._transport
            return below is not None and below.is_closing()
        return False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._ssl_protocol._start_shutdown()
        else:
            # Closing twice (typically create_connection cleaning up after a
            # failed handshake) lets go of the protocol, and with it of the
            # SSLContext, even while a traceback still holds this object.
            self._ssl_protocol = None

    def abort(self) -> None:
        self._force_close(None)

    def _force_close(self, exc: BaseException | None) -> None:
        self._closed = True
        if self._ssl_protocol is not None:
            self._ssl_protocol._abort(exc)

    # After a second close() the protocol is gone (see close()); asyncio's
    # transport then raises AttributeError, this one acts closed.

    def is_reading(self) -> bool:
        proto = self._ssl_protocol
        return proto is not None and not proto._app_reading_paused

    def pause_reading(self) -> None:
        if self._ssl_protocol is not None:
            self._ssl_protocol._pause_reading()

    def resume_reading(self) -> None:
        if self._ssl_protocol is not None:
            self._ssl_protocol._resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        proto = self._ssl_protocol
        proto._set_write_buffer_limits(high, low)
        proto._control_app_writing()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        proto = self._ssl_protocol
        return (proto._write_low, proto._write_high)

    def get_write_buffer_size(self) -> int:
        proto = self._ssl_protocol
        return 0 if proto is None else proto._get_write_buffer_size()

    def set_read_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        proto = self._ssl_protocol
        proto._set_read_buffer_limits(high, low)
        proto._control_ssl_reading()

    def get_read_buffer_limits(self) -> tuple[int, int]:
        proto = self._ssl_protocol
        return (proto._read_low, proto._read_high)

    def get_read_buffer_size(self) -> int:
        return self._ssl_protocol._incoming.pending

    @property
    def _protocol_paused(self) -> bool:
        # Read by loop.sendfile's fallback to know whether to wait.
        return self._ssl_protocol._app_writing_paused

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data: expecting a bytes-like instance, got {type(data).__name__}")
        if data and self._ssl_protocol is not None:
            self._ssl_protocol._write_appdata((data,))

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview[Any]]) -> None:
        if self._ssl_protocol is not None:
            self._ssl_protocol._write_appdata(list_of_data)

    def write_eof(self) -> None:
        # TLS 1.2 has no half-close, so asyncio offers none at all.
        raise NotImplementedError

    def can_write_eof(self) -> bool:
        return False

    def _test__append_write_backlog(self, data: bytes) -> None:
        # CPython's test_ssl uses this hook to queue plaintext the SSLObject
        # has not taken, which otherwise only a renegotiation can cause.
        proto = self._ssl_protocol
        proto._write_backlog.append(data)
        proto._write_backlog_size += len(data)
