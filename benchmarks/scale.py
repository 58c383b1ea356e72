"""At scale: what N idle connections cost a server, in memory and in latency.

    python -m benchmarks.scale [--connections N] [--only proto,streams] [--no-compiled]
                               [--baseline REV] [--json FILE]

For each server kind (``proto``: ``loop.create_server`` with an echo protocol;
``timers``: the same with an idle-timeout timer per connection, an hour away and
re-armed by each request, as servers keep one; ``streams``: ``asyncio.start_server``,
a task, a StreamReader and a StreamWriter per connection) and each loop (stdlib,
snakeloop, its compiled build, uvloop and rloop when they import), one after the
other, a server runs in a process of its own (``benchmarks.net``'s) and client
processes open N connections to it over loopback.
Each connection does one 16-byte round trip and then stays open and idle.  Reported:

* the server's RSS growth over the N connections, per connection, in KiB, from
  ``/proc/PID/status`` (``VmRSS``), measured after 100 connections made first, so
  that imports, the loop and the first allocations are left out;
* how long the N connections took to be accepted and answered, as connections per
  second (the clients run on the other CPU);
* the latency of one request to one connection among the N idle ones: the median
  of 2,000 round trips, in microseconds;
* the server's CPU time per request over those round trips (``/proc/PID/schedstat``),
  which with ``timers`` beside ``proto`` says what N pending timers and a re-armed
  one cost a request.

OS facts it relies on:

* A process may hold as many open files as its ``RLIMIT_NOFILE`` allows.  The soft
  limit is raised to what the server or a client needs, up to the hard limit; a
  process with ``CAP_SYS_RESOURCE`` (root) raises the hard limit too, up to
  ``fs.nr_open``.  So N is capped by the hard limit where the process may not raise
  it (20,000 on these machines, even as root: the default N of 10,000 fits), and
  goes to 100,000 and beyond where it may.
* A TCP connection is told apart by its four addresses and ports, and a client's
  port comes from ``net.ipv4.ip_local_port_range`` (about 28,000 ports): from one
  source address to one server port, no more connections than that.  A closed
  connection's port stays in TIME_WAIT for 60 s on the side that closed first (the
  clients), and with tens of thousands of them the kernel's search for a free port
  made each connect slow (a run's system time was 61 s, and the servers measured
  after the first ones accepted 20 times slower).  Every address of 127.0.0.0/8 is
  the loopback's on Linux, so each client process of each run connects from a
  source address no other has used (127.1.0.1, 127.1.0.2, ...), with at most
  20,000 connections each.
* RSS counts pages the process touched, so a connection's cost is the mean over
  many, never one connection's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import time

from .serverproc import (
    REPO,
    add_build_arguments,
    available_loops,
    cpu_ns,
    prepare_builds,
    src_build,
)

KINDS = ("proto", "timers", "streams")
WARM_CONNECTIONS = 100
CLIENT_PROCESSES = 4
# Connections one client process opens at most (from one source address: see above).
PER_CLIENT = 20_000
# A fresh loopback source address for each client process (see above).
_SOURCES = (f"127.1.{k // 250}.{k % 250 + 1}" for k in itertools.count())
LATENCY_ROUNDS = 2000
MESSAGE = b"0123456789abcdef"
# Sockets the server or a client holds besides the connections.
FD_MARGIN = 200


def raise_file_limit(needed):
    """Raise this process's limit of open files toward ``needed``; return the limit now.

    Past the hard limit only where the process may raise it (root)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if needed > hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))
        except (ValueError, OSError):
            pass
        else:
            return needed
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


def open_connections(port, count, source="127.0.0.1"):
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), source_address=(source, 0))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(sock)
        round_trip(sock)
    return socks


def hold_clients(port, count, source):
    """A client process: once told to go, open ``count`` connections from ``source``,
    say so, and hold them until stdin closes (a process's start-up is not the server's
    time)."""
    if raise_file_limit(count + FD_MARGIN) < count + FD_MARGIN:
        raise SystemExit(f"a client may not open {count} files here")
    print("ready", flush=True)
    sys.stdin.readline()
    socks = open_connections(port, count, source)
    print("held", flush=True)
    sys.stdin.read()
    for sock in socks:
        sock.close()


def measure(loop_name, kind, connections):
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.scale",
            "--serve",
            loop_name,
            kind,
            str(connections + WARM_CONNECTIONS + FD_MARGIN),
        ],
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
        processes = max(CLIENT_PROCESSES, -(-connections // PER_CLIENT))
        share, extra = divmod(connections, processes)
        for index in range(processes):
            count = share + (1 if index < extra else 0)
            source = next(_SOURCES)
            client = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.scale", "--hold", str(port), str(count), source],
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
        cpu_before = cpu_ns(server.pid)
        for _ in range(LATENCY_ROUNDS):
            t0 = time.perf_counter()
            round_trip(probe)
            samples.append(time.perf_counter() - t0)
        cpu_after = cpu_ns(server.pid)
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
        "cpu_us_per_request": (cpu_after - cpu_before) / LATENCY_ROUNDS / 1e3,
    }


def serve(loop_name, kind, files):
    raise_file_limit(int(files))
    from .net import serve_loop

    serve_loop(loop_name, kind, "tcp", "")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=10_000, help="idle connections")
    parser.add_argument("--only", default="", help="server kinds: proto,streams")
    add_build_arguments(parser)
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--hold", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    if args.hold:
        hold_clients(int(args.hold[0]), int(args.hold[1]), args.hold[2])
        return 0
    kinds = [k for k in args.only.split(",") if k] or list(KINDS)
    for kind in kinds:
        if kind not in KINDS:
            parser.error(f"unknown server kind {kind!r}; choose from {', '.join(KINDS)}")
    # The server's need; this process tries the same, to tell in advance.
    needed = args.connections + WARM_CONNECTIONS + FD_MARGIN
    limit = raise_file_limit(needed)
    if limit < needed:
        parser.error(
            f"--connections {args.connections} needs {needed} open files in the server, "
            f"and RLIMIT_NOFILE allows {limit} here: ask for fewer, or raise the hard "
            "limit (ulimit -Hn, or run as root)"
        )
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
    header = (
        f"{'server':10} {'loop':10} {'KiB/conn':>9} {'conn/s':>9} {'latency µs':>11} "
        f"{'CPU µs/req':>11}"
    )
    print(header)
    for kind in kinds:
        for loop_name in loops:
            figures = measure(loop_name, kind, args.connections)
            results[f"{kind}/{loop_name}"] = figures
            print(
                f"{kind:10} {loop_name:10} {figures['kib_per_connection']:9.2f} "
                f"{figures['accepted_per_second']:9.0f} {figures['latency_us']:11.1f} "
                f"{figures['cpu_us_per_request']:11.2f}",
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
    if "proto" in kinds and "timers" in kinds:
        print("# CPU per request with a pending timer per connection, over without (timers/proto)")
        ratios = ", ".join(
            f"{name} {results[f'timers/{name}']['cpu_us_per_request'] / cpu:.3f}"
            for name in loops
            if (cpu := results[f"proto/{name}"]["cpu_us_per_request"])
        )
        print(f"#   {ratios}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
