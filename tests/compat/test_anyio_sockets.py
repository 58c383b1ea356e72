"""anyio's socket streams and datagram sockets on the asyncio backend.

Each test runs under ``anyio.run()`` on snakeloop and on the stdlib loop,
plainly and under blockbuster (the ``anyio_run`` fixture of this directory's
conftest).  anyio reaches the loop in two ways here: TCP streams and UDP
sockets go through the loop's transports (``create_connection``,
``create_datagram_endpoint``); listeners, Unix streams and Unix datagram
sockets use raw non-blocking sockets with ``loop.add_reader``/``add_writer``
and ``loop.sock_*``.  Everything talks over 127.0.0.1 or a Unix socket in a
temporary directory.
"""

from __future__ import annotations

import random
import socket

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from anyio.abc import SocketAttribute

SIZES = (1, 65_537, 1_000_003)


def payload(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


async def listen(family: str, path: str):
    if family == "tcp":
        return await anyio.create_tcp_listener(local_host="127.0.0.1")
    return await anyio.create_unix_listener(path)


async def connect(family: str, listener, path: str):
    if family == "tcp":
        return await anyio.connect_tcp("127.0.0.1", listener.extra(SocketAttribute.local_port))
    return await anyio.connect_unix(path)


async def echo(stream) -> None:
    async with stream:
        async for chunk in stream:  # until the client's EOF
            await stream.send(chunk)


async def round_trip(stream, data: bytes) -> bytes:
    """Send ``data`` while reading the echo back (the two overlap for big payloads)."""
    received = bytearray()
    async with anyio.create_task_group() as tg:
        tg.start_soon(stream.send, data)
        while len(received) < len(data):
            received += await stream.receive()
    return bytes(received)


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_stream_echo(anyio_run, family, tmp_path):
    path = str(tmp_path / "echo.sock")

    async def main():
        async with await listen(family, path) as listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, echo)
            async with await connect(family, listener, path) as client:
                if family == "tcp":
                    assert client.extra(SocketAttribute.family) == socket.AF_INET
                    assert client.extra(SocketAttribute.remote_port) == listener.extra(
                        SocketAttribute.local_port
                    )
                else:
                    assert client.extra(SocketAttribute.family) == socket.AF_UNIX
                    assert client.extra(SocketAttribute.remote_address) == path
                for seed, size in enumerate(SIZES):
                    data = payload(size, seed)
                    assert await round_trip(client, data) == data
                await client.send_eof()
                with pytest.raises(anyio.EndOfStream):  # the server closes after our EOF
                    await client.receive()
            tg.cancel_scope.cancel()

    anyio_run(main)


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_stream_closed_during_receive(anyio_run, family, tmp_path):
    path = str(tmp_path / "close.sock")

    async def main():
        server_side = []
        hang_up = anyio.Event()

        async def handler(stream):
            server_side.append(stream)
            async with stream:
                await hang_up.wait()

        async def reader(stream, errors):
            try:
                await stream.receive()
            except Exception as exc:
                errors.append(type(exc))

        async with await listen(family, path) as listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, handler)

            # Closed by us while a task waits in receive().
            errors = []
            client = await connect(family, listener, path)
            async with anyio.create_task_group() as readers:
                readers.start_soon(reader, client, errors)
                await wait_all_tasks_blocked()
                await client.aclose()
            assert errors == [anyio.ClosedResourceError]
            with pytest.raises(anyio.ClosedResourceError):
                await client.receive()
            with pytest.raises(anyio.ClosedResourceError):
                await client.send(b"late")

            # Closed by the peer while a task waits in receive().
            errors = []
            async with await connect(family, listener, path) as client:
                async with anyio.create_task_group() as readers:
                    readers.start_soon(reader, client, errors)
                    await wait_all_tasks_blocked()
                    hang_up.set()  # the server's handlers close their ends
                assert errors == [anyio.EndOfStream]
            assert len(server_side) == 2
            tg.cancel_scope.cancel()

    anyio_run(main)


def test_udp_sockets(anyio_run):
    async def main():
        async with (
            await anyio.create_udp_socket(local_host="127.0.0.1") as a,
            await anyio.create_udp_socket(local_host="127.0.0.1") as b,
        ):
            a_port = a.extra(SocketAttribute.local_port)
            b_port = b.extra(SocketAttribute.local_port)
            for seed, size in enumerate((1, 1000, 60_000)):
                data = payload(size, seed)
                await a.sendto(data, "127.0.0.1", b_port)
                assert await b.receive() == (data, ("127.0.0.1", a_port))

            # A receive cancelled while waiting leaves the socket usable.
            with anyio.move_on_after(0.02) as scope:
                await b.receive()
            assert scope.cancelled_caught

            async with await anyio.create_connected_udp_socket(
                "127.0.0.1", b_port, local_host="127.0.0.1"
            ) as c:
                assert c.extra(SocketAttribute.remote_port) == b_port
                await c.send(b"ping")
                data, address = await b.receive()
                assert (data, address) == (
                    b"ping",
                    ("127.0.0.1", c.extra(SocketAttribute.local_port)),
                )
                await b.sendto(b"pong", *address)
                assert await c.receive() == b"pong"
        with pytest.raises(anyio.ClosedResourceError):
            await a.receive()

    anyio_run(main)


def test_unix_datagram_sockets(anyio_run, tmp_path):
    server_path = str(tmp_path / "server.sock")
    client_path = str(tmp_path / "client.sock")
    other_path = str(tmp_path / "other.sock")

    async def main():
        async with await anyio.create_unix_datagram_socket(local_path=server_path) as server:
            async with await anyio.create_connected_unix_datagram_socket(
                server_path, local_path=client_path
            ) as client:
                assert client.extra(SocketAttribute.remote_address) == server_path
                for seed, size in enumerate((1, 1000, 60_000)):
                    data = payload(size, seed)
                    await client.send(data)
                    assert await server.receive() == (data, client_path)
                    await server.sendto(data[::-1], client_path)
                    assert await client.receive() == data[::-1]

                with anyio.move_on_after(0.02) as scope:
                    await client.receive()
                assert scope.cancelled_caught

            async with await anyio.create_unix_datagram_socket(local_path=other_path) as other:
                await other.sendto(b"hello", server_path)
                assert await server.receive() == (b"hello", other_path)

    anyio_run(main)
