"""At scale: what N idle connections cost a server, in memory and in latency.

    python -m benchmarks.scale [--connections N] [--only proto,streams] [--no-compiled]
                               [--baseline REV] [--json FILE]

For each server kind (``proto``: ``loop.create_server`` with an echo protocol;
``streams``: ``asyncio.start_server``, a task, a StreamReader and a StreamWriter per
connection) and each loop (stdlib, snakeloop, its compiled build, uvloop and rloop
when they import), one after the other, a server runs in a process of its own
(``benchmarks.net``'s) and client processes open N connections to it over loopback.
Each connection does one 16-byte round trip and then stays open and idle.  Reported:

* the server's RSS growth over the N connections, per connection, in KiB, from
  ``/proc/PID/status`` (``VmRSS``), measured after 100 connections made first, so
  that imports, the loop and the first allocations are left out;
* how long the N connections took to be accepted and answered, as connections per
  second (the clients run on the other CPU);
* the latency of one request to one connection among the N idle ones: the median
  of 2,000 round trips, in microseconds.

OS facts it relies on: each process may hold as many open files as its hard
``RLIMIT_NOFILE`` allows (the soft limit is raised to it here and in the server),
so N is capped at the hard limit less a margin; on these machines that is 20,000,
and the default N is 9,000.  RSS counts pages the process touched, so a
connection's cost is the mean over many, never one connection's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import time

from .serverproc import REPO, add_build_arguments, available_loops, prepare_builds, src_build

KINDS = ("proto", "streams")
WARM_CONNECTIONS = 100
CLIENT_PROCESSES = 4
LATENCY_ROUNDS = 2000
MESSAGE = b"0123456789abcdef"
# Sockets the server or a client holds besides the connections.
FD_MARGIN = 200


def raise_file_limit():
    """The soft limit of open files raised to the hard one: the limit there is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def round_trip(sock):
    sock.sendall(MESSAGE)
    received = b""
    while len(received) < len(MESSAGE):
        chunk = sock.recv(len(MESSAGE) - len(received))
        if not chunk:
            raise RuntimeError("the server closed a connection")
        received += chunk


def open_connections(port, count):
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(sock)
        round_trip(sock)
    return socks


def hold_clients(port, count):
    """A client process: once told to go, open ``count`` connections, say so, and hold
    them until stdin closes (a process's start-up is not the server's time)."""
    raise_file_limit()
    print("ready", flush=True)
    sys.stdin.readline()
    socks = open_connections(port, count)
    print("held", flush=True)
    sys.stdin.read()
    for sock in socks:
        sock.close()


def measure(loop_name, kind, connections):
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.scale", "--serve", loop_name, kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=REPO,
        text=True,
    )
    clients = []
    warm = []
    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(server.pid, {0})
        line = server.stdout.readline().split()
        if not line or line[0] != "ready":
            raise RuntimeError(f"{loop_name} server failed to start")
        port = int(line[1])
        warm = open_connections(port, WARM_CONNECTIONS)
        time.sleep(0.2)
        before = rss_kib(server.pid)
        share, extra = divmod(connections, CLIENT_PROCESSES)
        for index in range(CLIENT_PROCESSES):
            count = share + (1 if index < extra else 0)
            client = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.scale", "--hold", str(port), str(count)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=REPO,
                text=True,
            )
            clients.append(client)
            if os.cpu_count() > 1:
                os.sched_setaffinity(client.pid, {1})
        for client in clients:
            if client.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a client of the {loop_name} server failed to start")
        started = time.perf_counter()
        for client in clients:
            client.stdin.write("go\n")
            client.stdin.flush()
        for client in clients:
            if client.stdout.readline().strip() != "held":
                raise RuntimeError(f"a client of the {loop_name} server failed")
        accepted_in = time.perf_counter() - started
        time.sleep(0.2)
        after = rss_kib(server.pid)
        probe = warm[0]
        samples = []
        for _ in range(LATENCY_ROUNDS):
            t0 = time.perf_counter()
            round_trip(probe)
            samples.append(time.perf_counter() - t0)
    finally:
        os.sched_setaffinity(0, mask)
        for client in clients:
            client.communicate(timeout=60)
        for sock in warm:
            sock.close()
        server.communicate(timeout=60)
    return {
        "kib_per_connection": (after - before) / connections,
        "accepted_per_second": connections / accepted_in,
        "latency_us": statistics.median(samples) * 1e6,
    }


def serve(loop_name, kind):
    raise_file_limit()
    from .net import serve_loop

    serve_loop(loop_name, kind, "tcp", "")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=9000, help="idle connections")
    parser.add_argument("--only", default="", help="server kinds: proto,streams")
    add_build_arguments(parser)
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--hold", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    if args.hold:
        hold_clients(int(args.hold[0]), int(args.hold[1]))
        return 0
    kinds = [k for k in args.only.split(",") if k] or list(KINDS)
    for kind in kinds:
        if kind not in KINDS:
            parser.error(f"unknown server kind {kind!r}; choose from {', '.join(KINDS)}")
    limit = raise_file_limit() - FD_MARGIN - WARM_CONNECTIONS
    if args.connections > limit:
        parser.error(f"--connections {args.connections} is over what the fd limit allows here")
    has_compiled, compiled_note = prepare_builds(parser, args)
    loops = [
        name
        for name in available_loops(baseline=bool(args.baseline), compiled=has_compiled)
        if name != "raw"
    ]
    print(
        f"# Python {platform.python_version()}, snakeloop: {src_build()} build of src/; "
        f"{compiled_note}; {args.connections} idle connections, each after one round trip"
    )
    results = {}
    header = f"{'server':10} {'loop':10} {'KiB/conn':>9} {'conn/s':>9} {'latency µs':>11}"
    print(header)
    for kind in kinds:
        for loop_name in loops:
            figures = measure(loop_name, kind, args.connections)
            results[f"{kind}/{loop_name}"] = figures
            print(
                f"{kind:10} {loop_name:10} {figures['kib_per_connection']:9.2f} "
                f"{figures['accepted_per_second']:9.0f} {figures['latency_us']:11.1f}",
                flush=True,
            )
    print("# KiB per idle connection, as a ratio to uvloop's (below 1: less memory)")
    for kind in kinds:
        base = results.get(f"{kind}/uvloop")
        if base is None:
            continue
        uvloop_kib = base["kib_per_connection"]
        ratios = ", ".join(
            f"{name} {results[f'{kind}/{name}']['kib_per_connection'] / uvloop_kib:.2f}"
            for name in loops
        )
        print(f"#   {kind}: {ratios}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
