"""Fixtures and per-test leak guards for the snakeloop test-suite.

Every test runs under :func:`_leak_guard` (autouse), which fails the test if it
leaves behind open file descriptors, threads, unclosed event loops, objects
whose finalizers warn (``ResourceWarning``) or raise, a changed event loop
policy, a running loop, or unexpected ERROR records on the ``asyncio`` /
``snakeloop`` loggers (for example "Task was destroyed but it is pending!").

Tests that *expect* such log records request :func:`asyncio_errors`; tests
that expect their loop's exception handler to be called request
:func:`loop_errors`.

Every test also has a time limit (``timeout`` in pyproject.toml, enforced by
pytest-timeout and ``_time_limits``): a hung test fails with the stack of every
thread and the run goes on.  Tests marked ``stress`` get a longer limit here;
a test that needs another one says so with ``@pytest.mark.timeout(seconds)``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import warnings
import weakref
import zlib

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Before anything imports test.support (the TLS tests' certificates, the conformance suite).
from conformance._pypy import let_pypys_test_package_import  # noqa: E402

let_pypys_test_package_import()

import _loopkit  # noqa: E402
from _loopkit import (  # noqa: E402
    LOOP_KINDS,
    ExceptionRecorder,
    FakeClock,
    close_loop,
    new_fds,
    new_loop,
    open_fds,
    snakeloop_module,
)
from _policies import get_policy, set_policy  # noqa: E402

pytest_plugins = ["_time_limits", "pytester"]

_LOGGERS = ("asyncio", "snakeloop")
_THREAD_GRACE = 5.0
# The slowest stress test took 36 s (-m stress --durations=30, 3.11, a busy 2-core machine).
STRESS_TIME_LIMIT = 300.0


if sys.implementation.name == "pypy":
    # On PyPy gc.get_objects() walks the whole heap, a second or so after each test (most of
    # the suite's time there), and hands out dead weak proxies, on which isinstance() raises
    # ReferenceError.  Loops are counted as they are made instead.  (A loop class without
    # __weakref__ goes uncounted there.)
    _made_loops: weakref.WeakSet = weakref.WeakSet()

    def _counted_new(cls, *args, **kwargs):
        loop = object.__new__(cls)
        try:
            _made_loops.add(loop)
        except TypeError:
            pass
        return loop

    asyncio.AbstractEventLoop.__new__ = _counted_new  # type: ignore[method-assign]

    def _live_loops() -> list[asyncio.AbstractEventLoop]:
        return list(_made_loops)

else:

    def _live_loops() -> list[asyncio.AbstractEventLoop]:
        return [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]


# Loops alive before the first test (created at import time by plugins, say)
# are not this suite's business.
_baseline_loops: weakref.WeakSet = weakref.WeakSet()


def pytest_sessionstart(session: pytest.Session) -> None:
    for lp in _live_loops():
        try:
            _baseline_loops.add(lp)
        except TypeError:
            pass


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """A failure whose traceback pytest cannot format is still reported as a failure.

    From CPython 3.11 a traceback entry's ``tb_lineno`` is None at an instruction that
    has no line, and pytest (9.0) computes ``tb_lineno - 1`` while it formats one: an
    INTERNALERROR that ends the whole session, and the test that failed is never named
    (a CI run of 3.11 was lost so).  The report then carries a plain listing of the
    traceback, line None where there is none.  (PyPy's own traceback module fails there
    too, with a RuntimeError from the StopIteration of its position table.)  Innermost of
    the wrappers: an outer
    old-style one (hypothesis') turns the error into a warning, which is an error here,
    and the xfail marks are still applied to this report.
    """
    try:
        return (yield)
    except (TypeError, RuntimeError):
        if call.excinfo is None:
            raise
        error = call.excinfo.value
        entries = []
        tb = error.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            entries.append(f"  File {code.co_filename!r}, line {tb.tb_lineno}, in {code.co_name}")
            tb = tb.tb_next
        text = "\n".join(["Traceback (most recent call last):", *entries, repr(error)])
        return pytest.TestReport(
            item.nodeid,
            item.location,
            dict.fromkeys(item.keywords, 1),
            "failed",
            "pytest could not format this failure (a traceback entry without a line "
            "number); the standard library's traceback:\n" + text,
            call.when,
            duration=call.duration,
            start=call.start,
            stop=call.stop,
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("stress") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(STRESS_TIME_LIMIT))
    # Under --snakeloop-seeds every test is repeated, but a seed changes only snakeloop
    # loops: the later runs of a stdlib-loop case or of an unseeded test would repeat the
    # first one exactly.
    repeats = [item for item in items if _repeats_an_unseeded_run(item)]
    if repeats:
        config.hook.pytest_deselected(items=repeats)
        dropped = set(repeats)
        items[:] = [item for item in items if item not in dropped]


def _repeats_an_unseeded_run(item: pytest.Item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    if not params.get("_snakeloop_seed_run"):  # not a run of --snakeloop-seeds, or run 0
        return False
    if item.get_closest_marker("unseeded") is not None:
        return True
    return any(str(params.get(name, "")).startswith("stdlib") for name in ("loop_kind", "kind"))


def pytest_collection_finish(session: pytest.Session) -> None:
    # Everything imported so far lives for the whole session: move it out of
    # the collector's way so that the per-test gc passes stay cheap.  (PyPy's
    # collector has no permanent generation, and no gc.freeze.)
    gc.collect()
    if hasattr(gc, "freeze"):
        _register_hypothesis_random()
        gc.freeze()


def _register_hypothesis_random() -> None:
    """Have Hypothesis register its per-thread Random now, before the freeze.

    On its first example Hypothesis checks with gc.get_referrers() that something holds
    that Random, and from 3.14 get_referrers() sees no frozen referrer: frozen first, the
    first Hypothesis test of a run would fail on the warning.
    """
    if "hypothesis" not in sys.modules:
        return
    try:
        from hypothesis.internal.entropy import deterministic_PRNG
    except ImportError:  # a Hypothesis without it has nothing to register
        return
    with deterministic_PRNG():
        pass


class _ErrorLogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(autouse=True)
def _leak_guard(request: pytest.FixtureRequest):
    capture = _ErrorLogCapture()
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    for lg in loggers:
        lg.addHandler(capture)
    request.node._asyncio_error_capture = capture

    fds_before = open_fds()
    threads_before = set(threading.enumerate())
    policy_before = get_policy()
    hooks_before = sys.get_asyncgen_hooks()

    yield

    problems: list[str] = []
    try:
        # Finalizers must neither warn nor raise.
        unraisable: list[str] = []
        old_hook = sys.unraisablehook

        def hook(u):
            unraisable.append(f"{u.exc_type.__name__}: {u.exc_value} (in {u.object!r})")

        sys.unraisablehook = hook
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for _ in range(3):
                    if not gc.collect():
                        break
        finally:
            sys.unraisablehook = old_hook
        for w in caught:
            problems.append(
                f"warning during garbage collection: {w.category.__name__}: {w.message}"
            )
        problems.extend(f"exception in a finalizer: {u}" for u in unraisable)

        # No event loop may be left open or running.
        if asyncio._get_running_loop() is not None:
            problems.append("a running event loop is still set after the test")
            asyncio._set_running_loop(None)
        for lp in _live_loops():
            if lp in _baseline_loops:
                continue
            if not lp.is_closed():
                problems.append(f"event loop left unclosed: {lp!r}")
                if not lp.is_running():
                    try:
                        close_loop(lp)
                    except Exception:  # noqa: BLE001 - reporting, not testing
                        lp.close()
        lp = None

        # set_event_loop_policy(None) brings back an equivalent default
        # policy object, so compare the kind of policy, not its identity.
        if type(get_policy()) is not type(policy_before):
            problems.append(
                f"the event loop policy was changed and not restored: {type(get_policy()).__name__}"
            )
            set_policy(policy_before)
        if sys.get_asyncgen_hooks() != hooks_before:
            problems.append("sys asyncgen hooks were changed and not restored")
            sys.set_asyncgen_hooks(*hooks_before)

        # Threads that are finishing get a short grace period.
        deadline = time.monotonic() + _THREAD_GRACE
        for th in set(threading.enumerate()) - threads_before:
            th.join(max(0.0, deadline - time.monotonic()))
        leaked_threads = [th for th in set(threading.enumerate()) - threads_before if th.is_alive()]
        if leaked_threads:
            problems.append(f"threads leaked: {leaked_threads!r}")

        # Which fds and what they are, not how many: a test that closes an fd it was given
        # and leaks one of its own keeps the count.
        fds_after = open_fds()
        leaked = new_fds(fds_before, fds_after)
        if leaked:
            closed = new_fds(fds_after, fds_before)
            problems.append(
                f"file descriptors leaked: {leaked!r}"
                + (f"; closed during the test: {closed!r}" if closed else "")
            )
    finally:
        for lg in loggers:
            lg.removeHandler(capture)

    if "loop_errors" not in request.fixturenames:
        for recorder in getattr(request.node, "_loop_recorders", []):
            if recorder.contexts:
                problems.append(
                    "the loop's exception handler was called unexpectedly: "
                    + "; ".join(
                        f"{ctx.get('message')!r} exception={ctx.get('exception')!r}"
                        for ctx in recorder.contexts
                    )
                )
    if not getattr(request.node, "_asyncio_errors_expected", False) and capture.records:
        problems.append(
            "unexpected ERROR log records: "
            + "; ".join(f"[{r.name}] {r.getMessage()}" for r in capture.records)
        )
    if problems:
        pytest.fail("leak guard:\n  " + "\n  ".join(problems), pytrace=False)


@pytest.fixture
def asyncio_errors(request: pytest.FixtureRequest) -> list[logging.LogRecord]:
    """ERROR records of the asyncio/snakeloop loggers, for tests that expect some.

    Requesting this fixture tells the leak guard not to fail on them; the test
    must make its own assertions about the list (it fills up to teardown, so
    call ``gc.collect()`` first when waiting for finalizer logs).
    """
    request.node._asyncio_errors_expected = True
    return request.node._asyncio_error_capture.records


@pytest.fixture
def data_file(request: pytest.FixtureRequest, tmp_path):
    """A file holding the test module's ``DATA`` bytes, open for reading at its start."""
    path = tmp_path / "data.bin"
    path.write_bytes(request.module.DATA)
    with open(path, "rb") as f:
        yield f


@pytest.fixture
def rng(request):
    """A ``random.Random`` seeded from the test's id; the seed is printed.

    The id's folder is left out, so that a test keeps its data when its module moves.
    """
    path, _, rest = request.node.nodeid.partition("::")
    seed = zlib.crc32(f"{os.path.basename(path)}::{rest}".encode())
    print(f"random seed {seed} for {request.node.nodeid}")
    return random.Random(seed)


@pytest.fixture
def sock_dir():
    """A short private directory for Unix socket paths (sun_path holds 107 bytes)."""
    path = tempfile.mkdtemp(prefix="sl-", dir="/tmp")
    os.chmod(path, 0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


def _make_loop_fixture(request: pytest.FixtureRequest, kind: str, clock=None):
    loop = new_loop(kind, clock=clock)
    recorder = ExceptionRecorder()
    loop.set_exception_handler(recorder)
    request.node._loop_recorders = getattr(request.node, "_loop_recorders", []) + [recorder]
    return loop, recorder


def _finish_loop(request: pytest.FixtureRequest, loop, recorder: ExceptionRecorder) -> None:
    # The leak guard checks the recorder after its gc passes, so that
    # handler calls from finalizers ("Task was destroyed...") count too.
    if loop.is_running():
        pytest.fail("the loop is still running at teardown", pytrace=False)
    close_loop(loop)


@pytest.fixture
def loop(request: pytest.FixtureRequest):
    """A snakeloop loop (real clock) whose exception handler must stay unused."""
    lp, recorder = _make_loop_fixture(request, "snakeloop")
    yield lp
    _finish_loop(request, lp, recorder)


@pytest.fixture
def virtual_loop(request: pytest.FixtureRequest):
    """A snakeloop loop on a ``VirtualClock`` (time starts at 0.0) whose exception handler must
    stay unused: sleeps and timeouts take no real time, and end at exact loop times."""
    lp, recorder = _make_loop_fixture(request, "snakeloop", clock=snakeloop_module().VirtualClock())
    yield lp
    _finish_loop(request, lp, recorder)


@pytest.fixture
def stdlib_loop(request: pytest.FixtureRequest):
    """A stdlib loop checked like :func:`loop`, for tests that need both at once."""
    lp, recorder = _make_loop_fixture(request, "stdlib")
    yield lp
    _finish_loop(request, lp, recorder)


@pytest.fixture(params=LOOP_KINDS)
def loop_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def any_loop(request: pytest.FixtureRequest, loop_kind: str):
    """Parametrised over snakeloop and the stdlib loop (real clock)."""
    lp, recorder = _make_loop_fixture(request, loop_kind)
    yield lp
    _finish_loop(request, lp, recorder)


@pytest.fixture
def any_loop_vt(request: pytest.FixtureRequest, loop_kind: str):
    """Like :func:`any_loop`, but snakeloop's loop runs on a ``VirtualClock``.

    The stdlib loop has no virtual clock and keeps the real one, so a test asserts exact
    loop times where :func:`is_virtual` says so and real-time bounds otherwise.
    """
    clock = snakeloop_module().VirtualClock() if loop_kind == "snakeloop" else None
    lp, recorder = _make_loop_fixture(request, loop_kind, clock=clock)
    yield lp
    _finish_loop(request, lp, recorder)


@pytest.fixture
def fake_loop(request: pytest.FixtureRequest, loop_kind: str, fake_clock: FakeClock):
    """Like :func:`any_loop` but running on :func:`fake_clock`."""
    lp, recorder = _make_loop_fixture(request, loop_kind, clock=fake_clock)
    yield lp
    _finish_loop(request, lp, recorder)


class LoopErrors:
    """Live view of the contexts recorded by the test's loop fixture(s)."""

    def __init__(self, node) -> None:
        self._node = node

    def _all(self) -> list[dict]:
        merged: list[dict] = []
        for rec in getattr(self._node, "_loop_recorders", []):
            merged.extend(rec.contexts)
        return merged

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self):
        return iter(self._all())

    def __getitem__(self, index):
        return self._all()[index]

    def messages(self) -> list[str]:
        return [ctx.get("message", "") for ctx in self._all()]

    def clear(self) -> None:
        for rec in getattr(self._node, "_loop_recorders", []):
            rec.contexts.clear()

    def __repr__(self) -> str:
        return f"LoopErrors({self._all()!r})"


@pytest.fixture
def fake_snakeloop(request: pytest.FixtureRequest, fake_clock: FakeClock):
    """A snakeloop loop on :func:`fake_clock` (for snakeloop-only guarantees)."""
    lp, recorder = _make_loop_fixture(request, "snakeloop", clock=fake_clock)
    yield lp
    _finish_loop(request, lp, recorder)


@pytest.fixture
def loop_errors(request: pytest.FixtureRequest) -> LoopErrors:
    """Contexts passed to the exception handler of the test's loop fixture(s).

    Requesting it means the test checks them itself; the loop fixture then
    does not fail on them.
    """
    return LoopErrors(request.node)


@pytest.fixture(autouse=True)
def _seeded_snakeloop_loops(request: pytest.FixtureRequest, snakeloop_seed):
    """Under ``--snakeloop-seed``/``--snakeloop-seeds``, the snakeloop loops a test makes with
    ``new_loop`` (the loop fixtures' too) take its run's seed, unless it is marked unseeded.

    Asking for ``snakeloop_seed`` is what makes the plugin repeat a sync test per seed.
    """
    if snakeloop_seed is None or request.node.get_closest_marker("unseeded") is not None:
        yield
        return
    _loopkit.SEED_RUN = snakeloop_seed
    try:
        yield
    finally:
        _loopkit.SEED_RUN = None
