"""Which loop a test runs on, under each way of running async tests.

Three runners can drive an ``async def`` test:

- pytest-asyncio (>= 1.4) asks its ``pytest_asyncio_loop_factories`` hook
  for named loop factories per test and parametrizes a fixture with them,
  at the test's loop scope.  Once any implementation of the hook exists it
  must answer every asyncio test with a non-empty mapping, so the bridge
  here is registered only when a session uses snakeloop, and answers tests
  that do not with the loop pytest-asyncio makes by default.  A fixture
  cached at a wider scope is kept only while the parameter stays the same
  object, so every snakeloop test gets the same factory, ``LoopMaker``,
  which reads the test being set up when it is called.
- anyio's plugin makes a test runner from the ``anyio_backend`` fixture's
  value, ``("asyncio", {"loop_factory": ...})`` among them, and keeps it
  while any async fixture (or anyone holding ``get_runner()``) uses it.
- neither: this plugin runs the test itself on a fresh loop, through
  ``asyncio.Runner``, which cancels leftover tasks and closes the loop.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from ._pytest_seed_runs import seed_run_of
from ._settings import SessionDefaults, Settings, SettingsError, make_loop, resolve, run_settings

__all__ = [
    "LoopMaker",
    "PluginState",
    "PytestAsyncioBridge",
    "is_anyio_test",
    "is_pytest_asyncio_test",
    "settings_of",
]

_SETTINGS = pytest.StashKey[Settings]()
_STATE = pytest.StashKey["PluginState"]()
PLAIN_RUNNER = pytest.StashKey[asyncio.Runner]()
# The last seeded loop made for a test, for the report when it fails.
SEEDED_LOOP = pytest.StashKey[Any]()


def settings_of(node: Any) -> Settings:
    """The settings of a test item (or of the definition of one, during collection).

    One of the runs ``--snakeloop-seeds`` makes is set up as the test it
    repeats, under the run's seed.
    """
    try:
        return node.stash[_SETTINGS]  # type: ignore[no-any-return]
    except KeyError:
        pass
    state = node.config.stash[_STATE]
    markers = (
        (mark.name, tuple(mark.args), mark.kwargs)
        for mark in node.iter_markers()
        if mark.name in ("snakeloop", "looptime") and mark.name in state.marker_names
    )
    run = seed_run_of(node)
    where = node.nodeid if run is None else run[0]
    try:
        settings = resolve(markers, state.defaults, where)
    except SettingsError as exc:
        raise pytest.UsageError(str(exc)) from None
    if run is not None:
        settings = run_settings(settings, where, run[1])
    node.stash[_SETTINGS] = settings
    return settings


class PluginState:
    """The plugin's state for one pytest session (pytester runs nest sessions in a process)."""

    def __init__(self, config: pytest.Config, defaults: SessionDefaults) -> None:
        self.config = config
        self.defaults = defaults
        # The markers this plugin answers: looptime's only when looptime is not installed.
        self.marker_names: tuple[str, ...] = ("snakeloop",)
        self.current: pytest.Item | None = None
        self.maker = LoopMaker(self)
        # Loops made for a test, by the test's node id: any other test on one shares it.
        self.made_for: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self.in_use = defaults.snakeloop or defaults.virtual_time
        self.bridge: PytestAsyncioBridge | None = None
        config.stash[_STATE] = self

    @staticmethod
    def of(config: pytest.Config) -> PluginState:
        return config.stash[_STATE]

    def use(self) -> None:
        """Some test runs on snakeloop: hook into pytest-asyncio from now on."""
        self.in_use = True
        manager = self.config.pluginmanager
        # pytest-asyncio before 1.4 has no such hook: its tests keep its loop, and a
        # snakeloop marker on one fails, saying so, when the test starts.
        has_hook = hasattr(manager.hook, "pytest_asyncio_loop_factories")
        if self.bridge is None and has_hook and manager.has_plugin("asyncio"):
            self.bridge = PytestAsyncioBridge(self)
            manager.register(self.bridge, "snakeloop-pytest-asyncio")


class LoopMaker:
    """A loop factory that makes the loop the test being set up asks for."""

    def __init__(self, state: PluginState) -> None:
        self._state = state

    def __call__(self) -> asyncio.AbstractEventLoop:
        item = self._state.current
        settings = settings_of(item) if item is not None else Settings()
        if not settings.enabled:
            return asyncio.new_event_loop()
        try:
            loop = make_loop(settings)
        except SettingsError as exc:
            raise pytest.UsageError(str(exc)) from None
        assert item is not None
        self._state.made_for[loop] = item.nodeid
        if settings.seed is not None:
            item.stash[SEEDED_LOOP] = loop
        return loop

    def __repr__(self) -> str:
        return "<snakeloop loop factory>"


class PytestAsyncioBridge:
    """pytest-asyncio's loop-factory hook, registered once a session uses snakeloop."""

    def __init__(self, state: PluginState) -> None:
        self._state = state

    @pytest.hookimpl(tryfirst=True)
    def pytest_asyncio_loop_factories(
        self, config: pytest.Config, item: pytest.Item
    ) -> dict[str, Callable[[], asyncio.AbstractEventLoop]] | None:
        if settings_of(item).enabled:
            return {"snakeloop": self._state.maker}
        others = [
            impl
            for impl in item.ihook.pytest_asyncio_loop_factories.get_hookimpls()
            if impl.plugin is not self
        ]
        if others:
            return None
        # What pytest-asyncio does without a factory: the policy's new loop.
        return {"asyncio": asyncio.new_event_loop}


def is_pytest_asyncio_test(item: Any) -> bool:
    return any(cls.__name__ == "PytestAsyncioFunction" for cls in type(item).__mro__)


def is_anyio_test(item: Any) -> bool:
    return "anyio_backend" in getattr(item, "fixturenames", ()) and not is_pytest_asyncio_test(item)


def is_plain_async_test(item: Any) -> bool:
    """An ``async def`` test that neither pytest-asyncio nor anyio runs."""
    function = getattr(item, "obj", None)
    return (
        inspect.iscoroutinefunction(function)
        and not is_pytest_asyncio_test(item)
        and not is_anyio_test(item)
    )


def runner_of_pytest_asyncio(item: Any, request: Any) -> Any:
    """The ``asyncio.Runner`` pytest-asyncio runs ``item`` with (its private fixture)."""
    name = f"_{item._loop_scope}_scoped_runner"
    funcargs = getattr(item, "funcargs", {})
    return funcargs[name] if name in funcargs else request.getfixturevalue(name)


def anyio_backend(value: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(value, str):
        return value, {}
    name, options = value
    return name, options


@contextmanager
def anyio_loop(config: pytest.Config, backend: Any) -> Iterator[asyncio.AbstractEventLoop | None]:
    """Hold anyio's test runner for ``backend`` open and give its loop (None: not asyncio)."""
    name, options = anyio_backend(backend)
    plugin = config.pluginmanager.get_plugin("anyio")
    if name != "asyncio" or plugin is None:
        yield None
        return
    with plugin.get_runner(name, options) as runner:
        yield runner.get_loop()


def plain_runner(item: pytest.Item) -> asyncio.Runner:
    """The runner of a test this plugin runs itself, made on first use."""
    try:
        return item.stash[PLAIN_RUNNER]
    except KeyError:
        pass
    state = PluginState.of(item.config)
    settings = settings_of(item)

    def factory() -> asyncio.AbstractEventLoop:
        try:
            loop = make_loop(settings)
        except SettingsError as exc:
            raise pytest.UsageError(str(exc)) from None
        state.made_for[loop] = item.nodeid
        if settings.seed is not None:
            item.stash[SEEDED_LOOP] = loop
        return loop

    runner = asyncio.Runner(loop_factory=factory)
    item.stash[PLAIN_RUNNER] = runner
    return runner
