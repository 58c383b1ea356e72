"""What the parts of snakeloop may use on a loop: the internal contract.

Transports, futures, the loop's subsystems and helper functions talk to a
loop through asyncio's public methods and through the private members
listed in ``LoopContract``, and through nothing else.  The loop's tables
(readers, writers, transports, timers), its poll backend and its waker stay
behind these members, so any of them can change without touching a part.

``tests/test_architecture.py`` holds the rule: outside ``_core/`` and
``loop.py``, every ``loop._name`` and ``self._loop._name`` (and, in the
loop's mixin classes, every ``self._name`` their module does not define)
must be one of ``CONTRACT_NAMES``.  The type checker holds the signatures:
parts annotate their loop with ``LoopContract``, and the loop's mixin
classes derive from ``LoopMixinBase`` (``object`` at run time), so ``self``
is checked against both the contract and ``asyncio.AbstractEventLoop``.

Nothing here runs on the hot path: the module only describes.  It imports
nothing at run time but ``typing``, so any part can import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    import asyncio
    import collections
    from asyncio.exceptions import CancelledError
    from collections.abc import Callable
    from contextvars import Context
    from typing import TypeVarTuple, Unpack

    from _typeshed import FileDescriptorLike

    from .handles import Handle

    _Ts = TypeVarTuple("_Ts")

__all__ = ["CONTRACT_NAMES", "LoopContract", "LoopMixinBase", "OffloadedCall"]

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)


class OffloadedCall(Protocol[_T_co]):
    """What ``_call_blocking`` returns: a call running in the loop's worker thread."""

    async def finish(self) -> CancelledError | None:
        """Wait until the call is over; return a cancellation that came meanwhile."""
        ...

    def result(self) -> _T_co:
        """The call's return value; raises what the call raised."""
        ...

    def ran(self) -> bool:
        """False if the call was dropped (cancelled) before it started."""
        ...


class LoopContract(Protocol):
    """The loop as its parts see it.

    The public methods are asyncio's, listed for the type checker (every
    public method of ``asyncio.AbstractEventLoop`` may be used); the private
    members are the contract proper.
    """

    # -- asyncio's public API, the part the parts use ------------------------

    def time(self) -> float:
        """The loop's clock, in seconds."""
        ...

    def get_debug(self) -> bool:
        """Whether debug mode is on."""
        ...

    def is_closed(self) -> bool:
        """Whether ``close()`` has been called."""
        ...

    def is_running(self) -> bool:
        """Whether the loop is running."""
        ...

    def call_soon(
        self,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> asyncio.Handle:
        """Run ``callback(*args)`` on the next iteration, in FIFO order."""
        ...

    def call_soon_threadsafe(
        self,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> asyncio.Handle:
        """``call_soon`` from any thread; wakes a loop that is waiting in poll."""
        ...

    def call_later(
        self,
        delay: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        """Run ``callback(*args)`` after ``delay`` seconds."""
        ...

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        """Run ``callback(*args)`` at loop time ``when``."""
        ...

    def create_future(self) -> asyncio.Future[Any]:
        """A new future attached to this loop."""
        ...

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        """Hand an error nobody else can report to the loop's exception handler."""
        ...

    # -- the contract ----------------------------------------------------------

    @property
    def _debug(self) -> bool:
        """Debug mode, read without a call (parts never set it)."""
        ...

    def _check_closed(self) -> None:
        """Raise ``RuntimeError("Event loop is closed")`` if the loop is closed."""
        ...

    def _check_callback(self, callback: object, method: str) -> None:
        """Raise asyncio's ``TypeError`` for a coroutine or a non-callable given to ``method``."""
        ...

    def _add_reader(
        self,
        fd: FileDescriptorLike,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> Handle:
        """Watch ``fd`` for reading, replacing its reader; no transport check.

        The callback runs in ``context``; None: a copy of the current one.
        """
        ...

    def _remove_reader(self, fd: FileDescriptorLike) -> bool:
        """Stop watching ``fd`` for reading; True if it was watched."""
        ...

    def _add_writer(
        self,
        fd: FileDescriptorLike,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> Handle:
        """Watch ``fd`` for writing, replacing its writer; no transport check.

        The callback runs in ``context``; None: a copy of the current one.
        """
        ...

    def _remove_writer(self, fd: FileDescriptorLike) -> bool:
        """Stop watching ``fd`` for writing; True if it was watched."""
        ...

    def _remove_reader_handle(self, fd: int, handle: Handle) -> bool:
        """Stop watching ``fd`` for reading if ``handle`` still does; True if it did."""
        ...

    def _remove_writer_handle(self, fd: int, handle: Handle) -> bool:
        """Stop watching ``fd`` for writing if ``handle`` still does; True if it did."""
        ...

    def _get_reader(self, fd: int) -> Handle | None:
        """The handle watching ``fd`` for reading, or None."""
        ...

    def _get_writer(self, fd: int) -> Handle | None:
        """The handle watching ``fd`` for writing, or None."""
        ...

    def _ensure_fd_no_transport(self, fd: FileDescriptorLike) -> None:
        """Raise ``RuntimeError`` if an open transport owns ``fd``."""
        ...

    def _attach_transport(self, fd: int, transport: asyncio.BaseTransport) -> None:
        """Make ``transport`` the owner of ``fd`` (held weakly) until it detaches."""
        ...

    def _detach_transport(self, fd: int, transport: asyncio.BaseTransport) -> bool:
        """Drop ``transport`` as the owner of ``fd``; False if it was not the owner."""
        ...

    def _shared_recv_buffer(self) -> memoryview:
        """The loop's one 256 KiB receive buffer, for reads that copy out at once."""
        ...

    @property
    def _ready(self) -> collections.deque[Any]:
        """The ready queue; only entries of the shape ``_core`` defines go in."""
        ...

    @property
    def _accepts_plain_callbacks(self) -> bool:
        """Whether the loop's class lets ``_ready`` take ``_core``'s handle-free entries."""
        ...

    @property
    def _plain_ready(self) -> collections.deque[Any] | None:
        """``_ready`` while a handle-free entry may go in it now, else None (then: call_soon).

        Never a subclass of deque: futures append to it with deque's own append.
        """
        ...

    def _refresh_plain_ready(self) -> None:
        """Recompute ``_plain_ready`` after debug mode, ``_closed`` or ``_ready`` changed."""
        ...

    @property
    def _current_handle(self) -> asyncio.Handle | None:
        """The handle whose callback is running now, for error reports."""
        ...

    def _call_blocking(self, func: Callable[[Unpack[_Ts]], _T], *args: *_Ts) -> OffloadedCall[_T]:
        """Start ``func(*args)`` in the loop's own worker thread (not the executor)."""
        ...

    def _add_internal_reader(self, fd: int, drain: Callable[[], None]) -> None:
        """Have the core call ``drain()`` during dispatch whenever ``fd`` is readable."""
        ...

    def _remove_internal_reader(self, fd: int) -> None:
        """Stop draining ``fd``."""
        ...

    def _disown_after_fork(self) -> None:
        """In a forked child: let go of everything that belongs to the parent's loop."""
        ...

    # -- what can still wake the loop (virtual time, deadlock reports) -------
    # Read only while the loop is idle or from a report: never on the hot path.

    def _watched_fds(self) -> list[tuple[int, Any, bool, bool]]:
        """``(fd, fileobj, reading, writing)`` for each fd given to add_reader/add_writer
        (transports' included); not the waker, not internal fds."""
        ...

    def _transport_fds(self) -> list[int]:
        """The fds of the loop's open transports, watched or not (reading paused)."""
        ...

    def _unfinished_work(self) -> list[Any]:
        """``pending.Pending`` entries for the loop's parts' unfinished jobs: executor
        and ``to_thread`` jobs, the worker thread's calls, children and spawns."""
        ...

    def _worker_threads(self) -> set[Any]:
        """Threads of the executors this loop used and of its own worker: idle when
        ``_unfinished_work()`` lists nothing of theirs."""
        ...

    def _older_threads(self) -> set[Any]:
        """In virtual time and test mode, the threads running before the loop began its census:
        left over from earlier tests or the test runner, they cannot know this loop."""
        ...

    def _has_signal_handlers(self) -> bool:
        """Whether ``add_signal_handler`` has a handler installed."""
        ...

    _virtual_time: Any
    """The virtual-time driver (``virtualtime.VirtualTime``), or None."""

    _watch_outside_work: bool
    """Whether the parts keep the census of their unfinished jobs (virtual time, test mode)."""

    _signal_inbox: Any
    """Where a seeded loop's signal handlers wait (``inbox.Inbox``), or None."""

    _thread_id: int | None
    """``threading.get_ident()`` of the thread running the loop, or None (for reports)."""

    _task_sites: Any
    """task -> ``(filename, lineno)`` where it was created (virtual time and test mode), or None."""

    _chunking: Any
    """A seeded loop's ``chunking.Chunking`` (its stream reads take drawn sizes), or None."""

    _write_chunking: Any
    """A seeded loop's ``chunking.WriteChunking`` (its stream sends take drawn parts), or None."""

    def _pending_tasks_in_creation_order(self) -> list[asyncio.Task[Any]]:
        """The loop's unfinished tasks, those it saw made in the order they were made (seeded
        and test-mode loops keep it), then the rest; for shutdowns a replay repeats."""
        ...

    _timer_ties: Any
    """None, or ``count -> place``: where a new timer goes among the ``count`` timers of
    its deadline that can still run (a seeded loop's ``timer_ties``); the core asks it
    only when a deadline is shared."""

    def _timer_count(self) -> int:
        """How many timers are pending and not cancelled (for reports)."""
        ...

    def _next_timer_when(self) -> float | None:
        """The deadline of the earliest timer in the heap (perhaps cancelled), or None."""
        ...

    def _pending_timers(self) -> list[tuple[Any, list[Any]]]:
        """``(deadline, timers)`` per deadline in the heap, earliest first, each deadline's
        timers in firing order.  The heap itself (``_scheduled``) differs between the two
        builds: this is the way to read it."""
        ...

    def _rebase_timers(self, delta: float) -> None:
        """Move every deadline by ``delta`` (``set_clock``), keeping the firing order."""
        ...

    def _clear_timers(self) -> None:
        """Forget every timer (``close()``)."""
        ...

    def _use_idle_driver(self) -> Any:
        """The loop's idle driver (``_virtual_time``), installed now if it had none."""
        ...

    def _release_idle_driver(self) -> None:
        """Remove a real-clock loop's idle driver once nobody waits in it."""
        ...

    def _deadlock_mode(self) -> str:
        """What a deadlock does: "raise", "log" or "ignore" (``on_deadlock``)."""
        ...

    _now: Callable[[], float]
    """What deadlines are read from: ``loop.time`` without the call to the method.

    The clock's ``monotonic``, or what replaced ``time`` on the loop or in a
    subclass while it stands (``Loop._replace_time``)."""

    _clock: Any
    """The loop's own ``Clock`` (``get_clock()``).  Durations (metrics, uptime) are read
    from its ``monotonic``, never from a replaced ``time``."""

    def _time_is_replaced(self) -> bool:
        """Whether ``loop.time`` is replaced on the loop or overridden by its class."""
        ...

    _counters: Any
    """The metrics' totals (``_core.counters.LoopCounters``), or None (``metrics=False``)."""

    _metrics_recorder: Any
    """The slow-callback records and timing window (``metrics.recorder``), or None."""

    def _update_observer(self) -> None:
        """Set or clear ``_observe`` (and ``_timed``) after debug mode, instruments or
        timing changed."""
        ...

    def _emit_slow_callback(self, record: Any) -> None:
        """Hand a slow-callback record to the instruments' ``slow_callback`` hook."""
        ...

    def _executor_jobs(self) -> int:
        """How many ``run_in_executor`` jobs have not finished (a metrics gauge)."""
        ...

    def _emit_clock_jumped(self, old: float, new: float) -> None:
        """Hand a virtual clock's jump to the instruments' ``clock_jumped`` hook."""
        ...

    def _emit_deadlock(self, error: Exception) -> None:
        """Hand a deadlock's ``DeadlockError`` to the instruments' ``deadlock`` hook."""
        ...

    def _wants_deadlock_hook(self) -> bool:
        """Whether an instrument has a ``deadlock`` hook (a logged deadlock then builds one)."""
        ...


def _private_members(protocol: type) -> frozenset[str]:
    members = {
        name
        for name, value in vars(protocol).items()
        if callable(value) or isinstance(value, property)
    }
    members.update(vars(protocol).get("__annotations__", {}))
    return frozenset(m for m in members if m.startswith("_") and not m.startswith("__"))


#: The private names a part may use on a loop.
CONTRACT_NAMES: frozenset[str] = _private_members(LoopContract)


if TYPE_CHECKING:

    class LoopMixinBase(LoopContract, asyncio.AbstractEventLoop):
        """What ``self`` is in a mixin of the loop, for the type checker only."""

else:
    # At run time a mixin is a plain class: the Protocol machinery stays
    # out of the loop's MRO.
    LoopMixinBase = object
