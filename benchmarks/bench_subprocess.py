"""Subprocess and pipe benchmark: snakeloop against the stdlib loop.

    python -m benchmarks.bench_subprocess [--quick] [--rounds N] [--json FILE]

Workloads (each a fresh loop per round, both loops in the same run):

* ``spawn1``: ``create_subprocess_exec("true")`` then ``wait()``, one at a
  time: spawns per second;
* ``spawn16``: the same, 16 in flight at once: spawns per second;
* ``pipe64``: 64 MiB written with ``connect_write_pipe`` into an
  ``os.pipe()`` and read back with ``connect_read_pipe`` in the same loop,
  1 MiB writes with flow control: MiB per second.

Every round runs each loop once, in alternating order; the median over the
rounds is reported with the snakeloop/stdlib ratio (above 1.0: snakeloop is
faster).  Spawning is dominated by fork/exec in the kernel, which both loops
pay alike; the ratio shows the loop's own overhead around it.  The header
names the Python version and whether snakeloop runs interpreted or compiled.
On a busy machine, ``--cpu-time`` divides by the process's CPU time instead
of the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

import snakeloop  # noqa: E402

TRUE = shutil.which("true") or "/bin/true"


def new_loop(name: str) -> asyncio.AbstractEventLoop:
    if name == "stdlib":
        return asyncio.SelectorEventLoop()
    return snakeloop.new_event_loop()


async def spawn_sequential(count: int) -> int:
    for _ in range(count):
        proc = await asyncio.create_subprocess_exec(TRUE)
        await proc.wait()
    return count


async def spawn_parallel(count: int, width: int = 16) -> int:
    sem = asyncio.Semaphore(width)

    async def one():
        async with sem:
            proc = await asyncio.create_subprocess_exec(TRUE)
            await proc.wait()

    await asyncio.gather(*(one() for _ in range(count)))
    return count


async def pipe_stream(mib: int) -> int:
    loop = asyncio.get_running_loop()
    r, w = os.pipe()
    chunk = os.urandom(1 << 20)
    done = loop.create_future()
    received = 0

    class Reader(asyncio.Protocol):
        def data_received(self, data):
            nonlocal received
            received += len(data)

        def connection_lost(self, exc):
            done.set_result(None)

    class Writer(asyncio.BaseProtocol):
        resumed = None

        def pause_writing(self):
            self.resumed = loop.create_future()

        def resume_writing(self):
            self.resumed.set_result(None)

    await loop.connect_read_pipe(Reader, open(r, "rb", 0))
    transport, writer = await loop.connect_write_pipe(Writer, open(w, "wb", 0))
    for _ in range(mib):
        transport.write(chunk)
        if writer.resumed is not None:
            await writer.resumed
            writer.resumed = None
    transport.close()
    await done
    if received != mib << 20:
        raise AssertionError(f"received {received} bytes, expected {mib << 20}")
    return mib


WORKLOADS = {
    # name: (coroutine function, full size, unit)
    "spawn1": (spawn_sequential, 300, "spawns/s"),
    "spawn16": (spawn_parallel, 600, "spawns/s"),
    "pipe64": (pipe_stream, 64, "MiB/s"),
}


def measure(loop_name: str, workload: str, size: int, clock=time.perf_counter) -> float:
    func, _, _ = WORKLOADS[workload]
    loop = new_loop(loop_name)
    try:
        start = clock()
        done = loop.run_until_complete(func(size))
        elapsed = clock() - start
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
    return done / elapsed


def build_kind() -> str:
    import snakeloop._core.runloop as runloop

    return "interpreted" if runloop.__file__.endswith(".py") else "compiled"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="quarter sizes, 3 rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--json", default=None, help="write every sample here")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="divide by this process's CPU time (all its threads) instead of wall time: "
        "steadier on a busy machine, and it charges the stdlib its watcher threads",
    )
    args = parser.parse_args(argv)

    rounds = args.rounds or (3 if args.quick else 5)
    names = [n for n in args.only.split(",") if n] or list(WORKLOADS)
    clock = time.process_time if args.cpu_time else time.perf_counter
    print(
        f"# Python {platform.python_version()} ({platform.python_implementation()}), "
        f"snakeloop {snakeloop.__version__} {build_kind()}, "
        f"{os.cpu_count()} CPUs, {rounds} rounds, median, "
        f"{'per CPU second' if args.cpu_time else 'per wall second'}"
    )
    print(f"{'workload':<10} {'stdlib':>12} {'snakeloop':>12} {'ratio':>7}  unit")
    samples = {}
    for name in names:
        _, size, unit = WORKLOADS[name]
        if args.quick:
            size = max(1, size // 4)
        results = {"stdlib": [], "snakeloop": []}
        for i in range(rounds):
            order = ("stdlib", "snakeloop") if i % 2 == 0 else ("snakeloop", "stdlib")
            for loop_name in order:
                results[loop_name].append(measure(loop_name, name, size, clock))
        std = statistics.median(results["stdlib"])
        snake = statistics.median(results["snakeloop"])
        print(f"{name:<10} {std:>12.1f} {snake:>12.1f} {snake / std:>6.2f}x  {unit}")
        samples[name] = results
    if args.json:
        Path(args.json).write_text(json.dumps(samples, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
