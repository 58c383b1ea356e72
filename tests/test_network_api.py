"""The stream connection and server methods look and fail as asyncio's do.

``create_connection``, ``create_server``, their Unix variants and
``connect_accepted_socket`` take the keywords of the running Python's asyncio
and no others, and ``create_server`` returns an ``asyncio.Server``.  The
accept path's pause on an fd shortage ends cleanly when the server closes.
Everything is compared with the stdlib loop on the same Python.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

GUARD = 15.0  # a hang guard, never a timing assertion


def run(loop, coro):
    return loop.run_until_complete(asyncio.wait_for(coro, GUARD))


def test_servers_are_asyncio_servers(any_loop, tmp_path):
    async def main():
        servers = [
            await any_loop.create_server(asyncio.Protocol, "127.0.0.1", 0),
            await any_loop.create_unix_server(asyncio.Protocol, str(tmp_path / "sock")),
        ]
        for server in servers:
            assert isinstance(server, asyncio.Server)
            assert isinstance(server, asyncio.AbstractServer)
            server.close()
            await server.wait_closed()

    run(any_loop, main())
