"""TCP and Unix stream connections: the client side, and sockets accepted elsewhere.

``create_connection`` (with Happy Eyeballs, RFC 8305), ``create_unix_connection``
and ``connect_accepted_socket``, with asyncio's argument checks and messages.
The non-blocking connect itself is ``sock_connect`` (``sockets``); the address
lookups are ``dns``; the staggered attempts are ``happy_eyeballs``.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import socket
import sys
from asyncio import BaseProtocol, Transport, base_events
from collections.abc import Callable, Coroutine, Sequence
from os import PathLike
from ssl import SSLContext
from typing import Any, TypeVar

from ._core.contract import LoopMixinBase
from .dns import AddrInfo, ensure_resolved, interleave_addrinfos
from .happy_eyeballs import staggered_connect
from .newkeywords import ABSENT, hide_absent, since, unexpected_keyword
from .sockets import check_ssl_socket
from .transports.connected import stream_transport

__all__ = ["ConnectingMixin"]

logger = logging.getLogger("asyncio")

_PY312 = sys.version_info >= (3, 12)
# From 3.15 on (python/cpython#140947) a connection's transport runs its
# protocol in one context, a copy of the one current when the transport is
# made; asked of asyncio's own method, so any release with the fix has it.
_CONNECTIONS_HAVE_A_CONTEXT = (
    "copy_context" in base_events.BaseEventLoop._create_connection_transport.__code__.co_names  # type: ignore[attr-defined]
)

_ProtocolT = TypeVar("_ProtocolT", bound=BaseProtocol)


class ConnectingMixin(LoopMixinBase):
    """Stream connections for the loop."""

    # -- transports --------------------------------------------------------------

    async def _create_connection_transport(
        self,
        sock: socket.socket,
        protocol_factory: Callable[[], _ProtocolT],
        ssl: SSLContext | bool | None,
        server_hostname: str | None,
        server_side: bool = False,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        context: contextvars.Context | None = None,
    ) -> tuple[Transport, _ProtocolT]:
        try:
            sock.setblocking(False)
            if context is None and _CONNECTIONS_HAVE_A_CONTEXT:
                # Copied before the factory runs, as asyncio does: what the
                # factory sets stays in the caller's context, not the protocol's.
                context = contextvars.copy_context()
            protocol = protocol_factory()
            waiter = self.create_future()
            transport = stream_transport(
                self,
                sock,
                protocol,
                waiter,
                sslcontext=ssl,
                server_side=server_side,
                server_hostname=server_hostname,
                ssl_handshake_timeout=ssl_handshake_timeout,
                ssl_shutdown_timeout=ssl_shutdown_timeout,
                context=context,
            )
        except BaseException:
            # No transport took the socket: close it here, or it leaks
            # (python/cpython#153133).
            sock.close()
            raise
        try:
            await waiter
        except BaseException:
            transport.close()
            del waiter  # the error's traceback keeps this frame
            raise
        return transport, protocol

    # -- client connections --------------------------------------------------

    async def _connect_sock(
        self,
        exceptions: list[list[OSError]],
        addr_info: AddrInfo,
        local_addr_infos: Sequence[AddrInfo] | None = None,
    ) -> socket.socket:
        """One connection attempt; its errors go to ``exceptions``."""
        my_exceptions: list[OSError] = []
        exceptions.append(my_exceptions)
        family, type_, proto, _, address = addr_info
        sock = None
        try:
            sock = socket.socket(family=family, type=type_, proto=proto)
            sock.setblocking(False)
            if local_addr_infos is not None:
                for lfamily, _, _, _, laddr in local_addr_infos:
                    if lfamily != family:
                        continue
                    try:
                        sock.bind(laddr)
                        break
                    except OSError as exc:
                        msg = (
                            f"error while attempting to bind on address {laddr!r}: "
                            f"{str(exc.strerror).lower()}"
                        )
                        my_exceptions.append(OSError(exc.errno, msg))
                else:
                    if my_exceptions:
                        raise my_exceptions.pop()
                    raise OSError(f"no matching local address with {family=} found")
            await self.sock_connect(sock, address)
            return sock
        except OSError as exc:
            my_exceptions.append(exc)
            if sock is not None:
                sock.close()
            raise
        except BaseException:
            if sock is not None:
                sock.close()
            raise
        finally:
            # The error's traceback keeps this frame: let go of the lists.
            del exceptions, my_exceptions

    def _connect_attempt(
        self,
        errors: list[list[OSError]],
        addrinfo: AddrInfo,
        laddr_infos: Sequence[AddrInfo] | None,
    ) -> Callable[[], Coroutine[Any, Any, socket.socket]]:
        """A zero-argument coroutine function for one staggered attempt."""
        # Not a closure: its frame would be in the traceback of the error it
        # appends to ``errors``, and its cell would hold ``errors`` after the
        # return (the error -> traceback -> frame -> errors -> error cycle).
        return functools.partial(self._connect_sock, errors, addrinfo, laddr_infos)

    @hide_absent
    async def create_connection(
        self,
        protocol_factory: Callable[[], _ProtocolT],
        host: str | None = None,
        port: int | str | None = None,
        *,
        ssl: bool | None | SSLContext = None,
        family: int = 0,
        proto: int = 0,
        flags: int = 0,
        sock: socket.socket | None = None,
        local_addr: tuple[Any, ...] | None = None,
        server_hostname: str | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        happy_eyeballs_delay: float | None = None,
        interleave: int | None = None,
        all_errors: bool = since((3, 12), False),
    ) -> tuple[Transport, _ProtocolT]:
        """Open a TCP connection; return ``(transport, protocol)``."""
        if not _PY312 and all_errors is not ABSENT:
            raise unexpected_keyword(ConnectingMixin.create_connection, "all_errors")
        if server_hostname is not None and not ssl:
            raise ValueError("server_hostname is only meaningful with ssl")
        if server_hostname is None and ssl:
            if not host:
                raise ValueError("You must set server_hostname when using ssl without a host")
            server_hostname = host
        if ssl_handshake_timeout is not None and not ssl:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if ssl_shutdown_timeout is not None and not ssl:
            raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        if sock is not None:
            check_ssl_socket(sock)
        if happy_eyeballs_delay is not None and interleave is None:
            # RFC 8305 recommends a first-address-family count of 1.
            interleave = 1

        if host is not None or port is not None:
            if sock is not None:
                raise ValueError("host/port and sock can not be specified at the same time")
            infos = await ensure_resolved(
                self,
                (host, port),
                family=family,
                type=socket.SOCK_STREAM,
                proto=proto,
                flags=flags,
            )
            if not infos:
                raise OSError("getaddrinfo() returned empty list")
            if local_addr is not None:
                laddr_infos = await ensure_resolved(
                    self,
                    local_addr,
                    family=family,
                    type=socket.SOCK_STREAM,
                    proto=proto,
                    flags=flags,
                )
                if not laddr_infos:
                    raise OSError("getaddrinfo() returned empty list")
            else:
                laddr_infos = None
            if interleave:
                infos = interleave_addrinfos(infos, interleave)

            errors: list[list[OSError]] = []
            if happy_eyeballs_delay is None:
                for addrinfo in infos:
                    try:
                        sock = await self._connect_sock(errors, addrinfo, laddr_infos)
                        break
                    except OSError:
                        continue
            else:
                sock = await staggered_connect(
                    [self._connect_attempt(errors, info, laddr_infos) for info in infos],
                    happy_eyeballs_delay,
                )
            if sock is None:
                flat = [exc for sub in errors for exc in sub]
                try:
                    if all_errors:
                        raise ExceptionGroup("create_connection failed", flat)
                    if len(flat) == 1:
                        raise flat[0]
                    model = str(flat[0])
                    if all(str(exc) == model for exc in flat):
                        raise flat[0]
                    raise OSError(
                        "Multiple exceptions: {}".format(", ".join(str(exc) for exc in flat))
                    )
                finally:
                    # The error's traceback keeps this frame.
                    del flat, errors
        else:
            if sock is None:
                raise ValueError("host and port was not specified and no sock specified")
            if sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A Stream Socket was expected, got {sock!r}")

        transport, protocol = await self._create_connection_transport(
            sock,
            protocol_factory,
            ssl,
            server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )
        if self._debug:
            sock = transport.get_extra_info("socket")
            logger.debug("%r connected to %s:%r: (%r, %r)", sock, host, port, transport, protocol)
        return transport, protocol

    async def connect_accepted_socket(
        self,
        protocol_factory: Callable[[], _ProtocolT],
        sock: socket.socket,
        *,
        ssl: bool | None | SSLContext = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> tuple[Transport, _ProtocolT]:
        """Wrap an already accepted socket in a transport."""
        if sock.type != socket.SOCK_STREAM:
            raise ValueError(f"A Stream Socket was expected, got {sock!r}")
        if ssl_handshake_timeout is not None and not ssl:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if ssl_shutdown_timeout is not None and not ssl:
            raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        check_ssl_socket(sock)
        transport, protocol = await self._create_connection_transport(
            sock,
            protocol_factory,
            ssl,
            "",
            server_side=True,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )
        if self._debug:
            sock = transport.get_extra_info("socket")
            logger.debug("%r handled: (%r, %r)", sock, transport, protocol)
        return transport, protocol

    async def create_unix_connection(
        self,
        protocol_factory: Callable[[], _ProtocolT],
        # typeshed says str | None; asyncio, like this loop, takes any
        # path-like (os.fspath), as its create_unix_server is typed to.
        path: str | PathLike[str] | None = None,
        *,
        ssl: bool | None | SSLContext = None,
        sock: socket.socket | None = None,
        server_hostname: str | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> tuple[Transport, _ProtocolT]:
        """Open a Unix stream connection; return ``(transport, protocol)``."""
        assert server_hostname is None or isinstance(server_hostname, str)
        if ssl:
            if server_hostname is None:
                raise ValueError("you have to pass server_hostname when using ssl")
        else:
            if server_hostname is not None:
                raise ValueError("server_hostname is only meaningful with ssl")
            if ssl_handshake_timeout is not None:
                raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
            if ssl_shutdown_timeout is not None:
                raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        if path is not None:
            if sock is not None:
                raise ValueError("path and sock can not be specified at the same time")
            path = os.fspath(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0)
            try:
                sock.setblocking(False)
                await self.sock_connect(sock, path)
            except BaseException:
                sock.close()
                raise
        else:
            if sock is None:
                raise ValueError("no path and sock were specified")
            if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A UNIX Domain Stream Socket was expected, got {sock!r}")
            sock.setblocking(False)
        return await self._create_connection_transport(
            sock,
            protocol_factory,
            ssl,
            server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )
