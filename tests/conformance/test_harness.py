"""The conformance harness's own rules, checked without running CPython's tests.

A job that selects no test must fail, not pass or skip: it would report a module as
conforming while running nothing of it.
"""

from __future__ import annotations

import pytest

import snakeloop

try:
    from . import _data, run
    from . import test_cpython_asyncio as suite
except ImportError:  # imported without its package (e.g. pytest's importlib import mode)
    import _data  # type: ignore[no-redef]
    import run  # type: ignore[no-redef]
    import test_cpython_asyncio as suite  # type: ignore[no-redef]


def _empty_result(**fields) -> run.JobResult:
    return run.JobResult(run.Job("loop", "test_locks"), **fields)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"excluded": [["test_locks.LockTests.test_repr", "private"]]},
        {"deferred": ["test_locks.LockTests.test_repr"]},
        {"module_skip": "requires a resource"},
    ],
    ids=["nothing", "all-excluded", "all-deferred", "module-skipped"],
)
def test_a_job_that_selects_nothing_is_a_failure(fields):
    verdict = run.judge(_empty_result(**fields), xfails=None)
    assert not verdict.ok
    assert [p for p in verdict.problems if p.startswith("nothing selected to run")]


def test_a_job_that_selects_a_passing_test_is_ok():
    tid = "test_locks.LockTests.test_repr"
    res = _empty_result(ids=[tid], results={tid: {"id": tid, "outcome": "pass"}})
    verdict = run.judge(res, xfails=None)
    assert verdict.ok, verdict.problems
    assert verdict.counts["passed"] == 1


class _FinishedScheduler:
    """Stands in for the session's scheduler: hands back a result made beforehand."""

    all_ok = True

    def __init__(self, result: run.JobResult) -> None:
        self._result = result
        self.summary = suite._CountsSummary()

    def result(self, job: run.Job) -> run.JobResult:
        return self._result


def test_the_pytest_test_of_an_empty_job_fails_and_does_not_skip():
    res = _empty_result(deferred=["test_locks.LockTests.test_repr"])
    # A skip raised in here would skip this test too: catch it to see it.
    with pytest.raises((pytest.fail.Exception, pytest.skip.Exception)) as outcome:
        suite.test_conformance(res.job, _FinishedScheduler(res))
    assert outcome.type is pytest.fail.Exception
    assert "nothing selected to run" in str(outcome.value)


class _Reporter:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def section(self, title: str) -> None:
        self.lines.append(f"== {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def test_the_run_ends_with_the_counts_of_each_mode():
    # CI's log is where the counts per Python and build are read.
    summary = suite._CountsSummary()
    reporter = _Reporter()
    summary.pytest_terminal_summary(reporter)
    assert reporter.lines == []  # no conformance test ran: nothing to say
    base = dict.fromkeys(run.COLUMNS, 0)
    summary.add("loop", {**base, "passed": 3, "xfail": 1, "excluded": 2})
    summary.add("loop", {**base, "passed": 4, "failed": 1})
    summary.add("task", {**base, "passed": 5})
    summary.pytest_terminal_summary(reporter)
    build = "compiled" if snakeloop.COMPILED else "pure"
    assert reporter.lines[0].startswith("== CPython's test.test_asyncio against ")
    assert reporter.lines[0].endswith(f", {build} build")
    assert reporter.lines[1].startswith(
        "loop mode: 7 of 9 passed (1 unexpected failures, 1 expected failures, "
    )
    assert "2 excluded" in reporter.lines[1]
    assert reporter.lines[2].startswith("task mode: 5 of 5 passed (0 unexpected failures")


def test_jobs_leave_out_what_has_nothing_to_run_here():
    selection = {
        "network": False,
        "test_locks": {"loop": {"keep": ["LockTests"]}},
        "test_streams": {"network": True, "loop": {"keep": ["StreamTests"]}},
        "test_queues": {"python": "-3.10", "loop": {"keep": ["QueueBasicTests"]}},
        "test_not_in_cpython": {"loop": {"keep": ["X"]}},
    }
    names = [j.name for j in run.available_jobs(selection, network=False)]
    assert names == ["loop:test_locks"]
    names = [j.name for j in run.available_jobs(selection, network=True)]
    assert names == ["loop:test_locks", "loop:test_streams"]


def test_every_python_key_of_the_selection_is_a_version_tag():
    selection = _data.load_selection()
    for module in _data.module_names(selection):
        for version in ((3, 11), (3, 12), (3, 13)):
            _data.module_runs_on(selection, module, version)  # raises on a bad tag
    assert not _data.module_runs_on(selection, "test_server", (3, 12))
    assert _data.module_runs_on(selection, "test_server", (3, 13))


def test_list_entries_can_be_limited_to_one_build(tmp_path):
    listed = tmp_path / "list.txt"
    listed.write_text(
        "[3.12+, compiled] test_a.T.test_one  # only compiled, 3.12 on\n"
        "[pure] test_a.T.test_two  # only pure, every version\n"
        "test_a.T.test_three  # always\n"
    )

    def ids(version, build):
        entries = _data.PatternList.load(str(listed), version, build).entries
        return [e.pattern.rpartition(".")[2] for e in entries]

    assert ids((3, 12), "compiled") == ["test_one", "test_three"]
    assert ids((3, 11), "compiled") == ["test_three"]
    assert ids((3, 13), "pure") == ["test_two", "test_three"]
    with pytest.raises(ValueError, match="build tag"):
        _data.PatternList.load(str(listed), (3, 12))


def test_expected_failures_load_for_the_running_build(tmp_path, monkeypatch):
    import snakeloop

    listed = tmp_path / "expected_failures.txt"
    listed.write_text("[compiled] test_a.T.test_c  # compiled\n[pure] test_a.T.test_p  # pure\n")
    monkeypatch.setattr(_data, "EXPECTED_FAILURES_FILE", str(listed))
    xfails = run.load_xfails("snakeloop")
    assert xfails is not None
    running = "test_a.T.test_c" if snakeloop.COMPILED else "test_a.T.test_p"
    assert [e.pattern for e in xfails.entries] == [running]
    assert run.load_xfails("asyncio") is None
