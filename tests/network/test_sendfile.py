"""``loop.sock_sendfile`` and ``loop.sendfile``, on snakeloop and on the stdlib loop.

Both the zero-copy path (``os.sendfile``) and the fallbacks (read and
send) are exercised: the socket fallback by files without a descriptor,
the transport fallback by making ``_sendfile_native`` unavailable, the way
CPython's own tests force it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import os
import socket
import threading

import pytest
from _loopkit import Raised, closing_socket_pair, differential, run_within, stdlib_xfail

GUARD = 10.0  # a hang guard, never a timing assertion
DATA = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4


run = run_within(GUARD)

# gh-150107 (3.14.x, 3.15): asyncio's sendfile reads from ``offset`` even when
# it is 0 and the file is positioned elsewhere (the fallbacks used to seek
# only to a non-zero offset), and leaves the file just after the last byte
# sent even when none was (the native path used to seek only after sending).
# snakeloop does both on every Python; the stdlib loop of a Python without
# the fix is expected to fail these tests.  Whether it has the fix is read
# off asyncio's own helpers.
_STDLIB_FALLBACK_SKIPS_OFFSET_0 = "if offset:" in inspect.getsource(
    asyncio.base_events.BaseEventLoop._sock_sendfile_fallback
)
_STDLIB_NATIVE_SEEKS_ONLY_AFTER_SENDING = (
    "total_sent"
    in inspect.signature(
        asyncio.unix_events._UnixSelectorEventLoop._sock_sendfile_update_filepos
    ).parameters
)


async def read_all(loop, sock):
    got = bytearray()
    while True:
        data = await loop.sock_recv(sock, 65536)
        if not data:
            return bytes(got)
        got += data


async def readable(loop, sock):
    ready = loop.create_future()
    loop.add_reader(sock, ready.set_result, None)
    try:
        await ready
    finally:
        loop.remove_reader(sock)


async def sendfile_and_read(loop, sender, receiver, *args, **kwargs):
    reader = asyncio.ensure_future(read_all(loop, receiver))
    try:
        sent = await loop.sock_sendfile(sender, *args, **kwargs)
    finally:
        sender.shutdown(socket.SHUT_WR)
    return sent, await reader


# -- sock_sendfile --------------------------------------------------------------


def test_sock_sendfile_whole_file(any_loop, data_file):
    with closing_socket_pair() as (a, b):
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        sent, got = run(any_loop, sendfile_and_read(any_loop, a, b, data_file))
        assert sent == len(DATA)
        assert got == DATA
        assert data_file.tell() == len(DATA)
        assert not any_loop.remove_writer(a.fileno())


def test_sock_sendfile_offset_and_count(any_loop, data_file):
    with closing_socket_pair() as (a, b):
        sent, got = run(any_loop, sendfile_and_read(any_loop, a, b, data_file, 1000, 70000))
        assert sent == 70000
        assert got == DATA[1000:71000]
        assert data_file.tell() == 71000


def test_sock_sendfile_count_past_the_end(any_loop, data_file):
    with closing_socket_pair() as (a, b):
        start = len(DATA) - 10
        sent, got = run(any_loop, sendfile_and_read(any_loop, a, b, data_file, start, 100))
        assert (sent, got) == (10, DATA[start:])
        assert data_file.tell() == len(DATA)


def test_sock_sendfile_empty_file(any_loop, tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    with open(path, "rb") as f, closing_socket_pair() as (a, b):
        sent, got = run(any_loop, sendfile_and_read(any_loop, a, b, f))
        assert (sent, got, f.tell()) == (0, b"", 0)


def test_sock_sendfile_mixed_with_sendall(any_loop, data_file):
    with closing_socket_pair() as (a, b):

        async def main():
            reader = asyncio.ensure_future(read_all(any_loop, b))
            await any_loop.sock_sendall(a, b"head:")
            sent = await any_loop.sock_sendfile(a, data_file, 0, 5000)
            await any_loop.sock_sendall(a, b":tail")
            a.shutdown(socket.SHUT_WR)
            return sent, await reader

        assert run(any_loop, main()) == (5000, b"head:" + DATA[:5000] + b":tail")


def test_sock_sendfile_fallback_for_a_file_without_fd(any_loop):
    f = io.BytesIO(DATA)
    with closing_socket_pair() as (a, b):
        sent, got = run(any_loop, sendfile_and_read(any_loop, a, b, f, 10, 300_000))
        assert (sent, got) == (300_000, DATA[10:300_010])
        assert f.tell() == 300_010


@stdlib_xfail(
    condition=_STDLIB_FALLBACK_SKIPS_OFFSET_0,
    reason="asyncio before gh-150107 reads from the file's position at offset 0",
    strict=True,
)
def test_sock_sendfile_fallback_reads_from_offset_0_wherever_the_file_is(any_loop):
    f = io.BytesIO(DATA)
    f.seek(0, os.SEEK_END)
    with closing_socket_pair() as (a, b):
        sent, got = run(any_loop, sendfile_and_read(any_loop, a, b, f, 0))
        assert (sent, got) == (len(DATA), DATA)
        assert f.tell() == len(DATA)


def test_sock_sendfile_no_fallback_raises(any_loop):
    f = io.BytesIO(DATA)
    with closing_socket_pair() as (a, b):
        with pytest.raises(asyncio.SendfileNotAvailableError, match="not a regular file"):
            run(any_loop, any_loop.sock_sendfile(a, f, fallback=False))
        assert f.tell() == 0


def test_sock_sendfile_peer_closed_midway(any_loop, data_file):
    with closing_socket_pair() as (a, b):
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)

        async def main():
            task = asyncio.ensure_future(any_loop.sock_sendfile(a, data_file))
            # snakeloop's first bytes go out from its worker thread, a little
            # later than asyncio's: wait for them.
            await any_loop.sock_recv(b, 1000)
            b.close()
            return await task

        with pytest.raises(ConnectionError):
            run(any_loop, main())
        assert 0 < data_file.tell() < len(DATA)
        assert not any_loop.remove_writer(a.fileno())


def test_cancelled_sock_sendfile_leaves_no_writer(any_loop, data_file):
    with closing_socket_pair() as (a, b):
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)

        async def main():
            task = asyncio.ensure_future(any_loop.sock_sendfile(a, data_file))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        run(any_loop, main())
        assert not any_loop.remove_writer(a.fileno())


def test_cancelled_sock_sendfile_updates_the_file_position(loop, data_file):
    """snakeloop sets the position after a cancel too (asyncio only on error/return)."""
    with closing_socket_pair() as (a, b):
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)

        async def main():
            task = asyncio.ensure_future(loop.sock_sendfile(a, data_file))
            await readable(loop, b)  # something went out before the cancel
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        run(loop, main())
        b.shutdown(socket.SHUT_WR)
        a.close()
        received = 0
        b.setblocking(True)
        while chunk := b.recv(65536):
            received += len(chunk)
        assert data_file.tell() == received > 0


@contextlib.contextmanager
def held_sendfile(monkeypatch):
    """os.sendfile that waits for ``go`` once it has started (sets ``started``)."""
    real = os.sendfile
    started = threading.Event()
    go = threading.Event()

    def sendfile(*args):
        started.set()
        go.wait(GUARD)
        return real(*args)

    monkeypatch.setattr(os, "sendfile", sendfile)
    try:
        yield started, go
    finally:
        go.set()


def drain(sock):
    sock.setblocking(True)
    received = 0
    while chunk := sock.recv(65536):
        received += len(chunk)
    return received


def test_cancel_during_a_worker_sendfile_counts_its_bytes(loop, data_file, monkeypatch):
    """snakeloop's os.sendfile runs in a worker: a cancel waits for it to return."""
    with closing_socket_pair() as (a, b), held_sendfile(monkeypatch) as (started, go):

        async def main():
            task = asyncio.ensure_future(loop.sock_sendfile(a, data_file))
            await loop.run_in_executor(None, started.wait, GUARD)
            task.cancel()
            await asyncio.sleep(0.01)
            assert not task.done()  # still waiting for the call under way
            go.set()
            with pytest.raises(asyncio.CancelledError):
                await task

        run(loop, main())
        a.shutdown(socket.SHUT_WR)
        assert data_file.tell() == drain(b) > 0


def test_cancel_before_a_worker_sendfile_starts_sends_nothing(loop, tmp_path, monkeypatch):
    (tmp_path / "f").write_bytes(DATA)
    with (
        closing_socket_pair() as (a, b),
        closing_socket_pair() as (c, d),
        open(tmp_path / "f", "rb") as first,
        open(tmp_path / "f", "rb") as second,
        held_sendfile(monkeypatch) as (started, go),
    ):

        async def main():
            # The first call holds the worker; the second waits its turn.
            busy = asyncio.ensure_future(loop.sock_sendfile(a, first))
            await loop.run_in_executor(None, started.wait, GUARD)
            queued = asyncio.ensure_future(loop.sock_sendfile(c, second))
            await asyncio.sleep(0.01)
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
            go.set()
            busy.cancel()
            with pytest.raises(asyncio.CancelledError):
                await busy

        run(loop, main())
        c.shutdown(socket.SHUT_WR)
        assert second.tell() == drain(d) == 0


def _argument_cases(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("hello")
    return {
        "text file": (socket.SOCK_STREAM, "text", 0, None),
        "datagram socket": (socket.SOCK_DGRAM, "bin", 0, None),
        "count zero": (socket.SOCK_STREAM, "bin", 0, 0),
        "count negative": (socket.SOCK_STREAM, "bin", 0, -1),
        "count float": (socket.SOCK_STREAM, "bin", 0, 1.5),
        "offset negative": (socket.SOCK_STREAM, "bin", -1, None),
        "offset str": (socket.SOCK_STREAM, "bin", "1", None),
    }


@pytest.mark.parametrize(
    "case",
    [
        "text file",
        "datagram socket",
        "count zero",
        "count negative",
        "count float",
        "offset negative",
        "offset str",
    ],
)
def test_sock_sendfile_argument_errors_match_asyncio(tmp_path, case):
    sock_type, mode, offset, count = _argument_cases(tmp_path)[case]
    (tmp_path / "bin").write_bytes(b"data")
    (tmp_path / "text").write_text("data")

    def scenario(loop):
        with socket.socket(socket.AF_INET, sock_type) as sock:
            sock.setblocking(False)
            opener = "rb" if mode == "bin" else "r"
            with open(tmp_path / mode, opener) as f:
                loop.run_until_complete(loop.sock_sendfile(sock, f, offset, count))

    ref, got = differential(scenario)
    assert got == ref
    assert isinstance(ref, Raised)


def test_sock_sendfile_debug_refuses_blocking_socket(tmp_path):
    (tmp_path / "f").write_bytes(b"data")

    def scenario(loop):
        loop.set_debug(True)
        with socket.socket() as sock, open(tmp_path / "f", "rb") as f:
            loop.run_until_complete(loop.sock_sendfile(sock, f))

    ref, got = differential(scenario)
    assert got == ref
    assert ref.message == "the socket must be non-blocking"


# -- loop.sendfile over a transport ----------------------------------------------


class Collector(asyncio.Protocol):
    def __init__(self, loop):
        self.data = bytearray()
        self.done = loop.create_future()
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.data += data

    def connection_lost(self, exc):
        if not self.done.done():
            self.done.set_result(exc)


class Client(asyncio.Protocol):
    def __init__(self, loop):
        self.done = loop.create_future()
        self.events = []

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.events.append(("data", data))

    def pause_writing(self):
        self.events.append("pause")

    def resume_writing(self):
        self.events.append("resume")

    def connection_lost(self, exc):
        self.events.append(("lost", exc))
        self.done.set_result(exc)


@contextlib.asynccontextmanager
async def connection(loop):
    server_proto = Collector(loop)
    server = await loop.create_server(lambda: server_proto, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, client = await loop.create_connection(lambda: Client(loop), "127.0.0.1", port)
    try:
        yield transport, client, server_proto
    finally:
        transport.close()
        await client.done
        if server_proto.transport is not None:
            server_proto.transport.close()
            await server_proto.done
        server.close()
        await server.wait_closed()


def _force_fallback(loop):
    async def no_native(transp, file, offset, count):
        raise asyncio.SendfileNotAvailableError("sendfile syscall is not supported")

    loop._sendfile_native = no_native


@pytest.mark.parametrize("path", ["native", "fallback"])
def test_sendfile_through_transport(any_loop, data_file, path):
    if path == "fallback":
        _force_fallback(any_loop)

    async def main():
        async with connection(any_loop) as (transport, client, server):
            transport.write(b"PREFIX")
            sent = await any_loop.sendfile(transport, data_file, 100, 500_000)
            transport.write(b"SUFFIX")
            assert transport.get_protocol() is client
            transport.close()
            await server.done
            return sent, bytes(server.data)

    sent, got = run(any_loop, main())
    assert sent == 500_000
    assert got == b"PREFIX" + DATA[100:500_100] + b"SUFFIX"
    assert data_file.tell() == 500_100


@pytest.mark.parametrize("path", ["native", "fallback"])
def test_sendfile_whole_file_with_small_buffers(any_loop, data_file, path):
    if path == "fallback":
        _force_fallback(any_loop)

    async def main():
        async with connection(any_loop) as (transport, client, server):
            sock = transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            transport.set_write_buffer_limits(high=4096)
            sent = await any_loop.sendfile(transport, data_file)
            transport.close()
            await server.done
            return sent, bytes(server.data), client.events

    sent, got, events = run(any_loop, main())
    assert sent == len(DATA) and got == DATA
    assert data_file.tell() == len(DATA)
    # pause/resume during sendfile go to the stand-in protocol, never here.
    assert [e for e in events if e in ("pause", "resume")] == []


@pytest.mark.parametrize("offset", [0, len(DATA) // 2, len(DATA)])
@pytest.mark.parametrize("path", ["native", "fallback"])
def test_sendfile_sends_from_the_offset_and_leaves_the_file_at_its_end(
    request, loop_kind, any_loop, data_file, path, offset
):
    # Wherever the file was positioned before, and even when nothing is left
    # to send (offset at the end), as asyncio's sendfile does since gh-150107.
    # Before it, asyncio's fallback read from the position at offset 0, and
    # its native path left the position alone when it sent nothing.
    if path == "fallback":
        stale = _STDLIB_FALLBACK_SKIPS_OFFSET_0 and offset == 0
    else:
        stale = _STDLIB_NATIVE_SEEKS_ONLY_AFTER_SENDING and offset == len(DATA)
    if stale and loop_kind == "stdlib":
        request.applymarker(
            pytest.mark.xfail(reason="asyncio before gh-150107 (see above)", strict=True)
        )
    if path == "fallback":
        _force_fallback(any_loop)
    data_file.seek(123)

    async def main():
        async with connection(any_loop) as (transport, client, server):
            sent = await any_loop.sendfile(transport, data_file, offset)
            transport.close()
            await server.done
            return sent, bytes(server.data)

    sent, got = run(any_loop, main())
    assert (sent, got) == (len(DATA) - offset, DATA[offset:])
    assert data_file.tell() == len(DATA)


def test_sendfile_write_is_refused_while_native_sendfile_runs(any_loop, data_file):
    async def main():
        async with connection(any_loop) as (transport, client, server):
            task = asyncio.ensure_future(any_loop.sendfile(transport, data_file))
            await asyncio.sleep(0)
            with pytest.raises(RuntimeError, match="sendfile is in progress"):
                transport.write(b"data")
            sent = await task
            transport.write(b"after")
            transport.close()
            await server.done
            return sent, bytes(server.data)

    assert run(any_loop, main()) == (len(DATA), DATA + b"after")


def test_sendfile_keeps_the_transport_reading(any_loop, data_file):
    async def main():
        async with connection(any_loop) as (transport, client, server):
            await any_loop.sendfile(transport, data_file, 0, 1000)
            assert transport.is_reading()
            server.transport.write(b"reply")
            # The reply may come in several data_received calls (short reads are legal).
            while sum(len(event[1]) for event in client.events if event[0] == "data") < 5:
                await asyncio.sleep(0)
            return list(client.events)

    events = run(any_loop, main())
    assert all(event[0] == "data" for event in events), events
    assert b"".join(event[1] for event in events) == b"reply"


def test_sendfile_on_closing_transport(any_loop, data_file):
    async def main():
        async with connection(any_loop) as (transport, client, server):
            transport.close()
            with pytest.raises(RuntimeError, match="^Transport is closing$"):
                await any_loop.sendfile(transport, data_file)

    run(any_loop, main())
    assert data_file.tell() == 0


def test_sendfile_not_supported_for_datagram_transport(any_loop, data_file):
    async def main():
        transport, _ = await any_loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, family=socket.AF_INET
        )
        try:
            with pytest.raises(RuntimeError, match="sendfile is not supported for transport"):
                await any_loop.sendfile(transport, data_file)
        finally:
            transport.close()
            await asyncio.sleep(0)

    run(any_loop, main())


def test_sendfile_fallback_disabled_for_fallback_transport(any_loop):
    from asyncio import constants

    class FakeTransport:
        _sendfile_compatible = constants._SendfileMode.FALLBACK

        def is_closing(self):
            return False

        def __repr__(self):
            return "<FakeTransport>"

    with pytest.raises(RuntimeError) as info:
        run(any_loop, any_loop.sendfile(FakeTransport(), None, fallback=False))
    assert str(info.value) == (
        "fallback is disabled and native sendfile is not supported for transport <FakeTransport>"
    )


def test_sendfile_native_unavailable_without_fallback(any_loop, data_file):
    _force_fallback(any_loop)

    async def main():
        async with connection(any_loop) as (transport, client, server):
            with pytest.raises(asyncio.SendfileNotAvailableError):
                await any_loop.sendfile(transport, data_file, fallback=False)

    run(any_loop, main())
    assert data_file.tell() == 0


@pytest.mark.parametrize("path", ["native", "fallback"])
def test_sendfile_peer_closes_in_the_middle(any_loop, data_file, path):
    if path == "fallback":
        _force_fallback(any_loop)

    async def main():
        server_done = any_loop.create_future()

        class Closer(asyncio.Protocol):
            def connection_made(self, transport):
                self.transport = transport
                transport.get_extra_info("socket").setsockopt(
                    socket.SOL_SOCKET, socket.SO_RCVBUF, 4096
                )

            def data_received(self, data):
                self.transport.close()

            def connection_lost(self, exc):
                server_done.set_result(None)

        server = await any_loop.create_server(Closer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport, client = await any_loop.create_connection(
            lambda: Client(any_loop), "127.0.0.1", port
        )
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        transport.set_write_buffer_limits(high=4096)
        try:
            with pytest.raises(ConnectionError):
                await any_loop.sendfile(transport, data_file)
        finally:
            transport.close()
            await client.done
            await server_done
            server.close()
            await server.wait_closed()

    run(any_loop, main())
    assert 0 < data_file.tell() < len(DATA)


def test_second_sendfile_on_a_busy_transport_fails_and_spares_the_first(any_loop, data_file):
    async def main():
        async with connection(any_loop) as (transport, client, server):
            first = asyncio.ensure_future(any_loop.sendfile(transport, data_file))
            await asyncio.sleep(0)
            with pytest.raises((RuntimeError, KeyError)):
                await any_loop.sendfile(transport, data_file)
            sent = await first
            transport.close()
            await server.done
            return sent, len(server.data)

    assert run(any_loop, main()) == (len(DATA), len(DATA))
