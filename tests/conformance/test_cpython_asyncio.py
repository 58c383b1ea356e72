"""CPython's own asyncio test suite against snakeloop, one pytest test per (mode, module).

Each test asserts that every selected CPython test of its module passes, except those listed in
expected_failures.txt, which must fail (strict).  See README.md in this directory.

Environment:
    SNAKELOOP_CONFORMANCE_TARGET        snakeloop (default), snakeloop-seeded (every loop
                                        seeded, see _worker.seeded_loop_factory), or
                                        stdlib / stdlib-py (controls)
    SNAKELOOP_CONFORMANCE_SEED          snakeloop-seeded's root seed (default: drawn)
    SNAKELOOP_CONFORMANCE_NETWORK       1/0: run the network part (default: selection.toml)
    SNAKELOOP_CONFORMANCE_JOBS          jobs in parallel (default 2; 1 under pytest-xdist)
    SNAKELOOP_CONFORMANCE_TEST_TIMEOUT  seconds before a CPython test counts as hung (60)
    SNAKELOOP_CONFORMANCE_LOG_DIR       keep the worker logs there (default: a temporary dir,
                                        removed when every job passed)
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

try:
    from . import _data, run
except ImportError:  # imported without its package (e.g. pytest's importlib import mode)
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _data  # type: ignore[no-redef]
    import run  # type: ignore[no-redef]

# The harness stops a hung CPython test after its test timeout and a job after JOB_TIMEOUT,
# and reports what hung; this limit is for the harness itself hanging.  A test waits for its
# own job, which may start after others (two run at a time).
pytestmark = pytest.mark.timeout(run.JOB_TIMEOUT + 120)

TARGET = os.environ.get("SNAKELOOP_CONFORMANCE_TARGET", "snakeloop")
if TARGET == "snakeloop-seeded" and "SNAKELOOP_CONFORMANCE_SEED" not in os.environ:
    # One root for every worker, drawn here and named in each failure.
    import random

    os.environ["SNAKELOOP_CONFORMANCE_SEED"] = str(random.SystemRandom().getrandbits(64))
SEED_NOTE = (
    f" (SNAKELOOP_CONFORMANCE_SEED={os.environ['SNAKELOOP_CONFORMANCE_SEED']})"
    if TARGET == "snakeloop-seeded"
    else ""
)
SELECTION = _data.load_selection()
JOBS = run.available_jobs(SELECTION, network=run.network_enabled(SELECTION))


class _Scheduler:
    """Runs the jobs of the collected tests in the background, a few at a time."""

    def __init__(self, jobs: list[run.Job]):
        xdist = bool(os.environ.get("PYTEST_XDIST_WORKER"))
        parallel = int(os.environ.get("SNAKELOOP_CONFORMANCE_JOBS", "1" if xdist else "2"))
        self.log_dir = os.environ.get("SNAKELOOP_CONFORMANCE_LOG_DIR") or tempfile.mkdtemp(
            prefix="snakeloop-conformance-"
        )
        self.keep_logs = bool(os.environ.get("SNAKELOOP_CONFORMANCE_LOG_DIR"))
        self.kw = {
            "network": run.network_enabled(SELECTION),
            "test_timeout": float(os.environ.get("SNAKELOOP_CONFORMANCE_TEST_TIMEOUT", "60")),
            "log_dir": self.log_dir,
        }
        self.executor = ThreadPoolExecutor(max(1, parallel), thread_name_prefix="conformance")
        self.futures: dict[str, Future] = {}
        self.lock = threading.Lock()
        self.all_ok = True
        self.summary = _CountsSummary()
        # Under xdist every worker collects everything: start jobs only when asked.
        if not xdist:
            for job in sorted(jobs, key=lambda j: -run._COST.get((j.mode, j.module), 3)):
                self._submit(job)

    def _submit(self, job: run.Job) -> Future:
        with self.lock:
            fut = self.futures.get(job.name)
            if fut is None:
                fut = self.executor.submit(run.run_job, job, TARGET, **self.kw)
                self.futures[job.name] = fut
            return fut

    def result(self, job: run.Job) -> run.JobResult:
        return self._submit(job).result()

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
        if self.all_ok and not self.keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)


class _CountsSummary:
    """A pytest plugin that ends the run with the conformance counts per mode.

    CI's log is where the counts of each Python and build are read (issue 37 asks for them
    per version), so they are printed whether the jobs passed or not.
    """

    def __init__(self) -> None:
        self.by_mode: dict[str, dict[str, int]] = {}

    def add(self, mode: str, counts: dict[str, int]) -> None:
        totals = self.by_mode.setdefault(mode, {})
        for key, value in counts.items():
            totals[key] = totals.get(key, 0) + value

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.by_mode:
            return
        import platform

        import snakeloop

        build = "compiled" if snakeloop.COMPILED else "pure"
        terminalreporter.section(
            f"CPython's test.test_asyncio against {TARGET}{SEED_NOTE}: "
            f"{platform.python_implementation()} {platform.python_version()}, {build} build"
        )
        for mode, c in sorted(self.by_mode.items()):
            judged = c["passed"] + c["failed"] + c["xfail"] + c["xpass"]
            terminalreporter.write_line(
                f"{mode} mode: {c['passed']} of {judged} passed ({c['failed']} unexpected "
                f"failures, {c['xfail']} expected failures, {c['xpass']} expected failures "
                f"that passed); {c['skipped']} skipped by unittest, {c['excluded']} excluded, "
                f"{c['deferred']} deferred (network), {c['not_exercised']} made no target loop"
            )


@pytest.fixture(scope="session")
def conformance_scheduler(request):
    wanted = [
        item.callspec.params["job"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_conformance" and hasattr(item, "callspec")
    ]
    scheduler = _Scheduler(wanted)
    request.config.pluginmanager.register(scheduler.summary, "snakeloop-conformance-counts")
    yield scheduler
    scheduler.close()


@pytest.mark.parametrize("job", JOBS, ids=[f"{j.mode}-{j.module}" for j in JOBS])
def test_conformance(job: run.Job, conformance_scheduler: _Scheduler) -> None:
    res = conformance_scheduler.result(job)
    verdict = run.judge(res, run.load_xfails(TARGET))
    conformance_scheduler.summary.add(job.mode, verdict.counts)
    if not verdict.ok:
        conformance_scheduler.all_ok = False
        c = verdict.counts
        pytest.fail(
            f"CPython {job.module} ({job.mode} mode) against {TARGET}{SEED_NOTE}: "
            f"{c['failed']} unexpected failure(s), {c['xpass']} expected failure(s) that passed, "
            f"{len(verdict.problems)} problem(s); {c['passed']} passed, {c['xfail']} expected "
            f"failures, {c['excluded']} excluded, {c['deferred']} deferred (network).\n"
            "Fix snakeloop, or list a test in tests/conformance/expected_failures.txt with the "
            "reason (remove entries that pass).\n\n" + run.format_failures(res, verdict),
            pytrace=False,
        )
