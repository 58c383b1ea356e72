"""Run CPython's own asyncio test suite (test.test_asyncio) against snakeloop.

Usage (from the repository root)::

    python -m tests.conformance --loop snakeloop            # or: python tests/conformance/run.py
    python -m tests.conformance --loop stdlib               # control: asyncio itself
    python -m tests.conformance --loop snakeloop --modules test_locks test_tasks -k cancel
    python -m tests.conformance --loop snakeloop --list     # what is selected, excluded, deferred
    python -m tests.conformance --loop snakeloop --json out.json --log-dir logs

Each (mode, module) pair is a job that runs in its own worker subprocess (_worker.py); see
README.md for the modes, the data files and the shims.  The exit status is 0 when every job is
clean: no unexpected failure, no expected failure that passed, no unclassified class.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

try:
    from . import _data
except ImportError:  # run as a script: python tests/conformance/run.py
    import _data

HERE = _data.HERE
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "_worker.py")

TARGETS = ("snakeloop", "snakeloop-seeded", "stdlib", "stdlib-py")
FAILED = ("fail", "error", "hung", "crash", "notrun")

# A job's time budget; a CPython test that runs longer than its own timeout (60 s by default)
# counts as hung and the job resumes after it.
JOB_TIMEOUT = 900.0

# Rough relative cost of each job, to start the long ones first.
_COST = {
    ("loop", "test_events"): 30,
    ("task", "test_tasks"): 25,
    ("loop", "test_tasks"): 20,
    ("loop", "test_base_events"): 12,
    ("loop", "test_runners"): 12,
    ("loop", "test_locks"): 10,
    ("loop", "test_timeouts"): 10,
    ("loop", "test_waitfor"): 10,
    ("loop", "test_queues"): 8,
    ("loop", "test_taskgroups"): 8,
    ("loop", "test_threads"): 5,
}


@dataclass
class Job:
    mode: str
    module: str

    @property
    def name(self) -> str:
        return f"{self.mode}:{self.module}"


@dataclass
class JobResult:
    job: Job
    ids: list = field(default_factory=list)  # selected test ids, in order
    results: dict = field(default_factory=dict)  # id -> result event
    excluded: list = field(default_factory=list)  # [id, reason]
    deferred: list = field(default_factory=list)  # ids (network part, switched off)
    unclassified: list = field(default_factory=list)  # class names
    fixture_errors: list = field(default_factory=list)
    module_error: str | None = None
    module_skip: str | None = None
    restarts: int = 0
    seconds: float = 0.0
    log_path: str = ""


@dataclass
class Verdict:
    """A JobResult judged against expected_failures.txt."""

    counts: dict
    failures: list  # result events of unexpected failures
    xpasses: list  # ids listed as expected failures that passed
    not_exercised: list  # loop-mode ids that never created a target loop
    stdlib_loops: list  # ids that created a stdlib loop outside the target factory
    problems: list  # job-level problems (module error, unclassified, fixture errors)

    @property
    def ok(self) -> bool:
        return not (self.failures or self.xpasses or self.problems)


def network_enabled(selection, override=None) -> bool:
    if override is not None:
        return override
    env = os.environ.get("SNAKELOOP_CONFORMANCE_NETWORK")
    if env:
        return env.lower() not in ("0", "no", "false", "off")
    return _data.network_default(selection)


def available_jobs(selection, modules=None, modes=None, *, network=True) -> list[Job]:
    """The (mode, module) jobs that have something to run on this Python.

    Left out: modules this Python does not have, modules whose ``python`` key excludes this
    version (every test they have here is excluded), and with the network part switched off,
    the modules that are all network.  Every job left selects tests: one that selects none
    fails (see :func:`judge`).
    """
    import importlib.util

    jobs = []
    for module in _data.module_names(selection):
        if modules and module not in modules:
            continue
        if importlib.util.find_spec(_data.ID_PREFIX + module) is None:
            continue  # not in this Python version (test_eager_task_factory)
        if not _data.module_runs_on(selection, module):
            continue
        if not network and _data.module_is_network(selection, module):
            continue
        for mode in _data.modes_of(selection, module):
            if not modes or mode in modes:
                jobs.append(Job(mode, module))
    return jobs


def _snakeloop_path() -> str | None:
    """The directory to import snakeloop from in the workers.

    The copy this interpreter would import (an installed one in CI), else the checkout's src/.
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec("snakeloop")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        return os.path.dirname(os.path.dirname(spec.origin))
    src = os.path.join(REPO_ROOT, "src")
    return src if os.path.isdir(src) else None


def _environment() -> dict:
    """A copy of ``os.environ`` taken from a job's thread.  pytest sets and deletes
    PYTEST_CURRENT_TEST in the main thread meanwhile, and a key that goes between the
    copy's listing and its lookup raises KeyError (seen on 3.12): the copy is retried."""
    for _ in range(100):
        try:
            return dict(os.environ)
        except (KeyError, RuntimeError):
            continue
    return dict(os.environ)


def _worker_env() -> dict:
    env = _environment()
    path = _snakeloop_path()
    if path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH")) if p)
    # CPython's tests expect asyncio's defaults (debug mode off unless a test turns it on).
    env.pop("PYTHONASYNCIODEBUG", None)
    return env


def _log_tail(path: str, test_id: str | None, limit: int = 4000) -> str:
    """The worker's stderr since ``test_id`` started (faulthandler dump of a hung test)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    if test_id:
        pos = text.rfind(f"=== start {test_id}\n")
        if pos >= 0:
            text = text[pos:]
    return text[-limit:]


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_job(
    job: Job,
    target: str,
    *,
    network: bool,
    k=(),
    test_timeout: float = 60.0,
    job_timeout: float = JOB_TIMEOUT,
    max_restarts: int = 10,
    log_dir: str | None = None,
    plan_only: bool = False,
) -> JobResult:
    """Run one (mode, module) job in worker subprocesses; resume after hangs and crashes."""
    res = JobResult(job)
    log_dir = log_dir or tempfile.mkdtemp(prefix="conformance-logs-")
    os.makedirs(log_dir, exist_ok=True)
    res.log_path = os.path.join(log_dir, f"{job.mode}-{job.module}.log")
    t_start = time.monotonic()
    deadline = t_start + job_timeout
    skip_fd, skip_path = tempfile.mkstemp(prefix="conformance-skip-", suffix=".json")
    os.close(skip_fd)
    with open(res.log_path, "wb") as log:
        attempt = 0
        while True:
            attempt += 1
            progress_before = len(res.results)
            with open(skip_path, "w", encoding="utf-8") as f:
                json.dump(sorted(res.results), f)
            cmd = [
                sys.executable,
                "-X",
                "faulthandler",
                WORKER,
                "--module",
                job.module,
                "--mode",
                job.mode,
                "--target",
                target,
                "--skip-file",
                skip_path,
                "--test-timeout",
                str(test_timeout),
            ]
            if network:
                cmd.append("--network")
            if plan_only:
                cmd.append("--plan-only")
            for sub in k or ():
                cmd += ["-k", sub]
            r, w = os.pipe()
            cmd += ["--events-fd", str(w)]
            log.write(f"##### attempt {attempt}: {' '.join(cmd[3:])}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(w,),
                env=_worker_env(),
                cwd=REPO_ROOT,
                start_new_session=True,
            )
            os.close(w)
            current, current_t0, finished, why = None, 0.0, False, None
            # Outside a test (imports, class/module fixtures) the worker gets the same
            # timeout, counted from its last event.
            last_event = time.monotonic()
            buf = b""
            try:
                while not finished:
                    now = time.monotonic()
                    stall_at = (current_t0 if current is not None else last_event) + test_timeout
                    wait = min(deadline, stall_at) - now
                    if wait <= 0:
                        if now >= stall_at:
                            why = "hung" if current is not None else "stalled"
                        else:
                            why = "budget"
                        break
                    ready, _, _ = select.select([r], [], [], min(wait, 5.0))
                    if not ready:
                        continue
                    chunk = os.read(r, 1 << 16)
                    if not chunk:
                        break  # worker exited
                    last_event = time.monotonic()
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        try:
                            ev = json.loads(line)
                        except ValueError:
                            continue
                        kind = ev.get("ev")
                        if kind == "plan":
                            if attempt == 1:
                                res.ids = ev["ids"]
                                res.excluded = ev["excluded"]
                                res.deferred = ev["deferred"]
                                res.unclassified = ev["unclassified"]
                        elif kind == "start":
                            current, current_t0 = ev["id"], time.monotonic()
                        elif kind == "result":
                            res.results[ev["id"]] = ev
                            current = None
                        elif kind == "fixture_error":
                            res.fixture_errors.append(ev)
                        elif kind == "module_error":
                            res.module_error = ev["traceback"]
                        elif kind == "module_skip":
                            res.module_skip = ev["reason"]
                        elif kind == "done":
                            finished = True
            finally:
                os.close(r)
                if not finished:
                    _kill_group(proc)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    _kill_group(proc)
                    proc.wait()
                _kill_group(proc)  # leftovers of the worker's session
            if finished or res.module_error or res.module_skip:
                break
            log.flush()
            if current is not None:
                outcome = {"hung": "hung", "budget": "notrun"}.get(why, "crash")
                detail = (
                    f"killed after {test_timeout:.0f}s without finishing"
                    if outcome == "hung"
                    else f"worker exited with status {proc.returncode} during the test"
                    if outcome == "crash"
                    else "job time budget exhausted"
                )
                res.results[current] = {
                    "id": current,
                    "outcome": outcome,
                    "message": detail,
                    "traceback": _log_tail(res.log_path, current),
                    "target_loops": None,
                    "stdlib_loops": None,
                    "seconds": round(time.monotonic() - current_t0, 3),
                }
            elif why == "stalled":
                res.fixture_errors.append(
                    {
                        "id": "(outside any test)",
                        "traceback": f"worker made no progress for {test_timeout:.0f}s outside a "
                        f"test and was killed\n" + _log_tail(res.log_path, None),
                    }
                )
            if why == "budget" or time.monotonic() >= deadline:
                break
            if attempt == 1 and not res.ids and not res.results:
                res.module_error = (
                    f"worker exited with status {proc.returncode} before "
                    f"reporting its plan; see {res.log_path}"
                )
                break
            res.restarts += 1
            if res.restarts > max_restarts or len(res.results) == progress_before:
                break
    os.unlink(skip_path)
    if not plan_only:
        for tid in res.ids:
            if tid not in res.results:
                res.results[tid] = {
                    "id": tid,
                    "outcome": "notrun",
                    "message": "not run (job budget, restart limit or a fixture error)",
                    "traceback": "",
                    "target_loops": None,
                    "stdlib_loops": None,
                }
    res.seconds = time.monotonic() - t_start
    return res


# Verdict counts, in the order the report's columns show them.
COLUMNS = (
    "selected",
    "passed",
    "failed",
    "xfail",
    "xpass",
    "skipped",
    "excluded",
    "deferred",
    "not_exercised",
)
HEADS = ("sel", "pass", "fail", "xfail", "xpass", "skip", "excl", "defer", "noloop")


def judge(res: JobResult, xfails: _data.PatternList | None) -> Verdict:
    """Classify outcomes against the expected-failure list (strictly)."""
    counts = dict.fromkeys(COLUMNS, 0)
    counts["selected"] = len(res.ids)
    counts["excluded"] = len(res.excluded)
    counts["deferred"] = len(res.deferred)
    failures, xpasses, not_exercised, stdlib_loops = [], [], [], []
    for tid in res.ids:
        ev = res.results.get(tid)
        if ev is None:
            continue
        outcome = ev["outcome"]
        expected = xfails.match(tid) if xfails is not None else None
        if outcome in FAILED:
            if expected is not None:
                counts["xfail"] += 1
            else:
                counts["failed"] += 1
                failures.append(ev)
        elif outcome == "skip":
            counts["skipped"] += 1
        else:
            if expected is not None:
                counts["xpass"] += 1
                xpasses.append(tid)
            else:
                counts["passed"] += 1
        if outcome != "skip" and res.job.mode == "loop" and ev.get("target_loops") == 0:
            not_exercised.append(tid)
        if ev.get("stdlib_loops"):
            stdlib_loops.append(tid)
    counts["not_exercised"] = len(not_exercised)
    problems = []
    if not res.ids:
        # A job that runs nothing would otherwise pass (or, under pytest, skip) while testing
        # nothing: a module that lost its classes, a selection that no longer matches.
        problems.append(
            f"nothing selected to run ({len(res.excluded)} excluded, {len(res.deferred)} "
            "deferred to the network part"
            + (f", module skipped: {res.module_skip}" if res.module_skip else "")
            + "); fix selection.toml, or limit the module to the Python versions that "
            "have tests to run (its `python` key)"
        )
    if res.module_error:
        problems.append("module error:\n" + res.module_error)
    if res.unclassified:
        problems.append(
            "classes not classified in selection.toml/exclusions.txt: "
            + ", ".join(res.unclassified)
        )
    for fe in res.fixture_errors:
        problems.append(f"fixture error in {fe['id']}:\n{fe['traceback']}")
    return Verdict(counts, failures, xpasses, not_exercised, stdlib_loops, problems)


def key_lines(ev: dict, n: int = 12) -> str:
    """The telling part of a result's traceback: the end of a Python traceback, or the start of
    the faulthandler dump of a hung test (which lists the most recent call first)."""
    lines = [ln for ln in (ev.get("traceback") or "").rstrip().splitlines() if ln.strip()]
    if ev.get("outcome") == "hung":
        start = next((i for i, ln in enumerate(lines) if "most recent call first" in ln), 0)
        return "\n".join(lines[start : start + n])
    return "\n".join(lines[-n:])


def format_failures(res: JobResult, verdict: Verdict, tb_lines: int = 12) -> str:
    out = []
    for p in verdict.problems:
        out.append(f"!! {p}")
    for ev in verdict.failures:
        out.append(f"{ev['outcome'].upper():6} {ev['id']}: {ev.get('message', '')}")
        tb = key_lines(ev, tb_lines)
        if tb:
            out.append("    " + tb.replace("\n", "\n    "))
    for tid in verdict.xpasses:
        out.append(f"XPASS  {tid}: listed in expected_failures.txt but passed; remove the entry")
    if res.log_path:
        out.append(f"(worker log: {res.log_path})")
    return "\n".join(out)


def load_xfails(target: str) -> _data.PatternList | None:
    """Expected failures apply to snakeloop only: the stdlib controls must pass everything."""
    if target not in ("snakeloop", "snakeloop-seeded"):
        return None
    # The workers import the same snakeloop as this process (same path and environment).
    import snakeloop

    build = "compiled" if snakeloop.COMPILED else "pure"
    return _data.PatternList.load(_data.EXPECTED_FAILURES_FILE, build=build)


def run_jobs(jobs, target, *, parallel=2, progress=None, **kw) -> dict:
    order = sorted(jobs, key=lambda j: -_COST.get((j.mode, j.module), 3))
    results = {}
    lock = threading.Lock()

    def one(job):
        r = run_job(job, target, **kw)
        with lock:
            results[job.name] = r
            if progress:
                progress(r)
        return r

    with ThreadPoolExecutor(max(1, parallel)) as ex:
        list(ex.map(one, order))
    return {j.name: results[j.name] for j in jobs}


def _print_list(results: dict) -> None:
    for name, r in results.items():
        print(
            f"## {name}: {len(r.ids)} selected, {len(r.excluded)} excluded, "
            f"{len(r.deferred)} deferred (network)"
        )
        for tid in r.ids:
            print(f"  + {tid}")
        for tid, why in r.excluded:
            print(f"  - {tid}  [excluded: {why}]")
        for tid in r.deferred:
            print(f"  ~ {tid}  [network: deferred]")
        for c in r.unclassified:
            print(f"  ! unclassified class {c}")
        if r.module_error:
            print(r.module_error)


def print_table(results: dict, verdicts: dict, out=sys.stdout) -> dict:
    head = f"{'job':<28}" + "".join(f"{h:>7}" for h in HEADS) + f"{'time':>7}  notes"
    print(head, file=out)
    print("-" * len(head), file=out)
    totals = dict.fromkeys(COLUMNS, 0)
    for name, r in results.items():
        v = verdicts[name]
        notes = []
        if r.module_error:
            notes.append("MODULE ERROR")
        if r.module_skip:
            notes.append("module skipped: " + r.module_skip[:50])
        if r.unclassified:
            notes.append(f"{len(r.unclassified)} unclassified class(es)")
        if r.fixture_errors:
            notes.append(f"{len(r.fixture_errors)} fixture error(s)")
        if r.restarts:
            notes.append(f"{r.restarts} restart(s)")
        if v.stdlib_loops:
            notes.append(f"{len(v.stdlib_loops)} made a stdlib loop")
        print(
            f"{name:<28}"
            + "".join(f"{v.counts[c]:>7}" for c in COLUMNS)
            + f"{r.seconds:>6.0f}s  {'; '.join(notes)}",
            file=out,
        )
        for c in COLUMNS:
            totals[c] += v.counts[c]
    print("-" * len(head), file=out)
    print(f"{'TOTAL':<28}" + "".join(f"{totals[c]:>7}" for c in COLUMNS), file=out)
    return totals


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.conformance", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--loop",
        "--target",
        dest="target",
        choices=TARGETS,
        default="snakeloop",
        help="snakeloop, snakeloop-seeded (every loop seeded from SNAKELOOP_CONFORMANCE_SEED), "
        "or a control: stdlib (asyncio's loop with its C Task and "
        "Future) or stdlib-py (asyncio's loop with the pure-Python Task and "
        "Future)",
    )
    p.add_argument("--modules", nargs="+", help="CPython test modules (default: all selected)")
    p.add_argument(
        "--mode",
        choices=("loop", "task"),
        action="append",
        help="only this mode (repeatable; default: both)",
    )
    p.add_argument("-k", action="append", help="only test ids containing this substring")
    net = p.add_mutually_exclusive_group()
    net.add_argument(
        "--network",
        dest="network",
        action="store_true",
        default=None,
        help="also run the network part (network.txt, network modules)",
    )
    net.add_argument("--no-network", dest="network", action="store_false")
    p.add_argument("-j", "--jobs", type=int, default=2, help="jobs in parallel (default 2)")
    p.add_argument("--test-timeout", type=float, default=60.0)
    p.add_argument("--job-timeout", type=float, default=JOB_TIMEOUT)
    p.add_argument("--json", help="write per-test results to this file")
    p.add_argument("--log-dir", help="keep worker logs here (default: a temporary directory)")
    p.add_argument("--list", action="store_true", help="print the selection and exit")
    p.add_argument(
        "--no-xfail",
        action="store_true",
        help="ignore expected_failures.txt (see everything that fails)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="do not list failing tests")
    args = p.parse_args(argv)

    selection = _data.load_selection()
    if args.modules:
        unknown = sorted(set(args.modules) - set(_data.module_names(selection)))
        if unknown:
            p.error(f"not in selection.toml: {', '.join(unknown)}")
    network = network_enabled(selection, args.network)
    jobs = available_jobs(selection, args.modules, args.mode, network=network)
    if not jobs:
        p.error("no jobs selected")
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="conformance-logs-")
    kw = {
        "network": network,
        "k": args.k or (),
        "test_timeout": args.test_timeout,
        "job_timeout": args.job_timeout,
        "log_dir": log_dir,
    }

    if args.list:
        _print_list(run_jobs(jobs, args.target, parallel=args.jobs, plan_only=True, **kw))
        if not args.log_dir:
            shutil.rmtree(log_dir, ignore_errors=True)
        return 0

    print(
        f"# CPython {sys.version.split()[0]} test.test_asyncio against --loop "
        f"{args.target}; network part {'on' if network else 'off'}; logs in {log_dir}"
        + ("" if args.log_dir else " (removed if all pass)"),
        flush=True,
    )

    def progress(r):
        print(
            f"  .. {r.job.name}: {len(r.results)} run in {r.seconds:.0f}s",
            file=sys.stderr,
            flush=True,
        )

    results = run_jobs(jobs, args.target, parallel=args.jobs, progress=progress, **kw)
    xfails = None if args.no_xfail else load_xfails(args.target)
    verdicts = {name: judge(r, xfails) for name, r in results.items()}
    totals = print_table(results, verdicts)

    bad = [name for name, v in verdicts.items() if not v.ok]
    if not args.quiet:
        for name in bad:
            print(f"\n# {name}")
            print(format_failures(results[name], verdicts[name], tb_lines=4))
        noloop = [tid for v in verdicts.values() for tid in v.not_exercised]
        if noloop:
            print(
                f"\n# {len(noloop)} loop-mode test(s) never created a target loop (not exercised):"
            )
            for tid in noloop:
                print(f"  {tid}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "python": sys.version,
                    "target": args.target,
                    "network": network,
                    "totals": totals,
                    "jobs": {
                        name: {
                            "counts": verdicts[name].counts,
                            "ok": verdicts[name].ok,
                            "problems": verdicts[name].problems,
                            "excluded": r.excluded,
                            "deferred": r.deferred,
                            "seconds": round(r.seconds, 1),
                            "results": [r.results[t] for t in r.ids if t in r.results],
                        }
                        for name, r in results.items()
                    },
                },
                f,
                indent=1,
            )
    if not bad and not args.log_dir:
        shutil.rmtree(log_dir, ignore_errors=True)
    print(
        f"\nTOTAL: {totals['passed']} passed, {totals['failed']} failed, "
        f"{totals['xfail']} expected failures, {totals['xpass']} unexpected passes, "
        f"{totals['skipped']} skipped, {totals['excluded']} excluded, "
        f"{totals['deferred']} deferred (network) -- "
        + ("OK" if not bad else f"FAILED jobs: {', '.join(bad)}")
    )
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
