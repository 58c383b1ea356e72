"""``create_datagram_endpoint``: a datagram socket wrapped in a transport.

The socket is either given (``sock=``) or made here from ``local_addr``
and/or ``remote_addr``: both are resolved, grouped by (family, protocol),
and the first pair for which a socket can be made, bound and connected
wins; if none can, the first error is raised.  Argument errors carry
asyncio's exception types and messages.

OS facts this module relies on:

* Connecting a UDP socket sends nothing: it fixes the peer address, so the
  kernel filters incoming datagrams to that peer and reports ICMP errors
  (port unreachable) for it.  With ``allow_broadcast`` the socket is not
  connected, since a broadcast destination is not a peer; the remote
  address is then only the transport's default destination.
* ``SO_REUSEPORT`` lets several sockets bind the same address; Linux
  defines and implements it.  ``SO_REUSEADDR`` is never set for UDP: it
  would let another process's socket take over a bound port (asyncio
  removed that option in 3.11).
* A path-bound Unix datagram socket leaves a socket file behind when it
  closes; a stale one is removed before binding the same path again (not
  for abstract-namespace addresses, which start with a NUL byte).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from collections.abc import Callable
from typing import TypeVar

from . import unixpaths
from ._core.contract import LoopMixinBase
from .dns import ensure_resolved
from .transports.datagram import DatagramSocketTransport

__all__ = ["DatagramMixin"]

logger = logging.getLogger("asyncio")

_ProtocolT = TypeVar("_ProtocolT", bound=asyncio.BaseProtocol)

_PY312 = sys.version_info >= (3, 12)
# Which check of a given socket the running asyncio makes: 3.13 refuses a stream socket
# alone ("A datagram socket was expected"), 3.11 and 3.12 anything but a datagram socket
# ("A UDP Socket was expected").  PyPy 3.11's asyncio has the 3.13 check, so the running
# asyncio's own words decide, read off its code once.
_REFUSES_STREAM_SOCKETS_ONLY = (
    "A datagram socket was expected, got "
    in asyncio.BaseEventLoop.create_datagram_endpoint.__code__.co_consts
)


def _set_reuseport(sock):
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ValueError("reuse_port not supported by socket module")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    except OSError:
        raise ValueError(
            "reuse_port not supported by socket module, SO_REUSEPORT defined but not implemented."
        ) from None


def _check_given_socket(
    sock, local_addr, remote_addr, family, proto, flags, reuse_port, allow_broadcast
):
    if _REFUSES_STREAM_SOCKETS_ONLY:
        if sock.type == socket.SOCK_STREAM:
            raise ValueError(f"A datagram socket was expected, got {sock!r}")
    elif sock.type != socket.SOCK_DGRAM:
        raise ValueError(f"A UDP Socket was expected, got {sock!r}")
    options = {
        "local_addr": local_addr,
        "remote_addr": remote_addr,
        "family": family,
        "proto": proto,
        "flags": flags,
        "reuse_port": reuse_port,
        "allow_broadcast": allow_broadcast,
    }
    given = ", ".join(f"{name}={value}" for name, value in options.items() if value)
    if given:
        raise ValueError(
            f"socket modifier keyword arguments can not be used when sock is specified. ({given})"
        )


class DatagramMixin(LoopMixinBase):
    """``create_datagram_endpoint``; builds on ``SocketMixin.sock_connect``."""

    def _make_datagram_transport(self, sock, protocol, address=None, waiter=None, extra=None):
        if _PY312:
            self._ensure_fd_no_transport(sock)
        return DatagramSocketTransport(self, sock, protocol, address, waiter, extra)

    # typeshed still lists reuse_address, which asyncio dropped in 3.11.
    async def create_datagram_endpoint(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], _ProtocolT],
        local_addr: tuple[str, int] | str | None = None,
        remote_addr: tuple[str, int] | str | None = None,
        *,
        family: int = 0,
        proto: int = 0,
        flags: int = 0,
        reuse_port: bool | None = None,
        allow_broadcast: bool | None = None,
        sock: socket.socket | None = None,
    ) -> tuple[asyncio.DatagramTransport, _ProtocolT]:
        """Create a datagram endpoint: ``(transport, protocol)``."""
        cancelled = None
        if sock is not None:
            _check_given_socket(
                sock, local_addr, remote_addr, family, proto, flags, reuse_port, allow_broadcast
            )
            sock.setblocking(False)
            r_addr = None
        else:
            pairs = await self._datagram_address_pairs(
                local_addr, remote_addr, family, proto, flags
            )
            if family == socket.AF_UNIX and local_addr and local_addr[0] not in (0, "\x00"):
                cancelled = await self._remove_stale_unix_socket(local_addr)
            sock, r_addr = await self._open_datagram_socket(
                pairs, local_addr, remote_addr, reuse_port, allow_broadcast
            )

        protocol = protocol_factory()
        waiter = self.create_future()
        transport = self._make_datagram_transport(sock, protocol, r_addr, waiter)
        if self._debug:
            if local_addr:
                logger.info(
                    "Datagram endpoint local_addr=%r remote_addr=%r created: (%r, %r)",
                    local_addr,
                    remote_addr,
                    transport,
                    protocol,
                )
            else:
                logger.debug(
                    "Datagram endpoint remote_addr=%r created: (%r, %r)",
                    remote_addr,
                    transport,
                    protocol,
                )
        try:
            if cancelled is not None:
                raise cancelled
            await waiter
        except BaseException:
            transport.close()
            raise
        return transport, protocol

    async def _remove_stale_unix_socket(self, path):
        """Remove a socket file left at ``path``, in the worker thread.

        asyncio does it without yielding, so a cancellation cannot stop the
        endpoint from being made there: it is returned, for the caller to
        raise where asyncio's first await would (after making the transport).
        """
        cancelled = None
        while True:
            call = self._call_blocking(unixpaths.remove_stale_socket, path)
            again = await call.finish()
            if cancelled is None:
                cancelled = again
            if call.ran():
                break
            # Dropped by the cancellation before it started: asyncio would
            # have removed the file all the same.
        err = call.result()
        if err is not None:
            logger.error("Unable to check or remove stale UNIX socket %r: %r", path, err)
        return cancelled

    async def _datagram_address_pairs(self, local_addr, remote_addr, family, proto, flags):
        """``[((family, proto), (local, remote)), ...]`` to try in order."""
        if not (local_addr or remote_addr):
            if family == 0:
                raise ValueError("unexpected address family")
            return [((family, proto), (None, None))]
        if hasattr(socket, "AF_UNIX") and family == socket.AF_UNIX:
            for addr in (local_addr, remote_addr):
                if addr is not None and not isinstance(addr, str):
                    raise TypeError("string is expected")
            return [((family, proto), (local_addr, remote_addr))]

        # Resolve both ends; keep the (family, proto) pairs, in the order
        # found, for which every given end has an address.
        by_key = {}
        for index, addr in enumerate((local_addr, remote_addr)):
            if addr is None:
                continue
            if not (isinstance(addr, tuple) and len(addr) == 2):
                raise TypeError("2-tuple is expected")
            infos = await ensure_resolved(
                self, addr, family=family, type=socket.SOCK_DGRAM, proto=proto, flags=flags
            )
            if not infos:
                raise OSError("getaddrinfo() returned empty list")
            for fam, _, pro, _, address in infos:
                by_key.setdefault((fam, pro), [None, None])[index] = address
        pairs = [
            (key, tuple(ends))
            for key, ends in by_key.items()
            if not ((local_addr and ends[0] is None) or (remote_addr and ends[1] is None))
        ]
        if not pairs:
            raise ValueError("can not get address information")
        return pairs

    async def _open_datagram_socket(
        self, pairs, local_addr, remote_addr, reuse_port, allow_broadcast
    ):
        """Make, bind and connect a socket for the first pair that works."""
        errors = []
        for (family, proto), (local_address, remote_address) in pairs:
            sock = None
            try:
                sock = socket.socket(family=family, type=socket.SOCK_DGRAM, proto=proto)
                if reuse_port:
                    _set_reuseport(sock)
                if allow_broadcast:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                sock.setblocking(False)
                if local_addr:
                    sock.bind(local_address)
                if remote_addr and not allow_broadcast:
                    await self.sock_connect(sock, remote_address)
            except OSError as exc:
                if sock is not None:
                    sock.close()
                errors.append(exc)
                continue
            except BaseException:
                if sock is not None:
                    sock.close()
                raise
            return sock, (remote_address if remote_addr else None)
        try:
            raise errors[0]
        finally:
            # The error's traceback keeps this frame: without this, the
            # frame's list would keep the error.
            errors = None
