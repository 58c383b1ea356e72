"""The plugin's options and environment variables, and its silence when nothing asks for it."""

from __future__ import annotations

import pytest

from ._pluginkit import RUNNERS, run

UNMARKED = """
import asyncio

import snakeloop


async def test_unmarked():
    loop = asyncio.get_running_loop()
    assert isinstance(loop, snakeloop.Loop)
    print("virtual:", loop.get_clock().is_virtual)
    await asyncio.sleep(3600)
    assert loop.time() == 3600
"""

VIRTUAL_UNLESS_OPTED_OUT = (
    UNMARKED
    + """

import pytest


@pytest.mark.snakeloop(virtual_time=False)
async def test_opted_out(snakeloop_clock):
    assert not snakeloop_clock.is_virtual
"""
)


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_snakeloop_option_runs_unmarked_tests_on_snakeloop_in_real_time(pytester, runner):
    source = """
import asyncio

import snakeloop


async def test_unmarked():
    loop = asyncio.get_running_loop()
    assert isinstance(loop, snakeloop.Loop)
    assert not loop.get_clock().is_virtual
"""
    run(pytester, source, "--snakeloop", runner=runner).assert_outcomes(passed=1)


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_virtual_time_option_gives_every_test_virtual_time(pytester, runner):
    result = run(pytester, VIRTUAL_UNLESS_OPTED_OUT, "--snakeloop-virtual-time", runner=runner)
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize(("value", "passed"), [("1", 2), ("true", 2)])
def test_virtual_time_environment_variable(pytester, monkeypatch, value, passed):
    monkeypatch.setenv("SNAKELOOP_VIRTUAL_TIME", value)
    run(pytester, VIRTUAL_UNLESS_OPTED_OUT, runner="plain").assert_outcomes(passed=passed)


def test_virtual_time_environment_variable_at_zero_leaves_tests_alone(pytester, monkeypatch):
    monkeypatch.setenv("SNAKELOOP_VIRTUAL_TIME", "0")
    source = """
import asyncio

async def test_unmarked():
    pass
"""
    result = run(pytester, source, runner="plain")
    # pytest itself refuses an async test that no plugin runs.
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*async def functions are not natively supported*"])


def test_a_wrong_virtual_time_environment_variable_is_a_usage_error(pytester, monkeypatch):
    monkeypatch.setenv("SNAKELOOP_VIRTUAL_TIME", "maybe")
    result = run(pytester, UNMARKED, runner="plain")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "snakeloop: SNAKELOOP_VIRTUAL_TIME='maybe' is neither 1 nor 0; set it to 1 to run "
        "asyncio tests with virtual time, or unset it" in result.stderr.str()
    )


def test_looptime_option_is_the_virtual_time_option(pytester):
    run(pytester, VIRTUAL_UNLESS_OPTED_OUT, "--looptime", runner="plain").assert_outcomes(passed=2)


# A deadlock "log" mode only logs, then waits on: the handler below wakes the test from the
# log record, through call_soon_threadsafe (which wakes a loop blocked in its poll).
DEADLOCK = """
import asyncio
import logging

import pytest


class Rescue(logging.Handler):
    def __init__(self, loop, future):
        super().__init__(logging.ERROR)
        self.loop, self.future, self.messages = loop, future, []

    def emit(self, record):
        self.messages.append(record.getMessage())
        self.loop.call_soon_threadsafe(self.future.set_result, None)


async def stuck_until_logged():
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    rescue = Rescue(loop, future)
    logging.getLogger("snakeloop").addHandler(rescue)
    try:
        await future
    finally:
        logging.getLogger("snakeloop").removeHandler(rescue)
    assert "deadlock" in rescue.messages[0]


async def test_default():
    await stuck_until_logged()


@pytest.mark.snakeloop(deadlock="log")
async def test_marked_log():
    await stuck_until_logged()


@pytest.mark.snakeloop(deadlock="raise")
async def test_marked_raise():
    await stuck_until_logged()
"""


@pytest.mark.parametrize(
    ("how", "outcomes"),
    [
        ((), {"passed": 1, "failed": 2}),
        (("--snakeloop-deadlock=log",), {"passed": 2, "failed": 1}),
        (("--snakeloop-deadlock=raise",), {"passed": 1, "failed": 2}),
        ("SNAKELOOP_DEADLOCK=log", {"passed": 2, "failed": 1}),
    ],
)
def test_deadlock_option_environment_variable_and_marker(
    pytester, monkeypatch, asyncio_errors, how, outcomes
):
    args: tuple[str, ...] = ("--snakeloop-virtual-time",)
    if isinstance(how, str):
        name, _, value = how.partition("=")
        monkeypatch.setenv(name, value)
    else:
        args += how
    result = run(pytester, DEADLOCK, *args, runner="plain")
    result.assert_outcomes(**outcomes)
    assert "DeadlockError" in result.stdout.str()
    # Each test in "log" mode logged its deadlock once (on this process's snakeloop logger).
    logged = [r for r in asyncio_errors if "deadlock" in r.getMessage()]
    assert len(logged) == outcomes["passed"]


def test_the_deadlock_option_refuses_other_values(pytester):
    result = run(pytester, UNMARKED, "--snakeloop-deadlock=ignore", runner="plain")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "invalid choice: 'ignore'" in result.stderr.str()


INERT = """
import asyncio

import pytest


@pytest.fixture
async def fixture_loop():
    return asyncio.get_running_loop()


async def test_stdlib_loop(request, fixture_loop):
    loop = asyncio.get_running_loop()
    assert type(loop).__module__.startswith("asyncio")
    assert fixture_loop is loop
    assert request.config.pluginmanager.get_plugin("snakeloop-pytest-asyncio") is None


def test_sync():
    pass
"""


def test_a_session_that_does_not_use_it_sees_no_change(pytester):
    result = run(pytester, INERT, "-v", runner="pytest-asyncio")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_inner.py::test_stdlib_loop PASSED*"])


MIXED = """
import asyncio

import pytest

import snakeloop


async def test_unmarked_first():
    assert type(asyncio.get_running_loop()).__module__.startswith("asyncio")


@pytest.mark.snakeloop
async def test_marked():
    assert isinstance(asyncio.get_running_loop(), snakeloop.Loop)


async def test_unmarked_after():
    assert type(asyncio.get_running_loop()).__module__.startswith("asyncio")
"""


@pytest.mark.parametrize("runner", ["pytest-asyncio", "anyio"])
def test_unmarked_tests_beside_marked_ones_keep_the_stdlib_loop(pytester, runner):
    result = run(pytester, MIXED, "-v", runner=runner)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_inner.py::test_unmarked_first PASSED*"])


STRICT = """
import asyncio

import pytest

import snakeloop


@pytest.mark.snakeloop
async def test_only_snakeloop_marked_runs_on_the_plugin():
    assert isinstance(asyncio.get_running_loop(), snakeloop.Loop)
    await asyncio.sleep(60)
    assert asyncio.get_running_loop().time() == 60


@pytest.mark.asyncio
@pytest.mark.snakeloop(start=5)
async def test_both_marks_run_on_pytest_asyncio(request, loop_time):
    assert isinstance(asyncio.get_running_loop(), snakeloop.Loop)
    assert "_function_scoped_runner" in request.fixturenames
    assert loop_time == 5


@pytest.mark.asyncio
async def test_asyncio_mark_alone_keeps_the_stdlib_loop():
    assert type(asyncio.get_running_loop()).__module__.startswith("asyncio")
"""


def test_pytest_asyncio_strict_mode(pytester):
    run(pytester, STRICT, "-p", "no:anyio", "-o", "asyncio_mode=strict").assert_outcomes(passed=3)
