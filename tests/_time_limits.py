"""Per-test time limits: a hung test fails with every thread's stack, and the run goes on.

pytest-timeout supplies the limit of each test (``timeout`` in pyproject.toml, ``--timeout``,
``PYTEST_TIMEOUT`` or a ``@pytest.mark.timeout`` marker); this plugin supplies how a test that
reaches it is stopped, through pytest-timeout's ``pytest_timeout_set_timer`` hook, in three
stages, each for the hangs the one before cannot end:

1. At the limit, SIGALRM interrupts the main thread and raises :class:`TimeLimitExceeded`
   there; its message holds the stack of every thread.  The test fails and the run goes on.
2. While the phase it interrupted (setup, call or teardown) is still running, it is raised
   again every ``timeout_kill_after / 6`` seconds: code under test may have caught the first
   one.  A phase that starts after an interruption gets one such period of its own first, so
   that the clean-up of a test that timed out can run.
3. ``timeout_kill_after`` seconds after the limit (an ini option, 60 by default),
   faulthandler prints the stack of every thread to the terminal and exits the process with
   status 1, which fails the run.  This is for a main thread that never runs Python code
   again: blocked in C, or deadlocked while it holds the GIL.

Under ``--pdb``, ``--trace`` or ``breakpoint()`` a test is not interrupted (pytest-timeout's
rule) nor stopped; ``--timeout=0`` switches the limits off.

OS and CPython facts this relies on:

* Python-level signal handlers run in the main thread, between bytecodes.  A blocking call
  interrupted by a signal (EINTR) runs them and raises what they raise (PEP 475); a C call
  that retries EINTR without running them (a lock taken inside CPython, say) is not
  interrupted.
* SIGALRM and the ``ITIMER_REAL`` timer exist once per process.  A test that installs its own
  SIGALRM handler or sets that timer switches stages 1 and 2 off; the plugin reports it as an
  error of the test.  Code that needs SIGALRM runs in a child process.
* asyncio hands every exception a callback raises to the loop's exception handler, except
  SystemExit and KeyboardInterrupt, which it re-raises (Task steps do the same).
  :class:`TimeLimitExceeded` derives from SystemExit so that it ends a hang inside a running
  loop too; pytest reports a SystemExit raised by a test as that test's failure.
* ``faulthandler.dump_traceback_later`` runs in a C thread of its own that needs no GIL, so
  it works even when the main thread deadlocked holding it.  There is one such timer per
  process: pytest's ``faulthandler_timeout`` would use the same one (it is not set), and
  pytest's faulthandler plugin cancels it whenever a test fails, so it is armed again then.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from types import FrameType

import _pytest
import pluggy
import pytest
from pytest_timeout import is_debugging

__all__ = ["TimeLimitExceeded", "format_all_stacks"]

_KILL_AFTER_HELP = (
    "seconds after a test's time limit at which a test that the SIGALRM interruption could "
    "not end is stopped by printing every thread's stack and exiting with status 1"
)
_KILL_AFTER_DEFAULT = "60"
_STAGE_2_PERIODS = 6  # interruptions repeat every kill_after / 6 seconds

_terminal_fd = pytest.StashKey[int]()


class TimeLimitExceeded(SystemExit):
    """A test ran past its time limit (a SystemExit, so that event loops let it through)."""


# pytest's and pluggy's frames under a test say nothing about the hang.
_RUNNER_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (_pytest, pluggy))


def format_all_stacks(main_frame: FrameType | None = None) -> str:
    """The stack of every thread, oldest call first; ``main_frame`` stands for the main thread.

    A stack starts after the last frame of pytest's test runner, at the test or fixture.
    """
    names = {t.ident: t.name for t in threading.enumerate()}
    main_ident = threading.main_thread().ident
    blocks = []
    for ident, frame in sorted(sys._current_frames().items(), key=lambda kv: kv[0] != main_ident):
        if ident == main_ident and main_frame is not None:
            frame = main_frame
        entries = traceback.extract_stack(frame)
        runner = [i for i, e in enumerate(entries) if e.filename.startswith(_RUNNER_DIRS)]
        if runner:
            entries = entries[runner[-1] + 1 :]
        name = names.get(ident, "not started by threading")
        stack = "".join(traceback.format_list(entries))
        blocks.append(f"Thread {name} (ident {ident}), most recent call last:\n{stack}")
    return "\n".join(blocks)


class _Limit:
    """The time limit of the test that is running."""

    def __init__(self, item: pytest.Item, timeout: float, kill_after: float) -> None:
        self.item = item
        self.timeout = timeout
        self.kill_after = kill_after
        self.period = max(1.0, kill_after / _STAGE_2_PERIODS)
        self.deadline = time.monotonic() + timeout
        self.phase: str | None = None  # None between phases: pytest's own code runs there
        self.raised_in: str | None = None
        self.spared: str | None = None
        self.owns_alarm = False
        self.backstop_armed = False
        self._handler = self._on_alarm  # one bound method, so that getsignal() can be compared
        self._previous_handler: object = None

    # -- stages 1 and 2: SIGALRM -------------------------------------------------------------

    def arm_alarm(self) -> None:
        self._previous_handler = signal.signal(signal.SIGALRM, self._handler)
        signal.setitimer(signal.ITIMER_REAL, self.timeout, self.period)
        self.owns_alarm = True

    def alarm_taken_over(self) -> str | None:
        """What a test did to SIGALRM or ITIMER_REAL, if anything; puts the limit back."""
        if not self.owns_alarm:
            return None
        problems = []
        if signal.getsignal(signal.SIGALRM) is not self._handler:
            problems.append("installed its own SIGALRM handler")
            signal.signal(signal.SIGALRM, self._handler)
        _, interval = signal.getitimer(signal.ITIMER_REAL)
        if abs(interval - self.period) > 1e-3:
            problems.append("set or stopped the ITIMER_REAL timer")
            left = self.deadline - time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, left if left > 0 else self.period, self.period)
        if not problems:
            return None
        return (
            f"this test {' and '.join(problems)}, which the per-test time limit uses "
            "(tests/_time_limits.py): run the code that needs SIGALRM in a child process"
        )

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        __tracebackhide__ = True
        if is_debugging():  # pytest-timeout's rule: a debugger session is not interrupted
            return
        phase = self.phase
        if phase is None:
            return  # between phases: the next period interrupts the next phase
        if self.raised_in not in (None, phase) and self.spared != phase:
            self.spared = phase  # the last interruption ended its phase; this one gets a period
            return
        first = self.raised_in is None
        self.raised_in = phase
        if first:
            what = f"ran past its time limit of {self.timeout:g} s"
        else:
            overrun = time.monotonic() - self.deadline
            what = (
                f"is still running {overrun:.0f} s after its time limit of {self.timeout:g} s: "
                "the interruption before this one was caught"
            )
        raise TimeLimitExceeded(
            f"Timeout: the test {what} (in {phase}; the process is stopped "
            f"{self.kill_after:g} s after the limit).\nThe stack of every thread:\n\n"
            + format_all_stacks(frame)
        )

    # -- stage 3: faulthandler's watchdog thread -----------------------------------------------

    def arm_backstop(self) -> None:
        left = self.deadline + self.kill_after - time.monotonic()
        faulthandler.dump_traceback_later(
            max(left, 1.0), exit=True, file=self.item.config.stash[_terminal_fd]
        )
        self.backstop_armed = True

    def disarm(self) -> None:
        if self.backstop_armed:
            faulthandler.cancel_dump_traceback_later()
        if self.owns_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
            signal.signal(signal.SIGALRM, self._previous_handler or signal.SIG_DFL)


_current: _Limit | None = None
_interacting = False  # inside pytest_exception_interact


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("timeout_kill_after", _KILL_AFTER_HELP, default=_KILL_AFTER_DEFAULT)


def pytest_configure(config: pytest.Config) -> None:
    # Here, as for pytest's faulthandler plugin, fd 2 is still the terminal: output capture
    # replaces it only while tests run.
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, ValueError):
        fd = sys.__stderr__.fileno()
    config.stash[_terminal_fd] = os.dup(fd)


def pytest_unconfigure(config: pytest.Config) -> None:
    fd = config.stash.get(_terminal_fd, None)
    if fd is not None:
        os.close(fd)
        del config.stash[_terminal_fd]


def _debugging(config: pytest.Config) -> bool:
    return bool(config.getoption("usepdb", False) or config.getoption("trace", False))


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # pytest-timeout's hooks
def pytest_timeout_set_timer(item: pytest.Item, settings) -> bool | None:
    global _current
    if _current is not None:
        _current.disarm()
    limit = _Limit(item, settings.timeout, float(item.config.getini("timeout_kill_after")))
    _current = limit
    if not _debugging(item.config):
        limit.arm_backstop()
    if settings.method == "signal" and threading.current_thread() is threading.main_thread():
        limit.arm_alarm()
        return True
    return None  # pytest-timeout's thread method (stage 3 still applies)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # pytest-timeout's hooks
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool | None:
    global _current
    limit = _current
    if limit is None or limit.item is not item:
        return None
    if _interacting and not _debugging(item.config):
        # pytest-timeout stops the timer when a phase fails; the phases after it (teardown)
        # keep their limit here.
        return True
    limit.disarm()
    _current = None
    return None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_exception_interact(node, call, report):
    global _interacting
    _interacting = True
    try:
        return (yield)
    finally:
        _interacting = False
        limit = _current
        if limit is not None and limit.item is node and not _debugging(node.config):
            limit.arm_backstop()  # pytest's faulthandler plugin has just cancelled it


def _in_phase(item: pytest.Item, phase: str):
    limit = _current
    if limit is None or limit.item is not item:
        return (yield)
    limit.phase = phase
    try:
        result = yield
    finally:
        limit.phase = None
    taken_over = limit.alarm_taken_over()
    if taken_over:
        pytest.fail(taken_over, pytrace=False)
    return result


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _in_phase(item, "setup"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _in_phase(item, "call"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem):
    return (yield from _in_phase(item, "teardown"))
