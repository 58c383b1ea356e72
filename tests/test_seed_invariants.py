"""What no seed may change: asyncio's guarantees hold under every perturbed schedule.

A seeded loop reorders only what asyncio leaves open (which ready fd goes
first, when an event is seen, how many bytes a read returns...).  Each test
here runs a program that leans on one guarantee, under many seeds with every
dimension on, and checks the guarantee held:

- callbacks queued with ``call_soon`` run in the order they were queued,
  whatever queued them (an I/O callback, a timer, a task step);
- a Lock is granted in the order its waiters came, a Queue hands items out in
  the order they were put;
- a stream delivers every byte, in order, however the reads were cut;
- a datagram arrives whole.

In the default run each test checks ``DEFAULT_SEEDS`` seeds of its own.  Under
``--snakeloop-seed``/``--snakeloop-seeds`` it checks the seed the plugin gives
each run instead, so CI can run these under thousands of derived seeds.
The same programs run on the stdlib loop once, which checks the checkers.
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from _loopkit import close_loop

import snakeloop

DEFAULT_SEEDS = range(100)

pytestmark = pytest.mark.timeout(120)

Program = Callable[[], Coroutine[Any, Any, None]]


@pytest.fixture
def seeded_runs(snakeloop_seed: Any) -> list[tuple[int, Any]]:
    """(seed, perturb) pairs to check: the plugin's run, or ours with every dimension."""
    if snakeloop_seed is not None:
        return [(snakeloop_seed.seed, snakeloop_seed.perturb or "all")]
    return [(seed, "all") for seed in DEFAULT_SEEDS]


def check(program: Program, runs: list[tuple[int, Any]]) -> None:
    """Run ``program`` on the stdlib loop, then on a seeded snakeloop per run."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(program())
    finally:
        close_loop(loop)
    for seed, perturb in runs:
        # A virtual clock, so that "all" can include the dimensions that need one.
        loop = snakeloop.new_event_loop(seed=seed, perturb=perturb, clock=snakeloop.VirtualClock())
        try:
            loop.run_until_complete(program())
        except BaseException as exc:
            exc.add_note(f"under seed={seed} perturb={perturb}")
            raise
        finally:
            close_loop(loop)


def connected_pairs(count: int) -> list[tuple[socket.socket, socket.socket]]:
    pairs = [socket.socketpair() for _ in range(count)]
    for pair in pairs:
        for sock in pair:
            sock.setblocking(False)
    return pairs


# -- the call_soon FIFO ----------------------------------------------------------------


async def fifo_from_everywhere() -> None:
    """Number every call_soon as it is made; they must run in number order.

    The calls are made from I/O callbacks of several fds ready in one poll,
    from timers of one deadline and of nearby ones, and from task steps that
    resume after socket reads: the places a seed reorders.
    """
    loop = asyncio.get_running_loop()
    queued = 0
    ran: list[int] = []

    def queue_one() -> None:
        nonlocal queued
        queued += 1
        loop.call_soon(ran.append, queued)

    pairs = connected_pairs(4)
    try:
        for index, (reader, _) in enumerate(pairs):
            loop.add_reader(reader, lambda r=reader, i=index: (r.recv(64), queue_one()))
        for when in (0.001, 0.001, 0.001, 0.002, 0.003):
            loop.call_later(when, queue_one)

        async def reads(pair: tuple[socket.socket, socket.socket]) -> None:
            for _ in range(3):
                pair[1].send(b"x")
                await asyncio.sleep(0)
                queue_one()

        for _ in range(3):
            for _, writer in pairs:
                writer.send(b"ping")
            queue_one()
            await asyncio.sleep(0.001)
        for reader, _ in pairs:
            loop.remove_reader(reader)
        await asyncio.gather(*(reads(pair) for pair in pairs))
        await asyncio.sleep(0.01)
    finally:
        for pair in pairs:
            for sock in pair:
                sock.close()
    assert queued >= 20  # 3 + 5 timers + 12 task steps, and what the readers queued
    assert ran == sorted(ran), f"call_soon order broken: {ran}"
    assert len(ran) == queued


def test_call_soon_callbacks_run_in_the_order_they_were_queued(seeded_runs):
    check(fifo_from_everywhere, seeded_runs)


# -- Lock fairness and Queue order -----------------------------------------------------


async def lock_granted_in_arrival_order() -> None:
    """Tasks woken by socket reads in a seeded order queue on one Lock; it is granted in the
    order they came to it, whatever that order was."""
    lock = asyncio.Lock()
    came: list[int] = []
    granted: list[int] = []
    pairs = connected_pairs(6)
    loop = asyncio.get_running_loop()

    async def worker(index: int, sock: socket.socket) -> None:
        await loop.sock_recv(sock, 16)
        came.append(index)
        async with lock:
            granted.append(index)
            await asyncio.sleep(0)

    try:
        async with lock:
            tasks = [asyncio.create_task(worker(i, pair[0])) for i, pair in enumerate(pairs)]
            for _, writer in pairs:
                writer.send(b"go")
            while len(came) < len(pairs):
                await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)
    finally:
        for pair in pairs:
            for sock in pair:
                sock.close()
    assert granted == came


class RecordingQueue(asyncio.Queue):  # type: ignore[type-arg]
    """A Queue that notes each item as it goes in, whatever put it there."""

    def _init(self, maxsize: int) -> None:
        super()._init(maxsize)  # type: ignore[misc]
        self.entered: list[int] = []

    def _put(self, item: int) -> None:
        self.entered.append(item)
        super()._put(item)  # type: ignore[misc]


async def queue_keeps_its_order() -> None:
    """Getters woken by socket reads in a seeded order wait on an empty Queue, and
    producers woken the same way put into a full one: the getters are served in the
    order they came, and items come out in the order they went in."""
    loop = asyncio.get_running_loop()
    waiting_room = RecordingQueue()
    queue = RecordingQueue(maxsize=2)
    came: list[int] = []
    served: dict[int, int] = {}
    pairs = connected_pairs(8)

    async def getter(index: int, sock: socket.socket) -> None:
        await loop.sock_recv(sock, 16)
        came.append(index)
        served[index] = await waiting_room.get()

    async def producer(base: int, sock: socket.socket) -> None:
        await loop.sock_recv(sock, 16)
        for number in range(base, base + 3):
            await queue.put(number)

    try:
        getters = [asyncio.create_task(getter(i, pairs[i][0])) for i in range(4)]
        for _, writer in pairs[:4]:
            writer.send(b"go")
        while len(came) < 4:
            await asyncio.sleep(0.001)
        for number in range(4):
            waiting_room.put_nowait(100 + number)
        await asyncio.gather(*getters)
        assert [served[index] for index in came] == [100, 101, 102, 103]

        producers = [asyncio.create_task(producer(10 * i, pairs[4 + i][0])) for i in range(4)]
        for _, writer in pairs[4:]:
            writer.send(b"go")
        got = []
        while len(got) < 12:
            got.append(await queue.get())
            await asyncio.sleep(0)
        await asyncio.gather(*producers)
    finally:
        for pair in pairs:
            for sock in pair:
                sock.close()
    assert got == queue.entered
    assert sorted(got) == sorted(10 * i + k for i in range(4) for k in range(3))
    # Each producer's items keep its order.
    for i in range(4):
        mine = [n for n in got if 10 * i <= n < 10 * i + 3]
        assert mine == sorted(mine)


def test_a_lock_is_granted_in_the_order_its_waiters_came(seeded_runs):
    check(lock_granted_in_arrival_order, seeded_runs)


def test_a_queue_serves_getters_and_items_in_order(seeded_runs):
    check(queue_keeps_its_order, seeded_runs)


# -- bytes and datagrams ---------------------------------------------------------------


async def stream_echo_conserves_bytes() -> None:
    """Random-sized writes through a TCP echo server: every byte comes back, in order."""
    rng = random.Random(7)
    payload = bytes(rng.getrandbits(8) for _ in range(200_000))

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(rng.choice((1, 7, 100, 4096, 65536))):
            writer.write(data)
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        offset = 0
        while offset < len(payload):
            size = rng.choice((1, 3, 512, 9000, 70000))
            writer.write(payload[offset : offset + size])
            offset += size
            await writer.drain()
        writer.write_eof()

    sender = asyncio.create_task(send())
    received = bytearray()
    while True:
        if rng.random() < 0.5:
            chunk = await reader.read(rng.choice((1, 50, 8192, 100_000)))
        else:
            try:
                chunk = await reader.readexactly(rng.choice((1, 2, 1000)))
            except asyncio.IncompleteReadError as exc:
                chunk = exc.partial
        if not chunk:
            break
        received += chunk
    await sender
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()
    assert len(received) == len(payload)
    assert received == payload


async def datagrams_arrive_whole() -> None:
    """Datagrams of many sizes, through a datagram endpoint and through sock_recv: each
    arrives whole, none split or joined."""
    loop = asyncio.get_running_loop()
    sizes = [1, 2, 100, 1000, 4096, 9000, 30000, 5, 60000, 17]
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    left.setblocking(False)
    right.setblocking(False)
    try:
        # sock_recv with room for the largest: chunking must not cut a datagram.
        for size in sizes:
            left.send(bytes([size % 251]) * size)
        got = [await loop.sock_recv(right, 65536) for _ in sizes]
        assert [len(d) for d in got] == sizes
        assert all(d == bytes([len(d) % 251]) * len(d) for d in got)

        arrived: asyncio.Queue[bytes] = asyncio.Queue()

        class Receiver(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: Any) -> None:
                arrived.put_nowait(data)

        transport, _ = await loop.create_datagram_endpoint(Receiver, sock=right)
        try:
            for size in sizes:
                left.send(bytes([size % 251]) * size)
            endpoint_got = [await arrived.get() for _ in sizes]
        finally:
            transport.close()
            await asyncio.sleep(0)
        assert [len(d) for d in endpoint_got] == sizes
    finally:
        left.close()
        right.close()


def test_stream_bytes_are_conserved_however_reads_are_cut(seeded_runs):
    check(stream_echo_conserves_bytes, seeded_runs[:20])


def test_datagrams_are_never_split(seeded_runs):
    check(datagrams_arrive_whole, seeded_runs)
