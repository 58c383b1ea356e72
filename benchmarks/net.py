"""Network benchmarks: echo and HTTP servers under a load from another process.

    python -m benchmarks.net [--quick] [--only tcp-1k-1,...] [--seconds S]
                             [--rounds N] [--placement same|split] [--json FILE]

For each workload and each server (stdlib, snakeloop, its compiled build, uvloop and rloop when
importable, and "raw", a hand-written epoll server with no event loop, the
floor a Python loop can reach) the server runs in its own process and a
client process loads it over loopback, each connection keeping one request
in flight.

The figure that matters is the *server's* CPU time per request, read from
``/proc/PID/schedstat`` over the measured window (lower is better); the
requests per second are printed too.  Where client and server run
(``--placement``):

* ``same`` (the default): both on CPU 0, the client blocking in epoll.  They
  take turns, so the server's CPU time is the cost of handling requests and
  nothing else: no idle spinning, no wake-ups across CPUs.
* ``split``: the server on CPU 1, the client busy-polling on CPU 0.  On a
  VM a wake-up from one CPU to the other costs tens of microseconds, and
  with one connection the server is woken for every request, so this
  placement mostly adds the hypervisor's cost to every loop alike.

Every server runs once per round, in rotating order; the median over the
rounds is reported, with ratios to the stdlib loop and to uvloop measured
in the same run.
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
import tempfile
import time

from .serverproc import (
    FRESH_ALLOCATOR_ENV,
    PLACEMENTS,
    REPO,
    SEEDED_PERTURB_ENV,
    add_build_arguments,
    available_loops,
    cpu_ns,
    new_loop,
    prepare_builds,
    settle_allocator,
    src_build,
)

HTTP_REQUEST = b"GET /hello HTTP/1.1\r\nHost: bench\r\n\r\n"
HTTP_BODY = b"Hello, world!"
HTTP_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
    + str(len(HTTP_BODY)).encode()
    + b"\r\n\r\n"
    + HTTP_BODY
)

# name: (server kind, socket family, message size, connections)
WORKLOADS = {
    "tcp-1k-1": ("proto", "tcp", 1024, 1),
    "tcp-1k-50": ("proto", "tcp", 1024, 50),
    "tcp-10k-1": ("proto", "tcp", 10 * 1024, 1),
    "tcp-10k-50": ("proto", "tcp", 10 * 1024, 50),
    "tcp-100k-1": ("proto", "tcp", 100 * 1024, 1),
    "tcp-100k-50": ("proto", "tcp", 100 * 1024, 50),
    "streams-1k-1": ("streams", "tcp", 1024, 1),
    "streams-1k-50": ("streams", "tcp", 1024, 50),
    "streams-10k-1": ("streams", "tcp", 10 * 1024, 1),
    "streams-10k-50": ("streams", "tcp", 10 * 1024, 50),
    "streams-100k-1": ("streams", "tcp", 100 * 1024, 1),
    "streams-100k-50": ("streams", "tcp", 100 * 1024, 50),
    "unix-1k-1": ("proto", "unix", 1024, 1),
    "unix-1k-50": ("proto", "unix", 1024, 50),
    "http-1": ("http", "tcp", 0, 1),
    "http-50": ("http", "tcp", 0, 50),
}
DEFAULT_WORKLOADS = [
    "tcp-1k-1",
    "tcp-1k-50",
    "tcp-10k-50",
    "tcp-100k-1",
    "streams-1k-1",
    "streams-1k-50",
    "unix-1k-50",
    "http-50",
]

# The raw server answers with one send() per read and gives up on a partial
# send, so it is the floor only where a reply always fits the socket buffer.
RAW_MAX_SIZE = 16 * 1024


# -- servers (each runs in a child process) ----------------------------------------


class EchoProtocol(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


class IdleTimeoutEchoProtocol(EchoProtocol):
    """An echo with the common server's idle timeout: a timer per connection, re-armed
    by each request (benchmarks.scale's ``timers`` kind)."""

    IDLE_TIMEOUT = 3600.0

    def connection_made(self, transport):
        self.transport = transport
        self.timer = asyncio.get_running_loop().call_later(self.IDLE_TIMEOUT, transport.close)

    def data_received(self, data):
        self.timer.cancel()
        self.timer = asyncio.get_running_loop().call_later(self.IDLE_TIMEOUT, self.transport.close)
        self.transport.write(data)

    def connection_lost(self, exc):
        self.timer.cancel()


class HttpProtocol(asyncio.Protocol):
    """Answers each complete request head with a fixed response."""

    def connection_made(self, transport):
        self.transport = transport
        self.pending = b""

    def data_received(self, data):
        data = self.pending + data
        count = data.count(b"\r\n\r\n")
        if count:
            self.transport.write(HTTP_RESPONSE * count)
            data = data[data.rindex(b"\r\n\r\n") + 4 :]
        self.pending = data


async def echo_stream(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


def listen(family, address):
    if family == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(address)
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
    sock.listen(1000)
    return sock


def serve_loop(loop_name, kind, family, address):
    settle_allocator()
    loop = new_loop(loop_name)
    asyncio.set_event_loop(loop)
    sock = listen(family, address)
    # Read before the server takes the socket: rloop detaches the socket object it is given.
    where = address if family == "unix" else sock.getsockname()[1]

    async def main():
        if kind == "streams":
            server = await asyncio.start_server(echo_stream, sock=sock)
        else:
            factory = {"http": HttpProtocol, "timers": IdleTimeoutEchoProtocol}.get(
                kind, EchoProtocol
            )
            server = await loop.create_server(factory, sock=sock)
        print(f"ready {where}", flush=True)
        # Serve until the parent closes our stdin.
        await loop.run_in_executor(None, sys.stdin.read)
        server.close()
        # The clients have closed their connections: the handlers whose EOF the loop
        # has not read yet end here.  Closed with their loop, each would print "Task
        # was destroyed but it is pending!" or "Event loop is closed".  (Cancelled,
        # on 3.11 each would print its CancelledError: StreamReaderProtocol's done
        # callback asks a cancelled task for its exception.)
        handlers = asyncio.all_tasks() - {asyncio.current_task()}
        if handlers:
            await asyncio.wait(handlers, timeout=30)

    try:
        loop.run_until_complete(main())
        metrics = getattr(loop, "metrics", None)
        if metrics is not None:
            # A slow stretch opens a timing window: every callback is then timed
            # for 10 s, which this server pays and no other loop's does.
            print(f"slow {metrics().slow_iterations}", flush=True)
    finally:
        loop.close()


def serve_raw(kind, family, address):
    """The floor: recv and send straight off epoll, no loop at all."""
    settle_allocator()
    listener = listen(family, address)
    listener.setblocking(False)
    ep = select.epoll()
    ep.register(listener.fileno(), select.EPOLLIN)
    stdin = sys.stdin.fileno()
    ep.register(stdin, select.EPOLLIN)
    conns = {}
    pending = {}
    where = address if family == "unix" else listener.getsockname()[1]
    print(f"ready {where}", flush=True)
    http = kind == "http"
    while True:
        for fd, _ in ep.poll():
            conn = conns.get(fd)
            if conn is None:
                if fd == stdin:
                    return
                sock, _ = listener.accept()
                sock.setblocking(False)
                if family != "unix":
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conns[sock.fileno()] = sock
                pending[sock.fileno()] = b""
                ep.register(sock.fileno(), select.EPOLLIN)
                continue
            data = conn.recv(65536)
            if not data:
                ep.unregister(fd)
                del conns[fd]
                conn.close()
                continue
            if http:
                data = pending[fd] + data
                count = data.count(b"\r\n\r\n")
                if count:
                    conn.send(HTTP_RESPONSE * count)
                    data = data[data.rindex(b"\r\n\r\n") + 4 :]
                pending[fd] = data
            elif conn.send(data) != len(data):
                raise RuntimeError("raw server: partial send")


# -- client --------------------------------------------------------------------------


def connect(family, where, connections):
    socks = []
    for _ in range(connections):
        if family == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(where)
        else:
            s = socket.create_connection(("127.0.0.1", where))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    return socks


def load(socks, request, expect, seconds, busy_poll, server_pid=None):
    """Keep one request in flight on every socket for ``seconds``.

    Returns (round trips, wall seconds, server CPU ns) over the window.
    Sockets stay blocking: a read happens only when epoll says there is
    data, and a blocking sendall never loses track of a partial send.
    """
    ep = select.epoll()
    # One reusable buffer: recv(262144) would make glibc mmap and munmap a
    # block per call, and the client would measure its allocator.
    view = memoryview(bytearray(262144))
    owed = {}  # fd -> bytes of the reply in flight not received yet
    by_fd = {}
    for s in socks:
        ep.register(s.fileno(), select.EPOLLIN)
        by_fd[s.fileno()] = s
        s.sendall(request)
        owed[s.fileno()] = expect
    timeout = 0 if busy_poll else 0.5
    poll = ep.poll
    now = time.perf_counter
    cpu0 = cpu_ns(server_pid) if server_pid else 0
    start = now()
    deadline = start + seconds
    done = 0
    while now() < deadline:
        for fd, _ in poll(timeout):
            got = by_fd[fd].recv_into(view)
            if not got:
                raise RuntimeError("the server closed the connection")
            left = owed[fd] - got
            if left:
                owed[fd] = left
            else:
                done += 1
                by_fd[fd].sendall(request)
                owed[fd] = expect
    wall = now() - start
    cpu = cpu_ns(server_pid) - cpu0 if server_pid else 0
    # Collect the replies still in flight, so that every connection is
    # quiet when the window ends.
    for fd, sock in by_fd.items():
        left = owed[fd]
        while left:
            got = sock.recv_into(view[:left])
            if not got:
                raise RuntimeError("the server closed the connection")
            left -= got
    ep.close()
    return done, wall, cpu


def measure(loop_name, workload, seconds, placement):
    kind, family, size, connections = WORKLOADS[workload]
    server_cpu, client_cpu = PLACEMENTS[placement]
    tmp = tempfile.TemporaryDirectory() if family == "unix" else None
    address = os.path.join(tmp.name, "bench.sock") if tmp else ""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.net", "--serve", loop_name, kind, family, address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=REPO,
        text=True,
    )
    mask = os.sched_getaffinity(0)
    socks = []
    try:
        os.sched_setaffinity(proc.pid, {server_cpu})
        os.sched_setaffinity(0, {client_cpu})
        line = proc.stdout.readline().split()
        if not line or line[0] != "ready":
            raise RuntimeError(f"{loop_name} server failed to start")
        where = line[1] if family == "unix" else int(line[1])
        if kind == "http":
            request, expect = HTTP_REQUEST, len(HTTP_RESPONSE)
        else:
            request, expect = os.urandom(size), size
        socks = connect(family, where, connections)
        busy_poll = placement == "split"
        load(socks, request, expect, min(0.3, seconds / 4), busy_poll)  # warm-up
        count, wall, cpu = load(socks, request, expect, seconds, busy_poll, proc.pid)
    finally:
        for s in socks:
            s.close()
        os.sched_setaffinity(0, mask)
        # Closing its stdin stops the server; it then prints what it saw.
        tail = proc.communicate(timeout=10)[0].split()
        if tmp is not None:
            tmp.cleanup()
    result = {"rate": count / wall, "cpu_us": cpu / 1000 / max(count, 1)}
    if tail[:1] == ["slow"]:
        result["slow_stretches"] = int(tail[1])
    return result


# -- driver --------------------------------------------------------------------------


def servers_for(workload, loops):
    kind, family, size, _ = WORKLOADS[workload]
    left_out = set()
    if kind == "streams" or size > RAW_MAX_SIZE:
        left_out.add("raw")
    if family == "unix":
        # rloop 0.5's Unix server resets the load's connections (seen on unix-1k-50).
        left_out.add("rloop")
    return [name for name in loops if name not in left_out]


def ratio(value, base):
    return f"{value / base:.2f}" if base else "-"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of 0.5 s per server")
    parser.add_argument("--seconds", type=float, default=2.0, help="load time per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per server (median)")
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--placement", choices=sorted(PLACEMENTS), default="same")
    parser.add_argument(
        "--fresh-allocator",
        action="store_true",
        help="servers skip settling glibc's allocator (see benchmarks/README.md)",
    )
    parser.add_argument(
        "--stdlib-futures", action="store_true", help="also run snakeloop with stdlib_futures=True"
    )
    parser.add_argument(
        "--seeded",
        nargs="?",
        const="default",
        metavar="PERTURB",
        help="also run snakeloop seeded with seed=1 and this perturbation (default: the "
        "default set): what seeding costs when it is on",
    )
    parser.add_argument(
        "--metrics-off",
        action="store_true",
        help="also run snakeloop with metrics=False: what the always-on metrics cost",
    )
    add_build_arguments(parser)
    parser.add_argument("--json", metavar="FILE", help="also write every sample to FILE")
    parser.add_argument("--serve", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        loop_name, kind, family, address = args.serve
        if loop_name == "raw":
            serve_raw(kind, family, address)
        else:
            serve_loop(loop_name, kind, family, address)
        return 0
    if os.cpu_count() < 2 and args.placement == "split":
        parser.error("--placement split needs two CPUs")
    if args.fresh_allocator:
        os.environ[FRESH_ALLOCATOR_ENV] = "1"  # inherited by the servers
    if args.seeded:
        os.environ[SEEDED_PERTURB_ENV] = args.seeded
    seconds, rounds = (0.5, 1) if args.quick else (args.seconds, args.rounds)
    names = [n for n in args.only.split(",") if n] or DEFAULT_WORKLOADS
    for name in names:
        if name not in WORKLOADS:
            parser.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    has_compiled, compiled_note = prepare_builds(parser, args)
    loops = available_loops(
        args.stdlib_futures, bool(args.baseline), bool(args.seeded), args.metrics_off, has_compiled
    )
    print(
        f"# Python {platform.python_version()}, snakeloop: {src_build()} build of src/; "
        f"{compiled_note}; "
        f"placement {args.placement}; {rounds} round(s) of {seconds:g} s; "
        f"allocator {'fresh' if args.fresh_allocator else 'settled'}; "
        "server CPU per request in µs (lower is better), median over the rounds"
    )
    header = f"{'workload':<15}" + "".join(f"{name:>11}" for name in loops)
    header += f"{'snake/stdlib':>14}{'snake/uvloop':>14}"
    header += f"{'comp/uvloop':>13}" if has_compiled else ""
    header += f"{'snake/base':>12}" if args.baseline else ""
    header += f"{'comp/base':>11}" if args.baseline and has_compiled else ""
    header += f"{'seeded/snake':>14}" if args.seeded else ""
    header += f"{'on/off':>10}" if args.metrics_off else ""
    header += f"{'snake rt/s':>12}"
    print(header)
    samples = {}
    for workload in names:
        servers = servers_for(workload, loops)
        runs = {name: [] for name in servers}
        for round_ in range(rounds):
            shift = round_ % len(servers)
            for name in servers[shift:] + servers[:shift]:
                runs[name].append(measure(name, workload, seconds, args.placement))
        samples[workload] = runs
        cpu = {name: statistics.median(r["cpu_us"] for r in rs) for name, rs in runs.items()}
        rate = statistics.median(r["rate"] for r in runs["snakeloop"])
        row = f"{workload:<15}"
        row += "".join(f"{cpu[name]:>11.2f}" if name in cpu else f"{'-':>11}" for name in loops)
        # CPU ratios are "other / snakeloop": above 1, snakeloop is cheaper.
        row += f"{ratio(cpu['stdlib'], cpu['snakeloop']):>14}"
        row += f"{ratio(cpu.get('uvloop', 0), cpu['snakeloop']):>14}"
        if has_compiled:
            row += f"{ratio(cpu.get('uvloop', 0), cpu['compiled']):>13}"
        if args.baseline:
            row += f"{ratio(cpu['baseline'], cpu['snakeloop']):>12}"
            if has_compiled:
                row += f"{ratio(cpu['base-comp'], cpu['compiled']):>11}"
        if args.seeded:
            # The other way round: above 1, the seeded loop costs more.
            row += f"{ratio(cpu['seeded'], cpu['snakeloop']):>14}"
        if args.metrics_off:
            # Above 1: the loop with metrics on (the default) is cheaper.
            row += f"{ratio(cpu['no-metrics'], cpu['snakeloop']):>10}"
        row += f"{rate:>12.0f}"
        print(row, flush=True)
        slowed = {
            name: sum(r.get("slow_stretches", 0) > 0 for r in rs)
            for name, rs in runs.items()
            if any(r.get("slow_stretches", 0) for r in rs)
        }
        if slowed:
            print(
                "#   a slow stretch (and a timing window) in "
                + ", ".join(f"{n} of {name}'s {rounds} runs" for name, n in slowed.items()),
                flush=True,
            )
    speedups = {}  # loop -> [stdlib's CPU per request / the loop's, per workload]
    for runs in samples.values():
        base = statistics.median(r["cpu_us"] for r in runs["stdlib"])
        for name, rs in runs.items():
            speedups.setdefault(name, []).append(base / statistics.median(r["cpu_us"] for r in rs))
    print(
        "# geometric mean over the workloads of stdlib's CPU per request / the server's: "
        + ", ".join(
            f"{name} {statistics.geometric_mean(values):.2f}x"
            for name, values in speedups.items()
            if name != "raw" and len(values) == len(samples)
        )
    )
    print(
        "# ratios: the other server's CPU per request divided by snakeloop's"
        " (above 1: snakeloop is cheaper); raw: no event loop, shown where it applies"
    )
    if args.baseline:
        print(f"# baseline: snakeloop at {args.baseline}, from the same repository")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(samples, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
