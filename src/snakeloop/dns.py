"""Name resolution: ``getaddrinfo``/``getnameinfo`` in the default executor.

The C library's resolver blocks, so each lookup runs in a worker thread.
In debug mode lookups are logged with their duration, as asyncio does, and
a slow one is logged at INFO.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    import asyncio
    from socket import _GetAddrInfoResult

from ._core.contract import LoopMixinBase

__all__ = ["AddrInfo", "DnsMixin", "ensure_resolved", "interleave_addrinfos", "numeric_addrinfo"]

# One getaddrinfo() entry: (family, type, proto, canonname, sockaddr).
AddrInfo: TypeAlias = tuple[int, int, int, str, tuple[Any, ...]]

logger = logging.getLogger("asyncio")


class DnsMixin(LoopMixinBase):
    """``getaddrinfo`` and ``getnameinfo``."""

    def _getaddrinfo_debug(self, host, port, family, type, proto, flags):
        parts = [f"{host}:{port!r}"]
        if family:
            parts.append(f"family={family!r}")
        if type:
            parts.append(f"type={type!r}")
        if proto:
            parts.append(f"proto={proto!r}")
        if flags:
            parts.append(f"flags={flags!r}")
        what = ", ".join(parts)
        logger.debug("Get address info %s", what)
        t0 = self.time()
        addrinfo = socket.getaddrinfo(host, port, family, type, proto, flags)
        dt = self.time() - t0
        msg = f"Getting address info {what} took {dt * 1e3:.3f}ms: {addrinfo!r}"
        if dt >= self.slow_callback_duration:
            logger.info(msg)
        else:
            logger.debug(msg)
        return addrinfo

    async def getaddrinfo(
        self,
        host: bytes | str | None,
        port: bytes | str | int | None,
        *,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> _GetAddrInfoResult:
        resolve = self._getaddrinfo_debug if self._debug else socket.getaddrinfo
        return await self.run_in_executor(None, resolve, host, port, family, type, proto, flags)

    async def getnameinfo(
        self, sockaddr: tuple[str, int] | tuple[str, int, int, int], flags: int = 0
    ) -> tuple[str, str]:
        return await self.run_in_executor(None, socket.getnameinfo, sockaddr, flags)


_HAS_IPV6 = hasattr(socket, "AF_INET6")


def numeric_addrinfo(
    host: bytes | str | None,
    port: bytes | str | int | None,
    family: int,
    type: int,
    proto: int,
    flowinfo: int = 0,
    scopeid: int = 0,
) -> AddrInfo | None:
    """The getaddrinfo() entry for a numeric IP host, or None.

    Numeric addresses need no resolver thread: ``inet_pton`` says whether
    ``host`` is one.  Anything else (names, scoped IPv6, unusual protocols)
    returns None and goes through ``getaddrinfo``.
    """
    if proto not in (0, socket.IPPROTO_TCP, socket.IPPROTO_UDP) or host is None:
        return None
    if type == socket.SOCK_STREAM:
        proto = socket.IPPROTO_TCP
    elif type == socket.SOCK_DGRAM:
        proto = socket.IPPROTO_UDP
    else:
        return None
    if port is None or port == b"" or port == "":
        port = 0
    else:
        try:
            port = int(port)
        except (TypeError, ValueError):
            return None
    families: list[int]
    if family == socket.AF_UNSPEC:
        families = [socket.AF_INET, socket.AF_INET6] if _HAS_IPV6 else [socket.AF_INET]
    else:
        families = [family]
    if isinstance(host, bytes):
        host = host.decode("idna")
    if "%" in host:
        # A scope id needs the resolver to map the interface name.
        return None
    for af in families:
        try:
            socket.inet_pton(af, host)
        except OSError:
            continue
        if _HAS_IPV6 and af == socket.AF_INET6:
            return af, type, proto, "", (host, port, flowinfo, scopeid)
        return af, type, proto, "", (host, port)
    return None


async def ensure_resolved(
    loop: asyncio.AbstractEventLoop,
    address: Any,
    *,
    family: int = 0,
    type: int = socket.SOCK_STREAM,
    proto: int = 0,
    flags: int = 0,
) -> Sequence[AddrInfo]:
    """Address infos for ``address`` ((host, port, ...)), resolving if needed."""
    host, port = address[:2]
    info = numeric_addrinfo(host, port, family, type, proto, *address[2:])
    if info is not None:
        return [info]
    return await loop.getaddrinfo(host, port, family=family, type=type, proto=proto, flags=flags)


def interleave_addrinfos(
    addrinfos: Iterable[AddrInfo], first_address_family_count: int = 1
) -> list[AddrInfo]:
    """Reorder address infos so families alternate (RFC 8305, section 4).

    The first ``first_address_family_count`` entries of the first family
    come first, then one of each family in turn.
    """
    by_family: dict[int, list[AddrInfo]] = {}
    for info in addrinfos:
        by_family.setdefault(info[0], []).append(info)
    queues = list(by_family.values())
    ordered = []
    if first_address_family_count > 1 and queues:
        head = first_address_family_count - 1
        ordered.extend(queues[0][:head])
        del queues[0][:head]
    longest = max((len(q) for q in queues), default=0)
    for i in range(longest):
        for q in queues:
            if i < len(q):
                ordered.append(q[i])
    return ordered
