"""Stream flow control (R-FC-1 to 6), on snakeloop and the stdlib loop.

* R-FC-1: the default limits are (16 KiB, 64 KiB); one big write to a peer
  that does not read gives exactly one ``pause_writing`` and, once drained,
  exactly one ``resume_writing`` at 16 KiB or less; pause and resume strictly
  alternate over many cycles; ``get_write_buffer_size`` counts every byte the
  kernel did not take; bad limits raise ``ValueError`` with asyncio's text.
* R-FC-2: with ``StreamWriter.drain()`` the buffer never holds more than the
  high-water mark plus one chunk.
* R-FC-3: ``pause_reading()`` stops ``data_received`` (also when called from
  ``connection_made``), ``resume_reading()`` delivers everything in order,
  both are idempotent, and ``is_reading()`` follows them.
* R-FC-4: a flood into a ``StreamReader`` nobody reads is held back by the
  transport: memory stays bounded, and everything arrives once read.
* R-FC-5: writes after a peer reset are dropped: the buffer stays empty and
  the warnings follow asyncio's ``LOG_THRESHOLD_FOR_CONNLOST_WRITES`` rule.
* R-FC-6: ``resume_writing`` that writes to *another* transport, with 1 KiB
  socket buffers, runs to completion.

"Time" here is loop iterations, not seconds: the peer sockets are driven
from the test, so every check is about the order of events.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket

import _upstream
import pytest
from _loopkit import rss, stdlib_xfail
from _streamkit import (
    StrictBufferedProtocol,
    StrictProtocol,
    drain_nonblocking,
    run,
    set_linger_rst,
    stream_pair,
    tcp_pair,
)

pytestmark = pytest.mark.reliability

HIGH, LOW = 65536, 16384


async def connect(loop, family, sock, factory=StrictProtocol):
    if family == "unix":
        return await loop.create_unix_connection(factory, sock=sock)
    return await loop.create_connection(factory, sock=sock)


async def iterations(n):
    for _ in range(n):
        await asyncio.sleep(0)


async def drain_peer(peer, transport, received, max_iterations=100_000):
    """Read from the peer until the transport's buffer is empty."""
    for _ in range(max_iterations):
        data, _ = drain_nonblocking(peer)
        received += data
        if transport.get_write_buffer_size() == 0 and not data:
            return
        await asyncio.sleep(0)
    raise AssertionError("the write buffer never drained")


# -- R-FC-1 ------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_r_fc_1_one_pause_one_resume(any_loop, family):
    ours, peer = stream_pair(family)
    peer.setblocking(False)
    data = os.urandom(4 << 20)

    async def main():
        tr, proto = await connect(any_loop, family, ours)
        assert tr.get_write_buffer_limits() == (LOW, HIGH)
        assert tr.get_write_buffer_size() == 0
        tr.write(data)
        assert proto.flow_events() == ["pause"]
        _, size_at_pause = proto.events[-1]
        assert HIGH < size_at_pause == tr.get_write_buffer_size() < len(data)
        # The buffer is not empty, so later writes are not tried at once:
        # each adds exactly its length, and no second pause comes.
        tr.write(b"y" * 1000)
        tr.write(bytearray(b"z" * 24))
        assert tr.get_write_buffer_size() == size_at_pause + 1024
        await iterations(20)  # the peer is not reading: nothing moves
        assert proto.flow_events() == ["pause"]
        received = bytearray()
        await drain_peer(peer, tr, received)
        assert proto.flow_events() == ["pause", "resume"]
        _, size_at_resume = proto.events[-1]
        assert size_at_resume <= LOW
        tr.close()
        await proto.lost
        rest, eof = drain_nonblocking(peer)
        received += rest
        assert eof
        assert bytes(received) == data + b"y" * 1000 + b"z" * 24
        assert proto.violations == []
        assert proto.flow_events() == ["pause", "resume"]
        assert tr.get_write_buffer_size() == 0

    try:
        run(any_loop, main())
    finally:
        peer.close()


def test_r_fc_1_alternation_over_many_cycles(any_loop):
    """A writer that refills on every resume_writing; a peer reading in small bites."""
    # A Unix socketpair: its capacity is the sender's SO_SNDBUF, with none of
    # TCP's window and delayed-ACK timing in the way.
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    chunk = os.urandom(200_000)
    rounds = 40

    class Refill(StrictProtocol):
        def __init__(self, loop):
            super().__init__(loop)
            self.written = 0

        def resume_writing(self):
            super().resume_writing()
            if self.written < rounds:
                self.written += 1
                self.transport.write(chunk)

    async def main():
        tr, proto = await any_loop.create_unix_connection(lambda: Refill(any_loop), sock=ours)
        proto.written = 1
        tr.write(chunk)
        received = bytearray()
        for _ in range(200_000):
            try:
                received += peer.recv(16384)
            except BlockingIOError:
                pass
            if len(received) == rounds * len(chunk):
                break
            await asyncio.sleep(0)
        tr.close()
        await proto.lost
        assert proto.violations == []
        assert received == chunk * rounds
        events = proto.events[1:-1]
        assert [e[0] for e in events] == ["pause", "resume"] * rounds
        for kind, size in events:
            assert size > HIGH if kind == "pause" else size <= LOW

    try:
        run(any_loop, main())
    finally:
        peer.close()


def test_r_fc_1_limits_and_their_validation(any_loop):
    ours, peer = tcp_pair()
    peer.setblocking(False)

    async def main():
        tr, proto = await any_loop.create_connection(StrictProtocol, sock=ours)
        assert tr.get_write_buffer_limits() == (LOW, HIGH)
        tr.set_write_buffer_limits(high=1000)
        assert tr.get_write_buffer_limits() == (250, 1000)
        tr.set_write_buffer_limits(low=100)
        assert tr.get_write_buffer_limits() == (100, 400)
        tr.set_write_buffer_limits(high=100, low=10)
        assert tr.get_write_buffer_limits() == (10, 100)
        tr.set_write_buffer_limits()
        assert tr.get_write_buffer_limits() == (LOW, HIGH)
        for kwargs, message in [
            ({"high": 0, "low": 1}, "high (0) must be >= low (1) must be >= 0"),
            ({"low": -1}, "high (-4) must be >= low (-1) must be >= 0"),
            ({"high": 10, "low": 20}, "high (10) must be >= low (20) must be >= 0"),
        ]:
            with pytest.raises(ValueError) as info:
                tr.set_write_buffer_limits(**kwargs)
            assert str(info.value) == message
            assert tr.get_write_buffer_limits() == (LOW, HIGH)

        # Fill the kernel so that writes stay in the transport's buffer.
        filler = b"\0" * (1 << 20)
        while not proto.paused:
            tr.write(filler)
        assert proto.flow_events() == ["pause"]
        # Lowering the limits below what is buffered pauses at once (once).
        size = tr.get_write_buffer_size()
        tr.set_write_buffer_limits(high=size + 10)  # raising: nothing happens
        assert proto.flow_events() == ["pause"]
        tr.set_write_buffer_limits(high=0)
        assert proto.flow_events() == ["pause"]  # already paused: no second call
        received = bytearray()
        await drain_peer(peer, tr, received)
        # With high=0, the protocol resumes only once the buffer is empty.
        assert proto.flow_events() == ["pause", "resume"]
        assert proto.events[-1] == ("resume", 0)
        tr.write(b"x")  # taken by the kernel at once: no pause
        assert proto.flow_events() == ["pause", "resume"]
        tr.close()
        await proto.lost
        assert proto.violations == []

    try:
        run(any_loop, main())
    finally:
        peer.close()


def _stdlib_writelines_pauses():
    import asyncio.selector_events as se

    writelines = getattr(se._SelectorSocketTransport, "writelines", None)
    if writelines is None or writelines.__qualname__.startswith("WriteTransport"):
        return True  # 3.11: the base class joins and calls write()
    return "_maybe_pause_protocol" in inspect.getsource(writelines)


@stdlib_xfail(
    not _stdlib_writelines_pauses(),
    strict=True,
    reason="python/cpython#127655: writelines() never pauses the protocol",
)
def test_r_fc_1_writelines_pauses_too(any_loop):
    ours, peer = tcp_pair()
    peer.setblocking(False)

    async def main():
        tr, proto = await any_loop.create_connection(StrictProtocol, sock=ours)
        block = b"\1" * (1 << 20)
        tr.writelines([block] * 8)
        assert tr.get_write_buffer_size() > HIGH
        paused = proto.flow_events()
        received = bytearray()
        await drain_peer(peer, tr, received)
        tr.close()
        await proto.lost
        assert received == block * 8
        assert proto.violations == []
        assert paused == ["pause"]
        assert proto.flow_events() == ["pause", "resume"]

    try:
        run(any_loop, main())
    finally:
        peer.close()


# -- R-FC-2 --------------------------------------------------------------------------


def test_r_fc_2_drain_bounds_the_buffer(any_loop):
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    chunk = 64 * 1024
    writes = 200
    data = os.urandom(chunk * writes)

    async def main():
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        received = bytearray()
        done = asyncio.Event()

        async def slow_peer():
            # Reads 16 KiB per iteration while the writer offers 64 KiB.
            while not done.is_set() or len(received) < len(data):
                try:
                    received.extend(peer.recv(16 * 1024))
                except BlockingIOError:
                    pass
                await asyncio.sleep(0)

        reading = asyncio.ensure_future(slow_peer())
        peak = 0
        view = memoryview(data)
        for i in range(writes):
            writer.write(view[i * chunk : (i + 1) * chunk])
            peak = max(peak, writer.transport.get_write_buffer_size())
            await writer.drain()
        done.set()
        await reading
        writer.close()
        await writer.wait_closed()
        assert received == data
        assert peak > HIGH, "the writer never had to wait: the test proved nothing"
        assert peak <= HIGH + chunk

    try:
        run(any_loop, main())
    finally:
        peer.close()


# -- R-FC-3 ---------------------------------------------------------------------------


@pytest.mark.parametrize("buffered", [False, True], ids=["protocol", "buffered"])
@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_r_fc_3_pause_and_resume_reading(any_loop, family, buffered):
    ours, peer = stream_pair(family)
    peer.setblocking(False)
    data = os.urandom(1 << 20)
    factory = (
        (lambda: StrictBufferedProtocol(any_loop, lambda hint: 3000))
        if buffered
        else (lambda: StrictProtocol(any_loop))
    )

    async def main():
        tr, proto = await connect(any_loop, family, ours, factory)
        assert tr.is_reading()
        tr.pause_reading()
        assert not tr.is_reading()
        tr.pause_reading()  # idempotent
        assert not tr.is_reading()
        view = memoryview(data)
        sent = peer.send(view)
        await iterations(50)
        assert proto.received == b"", "data_received while reading was paused"
        tr.resume_reading()
        tr.resume_reading()  # idempotent
        assert tr.is_reading()
        for _ in range(100_000):
            if sent < len(data):
                try:
                    sent += peer.send(view[sent:])
                except BlockingIOError:
                    pass
            if len(proto.received) == len(data):
                break
            await asyncio.sleep(0)
        assert proto.received == data
        # Pause again with data queued in the kernel: nothing is delivered.
        peer.send(b"tail")
        tr.pause_reading()
        await iterations(20)
        assert len(proto.received) == len(data)
        tr.resume_reading()
        for _ in range(1000):
            if len(proto.received) == len(data) + 4:
                break
            await asyncio.sleep(0)
        assert proto.received == data + b"tail"
        tr.close()
        assert not tr.is_reading()
        tr.pause_reading()  # no-ops on a closing transport
        tr.resume_reading()
        assert not tr.is_reading()
        await proto.lost
        assert proto.violations == []
        if buffered:
            assert proto.get_buffer_calls >= len(data) // 3000

    try:
        run(any_loop, main())
    finally:
        peer.close()


def test_r_fc_3_pause_reading_in_connection_made(any_loop):
    ours, peer = socket.socketpair()
    peer.sendall(b"early bytes")

    class PausesAtOnce(StrictProtocol):
        def connection_made(self, transport):
            super().connection_made(transport)
            transport.pause_reading()

    async def main():
        tr, proto = await any_loop.create_unix_connection(lambda: PausesAtOnce(any_loop), sock=ours)
        await iterations(20)
        assert proto.received == b""
        assert not tr.is_reading()
        tr.resume_reading()
        for _ in range(1000):
            if len(proto.received) >= len(b"early bytes"):
                break
            await asyncio.sleep(0)
        assert proto.received == b"early bytes"
        tr.close()
        await proto.lost
        assert proto.violations == []

    try:
        run(any_loop, main())
    finally:
        peer.close()


def test_r_fc_3_buffered_protocol_tiny_buffers(any_loop):
    """A 1-byte buffer still receives everything, one byte per get_buffer()."""
    ours, peer = socket.socketpair()
    data = os.urandom(3000)
    peer.sendall(data)
    peer.shutdown(socket.SHUT_WR)

    async def main():
        tr, proto = await any_loop.create_unix_connection(
            lambda: StrictBufferedProtocol(any_loop, lambda hint: 1), sock=ours
        )
        await proto.lost
        assert proto.received == data
        assert proto.get_buffer_calls >= len(data)
        assert proto.events[-2:] == ["eof", ("lost", None)]
        assert proto.violations == []

    try:
        run(any_loop, main())
    finally:
        peer.close()


# -- R-FC-4 ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flood",
    [
        pytest.param(16 << 20, id="16MiB"),
        pytest.param(64 << 20, id="64MiB", marks=pytest.mark.stress),
    ],
)
def test_r_fc_4_unread_stream_reader_is_bounded(any_loop, flood):
    limit = 64 * 1024
    data = os.urandom(flood)
    # Sent as whole bytes objects, made before the RSS is measured: PyPy's send() copies a
    # memoryview slice into a new buffer at each call, the ones that fail included, and
    # those copies (12 MiB or more) are in the RSS until a collection.
    chunks = [data[i : i + (1 << 20)] for i in range(0, flood, 1 << 20)]

    async def main():
        accepted = any_loop.create_future()

        async def handler(reader, writer):
            accepted.set_result((reader, writer))

        server = await asyncio.start_server(handler, "127.0.0.1", 0, limit=limit)
        client = socket.socket()
        client.setblocking(False)
        try:
            await any_loop.sock_connect(client, server.sockets[0].getsockname())
            reader, writer = await accepted
            rss_before = rss()
            sent, idle = 0, 0
            chunk = b""
            while idle < 50 and sent < len(data):
                chunk = chunk or chunks[sent >> 20]
                try:
                    n = client.send(chunk)
                    sent += n
                    chunk = chunk[n:]
                    idle = 0
                except BlockingIOError:
                    idle += 1
                await asyncio.sleep(0)
            # The transport stopped reading; the sender is held back.
            assert not writer.transport.is_reading()
            assert sent < len(data)
            assert len(reader._buffer) <= 2 * limit + 256 * 1024
            assert rss() - rss_before <= 4 << 20
            # Reading lets everything through, in order.
            sender = asyncio.ensure_future(any_loop.sock_sendall(client, memoryview(data)[sent:]))
            got = bytearray()
            while len(got) < len(data):
                got += await reader.read(1 << 20)
            await sender
            assert got == data
            writer.close()
            await writer.wait_closed()
        finally:
            client.close()
            if accepted.done():
                # Closed also after a failed check: left open, the server's end would warn
                # in a later test's collection (PyPy).
                accepted.result()[1].close()
            server.close()
            await server.wait_closed()

    run(any_loop, main())


# -- R-FC-5 ------------------------------------------------------------------------------


def _stdlib_writelines_drops_after_loss():
    import asyncio.selector_events as se

    writelines = getattr(se._SelectorSocketTransport, "writelines", None)
    if writelines is None or writelines.__qualname__.startswith("WriteTransport"):
        return True
    return "_conn_lost" in inspect.getsource(writelines)


class _WarningCount(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_r_fc_5_writes_after_reset_are_dropped(any_loop):
    ours, peer = tcp_pair()
    set_linger_rst(peer)

    async def main():
        tr, proto = await any_loop.create_connection(StrictProtocol, sock=ours)
        peer.close()  # RST
        exc = await proto.lost
        assert isinstance(exc, ConnectionResetError)
        rss_before = rss()
        counter = _WarningCount()
        logger = logging.getLogger("asyncio")
        logger.addHandler(counter)
        try:
            block = b"\0" * (64 * 1024)
            for _ in range(1000):
                tr.write(block)
                assert tr.get_write_buffer_size() == 0
        finally:
            logger.removeHandler(counter)
        assert rss() - rss_before < 1 << 20
        # asyncio: silent for the first LOG_THRESHOLD_FOR_CONNLOST_WRITES - 1
        # writes after the loss (counted from the reset), then one WARNING each.
        assert counter.messages == ["socket.send() raised exception."] * 996
        assert proto.violations == []

    run(any_loop, main())


@stdlib_xfail(
    not _stdlib_writelines_drops_after_loss(),
    strict=True,
    reason="python/cpython#136234: writelines() buffers data after connection loss",
)
def test_r_fc_5_writelines_after_reset_are_dropped(any_loop):
    ours, peer = tcp_pair()
    set_linger_rst(peer)

    async def main():
        tr, proto = await any_loop.create_connection(StrictProtocol, sock=ours)
        peer.close()
        assert isinstance(await proto.lost, ConnectionResetError)
        for _ in range(100):
            tr.writelines([b"a" * 1000, b"b" * 1000])
        assert tr.get_write_buffer_size() == 0
        assert proto.violations == []

    run(any_loop, main())


# -- R-FC-6 -------------------------------------------------------------------------------


def test_r_fc_6_resume_writing_writes_to_another_transport(any_loop):
    budget = 4 << 20
    piece = os.urandom(256 * 1024)

    class CrossWriter(StrictProtocol):
        def __init__(self, loop):
            super().__init__(loop)
            self.other = None
            self.written = 0

        def resume_writing(self):
            super().resume_writing()
            other = self.other
            if other.written < budget:
                other.written += len(piece)
                other.transport.write(piece)

    pairs = [socket.socketpair() for _ in range(2)]
    for ours, peer in pairs:
        for s in (ours, peer):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1024)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        peer.setblocking(False)

    async def main():
        protos = []
        for ours, _ in pairs:
            _, proto = await any_loop.create_unix_connection(
                lambda: CrossWriter(any_loop), sock=ours
            )
            protos.append(proto)
        a, b = protos
        a.other, b.other = b, a
        for proto in protos:
            proto.written += len(piece)
            proto.transport.write(piece)
        received = [bytearray(), bytearray()]
        for _ in range(1_000_000):
            for i, (_, peer) in enumerate(pairs):
                data, _ = drain_nonblocking(peer)
                received[i] += data
            if all(len(r) >= budget for r in received):
                break
            await asyncio.sleep(0)
        for proto in protos:
            if not proto.transport.is_closing():
                proto.transport.close()
        await asyncio.gather(a.lost, b.lost)
        for i, (_, peer) in enumerate(pairs):
            rest, eof = drain_nonblocking(peer)
            received[i] += rest
            assert eof
            assert len(received[i]) == protos[i].written
            assert received[i] == piece * (protos[i].written // len(piece))
        for proto in protos:
            assert proto.violations == []
            assert proto.flow_events().count("resume") >= 2

    try:
        run(any_loop, main(), timeout=30)
    finally:
        for _, peer in pairs:
            peer.close()


@stdlib_xfail(
    not _upstream.connection_lost_once_after_flush(),
    strict=True,
    reason="python/cpython#156512: a close() or abort() from resume_writing() makes the "
    "transport call connection_lost twice (AttributeError to the exception handler)",
)
@pytest.mark.parametrize("how", ["close", "abort"])
def test_r_fc_6_resume_writing_may_close_the_transport(any_loop, how, loop_errors):
    """The last chunk is written from resume_writing(), which then closes: one connection_lost."""
    conns = 5

    class Producer(StrictProtocol):
        def __init__(self, loop):
            super().__init__(loop)
            self.left = 3

        def resume_writing(self):
            super().resume_writing()
            if self.left:
                self.left -= 1
                self.transport.write(b"x" * (1 << 20))
            else:
                getattr(self.transport, how)()

    async def one():
        ours, peer = socket.socketpair()
        peer.setblocking(False)
        try:
            tr, proto = await any_loop.create_unix_connection(lambda: Producer(any_loop), sock=ours)
            tr.write(b"x" * (1 << 20))
            received = 0
            for _ in range(100_000):
                data, eof = drain_nonblocking(peer)
                received += len(data)
                if eof:
                    break
                await asyncio.sleep(0)
            await proto.lost
            await iterations(5)  # a second connection_lost would run here
            assert proto.violations == []
            assert proto.events.count(("lost", None)) == 1
            if how == "close":
                assert received == 4 << 20
        finally:
            peer.close()

    async def main():
        await asyncio.gather(*(one() for _ in range(conns)))

    run(any_loop, main())
    assert list(loop_errors) == []


@pytest.mark.parametrize("how", ["close", "abort"])
def test_r_fc_6_pause_writing_may_give_up(any_loop, how):
    """A protocol that closes from pause_writing() gets connection_lost, never a resume."""

    class GivesUp(StrictProtocol):
        def pause_writing(self):
            super().pause_writing()
            getattr(self.transport, how)()

    ours, peer = socket.socketpair()
    peer.setblocking(False)

    async def main():
        tr, proto = await any_loop.create_unix_connection(lambda: GivesUp(any_loop), sock=ours)
        tr.write(b"x" * (4 << 20))
        received = 0
        for _ in range(100_000):
            data, eof = drain_nonblocking(peer)
            received += len(data)
            if eof:
                break
            await asyncio.sleep(0)
        await proto.lost
        await iterations(5)
        assert proto.violations == []
        if how == "close":
            # close() still flushes; flow control has nothing more to say.
            assert received == 4 << 20
            assert proto.flow_events() in (["pause"], ["pause", "resume"])
        else:
            assert received < 4 << 20
            assert proto.flow_events() == ["pause"]

    try:
        run(any_loop, main())
    finally:
        peer.close()
