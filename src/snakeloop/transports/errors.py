"""How a transport reports the error that ends it.

Errors from the network or the peer (``OSError``: resets, broken pipes, TLS
alerts) are the peer's doing: asyncio logs them at DEBUG level, and only in
debug mode.  Anything else is a bug somewhere and goes to the loop's
exception handler, with the transport and its protocol in the context.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from asyncio import protocols

    from .._core.contract import LoopContract

__all__ = ["report_transport_error"]

logger = logging.getLogger("asyncio")


class _Transport(Protocol):
    """What a failing transport shows: its loop and protocol."""

    @property
    def _loop(self) -> LoopContract: ...

    @property
    def _protocol(self) -> protocols.BaseProtocol: ...


def report_transport_error(
    transport: _Transport, exc: BaseException, message: str, *, expected: bool
) -> None:
    """Log ``exc`` quietly if ``expected``, else tell the exception handler."""
    loop = transport._loop
    if expected:
        if loop.get_debug():
            logger.debug("%r: %s", transport, message, exc_info=True)
    else:
        loop.call_exception_handler(
            {
                "message": message,
                "exception": exc,
                "transport": transport,
                "protocol": transport._protocol,
            }
        )
