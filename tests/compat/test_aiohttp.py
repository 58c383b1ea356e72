"""aiohttp, server and client, unchanged on snakeloop (and on the stdlib loop).

Each test takes ``any_loop``: it runs once on snakeloop and once on the stdlib
loop, under the suite's leak guards.  The server is the application of
``_support.make_app``; the client is an ``aiohttp.ClientSession``.
"""

from __future__ import annotations

import asyncio
import io
import signal
import socket
from unittest import mock

import aiohttp
import pytest
from _loopkit import is_virtual
from aiohttp import WSMsgType, web

from ._support import (
    CERT_HOSTNAME,
    ENDLESS,
    ENTERED,
    EVENTS,
    GATE,
    RELEASE,
    client_tls_context,
    iter_chunks,
    payload,
    run,
    serve,
    server_tls_context,
    sha256,
)


def test_json_get_and_post(any_loop):
    async def main():
        async with serve() as srv, aiohttp.ClientSession() as session:
            async with session.get(srv.url("/json"), params={"q": "snake", "n": "3"}) as resp:
                assert resp.status == 200
                assert resp.content_type == "application/json"
                got = await resp.json()
            assert got["method"] == "GET"
            assert got["query"] == {"q": "snake", "n": "3"}
            assert got["version"] == "1.1"
            assert got["secure"] is False

            body = {"name": "snakeloop", "tags": ["a", "b"], "n": 1, "nested": {"x": None}}
            async with session.post(srv.url("/json"), json=body) as resp:
                assert resp.status == 200
                assert (await resp.json())["echo"] == body

            async with session.get(srv.url("/no-such-route")) as resp:
                assert resp.status == 404
            async with session.put(srv.url("/json")) as resp:
                assert resp.status == 405

    run(any_loop, main())


def test_keepalive_reuses_one_connection(any_loop):
    async def main():
        async with serve() as srv, aiohttp.ClientSession() as session:
            ports = set()
            for i in range(20):
                if i % 2:
                    async with session.get(srv.url("/peer")) as resp:
                        ports.add((await resp.json())["port"])
                else:  # bodies of different sizes in between must not break keep-alive
                    data = payload(1000 * i, seed=i)
                    async with session.post(srv.url("/upload"), data=data) as resp:
                        assert (await resp.json())["sha256"] == sha256(data)
                        assert resp.headers.get("Connection", "keep-alive") == "keep-alive"
            async with session.get(srv.url("/json")) as resp:
                ports.add((await resp.json())["port"])
            assert len(ports) == 1, ports

    run(any_loop, main())


def test_keepalive_expires_on_a_patched_clock(any_loop):
    """aiohttp's own test_keepalive_expires_on_time, in outline: the server schedules the
    close of an idle keep-alive connection with ``loop.call_at(loop.time() + timeout)``,
    and the test moves a patched ``loop.time`` to that deadline and expects the close
    within two turns of the loop (issue 32)."""
    loop = any_loop
    protocols = []

    async def hello(request: web.Request) -> web.Response:
        protocols.append(request.protocol)
        return web.Response(text="hello")

    async def main():
        app = web.Application()
        app.router.add_get("/", hello)
        # Shorter than aiohttp's 75 s, and than the time limit of run() below, which the
        # patched clock moves too (on either loop).
        runner = web.AppRunner(app, keepalive_timeout=10.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/") as resp:
                    assert await resp.text() == "hello"
                (protocol,) = protocols
                for _ in range(100):  # until the server's handler went idle
                    if protocol._keepalive_handle is not None:
                        break
                    await asyncio.sleep(0)
                assert protocol._keepalive_handle is not None
                now = loop.time()
                with mock.patch.object(loop, "time") as fake:
                    fake.return_value = now + 10.0 + 0.5
                    await asyncio.sleep(0)
                    await asyncio.sleep(0)
                    assert protocol._keepalive_handle is None
        finally:
            await runner.cleanup()

    run(loop, main())


def test_connection_pool_limit_under_concurrency(any_loop):
    async def main():
        connector = aiohttp.TCPConnector(limit=4)
        async with serve() as srv, aiohttp.ClientSession(connector=connector) as session:

            async def one() -> int:
                async with session.get(srv.url("/peer"), params={"delay": "0.01"}) as resp:
                    assert resp.status == 200
                    return (await resp.json())["port"]

            ports = await asyncio.gather(*(one() for _ in range(40)))
            # All 40 start at once: the pool opens exactly its limit, then reuses them.
            assert len(set(ports)) == 4, sorted(set(ports))

    run(any_loop, main())


def test_concurrent_requests(any_loop):
    async def main():
        async with serve() as srv, aiohttp.ClientSession() as session:

            async def one(n: int) -> None:
                body = {"n": n, "text": "x" * (n * 37 % 2000)}
                async with session.post(srv.url("/json"), json=body) as resp:
                    assert resp.status == 200
                    assert (await resp.json())["echo"] == body

            await asyncio.gather(*(one(n) for n in range(50)))

    run(any_loop, main())


def test_large_bodies_keep_their_sha256(any_loop):
    size = 4 * 1024 * 1024 + 123

    async def main():
        async with serve() as srv, aiohttp.ClientSession() as session:
            data = payload(size, seed=7)

            # Upload with a length, from a file-like object (as aiohttp advises).
            async with session.post(srv.url("/upload"), data=io.BytesIO(data)) as resp:
                got = await resp.json()
            assert got["content_length"] == size
            assert (got["size"], got["sha256"]) == (size, sha256(data))

            # Chunked upload: an async generator body has no length.
            async with session.post(srv.url("/upload"), data=iter_chunks(data)) as resp:
                got = await resp.json()
            assert got["transfer_encoding"] == "chunked"
            assert got["content_length"] is None
            assert (got["size"], got["sha256"]) == (size, sha256(data))

            # Chunked download, read piece by piece.
            async with session.get(srv.url("/stream"), params={"size": size, "seed": 7}) as resp:
                assert resp.headers["Transfer-Encoding"] == "chunked"
                pieces = [chunk async for chunk in resp.content.iter_chunked(32 * 1024)]
            assert sha256(b"".join(pieces)) == resp.headers["X-SHA256"] == sha256(data)

    run(any_loop, main())


def test_client_leaving_mid_download(any_loop):
    async def main():
        async with serve() as srv, aiohttp.ClientSession() as session:
            resp = await session.get(srv.url("/endless"))
            assert len(await resp.content.readexactly(1_000_000)) == 1_000_000
            # Wait until nobody reads: aiohttp has paused the client's
            # transport (its buffer is full) and the server's buffer is over
            # its limit, so the handler waits in flow control when the client
            # leaves.  (How far both got by now depends on how fast the
            # client read.)
            client_side = resp.connection.transport
            (server_side,) = srv.app[ENDLESS]
            _, high = server_side.get_write_buffer_limits()

            def stalled():
                return not client_side.is_reading() and server_side.get_write_buffer_size() > high

            for _ in range(500):
                if stalled():
                    break
                await asyncio.sleep(0.01)
            assert stalled()
            resp.close()  # drops the connection with the server still writing
            for _ in range(500):
                if srv.app[EVENTS]:
                    break
                await asyncio.sleep(0.01)
            # The write waiting for the client to read (flow control) fails at once.
            assert srv.app[EVENTS] == [("endless", "ConnectionError", "Connection lost")]
            async with session.get(srv.url("/json")) as resp:  # the server is fine
                assert resp.status == 200

    run(any_loop, main())


def test_connect_by_host_name(any_loop):
    """A host name goes through loop.getaddrinfo and aiohappyeyeballs."""

    async def main():
        async with serve() as srv, aiohttp.ClientSession() as session:
            url = srv.url("/json").replace("127.0.0.1", "localhost")
            async with session.get(url) as resp:
                assert (await resp.json())["method"] == "GET"

    run(any_loop, main())


def test_streaming_response_arrives_incrementally(any_loop):
    async def main():
        async with (
            serve() as srv,
            aiohttp.ClientSession() as session,
            session.get(srv.url("/gated")) as resp,
        ):
            # The server holds the rest back until the first line has arrived here.
            assert await resp.content.readline() == b"first\n"
            srv.app[GATE].set()
            assert await resp.content.readline() == b"second\n"
            assert await resp.content.read() == b""

    run(any_loop, main())


def test_file_response_sendfile_and_file_upload(any_loop, tmp_path):
    data = payload(2 * 1024 * 1024 + 5, seed=3)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)

    async def main():
        async with serve(file_path=path) as srv, aiohttp.ClientSession() as session:
            async with session.get(srv.url("/file")) as resp:  # the server uses loop.sendfile
                assert resp.status == 200
                assert resp.content_length == len(data)
                assert sha256(await resp.read()) == sha256(data)
            headers = {"Range": "bytes=1000-1999"}
            async with session.get(srv.url("/file"), headers=headers) as resp:
                assert resp.status == 206
                assert await resp.read() == data[1000:2000]
            with path.open("rb") as f:  # the client reads the file in the default executor
                async with session.post(srv.url("/upload"), data=f) as resp:
                    got = await resp.json()
            assert (got["size"], got["sha256"]) == (len(data), sha256(data))
            # "Expect: 100-continue": the body goes only after the server's interim 100.
            body = io.BytesIO(data)
            async with session.post(srv.url("/upload"), data=body, expect100=True) as resp:
                got = await resp.json()
            assert (got["size"], got["sha256"]) == (len(data), sha256(data))

    run(any_loop, main())


def test_client_timeouts(any_loop_vt):
    loop = any_loop_vt

    async def main():
        async with serve() as srv, aiohttp.ClientSession() as session:
            start = loop.time()
            with pytest.raises(asyncio.TimeoutError):
                async with session.get(srv.url("/hold"), timeout=aiohttp.ClientTimeout(total=0.2)):
                    pass
            total_expired = loop.time()
            with pytest.raises(aiohttp.ServerTimeoutError):
                timeout = aiohttp.ClientTimeout(sock_read=0.2)
                async with session.get(srv.url("/hold"), timeout=timeout):
                    pass
            read_expired = loop.time()
            # The session is still usable, and the server still serves.
            srv.app[RELEASE].set()
            async with session.get(srv.url("/hold")) as resp:
                assert await resp.text() == "released"
            return total_expired - start, read_expired - total_expired

    total, read = run(loop, main())
    if is_virtual(loop):
        assert (total, read) == (0.2, 0.2)
    else:
        assert 0.2 <= total < 5 and 0.2 <= read < 5


def test_graceful_shutdown_finishes_requests_in_flight(any_loop):
    async def main():
        async with serve() as srv, aiohttp.ClientSession() as session:
            # An idle keep-alive connection, to be closed by the shutdown.
            async with session.get(srv.url("/json")) as resp:
                assert resp.status == 200

            async def in_flight() -> tuple[int, str]:
                async with session.get(srv.url("/hold")) as resp:
                    return resp.status, await resp.text()

            request = asyncio.ensure_future(in_flight())
            await srv.app[ENTERED].wait()
            cleanup = asyncio.ensure_future(srv.runner.cleanup())
            # The listening socket goes away at once; the request in flight stays.
            for _ in range(200):
                await asyncio.sleep(0.005)
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", int(srv.base.rsplit(":", 1)[1]))):
                        break
            else:
                raise AssertionError("the server still accepts connections during cleanup")
            assert not cleanup.done() and not request.done()
            srv.app[RELEASE].set()
            assert await request == (200, "released")
            await cleanup
            assert srv.app[EVENTS] == ["shutdown", "cleanup"]
            with pytest.raises(aiohttp.ClientConnectorError):
                async with session.get(srv.url("/json"), timeout=aiohttp.ClientTimeout(total=5)):
                    pass

    run(any_loop, main())


def test_shutdown_timeout_cancels_a_stuck_handler(any_loop_vt):
    loop = any_loop_vt

    async def main():
        async with (
            serve(shutdown_timeout=0.2) as srv,
            aiohttp.ClientSession() as session,
        ):
            # A POST: aiohttp would retry an idempotent GET on a new connection.
            request = asyncio.ensure_future(session.post(srv.url("/hold")))
            await srv.app[ENTERED].wait()
            start = loop.time()
            await srv.runner.cleanup()  # never released: cancelled after shutdown_timeout
            took = loop.time() - start
            with pytest.raises(aiohttp.ServerDisconnectedError):
                await request
            return took

    # aiohttp waits shutdown_timeout for the handler to finish, cancels the request, then
    # waits shutdown_timeout again for the handler's task (which the cancel does not end).
    took = run(loop, main())
    if is_virtual(loop):
        assert took == 0.4
    else:
        assert 0.35 < took < 5


def test_websocket_endpoint(any_loop):
    async def main():
        async with serve() as srv, aiohttp.ClientSession() as session:
            async with session.ws_connect(srv.url("/ws"), autoping=False) as ws:
                await ws.send_str("hello")
                assert await ws.receive_str() == "hello"
                big = payload(1024 * 1024, seed=11)
                await ws.send_bytes(big)
                assert await ws.receive_bytes() == big
                await ws.send_json({"k": [1, 2, 3]})
                assert await ws.receive_json() == {"k": [1, 2, 3]}
                await ws.ping(b"are you there")
                msg = await ws.receive()
                assert (msg.type, msg.data) == (WSMsgType.PONG, b"are you there")
                await ws.send_str("close:4001")
                msg = await ws.receive()
                assert msg.type == WSMsgType.CLOSE
                assert (msg.data, msg.extra) == (4001, "server says bye")
            assert ws.closed and ws.close_code == 4001
            # A client-initiated close, with the normal code.
            async with session.ws_connect(srv.url("/ws")) as ws:
                await ws.send_str("x")
                assert await ws.receive_str() == "x"
            assert ws.close_code == 1000
            for _ in range(500):
                if len(srv.app[EVENTS]) == 2:
                    break
                await asyncio.sleep(0.01)
            # The server's close_code is the one of the client's closing frame.
            assert srv.app[EVENTS] == [("ws-closed", 1000), ("ws-closed", 1000)]

    run(any_loop, main())


def test_unix_socket_server_and_client(any_loop, tmp_path):
    sock_path = str(tmp_path / "aiohttp.sock")
    file_data = payload(700_000, seed=13)
    (tmp_path / "blob.bin").write_bytes(file_data)

    async def main():
        async with serve(unix_path=sock_path, file_path=tmp_path / "blob.bin") as srv:
            connector = aiohttp.UnixConnector(path=sock_path)
            async with aiohttp.ClientSession(connector=connector) as session:
                async with session.get(srv.url("/json")) as resp:
                    got = await resp.json()
                assert got["port"] is None and got["version"] == "1.1"
                data = payload(1024 * 1024, seed=5)
                async with session.post(srv.url("/upload"), data=iter_chunks(data)) as resp:
                    assert (await resp.json())["sha256"] == sha256(data)
                async with session.get(srv.url("/stream"), params={"size": 300_000}) as resp:
                    assert sha256(await resp.read()) == resp.headers["X-SHA256"]
                async with session.get(srv.url("/file")) as resp:  # sendfile on AF_UNIX
                    assert await resp.read() == file_data

    run(any_loop, main())


def test_tls_round_trip(any_loop, tmp_path):
    file_data = payload(900_000, seed=14)
    (tmp_path / "blob.bin").write_bytes(file_data)

    async def main():
        async with (
            serve(ssl_context=server_tls_context(), file_path=tmp_path / "blob.bin") as srv,
            aiohttp.ClientSession() as session,
        ):
            tls = {"ssl": client_tls_context(), "server_hostname": CERT_HOSTNAME}
            async with session.get(srv.url("/json"), **tls) as first:
                got = await first.json()
            assert got["secure"] is True
            data = payload(1024 * 1024, seed=9)
            async with session.post(srv.url("/upload"), data=io.BytesIO(data), **tls) as resp:
                assert (await resp.json())["sha256"] == sha256(data)
            async with session.get(srv.url("/stream"), params={"size": 500_000}, **tls) as resp:
                assert sha256(await resp.read()) == resp.headers["X-SHA256"]
            # loop.sendfile() cannot go through TLS: it falls back to reads and writes.
            async with session.get(srv.url("/file"), **tls) as resp:
                assert await resp.read() == file_data
            async with session.get(srv.url("/json"), **tls) as last:
                assert (await last.json())["port"] == got["port"]  # kept alive over TLS
            # Verification is on: without the test CA the handshake fails.
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                async with session.get(srv.url("/json"), server_hostname=CERT_HOSTNAME):
                    pass

    run(any_loop, main())


CLIENT = web.AppKey("client", asyncio.Task)


def test_run_app_stops_on_sigterm(any_loop):
    """``web.run_app`` on the given loop, stopped by SIGTERM like a deployed server."""
    results = {}
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/json"

    async def client(app: web.Application) -> None:
        try:
            async with aiohttp.ClientSession() as session, session.get(url) as resp:
                results["json"] = await resp.json()
            # run_app's handler is installed through loop.add_signal_handler.
            handler = signal.getsignal(signal.SIGTERM)
            assert handler not in (signal.SIG_DFL, signal.SIG_IGN, None), handler
        except BaseException as exc:
            results["error"] = exc
            asyncio.get_running_loop().stop()
            raise
        signal.raise_signal(signal.SIGTERM)

    async def on_startup(app: web.Application) -> None:
        app[CLIENT] = asyncio.ensure_future(client(app))

    async def on_cleanup(app: web.Application) -> None:
        await app[CLIENT]
        results["cleaned up"] = True

    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/json", ok)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    try:
        web.run_app(app, sock=sock, loop=any_loop, print=None, handle_signals=True)
    finally:
        asyncio.set_event_loop(None)
        sock.close()
    assert "error" not in results, results["error"]
    assert results == {"json": {"ok": True}, "cleaned up": True}
    assert any_loop.is_closed()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
