"""The per-test time limit (tests/_time_limits.py) ends hangs, in an inner pytest run.

Each test runs a pytest session in a subprocess (``pytester.runpytest_subprocess``) with this
project's timeout settings from pyproject.toml and the ``_time_limits`` plugin, on test files
that hang in the ways the plugin's three stages are for.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
import time
import tomllib

import pytest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
PROJECT_DIR = os.path.dirname(TESTS_DIR)

pytestmark = pytest.mark.slow  # each inner run starts a Python process and waits out limits

# The helper thread every hanging test keeps alive, so that "every thread's stack" means two.
HELPER = """
import threading

import pytest


@pytest.fixture
def helper_thread():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="helper-thread")
    thread.start()
    yield thread
    stop.set()
    thread.join()
"""

SOFT_HANGS = """
import asyncio
import signal
import threading
import time

import pytest


@pytest.mark.timeout(2)
def test_waits_forever(helper_thread):
    threading.Event().wait()


@pytest.mark.timeout(1)
def test_busy_event_loop():
    # The interruptions land in a callback: asyncio hands exceptions raised there to the
    # loop's exception handler, except SystemExit and KeyboardInterrupt.
    loop = asyncio.new_event_loop()

    def spin():
        loop.call_soon(spin)  # first, so that the loop stays busy if this one is interrupted
        busy_until = time.monotonic() + 0.05
        while time.monotonic() < busy_until:
            pass

    loop.call_soon(spin)
    try:
        loop.run_forever()
    finally:
        loop.close()


@pytest.mark.timeout(1)
def test_catches_the_first_interruption():
    try:
        threading.Event().wait()
    except BaseException:
        pass
    threading.Event().wait()


def test_takes_over_sigalrm():
    signal.signal(signal.SIGALRM, signal.SIG_IGN)


def test_runs_after_them():
    pass
"""

BLOCKED_IN_C = """
import ctypes
import threading

import pytest


def block_in_c_holding_the_gil():
    # CPython's own lock API, called through PyDLL (the GIL stays held), waits for a lock it
    # already holds and retries EINTR: the main thread never runs Python code again, as in a
    # signal handler that deadlocks on a lock the code it interrupted holds.
    if not hasattr(ctypes, "pythonapi"):
        # PyPy has no C API to call: a POSIX mutex locked twice (glibc's default mutex
        # deadlocks, and a signal does not end the wait) blocks the same way, with the
        # GIL released, which changes nothing for a thread that never returns.
        libc = ctypes.CDLL(None)
        mutex = ctypes.create_string_buffer(64)  # zeroed: PTHREAD_MUTEX_INITIALIZER
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)
    api = ctypes.pythonapi
    api.PyThread_allocate_lock.restype = ctypes.c_void_p
    api.PyThread_acquire_lock.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lock = api.PyThread_allocate_lock()
    api.PyThread_acquire_lock(lock, 1)
    api.PyThread_acquire_lock(lock, 1)


@pytest.fixture
def blocks_at_teardown():
    yield
    block_in_c_holding_the_gil()


@pytest.mark.timeout(1)
def test_blocked_in_call(helper_thread):
    block_in_c_holding_the_gil()


@pytest.mark.timeout(1)
def test_blocked_in_teardown_after_a_timeout(helper_thread, blocks_at_teardown):
    threading.Event().wait()  # interrupted at the limit; the test fails, then teardown runs


def test_would_run_after_it():
    pass
"""


def _project_timeout_settings() -> str:
    with open(os.path.join(PROJECT_DIR, "pyproject.toml"), "rb") as f:
        ini = tomllib.load(f)["tool"]["pytest"]["ini_options"]
    # JSON numbers and strings are TOML ones too.
    lines = [f"{key} = {json.dumps(ini[key])}" for key in ("timeout", "timeout_method")]
    return "[tool.pytest.ini_options]\n" + "\n".join(lines) + "\n"


def _inner_run(pytester: pytest.Pytester, monkeypatch, tests: str, *args: str):
    pytester.makepyprojecttoml(_project_timeout_settings())
    pytester.makeconftest(HELPER)
    pytester.makepyfile(test_inner=textwrap.dedent(tests))
    path = os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        "-p", "_time_limits", "-p", "no:cacheprovider", "-rA", *args, timeout=60
    )  # fmt: skip
    return result, time.monotonic() - started


def _failure_sections(out: str) -> dict[str, str]:
    """The report of each failed test, by test name (pytest's "____ name ____" sections)."""
    parts = re.split(r"^_{3,} (\w+) _{3,}$", out, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _thread_block(text: str, header: str) -> str:
    """The lines of ``text`` from ``header`` to the next blank line."""
    start = text.index(header)
    end = text.find("\n\n", start)
    return text[start : end if end >= 0 else len(text)]


def test_hung_tests_fail_with_every_stack_and_the_run_goes_on(pytester, monkeypatch):
    # kill_after=12 makes interruptions repeat every 2 s (kill_after / 6).
    result, seconds = _inner_run(pytester, monkeypatch, SOFT_HANGS, "-o", "timeout_kill_after=12")
    out = result.stdout.str()
    result.assert_outcomes(failed=4, passed=1)
    assert seconds < 30, out
    summary = {
        m.group(2): m.group(1)
        for m in re.finditer(r"^(PASSED|FAILED) test_inner\.py::(\w+)", out, re.M)
    }
    assert summary == {
        "test_waits_forever": "FAILED",
        "test_busy_event_loop": "FAILED",
        "test_catches_the_first_interruption": "FAILED",
        "test_takes_over_sigalrm": "FAILED",
        "test_runs_after_them": "PASSED",
    }, out

    failures = _failure_sections(out)
    # Stage 1: the stacks of both threads, in the failure of the test that hung.
    hung = failures["test_waits_forever"]
    assert "ran past its time limit of 2 s (in call" in hung
    main = _thread_block(hung, "Thread MainThread")
    assert "in test_waits_forever" in main and "threading.Event().wait()" in main, hung
    helper = _thread_block(hung, "Thread helper-thread")
    assert "in run" in helper and "in wait" in helper, hung

    # A running event loop does not swallow the interruption.
    assert "ran past its time limit of 1 s (in call" in failures["test_busy_event_loop"]

    # Stage 2: an interruption that the test caught is repeated.
    assert "is still running" in failures["test_catches_the_first_interruption"]

    # A test that takes SIGALRM over is told so.
    assert "installed its own SIGALRM handler" in failures["test_takes_over_sigalrm"]


@pytest.mark.parametrize(
    ("test", "where"),
    [
        ("test_blocked_in_call", "in test_blocked_in_call"),
        # The interruption fails the test first: the last stage must outlive that.
        ("test_blocked_in_teardown_after_a_timeout", "in blocks_at_teardown"),
    ],
)
def test_a_main_thread_stuck_in_c_is_stopped_with_every_stack(pytester, monkeypatch, test, where):
    result, seconds = _inner_run(
        pytester, monkeypatch, BLOCKED_IN_C, "-k", f"{test} or test_would_run_after_it",
        "-o", "timeout_kill_after=2",
    )  # fmt: skip
    out, err = result.stdout.str(), result.stderr.str()
    # Stage 3: faulthandler prints every thread's stack and the process exits with status 1;
    # nothing after that runs.
    assert result.ret == 1, out + err
    assert "test_would_run_after_it" not in out
    assert seconds < 30, out + err
    # The limit is 1 s and kill_after 2 s: 3 s, or what was left of them when it was re-armed.
    dump = err[re.search(r"^Timeout \(0:00:0[0-3](\.\d+)?\)!$", err, re.M).start() :]
    threads = re.split(r"\n(?=Thread 0x)", dump)
    stuck = [t for t in threads if where in t]
    waiting = [t for t in threads if "threading.py" in t and " in run" in t and " in wait" in t]
    assert len(stuck) == 1 and len(waiting) == 1, dump
