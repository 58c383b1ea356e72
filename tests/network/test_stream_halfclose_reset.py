"""Half-close and resets on stream transports (R-HC, R-RST), snakeloop and stdlib.

* R-HC-1: many clients; the server calls ``write_eof()`` twice, then
  ``close()``; every client reads the whole reply, then EOF.
* R-HC-2: after the peer's ``shutdown(SHUT_WR)``, ``eof_received()``
  returning true keeps the transport open for writing (1 MiB still
  arrives); returning false or None closes it with ``connection_lost(None)``.
* R-HC-3: a peer that overflows a 50-byte ``BufferedProtocol`` buffer and
  closes at once (EPOLLHUP with data pending): every byte, then EOF, then
  ``connection_lost(None)``.
* ``write_eof()`` sends FIN only after the buffered bytes; ``write()`` after
  it raises asyncio's ``RuntimeError``.
* R-RST-1: a peer that resets (``SO_LINGER`` 0) mid-transfer, in both
  directions: ``connection_lost`` exactly once with ``ConnectionResetError``
  (or None), nothing after it, the socket closed, no exception-handler call.
* R-RST-2: writing 10 MiB to a peer that has closed: the writes never raise,
  ``drain()`` raises ``ConnectionResetError``/``BrokenPipeError``, and
  ``connection_lost(exc)`` comes once.

The suite's leak guard fails any test that calls the loop's exception
handler, so "0 handler calls" (S-12) is checked everywhere.
"""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from _loopkit import PY312
from _streamkit import (
    StrictBufferedProtocol,
    StrictProtocol,
    drain_nonblocking,
    payload,
    run,
    set_linger_rst,
    stream_pair,
    tcp_pair,
)

pytestmark = pytest.mark.reliability


async def connect(loop, family, sock, factory):
    if family == "unix":
        return await loop.create_unix_connection(factory, sock=sock)
    return await loop.create_connection(factory, sock=sock)


async def read_until_eof(peer, sink, max_iterations=200_000):
    for _ in range(max_iterations):
        data, eof = drain_nonblocking(peer)
        sink += data
        if eof:
            return
        await asyncio.sleep(0)
    raise AssertionError("no EOF")


# -- R-HC-1 ---------------------------------------------------------------------------


def hc_1_round(loop, family, clients, sock_dir):
    reply = os.urandom(200_000)
    protocols = []

    class WriteEofTwice(StrictProtocol):
        def connection_made(self, transport):
            super().connection_made(transport)
            assert transport.can_write_eof()
            transport.write(reply)
            transport.write_eof()
            transport.write_eof()  # a second call is a no-op
            with pytest.raises(RuntimeError) as info:
                transport.write(b"late")
            self.late_write = str(info.value)
            transport.close()

    def factory():
        proto = WriteEofTwice(loop)
        protocols.append(proto)
        return proto

    async def client(addr):
        if family == "unix":
            reader, writer = await asyncio.open_unix_connection(addr)
        else:
            reader, writer = await asyncio.open_connection(*addr)
        try:
            return await reader.read()
        finally:
            writer.close()
            await writer.wait_closed()

    async def main():
        if family == "unix":
            addr = f"{sock_dir}/hc"
            server = await loop.create_unix_server(factory, addr)
        else:
            server = await loop.create_server(factory, "127.0.0.1", 0)
            addr = server.sockets[0].getsockname()
        try:
            got = await asyncio.gather(*(client(addr) for _ in range(clients)))
            await asyncio.gather(*(p.lost for p in protocols))
        finally:
            server.close()
            await server.wait_closed()
        assert got == [reply] * clients
        assert len(protocols) == clients
        for proto in protocols:
            assert proto.violations == []
            assert proto.late_write == "Cannot call write() after write_eof()"
            assert proto.events[-1] == ("lost", None)

    run(loop, main())


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_r_hc_1_write_eof_twice_then_close(any_loop, family, sock_dir):
    hc_1_round(any_loop, family, 50, sock_dir)


@pytest.mark.stress
@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_r_hc_1_write_eof_twice_then_close_full(any_loop, family, sock_dir):
    hc_1_round(any_loop, family, 100, sock_dir)


# -- R-HC-2 ------------------------------------------------------------------------------


@pytest.mark.parametrize("keep_open", [True, False, None])
@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_r_hc_2_eof_received_decides(any_loop, family, keep_open):
    ours, peer = stream_pair(family)
    peer.setblocking(False)
    late = os.urandom(1 << 20)

    class Decides(StrictProtocol):
        def keep_open(self):
            return keep_open

    async def main():
        tr, proto = await connect(any_loop, family, ours, lambda: Decides(any_loop))
        peer.sendall(b"request")
        peer.shutdown(socket.SHUT_WR)
        await proto.eof_seen
        assert proto.received == b"request"
        received = bytearray()
        if keep_open:
            assert not tr.is_closing()
            tr.write(late)  # still writable after the peer's EOF
            tr.write_eof()
            await read_until_eof(peer, received)
            assert received == late
            assert not proto.lost.done()  # our side is open until we close it
            tr.close()
        else:
            assert tr.is_closing()
        assert await proto.lost is None
        await read_until_eof(peer, received)
        assert received == (late if keep_open else b"")
        assert proto.violations == []
        assert proto.plain_events() == ["made", "data", "eof", ("lost", None)]

    try:
        run(any_loop, main())
    finally:
        peer.close()


# -- R-HC-3 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_r_hc_3_overflow_small_buffer_then_hangup(any_loop, family, rng):
    ours, peer = stream_pair(family)
    data = payload(rng, 100_000)  # fits in the kernel buffers set below
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    peer.settimeout(10)

    async def main():
        tr, proto = await connect(
            any_loop, family, ours, lambda: StrictBufferedProtocol(any_loop, lambda hint: 50)
        )
        # With reading paused, the whole payload and the hangup queue up, so
        # the transport wakes to data and EPOLLHUP at once.
        tr.pause_reading()
        peer.sendall(data)
        peer.close()
        await asyncio.sleep(0)
        tr.resume_reading()
        assert await proto.lost is None
        assert proto.received == data
        assert proto.get_buffer_calls >= len(data) // 50
        assert proto.events[-2:] == ["eof", ("lost", None)]
        assert proto.violations == []

    try:
        run(any_loop, main())
    finally:
        peer.close()


# -- write_eof with buffered data ----------------------------------------------------------


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_write_eof_after_buffered_data(any_loop, family, rng):
    ours, peer = stream_pair(family)
    peer.setblocking(False)
    data = payload(rng, 4 << 20)

    async def main():
        tr, proto = await connect(any_loop, family, ours, lambda: StrictProtocol(any_loop))
        tr.write(data)
        assert tr.get_write_buffer_size() > 0
        tr.write_eof()
        assert not tr.is_closing()
        with pytest.raises(RuntimeError) as info:
            tr.write(b"x")
        assert str(info.value) == "Cannot call write() after write_eof()"
        with pytest.raises(RuntimeError) as info:
            tr.writelines([b"x"])
        expected = "writelines" if PY312 else "write"
        assert str(info.value) == f"Cannot call {expected}() after write_eof()"
        received = bytearray()
        await read_until_eof(peer, received)
        assert received == data
        # Our read side is still open: the peer can answer after our FIN.
        peer.sendall(b"answer")
        peer.shutdown(socket.SHUT_WR)
        await proto.lost
        assert proto.received == b"answer"
        assert proto.events[-2:] == ["eof", ("lost", None)]
        assert proto.violations == []

    try:
        run(any_loop, main())
    finally:
        peer.close()


# -- R-RST-1 --------------------------------------------------------------------------------


class Streamer(StrictProtocol):
    """Server side: keeps sending while the peer sends; records what arrives."""

    block = b"s" * (64 * 1024)

    def connection_made(self, transport):
        super().connection_made(transport)
        self.sock = transport.get_extra_info("socket")
        self._fill()

    def resume_writing(self):
        super().resume_writing()
        self._fill()

    def _fill(self):
        while not self.paused and not self.transport.is_closing():
            self.transport.write(self.block)


async def rst_round(loop, count, rng):
    protocols = []

    def factory():
        proto = Streamer(loop)
        protocols.append(proto)
        return proto

    server = await loop.create_server(factory, "127.0.0.1", 0)
    addr = server.sockets[0].getsockname()
    sent = []

    async def one(n):
        sock = socket.socket()
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, addr)
            data = os.urandom(n)
            view = memoryview(data)
            pos = 0
            while pos < n:
                try:
                    pos += sock.send(view[pos:])
                except BlockingIOError:
                    pass
                try:
                    sock.recv(1 << 20)  # keep the server's writes moving
                except BlockingIOError:
                    pass
                await asyncio.sleep(0)
            sent.append(data)
            set_linger_rst(sock)
        finally:
            sock.close()

    try:
        sizes = [rng.randint(0, 1 << 20) for _ in range(count)]
        for start in range(0, count, 10):
            await asyncio.gather(*(one(n) for n in sizes[start : start + 10]))
        await asyncio.wait_for(asyncio.gather(*(p.lost for p in protocols)), 30)
        await asyncio.sleep(0)  # anything late would be delivered here
    finally:
        server.close()
        await server.wait_closed()
    assert len(protocols) == count
    for proto in protocols:
        assert proto.violations == []
        exc = proto.lost.result()
        assert exc is None or isinstance(exc, (ConnectionResetError, BrokenPipeError)), exc
        assert proto.events[-1][0] == "lost"
        assert proto.sock.fileno() == -1
        assert proto.transport.get_write_buffer_size() == 0
        # What arrived before the reset is a prefix of what one client sent, however
        # short (reads may stop anywhere, so it can be shorter than any fixed key).
        received = bytes(proto.received)
        assert any(data.startswith(received) for data in sent), len(received)


def test_r_rst_1_reset_mid_transfer(any_loop, rng):
    run(any_loop, rst_round(any_loop, 100, rng))


@pytest.mark.stress
def test_r_rst_1_reset_mid_transfer_full(any_loop, rng):
    run(any_loop, rst_round(any_loop, 200, rng))


# -- R-RST-2 -----------------------------------------------------------------------------------


def test_r_rst_2_drain_after_peer_closed(any_loop):
    async def main():
        async def handler(reader, writer):
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
            assert await reader.read() == b""  # the peer is gone
            block = b"p" * (64 * 1024)
            with pytest.raises((ConnectionResetError, BrokenPipeError)):
                for _ in range(160):  # 10 MiB
                    writer.write(block)  # never raises
                    await writer.drain()
            for _ in range(10):
                writer.write(block)  # still silent after the loss
            assert writer.transport.get_write_buffer_size() == 0
            writer.close()
            with pytest.raises((ConnectionResetError, BrokenPipeError)):
                await writer.wait_closed()
        finally:
            server.close()
            await server.wait_closed()

    run(any_loop, main())


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_r_rst_2_protocol_sees_the_error_once(any_loop, family):
    ours, peer = stream_pair(family)

    async def main():
        tr, proto = await connect(any_loop, family, ours, lambda: StrictProtocol(any_loop))
        peer.close()
        block = b"p" * (64 * 1024)
        for _ in range(160):
            tr.write(block)  # never raises, even once the loss is known
            await asyncio.sleep(0)
        exc = await proto.lost
        assert isinstance(exc, (ConnectionResetError, BrokenPipeError)) or (
            exc is None and proto.eof
        ), exc
        await asyncio.sleep(0)
        assert proto.violations == []
        assert [e for e in proto.events if isinstance(e, tuple) and e[0] == "lost"] == [
            ("lost", exc)
        ]
        assert tr.get_write_buffer_size() == 0

    run(any_loop, main())


def test_r_rst_abort_with_unread_data_resets_the_peer(any_loop):
    """abort() with bytes unread: the peer sees a reset, we see connection_lost(None)."""
    ours, peer = tcp_pair()

    async def main():
        tr, proto = await any_loop.create_connection(lambda: StrictProtocol(any_loop), sock=ours)
        tr.pause_reading()
        peer.sendall(b"never read")
        await asyncio.sleep(0)
        tr.abort()
        assert await proto.lost is None
        peer.settimeout(10)
        with pytest.raises(ConnectionResetError):
            while peer.recv(1024):
                pass
        assert proto.violations == []
        assert proto.events == ["made", ("lost", None)]

    try:
        run(any_loop, main())
    finally:
        peer.close()
