# cython: annotation_typing=False
"""The core loop: a ready deque, a timer heap, and ``run_once``.

This is the hot path.  Everything here is written so Cython can compile the
module from the same source: attributes are declared in ``__init__`` under
``__slots__``, and ``run_once`` uses no closures or generators.

One iteration (``_run_once``) is:

1. interpreted, drop the deadlines of cancelled timers from the top of the
   heap (``cancel()`` took the timer out of ``_timers``, and rebuilt the heap
   when more than half of it was such deadlines); compiled, there are none:
   ``cancel()`` takes a timer out of the heap at once (``timerheap.heap_remove``);
2. choose the poll timeout: 0 if callbacks are ready or the loop is
   stopping, else the time to the earliest timer, else block;
3. poll the OS and queue the callbacks of the ready fds.  When callbacks are
   already waiting and no fd other than the waker is registered, the poll is
   skipped: it could only report a wakeup whose callbacks are already in the
   deque (``call_soon_threadsafe`` appends before it wakes).  It is skipped
   too when callbacks wait and the run's previous iteration polled: what it
   would find, the next iteration's poll finds, as asyncio does when the I/O
   comes a moment later (I/O may wait behind queued callbacks, never go
   ahead of them).  So with callbacks waiting at least every second
   iteration polls; a run's first iteration (the one iteration of a loop
   stopped before it runs, too) and every iteration of a seeded loop
   (``_skip_polls_after_polls``) poll.  A server's answer to a request (the
   reader's callback wakes a task, whose step writes the answer) costs one
   epoll_wait, not two, as on uvloop, where libuv runs the woken callbacks
   after the poll that found the I/O.  Internal fds (``_add_internal_reader``:
   the signal pipe) are drained during this step, so what they queue joins
   this iteration's batch;
4. move every timer due within one clock resolution of now to the deque;
5. run exactly the callbacks that were in the deque when this step began;
   callbacks they add wait for the next iteration.  (When nothing was ready
   before the poll, the I/O callbacks of step 3 are kept in a list and run
   first, then the deque's timers: the same order, without the deque.)
   When ``_observe`` is set (debug mode, instruments, a metrics timing
   window), it runs this step instead, one watched callback at a time; when
   ``_timed`` is set too (a timing window and nothing else), the core runs
   it, timing each callback (``_run_ready_timed``).

Interpreted, the heap holds deadlines only (floats: compared in C by heapq,
and invisible to the garbage collector); ``_timers`` maps each deadline to
its handle, or to a list of handles in the order they were set when several
share it, so equal deadlines fire first-in, first-out.  Heap entries that
referenced handles (asyncio's TimerHandles with a Python ``__lt__``, or
``(when, seq, handle)`` tuples) would cost either a Python call per
comparison or one more object per timer for the collector to track.
Compiled, a comparison of two handles costs two C loads, so the heap holds
the TimerHandles themselves, ordered by ``_deadline`` and then ``_seq`` (see
``timerheap.earlier``), and ``_timers`` stays empty: hashing a float deadline for the
table cost more than the heap.  Outside this module, the heap is read
through ``_pending_timers()`` and the methods beside it.

Queueing a plain callback
-------------------------
``_ready`` holds two encodings of one thing, a callback to run now:

- a ``Handle`` (``call_soon``, readers, writers, timers, signal handlers),
  skipped if it was cancelled;
- a plain entry, the 3-tuple ``(callback, arg, context)``.  It stands for
  ``Handle(callback, (arg,), loop, context)`` that nobody holds, so nobody
  can cancel it, without building it: the loop runs it as
  ``context.run(callback, arg)``, and builds that Handle only if the
  callback raises, so that the exception handler sees what asyncio shows.

Futures and tasks queue their done callbacks and steps as plain entries: a
tuple is several times cheaper to make than a Handle, and a task switch is
not much more than that.  The rule, for any part of snakeloop:

- queue one only on the deque that ``plain_queue(loop)`` returns: the
  loop's ``_plain_ready``, read with a default of None (other loops have no
  such attribute).  A snakeloop loop keeps it equal to ``_ready`` while its
  class's ``_accepts_plain_callbacks`` is true, it is not in debug mode (a
  Handle made there records where it was made), it is not closed
  (``call_soon`` raises there) and ``_ready`` is exactly a
  ``collections.deque`` (a subclass such as the instruments' queue sees
  each entry in its own ``append``, which futures skip: they append with
  deque's own), and None otherwise: whatever changes one of those, or
  rebinds ``_ready``, calls ``_refresh_plain_ready()``.  One read
  of one attribute instead of four is what a task switch can afford.  On
  None, the callback goes through ``loop.call_soon(callback, arg,
  context=context)``;
- append exactly one 3-tuple: ``callback`` is called with exactly one
  positional argument, ``arg``; ``context`` is a ``contextvars.Context``,
  never None;
- from the loop's thread only, as for ``call_soon``; it runs in FIFO order
  with the Handles around it.

A subclass that overrides ``call_soon`` to see every callback sets
``_accepts_plain_callbacks = False`` in its class body; the loop reads it
when it is made.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import logging
import threading
import types
from asyncio import futures as _aio_futures
from asyncio import tasks as _aio_tasks
from time import monotonic as _monotonic
from typing import TYPE_CHECKING, Any

if False:  # Cython reads this import when it compiles the module (setup.py)
    import cython
else:
    from . import cythonshim as cython
from .callbackcheck import is_coroutine_callback
from .counters import FLUSH_AFTER as _FLUSH_AFTER
from .counters import FLUSH_EVERY as _FLUSH_EVERY
from .counters import LoopCounters
from .handles import (
    THREADSAFE_HANDLES,
    Handle,
    ThreadSafeHandle,
    TimerHandle,
    shorten_source_traceback,
    skip_when_recording,
    source_traceback,
)

if not cython.compiled:
    # The C functions the .pxd declares, for the compiled paths only.
    from .cythonshim import (
        C_MONOTONIC,
        PyContext_CheckExact,
        PyContext_CopyCurrent,
        PyContext_Enter,
        PyContext_Exit,
        coarse_seconds,
        coarse_step,
        epoll_wait_list,
        learn_deque,
        monotonic_seconds,
        queue_append,
        queue_popleft,
    )

    # The compiled build cimports these (runloop.pxd).
    from .suspension import suspension_of
    from .timerheap import deadline_of, heap_remove, heappop, heappush, index_heap

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextvars import Context
    from typing import TypeVarTuple

    _Ts = TypeVarTuple("_Ts")

__all__ = ["COMPILED", "CoreLoop", "EpollWait", "plain_queue"]

# True when this module runs compiled.  setup.py compiles the core's modules all
# together or none of them, so this says which build is running.
COMPILED: bool = cython.compiled

logger = logging.getLogger("asyncio")

# A poll never sleeps longer than a day, as in asyncio: loop.time() may be
# far from the wall clock, and a huge timeout overflows some kernels.
MAXIMUM_POLL_TIMEOUT = 24 * 3600

# Rebuild the timer heap when it holds more than this many entries and more
# than half of them are cancelled.
_MIN_TIMERS_TO_COMPACT = 100
# Compiled, a long batch of callbacks is timed in stretches of this many (see
# step 5 of _run_iterations).
_STRETCH_CALLBACKS = 64
# The default of create_task's keywords in the compiled build: one that was not given is
# not passed on to a task factory (3.14's create_task forwards exactly what it got).
_OMITTED = object()
# asyncio's Task (C) as it was at import, which a loop with stdlib_futures makes
# directly too: a test that puts asyncio's Python Task in its place later gets the
# general path (Loop._refresh_direct_task_class).
_C_TASK: Any = asyncio.Task
# What a loop that makes asyncio's Future and Task (stdlib_futures) keeps as its
# classes: asyncio's loop looks tasks.Task and futures.Future up at each
# create_task and create_future, so a test that swaps them after the loop
# exists (CPython's test_graph does) gets the swapped class.
_ASYNCIOS = object()
ASYNCIOS = _ASYNCIOS
# Compiled, on Linux: the coarse clock's tick (runloop.pxd), or 0 where there
# is none.  With a timer pending, each iteration reads that clock first, and
# the precise one only if a timer could be due _COARSE_TICKS_OF_MARGIN ticks
# later than the coarse reading, since the precise clock is that much ahead
# at most.  A precise read per iteration cost the call_soon chain 11% of its
# rate with idle timers pending, a coarse one 5%, and a coarse one every
# eighth iteration (below) 1-2% (3.13, timed).  The coarse reading also ends
# the stretch (see _slow_stretch), whose length is then off by up to a tick:
# the coarse clock is used only when slow_callback_duration is at least
# _COARSE_TICKS_PER_SLOW ticks, so that no quick stretch is called slow.
_COARSE_STEP = coarse_step() if cython.compiled else 0.0
# Whether call_later may read the clock in C (compiled, on Linux): a module
# constant, which the interpreted build tests for less than cython.compiled.
_C_CLOCK = cython.compiled and C_MONOTONIC
_COARSE_TICKS_OF_MARGIN = 4.0
_COARSE_TICKS_PER_SLOW = 10.0
# After an iteration that took less than a tick (its coarse reading equals the
# last one), the next iterations read no clock at all while the earliest timer
# is more than _COARSE_SKIP_HEADROOM seconds past that reading.  A timer can
# then fire late only if those few iterations take that long together, and by
# their length only; the first read after the skips ends the stretch that held
# them, so a stretch is the callbacks between two reads.  The first run of
# skips is _COARSE_SKIPS long; each run that follows an interval of under a
# tick may be twice as long plus one, up to _COARSE_SKIPS_MAX, and a tick seen
# to pass, a wait or a timer that may be due starts them short again.  Past the
# first, a run is thus at most about twice the iterations just seen to take
# under a tick: for it to be a slow stretch (at least _COARSE_TICKS_PER_SLOW
# ticks) its iterations must be five times slower than those.  A coarse read
# costs a busy loop far more time than its instructions say (likely a cold
# vDSO): the call_soon chain with 1k idle timers ran at 91-95% of its rate with
# a read every 8th iteration, 95-97% every 32nd, and 99% with none (compiled,
# 3.13, timed in pairs).  A skipped iteration reads the heap only if a timer
# was set since the skips began (_timer_seq moved): with the heap's head read
# every iteration, 10k idle timers cost the chain 48 instructions per
# iteration of its 2,080, and 20 without (callgrind, 3.11).
_COARSE_SKIPS = 7
_COARSE_SKIPS_MAX = 63
_COARSE_SKIP_HEADROOM = 1.0
_MAX_CANCELLED_FRACTION = 0.5

# The backends' readiness bits (snakeloop._io._events; the core does not
# import _io).  Any other bit in a mask is an error: it wakes both sides.
_READABLE = 1
_WRITABLE = 4
_NOT_WRITABLE = ~_WRITABLE
_NOT_READABLE = ~_READABLE

_get_ident = threading.get_ident

if cython.compiled:
    # queue_append (readyqueue.pxd) calls deque's C append directly.
    learn_deque(collections.deque)


# The earliest deadline, read in the run loop (the heap is timerheap's).
@cython.boundscheck(False)
@cython.wraparound(False)
def _first_deadline(scheduled):
    """The earliest timer's deadline, as a double (compiled only).

    Every caller has seen the heap non-empty, and it holds TimerHandles only,
    so the index has no range check and the cast no type test: 29 instructions
    per call before, 21 now (callgrind, 3.11).  A busy loop with a timer
    pending calls it once per iteration, when it reads a clock.
    """
    timer = cython.cast(TimerHandle, scheduled[0], typecheck=False)
    return timer._deadline


def plain_queue(loop: Any) -> collections.deque[Any] | None:
    """``loop._ready`` if a plain entry may be queued on it now, else None.

    The rule "Queueing a plain callback" above, as code.  Where a call costs
    too much, it is written out, with a comment that says so.
    """
    return getattr(loop, "_plain_ready", None)


class EpollWait:
    """``select.epoll.poll`` for the compiled build, with an event array of its own.

    The compiled loop gives it to its epoll backend (``_io.epoll``); the C side is in
    ``epollwait.pxd``, with the OS and CPython facts it relies on.  Its
    ``poll(timeout)`` is called as the epoll object's is, with the same
    result and exceptions.  A method, not ``__call__``: the loop calls a
    bound method of a compiled class through vectorcall, where calling an
    instance goes through ``tp_call`` and packs the timeout into a tuple.
    Interpreted, nothing makes one.
    """

    __slots__ = ("_epfd",)

    def __init__(self, epfd: int) -> None:
        self._epfd = epfd

    def poll(self, timeout: float | None = None) -> list[tuple[int, int]]:
        events: list[tuple[int, int]] = epoll_wait_list(  # type: ignore[assignment]  # shim
            self._epfd,
            cython.address(self._events),  # type: ignore[attr-defined]  # a C field
            timeout,
        )
        return events

    def close(self) -> None:
        """The epoll fd is closed: a later call raises as a closed epoll object's poll does."""
        self._epfd = -1


def _new_handle(callback: Any, args: Any, loop: Any, context: Any) -> Handle:
    """``Handle(callback, args, loop, context)``; compiled, without the call.

    The C fields are set directly, skipping the argument parsing of a class
    call.  Interpreted, the name is the class itself (below): a function
    around the call would only add one.
    """
    handle = Handle.__new__(Handle)
    if context is None:
        context = PyContext_CopyCurrent()
    handle._context = context
    handle._loop = loop
    handle._callback = callback
    handle._args = args
    handle._cancelled = False
    handle._repr = None
    if loop._debug:
        handle._source_traceback = source_traceback(0)
    else:
        handle._source_traceback = None
    return handle


def _new_timer(when: Any, callback: Any, args: Any, loop: Any, context: Any) -> TimerHandle:
    """``TimerHandle(when, callback, args, loop, context)``; see ``_new_handle``."""
    timer = TimerHandle.__new__(TimerHandle)
    if context is None:
        context = PyContext_CopyCurrent()
    timer._context = context
    timer._loop = loop
    timer._callback = callback
    timer._args = args
    timer._cancelled = False
    timer._repr = None
    if loop._debug:
        timer._source_traceback = source_traceback(1)
    else:
        timer._source_traceback = None
    timer._when = when
    timer._scheduled = False
    return timer


if not cython.compiled:
    _new_handle = Handle  # type: ignore[assignment,misc]
    _new_timer = TimerHandle  # type: ignore[assignment,misc]


def _run_live_handle(handle):
    """Compiled: run an uncancelled Handle's callback in its context.

    A ``contextvars.Context`` is entered through the C API (what
    ``Context.run`` does, with the same "already entered" RuntimeError)
    instead of a ``run`` method call: no method lookup and no argument tuple
    per callback.  Any other context object gets its ``run`` called, as
    asyncio's Handle does.
    """
    context = handle._context
    args = handle._args
    # The callback is held by a local, not called through the field: the
    # callback may cancel its own handle, which drops the field's reference,
    # and a C callable (a compiled method, functools.partial) would then run
    # on a freed object (docs/design.md, "Reentrancy").
    callback = handle._callback
    if PyContext_CheckExact(context):
        PyContext_Enter(context)
        try:
            if args:
                callback(*args)
            else:
                callback()
        finally:
            PyContext_Exit(context)
    elif args:
        context.run(callback, *args)
    else:
        context.run(callback)


def _as_handle(loop: Any, entry: Any) -> Handle:
    """The Handle a ready entry stands for (a plain entry is built into one)."""
    if entry.__class__ is tuple:
        callback, arg, context = entry
        return Handle(callback, (arg,), loop, context)
    return entry


# The callback kinds the timed ready loop tells a task's step by.
_MethodType = types.MethodType
_FunctionType = types.FunctionType


def format_handle(handle: Handle) -> str:
    """How asyncio names a handle in the slow-callback warning."""
    cb = handle._callback
    owner = getattr(cb, "__self__", None)
    if owner is not None and hasattr(owner, "_coro") and hasattr(owner, "get_name"):
        # A task's step: the task's repr says more than the bound method.
        return repr(owner)
    return str(handle)


class CoreLoop:
    """Scheduling and dispatch; the public loop API builds on this."""

    # Plain entries may be queued on _ready (see "Queueing a plain callback"
    # above).  A subclass that overrides call_soon to observe every callback
    # sets this to False.
    _accepts_plain_callbacks = True

    __slots__ = (
        "_ready",
        "_plain_ready",
        "_scheduled",
        "_timers",
        "_timer_cancelled_count",
        "_stopping",
        "_closed",
        "_debug",
        "_thread_id",
        "_clock",
        "_clock_resolution",
        "_now",
        "_time_replaced",
        "_time_bound",
        "_clock_now",
        "_io",
        "_poll",
        "_waker",
        "_waker_fd",
        "_internal_readers",
        "_readers",
        "_writers",
        "_fileobjs",
        "_current_handle",
        "_block_forever",
        "_skip_polls_after_polls",
        "_threadsafe_inbox",
        "_counters",
        "_observe",
        "_timed",
        "_on_slow_stretch",
        "slow_callback_duration",
        "_direct_task_class",
        "_future_class",
        "_timer_seq",
        "_timer_ties",
        "_tie_index",
    )

    def __init__(self, clock, io_backend, waker):
        self._ready = collections.deque()
        self._scheduled = []
        self._timers = {}
        self._timer_cancelled_count = 0
        # Compiled: the next timer's ``_seq`` (see timerheap.earlier).
        self._timer_seq = 0
        # None, or the seeded loop's choice of a new timer's place among the
        # others of its deadline (``count -> place``; see _place_tied_timer).
        self._timer_ties = None
        # Compiled, while _timer_ties is set: deadline -> its timers in
        # firing order (see _order_tie).
        self._tie_index = None
        self._stopping = False
        self._closed = False
        self._debug = False
        self._thread_id = None
        self._clock = clock
        self._clock_resolution = clock.resolution
        self._now = self._clock_now = clock.monotonic
        # Whether ``time`` was replaced on this loop, and what ``loop.time``
        # gives: the replacement, or this bound method (see TimeAttribute).
        # A cycle through the loop, which close() breaks.
        self._time_replaced = False
        self._time_bound = CoreLoop.time.__get__(self, type(self))
        self._io = io_backend
        self._poll = io_backend.poll
        self._waker = waker
        self._waker_fd = waker.fileno()
        # A seeded loop's inbox for other threads' calls (snakeloop.inbox),
        # or None: one test on the thread-safe path, none on the hot one.
        self._threadsafe_inbox = None
        # fd -> drain(): fds the core reads itself while it collects the
        # ready fds (see _add_internal_reader).  The waker is not in it: it
        # is checked first, by number, and must not keep the poll from being
        # skipped.
        self._internal_readers = {}
        self._readers = {}
        self._writers = {}
        # fd -> the object (or int) its registration was made through: the
        # first add_reader/add_writer while the fd had neither, kept until
        # the fd has neither again, as asyncio's selector keeps it in its
        # key.  A socket closed before its removal answers fileno() with
        # -1; asyncio then finds its registration by identity, so
        # remove_reader(sock) still works, and a loop that refused it would
        # keep a stale entry that swallows the next socket given that fd
        # number.  Dispatch never reads this table.
        self._fileobjs = {}
        self._current_handle = None
        # Called instead of a poll that would block with no timer and no fd
        # watched, returning its events (the loop's deadlock check), or None.
        # Only that branch reads it, after the fd tables: a server waiting
        # for its next request pays one truth test of its reader table.
        self._block_forever = None
        # Whether an iteration with callbacks waiting skips its poll when the
        # one before it polled (step 3 above).  A seeded loop polls every
        # iteration, as asyncio does: its perturbations hand held work on at
        # polls and count their delays in iterations.
        self._skip_polls_after_polls = True
        # The metrics' totals (kept even when nobody reads them: the counting
        # is in the iteration's locals either way), and who is told of a slow
        # stretch of callbacks.
        self._counters = LoopCounters()
        self._on_slow_stretch = None
        # None, or what runs step 5 callback by callback (debug mode,
        # instruments, a metrics timing window: snakeloop.observing).
        self._observe = None
        self._timed = None
        self.slow_callback_duration = 0.1
        # See the compiled create_task and create_future: the full loop sets them.
        self._direct_task_class = None
        self._future_class = None
        self._refresh_plain_ready()
        io_backend.register(self._waker_fd, _READABLE)

    def _refresh_plain_ready(self) -> None:
        """Set ``_plain_ready`` from the class's flag, debug mode, ``_closed`` and ``_ready``.

        See "Queueing a plain callback" above: whatever changes one of these
        calls this.
        """
        plain: collections.deque[Any] | None = None
        ready = self._ready
        if (
            self._accepts_plain_callbacks
            and not self._debug
            and not self._closed
            and ready.__class__ is collections.deque
        ):
            plain = ready
        self._plain_ready = plain

    # The compiled build's create_task and create_future: the loop's Task
    # (snakeloop's own, or asyncio's C Task) and future class, made without a
    # Python frame (one cost the gather and spawn rows about 700 instructions
    # a task on 3.13, and every stream read makes a future).
    # _direct_task_class is that Task class while no task factory is set, else
    # None.  The full loop keeps
    # both classes and, as _create_task_slow and _create_future_slow, has the
    # Python methods that do everything else: debug mode's record of where a
    # future was made keeps create_future's frame, as asyncio's does.  The
    # pure build calls those directly: no frame is saved there.
    if cython.compiled:

        def create_future(self) -> Any:
            """A new future attached to this loop."""
            if self._debug:
                return self._create_future_slow()  # type: ignore[attr-defined]  # Loop's
            future_class = self._future_class
            if future_class is _ASYNCIOS:
                future_class = _aio_futures.Future
            return future_class(loop=self)

        def create_task(
            self,
            coro: Any,
            *,
            name: object = _OMITTED,
            context: Any = _OMITTED,
            **kwargs: Any,
        ) -> Any:
            """Wrap ``coro`` in a task scheduled on this loop."""
            task_class = self._direct_task_class
            if task_class is _ASYNCIOS:
                # The general path for any Task but the C one seen at import.
                task_class = _aio_tasks.Task
                if task_class is not _C_TASK:
                    task_class = None
            if (
                task_class is None
                or self._closed
                or kwargs
                or (task_class is _C_TASK and self._debug)
            ):
                # From 3.14 asyncio hands a factory exactly the keywords it was
                # given, an omitted name included; Loop's method decides.
                if name is not _OMITTED:
                    kwargs["name"] = name
                if context is not _OMITTED:
                    kwargs["context"] = context
                return self._create_task_slow(coro, **kwargs)  # type: ignore[attr-defined]
            if task_class is _C_TASK:
                # asyncio's C Task (stdlib_futures): the call asyncio's create_task
                # makes.  In debug mode it records where it was made, which the
                # slow path trims as asyncio does.
                return _C_TASK(
                    coro,
                    loop=self,
                    name=None if name is _OMITTED else name,
                    context=None if context is _OMITTED else context,
                )
            task = task_class.__new__(task_class)
            # asyncio's pure-Python Task, made in its create_task, drops two
            # frames from its record (see Task._setup).
            task._setup(
                coro,
                self,
                None if name is _OMITTED else name,
                None if context is _OMITTED else context,
                False,
                2,
            )
            return task

    # -- time ------------------------------------------------------------

    def time(self) -> float:
        """The loop's clock, in seconds."""
        # Its own clock, not ``_now``: a subclass's ``time`` that calls
        # ``super().time()`` is what ``_now`` calls then (see TimeAttribute).
        return self._clock_now()

    # -- checks shared by the scheduling methods -------------------------

    def _check_closed(self) -> None:
        if self._closed:
            raise RuntimeError("Event loop is closed")

    def _check_thread(self):
        """In debug mode, refuse non-thread-safe calls from another thread."""
        thread_id = self._thread_id
        if thread_id is None:
            return
        if _get_ident() != thread_id:
            raise RuntimeError(
                "Non-thread-safe operation invoked on an event loop other than the current one"
            )

    def _check_callback(self, callback, method):
        if is_coroutine_callback(callback):
            raise TypeError(f"coroutines cannot be used with {method}()")
        if not callable(callback):
            raise TypeError(f"a callable object was expected by {method}(), got {callback!r}")

    # -- scheduling --------------------------------------------------------

    # call_soon is defined once per build, as _push_timer is: they differ in
    # the append only.  Compiled, deque's C append is called directly
    # (queue_append, readyqueue.pxd): ``_ready.append`` on an untyped object
    # is a lookup by name and a vectorcall, about 150 instructions of the
    # chain rows' 2,500 per callback.  Interpreted, the method call is the
    # cheapest there is, and a test of the build would cost every call.
    if cython.compiled:

        def call_soon(
            self,
            callback: Callable[[*_Ts], object],
            *args: *_Ts,
            context: Context | None = None,
        ) -> Handle:
            """Run ``callback(*args)`` on the next iteration, in FIFO order."""
            if self._closed:
                raise RuntimeError("Event loop is closed")
            if self._debug:
                self._check_thread()
                self._check_callback(callback, "call_soon")
            handle = _new_handle(callback, args, self, context)
            if handle._source_traceback:
                # asyncio's goes through _call_soon: two frames of its own.
                shorten_source_traceback(handle._source_traceback, 2)
            queue_append(self._ready, handle)
            return handle

    else:

        def call_soon(
            self,
            callback: Callable[[*_Ts], object],
            *args: *_Ts,
            context: Context | None = None,
        ) -> Handle:
            """Run ``callback(*args)`` on the next iteration, in FIFO order."""
            if self._closed:
                raise RuntimeError("Event loop is closed")
            if self._debug:
                self._check_thread()
                self._check_callback(callback, "call_soon")
            handle = _new_handle(callback, args, self, context)
            if handle._source_traceback:
                # asyncio's goes through _call_soon: two frames of its own.
                shorten_source_traceback(handle._source_traceback, 2)
            self._ready.append(handle)
            return handle

    def call_soon_threadsafe(
        self,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> Handle:
        """Like call_soon, from any thread; wakes a blocked poll."""
        if self._closed:
            raise RuntimeError("Event loop is closed")
        if self._debug:
            self._check_callback(callback, "call_soon_threadsafe")
        handle: Handle
        if THREADSAFE_HANDLES:
            handle = ThreadSafeHandle(callback, args, self, context)
        else:
            handle = _new_handle(callback, args, self, context)
        if handle._source_traceback:
            # asyncio's goes through _call_soon (or, from 3.14, drops two frames
            # of its own too).
            shorten_source_traceback(handle._source_traceback, 2)
        # deque.append is atomic.  The wakeup is written every time, not only
        # when the loop sleeps: the syscall also hands the GIL over, so
        # threads flooding the loop with callbacks cannot outrun it and grow
        # the deque without bound.  The eventfd never fills up.
        inbox = self._threadsafe_inbox
        if inbox is None:
            self._ready.append(handle)
        else:
            inbox.arrive(self._thread_id, handle)
        self._waker.wake()
        return handle

    @cython.locals(seconds=cython.double)
    def call_later(
        self,
        delay: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> TimerHandle:
        """Run ``callback(*args)`` after ``delay`` seconds."""
        if delay is None:
            raise TypeError("delay must not be None")
        if _C_CLOCK and self._now is _monotonic and (type(delay) is float or type(delay) is int):
            # The clock read in C and the sum of two doubles: the same float as
            # time.monotonic() + delay (see monotonic_seconds in runloop.pxd, and
            # float + int converts the int as this does), without a Python call
            # and two float objects.  A server that re-arms an idle timeout per
            # request pays for these on every request.
            seconds = delay
            seconds += monotonic_seconds()  # type: ignore[operator]  # the shim's
            return self._push_timer(seconds, callback, args, context, 3)
        # asyncio's call_later goes through its call_at: one more frame of
        # its own in a debug-mode record (see _push_timer).
        return self._push_timer(self._now() + delay, callback, args, context, 3)

    def call_at(
        self,
        when: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> TimerHandle:
        """Run ``callback(*args)`` at loop time ``when``."""
        if when is None:
            raise TypeError("when cannot be None")
        return self._push_timer(when, callback, args, context, 2)

    # _push_timer is defined twice, once per build, as Task._step is (see
    # docs/design.md, "One method, two builds"): the builds keep timers in
    # different heaps, and a test of the build on every timer cost the
    # interpreted timers row 0.6% more instructions.
    if cython.compiled:

        def _push_timer(
            self,
            when: float,
            callback: Callable[..., object],
            args: Any,
            context: Context | None,
            hidden: int,
        ) -> TimerHandle:
            """Set a timer (compiled): see the interpreted twin below."""
            if self._closed:
                raise RuntimeError("Event loop is closed")
            if self._debug:
                self._check_thread()
                self._check_callback(callback, "call_at")
            timer = _new_timer(when, callback, args, self, context)
            if timer._source_traceback:
                shorten_source_traceback(timer._source_traceback, hidden)
            # C fields of the compiled TimerHandle only.
            timer._deadline = deadline_of(when)  # type: ignore[attr-defined]
            if self._timer_ties is None:
                timer._seq = self._timer_seq  # type: ignore[attr-defined]
                self._timer_seq += 1
            else:
                self._order_tie(timer)
            heappush(self._scheduled, timer)
            timer._scheduled = True
            return timer

    else:

        def _push_timer(
            self,
            when: float,
            callback: Callable[..., object],
            args: Any,
            context: Context | None,
            hidden: int,
        ) -> TimerHandle:
            """Set a timer; ``hidden`` counts asyncio's frames on the way (call_at: 2).

            A debug-mode record of where the timer was set holds as many frames
            of the program as asyncio's, which drops its ``hidden`` frames from a
            record of ``DEBUG_STACK_DEPTH`` (see ``handles.source_traceback``).
            A parameter, not a test in call_later: that cost call_later 1% more
            instructions.
            """
            if self._closed:
                raise RuntimeError("Event loop is closed")
            if self._debug:
                self._check_thread()
                # asyncio names call_at here even when call_later was called.
                self._check_callback(callback, "call_at")
            timer = _new_timer(when, callback, args, self, context)
            if timer._source_traceback:
                shorten_source_traceback(timer._source_traceback, hidden)
            timers = self._timers
            entry = timers.get(when)
            if entry is None:
                timers[when] = timer
                heappush(self._scheduled, when)
            elif type(entry) is list:
                entry.append(timer)
                if self._timer_ties is not None:
                    self._place_tied_timer(entry)
            else:
                # A second timer for the same deadline: it fires after the first.
                timers[when] = entry = [entry, timer]
                if self._timer_ties is not None:
                    self._place_tied_timer(entry)
            timer._scheduled = True
            return timer

    @cython.locals(timer=TimerHandle)
    def _timer_handle_cancelled(self, handle: Any) -> None:
        """asyncio's ``TimerHandle.cancel()`` reports a cancel here.

        The loop lets go of a cancelled timer at once (see ``TimerHandle.cancel``).
        Compiled, it leaves the heap.  Interpreted, it leaves the deadline table,
        and its deadline stays in the heap with no timer behind it, counted in
        ``_timer_cancelled_count``, until it surfaces or the heap is rebuilt
        (heapq cannot take an entry out of the middle).  A handle that is not in
        the tables (an ``asyncio.TimerHandle`` that user code built with this
        loop) leaves nothing to drop.
        """
        if cython.compiled:
            if type(handle) is TimerHandle:
                timer = handle
                if timer._scheduled:
                    heap_remove(self._scheduled, timer)
                    timer._scheduled = False
                    if self._tie_index is not None:
                        self._untie(timer)
            return
        timers = self._timers
        when = handle._when
        entry = timers.get(when)
        if entry is handle:
            del timers[when]
            handle._scheduled = False
            self._timer_cancelled_count += 1
            n = len(self._scheduled)
            if (
                n > _MIN_TIMERS_TO_COMPACT
                and self._timer_cancelled_count > n * _MAX_CANCELLED_FRACTION
            ):
                self._compact_timers()
        elif type(entry) is list:
            for i in range(len(entry)):
                if entry[i] is handle:
                    del entry[i]
                    handle._scheduled = False
                    if len(entry) == 1:
                        timers[when] = entry[0]
                    return

    def stop(self) -> None:
        """Stop after the callbacks of the current iteration have run."""
        self._stopping = True

    def is_closed(self) -> bool:
        return self._closed

    def is_running(self) -> bool:
        return self._thread_id is not None

    def get_debug(self) -> bool:
        # Here and not in DebugMixin: asyncio's C Future and Task call it as each one is
        # made, and on 3.14+, where they are the default, a Python method there cost a
        # frame per task (2% of the async_tree row's instructions).
        return self._debug

    # -- readiness callbacks -------------------------------------------------

    def _set_io_handle(self, fd, handle, table, bit, fileobj):
        """Install ``handle`` for ``fd`` (given as ``fileobj``) in ``table``."""
        old_mask = (_READABLE if fd in self._readers else 0) | (
            _WRITABLE if fd in self._writers else 0
        )
        # The backend first: if it refuses a new fd (a regular file, a
        # closed fd), the tables stay as they were.
        if old_mask == 0:
            self._io.register(fd, bit)
            self._fileobjs[fd] = fileobj
        elif not old_mask & bit:
            try:
                self._io.modify(fd, old_mask | bit)
            except BaseException:
                # The fd was closed (or reused) under its registration: it
                # is forgotten whole, handles uncancelled, as asyncio's
                # selector drops a key whose modify failed.
                self._forget_fd(fd)
                raise
        previous = table.get(fd)
        table[fd] = handle
        if previous is not None:
            previous.cancel()

    def _clear_io_handle(self, fd, table, bit):
        """Remove ``fd`` from ``table``; True if something was registered."""
        handle = table.pop(fd, None)
        if handle is None:
            return False
        other = self._writers if bit == _READABLE else self._readers
        if fd in other:
            try:
                self._io.modify(fd, _WRITABLE if bit == _READABLE else _READABLE)
            except BaseException:
                self._forget_fd(fd)
                raise
        else:
            self._io.unregister(fd)
            self._fileobjs.pop(fd, None)
        handle.cancel()
        return True

    def _add_internal_reader(self, fd, drain):
        """Call ``drain()`` during dispatch whenever ``fd`` is readable.

        For fds a part of the loop reads itself (the signal pipe).  They are
        kept out of the reader table, so ``add_reader``/``remove_reader``
        cannot replace or remove them, and ``drain()`` runs while the ready
        fds are collected: what it queues on ``_ready`` runs in the same
        iteration, not the next one.
        """
        self._io.register(fd, _READABLE)
        self._internal_readers[fd] = drain

    def _remove_internal_reader(self, fd):
        """Stop draining ``fd`` (which the caller then closes)."""
        if self._internal_readers.pop(fd, None) is not None:
            self._io.unregister(fd)

    def _forget_fd(self, fd):
        """Drop every trace of ``fd`` after the backend refused a change."""
        self._readers.pop(fd, None)
        self._writers.pop(fd, None)
        self._fileobjs.pop(fd, None)
        self._io.unregister(fd)

    # -- one iteration ---------------------------------------------------------

    def _run_once(self) -> None:
        """One iteration (steps 1-5 above)."""
        self._run_iterations(True)

    def _run_iterations(self, once):
        """Iterate until ``stop()`` (or once): run_forever's loop.

        The steps of the module docstring, each a function below the class;
        what they share is a ``_Run``.  Compiled, the steps are inline C
        functions and the ``_Run`` fields C fields, so this folds back into
        one function: the figures that chose each step's shape are in
        docs/design.md ("The iteration").  Interpreted, each step costs a
        call; the ones that most iterations skip are tested here first.
        """
        ready = self._ready
        readers = self._readers
        writers = self._writers
        internal_readers = self._internal_readers
        # The heap is replaced only by compaction (_compact_timers keeps the
        # list) and by set_clock, which refuses a running loop: read once.
        scheduled = self._scheduled
        run = _start_run(self, once)
        batch = None
        try:
            while True:
                # 1. Cancelled timers' deadlines on top of the heap, interpreted
                # only (see _timer_handle_cancelled): left there, the poll would
                # wake for them, and virtual time would move to them.
                if (
                    scheduled
                    and not cython.compiled
                    and self._timer_cancelled_count
                    and scheduled[0] not in self._timers
                ):
                    self._drop_cancelled_deadlines_at_top()
                # 2. Poll: until the earliest timer or an event when nothing is
                # ready; else at once, if an fd besides the waker is watched.
                if not (ready or self._stopping):
                    events = _wait_for_events(self, run)
                elif readers or writers or internal_readers:
                    events = _poll_without_waiting(self, run)
                else:
                    events = None
                # Steps 3 to 5 at once for one readable fd and nothing else to
                # do; otherwise one by one.
                if not (events and _ran_lone_reader(self, run, events)):
                    # 3. The events' I/O callbacks, in a batch or the queue.
                    batch = _take_io_callbacks(self, run, events) if events else None
                    # 4. Due timers to the queue.
                    if scheduled:
                        if cython.compiled:
                            _queue_due_timers_compiled(self, run, scheduled)
                        else:
                            _queue_due_timers_interpreted(self, run, scheduled)
                    # 5. Run what was ready when this step began.
                    _run_ready_callbacks(self, run, ready, batch)
                # The counts go to the loop's totals every FLUSH_EVERY iterations.
                run.countdown -= 1
                if (not run.countdown or self._stopping) and _run_ends(self, run):
                    return
        finally:
            if not once:
                # The run's last stretch ends here: a stall in its last
                # callbacks is seen now or never, since the next run starts
                # a stretch of its own.  One read a run, not an iteration.
                _end_stretch(self, run, _read_clock(run), 0, run.handle)
            # A traceback that passed through this frame keeps its locals
            # alive after the return: drop the last callback's handle.
            run.handle = None
            batch = None
            # Every way out (stop, run_once, an exception) keeps the counts.
            _publish_counts(run, run.limit - run.countdown)

    def _run_ready(self, ntodo, ready):
        """Step 5, compiled: run the first ``ntodo`` entries of the ready queue.

        What the interpreted run loop does inline (a call per callback would
        cost it more than the work), with the entries' fields read as C
        fields, a plain entry told by its type (a compiled handle's
        ``__class__`` is its asyncio view), and contexts entered through the
        C API instead of a ``Context.run`` method call.  ``ready`` is the
        run's ``_ready`` (the queue is swapped only between runs), read once
        per run; entries leave it through deque's C popleft (readyqueue.pxd).
        Returns the last entry run, which the run loop keeps as its ``handle``
        (a slow stretch of one callback is that one's).
        """
        entry = None
        while ntodo:
            ntodo -= 1
            entry = queue_popleft(ready)
            try:
                if type(entry) is tuple:
                    callback, arg, context = entry
                    if PyContext_CheckExact(context):
                        PyContext_Enter(context)
                        try:
                            callback(arg)
                        finally:
                            PyContext_Exit(context)
                    else:
                        context.run(callback, arg)
                elif isinstance(entry, Handle):
                    handle = entry
                    if not handle._cancelled:
                        _run_live_handle(handle)
                elif entry._cancelled:
                    pass
                elif entry._args:
                    entry._context.run(entry._callback, *entry._args)
                else:
                    entry._context.run(entry._callback)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                _as_handle(self, entry)._report(exc)
        return entry

    def _run_ready_timed(self, ntodo, ready, timed):
        """Step 5 in a metrics timing window (or ``"exact"`` mode): run the
        first ``ntodo`` entries of the ready queue, timing each, and record a
        slow one.

        Before a task's step, ``suspension_of`` takes where the task stands,
        so that a slow step is named with the lines it ran between.  Nothing
        else per callback: no Handle for a plain entry, one clock read (in C,
        compiled) after each, and lines looked up for a slow step only.
        ``timed`` (``snakeloop.observing.TimedSteps.fields()``, a tuple:
        unpacking it costs an iteration less than reading attributes) holds:

        - ``task_step`` and ``task_wakeup``, the functions of snakeloop's
          plain step and wakeup entries (told here without a call);
        - ``task_of(entry)``, the task any other entry steps, or None;
        - ``record(entry, duration, task, start)``, for a slow callback;
        - ``library_files`` and ``judge_file``, for ``suspension_of``;
        - ``until``, the time at which the window closes, and
          ``window_over()``, called at the first clock read at or past it.

        The clock is the loop's (virtual under a VirtualClock), read in C
        when it is the real one.
        """
        (
            task_step,
            task_wakeup,
            task_of,
            record,
            library_files,
            judge,
            until,
            window_over,
        ) = timed
        slow = self.slow_callback_duration
        # The loop's own clock, even while something replaced ``time``: these
        # are durations (metrics), not deadlines.
        now = self._clock.monotonic
        c_clock = cython.compiled and C_MONOTONIC and now is _monotonic
        t = monotonic_seconds() if c_clock else now()
        while ntodo:
            ntodo -= 1
            entry = ready[0]
            # snakeloop's steps and wakeups, and callbacks that are plain
            # functions (no task's step), are told here; others by a call.
            if type(entry) is tuple:
                callback = entry[0]
                if callback is task_step:
                    task = entry[1]
                elif type(callback) is _MethodType and callback.__func__ is task_wakeup:
                    task = callback.__self__
                else:
                    task = task_of(entry)
            elif isinstance(entry, Handle):
                handle = entry
                callback = handle._callback
                if callback is task_step:
                    task = handle._args[0] if handle._args else None
                elif type(callback) is _FunctionType:
                    task = None
                else:
                    task = task_of(entry)
            else:
                task = task_of(entry)
            start = None if task is None else suspension_of(task, library_files, judge, True)
            if cython.compiled:
                self._run_ready(1, ready)
            else:
                # A plain entry runs as it is; a Handle is built for it only
                # to report an error.
                ready.popleft()
                try:
                    if entry.__class__ is tuple:
                        entry[2].run(entry[0], entry[1])
                    elif not entry._cancelled:
                        entry._context.run(entry._callback, *entry._args)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    _as_handle(self, entry)._report(exc)
            t0 = t
            t = monotonic_seconds() if c_clock else now()
            if t - t0 >= slow:
                record(entry, t - t0, task, start)
        # A traceback that passes through this frame keeps its locals alive.
        entry = task = start = callback = handle = None
        if t >= until:
            window_over()
        return 0

    def _queue_due_timers(self, end_time):
        """Step 4, compiled: queue the timers due before ``end_time``.

        The earliest is known to be due.  As in the interpreted loop, a
        cancelled timer that comes due leaves the cancelled count instead.
        """
        scheduled = self._scheduled
        ready = self._ready
        while True:
            timer = heappop(scheduled)
            timer._scheduled = False
            if self._tie_index is not None:
                self._untie(timer)
            if timer._cancelled:
                self._timer_cancelled_count -= 1
            else:
                queue_append(ready, timer)
            if not scheduled:
                return
            if _first_deadline(scheduled) >= end_time:
                return

    def _slow_stretch(self, duration, count, timers, last):
        """The ``count`` callbacks between two clock reads, ``timers`` of them
        timers, ran ``duration`` seconds; ``last`` is the entry (a plain tuple
        or a Handle) of the last of them, or None where the run loop did not
        keep it."""
        if self._time_is_replaced():  # type: ignore[attr-defined]  # Loop's (contract)
            # Read from what replaced ``time``: a test that moves it has not
            # made a callback slow.
            return
        self._counters.slow_iterations += 1
        on_slow = self._on_slow_stretch
        if on_slow is not None:
            on_slow(duration, count, timers, last if count else None)

    def _drop_cancelled_deadlines_at_top(self):
        """Step 1, interpreted: pop cancelled timers' deadlines while they are the earliest."""
        scheduled = self._scheduled
        timers = self._timers
        while scheduled and scheduled[0] not in timers:
            heappop(scheduled)
            self._timer_cancelled_count -= 1

    def _compact_timers(self):
        """Interpreted: rebuild the heap from the deadlines of live timers.

        In place: the run loop holds the heap, and a cancel() in a callback
        comes here.  Each deadline of the table once: a deadline can be in the
        heap twice, a cancelled timer's and a later one's.
        """
        kept = list(self._timers)
        heapq.heapify(kept)
        self._scheduled[:] = kept
        self._timer_cancelled_count = 0

    # -- the timer table, for the rest of the loop -------------------------------
    # The two builds keep timers differently (see timerheap.earlier); these are the
    # only ways in for code outside the run loop.

    @cython.locals(timer=TimerHandle)
    def _pending_timers(self) -> list[tuple[Any, list[Any]]]:
        """``(deadline, timers)`` for each deadline in the heap, earliest first.

        A deadline's timers (cancelled ones too, until they leave the heap)
        are listed in the order they will fire.
        """
        if cython.compiled:
            ordered = sorted(self._scheduled, key=_firing_order)
            groups: list[tuple[Any, list[Any]]] = []
            for timer in ordered:
                if groups and groups[-1][1][0]._deadline == timer._deadline:
                    groups[-1][1].append(timer)
                else:
                    groups.append((timer._when, [timer]))
            return groups
        return [
            (when, list(entry) if type(entry) is list else [entry])
            for when, entry in sorted(self._timers.items(), key=_deadline_of_item)
        ]

    def _timer_count(self) -> int:
        """How many timers are pending and not cancelled."""
        if cython.compiled:
            return len(self._scheduled) - self._timer_cancelled_count
        count = 0
        for entry in list(self._timers.values()):
            for handle in entry if type(entry) is list else (entry,):
                count += not handle._cancelled
        return count

    def _next_timer_when(self) -> Any:
        """The deadline of the earliest timer in the heap (perhaps cancelled), or None."""
        scheduled = self._scheduled
        if not scheduled:
            return None
        if cython.compiled:
            timer = scheduled[0]
            return timer._when
        return scheduled[0]

    @cython.locals(timer=TimerHandle)
    def _clear_timers(self) -> None:
        """Forget every timer (``close()``)."""
        if cython.compiled:
            # A cancel() after close() finds its timer out of the heap.
            for timer in self._scheduled:
                timer._scheduled = False
        self._scheduled.clear()
        self._timers.clear()
        self._timer_cancelled_count = 0
        if self._tie_index is not None:
            self._tie_index.clear()

    @cython.locals(timer=TimerHandle)
    def _rebase_timers(self, delta: float) -> None:
        """Move every deadline by ``delta`` (``set_clock``), keeping the firing order.

        Deadlines that the sum makes equal merge, earlier one first.
        """
        if not delta or not self._scheduled:
            return
        if cython.compiled:
            ordered = sorted(self._scheduled, key=_firing_order)
            for timer in ordered:
                timer._when = timer._when + delta
                timer._deadline = deadline_of(timer._when)
                timer._seq = self._timer_seq
                self._timer_seq += 1
            # Still sorted, so still a heap.
            index_heap(ordered)
            self._scheduled = ordered
            if self._tie_index is not None:
                self._tie_index = {}
                for _, group in self._pending_timers():
                    self._tie_index[group[0]._deadline] = group
            return
        timers: dict[Any, Any] = {}
        for when, entry in sorted(self._timers.items(), key=_deadline_of_item):
            handles = entry if type(entry) is list else [entry]
            for handle in handles:
                handle._when = when + delta
            merged = timers.get(when + delta)
            if merged is None:
                timers[when + delta] = entry
            else:
                previous = merged if type(merged) is list else [merged]
                timers[when + delta] = previous + handles
        self._timers = timers
        self._scheduled = sorted(timers)
        self._timer_cancelled_count = 0

    # -- timer_ties: a seeded loop's order of timers of one deadline ---------------

    def _place_tied_timer(self, tied: list[Any]) -> None:
        """Move the last of ``tied`` (one deadline's timers) to the place ``_timer_ties`` chooses.

        The choice is among the timers that can still run: ``count`` is
        how many of them there are with the new one, and the place is the
        new one's rank among them.
        """
        new = tied.pop()
        live = [i for i, timer in enumerate(tied) if not timer._cancelled]
        count = len(live) + 1
        if count > 1:
            place = self._timer_ties(count)
            if place < len(live):
                tied.insert(live[place], new)
                return
        tied.append(new)

    def _order_tie(self, timer: Any) -> None:
        """Compiled: set ``timer._seq`` so it fires where ``_timer_ties`` places it.

        ``_tie_index`` keeps each deadline's timers in firing order (those
        still in the heap; the others are dropped as they are met).  The
        whole group is numbered again in its new order: renumbering timers
        of one deadline in the order they already had leaves the heap a heap.
        """
        index = self._tie_index
        if index is None:
            index = self._tie_index = {}
        deadline = timer._deadline
        group = index.get(deadline)
        if group is not None:
            group = [other for other in group if other._scheduled]
        if group:
            group.append(timer)
            self._place_tied_timer(group)
        else:
            group = [timer]
        for member in group:
            member._seq = self._timer_seq
            self._timer_seq += 1
        index[deadline] = group
        if len(index) > 2 * len(self._scheduled) + 64:
            self._tie_index = {key: tied for key, tied in index.items() if _any_scheduled(tied)}

    def _untie(self, timer: Any) -> None:
        """Compiled: ``timer`` left the heap (fired or cancelled); its tie group forgets it.

        Otherwise the index would keep a timer that ran, and through it its
        callback and arguments, until the index is next pruned: a protocol
        whose timeout fired would outlive its connection.
        """
        index = self._tie_index
        deadline = timer._deadline
        group = index.get(deadline)
        if group is None:
            return
        kept = [other for other in group if other is not timer]
        if kept:
            index[deadline] = kept
        else:
            del index[deadline]


# -- the steps of an iteration -------------------------------------------------
#
# CoreLoop._run_iterations calls these in order.  Compiled, they are inline C
# functions (runloop.pxd) over a _Run, whose fields are C fields: the C
# compiler folds them back into the run loop.  Interpreted, each is a call.


class _Run:
    """What the steps of one run of the loop share: a call of ``_run_iterations``.

    - The metrics (``_core.counters``), counted here and added to the loop's
      ``LoopCounters`` in one call (``_publish_counts``): every
      ``FLUSH_EVERY`` iterations (``countdown``), before a poll that may block
      when the last flush is ``FLUSH_AFTER`` seconds old, and on the way out.
    - The stretch since the last clock read: a stretch (idle time left out)
      longer than ``slow_callback_duration`` goes to ``_slow_stretch``.  The
      callbacks of a stretch are counted from the ``*_mark`` fields, the
      counts at that read; ``handle`` is the entry of the last callback run,
      or None where the loop did not keep it.
    - Poll skipping (``skip_poll``, ``may_skip``): see step 3 above.
    - The coarse clock's skips, compiled (``coarse_*``, ``skip_*``; see
      ``_COARSE_STEP``).
    """

    __slots__ = (
        "once",
        "countdown",
        "limit",
        "polls",
        "ran",
        "ran_io",
        "lone",
        "nevents",
        "backlog",
        "fired",
        "ready_peak",
        "idle",
        "lags",
        "counters",
        "timed",
        "now",
        "c_clock",
        "last_read",
        "flushed_at",
        "slow",
        "flush_gap",
        "ran_mark",
        "io_mark",
        "lone_mark",
        "timer_mark",
        "handle",
        "may_skip",
        "skip_poll",
        "popleft",
        "coarse_ok",
        "coarse_margin",
        "coarse_skip",
        "skip_run",
        "coarse_floor",
        "skip_seq",
    )


def _start_run(loop, once):
    """A new run of ``loop``: one iteration if ``once``, else until ``stop()``."""
    run = _Run.__new__(_Run)
    run.once = once
    run.countdown = run.limit = 1 if once else _FLUSH_EVERY
    run.polls = run.ran = run.ran_io = run.lone = run.nevents = run.backlog = 0
    run.fired = run.ready_peak = 0
    run.idle = 0.0
    run.lags = []
    run.counters = loop._counters
    # Whether a poll with no timer is timed (metrics=False: not).
    run.timed = loop._counters.timed
    now = loop._now
    run.now = now
    # Compiled, the real clock is read in C (clock_gettime, as time.monotonic
    # does it on Linux, to the same float): a Python call and a float object
    # per read were most of what a pending timer costs an iteration.
    run.c_clock = _C_CLOCK and now is _monotonic
    run.last_read = run.flushed_at = _read_clock(run)
    run.ran_mark = run.io_mark = run.lone_mark = run.timer_mark = 0
    run.handle = None
    # A run's first iteration polls; then, unless seeded, one poll in two may
    # be skipped while callbacks wait.
    run.may_skip = loop._skip_polls_after_polls
    run.skip_poll = False
    run.popleft = loop._ready.popleft
    run.coarse_margin = _COARSE_TICKS_OF_MARGIN * _COARSE_STEP
    run.coarse_floor = 0.0
    run.skip_seq = 0
    _read_threshold(loop, run)
    return run


def _read_threshold(loop, run):
    """Take ``slow_callback_duration`` again, and what depends on it."""
    slow = loop.slow_callback_duration
    run.slow = slow
    run.flush_gap = slow if slow < _FLUSH_AFTER else _FLUSH_AFTER
    run.coarse_ok = run.c_clock and 0.0 < _COARSE_TICKS_PER_SLOW * _COARSE_STEP <= slow
    # The skips were allowed by the threshold just replaced.
    run.coarse_skip = 0
    run.skip_run = _COARSE_SKIPS


def _read_clock(run):
    """The loop's clock: in C when it is the real one, compiled."""
    if run.c_clock:
        return monotonic_seconds()
    # Read as a field, then called: ``run.now()`` would look the name up as a
    # method first, which costs the interpreted build a type lookup per read.
    now = run.now
    return now()


def _mark(run, t, not_run):
    """A clock read at ``t``: a new stretch starts, ``not_run`` callbacks of
    this iteration still to come."""
    run.last_read = t
    run.ran_mark = run.ran - not_run
    run.io_mark = run.ran_io
    run.lone_mark = run.lone
    run.timer_mark = run.fired


def _end_stretch(loop, run, t, not_run, last):
    """The stretch since the last clock read ends at ``t``: a slow one is
    reported, with ``last`` as its last callback's entry."""
    if t - run.last_read > run.slow:
        loop._slow_stretch(
            t - run.last_read,
            run.ran - not_run - run.ran_mark + run.ran_io - run.io_mark + run.lone - run.lone_mark,
            run.fired - run.timer_mark,
            last,
        )
    _mark(run, t, not_run)


def _publish_counts(run, iterations):
    """Add the counts of the last ``iterations`` to the loop's totals."""
    run.counters.add(
        iterations,
        run.polls,
        run.ran,
        run.ready_peak,
        run.ran_io,
        run.lone,
        run.nevents,
        run.backlog,
        run.idle,
        run.fired,
        run.lags,
    )
    # The marks carry over: a stretch's callbacks are counted across a flush.
    run.ran_mark -= run.ran
    run.io_mark -= run.ran_io
    run.lone_mark -= run.lone
    run.timer_mark -= run.fired
    run.polls = run.ran = run.ran_io = run.lone = run.nevents = run.backlog = 0
    run.fired = run.ready_peak = 0
    run.idle = 0.0
    run.lags = []


def _run_ends(loop, run):
    """After an iteration that ends the count to a flush, or with ``stop()``
    called: whether the run ends (``stop()``, or once)."""
    if run.countdown or run.once or loop._stopping:
        return True
    _publish_counts(run, run.limit)
    run.countdown = run.limit = _FLUSH_EVERY
    return False


def _poll_without_waiting(loop, run):
    """Step 2 while callbacks wait: the events of a poll that does not block,
    or None where the poll is skipped (step 3 above)."""
    if run.skip_poll:
        run.skip_poll = False
        return None
    events = loop._poll(0)
    run.polls += 1
    run.skip_poll = run.may_skip
    if events:
        run.backlog += len(events)
    return events


def _wait_for_events(loop, run):
    """Step 2 with nothing ready: poll until the earliest timer is due, or
    an event.  The wait is timed, and the stretch before it ends here.

    (The clock reads and the marks are written out: a call for each cost the
    interpreted build about 1% more instructions per echo round trip.)"""
    run.skip_poll = run.may_skip
    run.polls += 1
    scheduled = loop._scheduled
    timed = run.timed
    # metrics=False: a wait without a timer is not timed.
    if not (timed or scheduled):
        t = run.last_read
    elif run.c_clock:
        t = monotonic_seconds()
    else:
        now = run.now  # (see _read_clock)
        t = now()
    if t - run.flushed_at > run.flush_gap:
        # A stretch longer than slow_callback_duration is always longer than
        # flush_gap (at most that), so both are checked behind one test.
        if t - run.last_read > run.slow:
            # Ended: a poll that does not wait leaves the stretch to step 4,
            # which would count it again.
            _end_stretch(loop, run, t, 0, run.handle)
        # The totals are published here at most every FLUSH_AFTER seconds:
        # every time would cost a server answering one request per iteration
        # several percent.
        run.flushed_at = t
        _publish_counts(run, run.limit - run.countdown)
        run.limit = run.countdown
        _read_threshold(loop, run)
    # The last callback's handle goes before a wait, not at the end of every
    # iteration: until the next step 5 (or lone reader) overwrites it, only
    # the loop's code runs.
    run.handle = None
    if scheduled:
        timeout = (_first_deadline(scheduled) if cython.compiled else scheduled[0]) - t
        if timeout <= 0:
            return loop._poll(0)
        # The skips' floor was set from a reading that the wait leaves behind.
        run.coarse_skip = 0
        run.skip_run = _COARSE_SKIPS
        run.counters.wait_started = t
        events = loop._poll(timeout if timeout < MAXIMUM_POLL_TIMEOUT else MAXIMUM_POLL_TIMEOUT)
    else:
        if timed:
            run.counters.wait_started = t
        if loop._readers or loop._writers or loop._block_forever is None:
            events = loop._poll(None)
        else:
            # Nothing watched and no timer: the loop's deadlock check.
            events = loop._block_forever()
        if not timed:
            return events
    # A new stretch starts after the wait (see _mark).
    if run.c_clock:
        waited = monotonic_seconds()
    else:
        now = run.now
        waited = now()
    run.last_read = waited
    run.ran_mark = run.ran
    run.io_mark = run.ran_io
    run.lone_mark = run.lone
    run.timer_mark = run.fired
    run.counters.wait_ended = waited
    run.idle += waited - t
    return events


def _ran_lone_reader(loop, run, events):
    """Steps 3-5 when the poll found one readable fd, nothing else is ready and
    no timer is due: run that reader's callback now, and say whether it ran.

    The iteration is then that one callback, and going through the deque
    costs about a tenth of an iteration.  What it schedules waits for the
    next iteration, as it would behind it in the deque.  (One loop for this
    handle and the batch cost 10% more instructions per round trip of a
    one-connection echo, callgrind, 3.11: this holds the tcp-1k-1 and
    streams-1k-1 rows, the batch tcp-1k-50 and http-50.)
    """
    if len(events) != 1 or loop._ready or loop._observe:
        return False
    scheduled = loop._scheduled
    if (
        scheduled
        and (_first_deadline(scheduled) if cython.compiled else scheduled[0])
        < _read_clock(run) + loop._clock_resolution
    ):
        return False
    fd, mask = events[0]
    if mask != _READABLE:
        return False
    io_handle = loop._readers.get(fd)
    if io_handle is None or io_handle._cancelled:
        return False
    # One event, one I/O callback run; its entry is the stretch's last.
    run.lone += 1
    run.handle = io_handle
    try:
        if cython.compiled:
            _run_live_handle(io_handle)
        elif io_handle._args:
            io_handle._context.run(io_handle._callback, *io_handle._args)
        else:
            io_handle._context.run(io_handle._callback)
    except (SystemExit, KeyboardInterrupt):
        io_handle = None
        raise
    except BaseException as exc:
        io_handle._report(exc)
        # The error's traceback holds this frame, and the frame its locals.
        io_handle = None
    return True


def _take_io_callbacks(loop, run, events):
    """Step 3: queue the I/O callbacks of ``events``.

    With nothing queued before the poll (a server's usual iteration), they
    go into a list, returned, which step 5 runs before the deque: a list
    costs less per callback than the deque.  Each handle is still looked up
    now, before any of them runs, so a callback that removes or replaces
    another fd's reader cancels the handle already in the batch, as in
    asyncio.  Otherwise they join the deque, and this returns None.
    """
    run.nevents += len(events)
    ready = loop._ready
    if ready or loop._observe:
        batch = None
        add = ready.append
    else:
        batch = []
        add = batch.append
    readers = loop._readers
    for fd, mask in events:
        if mask == _READABLE:
            # The common case, a readable fd with a live reader, skips the
            # writer table.
            io_handle = readers.get(fd)
            if io_handle is not None and not io_handle._cancelled:
                add(io_handle)
                continue
        # Any bit but "writable" wakes the reader and any bit but "readable"
        # the writer, so errors and hang-ups reach both.  The waker and the
        # internal fds are not in the reader table: they cost lookups only on
        # a miss.
        if mask & _NOT_WRITABLE:
            io_handle = readers.get(fd)
            if io_handle is not None:
                if io_handle._cancelled:
                    loop._clear_io_handle(fd, readers, _READABLE)
                else:
                    add(io_handle)
            elif fd == loop._waker_fd:
                loop._waker.drain()
                continue
            elif fd in loop._internal_readers:
                # Drained now (the signal pipe), so what it queues joins this
                # iteration's batch.
                loop._internal_readers[fd]()
                continue
        if mask & _NOT_READABLE:
            io_handle = loop._writers.get(fd)
            if io_handle is not None:
                if io_handle._cancelled:
                    loop._clear_io_handle(fd, loop._writers, _WRITABLE)
                else:
                    add(io_handle)
    return batch


def _queue_due_timers_compiled(loop, run, scheduled):
    """Step 4, compiled: queue the due timers, reading the coarse clock first.

    While not even the latest time the coarse reading allows makes the
    earliest timer due (see ``_COARSE_STEP``), the precise clock is not read;
    nor any clock, for a few iterations after a quick one, while every timer
    is far (``_COARSE_SKIPS``).
    """
    if run.coarse_skip:
        if loop._timer_seq == run.skip_seq:
            # No timer was set since the earliest was found past the floor:
            # neither a clock nor the heap is read.  Every timer set moves
            # _timer_seq, and a cancel or a pop never brings the earliest
            # deadline nearer.
            run.coarse_skip -= 1
            return 0
        if run.coarse_ok and _first_deadline(scheduled) >= run.coarse_floor:
            # A timer set during the skips, past the floor.
            run.coarse_skip -= 1
            run.skip_seq = loop._timer_seq
            return 0
    elif run.coarse_ok:
        coarse = coarse_seconds()
        deadline = _first_deadline(scheduled)
        if deadline >= coarse + run.coarse_margin + loop._clock_resolution:
            if coarse <= run.last_read:
                # Less than a tick since the last read.  Not below the
                # reading: timer_delay's seam sets a resolution of -inf for
                # one iteration only.
                run.coarse_floor = (
                    coarse
                    + run.coarse_margin
                    + max(loop._clock_resolution, 0.0)
                    + _COARSE_SKIP_HEADROOM
                )
                if deadline >= run.coarse_floor:
                    run.coarse_skip = run.skip_run
                    run.skip_seq = loop._timer_seq
                    if run.skip_run < _COARSE_SKIPS_MAX:
                        run.skip_run += run.skip_run + 1
                run.last_read = coarse
            else:
                _end_stretch(loop, run, coarse, 0, run.handle)
                run.skip_run = _COARSE_SKIPS
            return 0
    # The skips end at the first timer that may be due: their floor was set
    # from a reading now past.
    run.coarse_skip = 0
    run.skip_run = _COARSE_SKIPS
    t = _read_clock(run)
    _end_stretch(loop, run, t, 0, run.handle)
    # Read each time: timer_delay's seam changes it while the loop runs.
    end_time = t + loop._clock_resolution
    deadline = _first_deadline(scheduled)
    if deadline < end_time:
        # How late the iteration's earliest due timer runs.
        run.lags.append(t - deadline)
        ready = loop._ready
        run.fired -= len(ready)
        loop._queue_due_timers(end_time)
        run.fired += len(ready)
    return 0


def _queue_due_timers_interpreted(loop, run, scheduled):
    """Step 4, interpreted: queue the timers due within a clock resolution.

    The heap holds deadlines, and ``_timers`` the handle or handles of each.
    """
    now = run.now  # (see _read_clock)
    t = now()
    _end_stretch(loop, run, t, 0, run.handle)
    end_time = t + loop._clock_resolution
    when = scheduled[0]
    if when >= end_time:
        return
    run.lags.append(t - when)
    timers = loop._timers
    ready = loop._ready
    append = ready.append
    run.fired -= len(ready)
    while True:
        heappop(scheduled)
        entry = timers.pop(when, None)
        if entry is None:
            # A cancelled timer's deadline (step 1 drops only those on top):
            # it leaves the count.
            loop._timer_cancelled_count -= 1
        elif entry.__class__ is list:
            for timer in entry:
                timer._scheduled = False
                append(timer)
        else:
            entry._scheduled = False
            append(entry)
        if not scheduled:
            break
        when = scheduled[0]
        if when >= end_time:
            break
    run.fired += len(ready)


def _run_ready_callbacks(loop, run, ready, batch):
    """Step 5: run what was ready when this step began, ``batch`` first.

    The deque's callbacks are then this iteration's timers and signal
    handlers only: what the batch schedules lands behind them, for the next
    iteration.  Callbacks run through the observer (``snakeloop.observing``)
    in debug mode, with instruments or in a metrics timing window.
    """
    ntodo = len(ready)
    run.ran += ntodo
    if ntodo > run.ready_peak:
        run.ready_peak = ntodo
    if loop._observe:
        run.handle = None
        if loop._timed is not None:
            loop._run_ready_timed(ntodo, ready, loop._timed)
        else:
            loop._observe.run_ready(ntodo)
        return 0
    if batch:
        _run_io_batch(run, ready, batch)
    if not ntodo:
        return 0
    # The last iteration's entry goes before this one's first runs.
    run.handle = None
    if cython.compiled:
        # CoreLoop._run_ready runs the deque in C.  A long queue runs in
        # stretches of _STRETCH_CALLBACKS, with a read of the C clock (tens of
        # nanoseconds) after each: a slow stretch is then a few callbacks that
        # held the loop, not 10,000 quick ones whose sum passed
        # slow_callback_duration, and only the former opens a timing window
        # (snakeloop.metrics), where every callback is timed to find the slow
        # one.  The interpreted build reads its clock once per iteration: a
        # read there is a Python call.
        if run.c_clock:
            while ntodo > _STRETCH_CALLBACKS:
                loop._run_ready(_STRETCH_CALLBACKS, ready)
                ntodo -= _STRETCH_CALLBACKS
                # The ntodo left have not run yet.
                _end_stretch(loop, run, monotonic_seconds(), ntodo, None)
        run.handle = loop._run_ready(ntodo, ready)
        return 0
    # Interpreted, the deque's entries run here.  A countdown, not range():
    # most iterations run one or two callbacks, and building the range and
    # its iterator costs more than the decrements.  (Copying the deque into a
    # list and running it with ``for`` cost the chain row 18% more
    # instructions per callback.)  Handle._run, or its plain-entry twin, is
    # written out: a call per callback cost 4 to 6% more instructions on the
    # chain, chains100 and sleep0 rows.
    popleft = run.popleft
    while ntodo:
        ntodo -= 1
        handle = popleft()
        try:
            if handle.__class__ is tuple:
                # (callback, arg, context), read in place: locals would hold
                # them until the next wait.
                handle[2].run(handle[0], handle[1])
            elif handle._cancelled:
                pass
            elif handle._args:
                handle._context.run(handle._callback, *handle._args)
            else:
                # Without arguments (readers, writers, most call_soon calls)
                # the call skips building a new argument tuple.
                handle._context.run(handle._callback)
        except (SystemExit, KeyboardInterrupt):
            run.handle = handle
            handle = None
            raise
        except BaseException as exc:
            _as_handle(loop, handle)._report(exc)
    run.handle = handle
    # A reported error's traceback holds this frame, and the frame its locals.
    handle = None
    return 0


def _run_io_batch(run, ready, batch):
    """Step 5's I/O callbacks (step 3's batch), before the deque's."""
    run.ran_io += len(batch)
    run.handle = None
    for io_handle in batch:
        if io_handle._cancelled:
            continue
        try:
            if cython.compiled:
                _run_live_handle(io_handle)
            elif io_handle._args:
                io_handle._context.run(io_handle._callback, *io_handle._args)
            else:
                io_handle._context.run(io_handle._callback)
        except (SystemExit, KeyboardInterrupt):
            # The callbacks not run yet go back to the front of the deque,
            # where asyncio would still hold them when the loop runs again.
            ready.extendleft(reversed(batch[batch.index(io_handle) + 1 :]))
            io_handle = batch = None
            raise
        except BaseException as exc:
            io_handle._report(exc)
    run.handle = io_handle
    # A reported error's traceback holds this frame, and the frame its locals.
    io_handle = batch = None


class TimeAttribute:
    """``loop.time`` in the compiled build: a data descriptor whose read is C.

    asyncio's loop reads its clock through ``self.time()`` for every
    deadline (``call_later``, the poll timeout, which timers are due), so a
    test that patches ``loop.time`` or a subclass that overrides it moves
    the loop's whole timeline.  This loop reads ``_now`` instead, and in the
    compiled build the C clock while ``_now`` is ``time.monotonic``.  So
    setting or deleting ``time`` on a loop must reach the loop, which a data
    descriptor does: ``Loop._replace_time`` and ``_restore_time`` point
    ``_now`` at the replacement and back.  A read gives ``_time_bound``, the
    loop's own bound ``time`` or the replacement, kept ready so that the
    common case makes no method object.  (The pure build uses a property on
    the same slot: a Python ``__get__`` there costs more than the
    property's C one; see Loop.time.)
    """

    __slots__ = ("_function",)

    def __init__(self, function):
        self._function = function

    @cython.locals(loop=CoreLoop)
    def __get__(self, instance, owner):
        if instance is None:
            return self._function
        loop = instance
        return loop._time_bound

    def __set__(self, instance, value):
        instance._replace_time(value)

    def __delete__(self, instance):
        instance._restore_time()


def _any_scheduled(timers: list[Any]) -> bool:
    """Whether one of ``timers`` is still in the heap (a loop: no generator compiled)."""
    for timer in timers:  # noqa: SIM110
        if timer._scheduled:
            return True
    return False


def _deadline_of_item(item: tuple[Any, Any]) -> Any:
    """A sort key of the interpreted deadline table's items: the deadline alone."""
    return item[0]


def _firing_order(timer: Any) -> Any:
    """A sort key of compiled timers: the heap's order (see timerheap.earlier)."""
    return (timer._deadline, timer._when, timer._seq)


if not cython.compiled:
    skip_when_recording(
        CoreLoop.call_soon,
        CoreLoop.call_soon_threadsafe,
        CoreLoop.call_later,
        CoreLoop.call_at,
        CoreLoop._push_timer,
    )
