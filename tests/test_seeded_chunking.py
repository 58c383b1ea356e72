"""Seeded scheduling, ``chunking``: stream reads split at drawn places, bytes conserved.

Every split a seed draws is one the kernel may make on its own, so a
protocol, a ``StreamReader`` or a ``sock_recv`` loop that is correct for any
split passes under every seed; datagrams are never cut.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

import snakeloop

pytestmark = pytest.mark.timeout(120)

SEEDS = range(300)
PAYLOAD = bytes(range(256)) * 3 + b"tail"


def run_seeded(main, seed, perturb="chunking"):
    if seed is None:
        loop = snakeloop.new_event_loop()
    else:
        loop = snakeloop.new_event_loop(seed=seed, perturb=perturb)
    try:
        return loop.run_until_complete(main()), loop.schedule_fingerprint()
    finally:
        loop.close()


# -- a Protocol echo over loopback TCP -------------------------------------------------


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


class Collect(asyncio.Protocol):
    def __init__(self, expected, done):
        self.chunks = []
        self.expected = expected
        self.done = done

    def data_received(self, data):
        self.chunks.append(data)
        if sum(map(len, self.chunks)) >= self.expected:
            self.done.set_result(None)


async def tcp_echo():
    loop = asyncio.get_running_loop()
    echoes = []
    server = await loop.create_server(lambda: echoes.append(Echo()) or echoes[-1], "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    done = loop.create_future()
    transport, client = await loop.create_connection(
        lambda: Collect(len(PAYLOAD), done), "127.0.0.1", port
    )
    try:
        transport.write(PAYLOAD[:300])
        transport.write(PAYLOAD[300:])
        await asyncio.wait_for(done, 10)
    finally:
        transport.close()
        for echo in echoes:
            echo.transport.close()
        server.close()
        await server.wait_closed()
        await asyncio.sleep(0)
    return client.chunks


def test_tcp_echo_conserves_bytes_and_cuts_differently_per_seed():
    counts = set()
    for seed in SEEDS:
        chunks, _ = run_seeded(tcp_echo, seed)
        assert b"".join(chunks) == PAYLOAD, seed
        assert all(chunks), seed
        counts.add(len(chunks))
    assert len(counts) > 5, counts
    assert max(counts) > 10, counts


# -- a StreamReader over a socketpair, sock_recv on the other end ----------------------


LINES = [b"first line\n", b"x" * 500 + b"\n", b"\n", b"last\n"]
FRAME = bytes(range(200))


async def stream_pair():
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=ours)
    try:
        await loop.sock_sendall(theirs, b"".join(LINES) + FRAME)
        lines = [await reader.readline() for _ in LINES]
        frame = await reader.readexactly(len(FRAME))
        writer.write(frame * 4)
        await writer.drain()
        received = []
        while sum(map(len, received)) < len(frame) * 4:
            data = await loop.sock_recv(theirs, 300)
            assert 0 < len(data) <= 300
            received.append(data)
        return lines, frame, received
    finally:
        writer.close()
        await writer.wait_closed()
        theirs.close()


def test_stream_reader_and_sock_recv_see_every_byte_in_order():
    recv_counts = set()
    for seed in SEEDS:
        (lines, frame, received), _ = run_seeded(stream_pair, seed)
        assert lines == LINES, seed
        assert frame == FRAME, seed
        assert b"".join(received) == FRAME * 4, seed
        recv_counts.add(len(received))
    # 800 bytes read 300 at most at a time: 3 reads unless cut.
    assert len(recv_counts) > 3 and max(recv_counts) > 5, recv_counts


def test_without_a_seed_reads_are_whole():
    (lines, frame, received), fingerprint = run_seeded(stream_pair, None)
    assert (lines, frame, fingerprint) == (LINES, FRAME, None)
    assert [len(data) for data in received] == [300, 300, 200]
    chunks, _ = run_seeded(tcp_echo, None)
    assert b"".join(chunks) == PAYLOAD and len(chunks) <= 2


async def sock_recv_into_pair():
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    try:
        b.sendall(PAYLOAD)
        got = bytearray()
        buf = bytearray(400)
        while len(got) < len(PAYLOAD):
            nbytes = await loop.sock_recv_into(a, buf)
            assert 0 < nbytes <= 400
            got += buf[:nbytes]
        return bytes(got)
    finally:
        a.close()
        b.close()


def test_sock_recv_into_conserves_bytes():
    for seed in range(100):
        assert run_seeded(sock_recv_into_pair, seed)[0] == PAYLOAD, seed


# -- a BufferedProtocol -----------------------------------------------------------------


class BufferedCollect(asyncio.BufferedProtocol):
    def __init__(self, expected, done):
        self.buffer = bytearray(128)
        self.got = bytearray()
        self.calls = 0
        self.expected = expected
        self.done = done

    def get_buffer(self, sizehint):
        return self.buffer

    def buffer_updated(self, nbytes):
        self.calls += 1
        self.got += self.buffer[:nbytes]
        if len(self.got) >= self.expected:
            self.done.set_result(None)


async def buffered_pair():
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    b.setblocking(False)
    done = loop.create_future()
    transport, protocol = await loop.connect_accepted_socket(
        lambda: BufferedCollect(len(PAYLOAD), done), a
    )
    try:
        await loop.sock_sendall(b, PAYLOAD)
        await asyncio.wait_for(done, 10)
    finally:
        transport.close()
        b.close()
        await asyncio.sleep(0)
    return bytes(protocol.got), protocol.calls


def test_buffered_protocol_conserves_bytes_with_smaller_reads():
    calls = set()
    for seed in SEEDS:
        (got, count), _ = run_seeded(buffered_pair, seed)
        assert got == PAYLOAD, seed
        calls.add(count)
    # 772 bytes into a 128-byte buffer: 7 reads when whole.
    assert run_seeded(buffered_pair, None)[0] == (PAYLOAD, 7)
    assert len(calls) > 5 and max(calls) > 10, calls


# -- datagrams ---------------------------------------------------------------------------


DATAGRAMS = [b"a", b"bb" * 10, bytes(range(256)) * 4, b"z" * 3000]


class Gather(asyncio.DatagramProtocol):
    def __init__(self, done):
        self.datagrams = []
        self.done = done

    def datagram_received(self, data, addr):
        self.datagrams.append(data)
        if len(self.datagrams) == len(DATAGRAMS):
            self.done.set_result(None)


async def udp_exchange():
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    receiver, gather = await loop.create_datagram_endpoint(
        lambda: Gather(done), local_addr=("127.0.0.1", 0)
    )
    address = receiver.get_extra_info("sockname")
    sender, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, remote_addr=address)
    connected = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    connected.setblocking(False)
    try:
        for datagram in DATAGRAMS:
            sender.sendto(datagram)
        await asyncio.wait_for(done, 10)
        connected.bind(("127.0.0.1", 0))
        connected.connect(connected.getsockname())
        by_sock_recv = []
        for datagram in DATAGRAMS:
            connected.send(datagram)
            by_sock_recv.append(await loop.sock_recv(connected, 4096))
    finally:
        sender.close()
        receiver.close()
        connected.close()
        await asyncio.sleep(0)
    return gather.datagrams, by_sock_recv


def test_datagrams_are_never_split():
    for seed in SEEDS:
        (by_transport, by_sock_recv), _ = run_seeded(udp_exchange, seed)
        assert sorted(by_transport) == sorted(DATAGRAMS), seed
        assert by_sock_recv == DATAGRAMS, seed


# -- the record and replay -----------------------------------------------------------------


def test_cuts_are_recorded_and_a_seed_replays_them():
    loop = snakeloop.new_event_loop(seed=11, perturb="chunking")
    try:
        loop.run_until_complete(stream_pair())
        trace = loop.schedule_trace()
        fingerprint = loop.schedule_fingerprint()
    finally:
        loop.close()
    cuts = [decision for decision in trace if decision.kind == "chunking"]
    assert cuts, trace
    for decision in cuts:
        words = decision.detail.split()  # "fd N read K of M bytes"
        assert words[0] == "fd" and words[2] == "read" and words[4] == "of", decision
        assert 0 < int(words[3]) < int(words[5]), decision
    for _ in range(3):
        assert run_seeded(stream_pair, 11)[1] == fingerprint
    assert run_seeded(stream_pair, 12)[1] != fingerprint


def test_chunking_joins_the_default_dimensions():
    loop = snakeloop.new_event_loop(seed=3)
    try:
        assert "chunking" in loop.perturbation
        assert loop._chunking is not None
    finally:
        loop.close()
    plain = snakeloop.new_event_loop()
    try:
        assert plain._chunking is None
        assert "sock_recv" not in vars(plain)
    finally:
        plain.close()
