"""The contextvars context each protocol callback runs in is the one asyncio gives it.

From 3.15 asyncio gives every stream transport one context of its own
(python/cpython#140947): a server keeps the context current at
``create_server``, each accepted connection runs its factory and every callback
in a copy of it, and a client connection runs in a copy taken before its
factory.  A ``resume_reading()`` from a task then no longer moves the protocol
into the task's context.  Before 3.15, and for datagram transports and pipes on
3.15 too, each callback runs in a copy of the context current when it was
scheduled or its reader or writer registered.

Each scenario records what a context variable holds in each callback, and sets
it there, on the stdlib loop and on snakeloop; the records must be the same.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import os
import socket

import pytest
from _loopkit import assert_same, run_within, tls_contexts

GUARD = 15.0  # a hang guard, never a timing assertion

run = run_within(GUARD)

_WHERE: contextvars.ContextVar[str] = contextvars.ContextVar("where")


class _Seen:
    """What ``_WHERE`` held in each callback, by callback, in call order."""

    def __init__(self) -> None:
        self.by_callback: dict[str, list[str]] = {}

    def note(self, callback: str) -> None:
        self.by_callback.setdefault(callback, []).append(_WHERE.get("unset"))

    def note_and_set(self, callback: str) -> None:
        self.note(callback)
        _WHERE.set(callback)


# -- stream connections -----------------------------------------------------------------


def _serve_and_connect(loop: asyncio.AbstractEventLoop, tls: bool) -> object:
    """A server whose first connection pauses reading in ``data_received`` and resumes
    from a task that set the variable (python/cpython#140947), and a second connection
    that the client closes at once; the client pauses and resumes from its own task."""
    server_tls, client_tls = tls_contexts() if tls else (None, None)
    hostname = "localhost" if tls else None

    async def main() -> object:
        seen = _Seen()
        numbers = itertools.count(1)
        resumed = asyncio.Event()
        lost = [loop.create_future(), loop.create_future()]
        tasks: set[asyncio.Task[None]] = set()

        class Server(asyncio.Protocol):
            def __init__(self) -> None:
                self.n = next(numbers)
                self.received = b""
                self.stage = 0
                seen.note_and_set(f"server {self.n} factory")

            def connection_made(self, transport):
                self.transport = transport
                seen.note_and_set(f"server {self.n} connection_made")

            def data_received(self, data):
                # A seeded loop may cut a message into several reads: only the read
                # that completes one notes and sets the variable, so the record does
                # not depend on where the cuts fell.
                self.received += data
                if self.stage == 0 and self.received.startswith(b"first"):
                    self.stage, self.received = 1, self.received[len(b"first") :]
                    seen.note_and_set(f"server {self.n} data_received")
                    self.transport.pause_reading()
                    task = loop.create_task(self.resume())
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                elif self.stage == 1 and self.received.startswith(b"second"):
                    self.stage = 2
                    seen.note_and_set(f"server {self.n} data_received")
                    self.transport.write(b"reply")
                    self.transport.close()

            async def resume(self) -> None:
                _WHERE.set(f"server {self.n} task")
                await asyncio.sleep(0)
                self.transport.resume_reading()
                _WHERE.set(f"server {self.n} task, resumed")
                resumed.set()

            def eof_received(self):
                seen.note_and_set(f"server {self.n} eof_received")

            def connection_lost(self, exc):
                seen.note_and_set(f"server {self.n} connection_lost")
                lost[self.n - 1].set_result(None)

        eof = loop.create_future()
        clients_lost: list[asyncio.Future[None]] = []

        class Client(asyncio.Protocol):
            def __init__(self) -> None:
                self.reads = 0
                self.lost = loop.create_future()
                clients_lost.append(self.lost)
                seen.note_and_set("client factory")

            def connection_made(self, transport):
                seen.note_and_set("client connection_made")

            def data_received(self, data):
                self.reads += 1
                if self.reads == 1:  # the reply may come in several reads (seeded loops)
                    seen.note_and_set("client data_received")

            def eof_received(self):
                seen.note_and_set("client eof_received")
                if not eof.done():
                    eof.set_result(None)

            def connection_lost(self, exc):
                seen.note_and_set("client connection_lost")
                self.lost.set_result(None)

        # 3.15 keeps the context of create_server, before that the accepting runs
        # in the one of start_serving.
        _WHERE.set("create_server")
        server = await loop.create_server(
            Server, "127.0.0.1", 0, ssl=server_tls, start_serving=False
        )
        _WHERE.set("start_serving")
        await server.start_serving()
        _WHERE.set("main")
        addr = server.sockets[0].getsockname()
        transport, _ = await loop.create_connection(
            Client, *addr, ssl=client_tls, server_hostname=hostname
        )
        seen.note("main, after create_connection")
        transport.pause_reading()
        _WHERE.set("main, resuming")
        transport.resume_reading()
        _WHERE.set("main")
        transport.write(b"first")
        await resumed.wait()
        transport.write(b"second")
        await lost[0]
        # The first client's end of the server's close: before main closes it, on any
        # schedule.
        await eof
        second, _ = await loop.create_connection(
            Client, *addr, ssl=client_tls, server_hostname=hostname
        )
        _WHERE.set("main, closing")
        second.close()
        await lost[1]
        transport.close()
        server.close()
        await server.wait_closed()
        # The clients' connection_lost: over TLS, on a busy machine, the first one came
        # more than ten iterations after the server's close (a seeded run, in CI).
        await asyncio.gather(*clients_lost)
        seen.note("main, at the end")
        return seen.by_callback

    return run(loop, main())


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_stream_callbacks_run_in_asyncios_contexts(tls):
    assert_same(lambda loop: _serve_and_connect(loop, tls))


def _write_until_paused(loop: asyncio.AbstractEventLoop) -> object:
    """A write from a task that the kernel cannot take at once, then close(): the writer
    that drains the buffer calls resume_writing() and, once it is out, connection_lost."""

    async def main() -> object:
        seen = _Seen()
        made = loop.create_future()
        lost = loop.create_future()

        class Server(asyncio.Protocol):
            def connection_made(self, transport):
                self.transport = transport
                made.set_result(self)

            def pause_writing(self):
                seen.note_and_set("pause_writing")

            def resume_writing(self):
                seen.note_and_set("resume_writing")

            def connection_lost(self, exc):
                seen.note_and_set("connection_lost")
                lost.set_result(None)

        _WHERE.set("create_server")
        server = await loop.create_server(Server, "127.0.0.1", 0)
        _WHERE.set("main")
        client = socket.create_connection(server.sockets[0].getsockname())
        client.setblocking(False)
        try:
            protocol = await made

            async def write_and_close() -> None:
                _WHERE.set("writing task")
                # More than loopback's socket buffers take before the peer reads.
                protocol.transport.write(b"x" * (16 << 20))
                _WHERE.set("closing task")
                protocol.transport.close()

            await loop.create_task(write_and_close())
            while await loop.sock_recv(client, 1 << 20):
                pass
            await lost
        finally:
            client.close()
        server.close()
        await server.wait_closed()
        return seen.by_callback

    return run(loop, main())


def test_write_callbacks_run_in_asyncios_contexts():
    assert_same(_write_until_paused)


def _switch_to_a_buffered_protocol(loop: asyncio.AbstractEventLoop) -> object:
    """set_protocol() to a protocol of the other kind, from a task: asyncio keeps its
    reader (and the reader's context) and only changes what it calls."""

    async def main() -> object:
        seen = _Seen()
        made = loop.create_future()
        received = asyncio.Event()
        lost = loop.create_future()

        class First(asyncio.Protocol):
            def connection_made(self, transport):
                self.transport = transport
                made.set_result(self)

            def data_received(self, data):
                seen.note_and_set("data_received")
                received.set()

        class Second(asyncio.BufferedProtocol):
            def __init__(self) -> None:
                self.buffer = bytearray(100)

            def get_buffer(self, sizehint):
                seen.note_and_set("get_buffer")
                return self.buffer

            def buffer_updated(self, nbytes):
                seen.note_and_set("buffer_updated")
                received.set()

            def eof_received(self):
                seen.note_and_set("eof_received")

            def connection_lost(self, exc):
                seen.note_and_set("connection_lost")
                lost.set_result(None)

        _WHERE.set("create_server")
        server = await loop.create_server(First, "127.0.0.1", 0)
        _WHERE.set("main")
        client = socket.create_connection(server.sockets[0].getsockname())
        client.setblocking(False)
        try:
            first = await made
            await loop.sock_sendall(client, b"1")
            await received.wait()
            received.clear()

            async def switch() -> None:
                _WHERE.set("switching task")
                first.transport.set_protocol(Second())

            await loop.create_task(switch())
            await loop.sock_sendall(client, b"2")
            await received.wait()
        finally:
            client.close()
        await lost
        server.close()
        await server.wait_closed()
        return seen.by_callback

    return run(loop, main())


def test_set_protocol_keeps_the_readers_context_as_asyncio():
    assert_same(_switch_to_a_buffered_protocol)


# -- datagrams and pipes: no context of their own, on 3.15 too -------------------------------


def _datagrams_resumed_from_a_task(loop: asyncio.AbstractEventLoop) -> object:
    async def main() -> object:
        seen = _Seen()
        received = asyncio.Event()
        lost = loop.create_future()

        class Endpoint(asyncio.DatagramProtocol):
            def connection_made(self, transport):
                seen.note_and_set("connection_made")

            def datagram_received(self, data, addr):
                seen.note_and_set("datagram_received")
                received.set()

            def connection_lost(self, exc):
                seen.note_and_set("connection_lost")
                lost.set_result(None)

        _WHERE.set("create_datagram_endpoint")
        transport, _ = await loop.create_datagram_endpoint(Endpoint, local_addr=("127.0.0.1", 0))
        _WHERE.set("main")

        async def pause_and_resume() -> None:
            _WHERE.set("resuming task")
            transport.pause_reading()
            transport.resume_reading()

        await loop.create_task(pause_and_resume())
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
            peer.sendto(b"ping", transport.get_extra_info("sockname"))
            await received.wait()
        _WHERE.set("main, closing")
        transport.close()
        await lost
        return seen.by_callback

    return run(loop, main())


def test_datagram_callbacks_run_in_asyncios_contexts():
    assert_same(_datagrams_resumed_from_a_task)


def _pipe_resumed_from_a_task(loop: asyncio.AbstractEventLoop) -> object:
    async def main() -> object:
        seen = _Seen()
        received = asyncio.Event()
        lost = loop.create_future()

        class Reader(asyncio.Protocol):
            def connection_made(self, transport):
                seen.note_and_set("connection_made")

            def data_received(self, data):
                seen.note_and_set("data_received")
                received.set()

            def eof_received(self):
                seen.note_and_set("eof_received")

            def connection_lost(self, exc):
                seen.note_and_set("connection_lost")
                lost.set_result(None)

        rfd, wfd = os.pipe()
        try:
            _WHERE.set("connect_read_pipe")
            transport, _ = await loop.connect_read_pipe(Reader, os.fdopen(rfd, "rb", 0))
        except BaseException:
            os.close(rfd)
            os.close(wfd)
            raise
        _WHERE.set("main")

        async def pause_and_resume() -> None:
            _WHERE.set("resuming task")
            transport.pause_reading()
            transport.resume_reading()

        await loop.create_task(pause_and_resume())
        os.write(wfd, b"ping")
        await received.wait()
        _WHERE.set("main, closing the write end")
        os.close(wfd)
        await lost
        return seen.by_callback

    return run(loop, main())


def test_pipe_callbacks_run_in_asyncios_contexts():
    assert_same(_pipe_resumed_from_a_task)
