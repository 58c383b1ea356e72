"""httpx's AsyncClient (over httpcore and anyio) against an aiohttp server, on snakeloop.

Each test takes ``any_loop``: it runs once on snakeloop and once on the stdlib
loop, under the suite's leak guards.  The server is the application of
``_support.make_app``.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from _loopkit import is_virtual

from ._support import (
    CERT_HOSTNAME,
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


def test_get_and_post(any_loop):
    async def main():
        async with serve() as srv, httpx.AsyncClient(base_url=srv.base) as client:
            resp = await client.get("/json", params={"q": "snake"})
            assert resp.status_code == 200
            assert resp.http_version == "HTTP/1.1"
            assert resp.headers["content-type"].startswith("application/json")
            got = resp.json()
            assert (got["method"], got["query"], got["version"]) == ("GET", {"q": "snake"}, "1.1")

            body = {"n": 3, "items": list(range(100)), "text": "ünïcode 🐍"}
            resp = await client.post("/json", json=body)
            assert resp.json()["echo"] == body

            data = payload(300_000, seed=4)
            resp = await client.post("/upload", content=data)
            got = resp.json()
            assert (got["size"], got["sha256"]) == (len(data), sha256(data))
            assert got["content_length"] == len(data)

            assert (await client.get("/missing")).status_code == 404
            with pytest.raises(httpx.HTTPStatusError):
                (await client.delete("/json")).raise_for_status()

    run(any_loop, main())


def test_streaming_download_and_upload(any_loop):
    size = 4 * 1024 * 1024 + 99

    async def main():
        async with serve() as srv, httpx.AsyncClient(base_url=srv.base) as client:
            params = {"size": size, "seed": 8}
            async with client.stream("GET", "/stream", params=params) as resp:
                assert resp.headers["transfer-encoding"] == "chunked"
                digest_hex = resp.headers["x-sha256"]
                received = bytearray()
                async for chunk in resp.aiter_bytes(chunk_size=100_000):
                    received += chunk
            assert len(received) == size
            assert sha256(bytes(received)) == digest_hex == sha256(payload(size, 8))

            # Incremental: the server sends the rest only once the first line is here.
            async with client.stream("GET", "/gated") as resp:
                lines = resp.aiter_lines()
                assert await anext(lines) == "first"
                srv.app[GATE].set()
                assert [line async for line in lines] == ["second"]

            # Streaming upload from an async generator: chunked transfer encoding.
            data = payload(size, seed=9)
            resp = await client.post("/upload", content=iter_chunks(data))
            got = resp.json()
            assert got["transfer_encoding"] == "chunked"
            assert (got["size"], got["sha256"]) == (size, sha256(data))

    run(any_loop, main())


def test_connection_pooling(any_loop):
    async def main():
        limits = httpx.Limits(max_connections=3, max_keepalive_connections=3)
        async with (
            serve() as srv,
            httpx.AsyncClient(base_url=srv.base, limits=limits) as client,
        ):
            # One at a time: a single kept-alive connection carries every request.
            ports = {(await client.get("/peer")).json()["port"] for _ in range(15)}
            assert len(ports) == 1

            # Many at once: the pool opens up to its limit and shares those connections.
            async def one() -> int:
                resp = await client.get("/peer", params={"delay": "0.01"})
                return resp.json()["port"]

            ports = await asyncio.gather(*(one() for _ in range(30)))
            assert len(set(ports)) == 3, sorted(set(ports))

    run(any_loop, main())


def test_timeouts(any_loop_vt):
    loop = any_loop_vt

    async def main():
        async with serve() as srv, httpx.AsyncClient(base_url=srv.base) as client:
            start = loop.time()
            with pytest.raises(httpx.ReadTimeout):
                await client.get("/hold", timeout=httpx.Timeout(5, read=0.2))
            took = loop.time() - start
            srv.app[RELEASE].set()
            resp = await client.get("/hold", timeout=5)
            assert resp.text == "released"
            return took

    took = run(loop, main())
    if is_virtual(loop):
        assert took == 0.2
    else:
        assert 0.2 <= took < 5


def test_unix_socket(any_loop, tmp_path):
    path = str(tmp_path / "httpx.sock")

    async def main():
        transport = httpx.AsyncHTTPTransport(uds=path)
        async with (
            serve(unix_path=path),
            httpx.AsyncClient(transport=transport, base_url="http://localhost") as client,
        ):
            got = (await client.get("/json")).json()
            assert got["port"] is None and got["version"] == "1.1"
            resp = await client.get("/stream", params={"size": 200_000})
            assert sha256(resp.content) == resp.headers["x-sha256"]

    run(any_loop, main())


def test_tls(any_loop):
    async def main():
        sni = {"sni_hostname": CERT_HOSTNAME}
        async with serve(ssl_context=server_tls_context()) as srv:
            async with httpx.AsyncClient(base_url=srv.base, verify=client_tls_context()) as client:
                first = (await client.get("/json", extensions=sni)).json()
                assert first["secure"] is True
                data = payload(1024 * 1024, seed=6)
                got = (await client.post("/upload", content=data, extensions=sni)).json()
                assert got["sha256"] == sha256(data)
                async with client.stream(
                    "GET", "/stream", params={"size": 600_000}, extensions=sni
                ) as resp:
                    body = await resp.aread()
                assert sha256(body) == resp.headers["x-sha256"]
                last = (await client.get("/json", extensions=sni)).json()
                assert last["port"] == first["port"]  # one TLS connection, kept alive
            # Verification is on: the default trust store does not know the test CA.
            async with httpx.AsyncClient(base_url=srv.base) as client:
                with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await client.get("/json", extensions=sni)

    run(any_loop, main())
