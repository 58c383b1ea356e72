"""Helpers shared by the compatibility tests (not a test module).

The tests run each library on the ``any_loop`` fixture of ``tests/conftest.py``:
once on snakeloop and once on the stdlib loop, with the suite's leak guards
(unclosed transports, fds, threads, calls of the loop's exception handler) on
both.  A failure on snakeloop alone is a snakeloop bug.

The aiohttp application below is the server for the aiohttp and httpx tests.
TLS uses the certificates of CPython's own test-suite, found at run time
through ``test.test_asyncio.utils``: ``keycert3.pem`` is a certificate for
``localhost`` signed by the test CA ``pycacert.pem``.  Everything talks over
127.0.0.1 or a Unix socket in a temporary directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import ssl
from collections.abc import AsyncIterator

import pytest
from _loopkit import run_within
from aiohttp import WSMsgType, web

TIMEOUT = 20.0  # a guard against hangs, never reached when things work
CHUNK = 64 * 1024


run = run_within(TIMEOUT)


def payload(size: int, seed: int = 0) -> bytes:
    """Deterministic pseudo-random bytes (incompressible, every byte value)."""
    return random.Random(seed).randbytes(size)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def iter_chunks(data: bytes, size: int = CHUNK) -> AsyncIterator[bytes]:
    """An async generator body: clients send it with chunked transfer encoding."""
    for start in range(0, len(data), size):
        yield data[start : start + size]
        await asyncio.sleep(0)


# -- TLS -------------------------------------------------------------------------


def _certs():
    return pytest.importorskip("test.test_asyncio.utils")


def server_tls_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(_certs().SIGNED_CERTFILE)
    return ctx


def client_tls_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the host name
    ctx.load_verify_locations(_certs().SIGNING_CA)
    return ctx


CERT_HOSTNAME = "localhost"


# -- the aiohttp application -----------------------------------------------------

GATE = web.AppKey("gate", asyncio.Event)
ENTERED = web.AppKey("entered", asyncio.Event)
RELEASE = web.AppKey("release", asyncio.Event)
EVENTS = web.AppKey("events", list)
# The transport of the /endless response, so a test can see it fill up.
ENDLESS = web.AppKey("endless", list)


def peer_port(request: web.Request) -> int | None:
    """The client's port: it tells the tests which connection carried a request."""
    assert request.transport is not None
    peername = request.transport.get_extra_info("peername")
    return peername[1] if isinstance(peername, tuple) else None  # None on a Unix socket


async def get_json(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "method": request.method,
            "query": dict(request.query),
            "version": f"{request.version.major}.{request.version.minor}",
            "port": peer_port(request),
            "secure": request.secure,
        }
    )


async def post_json(request: web.Request) -> web.Response:
    body = await request.json()
    await asyncio.sleep(0.001 * (body.get("n", 0) % 5))  # answers come back out of order
    return web.json_response({"echo": body, "port": peer_port(request)})


async def peer(request: web.Request) -> web.Response:
    await asyncio.sleep(float(request.query.get("delay", "0")))
    return web.json_response({"port": peer_port(request)})


async def stream(request: web.Request) -> web.StreamResponse:
    """``size`` bytes of ``payload(size, seed)``, written in small pieces, chunked."""
    size = int(request.query["size"])
    data = payload(size, int(request.query.get("seed", "0")))
    resp = web.StreamResponse(headers={"X-SHA256": sha256(data)})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for start in range(0, size, 50_000):  # not a divisor of anything the client uses
        await resp.write(data[start : start + 50_000])
    await resp.write_eof()
    return resp


async def gated(request: web.Request) -> web.StreamResponse:
    """Sends one line, then waits for the client to have seen it before the rest."""
    resp = web.StreamResponse()
    await resp.prepare(request)
    await resp.write(b"first\n")
    await asyncio.wait_for(request.app[GATE].wait(), TIMEOUT)
    await resp.write(b"second\n")
    await resp.write_eof()
    return resp


async def endless(request: web.Request) -> web.StreamResponse:
    """Streams until the client goes away, then records what the write raised."""
    resp = web.StreamResponse()
    await resp.prepare(request)
    request.app[ENDLESS].append(request.transport)
    chunk = b"x" * CHUNK
    try:
        while True:
            await resp.write(chunk)  # waits for the client whenever the buffer is full
    except ConnectionError as exc:
        request.app[EVENTS].append(("endless", type(exc).__name__, str(exc)))
    return resp


async def upload(request: web.Request) -> web.Response:
    digest = hashlib.sha256()
    size = 0
    async for chunk in request.content.iter_chunked(CHUNK):
        digest.update(chunk)
        size += len(chunk)
    return web.json_response(
        {
            "sha256": digest.hexdigest(),
            "size": size,
            "transfer_encoding": request.headers.get("Transfer-Encoding"),
            "content_length": request.content_length,
        }
    )


async def hold(request: web.Request) -> web.Response:
    """Answers only once the test sets the app's RELEASE event."""
    request.app[ENTERED].set()
    await asyncio.wait_for(request.app[RELEASE].wait(), TIMEOUT)
    return web.Response(text="released")


async def websocket(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(max_msg_size=16 * 1024 * 1024)
    await ws.prepare(request)
    async for msg in ws:
        if msg.type == WSMsgType.TEXT:
            if msg.data.startswith("close:"):
                await ws.close(code=int(msg.data.split(":")[1]), message=b"server says bye")
                break
            await ws.send_str(msg.data)
        elif msg.type == WSMsgType.BINARY:
            await ws.send_bytes(msg.data)
    request.app[EVENTS].append(("ws-closed", ws.close_code))
    return ws


def make_app(file_path: str | os.PathLike | None = None) -> web.Application:
    """The test application; with ``file_path``, ``/file`` serves that file."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[GATE] = asyncio.Event()
    app[ENTERED] = asyncio.Event()
    app[RELEASE] = asyncio.Event()
    app[EVENTS] = []
    app[ENDLESS] = []

    async def on_shutdown(app: web.Application) -> None:
        app[EVENTS].append("shutdown")

    async def on_cleanup(app: web.Application) -> None:
        app[EVENTS].append("cleanup")

    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    app.add_routes(
        [
            web.get("/json", get_json),
            web.post("/json", post_json),
            web.get("/peer", peer),
            web.get("/stream", stream),
            web.get("/gated", gated),
            web.get("/endless", endless),
            web.post("/upload", upload),
            web.route("*", "/hold", hold),
            web.get("/ws", websocket),
        ]
    )
    if file_path is not None:

        async def file(request: web.Request) -> web.FileResponse:
            return web.FileResponse(file_path)  # sent with loop.sendfile

        app.router.add_get("/file", file)
    return app


class Served:
    def __init__(self, runner: web.AppRunner, app: web.Application, base: str) -> None:
        self.runner = runner
        self.app = app
        self.base = base

    def url(self, path: str) -> str:
        return self.base + path


@contextlib.asynccontextmanager
async def serve(
    app: web.Application | None = None,
    *,
    file_path: str | os.PathLike | None = None,
    unix_path: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    shutdown_timeout: float = 5.0,
) -> AsyncIterator[Served]:
    """Run ``app`` (default :func:`make_app`) on an ephemeral loopback port.

    ``runner.cleanup()`` runs on the way out unless the test already ran it.
    """
    app = make_app(file_path) if app is None else app
    runner = web.AppRunner(app, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    try:
        if unix_path is not None:
            site: web.BaseSite = web.UnixSite(runner, unix_path)
            base = "http://localhost"
        else:
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
        await site.start()
        if unix_path is None:
            port = runner.addresses[0][1]
            base = f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
        yield Served(runner, app, base)
    finally:
        if runner.server is not None:  # not already cleaned up by the test
            await runner.cleanup()
