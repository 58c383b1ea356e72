# cython: annotation_typing=False
"""Handle and TimerHandle: one scheduled callback each.

A handle is what ``call_soon``/``call_later``/``call_at`` and the readiness
registrations return.  It carries the callback, its positional arguments and
the ``contextvars.Context`` to run it in.  The loop calls ``_run()`` from
exactly one place (``run_once``); nothing else invokes callbacks.

Cancelling drops the callback and its arguments at once, so a cancelled
timer that sits in the heap until lazy compaction (interpreted) keeps nothing
alive; compiled, the loop takes it out of the heap at once.

The representation and the error context match asyncio's so that log lines
and reprs read the same on either loop.  Formatting of the callback reuses the
standard library's ``asyncio.format_helpers`` (the C accelerator of asyncio
does the same), which keeps the text identical across Python versions.
"""

from __future__ import annotations

import inspect
import sys
import threading
from asyncio import constants, events, format_helpers
from contextvars import copy_context
from typing import TYPE_CHECKING, Any

from .classviews import isinstance_view

if False:  # Cython reads this import when it compiles the module (setup.py)
    import cython
else:
    from . import cythonshim as cython

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from contextvars import Context
    from traceback import StackSummary
    from types import CodeType, FrameType

__all__ = ["THREADSAFE_HANDLES", "Handle", "ThreadSafeHandle", "TimerHandle", "context_of"]

# From 3.13 on, asyncio shows a callback's arguments only in debug mode
# (they may hold secrets); the helper takes the switch.
if "debug" in inspect.signature(format_helpers._format_callback_source).parameters:

    def _callback_text(callback, args, loop):
        return format_helpers._format_callback_source(callback, args, debug=loop.get_debug())

else:

    def _callback_text(callback, args, loop):
        return format_helpers._format_callback_source(callback, args)


# The code of the functions that make a handle, future or task for their
# caller (call_soon, Task.__init__...): debug mode's record of where it was
# made starts outside them.  Compiled functions have no frames to skip, so
# the compiled modules register theirs only when interpreted.
_MAKERS: set[CodeType] = set()


def skip_when_recording(*functions: Callable[..., Any]) -> None:
    """Leave the frames of ``functions`` out of debug-mode source tracebacks."""
    _MAKERS.update(function.__code__ for function in functions)


def source_traceback(hidden: int) -> StackSummary:
    """Where the object being made was made, as asyncio records it in debug mode.

    The stack from the innermost frame outside the makers (the program's
    frame) outward.  asyncio records ``DEBUG_STACK_DEPTH`` frames from
    one of its own and then drops its ``hidden`` frames, so its record
    holds that many fewer of the program's frames: this one too.
    """
    frame: FrameType | None = sys._getframe()
    while frame is not None and frame.f_code in _MAKERS:
        frame = frame.f_back
    return format_helpers.extract_stack(frame, constants.DEBUG_STACK_DEPTH - hidden)


def shorten_source_traceback(record: StackSummary, hidden: int) -> None:
    """Cut ``record`` to what asyncio keeps when it drops ``hidden`` frames.

    For a method that makes its object through another maker (call_soon
    through ``Handle``): that one recorded with fewer hidden frames.
    """
    keep = constants.DEBUG_STACK_DEPTH - hidden
    if len(record) > keep:
        del record[: len(record) - keep]


# Compiled, a freed Handle goes to a list of 250 kept for the next ones, so a
# call_soon takes no trip through the allocator.  Cython keeps such a list for
# this exact class only (TimerHandle, a subclass, has none), and applies it
# only to a class that says it is a cdef class here as well as in the .pxd.
@cython.freelist(250)
@cython.cclass
class Handle(events.Handle):
    """A callback scheduled on the loop, returned by ``call_soon``.

    User code checks ``isinstance(h, asyncio.Handle)``.  Interpreted, the
    class subclasses ``asyncio.Handle`` (for its slots only; every method is
    snakeloop's).  Compiled, it is a C type, which cannot take asyncio's
    class as a base (its fields are in handles.pxd): a handle's
    ``__class__`` is then a subclass of ``asyncio.Handle`` that stands for
    this class, as a future's is (see ``classviews``), and ``type(h)`` is
    this class in both builds.
    """

    __slots__ = ()
    # For type checkers (declarations only: asyncio.Handle's slots hold them).
    # The loop is Any: its private _debug is read here.
    _callback: Any
    _loop: Any
    _context: Context
    _repr: str | None
    _source_traceback: StackSummary | None

    def __init__(
        self,
        callback: Callable[..., object],
        args: Sequence[Any],
        loop: Any,
        context: Context | None = None,
    ) -> None:
        if context is None:
            context = copy_context()
        self._context = context
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        if loop._debug:
            self._source_traceback = source_traceback(0)
        else:
            self._source_traceback = None

    if cython.compiled:

        @property  # type: ignore[misc]  # mypy takes it for a redefined class attribute
        def __class__(self) -> type:
            cls = type(self)
            return _ISINSTANCE_VIEWS.get(cls, cls)

        @__class__.setter
        def __class__(self, cls: type) -> None:
            _set_class(self, cls)

    def _repr_info(self) -> list[str]:
        info = [type(self).__name__]
        if self._cancelled:
            info.append("cancelled")
        callback = self._callback
        if callback is not None:
            # Locals, not the fields, go to calls that run user code (reprs,
            # the loop's get_debug): compiled, a field passed on is borrowed,
            # and a cancel() from that code would free it (docs/design.md,
            # "Reentrancy").
            args = self._args
            loop = self._loop
            info.append(_callback_text(callback, args, loop))
        if self._source_traceback:
            frame = self._source_traceback[-1]
            info.append(f"created at {frame[0]}:{frame[1]}")
        return info

    def __repr__(self) -> str:
        if self._repr is not None:
            return self._repr
        return "<{}>".format(" ".join(self._repr_info()))

    def get_context(self) -> Context:
        return self._context

    def cancel(self) -> None:
        if not self._cancelled:
            self._cancelled = True
            loop = self._loop
            if loop._debug:
                # Keep the text while callback and args still exist, so a
                # later "Executing <Handle ...> took 2.5 seconds" can name it.
                self._repr = repr(self)
            self._callback = None
            self._args = None  # type: ignore[assignment]  # as asyncio does; typeshed omits None

    def cancelled(self) -> bool:
        return self._cancelled

    def _run(self) -> None:
        try:
            context = self._context
            callback = self._callback
            args = self._args
            context.run(callback, *args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._report(exc)
        # Drop this frame's references on error paths: an error's traceback keeps the
        # frame, and the callback (a task's step) would keep the error in a cycle.
        self = context = callback = args = None  # type: ignore[assignment]

    def _report(self, exc: BaseException) -> None:
        callback = self._callback
        args = self._args
        loop = self._loop
        cb = _callback_text(callback, args, loop)
        context = {
            "message": f"Exception in callback {cb}",
            "exception": exc,
            "handle": self,
        }
        if self._source_traceback:
            context["source_traceback"] = self._source_traceback
        loop.call_exception_handler(context)


class TimerHandle(Handle, events.TimerHandle):
    """A callback due at a loop time, returned by ``call_later``/``call_at``.

    Also an ``asyncio.TimerHandle``: interpreted, a subclass, whose slots
    (``_when``, ``_scheduled``) it uses; compiled, through its ``__class__``
    (see ``Handle``).
    """

    __slots__ = ()

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: Sequence[Any],
        loop: Any,
        context: Context | None = None,
    ) -> None:
        # Handle.__init__ written out: calling it cost the timers row 5% more
        # instructions (callgrind, 3.11).
        if context is None:
            context = copy_context()
        self._context = context
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        if loop._debug:
            # asyncio's TimerHandle records from its own __init__ and drops it.
            self._source_traceback = source_traceback(1)
        else:
            self._source_traceback = None
        self._when = when
        self._scheduled = False

    def _repr_info(self) -> list[str]:
        info = Handle._repr_info(self)
        info.insert(2 if self._cancelled else 1, f"when={self._when}")
        return info

    # The comparisons read the fields into locals: ``when`` may be any
    # number, whose comparison may run user code that changes the timer
    # (see Handle._repr_info).
    def __hash__(self) -> int:
        when = self._when
        return hash(when)

    def __lt__(self, other: object) -> bool:
        if isinstance(other, TimerHandle):
            when = self._when
            other_when = other._when
            return when < other_when
        return NotImplemented

    def __le__(self, other: object) -> bool:
        if isinstance(other, TimerHandle):
            when = self._when
            other_when = other._when
            return when < other_when or self.__eq__(other)
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if isinstance(other, TimerHandle):
            when = self._when
            other_when = other._when
            return when > other_when
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if isinstance(other, TimerHandle):
            when = self._when
            other_when = other._when
            return when > other_when or self.__eq__(other)
        return NotImplemented

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TimerHandle):
            # asyncio's ``a == b and c == d and ...``: the first false result
            # itself, whatever its type.
            when = self._when
            other_when = other._when
            same = when == other_when
            if not same:
                return same
            callback = self._callback
            other_callback = other._callback
            same = callback == other_callback
            if not same:
                return same
            args = self._args
            other_args = other._args
            same = args == other_args
            if not same:
                return same
            return self._cancelled == other._cancelled
        return NotImplemented

    def cancel(self) -> None:
        if not self._cancelled:
            loop = self._loop
            if self._scheduled:
                # The loop lets go of the timer now: compiled, out of the heap;
                # interpreted, out of the deadline table, the bare deadline left
                # in the heap.  Kept until it surfaced, a cancelled timer outlived
                # its use: on the timer-churn row the collector then took a third
                # of the time (3.13), and a server re-arming an idle timeout per
                # request among 10,000 idle connections paid 2.7 µs more per
                # request (interpreted, 3.11).
                loop._timer_handle_cancelled(self)
            self._cancelled = True
            if loop._debug:
                self._repr = repr(self)
            self._callback = None
            self._args = None  # type: ignore[assignment]  # as asyncio does; typeshed omits None

    def when(self) -> float:
        """The loop time at which the callback is due."""
        return self._when


# asyncio's call_soon_threadsafe returns an events._ThreadSafeHandle from 3.14 on (and
# in the 3.13 releases that have the class): a handle whose cancel(), from another
# thread, waits while its callback runs, and whose callback does not start once cancel()
# has returned.  Before, it returned a plain Handle.
THREADSAFE_HANDLES = hasattr(events, "_ThreadSafeHandle")
_StdlibThreadSafeHandle: Any = getattr(events, "_ThreadSafeHandle", events.Handle)


class _LockedContext:
    """A thread-safe handle's context, seen by the loop: its callback runs under the lock.

    The run loop runs a handle as ``handle._context.run(callback, *args)`` (any context
    object but a real ``Context`` gets its ``run`` called), so this is where the lock
    goes: the loop's path for every other handle stays as it is.  It holds no
    reference to its handle, so the two make no cycle for the collector.
    """

    __slots__ = ("context", "lock", "cancelled")

    def __init__(self, context: Context) -> None:
        self.context = context
        self.lock = threading.RLock()
        self.cancelled = False

    def run(self, callback: Callable[..., object], *args: Any) -> object:
        with self.lock:
            if self.cancelled:
                # Cancelled after the loop saw it live, before it started.
                return None
            return self.context.run(callback, *args)


def context_of(handle: Any) -> Context:
    """The context ``handle``'s callback runs in (a thread-safe handle's is wrapped)."""
    context = handle._context
    if type(context) is _LockedContext:
        return context.context
    return context  # type: ignore[no-any-return]


class ThreadSafeHandle(Handle, _StdlibThreadSafeHandle):
    """What ``call_soon_threadsafe`` returns where asyncio's is a ``_ThreadSafeHandle``.

    Interpreted, a subclass of both; compiled, an ``events._ThreadSafeHandle`` through
    its ``__class__``, as Handle is an ``asyncio.Handle``.
    """

    __slots__ = ()

    def __init__(
        self,
        callback: Callable[..., object],
        args: Sequence[Any],
        loop: Any,
        context: Context | None = None,
    ) -> None:
        Handle.__init__(self, callback, args, loop, context)
        self._context = _LockedContext(self._context)  # type: ignore[assignment]

    def _repr_info(self) -> list[str]:
        info = Handle._repr_info(self)
        info[0] = "_ThreadSafeHandle"  # asyncio's name, in reprs and log lines
        return info

    @property  # type: ignore[misc]  # asyncio's class has it as a slot
    def _lock(self) -> threading.RLock:
        return self._context.lock  # type: ignore[attr-defined,no-any-return]

    def get_context(self) -> Context:
        return self._context.context  # type: ignore[attr-defined,no-any-return]

    def cancel(self) -> None:
        locked: Any = self._context
        with locked.lock:
            locked.cancelled = True
            Handle.cancel(self)

    def cancelled(self) -> bool:
        with self._context.lock:  # type: ignore[attr-defined]
            return self._cancelled

    def _run(self) -> None:
        with self._context.lock:  # type: ignore[attr-defined]
            if not self._cancelled:
                Handle._run(self)


if cython.compiled:
    _set_class = object.__dict__["__class__"].__set__

    # Only snakeloop's own two classes have views: a subclass is its own
    # __class__, so that its class attributes stay reachable through it.
    _ISINSTANCE_VIEWS = {
        Handle: isinstance_view(Handle, events.Handle),
        TimerHandle: isinstance_view(TimerHandle, events.TimerHandle),
        ThreadSafeHandle: isinstance_view(ThreadSafeHandle, _StdlibThreadSafeHandle),
    }
else:
    skip_when_recording(
        Handle.__init__, TimerHandle.__init__, ThreadSafeHandle.__init__, source_traceback
    )
