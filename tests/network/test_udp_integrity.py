"""R-INT-6: datagram integrity over UDP loopback, on snakeloop and the stdlib loop.

Datagrams of every size from 1 byte to the largest UDP/IPv4 payload
(65,507 bytes) carry a sequence number and a CRC.  None may arrive corrupt
or truncated, boundaries must be kept, and at least 99.9% must arrive.
One byte more than the maximum must end in ``error_received`` (EMSGSIZE),
not in a crash or a closed transport.

The default run sends 2,000 datagrams in windows the receiver's buffer can
hold, so loopback does not drop any; the stress run is the plan's full
20,000 datagrams paced at 5,000 per second.
"""

from __future__ import annotations

import asyncio
import errno
import random
import socket
import struct
import time
import zlib

import pytest
from _loopkit import run

pytestmark = pytest.mark.reliability

HEADER = struct.Struct("!II")  # sequence number, CRC32 of the payload
MAX_UDP4 = 65507
TINY = b"t"
GUARD = 60.0


def make_datagram(seq, size, rng):
    if size < HEADER.size:
        return TINY * size  # no room for a header: a fixed pattern
    payload = rng.randbytes(size - HEADER.size)
    return HEADER.pack(seq, zlib.crc32(payload)) + payload


class Receiver(asyncio.DatagramProtocol):
    def __init__(self):
        self.count = 0
        self.bytes = 0
        self.corrupt = 0
        self.tiny = 0
        self.seen = set()
        self.changed = asyncio.Event()
        self.errors = []

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.count += 1
        self.bytes += len(data)
        if len(data) < HEADER.size:
            if data == TINY * len(data):
                self.tiny += 1
            else:
                self.corrupt += 1
        else:
            seq, crc = HEADER.unpack_from(data)
            if zlib.crc32(data[HEADER.size :]) != crc:
                self.corrupt += 1
            self.seen.add(seq)
        self.changed.set()

    def error_received(self, exc):
        self.errors.append(exc)


class Sender(asyncio.DatagramProtocol):
    def __init__(self):
        self.errors = []
        self.lost = None

    def connection_made(self, transport):
        self.transport = transport

    def error_received(self, exc):
        self.errors.append(exc)

    def connection_lost(self, exc):
        self.lost = exc


def _grow_rcvbuf(sock, size):
    force = getattr(socket, "SO_RCVBUFFORCE", None)
    if force is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size)
            return
        except OSError:
            pass
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


def _sizes(n, rng):
    """Every edge size first, then sizes spread over 1..MAX_UDP4."""
    edges = [1, 2, 7, 8, 9, 1024, 1472, 1473, 65507, 65506, 32768]
    return (edges + [rng.randint(1, MAX_UDP4) for _ in range(n)])[:n]


async def transfer(loop, n, *, paced_rate=None):
    rng = random.Random(20240601)
    r_tr, receiver = await loop.create_datagram_endpoint(Receiver, local_addr=("127.0.0.1", 0))
    rsock = r_tr.get_extra_info("socket")
    _grow_rcvbuf(rsock, 4 * 1024 * 1024)
    # The kernel reports twice the usable size; count each datagram's own
    # overhead (an skb of a few hundred bytes) too.
    budget = rsock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2
    s_tr, sender = await loop.create_datagram_endpoint(
        Sender, remote_addr=r_tr.get_extra_info("sockname")
    )
    sent = 0
    window_bytes = 0
    started = time.monotonic()
    try:
        for seq, size in enumerate(_sizes(n, rng)):
            cost = size + 1024
            if paced_rate is not None:
                # Behind schedule (the machine was busy), still yield once per
                # datagram: a catch-up burst would only overflow the receiver.
                delay = started + seq / paced_rate - time.monotonic()
                await asyncio.sleep(max(delay, 0))
            elif window_bytes + cost > budget:
                # Let the receiver catch up with this window; what has not
                # arrived by then counts as lost.
                await caught_up(loop, receiver, sent)
                window_bytes = 0
            s_tr.sendto(make_datagram(seq, size, rng))
            sent += 1
            window_bytes += cost
        await caught_up(loop, receiver, sent)
        return sent, receiver, sender
    finally:
        s_tr.close()
        r_tr.close()
        await asyncio.sleep(0)
        await asyncio.sleep(0)


async def caught_up(loop, receiver, sent, timeout=5.0):
    deadline = loop.time() + timeout
    while receiver.count < sent:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        receiver.changed.clear()
        try:
            await asyncio.wait_for(receiver.changed.wait(), remaining)
        except TimeoutError:
            return


def _check(sent, receiver, sender):
    assert sender.errors == []
    assert receiver.corrupt == 0
    delivered = len(receiver.seen) + receiver.tiny
    assert receiver.count == delivered  # no duplicates
    assert delivered >= 0.999 * sent, (delivered, sent)


def test_udp_integrity(any_loop):
    sent, receiver, sender = any_loop.run_until_complete(
        asyncio.wait_for(transfer(any_loop, 2000), GUARD)
    )
    assert sent == 2000
    _check(sent, receiver, sender)


@pytest.mark.stress
def test_udp_integrity_paced_20k(any_loop):
    sent, receiver, sender = any_loop.run_until_complete(
        asyncio.wait_for(transfer(any_loop, 20_000, paced_rate=5000), 120)
    )
    assert sent == 20_000
    _check(sent, receiver, sender)


def test_oversized_datagram_is_an_error_not_a_crash(any_loop):
    async def main():
        r_tr, receiver = await any_loop.create_datagram_endpoint(
            Receiver, local_addr=("127.0.0.1", 0)
        )
        addr = r_tr.get_extra_info("sockname")
        s_tr, sender = await any_loop.create_datagram_endpoint(Sender, remote_addr=addr)
        u_tr, unconnected = await any_loop.create_datagram_endpoint(Sender, family=socket.AF_INET)
        try:
            s_tr.sendto(b"x" * (MAX_UDP4 + 1))
            u_tr.sendto(b"y" * (MAX_UDP4 + 1), addr)
            s_tr.sendto(make_datagram(7, MAX_UDP4, random.Random(1)))
            while receiver.count < 1:
                receiver.changed.clear()
                await receiver.changed.wait()
            return (
                [e.errno for e in sender.errors],
                [e.errno for e in unconnected.errors],
                s_tr.is_closing(),
                receiver.bytes,
                receiver.corrupt,
            )
        finally:
            for tr in (s_tr, u_tr, r_tr):
                tr.close()
            await asyncio.sleep(0)
            await asyncio.sleep(0)

    result = run(any_loop, main(), GUARD)
    assert result == ([errno.EMSGSIZE], [errno.EMSGSIZE], False, MAX_UDP4, 0)
