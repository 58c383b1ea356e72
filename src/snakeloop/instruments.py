"""Instruments: objects whose methods the loop calls as things happen in it.

The hook names and arguments of trio's ``trio.abc.Instrument`` are kept, so
an instrument written for trio (a plain class with some of those methods)
works on snakeloop unchanged.  snakeloop adds its own hooks: each callback
(``before_callback``/``after_callback``), virtual time's jumps, slow
callbacks and deadlocks.

Every method is optional: a hook an instrument does not define (or inherits
unchanged from ``Instrument``) is never called.  Which hooks an instrument
has, and which of them take the extra arguments snakeloop can give (``loop``
for ``before_run``/``after_run``, ``nevents`` for ``after_io_wait``; trio's
take none), is found once, when the instrument is added.  A hook that raises
disables its instrument: the error is logged on ``snakeloop.instrument``,
as trio words it, and the loop goes on.

Where the loop calls the hooks, and in what order, is in ``Instrument``'s
docstring.  The loop pays for instruments only while one is installed (see
``Loop.add_instrument``).
"""

from __future__ import annotations

import collections
import inspect
import logging
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from contextvars import Context

__all__ = ["CallbackInfo", "Instrument", "InstrumentSet", "InstrumentedReady"]

logger = logging.getLogger("snakeloop.instrument")

HOOK_NAMES = (
    "before_run",
    "after_run",
    "task_spawned",
    "task_scheduled",
    "before_task_step",
    "after_task_step",
    "task_exited",
    "before_io_wait",
    "after_io_wait",
    "before_callback",
    "after_callback",
    "clock_jumped",
    "slow_callback",
    "deadlock",
)

# hook -> how many positional arguments snakeloop can give it, and how many
# trio gives (a hook that takes fewer than snakeloop's gets trio's).
_ARITY = {"before_run": (1, 0), "after_run": (1, 0), "after_io_wait": (2, 1)}


class Instrument:
    """Base class of an instrument; override the hooks you want.

    Every method is optional, so none is abstract; deriving from this class
    is optional too: any object with some of these methods is an
    instrument.  The loop calls, in its own thread:

    - ``before_run(loop)`` / ``after_run(loop)``: around every run of the
      loop (``run_forever``, ``run_until_complete``);
    - ``task_spawned(task)``: the first time the loop sees a task, before
      anything else about it; ``task_scheduled(task)``: whenever a step of
      the task is queued to run;
    - ``before_task_step(task)`` / ``after_task_step(task)``: around each
      step; ``task_exited(task)`` once, right after the step that finished
      the task, before ``after_task_step`` (trio's order) and before the
      task's done callbacks run;
    - ``before_callback(cb)`` / ``after_callback(cb)``: around every
      callback the loop runs, task steps included (outside their step
      hooks); ``cb`` is a ``CallbackInfo``;
    - ``before_io_wait(timeout)`` / ``after_io_wait(timeout, nevents)``:
      around every poll for I/O, ``timeout`` in the loop's seconds (None:
      no limit) and ``nevents`` the number of events found;
    - ``clock_jumped(old, new)``: a virtual clock jumped (``VirtualClock``);
    - ``slow_callback(record)``: a ``snakeloop.metrics.SlowCallback``;
    - ``deadlock(error)``: nothing can wake the loop again; ``error`` is the
      ``DeadlockError`` (raised after the hook, or only logged).
    """

    def before_run(self, loop: Any) -> None:
        """The loop starts running."""

    def after_run(self, loop: Any) -> None:
        """The loop stops running."""

    def task_spawned(self, task: Any) -> None:
        """The loop sees ``task`` for the first time."""

    def task_scheduled(self, task: Any) -> None:
        """A step of ``task`` was queued."""

    def before_task_step(self, task: Any) -> None:
        """A step of ``task`` is about to run."""

    def after_task_step(self, task: Any) -> None:
        """A step of ``task`` ran."""

    def task_exited(self, task: Any) -> None:
        """``task`` finished (its last step ran)."""

    def before_io_wait(self, timeout: float | None) -> None:
        """The loop polls for I/O for up to ``timeout`` seconds."""

    def after_io_wait(self, timeout: float | None, nevents: int) -> None:
        """The poll returned ``nevents`` events."""

    def before_callback(self, cb: CallbackInfo) -> None:
        """A callback is about to run."""

    def after_callback(self, cb: CallbackInfo) -> None:
        """A callback ran."""

    def clock_jumped(self, old: float, new: float) -> None:
        """The virtual clock jumped from ``old`` to ``new``."""

    def slow_callback(self, record: Any) -> None:
        """A callback ran longer than ``slow_callback_duration``."""

    def deadlock(self, report: Any) -> None:
        """The loop found a deadlock."""


class CallbackInfo:
    """One callback the loop is running, as ``before_callback`` sees it."""

    __slots__ = ("callback", "args", "context", "handle", "task")

    def __init__(
        self,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: Context | None,
        handle: Any,
        task: Any,
    ) -> None:
        self.callback = callback
        self.args = args
        self.context = context
        # The asyncio Handle that was queued, or None for an entry the loop
        # queued without one (snakeloop's own futures and tasks).
        self.handle = handle
        # The task this callback takes a step of, or None.
        self.task = task

    def label(self) -> str:
        """A short name: ``step of 'Task-3'`` or the callback's qualified name."""
        task = self.task
        if task is not None:
            try:
                name = task.get_name()
            except Exception:
                name = None
            return f"step of {name!r}" if name else "task step"
        from ._insight.steps import callback_label

        return callback_label(self.callback, self.args)

    def __repr__(self) -> str:
        return f"<CallbackInfo {self.label()}>"


def _is_inherited(instrument: object, name: str) -> bool:
    """Whether the instrument's ``name`` is ``Instrument``'s own no-op."""
    impl = getattr(type(instrument), name, None)
    return impl is not None and impl is getattr(Instrument, name)


def _takes(method: Callable[..., object], count: int) -> bool:
    """Whether ``method`` accepts ``count`` positional arguments."""
    try:
        inspect.signature(method).bind(*range(count))
    except TypeError:
        return False
    except ValueError:
        return True  # no signature to read (a builtin): give it everything
    return True


class InstrumentSet:
    """A loop's instruments and the hooks each of them has."""

    __slots__ = ("_loop_ref", "_all", "_hooks", "_extra", "__weakref__")

    def __init__(self, loop: Any) -> None:
        self._loop_ref = weakref.ref(loop)
        # Every instrument, hooks or not, in the order added.
        self._all: dict[Any, None] = {}
        # hook name -> {instrument: its bound method}, in the order added.
        self._hooks: dict[str, dict[Any, Callable[..., object]]] = {}
        # (instrument, hook) pairs that take snakeloop's extra argument.
        self._extra: set[tuple[int, str]] = set()

    def __bool__(self) -> bool:
        return bool(self._all)

    def __contains__(self, instrument: object) -> bool:
        return instrument in self._all

    def has(self, name: str) -> bool:
        return name in self._hooks

    def add(self, instrument: object) -> None:
        if instrument in self:
            return
        self._all[instrument] = None
        for name in HOOK_NAMES:
            method = getattr(instrument, name, None)
            if method is None or not callable(method) or _is_inherited(instrument, name):
                continue
            arity = _ARITY.get(name)
            if arity is not None and _takes(method, arity[0]):
                self._extra.add((id(instrument), name))
            self._hooks.setdefault(name, {})[instrument] = method

    def remove(self, instrument: object) -> None:
        """Drop ``instrument``; KeyError if it is not installed (as trio)."""
        if instrument not in self:
            raise KeyError(instrument)
        del self._all[instrument]
        for name in list(self._hooks):
            hooks = self._hooks[name]
            hooks.pop(instrument, None)
            self._extra.discard((id(instrument), name))
            if not hooks:
                del self._hooks[name]

    def instruments(self) -> list[Any]:
        return list(self._all)

    def call(self, name: str, *args: Any) -> None:
        """Call hook ``name`` of every instrument that has it."""
        hooks = self._hooks.get(name)
        if not hooks:
            return
        for instrument, method in list(hooks.items()):
            try:
                method(*args)
            except Exception:
                self._failed(name, instrument)

    def call_extra(self, name: str, args: tuple[Any, ...], extra: Any) -> None:
        """Call hook ``name`` with ``extra`` appended for the hooks that take it."""
        hooks = self._hooks.get(name)
        if not hooks:
            return
        for instrument, method in list(hooks.items()):
            try:
                if (id(instrument), name) in self._extra:
                    method(*args, extra)
                else:
                    method(*args)
            except Exception:
                self._failed(name, instrument)

    def _failed(self, name: str, instrument: object) -> None:
        """A hook raised (the error is being handled): log it, disable the instrument."""
        logger.exception(
            "Exception raised when calling %r on instrument %r. Instrument has been disabled.",
            name,
            instrument,
        )
        self._disable(instrument)

    def _disable(self, instrument: object) -> None:
        loop = self._loop_ref()
        if loop is not None:
            try:
                loop.remove_instrument(instrument)
                return
            except KeyError:
                return  # a hook removed it already
        if instrument in self:
            self.remove(instrument)


class TaskHooks:
    """The task hooks of one loop's instruments: which tasks it has seen."""

    __slots__ = ("_set", "_seen")

    def __init__(self, instruments: InstrumentSet) -> None:
        self._set = instruments
        # Tasks that got task_spawned and not yet task_exited.
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()

    def spawned(self, task: Any) -> None:
        """``task_spawned`` if ``task`` is new to the loop."""
        seen = self._seen
        if task not in seen:
            seen.add(task)
            self._set.call("task_spawned", task)

    def constructed(self, task: Any) -> None:
        """A task whose eager first step ran unseen (asyncio's C Task)."""
        if task in self._seen:
            return
        self.spawned(task)
        if task.done():
            self._seen.discard(task)
            self._set.call("task_exited", task)

    def scheduled(self, task: Any) -> None:
        self.spawned(task)
        self._set.call("task_scheduled", task)

    def before_step(self, task: Any) -> None:
        self.spawned(task)
        self._set.call("before_task_step", task)

    def after_step(self, task: Any) -> None:
        if task.done() and task in self._seen:
            self._seen.discard(task)
            self._set.call("task_exited", task)
        self._set.call("after_task_step", task)


class InstrumentedReady(collections.deque):  # type: ignore[type-arg]
    """The ready queue while instruments are installed: ``task_scheduled`` at each step queued.

    The loop swaps it in for its plain deque at an iteration boundary and
    back when the last instrument goes.  ``forward`` is set on a queue that
    was swapped out: another thread that read ``loop._ready`` just before
    the swap still reaches the loop's current queue.
    """

    __slots__ = ("_tasks", "_stepped_in", "forward")

    def __init__(self, items: Iterable[Any], tasks: TaskHooks) -> None:
        from ._insight.steps import task_stepped_in

        super().__init__(items)
        self._tasks = tasks
        self._stepped_in = task_stepped_in
        self.forward: Callable[[Any], None] | None = None

    def append(self, entry: Any) -> None:
        forward = self.forward
        if forward is not None:
            forward(entry)
            return
        super().append(entry)
        task = self._stepped_in(entry)
        if task is not None:
            self._tasks.scheduled(task)


class IoWaitHooks:
    """A poll with ``before_io_wait``/``after_io_wait`` around it."""

    __slots__ = ("_poll", "_set", "_stale")

    def __init__(
        self,
        poll: Callable[[float | None], Any],
        instruments: InstrumentSet,
        stale: collections.deque[Any] | None,
    ) -> None:
        self._poll = poll
        self._set = instruments
        # The plain ready deque swapped out for an InstrumentedReady: what
        # another thread appended to it after the swap moves on at a poll.
        self._stale = stale

    @property
    def wrapped(self) -> Callable[[float | None], Any]:
        return self._poll

    def poll(self, timeout: float | None) -> Any:
        instruments = self._set
        instruments.call("before_io_wait", timeout)
        events = None
        try:
            events = self._poll(timeout)
        finally:
            instruments.call_extra("after_io_wait", (timeout,), len(events) if events else 0)
            stale = self._stale
            if stale:
                loop = instruments._loop_ref()
                while stale and loop is not None:
                    loop._ready.append(stale.popleft())
        return events
