"""Entry points: ``run``, ``Runner``, ``install`` and the policy.

``Runner`` hands every call to an ``asyncio.Runner`` whose loop factory
is snakeloop's, so the lifecycle is exactly asyncio's: Ctrl-C cancels the
main task, leftover tasks are cancelled, async generators and the default
executor are shut down, and the loop is closed.  It wraps rather than
subclasses ``asyncio.Runner``, which is final (typeshed marks it so).
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import warnings
import weakref
from asyncio import events
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .loop import Loop

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import TypedDict, Unpack

    from ._io import IOBackend
    from .clock import Clock

    class LoopOptions(TypedDict, total=False):
        """The keyword arguments of ``snakeloop.Loop``."""

        clock: Clock | None
        stdlib_futures: bool
        io_backend: IOBackend | None
        on_deadlock: Literal["raise", "log", "ignore"] | None
        seed: int | str | None
        perturb: str | Iterable[str] | Mapping[str, object] | None
        trace: int
        replay: Iterable[Any] | None
        metrics: bool | Literal["sampled", "exact"] | None
        instruments: Iterable[Any] | None
        log_slow_callbacks: bool | None


__all__ = ["EventLoopPolicy", "Runner", "install", "loop_factory", "new_event_loop", "run"]

# From 3.14 asyncio deprecates its policy system (removal is planned for 3.16): reading
# asyncio.DefaultEventLoopPolicy, get_event_loop_policy() and set_event_loop_policy() warn,
# while the private names beneath them stay silent.  snakeloop's policy builds on those, so
# that importing snakeloop warns of nothing; its own policy names warn where asyncio's do.
POLICIES_DEPRECATED = sys.version_info >= (3, 14)
if sys.version_info >= (3, 14):
    from asyncio.unix_events import _DefaultEventLoopPolicy as _StdlibPolicy
else:
    _StdlibPolicy = asyncio.DefaultEventLoopPolicy

_T = TypeVar("_T")


def new_event_loop(**options: Unpack[LoopOptions]) -> Loop:
    """A new snakeloop loop; ``options`` go to ``snakeloop.Loop``."""
    return Loop(**options)


def loop_factory(**options: Unpack[LoopOptions]) -> Callable[[], Loop]:
    """A zero-argument callable making a new snakeloop loop with ``options``.

    For ``asyncio.run(main(), loop_factory=snakeloop.loop_factory(...))`` and
    ``asyncio.Runner``.  A ``VirtualClock`` belongs to one loop at a time:
    a factory given one can make a second loop only once the first is closed.
    """
    if "clock" in options and not hasattr(options["clock"], "monotonic"):
        raise TypeError(f"loop_factory() clock must be a clock, got {options['clock']!r}")

    def factory() -> Loop:
        return Loop(**options)

    return factory


class Runner:
    """``asyncio.Runner`` whose loop is a snakeloop loop by default.

    Several ``run()`` calls share one loop and one context; the loop is
    made on first use and closed by ``close()`` or at the end of ``with``.
    """

    __slots__ = ("_runner", "_factory", "_loop")

    def __init__(
        self,
        *,
        debug: bool | None = None,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
    ) -> None:
        self._factory = loop_factory or new_event_loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner = asyncio.Runner(debug=debug, loop_factory=self._make_loop)

    def _make_loop(self) -> asyncio.AbstractEventLoop:
        self._loop = self._factory()
        return self._loop

    def __enter__(self) -> Runner:
        self._runner.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Shut down and close the loop.

        On a loop that knows the order its tasks were made in (a seeded or
        test-mode snakeloop loop), leftover tasks are cancelled in that order,
        so that a replay shuts down as its recording did; asyncio cancels
        them in the order of a set, which differs from run to run.
        """
        loop = self._loop
        if loop is not None and not loop.is_closed() and not loop.is_running():
            ordered = getattr(loop, "_pending_tasks_in_creation_order", None)
            if ordered is not None and (leftovers := ordered()):
                cancel_leftovers(loop, leftovers)
        self._runner.close()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The runner's loop, made now if it was not yet."""
        return self._runner.get_loop()

    def run(
        self, coro: Coroutine[Any, Any, _T], *, context: contextvars.Context | None = None
    ) -> _T:
        """Run ``coro`` on the runner's loop until it is done; return its result."""
        return self._runner.run(coro, context=context)


def cancel_leftovers(loop: asyncio.AbstractEventLoop, leftovers: list[asyncio.Task[Any]]) -> None:
    """Cancel ``leftovers`` in their order and wait for them, as ``asyncio.Runner.close``
    does for every task left: an exception other than cancellation goes to the loop's
    exception handler with asyncio's message."""
    for task in leftovers:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
    for task in leftovers:
        if not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler(
                {
                    "message": "unhandled exception during asyncio.run() shutdown",
                    "exception": task.exception(),
                    "task": task,
                }
            )


def run(
    main: Coroutine[Any, Any, _T],
    *,
    debug: bool | None = None,
    **options: Unpack[LoopOptions],
) -> _T:
    """Run ``main`` on a new snakeloop loop, like ``asyncio.run``; ``options`` go to ``Loop``."""
    if events._get_running_loop() is not None:
        raise RuntimeError("snakeloop.run() cannot be called from a running event loop")
    with Runner(debug=debug, loop_factory=loop_factory(**options) if options else None) as runner:
        return runner.run(main)


class EventLoopPolicy(_StdlibPolicy):
    """The default policy, except that new loops are snakeloop loops.

    ``clock_factory``, if given, makes the clock of each new loop (for
    ``python -m snakeloop --virtual-time``: a new ``VirtualClock`` each);
    ``seed`` and ``perturb`` go to each new loop (``--seed``).
    """

    def __init__(
        self,
        *,
        clock_factory: Callable[[], Clock] | None = None,
        seed: int | None = None,
        perturb: str | None = None,
    ) -> None:
        super().__init__()
        self._clock_factory = clock_factory
        self._seed = seed
        self._perturb = perturb
        self._last_loop: weakref.ReferenceType[Loop] | None = None

    def new_event_loop(self) -> Loop:
        options: dict[str, Any] = {}
        if self._clock_factory is not None:
            options["clock"] = self._clock_factory()
        if self._seed is not None:
            options["seed"] = self._seed
            options["perturb"] = self._perturb
        loop = new_event_loop(**options)
        self._last_loop = weakref.ref(loop)
        return loop

    def last_loop(self) -> Loop | None:
        """The loop this policy made last, if it is still alive."""
        return None if self._last_loop is None else self._last_loop()


def install(
    *,
    clock_factory: Callable[[], Clock] | None = None,
    seed: int | None = None,
    perturb: str | None = None,
) -> EventLoopPolicy:
    """Make snakeloop the loop of ``asyncio.run`` and ``new_event_loop``; return the policy.

    Deprecated from Python 3.14, as asyncio's policies are: pass
    ``loop_factory=snakeloop.new_event_loop`` to ``asyncio.run`` or ``asyncio.Runner``.
    """
    if POLICIES_DEPRECATED:
        warn_policy_deprecated("snakeloop.install")
    return install_policy(clock_factory=clock_factory, seed=seed, perturb=perturb)


def install_policy(
    *,
    clock_factory: Callable[[], Clock] | None = None,
    seed: int | None = None,
    perturb: str | None = None,
) -> EventLoopPolicy:
    """``install()`` without its deprecation warning, for ``python -m snakeloop``."""
    policy = EventLoopPolicy(clock_factory=clock_factory, seed=seed, perturb=perturb)
    set_policy(policy)
    return policy


def set_policy(policy: asyncio.AbstractEventLoopPolicy | None) -> None:
    """``asyncio.set_event_loop_policy`` without the warning it gives from 3.14.

    ``python -m snakeloop`` runs a script on snakeloop the only way that reaches the
    ``asyncio.run()`` calls inside it; the script asked for no policy, so it is warned
    of nothing.
    """
    if sys.version_info >= (3, 14):
        asyncio.events._set_event_loop_policy(policy)
    else:
        asyncio.set_event_loop_policy(policy)


def warn_policy_deprecated(name: str) -> None:
    """The warning asyncio gives for its policy names from 3.14, naming the way forward."""
    warnings.warn(
        f"{name!r} is deprecated and slated for removal in Python 3.16; pass "
        "loop_factory=snakeloop.new_event_loop to asyncio.run() or asyncio.Runner instead",
        DeprecationWarning,
        stacklevel=3,
    )
