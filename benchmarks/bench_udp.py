"""UDP echo benchmark: a datagram echo server under load from another process.

    python -m benchmarks.bench_udp [--quick] [--seconds S] [--rounds N]
                                   [--clients N] [--size BYTES]
                                   [--placement same|split] [--json FILE]

For each loop (stdlib, snakeloop, uvloop when importable) the server is a
``create_datagram_endpoint`` echo protocol running in its own process.  The
client is a separate process with ``--clients`` UDP sockets (default 50)
that each keep one datagram in flight.  A hand-written Python epoll server
("raw") is measured too, as the floor a Python loop can reach.

``--placement`` is ``benchmarks.net``'s: ``same`` (the default) puts both
processes on CPU 0, the client blocking in epoll, so they take turns and
the server's CPU time is its work alone; ``split`` puts the server on CPU 1
and a busy-polling client on CPU 0, which adds a cross-CPU wake-up (on a
VM, the hypervisor's) to every loop alike and makes the figures noisier.

The main figure is the *server's* CPU time per request, read from
``/proc/PID/schedstat`` over the measured window (lower is better); the
round trips per second are printed beside it.  Every loop runs once per
round, in rotating order, and the median over the rounds is reported with
ratios to the stdlib loop and to uvloop measured in the same run.

Each server first frees one 1 MiB block, as in ``benchmarks.net``, so that
glibc serves asyncio's 256 KiB reads from the heap whatever the process did
before.

A datagram lost on loopback (the server's receive buffer overflowed) would
stall its client socket: the client resends after 200 ms and reports how
many it had to resend.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import select
import socket
import statistics
import subprocess
import sys
import time

from .serverproc import (
    PLACEMENTS,
    REPO,
    add_build_arguments,
    available_loops,
    cpu_ns,
    new_loop,
    prepare_builds,
    settle_allocator,
    src_build,
)

RESEND_AFTER = 0.2


# -- server side (runs in the child process) -----------------------------------


class EchoProtocol(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data, addr)


def _pin(cpu):
    try:
        if cpu in os.sched_getaffinity(0):
            os.sched_setaffinity(0, {cpu})
    except (AttributeError, OSError):
        pass


def serve(loop_name, cpu):
    _pin(cpu)
    settle_allocator()  # see benchmarks.net: asyncio reads with recvfrom(256 KiB)
    if loop_name == "raw":
        return serve_raw()
    loop = new_loop(loop_name)
    asyncio.set_event_loop(loop)

    async def main():
        transport, _ = await loop.create_datagram_endpoint(
            EchoProtocol, local_addr=("127.0.0.1", 0)
        )
        port = transport.get_extra_info("sockname")[1]
        print(f"ready {port}", flush=True)
        # Serve until the parent closes our stdin.
        await loop.run_in_executor(None, sys.stdin.read)
        transport.close()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return 0


def serve_raw():
    """The floor: recvfrom/sendto straight off epoll, no loop at all."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    ep = select.epoll()
    ep.register(sock.fileno(), select.EPOLLIN)
    stdin = sys.stdin.fileno()
    ep.register(stdin, select.EPOLLIN)
    fd = sock.fileno()
    buf = memoryview(bytearray(65536))
    print(f"ready {sock.getsockname()[1]}", flush=True)
    recvfrom_into = sock.recvfrom_into
    sendto = sock.sendto
    while True:
        for efd, _ in ep.poll():
            if efd != fd:
                return 0
            try:
                n, addr = recvfrom_into(buf)
            except BlockingIOError:
                continue
            sendto(bytes(buf[:n]), addr)


# -- client side ---------------------------------------------------------------


def client(port, server_pid, clients, size, warmup, seconds, cpu, busy_poll):
    """Load the server; print one JSON line with the measured window."""
    _pin(cpu)
    payload = os.urandom(size)
    socks = []
    ep = select.epoll()
    by_fd = {}
    for _ in range(clients):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        socks.append(s)
        ep.register(s.fileno(), select.EPOLLIN)
        by_fd[s.fileno()] = s
    last_sent = dict.fromkeys(by_fd, 0.0)
    now = time.perf_counter
    for s in socks:
        s.send(payload)
        last_sent[s.fileno()] = now()
    buf = bytearray(size + 1)
    done = 0
    resent = 0
    start = now()
    phase_end = start + warmup
    measuring = False
    cpu0 = t0 = count0 = 0
    poll = ep.poll
    # Sharing the server's CPU, the client must sleep in epoll to let it
    # run; it wakes at least this often to resend what loopback dropped.
    timeout = 0 if busy_poll else RESEND_AFTER / 4
    spins = 0
    while True:
        events = poll(timeout)
        for fd, _ in events:
            s = by_fd[fd]
            try:
                s.recv_into(buf)
            except BlockingIOError:
                continue
            done += 1
            s.send(payload)
            last_sent[fd] = now()
        spins += 1
        if spins & 255 and (events or busy_poll):
            continue
        t = now()
        if t >= phase_end:
            if measuring:
                wall = t - t0
                cpu = cpu_ns(server_pid) - cpu0
                count = done - count0
                break
            measuring = True
            cpu0, t0, count0 = cpu_ns(server_pid), now(), done
            phase_end = t0 + seconds
        for fd, sent_at in last_sent.items():
            if t - sent_at > RESEND_AFTER:
                by_fd[fd].send(payload)
                last_sent[fd] = t
                resent += 1
    for s in socks:
        s.close()
    ep.close()
    print(json.dumps({"count": count, "wall": wall, "cpu_ns": cpu, "resent": resent}))
    return 0


# -- driver --------------------------------------------------------------------


def measure(loop_name, clients, size, seconds, placement):
    server_cpu, client_cpu = PLACEMENTS[placement]
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_udp", "--serve", loop_name, str(server_cpu)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=REPO,
        text=True,
    )
    try:
        line = server.stdout.readline().split()
        if not line or line[0] != "ready":
            raise RuntimeError(f"{loop_name} server failed to start")
        port = int(line[1])
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.bench_udp",
                "--client",
                str(port),
                str(server.pid),
                str(clients),
                str(size),
                str(min(0.5, seconds / 4)),
                str(seconds),
                str(client_cpu),
                str(int(placement == "split")),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=True,
        )
    finally:
        server.stdin.close()
        server.wait(timeout=10)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    count = max(result["count"], 1)
    return {
        "rate": result["count"] / result["wall"],
        "cpu_us": result["cpu_ns"] / 1000 / count,
        "resent": result["resent"],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of 1 s per loop")
    parser.add_argument("--seconds", type=float, default=2.0, help="load time per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per loop (median)")
    parser.add_argument("--clients", type=int, default=50, help="sockets, one datagram each")
    parser.add_argument("--size", type=int, default=1024, help="datagram size in bytes")
    parser.add_argument("--placement", choices=sorted(PLACEMENTS), default="same")
    add_build_arguments(parser, baseline=False)
    parser.add_argument("--json", metavar="FILE", help="also write every sample to FILE")
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=8, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.serve[0], int(args.serve[1]))
    if args.client:
        port, pid, clients, size = (int(v) for v in args.client[:4])
        warmup, seconds = float(args.client[4]), float(args.client[5])
        cpu, busy_poll = int(args.client[6]), args.client[7] == "1"
        return client(port, pid, clients, size, warmup, seconds, cpu, busy_poll)
    if os.cpu_count() < 2 and args.placement == "split":
        parser.error("--placement split needs two CPUs")

    seconds, rounds = (1.0, 1) if args.quick else (args.seconds, args.rounds)
    has_compiled, compiled_note = prepare_builds(parser, args)
    loops = available_loops(compiled=has_compiled)
    print(
        f"# Python {platform.python_version()}, UDP echo {args.size} B, {args.clients} client "
        f"sockets, {rounds} round(s) of {seconds:g} s; placement {args.placement}\n"
        f"# snakeloop: {src_build()} build of src/; {compiled_note}"
    )
    samples = {name: [] for name in loops}
    for round_ in range(rounds):
        shift = round_ % len(loops)
        for name in loops[shift:] + loops[:shift]:
            samples[name].append(measure(name, args.clients, args.size, seconds, args.placement))
    medians = {
        name: {key: statistics.median(s[key] for s in runs) for key in ("rate", "cpu_us", "resent")}
        for name, runs in samples.items()
    }
    base = medians["stdlib"]
    uv = medians.get("uvloop")
    print(
        f"{'server':<10}{'CPU/request':>14}{'÷ stdlib':>10}{'÷ uvloop':>10}"
        f"{'round trips/s':>16}{'× stdlib':>10}{'× uvloop':>10}{'resent':>8}"
    )
    for name in loops:
        m = medians[name]
        cpu_uv = f"{m['cpu_us'] / uv['cpu_us']:.2f}" if uv else "-"
        rate_uv = f"{m['rate'] / uv['rate']:.2f}" if uv else "-"
        print(
            f"{name:<10}{m['cpu_us']:>11.2f} µs{m['cpu_us'] / base['cpu_us']:>10.2f}{cpu_uv:>10}"
            f"{m['rate']:>16.0f}{m['rate'] / base['rate']:>10.2f}{rate_uv:>10}"
            f"{m['resent']:>8.0f}"
        )
    print(
        "# CPU/request: the server's CPU time per round trip (lower is better), and its ratio to"
        " the stdlib loop's and uvloop's in this run; round trips/s: the same as a speed-up"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(samples, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
