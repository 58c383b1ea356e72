"""A Starlette application served by uvicorn, with httpx and websockets as clients.

Each test takes ``any_loop``: it runs once on snakeloop and once on the stdlib
loop, under the suite's leak guards.  ``uvicorn.Server.serve()`` runs as a task
on the test's loop (``loop="none"``: uvicorn does not make a loop of its own);
the test asks it to exit and waits for that task.  In the main thread
``serve()`` replaces the SIGINT and SIGTERM handlers with ``signal.signal()``
while it runs and puts the old ones back when it returns; the tests check
both.  Starlette's streaming responses and httpx's connections run on anyio.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import signal
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosedError

from ._support import iter_chunks, payload, run, sha256

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


# -- the application ------------------------------------------------------------------


async def json_route(request: Request) -> JSONResponse:
    body = await request.json() if request.method == "POST" else None
    return JSONResponse(
        {
            "method": request.method,
            "query": dict(request.query_params),
            "body": body,
            "greeting": request.state.greeting,  # from the lifespan's state
        }
    )


async def stream_route(request: Request) -> StreamingResponse:
    """``lines`` numbered lines, each one written separately."""
    lines = int(request.query_params["lines"])

    async def body() -> AsyncIterator[bytes]:
        for n in range(lines):
            yield f"line {n}\n".encode()
            await asyncio.sleep(0)

    return StreamingResponse(body(), media_type="text/plain")


async def upload_route(request: Request) -> JSONResponse:
    digest = hashlib.sha256()
    size = 0
    async for chunk in request.stream():
        digest.update(chunk)
        size += len(chunk)
    return JSONResponse(
        {
            "sha256": digest.hexdigest(),
            "size": size,
            "transfer_encoding": request.headers.get("transfer-encoding"),
        }
    )


async def reverse_route(request: Request) -> Response:
    return Response((await request.body())[::-1], media_type="application/octet-stream")


async def ws_route(websocket: WebSocket) -> None:
    await websocket.accept()
    async for text in websocket.iter_text():
        if text == "bye":
            await websocket.close(code=4000, reason="server says bye")
            return
        await websocket.send_text(text.upper())


def make_app(events: list[str]) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, str]]:
        events.append("startup")
        yield {"greeting": "hello"}
        events.append("shutdown")

    return Starlette(
        routes=[
            Route("/json", json_route, methods=["GET", "POST"]),
            Route("/stream", stream_route),
            Route("/upload", upload_route, methods=["POST"]),
            Route("/reverse", reverse_route, methods=["POST"]),
            WebSocketRoute("/ws", ws_route),
        ],
        lifespan=lifespan,
    )


# -- the server -----------------------------------------------------------------------


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.asynccontextmanager
async def serve(app: Starlette) -> AsyncIterator[tuple[uvicorn.Server, str]]:
    """Run ``app`` under uvicorn on an ephemeral loopback port; yield (server, base URL).

    uvicorn must log nothing at WARNING or above, and it must leave the signal
    handlers as it found them.
    """
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        loop="none",
        lifespan="on",
        log_level="warning",
        log_config=None,  # no logging.config.dictConfig() for the whole process
    )
    server = uvicorn.Server(config)
    handlers_before = [signal.getsignal(sig) for sig in HANDLED_SIGNALS]
    records = _Records()
    uvicorn_logger = logging.getLogger("uvicorn")
    uvicorn_logger.addHandler(records)
    try:
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()
                raise AssertionError("uvicorn returned before it started")
            await asyncio.sleep(0.005)
        assert [signal.getsignal(sig) for sig in HANDLED_SIGNALS] == [server.handle_exit] * 2
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield server, f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            await task
    finally:
        uvicorn_logger.removeHandler(records)
    assert [signal.getsignal(sig) for sig in HANDLED_SIGNALS] == handlers_before
    assert not server.server_state.connections and not server.server_state.tasks
    assert all(not s.is_serving() for s in server.servers)
    assert [r.getMessage() for r in records.records] == []


# -- the tests ------------------------------------------------------------------------


def test_http_routes(any_loop):
    events: list[str] = []

    async def main():
        async with (
            serve(make_app(events)) as (server, base),
            httpx.AsyncClient(base_url=base) as client,
        ):
            resp = await client.get("/json", params={"q": "snake"})
            assert resp.status_code == 200
            assert resp.headers["content-type"] == "application/json"
            assert resp.json() == {
                "method": "GET",
                "query": {"q": "snake"},
                "body": None,
                "greeting": "hello",
            }

            body = {"items": list(range(50)), "text": "ünïcode 🐍"}
            resp = await client.post("/json", json=body)
            assert (resp.status_code, resp.json()["body"]) == (200, body)

            assert (await client.get("/missing")).status_code == 404
            assert (await client.delete("/json")).status_code == 405

            # A request body read at once, and one read as a stream of chunks.
            data = payload(300_001, seed=1)
            resp = await client.post("/reverse", content=data)
            assert (resp.status_code, resp.content) == (200, data[::-1])
            data = payload(2 * 1024 * 1024 + 5, seed=2)
            got = (await client.post("/upload", content=iter_chunks(data))).json()
            assert got == {
                "sha256": sha256(data),
                "size": len(data),
                "transfer_encoding": "chunked",
            }

            # A streaming response, read line by line as it comes.
            async with client.stream("GET", "/stream", params={"lines": 500}) as resp:
                assert resp.status_code == 200
                assert "content-length" not in resp.headers
                lines = [line async for line in resp.aiter_lines()]
            assert lines == [f"line {n}" for n in range(500)]

            # Concurrent requests.
            async def one(n: int) -> int:
                resp = await client.get("/json", params={"n": str(n)})
                return int(resp.json()["query"]["n"])

            assert await asyncio.gather(*(one(n) for n in range(30))) == list(range(30))
            assert events == ["startup"]
        assert events == ["startup", "shutdown"]

    run(any_loop, main())


def test_websocket(any_loop):
    events: list[str] = []

    async def main():
        async with serve(make_app(events)) as (server, base):
            url = base.replace("http://", "ws://") + "/ws"
            async with ws_connect(url) as ws:
                # Random hex: permessage-deflate (on by default) cannot squeeze it much.
                for text in ("hello", "snakeloop", payload(60_000, seed=3).hex()):
                    await ws.send(text)
                    assert await ws.recv() == text.upper()
                await ws.send("bye")
                # 4000 is not a normal closure (1000, 1001): websockets says "error".
                with pytest.raises(ConnectionClosedError) as caught:
                    await ws.recv()
                received = caught.value.rcvd
                assert (received.code, received.reason) == (4000, "server says bye")
                assert (ws.close_code, ws.close_reason) == (4000, "server says bye")

            # A client that goes away on its own.
            async with ws_connect(url) as ws:
                await ws.send("once")
                assert await ws.recv() == "ONCE"
        assert events == ["startup", "shutdown"]

    run(any_loop, main())


def test_shutdown_closes_idle_connections(any_loop):
    events: list[str] = []

    async def main():
        async with httpx.AsyncClient() as client:
            async with serve(make_app(events)) as (server, base):
                resp = await client.get(base + "/json")
                assert resp.status_code == 200
                assert len(server.server_state.connections) == 1  # kept alive, idle
            # The server is gone: the pooled connection is closed and nothing listens.
            with pytest.raises(httpx.ConnectError):
                await client.get(base + "/json")
        assert events == ["startup", "shutdown"]

    run(any_loop, main())
