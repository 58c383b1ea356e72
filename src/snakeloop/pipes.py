"""``connect_read_pipe`` and ``connect_write_pipe``: the loop methods.

The transports themselves are in ``transports.pipes``; this mixin only
makes them and waits for their ``connection_made``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from ._core.contract import LoopMixinBase
from .transports.pipes import ReadPipeTransport, WritePipeTransport

__all__ = ["PipesMixin"]

logger = logging.getLogger("asyncio")

_ProtocolT = TypeVar("_ProtocolT", bound=asyncio.BaseProtocol)
_TransportT = TypeVar("_TransportT", ReadPipeTransport, WritePipeTransport)


class PipesMixin(LoopMixinBase):
    """``connect_read_pipe`` and ``connect_write_pipe`` for the loop."""

    def _make_read_pipe_transport(
        self,
        pipe: Any,
        protocol: asyncio.BaseProtocol,
        waiter: asyncio.Future[None] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> ReadPipeTransport:
        return ReadPipeTransport(self, pipe, protocol, waiter, extra)

    def _make_write_pipe_transport(
        self,
        pipe: Any,
        protocol: asyncio.BaseProtocol,
        waiter: asyncio.Future[None] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> WritePipeTransport:
        return WritePipeTransport(self, pipe, protocol, waiter, extra)

    async def connect_read_pipe(
        self, protocol_factory: Callable[[], _ProtocolT], pipe: Any
    ) -> tuple[asyncio.ReadTransport, _ProtocolT]:
        """Read ``pipe`` (a file-like object) into ``protocol_factory()``."""
        return await self._connect_pipe(
            self._make_read_pipe_transport, "Read", protocol_factory, pipe
        )

    async def connect_write_pipe(
        self, protocol_factory: Callable[[], _ProtocolT], pipe: Any
    ) -> tuple[asyncio.WriteTransport, _ProtocolT]:
        """Write to ``pipe`` (a file-like object) for ``protocol_factory()``."""
        return await self._connect_pipe(
            self._make_write_pipe_transport, "Write", protocol_factory, pipe
        )

    async def _connect_pipe(
        self,
        make_transport: Callable[[Any, _ProtocolT, asyncio.Future[None]], _TransportT],
        direction: str,
        protocol_factory: Callable[[], _ProtocolT],
        pipe: Any,
    ) -> tuple[_TransportT, _ProtocolT]:
        protocol = protocol_factory()
        waiter = self.create_future()
        transport = make_transport(pipe, protocol, waiter)
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        if self._debug:
            logger.debug(
                "%s pipe %r connected: (%r, %r)", direction, pipe.fileno(), transport, protocol
            )
        return transport, protocol
