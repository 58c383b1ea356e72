"""Seeded scheduling, the opt-in dimensions: timer_delay, chunking_writes, io_latency.

Each dimension is checked the same way: its choices are recorded, a seed
replays them (same fingerprint), some seed changes what the program sees,
and the rule asyncio keeps is kept under every seed (a timer never runs
before its deadline nor out of order; a stream's bytes arrive whole and in
order, and ``drain()`` waits for a slow reader; datagrams stay whole).
"""

from __future__ import annotations

import asyncio
import socket

import pytest

import snakeloop
from snakeloop.perturbation import IMPLEMENTED
from snakeloop.seeding import parse_perturb

pytestmark = pytest.mark.timeout(120)

SEEDS = range(200)


def run_seeded(main, seed, perturb, **options):
    if seed is None:
        loop = snakeloop.new_event_loop(**options)
    else:
        loop = snakeloop.new_event_loop(seed=seed, perturb=perturb, **options)
    try:
        return loop.run_until_complete(main()), loop.schedule_fingerprint(), loop.schedule_trace()
    finally:
        loop.close()


def test_the_opt_in_dimensions_are_available_and_off_by_default():
    for name in ("timer_delay", "chunking_writes", "io_latency"):
        assert name in IMPLEMENTED
        assert name in parse_perturb("all", available=IMPLEMENTED)
        assert name not in parse_perturb("default", available=IMPLEMENTED)


# -- timer_delay -------------------------------------------------------------------------


class Timers:
    """Timers set by a busy task, each remembering when it was set and when it ran."""

    def __init__(self, loop):
        self.loop = loop
        self.tick = 0
        self.events = 0  # one count for every set and every run, to order them
        self.timers = []

    def set(self, when):
        timer = {"when": when, "seq": len(self.timers), "set": self.events, "tick": self.tick}
        self.events += 1
        self.timers.append(timer)
        self.loop.call_at(when, self.run, timer)

    def run(self, timer):
        timer["ran"] = self.events
        timer["ran_tick"] = self.tick
        # The loop runs timers due within its clock's resolution, as asyncio does.
        timer["ran_at"] = self.loop.time() + self.loop.get_clock().resolution
        self.events += 1


def timers_around_a_busy_task(scale):
    async def main():
        loop = asyncio.get_running_loop()
        timers = Timers(loop)
        for step in range(60):
            timers.tick = step
            now = loop.time()
            if step % 3 == 0:
                timers.set(now)  # due at once
                timers.set(now)  # a tie with it
                timers.set(now - scale)  # overdue
                timers.set(now + scale * (1 + step / 100))  # runs after the busy part
            await asyncio.sleep(0)
        await asyncio.sleep(scale * 3)
        return timers.timers

    return main


def check_timers(timers):
    """Never before the deadline, and in deadline order, as in asyncio.

    Timers of one deadline run in the order they were set: asyncio leaves
    that open, snakeloop keeps it unless ``timer_ties`` is perturbed.
    """
    for timer in timers:
        assert "ran" in timer, timer  # none starved
        assert timer["ran_at"] >= timer["when"], timer
    for a in timers:
        for b in timers:
            # b was in the heap when a left it for the ready queue (set at an
            # earlier step than the one that ran just before a, in a's
            # iteration), and is due first: b ran first.
            if b["tick"] < a["ran_tick"] and (b["when"], b["seq"]) < (a["when"], a["seq"]):
                assert b["ran"] < a["ran"], (a, b)


def waits(timers, now_due):
    """For each timer that was due when set: the busy task's steps it waited (1 unperturbed)."""
    return [t["ran_tick"] - t["tick"] for t in timers if t["when"] <= now_due(t)]


def test_timer_delay_keeps_deadlines_and_order_and_waits_one_iteration_at_most():
    main = timers_around_a_busy_task(scale=1.0)
    plain, _, _ = run_seeded(main, None, None, clock=snakeloop.VirtualClock())
    check_timers(plain)
    due = [t for t in plain if t["seq"] % 4 != 3]
    assert {t["ran_tick"] - t["tick"] for t in due} == {1}
    delayed = 0
    for seed in SEEDS:
        timers, _, trace = run_seeded(main, seed, "timer_delay", clock=snakeloop.VirtualClock())
        check_timers(timers)
        steps = [t["ran_tick"] - t["tick"] for t in timers if t["seq"] % 4 != 3]
        assert set(steps) <= {1, 2}, (seed, steps)  # one iteration late at most
        held = [d for d in trace if d.kind == "timer_delay"]
        assert (2 in steps) == bool(held), (seed, held)
        delayed += bool(held)
    assert 20 < delayed < 200, delayed  # p=0.1 for each of 20 chances


def check_timer_decisions(trace):
    for decision in trace:
        assert decision.kind == "timer_delay"
        # "due timers wait behind N ready": only while callbacks are ready.
        words = decision.detail.split()
        assert words[:4] == ["due", "timers", "wait", "behind"], decision
        assert int(words[4]) > 0, decision


def test_timer_delay_with_the_real_clock():
    main = timers_around_a_busy_task(scale=0.002)
    for seed in range(40):
        timers, _, trace = run_seeded(main, seed, "timer_delay")
        check_timers(timers)
        check_timer_decisions(trace)


def test_timer_delay_never_holds_a_timer_that_nothing_runs_before():
    async def sleeps():
        for _ in range(30):
            await asyncio.sleep(0.001)

    for seed in range(10):
        _, _, trace = run_seeded(sleeps, seed, "timer_delay")
        assert trace == [], (seed, trace)  # each timer was due with nothing ready


def test_timer_delay_is_recorded_and_replays():
    main = timers_around_a_busy_task(scale=1.0)
    runs = {}
    for seed in range(5):
        timers, fingerprint, trace = run_seeded(
            main, seed, "timer_delay", clock=snakeloop.VirtualClock()
        )
        runs[seed] = ([t["ran_tick"] for t in timers], fingerprint)
        check_timer_decisions(trace)
    for seed, recorded in runs.items():
        timers, fingerprint, _ = run_seeded(
            main, seed, "timer_delay", clock=snakeloop.VirtualClock()
        )
        assert ([t["ran_tick"] for t in timers], fingerprint) == recorded
    assert len({fingerprint for _, fingerprint in runs.values()}) == len(runs)


# -- chunking_writes -----------------------------------------------------------------------

PAYLOAD = bytes(range(256)) * 80 + b"tail"  # 20 KiB and a bit
HIGH_WATER = 2048


async def writes_to_a_slow_reader():
    """Write in bursts, drain after each; the reader takes 100 bytes a step."""
    a, b = socket.socketpair()
    _, writer = await asyncio.open_connection(sock=a)
    reader, other_writer = await asyncio.open_connection(sock=b)
    writer.transport.set_write_buffer_limits(high=HIGH_WATER)
    over_the_mark = 0

    async def send():
        nonlocal over_the_mark
        for start in range(0, len(PAYLOAD), 4096):
            burst = PAYLOAD[start : start + 4096]
            for at in range(0, len(burst), 1024):
                writer.write(burst[at : at + 1024])
            # Past the high-water mark the protocol was paused: drain() must wait.
            over_the_mark += writer.transport.get_write_buffer_size() > HIGH_WATER
            await writer.drain()
        writer.writelines([b"x" * 100, memoryview(b"y" * 100), bytearray(b"z" * 100)])
        await writer.drain()
        writer.write_eof()

    async def receive():
        got = bytearray()
        while chunk := await reader.read(100):
            got += chunk
            await asyncio.sleep(0)
        return bytes(got)

    _, got = await asyncio.gather(send(), receive())
    for w in (writer, other_writer):
        w.close()
        await w.wait_closed()
    return got, over_the_mark


WRITTEN = PAYLOAD + b"x" * 100 + b"y" * 100 + b"z" * 100


def test_chunking_writes_conserves_bytes_and_drain_waits_for_a_slow_reader():
    (got, over), _, _ = run_seeded(writes_to_a_slow_reader, None, None)
    assert got == WRITTEN
    assert over == 0  # the kernel takes each burst whole: drain() never waits
    waited = 0
    for seed in SEEDS:
        (got, over), _, trace = run_seeded(writes_to_a_slow_reader, seed, "chunking_writes")
        assert got == WRITTEN, seed
        waited += over > 0
    assert waited > len(SEEDS) // 2, waited


def test_chunking_writes_are_recorded_and_replay():
    fingerprints = set()
    for seed in range(4):
        _, fingerprint, trace = run_seeded(writes_to_a_slow_reader, seed, "chunking_writes")
        cuts = [decision for decision in trace if decision.kind == "chunking_writes"]
        assert cuts and len(cuts) == len(trace), trace
        for decision in cuts:
            words = decision.detail.split()  # "fd N send at most K of M bytes"
            assert words[0] == "fd" and words[2:5] == ["send", "at", "most"], decision
            assert 0 < int(words[5]) < int(words[7]), decision
        for _ in range(2):
            assert run_seeded(writes_to_a_slow_reader, seed, "chunking_writes")[1] == fingerprint
        fingerprints.add(fingerprint)
    assert len(fingerprints) == 4


async def sock_sendall_pair():
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    with a, b:

        async def receive():
            got = bytearray()
            while len(got) < len(PAYLOAD):
                got += await loop.sock_recv(b, 4096)
            return bytes(got)

        receiving = asyncio.ensure_future(receive())
        await loop.sock_sendall(a, PAYLOAD)
        await loop.sock_sendall(a, memoryview(b""))
        return await receiving


def test_sock_sendall_sends_every_byte_in_parts():
    parted = 0
    for seed in range(60):
        got, _, trace = run_seeded(sock_sendall_pair, seed, "chunking_writes")
        assert got == PAYLOAD, seed
        parted += any(decision.kind == "chunking_writes" for decision in trace)
    assert parted > 30, parted


DATAGRAMS = [b"a", b"bb" * 10, bytes(range(256)) * 4, b"z" * 3000]


class Gather(asyncio.DatagramProtocol):
    def __init__(self, expected, done):
        self.datagrams = []
        self.expected = expected
        self.done = done

    def datagram_received(self, data, addr):
        self.datagrams.append(data)
        if len(self.datagrams) == self.expected:
            self.done.set_result(None)


async def datagrams_both_ways():
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    receiver, gather = await loop.create_datagram_endpoint(
        lambda: Gather(2 * len(DATAGRAMS), done), local_addr=("127.0.0.1", 0)
    )
    address = receiver.get_extra_info("sockname")
    sender, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, remote_addr=address)
    connected = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    connected.setblocking(False)
    try:
        connected.connect(address)
        for datagram in DATAGRAMS:
            sender.sendto(datagram)
        for datagram in DATAGRAMS:
            await loop.sock_sendall(connected, datagram)
        await asyncio.wait_for(done, 10)
    finally:
        connected.close()
        sender.close()
        receiver.close()
    return gather.datagrams


def test_datagrams_are_sent_whole():
    for seed in range(40):
        datagrams, _, trace = run_seeded(datagrams_both_ways, seed, "chunking_writes")
        assert sorted(datagrams) == sorted(DATAGRAMS * 2), seed
        assert trace == [], trace


def test_an_unseeded_loop_sends_through_its_sockets():
    async def transport_socket():
        a, b = socket.socketpair()
        _, writer = await asyncio.open_connection(sock=a)
        try:
            return type(writer.transport._sock)
        finally:
            writer.close()
            await writer.wait_closed()
            b.close()

    plain = snakeloop.new_event_loop()
    try:
        assert plain._write_chunking is None
        assert "sock_sendall" not in vars(plain)
        assert plain.run_until_complete(transport_socket()) is socket.socket
    finally:
        plain.close()


# -- io_latency -------------------------------------------------------------------------------

ROUND_TRIPS = 20
LATENCY = (0.01, 0.2)


async def echo_round_trips():
    """Round trips over a socketpair; returns the replies and the virtual time they took."""
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    client_reader, client = await asyncio.open_connection(sock=a)
    server_reader, server = await asyncio.open_connection(sock=b)

    async def serve():
        while line := await server_reader.readline():
            server.write(line.upper())
            await server.drain()

    serving = asyncio.ensure_future(serve())
    start = loop.time()
    replies = []
    for n in range(ROUND_TRIPS):
        client.write(b"ping %d\n" % n)
        replies.append(await asyncio.wait_for(client_reader.readline(), 10))
    elapsed = loop.time() - start
    client.close()
    await client.wait_closed()
    await serving
    server.close()
    await server.wait_closed()
    return replies, elapsed


REPLIES = [b"PING %d\n" % n for n in range(ROUND_TRIPS)]


def test_io_latency_needs_virtual_time_and_a_range():
    with pytest.raises(ValueError, match="give the loop a VirtualClock"):
        snakeloop.new_event_loop(seed=1, perturb="io_latency")
    for bad in ((0.2, 0.1), (-1, 1), "fast", (1,), (0, float("inf"))):
        with pytest.raises(ValueError, match="io_latency"):
            parse_perturb({"io_latency": bad}, available=IMPLEMENTED)
    assert parse_perturb({"io_latency": [0, 1]}, available=IMPLEMENTED) == {
        "io_latency": (0.0, 1.0)
    }
    assert parse_perturb("io_latency", available=IMPLEMENTED)["io_latency"] == (0.0, 0.05)


def test_io_latency_delays_each_readiness_by_virtual_time_and_keeps_the_bytes():
    (replies, elapsed), _, _ = run_seeded(
        echo_round_trips, None, None, clock=snakeloop.VirtualClock()
    )
    assert replies == REPLIES
    assert elapsed == 0  # virtual time stands still while the peers answer at once
    lo, hi = LATENCY
    elapsed_by_seed = set()
    for seed in range(30):
        (replies, elapsed), _, trace = run_seeded(
            echo_round_trips, seed, {"io_latency": LATENCY}, clock=snakeloop.VirtualClock()
        )
        assert replies == REPLIES, seed
        waits = [float(d.detail.split()[3]) for d in trace if d.kind == "io_latency"]
        assert all(lo <= wait <= hi for wait in waits), waits
        # Each round trip waits at least twice: the server's read, then the client's.
        assert len(waits) >= 2 * ROUND_TRIPS, (seed, len(waits))
        assert elapsed >= 2 * ROUND_TRIPS * lo, (seed, elapsed)
        elapsed_by_seed.add(round(elapsed, 6))
    assert len(elapsed_by_seed) == 30


def test_io_latency_is_recorded_and_replays():
    perturb = {"io_latency": LATENCY}
    recorded = {}
    for seed in range(4):
        (_, elapsed), fingerprint, trace = run_seeded(
            echo_round_trips, seed, perturb, clock=snakeloop.VirtualClock()
        )
        for decision in trace:
            words = decision.detail.split()  # "fd N waits X s"
            assert decision.kind == "io_latency" and words[0] == "fd" and words[2] == "waits"
        recorded[seed] = (elapsed, fingerprint)
    for seed, (elapsed, fingerprint) in recorded.items():
        (_, again), replayed, _ = run_seeded(
            echo_round_trips, seed, perturb, clock=snakeloop.VirtualClock()
        )
        assert (again, replayed) == (elapsed, fingerprint)
    assert len({fingerprint for _, fingerprint in recorded.values()}) == 4


def test_all_gives_io_latency_its_default_range():
    from snakeloop.seeding import DEFAULT_IO_LATENCY

    assert parse_perturb("all", available=IMPLEMENTED)["io_latency"] == DEFAULT_IO_LATENCY
    assert parse_perturb("io_latency", available=IMPLEMENTED)["io_latency"] == DEFAULT_IO_LATENCY
