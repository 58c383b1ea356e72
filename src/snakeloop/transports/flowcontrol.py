"""Write-side flow control shared by every buffering transport.

A transport buffers what the kernel would not take at once.  When the
buffer grows past the high-water mark the protocol's ``pause_writing()`` is
called; when it drains to the low-water mark or below, ``resume_writing()``.
The two strictly alternate.  Defaults are asyncio's: 64 KiB high, a quarter
of that low.  An exception from either protocol method goes to the loop's
exception handler with asyncio's message; the transport carries on.

``FlowControlMixin`` derives from asyncio's private
``transports._FlowControlMixin``, as every asyncio transport with write flow
control does (the selector socket transports, the TLS transport, the write
pipe transport).  So each user is, like its asyncio counterpart, an instance
of it and thereby of ``asyncio.Transport`` (read and write): a write pipe
transport inherits ``pause_reading()`` and friends from
``asyncio.ReadTransport``, raising ``NotImplementedError`` as asyncio's does,
and ``loop.sendfile``'s fallback accepts every user.

The socket transports cannot take a Python base (they compile to C types:
see ``socketbase``); they keep the same rule with the two functions below,
which hold the parts both kinds share: the limits and the report of a
failing protocol method.
"""

from __future__ import annotations

from asyncio import transports
from typing import Any

__all__ = ["DEFAULT_HIGH_WATER", "FlowControlMixin", "checked_limits", "tell_protocol"]

DEFAULT_HIGH_WATER = 64 * 1024
# One int for every transport that keeps the defaults: computed per transport,
# it was 32 bytes of each idle connection.
_DEFAULT_LOW_WATER = DEFAULT_HIGH_WATER // 4


def checked_limits(high: Any = None, low: Any = None) -> tuple[Any, Any]:
    """``(high, low)`` with asyncio's defaults filled in; ValueError if out of order."""
    if high is None and low is None:
        return DEFAULT_HIGH_WATER, _DEFAULT_LOW_WATER
    if high is None:
        high = 4 * low
    if low is None:
        low = high // 4
    if not high >= low >= 0:
        raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
    return high, low


def tell_protocol(transport: Any, method: str) -> None:
    """Call the protocol's ``pause_writing`` or ``resume_writing``; report what it raises."""
    try:
        getattr(transport._protocol, method)()
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        transport._loop.call_exception_handler(
            {
                "message": f"protocol.{method}() failed",
                "exception": exc,
                "transport": transport,
                "protocol": transport._protocol,
            }
        )


class FlowControlMixin(transports._FlowControlMixin):
    """Needs ``_loop``, ``_protocol`` and ``get_write_buffer_size()``.

    asyncio's ``__init__`` is never called: the defaults below take its
    place.  They shadow the base's ``__slots__`` of the same names, so these
    attributes live in the instance dict, as in a class without that base.
    """

    _protocol_paused = False
    _high_water = DEFAULT_HIGH_WATER
    _low_water = DEFAULT_HIGH_WATER // 4

    def _maybe_pause_protocol(self):
        if self.get_write_buffer_size() > self._high_water and not self._protocol_paused:
            self._protocol_paused = True
            tell_protocol(self, "pause_writing")

    def _maybe_resume_protocol(self):
        if self._protocol_paused and self.get_write_buffer_size() <= self._low_water:
            self._protocol_paused = False
            tell_protocol(self, "resume_writing")

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (self._low_water, self._high_water)

    def _set_write_buffer_limits(self, high=None, low=None):
        self._high_water, self._low_water = checked_limits(high, low)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._set_write_buffer_limits(high=high, low=low)
        self._maybe_pause_protocol()
