"""Run the scheduling micro-benchmarks on every available loop, interleaved.

    python -m benchmarks [--quick] [--repeat N] [--only NAME,...] [--json FILE]
    python -m benchmarks --baseline main      # before and after a change, in one run

Run it from the repository root. See benchmarks/README.md for what each
workload does and how to read the figures.
"""

import argparse
import asyncio
import gc
import importlib
import json
import multiprocessing
import platform
import statistics
import sys
import time
from pathlib import Path

from . import baseline, compiled, workloads
from .workloads import IDLE_TIMER_REFERENCE, IDLE_TIMER_ROWS, WORKLOADS

REPO = Path(__file__).resolve().parent.parent
# (this tree's column, the baseline's column of the same build), for --baseline.
BEFORE_AFTER = (("snakeloop", "baseline"), ("compiled", "base-comp"))


def describe_snakeloop(module):
    """'interpreted' or 'compiled' (the core loop is an extension module), and where from."""
    try:
        runloop = importlib.import_module(module.__name__ + "._core.runloop")
    except ImportError:
        return "build unknown (no _core.runloop)"
    path = getattr(runloop, "__file__", None) or ""
    build = "compiled" if path.endswith((".so", ".pyd")) else "interpreted"
    version = getattr(module, "__version__", "")
    where = Path(getattr(module, "__file__", "") or "?").parent
    try:
        where = where.relative_to(REPO)
    except ValueError:
        pass
    return f"{version} {build} build, from {where}".strip()


def add_compiled(loops, args):
    """Add the "compiled" column: this checkout compiled (benchmarks.compiled); its note."""
    if args.installed:
        return "left out with --installed (the installed build is the snakeloop column)"
    try:
        directory = compiled.build()
        module = compiled.load(directory)
    except RuntimeError as exc:
        return f"not built: {exc}; skipped"
    loops.append(("compiled", module.new_event_loop))
    if args.stdlib_futures:

        def compiled_with_c_futures():
            return module.new_event_loop(stdlib_futures=True)

        loops.append(("comp+C", compiled_with_c_futures))
    where = Path(directory)
    try:
        where = where.relative_to(REPO)
    except ValueError:
        pass
    return f"{describe_snakeloop(module).split(', from ')[0]} of src/, from {where}"


def add_compiled_baseline(loops, revision):
    """Add the "base-comp" column: snakeloop at --baseline REV, compiled; its note."""
    try:
        module = baseline.load_compiled(baseline.build_compiled())
    except RuntimeError as exc:
        return f"not built: {exc}; skipped"
    loops.append(("base-comp", module.new_event_loop))
    return f"snakeloop at {revision}, {describe_snakeloop(module).split(', from ')[0]}"


def load_factory(spec):
    module_name, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module_name), attribute or "new_event_loop")


def load_baseline(revision):
    return baseline.load(baseline.extract(revision))


def find_loops(args):
    """[(label, factory)] with stdlib first, and the header lines that describe them."""
    loops = [("stdlib", asyncio.SelectorEventLoop)]
    notes = [
        f"stdlib:    asyncio.SelectorEventLoop, C Future and Task ({asyncio.Future.__module__})"
    ]

    if args.snakeloop:
        factory = load_factory(args.snakeloop)
        loops.append(("snakeloop", factory))
        notes.append(f"snakeloop: stand-in {args.snakeloop}")
        if args.baseline:
            old = load_baseline(args.baseline)
            loops.append(("baseline", old.new_event_loop))
            build = describe_snakeloop(old).split(", from ")[0]
            notes.append(f"baseline:  snakeloop at {args.baseline}, {build}")
    else:
        if not args.installed and (REPO / "src" / "snakeloop").is_dir():
            sys.path.insert(0, str(REPO / "src"))
        try:
            import snakeloop
        except ImportError as exc:
            notes.append(f"snakeloop: not importable ({exc}); skipped")
        else:
            loops.append(("snakeloop", snakeloop.new_event_loop))
            notes.append(f"snakeloop: {describe_snakeloop(snakeloop)}")
            if args.stdlib_futures:

                def with_c_futures():
                    return snakeloop.new_event_loop(stdlib_futures=True)

                loops.append(("snake+C", with_c_futures))
                notes.append(
                    "snake+C:   snakeloop with stdlib_futures=True (comp+C: the compiled column's)"
                )
            if args.baseline:
                old = load_baseline(args.baseline)
                loops.append(("baseline", old.new_event_loop))
                build = describe_snakeloop(old).split(", from ")[0]
                notes.append(f"baseline:  snakeloop at {args.baseline}, {build}")
    if not args.no_compiled:
        note = add_compiled(loops, args)
        notes.append(f"compiled:  {note}")
        if args.baseline and not args.installed and any(n == "compiled" for n, _ in loops):
            notes.append(f"base-comp: {add_compiled_baseline(loops, args.baseline)}")

    if not args.no_uvloop:
        try:
            import uvloop
        except ImportError:
            notes.append("uvloop:    not installed; skipped")
        else:
            loops.append(("uvloop", uvloop.new_event_loop))
            notes.append(f"uvloop:    {getattr(uvloop, '__version__', '?')}")
    if not args.no_rloop:
        try:
            import rloop
        except ImportError:
            notes.append("rloop:     not installed; skipped")
        else:
            loops.append(("rloop", rloop.new_event_loop))
            notes.append(f"rloop:     {getattr(rloop, '__version__', '?')}")
    return loops, notes


def measure(function, factory, scale):
    gc.collect()
    loop = factory()
    try:
        operations, seconds = function(loop, scale)
    finally:
        loop.close()
    return operations / seconds


class LoopWorker:
    """One loop's measurements of one workload, in a process of its own forked
    from the runner.

    Each loop keeps its own heap, and each workload starts from the runner's:
    objects one loop leaves behind would otherwise make every later garbage
    collection slower, for all loops in one process, or for that loop's later
    workloads in one process per loop.  (rloop 0.5.0 keeps about 270k objects
    per timer-churn run; in one process, gather and async_tree then ran at
    under half their rate on every loop, and the loop that spends the least
    outside the collector lost the most.)  The runner still interleaves the
    loops round by round.
    """

    def __init__(self, label, factory):
        self.label = label
        context = multiprocessing.get_context("fork")
        self._connection, child = context.Pipe()
        self._process = context.Process(
            target=_serve_measurements, args=(child, factory), name=f"bench-{label}", daemon=True
        )
        self._process.start()
        child.close()

    def measure(self, name, scale):
        """The workload's rate on this loop; raises WorkloadFailed with the loop's error."""
        try:
            self._connection.send((name, scale))
            kind, value = self._connection.recv()
        except (EOFError, OSError) as exc:
            raise WorkloadFailed(f"the {self.label} process died: {exc!r}") from None
        if kind == "error":
            raise WorkloadFailed(value)
        return value

    def close(self):
        try:
            self._connection.send(None)
        except OSError:
            pass
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._connection.close()


class WorkloadFailed(Exception):
    pass


def _serve_measurements(connection, factory):
    functions = {name: function for name, _, _, function in WORKLOADS}
    while True:
        request = connection.recv()
        if request is None:
            return
        name, scale = request
        try:
            reply = ("rate", measure(functions[name], factory, scale))
        except Exception as exc:  # reported in the table; the other loops go on
            reply = ("error", f"{type(exc).__name__}: {exc}")
        connection.send(reply)


def geomean_ratio(summary, label):
    """The geometric mean over the workloads of label's rate / stdlib's, as text."""
    ratios = [m[label] / m["stdlib"] for m in summary.values() if label in m and "stdlib" in m]
    if len(ratios) != len(summary):
        return "-"
    return f"{statistics.geometric_mean(ratios):.2f}x"


def human(rate):
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if rate >= factor:
            return f"{rate / factor:.2f}{suffix}"
    return f"{rate:.1f}"


def run_workload(name, workers, repeat, scale, reference=None):
    """({label: [rate, ...] or an error string}, {label: [share, ...]}).

    The loop order rotates every round.  With a reference workload, each round
    also measures it on the same worker right beside this one (before it in even
    rounds, after it in odd ones), and the shares are this workload's rate over
    the reference's, round by round.  A share of two medians taken seconds apart
    also reads how the machine's speed moved between them (a compiled chain
    sample lasts 25 ms): compiled chain+10k read 49-60% of the chain rate in some
    full runs, for a cost that callgrind puts at 2%.
    """
    rates = {worker.label: [] for worker in workers}
    shares = {worker.label: [] for worker in workers}
    failed = {}
    for worker in workers:  # warm-up, untimed
        try:
            worker.measure(name, scale * 0.2)
            if reference:
                worker.measure(reference, scale * 0.2)
        except WorkloadFailed as exc:  # report it and keep benchmarking the other loops
            failed[worker.label] = str(exc)
    for round_ in range(repeat):
        shift = round_ % len(workers)
        for worker in workers[shift:] + workers[:shift]:
            if worker.label in failed:
                continue
            try:
                if reference and round_ % 2:
                    rate = worker.measure(name, scale)
                    shares[worker.label].append(rate / worker.measure(reference, scale))
                elif reference:
                    base = worker.measure(reference, scale)
                    rate = worker.measure(name, scale)
                    shares[worker.label].append(rate / base)
                else:
                    rate = worker.measure(name, scale)
                rates[worker.label].append(rate)
            except WorkloadFailed as exc:
                failed[worker.label] = str(exc)
    return {label: failed.get(label) or samples for label, samples in rates.items()}, {
        label: samples for label, samples in shares.items() if samples and label not in failed
    }


def report(title, unit, results, repeat):
    print(f"\n{title}  [{unit}, median of {repeat}]")
    medians = {
        label: statistics.median(samples)
        for label, samples in results.items()
        if not isinstance(samples, str)
    }
    for label, samples in results.items():
        if isinstance(samples, str):
            print(f"  {label:<10} error: {samples}")
            continue
        median = medians[label]
        line = f"  {label:<10} {human(median):>8}"
        if label != "stdlib":
            line += f"   {median / medians['stdlib']:5.2f}x stdlib"
            if "uvloop" in medians and label != "uvloop":
                line += f"   {median / medians['uvloop']:5.2f}x uvloop"
        spread = (max(samples) - min(samples)) / median
        print(f"{line:<58} spread {spread:4.0%}")
    return medians


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, 3 rounds")
    parser.add_argument("--repeat", type=int, help="rounds per workload (default 5, quick 3)")
    parser.add_argument(
        "--only", help="comma-separated workload names: " + ",".join(name for name, *_ in WORKLOADS)
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with this thread's CPU time instead of wall time (on a busy machine)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write every sample to FILE")
    parser.add_argument(
        "--stdlib-futures", action="store_true", help="also run snakeloop with stdlib_futures=True"
    )
    parser.add_argument("--no-uvloop", action="store_true", help="leave uvloop out")
    parser.add_argument("--no-rloop", action="store_true", help="leave rloop out")
    parser.add_argument(
        "--no-compiled",
        action="store_true",
        help="leave out the compiled build of this checkout (built with Cython when missing)",
    )
    parser.add_argument(
        "--installed",
        action="store_true",
        help="use the installed snakeloop, not this checkout's src/",
    )
    parser.add_argument(
        "--snakeloop",
        metavar="MODULE:FACTORY",
        help="benchmark this loop factory in snakeloop's place",
    )
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also run snakeloop as it is at this git revision (before/after in one run)",
    )
    args = parser.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 5)
    scale = 0.25 if args.quick else 1.0
    chosen = WORKLOADS
    if args.only:
        names = args.only.split(",")
        unknown = set(names) - {name for name, *_ in WORKLOADS}
        if unknown:
            parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
        chosen = [w for w in WORKLOADS if w[0] in names]

    if args.cpu_time:
        workloads.clock = time.thread_time
    loops, notes = find_loops(args)
    impl = platform.python_implementation()
    print(
        f"Python {platform.python_version()} ({impl}) on {platform.machine()}, "
        f"{repeat} rounds, loops interleaved (a process each), scale {scale}, "
        f"{'CPU time (thread_time)' if args.cpu_time else 'wall time (perf_counter)'}"
    )
    for note in notes:
        print(f"  {note}")

    started = time.perf_counter()
    summary, samples, shares, errors = {}, {}, {}, 0
    for name, title, unit, _ in chosen:
        reference = IDLE_TIMER_REFERENCE if name in IDLE_TIMER_ROWS else None
        workers = [LoopWorker(label, factory) for label, factory in loops]
        try:
            results, shares[name] = run_workload(name, workers, repeat, scale, reference)
        finally:
            for worker in workers:
                worker.close()
        samples[name] = results
        errors += sum(isinstance(r, str) for r in results.values())
        summary[name] = report(title, unit, results, repeat)

    others = [label for label, _ in loops if label != "stdlib"]
    if others:
        print("\nratio to stdlib (median rates):")
        print(f"  {'workload':<10}" + "".join(f"{label:>11}" for label in others))
        for name, medians in summary.items():
            cells = "".join(
                f"{medians[label] / medians['stdlib']:>10.2f}x"
                if label in medians
                else f"{'-':>11}"
                for label in others
            )
            print(f"  {name:<10}{cells}")
        if len(summary) > 1:
            cells = "".join(f"{geomean_ratio(summary, label):>11}" for label in others)
            print(f"  {'geomean':<10}{cells}")
    idle_rows = [name for name in summary if shares.get(name)]
    if idle_rows:
        print(
            "\nchain with idle timers pending, as a share of the same loop's chain rate"
            " (median of the rounds' shares, each against a chain sample taken beside it):"
        )
        labels = [label for label, _ in loops]
        print(f"  {'workload':<10}" + "".join(f"{label:>11}" for label in labels))
        for name in idle_rows:
            cells = "".join(
                f"{statistics.median(shares[name][label]):>10.0%} "
                if label in shares[name]
                else f"{'-':>11}"
                for label in labels
            )
            print(f"  {name:<10}{cells}")
    pairs = [(new, old) for new, old in BEFORE_AFTER if new in others and old in others]
    if pairs:
        print("\nthis tree to the baseline revision, the same build (median rates):")
        print(f"  {'workload':<10}" + "".join(f"{new + '/' + old:>20}" for new, old in pairs))
        for name, medians in summary.items():
            cells = "".join(
                f"{medians[new] / medians[old]:>19.2f}x"
                if new in medians and old in medians
                else f"{'-':>20}"
                for new, old in pairs
            )
            print(f"  {name:<10}{cells}")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")

    if args.json:
        document = {
            "python": sys.version,
            "loops": notes,
            "scale": scale,
            "clock": "thread_time" if args.cpu_time else "perf_counter",
            "rates": samples,
            "idle_timer_shares": {name: by_loop for name, by_loop in shares.items() if by_loop},
        }
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
