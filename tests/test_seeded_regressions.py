"""Races and stalls that seeded runs of the project's own tests found in snakeloop.

Each test is the smallest reproduction of one bug; a bug not yet fixed is a
strict xfail whose reason says where it is.
"""

from __future__ import annotations

import collections
import socket
import ssl
import threading

import pytest

import snakeloop
from snakeloop.inbox import Inbox
from snakeloop.seeding import Schedule

OTHER_THREAD = 1


class FloodedArrivals(collections.deque):
    """An inbox's arrivals while other threads keep calling call_soon_threadsafe:
    each call taken out is followed by a new one, up to ``limit`` in all."""

    def __init__(self, count: int, limit: int) -> None:
        super().__init__((OTHER_THREAD, f"early {i}") for i in range(count))
        self.limit = limit
        self.taken = 0

    def popleft(self):
        item = super().popleft()
        self.taken += 1
        if self.taken + len(self) < self.limit:
            self.append((OTHER_THREAD, f"late {self.taken}"))
        return item


def test_inbox_release_takes_only_the_calls_there_when_it_began():
    delivered = []
    inbox = Inbox(Schedule(1, {"threadsafe": True}), delivered.append)
    arrivals = FloodedArrivals(count=10, limit=10_000)
    inbox._arrivals = arrivals
    inbox.release(0)
    assert arrivals.taken == 10


def test_a_busy_seeded_loop_still_takes_other_threads_calls():
    # Always a callback ready and no fd watched: the core skips the poll, and a seeded
    # loop's other-thread calls wait in its inbox until a poll hands them on.
    loop = snakeloop.new_event_loop(seed=1, perturb="threadsafe")
    try:
        seen = []

        def busy():
            if len(seen) < 200:
                loop.call_soon(busy)
            else:
                loop.stop()

        def producer():
            for i in range(200):
                loop.call_soon_threadsafe(seen.append, i)

        loop.call_soon(busy)
        thread = threading.Thread(target=producer)
        thread.start()
        watchdog = loop.call_later(10, loop.stop)
        loop.run_forever()
        watchdog.cancel()
        thread.join()
        assert seen == list(range(200))
    finally:
        loop.close()


@pytest.mark.parametrize("method", ["sock_recv", "sock_recv_into", "sock_sendall"])
def test_a_seeded_loop_refuses_ssl_sockets_as_asyncio_does(method):
    # The chunking views wrapped the socket first, and the wrapper is no SSLSocket.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    loop = snakeloop.new_event_loop(seed=1, perturb="chunking,chunking_writes")
    try:
        raw = socket.socket()
        with context.wrap_socket(
            raw, server_hostname="example.com", do_handshake_on_connect=False
        ) as sock:
            sock.setblocking(False)
            argument = {"sock_recv": 10, "sock_recv_into": bytearray(10), "sock_sendall": b"x"}
            with pytest.raises(TypeError, match="^Socket cannot be of type SSLSocket$"):
                loop.run_until_complete(getattr(loop, method)(sock, argument[method]))
    finally:
        loop.close()
