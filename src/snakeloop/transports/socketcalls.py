"""The pure build's names for the C functions of ``socketcalls.pxd``.

The compiled transports call those C functions, under ``if cython.compiled:``,
instead of the socket's ``recv``/``send``/``recvfrom``/``sendto`` methods (the
.pxd says how each matches its method).  The pure build never calls them: it
imports these stand-ins only so that the shared source means the same thing to
Python, ruff and mypy.
"""

from __future__ import annotations

import _socket
import socket
from typing import Any

__all__ = [
    "SOCKADDR_STORAGE_SIZE",
    "calls_reach_the_fd",
    "sock_recv",
    "sock_recvfrom_inet",
    "sock_send",
    "sock_sendto_peer",
]

SOCKADDR_STORAGE_SIZE = 128

# The methods the C functions stand in for, as _socket defines them.
_C_METHODS = {
    name: getattr(_socket.socket, name) for name in ("recv", "send", "recvfrom", "sendto")
}


def calls_reach_the_fd(sock: Any) -> bool:
    """Whether the socket calls may stand in for ``sock``'s methods.

    True for a ``socket.socket`` itself (not a subclass, nor a seeded loop's
    view of one) while nobody has replaced those methods on the class (a test's
    patch, say).  The answer holds for the life of a transport.
    """
    return type(sock) is socket.socket and all(
        getattr(socket.socket, name) is method for name, method in _C_METHODS.items()
    )


def _compiled_only(*args: Any) -> Any:
    raise NotImplementedError("socketcalls: the compiled build's C functions")


def sock_recv(fd: int, size: int) -> bytes:
    return _compiled_only(fd, size)  # type: ignore[no-any-return]


def sock_send(fd: int, data: bytes) -> int:
    return _compiled_only(fd, data)  # type: ignore[no-any-return]


def sock_recvfrom_inet(fd: int, size: int, peer: bytearray, last_address: Any) -> tuple[bytes, Any]:
    return _compiled_only(fd, size, peer, last_address)  # type: ignore[no-any-return]


def sock_sendto_peer(fd: int, data: bytes, peer: bytearray, sock: Any, address: Any) -> int:
    return _compiled_only(fd, data, peer, sock, address)  # type: ignore[no-any-return]
