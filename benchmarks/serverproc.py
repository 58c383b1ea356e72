"""What the server-process benchmarks (net, bench_udp) share.

Each measures a server running in its own process on one loop, and reads
its CPU time from ``/proc``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Where server and client run, by --placement: (server CPU, client CPU).
# "same": they take turns on one CPU, the client blocking in epoll, so the
# server's CPU time is its work and nothing else.  "split": the client
# busy-polls on the other CPU; on a VM every cross-CPU wake-up then adds the
# hypervisor's cost to every server alike.
PLACEMENTS = {"same": (0, 0), "split": (1, 0)}


def new_loop(name):
    """A fresh loop of the named kind: stdlib, uvloop, snakeloop (from src/), snake+C
    (snakeloop with ``stdlib_futures=True``), seeded (snakeloop with ``seed=1`` and the
    perturbation in ``SEEDED_PERTURB_ENV``: what seeded scheduling costs when it is on), or
    no-metrics (snakeloop with ``metrics=False``: what the always-on metrics cost)."""
    if name == "stdlib":
        return asyncio.SelectorEventLoop()
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    if name == "rloop":
        import rloop

        return rloop.new_event_loop()
    if name == "baseline":
        from . import baseline

        return baseline.load().new_event_loop()
    if name == "compiled":
        from . import compiled

        return compiled.load().new_event_loop()
    if name == "base-comp":
        from . import baseline

        return baseline.load_compiled().new_event_loop()
    sys.path.insert(0, str(REPO / "src"))
    import snakeloop

    if name == "seeded":
        return snakeloop.new_event_loop(seed=1, perturb=os.environ.get(SEEDED_PERTURB_ENV))
    if name == "no-metrics":
        return snakeloop.new_event_loop(metrics=False)
    return snakeloop.new_event_loop(stdlib_futures=name == "snake+C")


def available_loops(
    stdlib_futures=False, baseline=False, seeded=False, metrics_off=False, compiled=False
):
    """stdlib and snakeloop (and snake+C, seeded, no-metrics if asked), snakeloop at the
    --baseline revision (pure, and compiled beside the compiled build: base-comp), the compiled
    build of src/ (benchmarks.compiled), uvloop and rloop
    when they import, and "raw"."""
    loops = ["stdlib", "snakeloop"] + (["snake+C"] if stdlib_futures else [])
    if compiled:
        loops.append("compiled")
    if seeded:
        loops.append("seeded")
    if metrics_off:
        loops.append("no-metrics")
    if baseline:
        loops.append("baseline")
        if compiled:
            loops.append("base-comp")
    for peer in ("uvloop", "rloop"):
        try:
            __import__(peer)
        except ImportError:
            pass
        else:
            loops.append(peer)
    return loops + ["raw"]


def src_build():
    """Which build the snakeloop column runs: src/ is pure unless compiled in place."""
    core = REPO / "src" / "snakeloop" / "_core"
    compiled_in_place = any((core / f"runloop{suffix}").exists() for suffix in EXTENSION_SUFFIXES)
    return "compiled in place" if compiled_in_place else "pure-Python"


def build_compiled(no_compiled):
    """Build the "compiled" column's copy unless told not to: (available, header note)."""
    if no_compiled:
        return False, "compiled: left out (--no-compiled)"
    from . import compiled

    try:
        compiled.build()  # its directory is inherited by the servers
    except RuntimeError as exc:
        return False, f"compiled: not built: {exc}; skipped"
    return True, "compiled: src/ compiled by Cython (benchmarks.compiled)"


def add_build_arguments(parser, baseline=True):
    """The options every server benchmark takes: --no-compiled, and --baseline REV."""
    if baseline:
        parser.add_argument(
            "--baseline",
            metavar="REV",
            help="also run snakeloop as it is at this git revision (before/after in one run)",
        )
    parser.add_argument(
        "--no-compiled",
        action="store_true",
        help="leave out the compiled build of this checkout (built with Cython when missing)",
    )


def prepare_builds(parser, args):
    """Extract and compile what those options ask for, before any server starts (the
    servers inherit the directories): (whether the compiled build is there, a header
    note).  A baseline revision that does not compile is the command's error."""
    from . import baseline

    revision = getattr(args, "baseline", None)
    if revision:
        baseline.extract(revision)
    has_compiled, compiled_note = build_compiled(args.no_compiled)
    if revision and has_compiled:
        try:
            baseline.build_compiled()
        except RuntimeError as exc:
            parser.error(f"the baseline revision did not compile: {exc}")
    return has_compiled, compiled_note


# Set (by --seeded) in the servers' environment: what the seeded server perturbs.
SEEDED_PERTURB_ENV = "SNAKELOOP_BENCH_PERTURB"

# Set (by --fresh-allocator) in the servers' environment to skip settling.
FRESH_ALLOCATOR_ENV = "SNAKELOOP_BENCH_FRESH_ALLOCATOR"


def settle_allocator():
    """Free one large block, as a process that has been up a while has.

    glibc serves a request above its mmap threshold (128 KiB at first) with
    mmap, and raises the threshold only when such a block is freed whole.
    asyncio reads with recv(256 KiB), and CPython shrinks each of those
    buffers to the bytes received before freeing it, so the threshold never
    moves: every read pays mmap, mremap and munmap, until something else
    frees a large block.  Whether that happened depended on each server's
    history and moved the stdlib loop's figures by 2-3x between runs.
    """
    if os.environ.get(FRESH_ALLOCATOR_ENV):
        return  # --fresh-allocator: measure a process that never did this
    block = bytearray(1024 * 1024)
    del block


def cpu_ns(pid):
    """CPU time of every thread of ``pid``, in ns."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # a thread that just ended
    return total
