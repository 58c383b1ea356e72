"""snakeloop's pytest plugin: async tests on snakeloop, with virtual time.

Registered as the ``snakeloop`` pytest11 entry point; it does nothing for
a test that uses none of what follows.

Marker, on a test function, class or module (the closest value wins)::

    @pytest.mark.snakeloop(virtual_time=True, start=None, end=None,
                           autojump_threshold=0, external_time="frozen",
                           stall_timeout=30, deadlock="raise")

runs the test on a snakeloop loop whose ``VirtualClock`` jumps over
sleeps and timeouts (``virtual_time=False``: real time).  ``start`` is the
loop time a fresh loop starts at (0.0 by default); a loop shared with other
tests keeps its time, which ``start`` may move forward but never back.
``end``: the loop time at which the test fails with ``VirtualTimeoutError``.
``deadlock``: ``"raise"`` fails a test in which no task can ever make
progress with ``DeadlockError``; ``"log"`` logs it.  ``seed=N`` runs the
test on a loop seeded with N (issue 12), ``perturb=`` says what that loop
perturbs; the keys ``seeds`` and ``metrics`` are reserved for features to come.
looptime's ``@pytest.mark.looptime(start=, end=, idle_timeout=, ...)`` means
the same (``idle_timeout`` is ``stall_timeout``) when looptime itself is not
installed, and so does its ``--looptime`` option.

Options [environment]: ``--snakeloop`` runs every asyncio test on snakeloop;
``--snakeloop-virtual-time`` [``SNAKELOOP_VIRTUAL_TIME=1``] also gives them
virtual time; ``--snakeloop-deadlock=raise|log`` [``SNAKELOOP_DEADLOCK``].
``--snakeloop-seed=N|random`` [``SNAKELOOP_SEED``] seeds every asyncio test
on snakeloop with ``derive_seed(N, node id)``, so that adding a test moves
no other test's seed (a marker's ``seed=`` is used as it is);
``--snakeloop-perturb=LIST`` [``SNAKELOOP_PERTURB``] what seeded loops
perturb; ``--snakeloop-replay=[NODEID@]SEED`` [``SNAKELOOP_REPLAY``] runs the
test (every test without NODEID) under exactly SEED;
``--snakeloop-seeds=K`` [``SNAKELOOP_SEEDS``] makes K items of each async
test the root seeds (and of each test using ``snakeloop_seed``),
``test[seed0]`` to ``test[seed{K-1}]``, run i under ``derive_seed(N, BASE, i)``
where BASE is the node id without the run: run 0 is the test under
``--snakeloop-seed=N`` alone.  Each run has its own fixtures and loop, under
any of the runners below.  A seeded test that fails gets a ``snakeloop``
report section with its seed, fingerprint, last decisions and the command
that replays it (``--snakeloop-replay=BASE@SEED`` for a run); the terminal
summary lists, per test, the seeds its runs failed under.

Fixtures: ``snakeloop_clock`` (the clock of the test's loop), ``loop_time``
(a number that reads ``loop.time()`` whenever it is compared or converted;
``looptime`` is another name for it), ``snakeloop_seed`` (a
``snakeloop.testing.SeedRun``, the seed of this run for a loop the test
makes itself, or None when the test is not seeded).

The tests run under pytest-asyncio (through its loop-factory hook), under
anyio's plugin (through the ``anyio_backend`` value, for the asyncio
backend), or, with neither, under this plugin, which runs each ``async def``
test on a fresh loop (async fixtures need one of the other two).  When a
test fails with ``DeadlockError``, ``StallError`` or ``VirtualTimeoutError``,
the report of what every task was waiting on follows the traceback in a
section named ``snakeloop``.

PYTEST_DONT_REWRITE: pytest need not rewrite this module's asserts (it has
none), and must not warn when a session imports it before pytest does.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from ..exceptions import DeadlockError, StallError, VirtualTimeoutError
from ..perturbation import IMPLEMENTED
from ..seeding import parse_perturb, parse_seed
from ._looptime import LoopTime
from ._pytest_loops import (
    PLAIN_RUNNER,
    SEEDED_LOOP,
    PluginState,
    anyio_backend,
    anyio_loop,
    is_anyio_test,
    is_plain_async_test,
    is_pytest_asyncio_test,
    plain_runner,
    runner_of_pytest_asyncio,
    settings_of,
)
from ._pytest_seed_runs import SeedFailures, parametrize_runs, seed_run_of
from ._pytest_traces import TRACES, SessionTraces, session_traces
from ._seed_report import replay_command, seed_section, unreached_seed_section
from ._seed_run import SeedRun
from ._settings import (
    DEADLOCK_MODES,
    SessionDefaults,
    SettingsError,
    apply_to_shared_loop,
)

# looptime's marker, option and fixture are looptime's own when it is installed.
_LOOPTIME_INSTALLED = importlib.util.find_spec("looptime") is not None

_SNAKELOOP_MARKER = (
    "snakeloop(virtual_time=True, start=None, end=None, autojump_threshold=0, "
    "external_time='frozen', stall_timeout=30, deadlock='raise', seed=None, perturb=None): "
    "run the async test on a snakeloop loop, with virtual time unless virtual_time=False; "
    "seed=N seeds its scheduling"
)
_LOOPTIME_MARKER = (
    "looptime(start=0, end=None, idle_timeout=30, ...): looptime's marker, run on snakeloop "
    "with virtual time (idle_timeout is snakeloop's stall_timeout)"
)

# The snakeloop_seed fixture's value, for the report when the test fails.
_SEED_RUN = pytest.StashKey[SeedRun]()
# The failing runs of --snakeloop-seeds, by the node id of the test they repeat.
_FAILED_RUNS = pytest.StashKey[dict[str, SeedFailures]]()

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("snakeloop", "snakeloop event loop")
    group.addoption(
        "--snakeloop",
        action="store_true",
        default=False,
        help="run every asyncio test on a snakeloop loop",
    )
    group.addoption(
        "--snakeloop-virtual-time",
        action="store_true",
        default=None,
        help="run every asyncio test on snakeloop with virtual time "
        "(environment: SNAKELOOP_VIRTUAL_TIME=1)",
    )
    group.addoption(
        "--snakeloop-seed",
        default=None,
        metavar="N|random",
        help="seed the scheduling of every asyncio test on snakeloop; each test's seed is "
        "derived from N and its node id (environment: SNAKELOOP_SEED)",
    )
    group.addoption(
        "--snakeloop-perturb",
        default=None,
        metavar="LIST",
        help="what a seeded loop perturbs: none, default, all or names separated by commas "
        "(environment: SNAKELOOP_PERTURB)",
    )
    group.addoption(
        "--snakeloop-replay",
        default=None,
        metavar="[NODEID@]SEED",
        help="run the test (every test when NODEID is left out) under exactly this seed "
        "(environment: SNAKELOOP_REPLAY)",
    )
    group.addoption(
        "--snakeloop-seeds",
        default=None,
        metavar="K",
        help="run each seeded test K times, as K items (test[seed0]..), under seeds derived "
        "from the root seed and the test's node id (environment: SNAKELOOP_SEEDS)",
    )
    group.addoption(
        "--snakeloop-trace",
        default=None,
        metavar="DIR",
        help="write the trace file of each seeded test run that fails into DIR, for "
        "--snakeloop-replay-trace (environment: SNAKELOOP_TRACE_DIR)",
    )
    group.addoption(
        "--snakeloop-replay-trace",
        default=None,
        metavar="FILE",
        help="run the test FILE recorded under its seed and perturbation, and say whether "
        "its choices were the recorded ones (environment: SNAKELOOP_REPLAY_TRACE)",
    )
    group.addoption(
        "--snakeloop-deadlock",
        choices=("raise", "log"),
        default=None,
        help="when no task can ever make progress: fail the test with DeadlockError (raise, "
        "the default) or log the report (environment: SNAKELOOP_DEADLOCK)",
    )
    if not _LOOPTIME_INSTALLED:
        group.addoption(
            "--looptime",
            action="store_true",
            default=False,
            help="looptime's option: like --snakeloop-virtual-time",
        )


def _session_defaults(config: pytest.Config) -> SessionDefaults:
    virtual = config.getoption("snakeloop_virtual_time")
    if virtual is None:
        raw = os.environ.get("SNAKELOOP_VIRTUAL_TIME", "")
        if raw.strip().lower() not in _TRUE + _FALSE:
            raise pytest.UsageError(
                f"snakeloop: SNAKELOOP_VIRTUAL_TIME={raw!r} is neither 1 nor 0; set it to 1 to "
                "run asyncio tests with virtual time, or unset it"
            )
        virtual = raw.strip().lower() in _TRUE
    if not _LOOPTIME_INSTALLED and config.getoption("looptime"):
        virtual = True
    deadlock = config.getoption("snakeloop_deadlock")
    if deadlock is None:
        deadlock = os.environ.get("SNAKELOOP_DEADLOCK") or "raise"
        if deadlock not in DEADLOCK_MODES:
            raise pytest.UsageError(
                f"snakeloop: SNAKELOOP_DEADLOCK={deadlock!r} must be raise, log or ignore"
            )
    seeding = _session_seeding(config)
    return SessionDefaults(
        snakeloop=bool(config.getoption("snakeloop"))
        or virtual
        or bool({"root_seed", "replay"} & seeding.keys()),
        virtual_time=virtual,
        deadlock=deadlock,
        **seeding,
    )


def _option(config: pytest.Config, name: str, variable: str) -> tuple[str, str | None]:
    """The option's value, else the environment's, with the name to blame for a bad one."""
    value = config.getoption(name)
    if value is not None:
        return f"--{name.replace('_', '-')}", value
    return variable, os.environ.get(variable) or None


def _session_seeding(config: pytest.Config) -> dict[str, Any]:
    """The seed options: an empty dict when the session asks for no seeding."""
    found: dict[str, Any] = {}
    source, seeds = _option(config, "snakeloop_seeds", "SNAKELOOP_SEEDS")
    if seeds is not None:
        if not seeds.strip().isdecimal() or int(seeds) < 1:
            raise pytest.UsageError(f"snakeloop: {source}={seeds!r} must be a whole number >= 1")
        found["seeds"] = int(seeds)
    source, root = _option(config, "snakeloop_seed", "SNAKELOOP_SEED")
    if root is None and seeds is not None:
        root = "random"  # the header says which, for the session to be run again
    if root is not None:
        try:
            found["root_seed"] = parse_seed(root)
        except (TypeError, ValueError) as exc:
            raise pytest.UsageError(f"snakeloop: {source}: {exc}") from None
    source, replay = _option(config, "snakeloop_replay", "SNAKELOOP_REPLAY")
    if replay is not None:
        nodeid, _, seed = replay.rpartition("@")
        try:
            found["replay"] = (nodeid or None, parse_seed(seed))
        except (TypeError, ValueError) as exc:
            raise pytest.UsageError(
                f"snakeloop: {source}={replay!r} is [NODEID@]SEED: {exc}"
            ) from None
    source, perturb = _option(config, "snakeloop_perturb", "SNAKELOOP_PERTURB")
    if perturb is not None:
        try:
            parse_perturb(perturb, available=IMPLEMENTED)
        except ValueError as exc:
            raise pytest.UsageError(f"snakeloop: {source}: {exc}") from None
        found["perturb"] = perturb
    _, directory = _option(config, "snakeloop_trace", "SNAKELOOP_TRACE_DIR")
    source, replay_trace = _option(config, "snakeloop_replay_trace", "SNAKELOOP_REPLAY_TRACE")
    try:
        # The recording, if any, gives the replay its seed and perturbation.
        config.stash[TRACES] = session_traces(
            config.invocation_params.dir, directory, replay_trace, found
        )
    except ValueError as exc:
        raise pytest.UsageError(f"snakeloop: {source}: {exc}") from None
    return found


def pytest_report_header(config: pytest.Config) -> str | None:
    root = PluginState.of(config).defaults.root_seed
    if root is None:
        return None
    return f"snakeloop: root seed {root} (run this session again with --snakeloop-seed={root})"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _SNAKELOOP_MARKER)
    state = PluginState(config, _session_defaults(config))
    if not _LOOPTIME_INSTALLED:
        config.addinivalue_line("markers", _LOOPTIME_MARKER)
        state.marker_names += ("looptime",)
    if state.in_use:
        state.use()


def _runs_on_snakeloop(node: Any) -> bool:
    """During collection: a marker error counts as yes, and is raised once collection ends."""
    try:
        return settings_of(node).enabled
    except pytest.UsageError:
        return True


@pytest.hookimpl(wrapper=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> Generator[None, Any, Any]:
    # pytest-asyncio asks for loop factories here, test by test, before the session's
    # items are known: the first test on snakeloop brings in the bridge.
    state = PluginState.of(metafunc.config)
    if state.bridge is None and _runs_on_snakeloop(metafunc.definition):
        state.use()
    result = yield
    # After the test's other parametrizations, so that the run's id comes last.
    runs = _seed_runs_of(metafunc)
    if runs > 1:
        parametrize_runs(metafunc, runs)
    return result


def _seed_runs_of(metafunc: pytest.Metafunc) -> int:
    """How many runs --snakeloop-seeds makes of the test: 1 for one it does not repeat.

    It repeats the async tests the session seeds, and the others that ask for
    ``snakeloop_seed`` (directly or through a fixture), which make their own loops.
    """
    try:
        settings = settings_of(metafunc.definition)
    except pytest.UsageError:
        return 1  # raised again, for every test, once collection ends
    if not settings.enabled or settings.seed_runs == 1:
        return 1
    asynchronous = inspect.iscoroutinefunction(metafunc.function)
    if asynchronous or "snakeloop_seed" in metafunc.fixturenames:
        return settings.seed_runs
    return 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every marker is checked before any test runs: a wrong one stops the session.
    state = PluginState.of(config)
    for item in items:
        if settings_of(item).enabled and not state.in_use:
            state.use()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, Any, Any]:
    state = PluginState.of(item.config)
    previous, state.current = state.current, item
    try:
        return (yield)
    finally:
        state.current = previous


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: Any, request: pytest.FixtureRequest
) -> Generator[None, Any, Any]:
    value = yield
    if fixturedef.argname != "anyio_backend":
        return value
    state = PluginState.of(request.config)
    if not state.in_use:
        return value
    try:
        name, options = anyio_backend(value)
    except (TypeError, ValueError):
        return value  # anyio says what is wrong with it
    if name != "asyncio" or "loop_factory" in options:
        return value
    value = (name, {**options, "loop_factory": state.maker})
    if fixturedef.cached_result is not None:
        fixturedef.cached_result = (value, fixturedef.cached_result[1], None)
    return value


def _prepare(item: pytest.Item, loop: Any) -> None:
    """Check that ``item``'s loop is snakeloop's, and set up a shared one for it."""
    if not hasattr(loop, "get_clock"):
        raise pytest.UsageError(
            f"snakeloop: {item.nodeid} is marked to run on snakeloop but its loop is "
            f"{type(loop).__module__}.{type(loop).__qualname__}, made by a loop factory given "
            "elsewhere (anyio_backend options or a pytest_asyncio_loop_factories hook); "
            "remove that factory or the snakeloop marker"
        )
    state = PluginState.of(item.config)
    if state.made_for.get(loop) != item.nodeid:
        try:
            apply_to_shared_loop(loop, settings_of(item), item.nodeid)
        except SettingsError as exc:
            raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(wrapper=True, specname="pytest_pyfunc_call")
def pytest_pyfunc_call_on_its_loop(pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
    """Set up the loop pytest-asyncio or anyio will run the test on."""
    if not settings_of(pyfuncitem).enabled:
        return (yield)
    if is_pytest_asyncio_test(pyfuncitem):
        runner = runner_of_pytest_asyncio(pyfuncitem, pyfuncitem._request)
        _prepare(pyfuncitem, runner.get_loop())
    elif is_anyio_test(pyfuncitem):
        # Holding anyio's runner makes the loop now, and the test runs on it.
        with anyio_loop(pyfuncitem.config, pyfuncitem.funcargs["anyio_backend"]) as loop:
            if loop is not None:
                _prepare(pyfuncitem, loop)
            return (yield)
    return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run an ``async def`` test on snakeloop when no other plugin does."""
    if not settings_of(pyfuncitem).enabled or not is_plain_async_test(pyfuncitem):
        return None
    funcargs = pyfuncitem.funcargs
    arguments = {name: funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    plain_runner(pyfuncitem).run(pyfuncitem.obj(**arguments))
    return True


def _close_plain_runner(item: pytest.Item) -> None:
    runner = item.stash.get(PLAIN_RUNNER, None)
    if runner is not None:
        del item.stash[PLAIN_RUNNER]
        runner.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, Any, Any]:
    # After the fixtures' teardown, as asyncio.run would: cancel what is left, close the loop.
    try:
        return (yield)
    finally:
        _close_plain_runner(item)


# ---------------------------------------------------------------- the report on failure

_REPORTING = (DeadlockError, StallError, VirtualTimeoutError)


def _loop_report(exc: BaseException | None) -> str:
    """The ``.report`` of the first snakeloop error in ``exc``, its groups and its chain."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        exc = pending.pop(0)
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        if isinstance(exc, _REPORTING) and exc.report:
            return str(exc.report)
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        pending.extend((exc.__cause__, exc.__context__))
    return ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    traces = item.config.stash.get(TRACES, None)
    replaying = traces is not None and traces.target == item.nodeid
    excinfo = call.excinfo
    if excinfo is not None or (replaying and call.when == "call"):
        # A replay against a trace says how it went, passed or failed (-rP shows it).
        seeded = _seed_report(item, excinfo is not None) if call.when == "call" else ""
        parts = [seeded, "" if excinfo is None else _loop_report(excinfo.value)]
        text = "\n\n".join(part for part in parts if part)
        if text:
            report.sections.append(("snakeloop", text))
    if report.failed:
        _count_failed_run(item)
    return report


def _replay_args(state: PluginState, trace_file: str | None) -> tuple[str, ...]:
    """What a replay needs besides the seed: the session options that shape the loop
    (a trace file holds the perturbation)."""
    extra: list[str] = []
    if trace_file is not None:
        extra.append(f"--snakeloop-replay-trace={trace_file}")
    elif state.defaults.perturb is not None:
        perturb = state.defaults.perturb
        if not isinstance(perturb, str):  # a replayed recording's (name -> option)
            perturb = ",".join(perturb) or "none"
        extra.append(f"--snakeloop-perturb={perturb}")
    if state.defaults.virtual_time:
        extra.append("--snakeloop-virtual-time")
    return tuple(extra)


def _run_of(item: pytest.Item) -> tuple[str, tuple[int, int] | None]:
    """The node id a replay names, and (index, runs) for a run of --snakeloop-seeds."""
    run = seed_run_of(item)
    if run is None:
        return item.nodeid, None
    return run[0], (run[1], settings_of(item).seed_runs)


def _seed_report(item: pytest.Item, failed: bool = True) -> str:
    state = PluginState.of(item.config)
    nodeid, run = _run_of(item)
    loop = item.stash.get(SEEDED_LOOP, None)
    seed_run = item.stash.get(_SEED_RUN, None)
    if loop is None and seed_run is not None:
        loop = seed_run.loop
    if loop is None:
        if seed_run is None:
            return ""
        return unreached_seed_section(
            seed_run.seed,
            _perturbation(seed_run.perturb),
            nodeid,
            extra_args=_replay_args(state, None),
            run=run,
        )
    traces = item.config.stash.get(TRACES, None) or SessionTraces()
    # Files and replays name the test a run repeats: its replay is that test alone.
    written = traces.write(loop, nodeid) if failed else None
    trace_file = written or (traces.recording_path if traces.target == nodeid else None)
    made_for = state.made_for.get(loop)
    return seed_section(
        loop,
        nodeid,
        extra_args=_replay_args(state, trace_file),
        run=run,
        shared_with=made_for if made_for not in (None, item.nodeid) else None,
        trace_file=written,
        replayed=traces.verdict(loop, nodeid),
    )


def _perturbation(perturb: Any) -> str:
    return ",".join(parse_perturb(perturb, available=IMPLEMENTED)) or "none"


def _count_failed_run(item: pytest.Item) -> None:
    """Count a failed run of --snakeloop-seeds (once, whichever phase failed) for the summary."""
    nodeid, run = _run_of(item)
    seed = settings_of(item).seed
    if run is None or seed is None:
        return
    failures = item.config.stash.setdefault(_FAILED_RUNS, {})
    found = failures.setdefault(nodeid, SeedFailures(runs=run[1]))
    if any(index == run[0] for index, _ in found.failed):
        return
    found.failed.append((run[0], seed))
    if len(found.failed) == 1:
        found.replay = replay_command(
            nodeid, seed, _replay_args(PluginState.of(item.config), None), run=run
        )


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    failures = config.stash.get(_FAILED_RUNS, {})
    if not failures:
        return
    terminalreporter.section("snakeloop")
    for nodeid, found in failures.items():
        terminalreporter.line(found.line(nodeid))
        terminalreporter.line("  replay:  " + found.replay)


# ---------------------------------------------------------------- fixtures


@contextmanager
def _test_loop(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The loop the requesting test runs on, made now if need be, for the test's duration."""
    item: Any = request.node
    if not settings_of(item).enabled:
        raise pytest.UsageError(
            f"snakeloop: {item.nodeid} uses the {request.fixturename} fixture but does not "
            "run on snakeloop; mark it @pytest.mark.snakeloop or run pytest with --snakeloop"
        )
    if is_pytest_asyncio_test(item):
        yield runner_of_pytest_asyncio(item, request).get_loop()
    elif is_anyio_test(item):
        with anyio_loop(item.config, request.getfixturevalue("anyio_backend")) as loop:
            if loop is None:
                raise pytest.UsageError(
                    f"snakeloop: {item.nodeid} runs on an anyio backend other than asyncio, "
                    f"which has no snakeloop loop for the {request.fixturename} fixture"
                )
            yield loop
    elif is_plain_async_test(item):
        yield plain_runner(item).get_loop()
    else:
        raise pytest.UsageError(
            f"snakeloop: the {request.fixturename} fixture needs an async test, and "
            f"{item.nodeid} is not one"
        )


@pytest.fixture
def snakeloop_seed(request: pytest.FixtureRequest) -> SeedRun | None:
    """This run's seed, for a loop the test makes itself; None when the test is not seeded.

    ``snakeloop.new_event_loop(**snakeloop_seed.loop_options())`` makes a loop
    with this run's schedule; ``snakeloop_seed.new_event_loop()`` does too, and
    lets a failure's report show that loop's fingerprint and last decisions.
    """
    item: Any = request.node
    settings = settings_of(item)
    if not settings.enabled or settings.seed is None:
        return None
    run = seed_run_of(item)
    seed_run = SeedRun(
        seed=settings.seed,
        perturb=settings.perturb,
        index=0 if run is None else run[1],
        runs=1 if run is None else settings.seed_runs,
    )
    item.stash[_SEED_RUN] = seed_run
    return seed_run


@pytest.fixture
def snakeloop_clock(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The clock of the test's loop: a ``VirtualClock`` under virtual time."""
    with _test_loop(request) as loop:
        if not hasattr(loop, "get_clock"):
            raise pytest.UsageError(
                f"snakeloop: {request.node.nodeid} runs on a "
                f"{type(loop).__module__}.{type(loop).__qualname__}, which has no clock"
            )
        yield loop.get_clock()


@pytest.fixture
def loop_time(request: pytest.FixtureRequest) -> Iterator[LoopTime]:
    """The test loop's ``loop.time()``, read again at each comparison or conversion."""
    with _test_loop(request) as loop:
        yield LoopTime(loop.time)


if not _LOOPTIME_INSTALLED:

    @pytest.fixture(name="looptime")
    def _looptime(loop_time: LoopTime) -> LoopTime:
        """looptime's name for ``loop_time``."""
        return loop_time
