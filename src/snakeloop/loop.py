"""``snakeloop.Loop``: the public ``asyncio.AbstractEventLoop`` surface.

The class is assembled from small parts, each in its own module:

* ``_core.runloop.CoreLoop``: the ready deque, timer heap, ``run_once``,
  ``call_soon``/``call_later``/``call_at``, the fd dispatch table and the
  internal fds it drains itself;
* objects the loop owns, each holding its own state and reaching the loop
  only through the loop contract and its public methods:
  ``signals.SignalHandlers`` (``_signals``), ``executors.Executors``
  (``_executors``) and ``subprocess.Children`` (``_children``); their
  public methods here only delegate;
* mixins with one job each, that keep no state of their own: ``errors``,
  ``debug``, ``asyncgens``, ``offload``, ``dns``, ``pipes``, ``connecting``,
  ``serving``, ``tls``, ``sockets``, ``sendfile``, ``datagrams``; a server's
  listening sockets are ``listeners.Listener`` objects its ``Server`` owns;
* this module: running and closing, fork safety (``_disown_after_fork``),
  futures and tasks, and readiness registration (``add_reader`` & co.).

None of those parts imports this module, so dependencies run one way.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import math
import os
import subprocess
import sys
import threading
import warnings
import weakref
from asyncio import events
from asyncio import futures as aio_futures
from asyncio import tasks as aio_tasks

# run_until_complete() stops the loop with asyncio's own done callback, not a
# copy: libraries recognise the task of run_until_complete() by finding that
# very function among its callbacks (anyio takes it as the root task, whose
# end stops its worker threads and processes).
from asyncio.base_events import _run_until_complete_cb  # type: ignore[attr-defined]
from collections.abc import Callable, Iterable, Mapping
from contextvars import Context
from operator import attrgetter
from typing import IO, TYPE_CHECKING, Any, Literal, TypeVar, TypeVarTuple

from ._core.futures import Future, Task
from ._core.handles import Handle, skip_when_recording
from ._core.runloop import ASYNCIOS, COMPILED, CoreLoop, EpollWait, TimeAttribute
from ._io import READABLE, WRITABLE, default_backend
from ._io.waker import Waker
from ._process import forking
from .asyncgens import AsyncGenMixin
from .clock import Clock, MonotonicClock
from .connecting import ConnectingMixin
from .datagrams import DatagramMixin
from .debug import DebugMixin, debug_from_environment
from .dns import DnsMixin
from .errors import ExceptionHandlingMixin
from .executors import Executors
from .loopoptions import EPOCH_NEEDS_VIRTUAL_TIME, LoopOptions
from .offload import OffloadMixin
from .pipes import PipesMixin
from .sendfile import SendfileMixin
from .serving import ServingMixin
from .signals import SignalHandlers
from .sockets import SocketMixin
from .subprocess import Children
from .tls import TLSMixin
from .transports.recvbuffer import RECV_BUFFER_SIZE

if TYPE_CHECKING:
    # typeshed's own names for the types of asyncio's loop methods, so that
    # Loop's signatures read as AbstractEventLoop's do on every Python.
    from asyncio import _AwaitableLike, _CoroutineLike
    from asyncio.events import _TaskFactory

    from _typeshed import FileDescriptorLike

    from ._io import IOBackend
    from .instruments import InstrumentSet, TaskHooks
    from .metrics import LoopMetrics
    from .virtualtime import VirtualTime

__all__ = ["Loop"]

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")
_ProtocolT = TypeVar("_ProtocolT", bound=asyncio.BaseProtocol)

logger = logging.getLogger("asyncio")

# 3.13.0 names a factory-made task with set_name(name) even when name is
# None (so the task is called "None"); 3.11, 3.12 and later 3.13 releases
# only set a name that was given.
_SET_NAME_ALWAYS = sys.version_info[:3] == (3, 13, 0)

# A task without __init__ (create_task calls Task._setup itself): object.__new__
# interpreted; compiled, Task's own, since object's refuses a C type.
_new_task = Task.__new__

# What _stopping holds while the loop must leave _run_iterations and enter it
# again, without stopping, because something it binds once at its start
# changed: instruments came or went (the ready queue is swapped at that
# iteration boundary), or ``time`` was replaced or restored (the clock it reads).
_REENTER = "re-enter the run loop"


class _TimeProperty(property):
    """The pure build's ``Loop.time`` (see there): on the class, it calls like the method."""

    def __call__(self, loop: CoreLoop) -> float:
        return CoreLoop.time(loop)  # type: ignore[no-any-return]


# Virtual time, the census and the reports (virtualtime, deadlock, pending,
# insight) are imported when first needed: a production loop never needs
# them, and they would add a fifth to snakeloop's import time.

# Real seconds a loop with no timer waits before asking whether anything can
# still wake it: long enough that a job or reply under way usually arrives
# first, so the question is rarely asked; shorter when a test waits for it.
DEADLOCK_GRACE = 1.0
DEADLOCK_GRACE_TEST = 0.1

# Frames in these directories are not where a task was "created": the site
# is the first caller outside asyncio and snakeloop.
_LIBRARY_DIRS = (
    os.path.dirname(asyncio.__file__) + os.sep,
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
)


def _fd_of(fileobj: Any) -> int:
    """The fd behind an int or an object with ``fileno()``, as selectors does."""
    if isinstance(fileobj, int):
        fd = fileobj
    else:
        try:
            fd = int(fileobj.fileno())
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"Invalid file object: {fileobj!r}") from None
    if fd < 0:
        raise ValueError(f"Invalid file descriptor: {fd}")
    return fd


_NAME_AND_CONTEXT = frozenset(("name", "context"))


def _factory_task(
    loop: Loop, factory: Callable[..., Any], coro: Any, keywords: dict[str, Any]
) -> Any:
    """``factory``'s task for ``loop.create_task(coro, **keywords)``, as asyncio makes it.

    From 3.14 the factory gets the keywords as they were given.  Before, it got
    ``context=`` alone, when there was one, and the loop named the task.
    """
    if sys.version_info >= (3, 14):
        return factory(loop, coro, **keywords)
    name = keywords.get("name")
    if "context" in keywords:
        return _named(factory(loop, coro, context=keywords["context"]), name)
    return _named(factory(loop, coro), name)


def _named(task: Any, name: object) -> Any:
    """Name a task made by a task factory, as asyncio's create_task does (before 3.14)."""
    if _SET_NAME_ALWAYS:
        task.set_name(name)
    else:
        aio_tasks._set_task_name(task, name)  # type: ignore[attr-defined]
    return task


# The slots of Loop that have a default, set first thing in __init__.
_SLOT_DEFAULTS: dict[str, Any] = {
    "_virtual_time": None,
    "_task_sites": None,
    "_schedule": None,
    "_perturbed": None,
    "_signal_inbox": None,
    "_chunking": None,
    "_write_chunking": None,
    "_metrics_recorder": None,
    "_threads_before": None,
    "_instrument_set": None,
    "_instrument_tasks": None,
    "_stale_ready": None,
    "_exception_handler": None,
    "_watch_outside_work": False,
}

# The slots of Loop without a default: __init__ or a mixin's set-up assigns
# each before it is read (_tie_stream only on a loop seeded with timer_ties).
_SLOTS_WITHOUT_DEFAULT = (
    "_asyncgens",
    "_asyncgens_shutdown_called",
    "_base_poll",
    "_children",
    "_deadlock_logged",
    "_executors",
    "_offload_executor",
    "_offload_unheard",
    "_old_agen_hooks",
    "_on_deadlock",
    "_shared_recv_view",
    "_signals",
    "_task_class",
    "_task_factory",
    "_tie_stream",
    "_transports",
    "_unwrapped_poll",
)


class Loop(
    CoreLoop,
    ExceptionHandlingMixin,
    DebugMixin,
    AsyncGenMixin,
    OffloadMixin,
    DnsMixin,
    PipesMixin,
    ConnectingMixin,
    ServingMixin,
    TLSMixin,
    SocketMixin,
    SendfileMixin,
    DatagramMixin,
    asyncio.AbstractEventLoop,
):
    """An asyncio event loop written in Python.

    ``clock`` supplies ``loop.time()`` (default: ``time.monotonic``); a
    ``VirtualClock`` jumps to the next timer when the loop is idle.
    ``on_deadlock`` says what happens when nothing can ever wake the loop:
    ``"raise"`` ``DeadlockError`` (the default with a virtual clock),
    ``"log"`` the report once (the default otherwise) or ``"ignore"``; the
    environment variable ``SNAKELOOP_DEADLOCK`` sets the default.
    ``stdlib_futures=True`` makes ``create_future``/``create_task`` build
    asyncio's own (C) Future and Task instead of snakeloop's, for code that
    needs ``type(x) is asyncio.Task`` (snakeloop's pass ``isinstance`` checks).
    ``metrics`` chooses what ``loop.metrics()`` keeps (``snakeloop.metrics``);
    ``log_slow_callbacks=True`` (or ``SNAKELOOP_LOG_SLOW_CALLBACKS=1``) also
    logs slow callbacks outside debug mode, where asyncio, and so snakeloop
    by default, logs nothing.
    """

    # Every attribute a loop sets on itself is a slot, so its __dict__ stays
    # unmade (users and seeded loops may still add to it).  From 3.13 on,
    # CPython specializes a method call only on an instance whose __dict__
    # was never made: with one, every loop.call_soon() or loop.create_task()
    # from Python code takes the generic lookup, about 300 instructions more
    # a call (callgrind, 3.13).  The slots that have a default get it first
    # thing in __init__ (_SLOT_DEFAULTS).
    __slots__ = (*_SLOT_DEFAULTS, *_SLOTS_WITHOUT_DEFAULT)

    # The virtual-time driver (snakeloop.virtualtime), while the clock is virtual.
    _virtual_time: Any
    # task -> (filename, lineno) of the code that created it, in the order the
    # tasks were made; in test mode and on seeded loops only (see
    # _record_task_sites), None otherwise.
    _task_sites: weakref.WeakKeyDictionary[Any, tuple[str, int]] | None
    # Whether executors keep the census of their jobs (virtual time and test
    # mode; see pending.py): a few microseconds a job that production skips.
    _watch_outside_work: bool
    # A seeded loop's schedule (snakeloop.seeding) and its perturbed poll.
    _schedule: Any
    _perturbed: Any
    # Where a seeded loop's signal handlers wait (perturb "signals"), or None.
    _signal_inbox: Any
    # A seeded loop's chunking policies (snakeloop.chunking), when those dimensions are on.
    _chunking: Any
    _write_chunking: Any
    # The slow-callback records and timing window (snakeloop.metrics.recorder),
    # or None on a loop made with metrics=False.
    _metrics_recorder: Any
    # The threads alive when the census began (test mode): see _older_threads.
    _threads_before: weakref.WeakSet[threading.Thread] | None
    # The instruments (snakeloop.instruments) and their task bookkeeping, while
    # any is installed; None otherwise, so that nothing is paid for them.
    _instrument_set: InstrumentSet | None
    _instrument_tasks: TaskHooks | None
    # The ready deque an InstrumentedReady replaced (other threads may still
    # append to it), and the poll the instruments' io-wait hooks wrap.
    _stale_ready: collections.deque[Any] | None
    _unwrapped_poll: Callable[[float | None], Any]

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        stdlib_futures: bool | None = None,
        io_backend: IOBackend | None = None,
        on_deadlock: Literal["raise", "log", "ignore"] | None = None,
        seed: int | str | None = None,
        perturb: str | Iterable[str] | Mapping[str, object] | None = None,
        trace: int = 10_000,
        replay: Iterable[Any] | None = None,
        metrics: bool | Literal["sampled", "exact"] | None = None,
        instruments: Iterable[Any] | None = None,
        log_slow_callbacks: bool | None = None,
    ) -> None:
        for name, value in _SLOT_DEFAULTS.items():
            setattr(self, name, value)
        options = LoopOptions(
            self,
            clock=clock,
            stdlib_futures=stdlib_futures,
            on_deadlock=on_deadlock,
            seed=seed,
            perturb=perturb,
            trace=trace,
            replay=replay,
            metrics=metrics,
            log_slow_callbacks=log_slow_callbacks,
        )
        schedule = options.schedule
        if io_backend is None:
            # Opened only once every option is accepted: a refused loop leaves no epoll fd
            # behind for the collector to close (PyPy's runs late, and the next fds opened
            # get other numbers, which a replay's recorded choices name).  Compiled, epoll
            # is waited on in C with an array of the loop's own.
            io_backend = default_backend(EpollWait if COMPILED else None)
        CoreLoop.__init__(self, MonotonicClock(), io_backend, Waker())
        self._unwrapped_poll = self._poll
        self._on_deadlock = options.on_deadlock
        self._deadlock_logged = False
        self._schedule = schedule
        self._base_poll: Callable[[float | None], Any] = io_backend.poll
        if schedule is not None:
            self._apply_perturbations(schedule, io_backend)
        self.set_clock(MonotonicClock() if clock is None else clock)
        self._counters.timed = bool(options.metrics)
        if options.metrics:
            from .metrics.recorder import MetricsRecorder

            self._metrics_recorder = MetricsRecorder(
                self, options.metrics, options.log_slow_callbacks
            )
            self._on_slow_stretch = self._metrics_recorder.on_slow_stretch
        self._debug = debug_from_environment()
        self._refresh_plain_ready()
        self._update_observer()
        self._task_factory: _TaskFactory | None = None
        self._old_agen_hooks: Any = None
        self._transports: weakref.WeakValueDictionary[int, asyncio.BaseTransport] = (
            weakref.WeakValueDictionary()
        )
        self._shared_recv_view: memoryview | None = None  # see _shared_recv_buffer
        # snakeloop's classes pass isinstance() checks for asyncio's at run
        # time, which the type checker does not know.
        self._future_class: Any
        self._task_class: Any
        if options.stdlib_futures:
            # Whatever asyncio.futures.Future and asyncio.tasks.Task are at each
            # call, as asyncio's loop makes them (see _core.runloop._ASYNCIOS).
            self._future_class = self._task_class = ASYNCIOS
        else:
            self._future_class = Future
            self._task_class = Task
        self._refresh_direct_task_class()
        self._init_asyncgens()
        self._init_offload()
        self._signals = SignalHandlers(self)
        self._executors = Executors(self)
        self._children = Children(self)
        forking.track(self)
        for instrument in instruments or ():
            self.add_instrument(instrument)

    def _apply_perturbations(self, schedule: Any, io_backend: IOBackend) -> None:
        """Put a seeded loop's perturbations in front of the parts they perturb."""
        from .perturbation import PerturbedPoll

        self._skip_polls_after_polls = False
        perturbed = PerturbedPoll(io_backend.poll, schedule, self._is_internal_fd)
        self._perturbed = perturbed
        self._base_poll = perturbed.poll
        if "io_latency" in schedule.perturbation:
            from .perturbation import IoLatency

            latency: Any = schedule.perturbation["io_latency"]  # (lo, hi): parse_perturb
            perturbed.latency = IoLatency(schedule, self.call_later, *latency)
        if "threadsafe" in schedule.perturbation:
            from .inbox import Inbox
            from .perturbation import PollEveryIteration

            self._threadsafe_inbox = perturbed.inbox = Inbox(schedule, self._queue_ready)
            # Other threads' calls reach the ready queue only at a poll, so a loop
            # that always has callbacks ready must still poll, as asyncio's does.
            self._internal_readers = PollEveryIteration(self._internal_readers)
        if "signals" in schedule.perturbation:
            from .inbox import Inbox

            self._signal_inbox = Inbox(schedule, self._queue_ready, "signals")
            perturbed.signal_inbox = self._signal_inbox
        if "timer_ties" in schedule.perturbation:
            # In front of the core's method, on this loop only: an
            # unseeded loop's call_later pays nothing.
            self._tie_stream = schedule.stream("timer_ties")
            self._timer_ties = self._choose_tie_place
        if "timer_delay" in schedule.perturbation:
            from .perturbation import PollEveryIteration, TimerDelay

            perturbed.timer_delay = TimerDelay(
                schedule, self._callbacks_before_due_timers, self._hold_due_timers
            )
            if not isinstance(self._internal_readers, PollEveryIteration):
                self._internal_readers = PollEveryIteration(self._internal_readers)
        if "chunking" in schedule.perturbation:
            from .chunking import Chunking

            # Stream transports pick their chunked readers from this;
            # sock_recv and sock_recv_into are replaced on this loop only.
            self._chunking = Chunking(schedule, perturbed)
            self.__dict__["sock_recv"] = self._sock_recv_chunked
            self.__dict__["sock_recv_into"] = self._sock_recv_into_chunked
        if "chunking_writes" in schedule.perturbation:
            from .chunking import WriteChunking

            # Stream transports send through a capped view of their socket.
            self._write_chunking = WriteChunking(schedule, perturbed)
            self.__dict__["sock_sendall"] = self._sock_sendall_chunked

    def __repr__(self) -> str:
        return (
            f"<{self.__class__.__name__} running={self.is_running()} "
            f"closed={self.is_closed()} debug={self.get_debug()}>"
        )

    def __del__(self, _warn: Any = warnings.warn) -> None:
        # No ready queue: __init__ failed before the core's (interpreted, the
        # attribute is missing; compiled, the core's fields hold None until then).
        if getattr(self, "_ready", None) is not None and not self._closed:
            _warn(f"unclosed event loop {self!r}", ResourceWarning, source=self)
            if not self.is_running():
                self.close()

    # -- running -------------------------------------------------------------

    def _check_running(self) -> None:
        if self.is_running():
            raise RuntimeError("This event loop is already running")
        if events._get_running_loop() is not None:
            raise RuntimeError("Cannot run the event loop while another loop is running")

    def _run_forever_setup(self) -> None:
        self._check_closed()
        self._check_running()
        self._set_coroutine_origin_tracking(self._debug)
        self._old_agen_hooks = sys.get_asyncgen_hooks()
        self._thread_id = threading.get_ident()
        sys.set_asyncgen_hooks(
            firstiter=self._asyncgen_firstiter_hook,
            finalizer=self._asyncgen_finalizer_hook,
        )
        events._set_running_loop(self)

    def _run_forever_cleanup(self) -> None:
        self._stopping = False
        self._thread_id = None
        events._set_running_loop(None)
        self._set_coroutine_origin_tracking(False)
        if self._old_agen_hooks is not None:
            sys.set_asyncgen_hooks(*self._old_agen_hooks)
            self._old_agen_hooks = None

    def run_forever(self) -> None:
        """Run iterations until ``stop()`` is called."""
        counters = self._counters
        sampler = None
        started = None
        instruments = None
        # Outside the try, as asyncio: a refused run (another loop runs in
        # this thread) must not clean up, which would unset that loop.
        self._run_forever_setup()
        try:
            # Uptime is a duration: the loop's own clock, whatever replaced ``time``.
            counters.run_started = started = self._clock.monotonic()
            recorder = self._metrics_recorder
            if recorder is not None and recorder.mode == "sampled":
                from .metrics.sampler import Sampler

                # This frame calls the run loop, which, compiled, has none.
                sampler = Sampler(self, recorder, sys._getframe())
            if self._instrument_tasks is not None or self._ready.__class__ is not collections.deque:
                self._switch_ready()
            instruments = self._instrument_set
            if instruments is not None:
                instruments.call_extra("before_run", (), self)
            # Asked of the bound method: reading self.__dict__ would make
            # the dict the slots keep unmade (see __slots__).
            if getattr(self._run_once, "__func__", None) is not CoreLoop._run_once:
                # Someone wraps _run_once (to count or time iterations, as
                # some monitoring tools do): call it once per iteration.
                run_once = self._run_once
                while True:
                    run_once()
                    if self._stopping is _REENTER:
                        self._stopping = False
                        self._switch_ready()
                    elif self._stopping:
                        break
            else:
                while True:
                    self._run_iterations(False)
                    if self._stopping is not _REENTER:
                        break
                    self._stopping = False
                    self._switch_ready()
        finally:
            if sampler is not None:
                sampler.stop()
            if started is not None:
                counters.uptime += self._clock.monotonic() - started
                counters.run_started = None
            if instruments is not None:
                # The instruments now installed: one added during the run
                # gets after_run too, as in trio.
                now_installed = self._instrument_set
                if now_installed is not None:
                    now_installed.call_extra("after_run", (), self)
            self._run_forever_cleanup()

    def run_until_complete(self, future: _AwaitableLike[_T]) -> _T:
        """Run until ``future`` (a future, coroutine or awaitable) is done."""
        self._check_closed()
        self._check_running()
        new_task = not aio_futures.isfuture(future)
        # On 3.11 typeshed's ensure_future leaves out the generators this
        # accepts (and 3.11's asyncio takes).
        task: Any = aio_tasks.ensure_future(future, loop=self)  # type: ignore[arg-type,unused-ignore]
        del future  # only ``task`` holds it from here
        if new_task:
            # Nobody else holds this task: a leftover is not worth a warning.
            task._log_destroy_pending = False
        task.add_done_callback(_run_until_complete_cb)
        try:
            try:
                self.run_forever()
            except BaseException:
                if new_task and task.done() and not task.cancelled():
                    # Mark the exception retrieved: it is being raised right now.
                    task.exception()
                raise
            finally:
                task.remove_done_callback(_run_until_complete_cb)
            if not task.done():
                raise RuntimeError("Event loop stopped before Future completed.")
            return task.result()
        finally:
            # The traceback of an exception raised from here keeps this
            # frame; the task holding that exception must not stay in it.
            task = None

    def close(self) -> None:
        """Close the loop: drop pending callbacks, release the fds."""
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self._closed:
            return
        if self._debug:
            logger.debug("Close %r", self)
        self._closed = True
        # The bound methods of this loop that it keeps (its ``time``, and a
        # subclass's in _now) hold it in a cycle: the clock's function does
        # what they did from now on.
        if not self._time_replaced:
            self._time_bound = self._clock.monotonic
        if self._time_is_overridden():
            self._now = self._clock.monotonic
        self._refresh_plain_ready()
        self._ready.clear()
        if self._schedule is not None:
            self._schedule.finish()
        for inbox in (self._threadsafe_inbox, self._signal_inbox):
            if inbox is not None:
                inbox.clear()
        self._clear_timers()
        self._executors.close()
        self._close_offload()
        self._signals.close()
        self._children.close()
        for table in (self._readers, self._writers):
            for handle in table.values():
                handle.cancel()
            table.clear()
        self._fileobjs.clear()
        self._io.close()
        self._waker.close()
        detach = getattr(self._clock, "_detach", None)
        if detach is not None:
            detach(self)

    def _disown_after_fork(self) -> None:
        """The child side of fork(): close this loop, and let each part drop the parent's state.

        The backend is swapped for a stand-in first, so that nothing after
        it can change the epoll instance the child shares with the parent
        (see ``_process.forking``).  Every part is then asked in turn, even
        after one fails; what failed is raised at the end.
        """
        if self._closed:
            return
        self._closed = True
        self._refresh_plain_ready()
        inherited = self._io
        self._io = forking.InheritedBackend()
        # run_once polls through its own reference to the backend's method.
        self._poll = self._io.poll
        forking.call_each(
            self._signals.disown_after_fork,
            self._children.disown_after_fork,
            self._executors.disown_after_fork,
            # Closing our copies leaves the parent's fds alone.
            inherited.close,
            self._waker.close,
        )

    # -- metrics and observation (snakeloop.metrics, snakeloop.observing) ------

    def metrics(self, reset_peaks: bool = False) -> LoopMetrics:
        """A snapshot of what this loop has been doing (``snakeloop.metrics``).

        ``reset_peaks=True`` starts the peaks (``timer_lag_max``,
        ``ready_max``) over after this snapshot.  Raises RuntimeError on a
        loop made with ``metrics=False``.  Safe from any thread.
        """
        from .metrics import snapshot

        return snapshot(self, reset_peaks=reset_peaks)

    def _update_observer(self) -> None:
        recorder = self._metrics_recorder
        timed = recorder is not None and recorder.timing(self._clock.monotonic())
        timing = recorder if timed else None
        instruments = self._instrument_set
        self._timed = None
        if self._debug or instruments is not None:
            from .observing import Observer

            self._observe = Observer(
                self,
                debug=self._debug,
                recorder=timing,
                instruments=instruments,
                tasks=self._instrument_tasks,
            )
        elif timing is not None:
            from .observing import TimedSteps

            self._observe = TimedSteps(self, timing)
            self._timed = self._observe.fields()
        else:
            self._observe = None

    def _executor_jobs(self) -> int:
        return self._executors.in_flight()

    # -- instruments (snakeloop.instruments) -----------------------------------

    def add_instrument(self, instrument: Any) -> None:
        """Have the loop call ``instrument``'s hooks (see ``snakeloop.Instrument``).

        Adding one that is installed already does nothing.  From the loop's
        thread; during a run, the ready queue starts reporting
        ``task_scheduled`` at the end of the current iteration.
        """
        from .instruments import InstrumentSet, TaskHooks

        instruments = self._instrument_set
        if instruments is None:
            instruments = InstrumentSet(self)
            instruments.add(instrument)
            self._instrument_set = instruments
            self._instrument_tasks = TaskHooks(instruments)
        else:
            instruments.add(instrument)
        self._instruments_changed()

    def remove_instrument(self, instrument: Any) -> None:
        """Stop calling ``instrument``'s hooks; KeyError if it is not installed."""
        instruments = self._instrument_set
        if instruments is None:
            raise KeyError(instrument)
        instruments.remove(instrument)
        if not instruments:
            self._instrument_set = self._instrument_tasks = None
        self._instruments_changed()

    def _instruments_changed(self) -> None:
        self._update_observer()
        self._set_poll(self._unwrapped_poll)
        if not self.is_running():
            self._switch_ready()
        elif self._stopping is False:
            # run_forever swaps the ready queue between two iterations.
            self._stopping = _REENTER

    def _switch_ready(self) -> None:
        """Make ``_ready`` an InstrumentedReady while instruments are installed, else a deque."""
        ready = self._ready
        tasks = self._instrument_tasks
        if tasks is None:
            if ready.__class__ is collections.deque:
                return
            new: collections.deque[Any] = collections.deque(ready)
        else:
            from .instruments import InstrumentedReady

            if isinstance(ready, InstrumentedReady) and ready._tasks is tasks:
                return
            new = InstrumentedReady(ready, tasks)
        ready.clear()
        self._ready = new
        self._refresh_plain_ready()
        if ready.__class__ is collections.deque:
            # Another thread may have read _ready just before: what it
            # appends moves on at the next poll (IoWaitHooks).
            self._stale_ready = ready
        else:
            ready.forward = self._queue_ready  # type: ignore[attr-defined]
            self._stale_ready = None
        self._set_poll(self._unwrapped_poll)

    def _queue_ready(self, entry: Any) -> None:
        self._ready.append(entry)

    def _set_poll(self, poll: Callable[[float | None], Any]) -> None:
        """Poll through ``poll``, with the io-wait hooks around it while instruments are in."""
        self._unwrapped_poll = poll
        instruments = self._instrument_set
        if instruments is not None:
            from .instruments import IoWaitHooks

            poll = IoWaitHooks(poll, instruments, self._stale_ready).poll
        self._poll = poll

    def _emit_slow_callback(self, record: Any) -> None:
        instruments = self._instrument_set
        if instruments is not None:
            instruments.call("slow_callback", record)

    def _emit_clock_jumped(self, old: float, new: float) -> None:
        instruments = self._instrument_set
        if instruments is not None:
            instruments.call("clock_jumped", old, new)

    def _emit_deadlock(self, error: Exception) -> None:
        instruments = self._instrument_set
        if instruments is not None:
            instruments.call("deadlock", error)

    def _wants_deadlock_hook(self) -> bool:
        instruments = self._instrument_set
        return instruments is not None and instruments.has("deadlock")

    # -- seeded scheduling (snakeloop.seeding) --------------------------------

    @property
    def seed(self) -> int | None:
        """The seed this loop's scheduling choices are drawn from, or None (not seeded)."""
        return None if self._schedule is None else self._schedule.seed  # type: ignore[no-any-return]

    @property
    def perturbation(self) -> dict[str, object]:
        """The perturbed dimensions, each with its option ({} when not seeded)."""
        return {} if self._schedule is None else dict(self._schedule.perturbation)

    def schedule_fingerprint(self) -> str | None:
        """A digest of every scheduling choice so far; equal runs have equal ones."""
        return None if self._schedule is None else self._schedule.fingerprint()  # type: ignore[no-any-return]

    def schedule_trace(self) -> list[Any]:
        """The last scheduling choices (``seeding.Decision``), oldest first."""
        return [] if self._schedule is None else self._schedule.trace()  # type: ignore[no-any-return]

    def _choose_tie_place(self, count: int) -> int:
        """timer_ties: a new timer's place among the ``count`` that can run at its deadline."""
        place: int = self._tie_stream.randrange(count)
        self._schedule.record(self._perturbed.iteration, "timer_ties", f"place {place} of {count}")
        return place

    def schedule_divergence(self) -> str | None:
        """How a replay (``replay=``) first differed from its recording, or None."""
        return None if self._schedule is None else self._schedule.divergence  # type: ignore[no-any-return]

    def _is_internal_fd(self, fd: int) -> bool:
        return fd == self._waker_fd or fd in self._internal_readers

    def _callbacks_before_due_timers(self) -> int:
        """timer_delay: how many callbacks are ready, if a timer is due now; else 0."""
        when = self._next_timer_when()
        if when is None or when >= self._now() + self._clock_resolution:
            return 0
        return len(self._ready)

    def _hold_due_timers(self, hold: bool) -> None:
        """timer_delay's seam: while held, no timer is due (see perturbation.TimerDelay).

        The core moves to the ready queue the timers due before ``now +
        clock resolution``: a resolution of minus infinity makes none due
        and leaves the heap alone.  Released, the resolution is the clock's
        again (read from the clock: ``set_clock`` may have run between).
        """
        self._clock_resolution = -math.inf if hold else self._clock.resolution

    # -- the clock ------------------------------------------------------------

    def _replace_time(self, value: Any) -> None:
        """``loop.time = value``: the loop's clock from now on, as ``self.time`` is asyncio's."""
        self._time_replaced = True
        self._time_bound = value
        self._read_time_from(value)

    def _restore_time(self) -> None:
        """``del loop.time``: the loop's own clock again (a subclass's ``time``, if any).

        Deadlines set while the replacement stood stay as they were, as on
        asyncio, whose deadlines are plain numbers on whatever clock read them.
        """
        if not self._time_replaced:
            raise AttributeError(
                f"'{type(self).__name__}' object has no attribute 'time'", name="time", obj=self
            )
        self._time_replaced = False
        # Once closed, the clock's function itself: the bound method would
        # hold the loop in a cycle again (see close).
        self._time_bound = (
            self._clock.monotonic if self._closed else CoreLoop.time.__get__(self, type(self))
        )
        self._read_time_from(self._time_source())

    def _time_source(self) -> Callable[[], float]:
        """What the loop reads its time from: what replaced ``time`` on this loop, a
        subclass's ``time``, or its clock."""
        if self._time_replaced:
            return self._time_bound  # type: ignore[no-any-return]
        if self._time_is_overridden():
            # A bound method: a cycle through this loop, which close() breaks.
            return self.time
        return self._clock.monotonic  # type: ignore[no-any-return]

    # Whether the class defines its own ``time`` (a subclass's override): decided
    # once per class, since the observer asks at every batch it runs.
    _time_overridden = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for klass in cls.__mro__:
            if "time" in klass.__dict__:
                cls._time_overridden = klass is not Loop
                break

    def _time_is_overridden(self) -> bool:
        return self._time_overridden

    def _time_is_replaced(self) -> bool:
        return bool(self._time_replaced) or self._time_is_overridden()

    def _read_time_from(self, now: Callable[[], float]) -> None:
        self._now = now
        if self.is_running() and self._stopping is False:
            # The run loop binds its clock once: it reads this one from its
            # next iteration, which is when asyncio's would first call it.
            self._stopping = _REENTER

    # ``loop.time = f``, ``del loop.time`` and ``mock.patch.object(loop,
    # "time")`` come to _replace_time and _restore_time; a read gives
    # ``_time_bound``: the replacement, or the loop's own bound ``time``.
    # Compiled, a descriptor whose read is C; interpreted, a property, whose
    # read through attrgetter runs no Python code (a Python __get__ made
    # loop.time() cost about 1,800 instructions more, callgrind, 3.11).
    if TYPE_CHECKING:

        def time(self) -> float: ...

    elif COMPILED:
        time = TimeAttribute(CoreLoop.time)
    else:
        time = _TimeProperty(attrgetter("_time_bound"), _replace_time, _restore_time)

    def get_clock(self) -> Clock:
        """The clock behind ``loop.time()``."""
        clock: Clock = self._clock
        return clock

    def set_clock(self, clock: Clock) -> None:
        """Read time from ``clock`` from now on; pending timers keep their remaining delays.

        Each timer's deadline moves by the difference between the two
        clocks' readings, so a timer due in 5 s is still due in 5 s, and
        time seen by the program never goes backwards on a loop whose clock
        says ``start="continue"``.  Only while the loop is not running.
        """
        if self.is_running():
            raise RuntimeError("cannot change the clock of a running loop")
        self._check_closed()
        if not isinstance(clock, Clock):
            raise TypeError(f"a clock needs a resolution and a monotonic() method, got {clock!r}")
        old = self._clock
        old_now = old.monotonic()
        attach = getattr(clock, "_attach", None)
        if attach is not None:
            attach(self, old_now)
        schedule = self._schedule
        if schedule is not None and "epoch" in schedule.perturbation and old is not clock:
            if not getattr(clock, "is_virtual", False):
                raise ValueError(EPOCH_NEEDS_VIRTUAL_TIME)
            # Code that assumes loop.time() starts near 0 shows here (trio's SystemClock).
            epoch = schedule.stream("epoch").randrange(10_000, 200_001)
            clock.jump(epoch)  # type: ignore[attr-defined]
            schedule.record(0, "epoch", f"start + {epoch} s")
        if old is not clock:
            detach = getattr(old, "_detach", None)
            if detach is not None:
                detach(self)
        self._rebase_timers(clock.monotonic() - old_now)
        self._clock = clock
        self._clock_resolution = clock.resolution
        self._clock_now = clock.monotonic
        self._now = self._time_source()
        self._virtual_time = None
        self._set_poll(self._base_poll)
        if getattr(clock, "is_virtual", False):
            self._use_idle_driver()
            self._block_forever = None
        else:
            self._block_forever = self._poll_checking_for_deadlock
        test_mode = self._deadlock_mode() == "raise"
        self._watch_outside_work = test_mode or self._virtual_time is not None
        self._threads_before = (
            weakref.WeakSet(threading.enumerate()) if self._watch_outside_work else None
        )
        # Seeded loops need the order tasks were made in (see
        # _pending_tasks_in_creation_order), which the sites' dict keeps.
        self._record_task_sites(test_mode or self._schedule is not None)

    def _record_task_sites(self, on: bool) -> None:
        """Remember where each task was created, for deadlock reports (tests only).

        An instance attribute in front of ``create_task``, so that the
        production path pays nothing; a subclass's own ``create_task`` is
        left alone.
        """
        if on and type(self).create_task is Loop.create_task:
            if self._task_sites is None:
                self._task_sites = weakref.WeakKeyDictionary()
            self.__dict__["create_task"] = self._create_task_recording_site
        elif getattr(self.create_task, "__func__", None) is Loop._create_task_recording_site:
            # Only then: self.__dict__ would make the dict (see __slots__).
            del self.create_task

    def _pending_tasks_in_creation_order(self) -> list[asyncio.Task[Any]]:
        """This loop's unfinished tasks: those made by ``create_task`` while sites were
        recorded in the order they were made, then any others in asyncio's order (a set's:
        ``asyncio.Task(coro)`` made directly, or made before recording began)."""
        pending = asyncio.all_tasks(self)
        ordered = [task for task in list(self._task_sites or ()) if task in pending]
        if len(ordered) < len(pending):
            known = set(ordered)
            ordered += [task for task in pending if task not in known]
        return ordered

    def _create_task_recording_site(
        self, coro: _CoroutineLike[_T], **kwargs: Any
    ) -> asyncio.Task[_T]:
        # The keywords as given: from 3.14 a task factory gets exactly those.
        task = Loop.create_task(self, coro, **kwargs)
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
            frame = frame.f_back  # type: ignore[assignment]
        if frame is not None and self._task_sites is not None:
            try:
                self._task_sites[task] = (frame.f_code.co_filename, frame.f_lineno)
            except TypeError:
                pass  # a factory's task that takes no weak reference: no site
        return task

    def _use_idle_driver(self) -> VirtualTime:
        driver = self._virtual_time
        if driver is None:
            from .virtualtime import VirtualTime

            held = self._perturbed.holding if self._perturbed is not None else None
            driver = VirtualTime(self, self._clock, self._base_poll, held)
            self._virtual_time = driver
            self._set_poll(driver.poll)
        return driver

    def _release_idle_driver(self) -> None:
        driver = self._virtual_time
        if driver is not None and not driver.is_needed():
            self._virtual_time = None
            self._set_poll(self._base_poll)

    def _deadlock_mode(self) -> str:
        mode = self._on_deadlock
        if mode is None:
            return "raise" if getattr(self._clock, "is_virtual", False) else "log"
        return mode

    def _poll_checking_for_deadlock(self) -> Any:
        """The core's poll with no timer and no fd: after a grace period, can anything wake it?

        Waiting first keeps the check off the common path (a job's result,
        a reply, arriving within the grace period), so a production loop
        pays for it at most once per long wait.
        """
        mode = self._deadlock_mode()
        poll = self._poll
        if mode == "ignore" or (self._deadlock_logged and mode == "log"):
            return poll(None)
        test_mode = mode == "raise"
        events = poll(DEADLOCK_GRACE_TEST if test_mode else DEADLOCK_GRACE)
        if events or self._ready:
            return events
        from .deadlock import report_deadlock, what_can_wake

        if not what_can_wake(self, test_mode=test_mode):
            self._deadlock_logged = not test_mode
            report_deadlock(self, mode=mode, virtual=False)
        return poll(None)

    # -- futures and tasks -------------------------------------------------

    def create_future(self) -> asyncio.Future[Any]:
        """A new future attached to this loop."""
        future_class = self._future_class
        if future_class is ASYNCIOS:
            future_class = aio_futures.Future
        return future_class(loop=self)  # type: ignore[no-any-return]

    # Compiled, the core makes futures without a Python frame outside debug
    # mode (see CoreLoop.create_future).
    _create_future_slow = create_future
    if COMPILED:
        create_future = CoreLoop.create_future  # type: ignore[assignment]

    if sys.version_info >= (3, 14):
        # 3.14 forwards every keyword of create_task, as given, to the task factory or
        # to the Task (gh-128307): eager_start, and whatever a factory of the program's
        # own takes.  The factory names the task itself; the loop no longer does.

        def create_task(  # type: ignore[override,unused-ignore]
            self, coro: _CoroutineLike[_T], **kwargs: Any
        ) -> asyncio.Task[_T]:
            """Wrap ``coro`` in a task scheduled on this loop."""
            if self._closed:
                raise RuntimeError("Event loop is closed")
            factory: Callable[..., Any] | None = self._task_factory
            if factory is None:
                task_class = self._task_class
                if task_class is ASYNCIOS:
                    task_class = aio_tasks.Task
                if task_class is Task and _NAME_AND_CONTEXT.issuperset(kwargs):
                    task: Any = _new_task(Task)
                    task._setup(coro, self, kwargs.get("name"), kwargs.get("context"), False, 2)
                else:
                    task = task_class(coro, loop=self, **kwargs)
                    if task._source_traceback:
                        del task._source_traceback[-1]
                return task
            if self._instrument_tasks is not None:
                return self._create_task_seen_by_instruments(factory, coro, kwargs)
            return factory(self, coro, **kwargs)

    else:
        # typeshed gives 3.13's create_task an ``eager_start`` keyword, which
        # (typeshed notes) asyncio takes only from 3.13.3 on; a type checker
        # cannot tell 3.13.0 from 3.13.3.  This loop, like 3.13.0's asyncio,
        # does not take it: the override is narrower than typeshed's on 3.13.

        def create_task(  # type: ignore[override,unused-ignore]
            self,
            coro: _CoroutineLike[_T],
            *,
            name: object = None,
            context: Context | None = None,
        ) -> asyncio.Task[_T]:
            """Wrap ``coro`` in a task scheduled on this loop."""
            if self._closed:
                raise RuntimeError("Event loop is closed")
            # asyncio calls a factory with ``context=`` too, which typeshed's
            # _TaskFactory does not describe.
            factory: Callable[..., Any] | None = self._task_factory
            if factory is None:
                task_class = self._task_class
                if task_class is ASYNCIOS:
                    task_class = aio_tasks.Task
                if task_class is Task:
                    # Task(coro, loop=self, ...) without the keyword-argument call.
                    task: Any = _new_task(Task)
                    # asyncio's pure-Python Task, made in its create_task, drops
                    # two frames from its record (see Task._setup).
                    task._setup(coro, self, name, context, False, 2)
                else:
                    task = task_class(coro, loop=self, name=name, context=context)
                    if task._source_traceback:
                        del task._source_traceback[-1]
                return task
            if self._instrument_tasks is not None:
                keywords = {"name": name} if context is None else {"name": name, "context": context}
                return self._create_task_seen_by_instruments(factory, coro, keywords)
            # No ``task`` local: an eager factory runs the first step under this
            # frame, which an error's traceback then keeps (see Task._eager_start).
            if context is None:
                return _named(factory(self, coro), name)
            return _named(factory(self, coro, context=context), name)

    # Compiled, the core makes snakeloop's own tasks without a Python frame
    # and calls this method for the rest (see CoreLoop.create_task).
    _create_task_slow = create_task
    if COMPILED:
        create_task = CoreLoop.create_task  # type: ignore[assignment]

    def _create_task_seen_by_instruments(
        self, factory: Callable[..., Any], coro: Any, keywords: dict[str, Any]
    ) -> Any:
        """A factory's task, reported to the instruments once it exists.

        asyncio's C Task takes an eager first step inside its constructor,
        where no hook can reach: its ``task_spawned`` (and ``task_exited``,
        if that step finished it) follow the construction.  snakeloop's
        eager tasks bracket that step themselves (``Task._eager_start``).
        """
        task = _factory_task(self, factory, coro, keywords)
        tasks = self._instrument_tasks
        if tasks is not None and not isinstance(task, Task):
            tasks.constructed(task)
        try:
            return task
        finally:
            # See create_task: an eager step's error keeps this frame.
            task = tasks = None

    def set_task_factory(self, factory: _TaskFactory | None) -> None:
        """Use ``factory(loop, coro[, context=...])`` for ``create_task``."""
        if factory is not None and not callable(factory):
            raise TypeError("task factory must be a callable or None")
        self._task_factory = factory
        self._refresh_direct_task_class()

    def _refresh_direct_task_class(self) -> None:
        """Whatever sets ``_task_factory`` or ``_task_class`` calls this (see ``create_task``)."""
        if self._task_factory is None and self._task_class in (Task, ASYNCIOS):
            self._direct_task_class = self._task_class
        else:
            self._direct_task_class = None

    def get_task_factory(self) -> _TaskFactory | None:
        return self._task_factory

    # -- readiness callbacks -------------------------------------------------

    def _ensure_fd_no_transport(self, fd: FileDescriptorLike) -> None:
        # What the object says now, as in asyncio: a closed socket asks
        # about fd -1 (no transport), not about the fd its registration is
        # found under.
        fileno = fd
        if not isinstance(fileno, int):
            try:
                fileno = int(fileno.fileno())
            except (AttributeError, TypeError, ValueError):
                raise ValueError(f"Invalid file object: {fd!r}") from None
        transport = self._transports.get(fileno)
        if transport is not None and not transport.is_closing():
            raise RuntimeError(f"File descriptor {fd!r} is used by transport {transport!r}")

    def _attach_transport(self, fd: int, transport: asyncio.BaseTransport) -> None:
        """Make ``transport`` the owner of ``fd``: ``add_reader`` & co. refuse it meanwhile."""
        self._transports[fd] = transport

    def _detach_transport(self, fd: int, transport: asyncio.BaseTransport) -> bool:
        """Drop ``transport`` as the owner of ``fd``; False if it was not the owner."""
        if self._transports.get(fd) is transport:
            del self._transports[fd]
            return True
        return False

    def _get_reader(self, fd: int) -> Handle | None:
        """The handle watching ``fd`` for reading, or None."""
        return self._readers.get(fd)

    def _get_writer(self, fd: int) -> Handle | None:
        """The handle watching ``fd`` for writing, or None."""
        return self._writers.get(fd)

    # -- what can still wake the loop (read when idle, never on the hot path) --

    def _watched_fds(self) -> list[tuple[int, Any, bool, bool]]:
        readers = self._readers
        writers = self._writers
        return [
            (fd, fileobj, fd in readers, fd in writers) for fd, fileobj in self._fileobjs.items()
        ]

    def _transport_fds(self) -> list[int]:
        owned = list(self._transports.items())
        return [fd for fd, transport in owned if not transport.is_closing()]

    def _unfinished_work(self) -> list[Any]:
        return [*self._executors.pending(), *self._offload_pending(), *self._children.pending()]

    def _worker_threads(self) -> set[Any]:
        return self._executors.worker_threads() | self._offload_threads()

    def _older_threads(self) -> set[Any]:
        before = self._threads_before
        return set(before) if before is not None else set()

    def _has_signal_handlers(self) -> bool:
        return self._signals.has_handlers()

    def _shared_recv_buffer(self) -> memoryview:
        """The one receive buffer of this loop, made on first use (see transports.recvbuffer)."""
        view = self._shared_recv_view
        if view is None:
            view = self._shared_recv_view = memoryview(bytearray(RECV_BUFFER_SIZE))
        return view

    def _fd_for(self, fileobj: FileDescriptorLike) -> int:
        """The fd of ``fileobj``; for an object that no longer has one (closed),
        the fd registered through that very object, as selectors finds it."""
        if fileobj.__class__ is int and fileobj >= 0:
            # What transports and the sock_* methods pass: one check.
            return fileobj
        try:
            return _fd_of(fileobj)
        except ValueError:
            for fd, registered in self._fileobjs.items():
                if registered is fileobj:
                    return fd
            raise

    # ``context``: the one the callback runs in, as asyncio's take it from 3.15
    # on (a stream transport's own); None copies the current one, as before.
    def _add_reader(
        self,
        fd: FileDescriptorLike,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> Handle:
        self._check_closed()
        handle = Handle(callback, args, self, context)
        self._set_io_handle(self._fd_for(fd), handle, self._readers, READABLE, fd)
        return handle

    def _add_writer(
        self,
        fd: FileDescriptorLike,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> Handle:
        self._check_closed()
        handle = Handle(callback, args, self, context)
        self._set_io_handle(self._fd_for(fd), handle, self._writers, WRITABLE, fd)
        return handle

    def _remove_reader(self, fd: FileDescriptorLike) -> bool:
        if self._closed:
            return False
        return self._clear_io_handle(self._fd_for(fd), self._readers, READABLE)

    def _remove_writer(self, fd: FileDescriptorLike) -> bool:
        if self._closed:
            return False
        return self._clear_io_handle(self._fd_for(fd), self._writers, WRITABLE)

    # The sock_* methods' way out: one call, as the dict lookup plus
    # _remove_reader it replaces was (no extra hop on their path).
    def _remove_reader_handle(self, fd: int, handle: Handle) -> bool:
        if self._closed or self._readers.get(fd) is not handle:
            return False
        return self._clear_io_handle(fd, self._readers, READABLE)

    def _remove_writer_handle(self, fd: int, handle: Handle) -> bool:
        if self._closed or self._writers.get(fd) is not handle:
            return False
        return self._clear_io_handle(fd, self._writers, WRITABLE)

    def add_reader(
        self, fd: FileDescriptorLike, callback: Callable[[*_Ts], Any], *args: *_Ts
    ) -> None:
        """Call ``callback(*args)`` whenever ``fd`` is readable."""
        self._ensure_fd_no_transport(fd)
        self._add_reader(fd, callback, *args)

    def remove_reader(self, fd: FileDescriptorLike) -> bool:
        """Stop watching ``fd`` for reading; True if it was watched."""
        self._ensure_fd_no_transport(fd)
        return self._remove_reader(fd)

    def add_writer(
        self, fd: FileDescriptorLike, callback: Callable[[*_Ts], Any], *args: *_Ts
    ) -> None:
        """Call ``callback(*args)`` whenever ``fd`` is writable."""
        self._ensure_fd_no_transport(fd)
        self._add_writer(fd, callback, *args)

    def remove_writer(self, fd: FileDescriptorLike) -> bool:
        """Stop watching ``fd`` for writing; True if it was watched."""
        self._ensure_fd_no_transport(fd)
        return self._remove_writer(fd)

    # -- signals (the SignalHandlers part) -------------------------------------

    def add_signal_handler(self, sig: int, callback: Callable[[*_Ts], Any], *args: *_Ts) -> None:
        """Run ``callback(*args)`` on the loop when signal ``sig`` arrives."""
        self._signals.add(sig, callback, args)

    def remove_signal_handler(self, sig: int) -> bool:
        """Remove the handler of ``sig``; True if there was one."""
        return self._signals.remove(sig)

    # -- threads (the Executors part) ----------------------------------------

    def run_in_executor(
        self,
        executor: concurrent.futures.Executor | None,
        func: Callable[[*_Ts], _T],
        *args: *_Ts,
    ) -> asyncio.Future[_T]:
        """Run ``func(*args)`` in ``executor`` (None: the default one)."""
        return self._executors.run(executor, func, args)

    # Narrower than AbstractEventLoop's Executor, as typeshed's BaseEventLoop
    # is: any other executor raises TypeError, here and in asyncio.
    def set_default_executor(  # type: ignore[override]
        self, executor: concurrent.futures.ThreadPoolExecutor
    ) -> None:
        """Use ``executor`` for ``run_in_executor(None, ...)``."""
        self._executors.set_default(executor)

    if sys.version_info >= (3, 12):

        async def shutdown_default_executor(self, timeout: float | None = None) -> None:
            """Shut the default executor down, joining its threads."""
            await self._executors.shutdown_default(timeout)

    else:

        async def shutdown_default_executor(self) -> None:
            """Shut the default executor down, joining its threads."""
            await self._executors.shutdown_default(None)

    # -- child processes (the Children part) -----------------------------------

    async def subprocess_exec(
        self,
        protocol_factory: Callable[[], _ProtocolT],
        program: Any,
        *args: Any,
        stdin: int | IO[Any] | None = subprocess.PIPE,
        stdout: int | IO[Any] | None = subprocess.PIPE,
        stderr: int | IO[Any] | None = subprocess.PIPE,
        universal_newlines: Literal[False] = False,
        shell: Literal[False] = False,
        bufsize: Literal[0] = 0,
        encoding: None = None,
        errors: None = None,
        text: Literal[False] | None = None,
        **kwargs: Any,
    ) -> tuple[asyncio.SubprocessTransport, _ProtocolT]:
        """Run ``program`` with ``args``, never through a shell."""
        return await self._children.start_exec(
            protocol_factory,
            program,
            args,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            universal_newlines=universal_newlines,
            shell=shell,
            bufsize=bufsize,
            encoding=encoding,
            errors=errors,
            text=text,
            popen_kwargs=kwargs,
        )

    async def subprocess_shell(
        self,
        protocol_factory: Callable[[], _ProtocolT],
        cmd: bytes | str,
        *,
        stdin: int | IO[Any] | None = subprocess.PIPE,
        stdout: int | IO[Any] | None = subprocess.PIPE,
        stderr: int | IO[Any] | None = subprocess.PIPE,
        universal_newlines: Literal[False] = False,
        shell: Literal[True] = True,
        bufsize: Literal[0] = 0,
        encoding: None = None,
        errors: None = None,
        text: Literal[False] | None = None,
        **kwargs: Any,
    ) -> tuple[asyncio.SubprocessTransport, _ProtocolT]:
        """Run ``cmd`` through the shell; the caller quotes it (``shlex.quote``)."""
        return await self._children.start_shell(
            protocol_factory,
            cmd,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            universal_newlines=universal_newlines,
            shell=shell,
            bufsize=bufsize,
            encoding=encoding,
            errors=errors,
            text=text,
            popen_kwargs=kwargs,
        )

    # -- reports (insight) -----------------------------------------------------

    def report(self, file: IO[str] | None = None, format: str = "text") -> str:
        """Write every pending task's await chain, what it waits on and who
        waits for it, then cycles and the loop's state, to ``file`` (default
        ``sys.stderr``) and return the text; ``format="json"`` for the same
        data as JSON (see ``snakeloop.insight``).  Read-only; any thread."""
        from .insight import report

        return report(self, file, format)


# Debug mode's record of where a task or timer was made starts at the caller
# of these, as it starts at the caller of asyncio's create_task and call_at.
skip_when_recording(Loop._create_task_slow, Loop._create_task_recording_site)
