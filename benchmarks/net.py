"""Network benchmarks: echo and HTTP servers under a load from another process.

    python -m benchmarks.net [--quick] [--only tcp,unix,...] [--seconds S]

For each workload and each loop (stdlib, snakeloop, uvloop when importable)
a server runs in its own process on that loop, and a client process loads it
over loopback.  The client busy-polls with its own epoll loop, so it is never
the one asleep, and the figure reported is the *server's* CPU time per
request, read from ``/proc/PID/schedstat``: a cross-CPU wakeup costs tens of
microseconds on this kind of VM, so wall-clock throughput with one
connection mostly measures the hypervisor.  Throughput is printed too.

Every figure is also given as a ratio to the stdlib loop measured in the
same run (and to uvloop when present).  Lower CPU per request is better.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

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
    "tcp-10k-50": ("proto", "tcp", 10 * 1024, 50),
    "tcp-100k-1": ("proto", "tcp", 100 * 1024, 1),
    "streams-1k-1": ("streams", "tcp", 1024, 1),
    "streams-1k-50": ("streams", "tcp", 1024, 50),
    "unix-1k-50": ("proto", "unix", 1024, 50),
    "http-50": ("http", "tcp", 0, 50),
}


# -- server side (runs in the child process) -----------------------------------


class EchoProtocol(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


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


def new_loop(name):
    if name == "stdlib":
        return asyncio.SelectorEventLoop()
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    sys.path.insert(0, str(REPO / "src"))
    import snakeloop

    return snakeloop.new_event_loop()


def serve(loop_name, kind, family, address):
    loop = new_loop(loop_name)
    asyncio.set_event_loop(loop)

    async def main():
        if kind == "streams":
            if family == "unix":
                server = await asyncio.start_unix_server(echo_stream, address)
            else:
                server = await asyncio.start_server(echo_stream, "127.0.0.1", 0)
        else:
            factory = HttpProtocol if kind == "http" else EchoProtocol
            if family == "unix":
                server = await loop.create_unix_server(factory, address)
            else:
                server = await loop.create_server(factory, "127.0.0.1", 0)
        where = address if family == "unix" else server.sockets[0].getsockname()[1]
        print(f"ready {where}", flush=True)
        # Serve until the parent closes our stdin.
        await loop.run_in_executor(None, sys.stdin.read)
        server.close()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


# -- client side -------------------------------------------------------------------


def cpu_ns(pid):
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def load(family, where, size, connections, kind, seconds):
    """Send request/response rounds on every connection; return the count."""
    if kind == "http":
        request, expect = HTTP_REQUEST, len(HTTP_RESPONSE)
    else:
        request = os.urandom(size)
        expect = size
    socks = []
    for _ in range(connections):
        if family == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(where)
        else:
            s = socket.create_connection(("127.0.0.1", where))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        socks.append(s)
    ep = select.epoll()
    state = {}
    for s in socks:
        ep.register(s.fileno(), select.EPOLLIN)
        state[s.fileno()] = [s, 0]
        s.sendall(request)
    done = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for fd, _ in ep.poll(0):
            entry = state[fd]
            sock = entry[0]
            try:
                got = sock.recv(262144)
            except BlockingIOError:
                continue
            if not got:
                raise RuntimeError("server closed the connection")
            entry[1] += len(got)
            while entry[1] >= expect:
                entry[1] -= expect
                done += 1
                try:
                    sock.sendall(request)
                except BlockingIOError:
                    sock.setblocking(True)
                    sock.sendall(request)
                    sock.setblocking(False)
    ep.close()
    for s in socks:
        # Half-close and drain, so the server sees a clean EOF, not a reset.
        s.setblocking(True)
        s.settimeout(5)
        s.shutdown(socket.SHUT_WR)
        while s.recv(262144):
            pass
        s.close()
    return done


def measure(loop_name, workload, seconds):
    kind, family, size, connections = WORKLOADS[workload]
    address = ""
    tmp = None
    if family == "unix":
        tmp = tempfile.TemporaryDirectory()
        address = os.path.join(tmp.name, "bench.sock")
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.net", "--serve", loop_name, kind, family, address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=REPO,
        text=True,
    )
    try:
        line = proc.stdout.readline().split()
        if not line or line[0] != "ready":
            raise RuntimeError(f"{loop_name} server failed to start")
        where = line[1] if family == "unix" else int(line[1])
        # Warm up, then measure.
        load(family, where, size, connections, kind, min(0.3, seconds / 4))
        cpu0 = cpu_ns(proc.pid)
        t0 = time.perf_counter()
        count = load(family, where, size, connections, kind, seconds)
        wall = time.perf_counter() - t0
        cpu = cpu_ns(proc.pid) - cpu0
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
        if tmp is not None:
            tmp.cleanup()
    return count / wall, cpu / 1000 / max(count, 1)


def available_loops():
    loops = ["stdlib", "snakeloop"]
    try:
        import uvloop  # noqa: F401
    except ImportError:
        pass
    else:
        loops.append("uvloop")
    return loops


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (0.5 s each)")
    parser.add_argument("--seconds", type=float, default=2.0, help="load time per run")
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--serve", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    seconds = 0.5 if args.quick else args.seconds
    names = [n for n in args.only.split(",") if n] or list(WORKLOADS)
    loops = available_loops()
    print(
        f"# Python {platform.python_version()}, snakeloop interpreted build; "
        f"server CPU per request (µs, lower is better) and requests/s; {seconds:g} s per run"
    )
    header = f"{'workload':<16}" + "".join(f"{name:>22}" for name in loops)
    header += "   snake/stdlib" + ("   snake/uvloop" if "uvloop" in loops else "")
    print(header)
    for name in names:
        results = {loop: measure(loop, name, seconds) for loop in loops}
        row = f"{name:<16}"
        for loop in loops:
            rate, cpu = results[loop]
            row += f"{cpu:>10.2f} µs {rate:>8.0f}/s"
        snake = results["snakeloop"][1]
        row += f"{results['stdlib'][1] / snake:>14.2f}x"
        if "uvloop" in loops:
            row += f"{results['uvloop'][1] / snake:>14.2f}x"
        print(row, flush=True)
    print(
        "# ratios: the other loop's CPU per request divided by snakeloop's"
        " (>1: snakeloop is cheaper)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
