"""How a stream transport sizes its reads (snakeloop's own choice).

Reads ask for 64 KiB; one that fills all 64 KiB switches the transport to
256 KiB reads until a read returns under 16 KiB (``transports/stream.py``).
The stdlib loop always asks for 256 KiB, so these run on snakeloop only.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from _loopkit import run

KIB = 1024


class Recorder(asyncio.Protocol):
    def __init__(self, loop):
        self.sizes = []
        self.received = 0
        self.expected = 0
        self.waiter = None
        self.loop = loop

    def expect(self, nbytes):
        self.expected += nbytes
        self.waiter = self.loop.create_future()
        return self.waiter

    def data_received(self, data):
        self.sizes.append(len(data))
        self.received += len(data)
        if self.received == self.expected and not self.waiter.done():
            self.waiter.set_result(None)


def fill(sock):
    """Queue as much as the socket takes without blocking; return how much."""
    chunk = b"x" * (64 * KIB)
    total = 0
    while True:
        try:
            total += sock.send(chunk)
        except BlockingIOError:
            return total


@pytest.mark.unseeded("read sizes: a seeded loop's chunking cuts reads short on purpose")
def test_reads_grow_during_a_bulk_transfer_and_shrink_after(loop):
    a, b = socket.socketpair()
    b.setblocking(False)
    protocol = Recorder(loop)
    transport, _ = loop.run_until_complete(loop.connect_accepted_socket(lambda: protocol, a))
    try:
        # Everything is queued before the loop reads: the first read fills
        # its 64 KiB, and the next ones take up to 256 KiB at a time.
        queued = fill(b)
        assert queued > 2 * 64 * KIB
        run(loop, protocol.expect(queued), 10)
        assert protocol.sizes[0] == 64 * KIB
        assert max(protocol.sizes) > 64 * KIB
        assert max(protocol.sizes) <= 256 * KIB

        # A small read ends the bulk transfer...
        del protocol.sizes[:]
        b.send(b"y" * 100)
        run(loop, protocol.expect(100), 10)
        assert protocol.sizes == [100]

        # ...so the next one starts at 64 KiB again.
        del protocol.sizes[:]
        queued = fill(b)
        run(loop, protocol.expect(queued), 10)
        assert protocol.sizes[0] == 64 * KIB
    finally:
        transport.close()
        b.close()
        loop.run_until_complete(asyncio.sleep(0))
