"""websockets (its asyncio API), server and client, unchanged on snakeloop.

Each test takes ``any_loop``: it runs once on snakeloop and once on the stdlib
loop, under the suite's leak guards.
"""

from __future__ import annotations

import asyncio
import http

import pytest
from websockets.asyncio.client import connect, unix_connect
from websockets.asyncio.server import ServerConnection, broadcast, serve, unix_serve
from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK, InvalidStatus

from ._support import (
    CERT_HOSTNAME,
    client_tls_context,
    payload,
    run,
    server_tls_context,
    sha256,
)


class EchoServer:
    """Echoes every message; a few text commands make it do something else."""

    def __init__(self) -> None:
        self.closed: list[tuple[int | None, str | None, str]] = []

    async def handler(self, ws: ServerConnection) -> None:
        how = "ok"
        try:
            async for msg in ws:
                if msg == "close-4001":
                    await ws.close(4001, "bye")
                elif msg == "ping-me":
                    latency = await (await ws.ping(b"from the server"))
                    await ws.send(f"pong after {latency:f}")
                elif msg == "sha256":
                    data = await ws.recv()
                    await ws.send(sha256(data))
                else:
                    await ws.send(msg)
        except ConnectionClosedError:
            how = "error"
        self.closed.append((ws.close_code, ws.close_reason, how))

    @staticmethod
    def process_request(ws: ServerConnection, request):
        if request.path == "/forbidden":
            return ws.respond(http.HTTPStatus.FORBIDDEN, "no\n")
        return None

    def serve(self, **kwargs):
        kwargs.setdefault("max_size", 16 * 1024 * 1024)
        return serve(self.handler, "127.0.0.1", 0, process_request=self.process_request, **kwargs)


def ws_url(server, scheme: str = "ws") -> str:
    return f"{scheme}://127.0.0.1:{server.sockets[0].getsockname()[1]}/"


def test_echo_text_and_binary(any_loop):
    async def main():
        echo = EchoServer()
        async with echo.serve() as server, connect(ws_url(server)) as ws:
            for msg in ["hello", "", "snakes 🐍 and ünïcode", b"\x00\x01\xff", b""]:
                await ws.send(msg)
                got = await ws.recv()
                assert got == msg and type(got) is type(msg)
            # A fragmented message, from a list and from an async generator.
            await ws.send(["frag", "mented", "!"])
            assert await ws.recv() == "fragmented!"

            async def pieces():
                for i in range(5):
                    yield bytes([i]) * 1000
                    await asyncio.sleep(0)

            await ws.send(pieces())
            assert await ws.recv() == b"".join(bytes([i]) * 1000 for i in range(5))
            # Many messages in flight at once come back in order.
            for i in range(200):
                await ws.send(f"m{i}")
            assert [await ws.recv() for _ in range(200)] == [f"m{i}" for i in range(200)]

    run(any_loop, main())


def test_ping_pong_and_keepalive(any_loop):
    async def main():
        echo = EchoServer()
        async with (
            echo.serve() as server,
            connect(ws_url(server), ping_interval=0.05, ping_timeout=10) as ws,
        ):
            latency = await (await ws.ping(b"from the client"))
            assert 0 <= latency < 5
            await ws.send("ping-me")  # the server pings; the client answers on its own
            assert (await ws.recv()).startswith("pong after ")
            # Idle for a few keepalive intervals: pings go out, pongs come back.
            await asyncio.sleep(0.3)
            assert ws.latency > 0
            await ws.send("still there")
            assert await ws.recv() == "still there"

    run(any_loop, main())


def test_close_codes(any_loop):
    async def main():
        echo = EchoServer()
        async with echo.serve() as server:
            url = ws_url(server)
            # The server closes with an application code.
            async with connect(url) as ws:
                await ws.send("close-4001")
                with pytest.raises(ConnectionClosedError) as caught:
                    await ws.recv()
                assert (caught.value.rcvd.code, caught.value.rcvd.reason) == (4001, "bye")
                assert (ws.close_code, ws.close_reason) == (4001, "bye")
            # The client closes normally, then with an application code.
            async with connect(url) as ws:
                await ws.send("x")
                assert await ws.recv() == "x"
            ws = await connect(url)
            await ws.close(4002, "client bye")
            with pytest.raises(ConnectionClosedError):
                await ws.send("too late")
            # The server closing: connections see 1001 "going away".
            ws = await connect(url)
            await ws.send("y")
            assert await ws.recv() == "y"
            server.close()
            with pytest.raises(ConnectionClosedOK) as caught:
                await ws.recv()
            assert caught.value.rcvd.code == 1001
            await server.wait_closed()
        assert sorted(echo.closed) == [
            (1000, "", "ok"),
            (1001, "", "ok"),
            (4001, "bye", "error"),
            (4002, "client bye", "error"),
        ]

    run(any_loop, main())


def test_rejected_handshake(any_loop):
    async def main():
        echo = EchoServer()
        async with echo.serve() as server:
            with pytest.raises(InvalidStatus) as caught:
                async with connect(ws_url(server) + "forbidden"):
                    pass
            assert caught.value.response.status_code == 403

    run(any_loop, main())


def test_many_concurrent_connections(any_loop):
    clients = 50

    async def main():
        echo = EchoServer()
        all_connected = asyncio.Event()
        connected = 0
        async with echo.serve() as server:
            url = ws_url(server)

            async def client(n: int) -> None:
                nonlocal connected
                async with connect(url, open_timeout=10) as ws:
                    connected += 1
                    if connected == clients:
                        all_connected.set()
                    await all_connected.wait()
                    assert await ws.recv() == "to everyone"
                    for i in range(10):
                        msg = f"client {n} message {i}" if i % 2 else payload(n * 100 + i, n)
                        await ws.send(msg)
                        assert await ws.recv() == msg

            tasks = [asyncio.ensure_future(client(n)) for n in range(clients)]
            await all_connected.wait()
            assert len(server.connections) == clients
            broadcast(server.connections, "to everyone", raise_exceptions=True)
            await asyncio.gather(*tasks)
        assert len(echo.closed) == clients

    run(any_loop, main())


@pytest.mark.parametrize("compression", ["deflate", None])
def test_large_messages(any_loop, compression):
    async def main():
        echo = EchoServer()
        big = payload(3 * 1024 * 1024 + 17, seed=21)
        text = "0123456789abcdef🐍" * 60_000
        async with (
            echo.serve(compression=compression) as server,
            connect(ws_url(server), max_size=None, compression=compression) as ws,
        ):
            await ws.send(big)
            assert sha256(await ws.recv()) == sha256(big)
            await ws.send(text)
            assert await ws.recv() == text
            await ws.send("sha256")
            await ws.send(big[: 2 * 1024 * 1024])
            assert await ws.recv() == sha256(big[: 2 * 1024 * 1024])

    run(any_loop, main())


def test_unix_socket(any_loop, tmp_path):
    path = str(tmp_path / "ws.sock")

    async def main():
        echo = EchoServer()
        async with (
            unix_serve(echo.handler, path) as server,
            unix_connect(path, uri="ws://localhost/") as ws,
        ):
            await ws.send("over a unix socket")
            assert await ws.recv() == "over a unix socket"
            data = payload(500_000, seed=1)
            await ws.send(data)
            assert await ws.recv() == data
            assert len(server.connections) == 1

    run(any_loop, main())


def test_tls(any_loop):
    async def main():
        echo = EchoServer()
        async with (
            echo.serve(ssl=server_tls_context()) as server,
            connect(
                ws_url(server, "wss"),
                ssl=client_tls_context(),
                server_hostname=CERT_HOSTNAME,
                max_size=None,
            ) as ws,
        ):
            assert ws.transport.get_extra_info("ssl_object") is not None
            await ws.send("secret")
            assert await ws.recv() == "secret"
            data = payload(1024 * 1024, seed=2)
            await ws.send(data)
            assert await ws.recv() == data
            # Full duplex: echoes stream back while the client is still sending.
            messages = [payload(200_000, seed=i) for i in range(20)]

            async def send_all() -> None:
                for msg in messages:
                    await ws.send(msg)

            async def receive_all() -> list[bytes]:
                return [await ws.recv() for _ in messages]

            _, echoed = await asyncio.gather(send_all(), receive_all())
            assert echoed == messages

    run(any_loop, main())
