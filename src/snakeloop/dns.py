"""Name resolution: ``getaddrinfo``/``getnameinfo`` in the default executor.

The C library's resolver blocks, so each lookup runs in a worker thread.
In debug mode lookups are logged with their duration, as asyncio does, and
a slow one is logged at INFO.
"""

from __future__ import annotations

import logging
import socket

__all__ = ["DnsMixin"]

logger = logging.getLogger("asyncio")


class DnsMixin:
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

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        resolve = self._getaddrinfo_debug if self._debug else socket.getaddrinfo
        return await self.run_in_executor(None, resolve, host, port, family, type, proto, flags)

    async def getnameinfo(self, sockaddr, flags=0):
        return await self.run_in_executor(None, socket.getnameinfo, sockaddr, flags)
