"""Instructions per operation of each scheduling workload, counted by callgrind.

Timings on a small shared VM move by 10-50% between runs; instruction counts repeat to
within about 1%. So a change to the hot path is judged here first, and timed in
``python3 -m benchmarks`` second. Each (workload, loop) pair runs twice under
``valgrind --tool=callgrind``, in a fresh process, at two sizes; the difference of the two
totals over the difference of the operations leaves out start-up, imports and set-up::

    python3 -m benchmarks.instructions                       # pure, compiled, uvloop
    python3 -m benchmarks.instructions --only spawn,sleep0 --loops pure,compiled,uvloop
    python3 -m benchmarks.instructions --baseline main --loops pure,baseline-pure

Loops: ``stdlib``, ``pure`` (this checkout's ``src``), ``compiled`` (the same ``src``
compiled as setup.py compiles it, see ``benchmarks.compiled``), ``baseline-pure`` and
``baseline-compiled`` (``--baseline REV``), ``uvloop`` and ``rloop``; a snakeloop loop's
name may end in ``+C`` (``stdlib_futures=True``: asyncio's C Future and Task) or ``+own``
(snakeloop's own), as in ``--loops compiled+C,compiled+own,uvloop``.

``--only echo-protocol,echo-streams,echo-udp`` adds three rows that the default leaves
out: the server's instructions per 1 KiB round trip of an echo over one TCP
connection, and per 1 KiB datagram echoed to 50 UDP sockets, loaded by a client in
another process (not counted).  ``--only echo-idle,echo-idle-timers`` counts the
protocol echo among 10,000 idle connections, without and with an idle-timeout timer
per connection re-armed by each request (benchmarks.scale's ``timers`` kind).

With ``SNAKELOOP_CALLGRIND_DIR=DIR`` each run's profile is kept in DIR as
``LOOP.WORKLOAD.SCALE.out``: ``callgrind_annotate`` of the two sizes of a row, subtracted
function by function, says where its instructions per operation go.

Traps: the timer-churn row batches its timers by how fast the loop runs, so its
count under valgrind is not the one the timed run sees (compare builds of one loop
with it, not loops); a pure tree's count depends on the directory it sits in, so
compare pure trees only when both are copies, as ``--baseline`` makes them; a
loop's ``slow_callback_duration`` is multiplied by ``VALGRIND_SLOWDOWN`` in the
counted process, or snakeloop's slow-stretch detector would open a timing window in
every long batch, which a real run does not (before this, the timers row counted
one: about 5,000 of its instructions per fire); and the echo rows need a quiet
machine: a client starved of CPU makes the server poll more, and its count moves by
up to 2x (on a quiet one, by about 1%).  The scheduling rows want one too: with CI's
two jobs on both cores, one revision's interpreted spawn row counted 30,116 in one run
and 34,545 in another (sleep0 7,258 and 8,139), where on a quiet machine two runs
agree within 0.2%.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from . import baseline, compiled
from .workloads import WORKLOADS

REPO = Path(__file__).resolve().parent.parent
DEFAULT_LOOPS = "pure,compiled,uvloop"
LOOPS = ("stdlib", "pure", "compiled", "baseline-pure", "baseline-compiled", "uvloop", "rloop")
# (smaller, larger) scale: large enough that per-operation work dominates the difference.
SCALES = (0.2, 0.4)
# How much slower a program runs under callgrind, roughly (see _child).
VALGRIND_SLOWDOWN = 100
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")
# A folder in which to keep each run's callgrind profile (see _out_file).
KEEP_PROFILES_ENV = "SNAKELOOP_CALLGRIND_DIR"


# A snakeloop loop's name may end in "+C" (stdlib_futures=True: asyncio's C Future and
# Task) or "+own" (stdlib_futures=False: snakeloop's own), to count either task kind.
TASK_KINDS = {"+C": True, "+own": False}


def _base_name(loop: str) -> str:
    return loop.split("+")[0]


def _factory(loop: str, where: str):
    for suffix, stdlib_futures in TASK_KINDS.items():
        if loop.endswith(suffix):
            make = _factory(loop[: -len(suffix)], where)
            return functools.partial(make, stdlib_futures=stdlib_futures)
    if loop == "stdlib":
        import asyncio

        return asyncio.SelectorEventLoop
    if loop in ("uvloop", "rloop"):
        return importlib.import_module(loop).new_event_loop
    if loop == "pure":
        sys.path.insert(0, where)
        return importlib.import_module("snakeloop").new_event_loop
    if loop == "baseline-pure":
        return baseline.load(where).new_event_loop
    # compiled and baseline-compiled: a compiled copy's directory
    return compiled.load(where).new_event_loop


# A 1 KiB echo client, run by the echo rows in a process of its own: valgrind
# traces only the server's process, and a client thread would share its GIL.
_ECHO_CLIENT = """
import socket, sys
port, rounds = int(sys.argv[1]), int(sys.argv[2])
message = b"x" * 1024
with socket.create_connection(("127.0.0.1", port)) as sock:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(rounds):
        sock.sendall(message)
        received = 0
        while received < len(message):
            received += len(sock.recv(65536))
"""


def _echo(streams: bool):
    def echo(loop, scale):
        rounds = int(10_000 * scale)

        async def main():
            finished = loop.create_future()

            class Echo(asyncio.Protocol):
                def connection_made(self, transport):
                    self.transport = transport

                def data_received(self, data):
                    self.transport.write(data)

                def connection_lost(self, exc):
                    finished.set_result(None)

            async def handle(reader, writer):
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
                writer.close()
                finished.set_result(None)

            if streams:
                server = await asyncio.start_server(handle, "127.0.0.1", 0)
            else:
                server = await loop.create_server(Echo, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            client = subprocess.Popen([sys.executable, "-c", _ECHO_CLIENT, str(port), str(rounds)])
            try:
                await finished
            finally:
                server.close()
                await server.wait_closed()
                client.wait()

        loop.run_until_complete(main())
        return rounds, 0.0

    return echo


# A UDP echo client with UDP_CLIENTS sockets, each keeping one 1 KiB datagram in
# flight (benchmarks.bench_udp's shape), in a process of its own as above.  One
# in flight per socket keeps the server's receive buffer from overflowing, so no
# datagram is lost however slowly valgrind runs the server.
UDP_CLIENTS = 50
_UDP_CLIENT = """
import select, socket, sys
port, rounds, clients = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
message = b"x" * 1024
epoll = select.epoll()
by_fd = {}
for _ in range(clients):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    by_fd[sock.fileno()] = sock
    epoll.register(sock.fileno(), select.EPOLLIN)
sent = received = 0
for sock in list(by_fd.values())[:rounds]:
    sock.send(message)
    sent += 1
while received < rounds:
    for fd, _ in epoll.poll():
        sock = by_fd[fd]
        while True:
            try:
                sock.recv(65536)
            except BlockingIOError:
                break
            received += 1
            if sent < rounds:
                sock.send(message)
                sent += 1
"""


def _echo_udp(loop, scale):
    rounds = int(10_000 * scale)

    async def main():
        finished = loop.create_future()

        class Echo(asyncio.DatagramProtocol):
            def __init__(self):
                self.count = 0

            def connection_made(self, transport):
                self.transport = transport

            def datagram_received(self, data, addr):
                self.transport.sendto(data, addr)
                self.count += 1
                if self.count == rounds:
                    finished.set_result(None)

        transport, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
        port = transport.get_extra_info("sockname")[1]
        command = [sys.executable, "-c", _UDP_CLIENT, str(port), str(rounds), str(UDP_CLIENTS)]
        client = subprocess.Popen(command)
        try:
            await finished
        finally:
            transport.close()
            client.wait()

    loop.run_until_complete(main())
    return rounds, 0.0


# The echo among idle connections (issue 33, item 4): IDLE connections held open by a
# process of benchmarks.scale's, after one round trip each, then the echo client's
# rounds on a connection of its own.  With ``timers``, the server's protocol is
# benchmarks.net's idle-timeout echo: every connection holds a timer an hour away and
# each request re-arms its own, so the pair of rows says what the pending timers and
# the re-arming cost a request, as a count where benchmarks.scale's CPU time moves by
# tens of percent between runs.  The connections' set-up is the same at both sizes,
# so the difference of the two counts leaves it out.  Count snakeloop with
# SNAKELOOP_METRICS=0 beside uvloop: with the metrics on, the compiled build's echo-idle
# counted 8,546 per request and 5,048 without (3.11).  Not yet explained: likely work the
# metrics do by the clock, which valgrind spreads over fifty times fewer requests.
IDLE = 10_000


def _echo_among_idle(timers: bool):
    def echo(loop, scale):
        from .net import EchoProtocol, IdleTimeoutEchoProtocol
        from .scale import FD_MARGIN, raise_file_limit

        if raise_file_limit(IDLE + FD_MARGIN) < IDLE + FD_MARGIN:
            raise SystemExit(f"the server may not open {IDLE} files here")
        # Ten times the other echo rows' rounds: how the 10,000 accepts batch moves
        # their count by millions between runs, which the difference must dwarf.
        rounds = int(100_000 * scale)
        protocol = IdleTimeoutEchoProtocol if timers else EchoProtocol

        async def main():
            server = await loop.create_server(protocol, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            # A source address no earlier run used: the ports of a closed run's
            # connections stay in TIME_WAIT, and a connect then searches for a free
            # one (benchmarks.scale's docstring).
            pid = os.getpid()
            source = f"127.{2 + pid // 62_500 % 200}.{pid // 250 % 250}.{pid % 250 + 1}"
            hold = ["-m", "benchmarks.scale", "--hold", str(port), str(IDLE), source]
            holder = await asyncio.create_subprocess_exec(
                sys.executable,
                *hold,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=REPO,
            )
            try:
                assert await holder.stdout.readline() == b"ready\n"
                holder.stdin.write(b"go\n")
                assert await holder.stdout.readline() == b"held\n"
                client = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", _ECHO_CLIENT, str(port), str(rounds)
                )
                if await client.wait():
                    raise RuntimeError("the echo client failed")
            finally:
                holder.stdin.close()
                await holder.wait()
                server.close()
                await server.wait_closed()

        loop.run_until_complete(main())
        return rounds, 0.0

    return echo


# Server-side instructions per 1 KiB round trip: on one TCP connection, a Protocol
# that writes back what it receives and asyncio streams (read, write, drain); and
# per datagram echoed by a DatagramProtocol to UDP_CLIENTS sockets.
ECHO_WORKLOADS = {
    "echo-protocol": _echo(streams=False),
    "echo-streams": _echo(streams=True),
    "echo-udp": _echo_udp,
    "echo-idle": _echo_among_idle(timers=False),
    "echo-idle-timers": _echo_among_idle(timers=True),
}


def _child(loop: str, where: str, workload: str, scale: float) -> None:
    functions = {name: fn for name, _, _, fn in WORKLOADS}
    function = {**functions, **ECHO_WORKLOADS}[workload]
    factory = _factory(loop, where)
    event_loop = factory()
    if hasattr(event_loop, "slow_callback_duration"):
        # Valgrind runs the program 50-100 times slower: a loop that times its
        # callbacks (snakeloop's slow-stretch detector) would see every long
        # batch as slow and time each callback from then on, which no real run
        # of these workloads does.  Its threshold is stretched by as much.
        event_loop.slow_callback_duration *= VALGRIND_SLOWDOWN
    try:
        operations, _ = function(event_loop, scale)
    finally:
        event_loop.close()
    print(f"operations {operations}")


def _out_file(loop: str, workload: str, scale: float) -> str:
    """Where callgrind writes its profile: ``$SNAKELOOP_CALLGRIND_DIR`` keeps them, one per
    run, for ``callgrind_annotate`` to say where the instructions of a row go."""
    folder = os.environ.get(KEEP_PROFILES_ENV)
    if not folder:
        return "/dev/null"
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{loop}.{workload}.{scale}.out")


def _fixed_layout() -> list[str]:
    """The prefix that runs a command with address-space randomization off, where it can.

    CPython's type-attribute cache picks a slot from the name object's address, so where
    the interpreter's objects land moves a row's count between runs of the same code (the
    compiled echo-streams row sat at 25,040, 25,220 or 25,550 by run, and 24,706 to 24,722
    with randomization off).  The layout still depends on the command line, so compare
    loops measured in the same call."""
    setarch = shutil.which("setarch")
    if setarch is None or not sys.platform.startswith("linux"):
        return []
    return [setarch, os.uname().machine, "-R"]


def _count(loop: str, where: str, workload: str, scale: float) -> tuple[int, int]:
    command = [
        *_fixed_layout(),
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={_out_file(loop, workload, scale)}",
        sys.executable,
        "-m",
        "benchmarks.instructions",
        "--child",
        loop,
        where,
        workload,
        str(scale),
    ]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    # A fixed hash seed makes the counts repeat; the caller may choose another.
    env.setdefault("PYTHONHASHSEED", "0")
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env)
    found = _COLLECTED.search(result.stderr)
    if result.returncode != 0 or found is None:
        raise RuntimeError(f"{loop} {workload}: {result.stdout}{result.stderr[-2000:]}")
    operations = int(result.stdout.split("operations")[-1])
    return int(found.group(1)), operations


def per_operation(loop: str, where: str, workload: str) -> float:
    (small, small_ops), (large, large_ops) = (
        _count(loop, where, workload, scale) for scale in SCALES
    )
    if large_ops <= small_ops:
        raise RuntimeError(f"{workload}: the two sizes ran {small_ops} and {large_ops} operations")
    return (large - small) / (large_ops - small_ops)


def _locations(loops: list[str], revision: str | None) -> dict[str, str]:
    where = {"pure": str(REPO / "src")}
    loops = [_base_name(loop) for loop in loops]
    if "compiled" in loops:
        where["compiled"] = str(compiled.build())
    if "baseline-pure" in loops or "baseline-compiled" in loops:
        if not revision:
            raise SystemExit("the baseline loops need --baseline REV")
        directory = baseline.extract(revision)
        where["baseline-pure"] = str(directory)
        if "baseline-compiled" in loops:
            # By the revision's own setup.py: its list of compiled modules is its own.
            built = compiled.build(directory / baseline.PACKAGE, setup=directory / "setup.py")
            where["baseline-compiled"] = str(built)
    return where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.instructions")
    names = [name for name, *_ in WORKLOADS] + list(ECHO_WORKLOADS)
    parser.add_argument("--only", help="comma-separated workloads: " + ",".join(names))
    parser.add_argument("--loops", default=DEFAULT_LOOPS, help=",".join(LOOPS))
    parser.add_argument("--baseline", metavar="REV", help="the git revision of baseline-*")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        loop, where, workload, scale = args.child
        _child(loop, where, workload, float(scale))
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    loops = args.loops.split(",")
    unknown = {_base_name(loop) for loop in loops} - set(LOOPS)
    if unknown:
        raise SystemExit(f"unknown loops: {', '.join(sorted(unknown))}")
    chosen = args.only.split(",") if args.only else [name for name, *_ in WORKLOADS]
    unknown = set(chosen) - set(names)
    if unknown:
        raise SystemExit(f"unknown workloads: {', '.join(sorted(unknown))}")
    where = _locations(loops, args.baseline)
    print(f"Python {sys.version.split()[0]}; callgrind instructions per operation")
    print("| workload | " + " | ".join(loops) + " |")
    print("|---|" + "---:|" * len(loops))
    for workload in chosen:
        counts = []
        for loop in loops:
            try:
                location = where.get(_base_name(loop), "")
                counts.append(f"{per_operation(loop, location, workload):,.0f}")
            except (RuntimeError, ImportError) as exc:
                print(f"  {loop} {workload} failed: {exc}", file=sys.stderr)
                counts.append("-")
        print(f"| {workload} | " + " | ".join(counts) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
