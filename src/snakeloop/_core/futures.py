# cython: annotation_typing=False
"""snakeloop's own Future and Task.

They live in one module because they call each other on every step: a Task
is a Future whose result comes from driving a coroutine, and it waits by
hanging its wakeup on the future that the coroutine yielded.

The semantics are asyncio's, version by version (3.11 to 3.13), because user
code and libraries depend on the details: done callbacks run on a later
iteration, in the order they were added; a task cancelled while its wakeup
is already queued still sees ``CancelledError``; ``uncancel`` clears a
pending cancel on 3.13; eager start exists from 3.12.

What they use of a loop: on any loop, its public API (``call_soon``,
``get_debug``, ``call_exception_handler``, ``is_running``), so they also run
on other loops.  On a loop that takes plain callbacks they queue done
callbacks and task steps as plain entries instead of ``call_soon``, by the
rule "Queueing a plain callback" in ``_core/runloop.py``, and so also read
``_plain_ready`` and append to it; an eager first step reads
``_instrument_tasks`` (the loop's instruments' task hooks, or None), which
it calls around the step: nothing else of a loop.
(tests/core/test_futures.py holds this list to the code.)  Where a comment
says a call "cost" a benchmark row so many instructions, the figure is from
callgrind on CPython 3.11.

Private attribute names (``_state``, ``_callbacks`` (a property), ``_fut_waiter``,
``_must_cancel`` ...) are the ones asyncio uses: the standard library's repr
and stack helpers read them, and white-box tests in CPython's suite do too.
Reprs and ``get_stack``/``print_stack`` delegate to ``asyncio.base_futures``
and ``asyncio.base_tasks``, exactly as asyncio's C accelerator does, so the
text stays identical on every version.
"""

from __future__ import annotations

import collections
import contextvars
import inspect
import itertools
import sys
from asyncio import base_futures, base_tasks, events, exceptions
from asyncio import futures as _aio_futures
from asyncio import tasks as _aio_tasks
from asyncio.coroutines import iscoroutine
from types import CoroutineType as _CoroutineType
from types import GenericAlias
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

if False:  # Cython reads this import when it compiles the module (setup.py)
    import cython
else:
    from . import cythonshim as cython
from .classviews import isinstance_view
from .futureiter import FutureIterator
from .handles import skip_when_recording, source_traceback
from .runloop import CoreLoop, plain_queue

if not cython.compiled:
    # The C functions futures.pxd declares, for the compiled paths only.
    from .cythonshim import (
        PyContext_CopyCurrent,
        coro_send,
        drop_empty_dict,
        generic_delattr,
        is_native_coroutine,
        learn_deque,
        queue_append,
    )

if TYPE_CHECKING:
    from asyncio import AbstractEventLoop
    from collections.abc import Callable, Coroutine, Generator
    from contextvars import Context
    from traceback import StackSummary
    from types import FrameType, TracebackType
    from typing import Generic as _TypingOnlyGeneric
    from typing import NoReturn, Self, TextIO
else:
    from .classviews import TypingOnlyGeneric as _TypingOnlyGeneric

_T = TypeVar("_T")

__all__ = ["Future", "Task", "_set_result_unless_cancelled"]


def _plain_ready_attr(loop: Any, name: str, default: None) -> Any:
    """``getattr(loop, "_plain_ready", None)``; compiled, a C read on snakeloop's loops.

    Interpreted, the name is ``getattr`` itself (below), so the written-out
    reads of ``plain_queue(loop)`` cost no more than before.  Compiled, a
    generic lookup of the slot cost about 220 instructions per read, several
    per task step, where this costs a type test and a load.
    """
    if isinstance(loop, CoreLoop):
        core = loop
        return core._plain_ready
    return getattr(loop, "_plain_ready", default)


if not cython.compiled:
    _plain_ready_attr = getattr  # type: ignore[assignment]  # noqa: F811


def _append_plain(ready: Any, entry: Any) -> None:
    """``ready.append(entry)`` on a plain queue (always exactly a deque).

    Compiled, deque's own C append is called (see readyqueue.pxd).
    Interpreted, the name is ``collections.deque.append`` itself (below),
    which costs what the method call did.
    """
    queue_append(ready, entry)


if cython.compiled:
    learn_deque(collections.deque)
else:
    _append_plain = collections.deque.append  # type: ignore[assignment]  # noqa: F811


_PENDING = "PENDING"
_CANCELLED = "CANCELLED"
_FINISHED = "FINISHED"

_PY312 = sys.version_info >= (3, 12)
_PY313 = sys.version_info >= (3, 13)
# 3.15 refuses a second __init__ of a Future or Task, and a Task context that
# is not a contextvars.Context (gh-157301).
_PY315 = sys.version_info >= (3, 15)
_Context = contextvars.Context

_CancelledError = exceptions.CancelledError
_InvalidStateError = exceptions.InvalidStateError


def _refuse_second_init(fut: Any) -> None:
    """3.15: a Future or Task is initialized once (its loop is set by then)."""
    try:
        loop = fut._loop
    except AttributeError:  # interpreted: the slot is still empty
        return
    if loop is not None:
        raise RuntimeError(f"{fut.__class__.__name__} object is already initialized")


def _copy_context() -> Context:
    """``contextvars.copy_context()``; compiled, the C API call, not a call of the function.

    Interpreted, the name is the function itself (below).  A task takes a
    copy when it is made, and a future for each done callback added without a
    context: through the function, each cost about 90 more instructions.
    """
    return PyContext_CopyCurrent()  # type: ignore[return-value]  # the shim is untyped


if not cython.compiled:
    _copy_context = contextvars.copy_context  # noqa: F811

# The registry of current and all tasks belongs to asyncio (C-accelerated),
# so asyncio.current_task() and all_tasks() see snakeloop's tasks.
_register_task = _aio_tasks._register_task
_enter_task = _aio_tasks._enter_task
_leave_task = _aio_tasks._leave_task
if sys.version_info >= (3, 12):
    # typeshed leaves out asyncio's private helpers: they exist from 3.12.
    _register_eager_task = _aio_tasks._register_eager_task  # type: ignore[attr-defined]
    _unregister_eager_task = _aio_tasks._unregister_eager_task  # type: ignore[attr-defined]
    _swap_current_task = _aio_tasks._swap_current_task  # type: ignore[attr-defined]
    _current_task = _aio_tasks.current_task
    _default_loop = events.get_event_loop
else:
    # Not in typeshed: the 3.11 helper that warns where get_event_loop() would.
    _default_loop = events._get_event_loop  # type: ignore[attr-defined]

_tasks_named = 0


def _task_name_counter() -> int:
    """The next task number, for the name "Task-N"; compiled, a C counter.

    Interpreted, the name is an ``itertools.count`` method (below), which is
    cheaper there than a function of its own.
    """
    global _tasks_named
    _tasks_named += 1
    return _tasks_named


if not cython.compiled:
    _task_name_counter = itertools.count(1).__next__  # noqa: F811


def _schedule(loop, callback, arg, context):
    """``loop.call_soon(callback, arg, context=context)``, minus the Handle."""
    ready = plain_queue(loop)
    if ready is not None:
        _append_plain(ready, (callback, arg, context))
    else:
        loop.call_soon(callback, arg, context=context)


def _not_initialized(fut, name):
    """Raise what reading the unset slot ``name`` of ``fut`` raises interpreted.

    A future made by ``__new__`` alone has no attributes there; compiled,
    its fields hold None, which the methods that asyncio keeps working on
    such an object check for.
    """
    raise AttributeError(
        f"'{type(fut).__name__}' object has no attribute '{name}'", name=name, obj=fut
    )


def _future_loop(fut):
    try:
        get_loop = fut.get_loop
    except AttributeError:
        return fut._loop
    return get_loop()


class Future(_TypingOnlyGeneric[_T]):
    """A result that will exist later; asyncio.Future's semantics."""

    # Slots keep every attribute inside the object: one allocation per
    # future and nothing else for the garbage collector to visit.  __dict__
    # stays available for attributes that user code sets, as asyncio's C
    # Future allows.  _asyncio_future_blocking is set by __await__, so that
    # Task can tell ``await fut`` (correct) from a bare ``yield fut`` (a bug
    # it reports).  A future made by __new__ alone has no attributes yet: the
    # methods that asyncio keeps working on such an object catch that.
    __slots__ = (
        "_loop",
        "_callback0",
        "_context0",
        "_more_callbacks",
        "_state",
        "_result",
        "_exception",
        "_exception_tb",
        "_cancel_message",
        "_cancelled_exc",
        "_asyncio_future_blocking",
        "_log_traceback_flag",
        "_source_traceback",
        "__weakref__",
        "__dict__",
    )
    # For type checkers (declarations, no values: the slots hold them).  The
    # loop is Any: on a snakeloop loop the rule for plain callbacks reads its
    # private fields.
    _loop: Any
    _callback0: Callable[[Any], object] | None
    _context0: Context | None
    _more_callbacks: list[tuple[Callable[[Any], object], Context]] | None
    _state: str
    _result: Any
    _exception: BaseException | None
    _exception_tb: TracebackType | None
    _cancel_message: Any
    _cancelled_exc: BaseException | None
    _asyncio_future_blocking: bool
    _log_traceback_flag: bool
    _source_traceback: StackSummary | None

    if sys.version_info >= (3, 14):
        # 3.14's asyncio reads who awaits a future here (capture_call_graph, gather's and
        # wait's clean-up).  Its future_add_to_awaited_by records edges on asyncio's own
        # futures only, never on these, so none is ever recorded: None, as on asyncio's
        # _PyFuture before its first.  Without it asyncio's tools raise AttributeError.
        _asyncio_awaited_by = None

    if cython.compiled:
        # Cython calls this from tp_new (see drop_empty_dict in futures.pxd);
        # the interpreted class does not have it.
        def __cinit__(self):
            drop_empty_dict(self)

    def __init__(self, *, loop: AbstractEventLoop | None = None) -> None:
        if _PY315:
            _refuse_second_init(self)
        if loop is None:
            loop = _default_loop()
        # Every attribute is set here, in one order, even where the class
        # default would do: CPython shares one key table among the instances
        # of a class only for the attributes its first instances set, and an
        # instance that adds another one later gets a full dict of its own.
        self._loop = loop
        self._callback0 = None  # the first done callback, kept inline
        self._context0 = None
        self._more_callbacks = None  # a list, once there is a second one
        self._state = _PENDING
        self._result = None
        self._exception = None
        self._exception_tb = None
        self._cancel_message = None
        self._cancelled_exc = None
        self._asyncio_future_blocking = False
        self._log_traceback_flag = False
        # A loop that takes plain entries now is not in debug mode (see
        # Task._setup): futures are made on every stream read, and
        # get_debug() is a Python call.
        if _plain_ready_attr(loop, "_plain_ready", None) is None and loop.get_debug():  # type: ignore[union-attr]
            self._source_traceback = source_traceback(0)
        else:
            self._source_traceback = None

    def __repr__(self) -> str:
        return base_futures._future_repr(self)  # type: ignore[attr-defined]  # not in typeshed

    def __del__(self) -> None:
        # Runs for every future: a slot read, not getattr(), and a future
        # that was never initialized has nothing to report.
        try:
            unretrieved = self._log_traceback_flag
        except AttributeError:
            return
        if unretrieved:
            self._log_unretrieved_exception()

    def _log_unretrieved_exception(self):
        context = {
            "message": f"{self.__class__.__name__} exception was never retrieved",
            "exception": self._exception,
            "future": self,
        }
        if self._source_traceback:
            context["source_traceback"] = self._source_traceback
        self._loop.call_exception_handler(context)

    if not TYPE_CHECKING:
        # Future[int] as asyncio's: a types.GenericAlias (mypy has Generic's).
        __class_getitem__ = classmethod(GenericAlias)

    # isinstance(fut, asyncio.Future) must hold: anyio, for one, decides
    # whether to cancel a task by it, and loses data when it does not.  A
    # Python class cannot take asyncio's C Future as a base without carrying
    # (and confusing) its C state, and a compiled class cannot at all, so the
    # instances show isinstance() a class that does: when the type check
    # fails, isinstance() consults __class__.  type() and the C code of
    # _asyncio use the real type, and every method stays snakeloop's.
    @property
    def __class__(self):
        cls = type(self)
        return _ISINSTANCE_VIEWS.get(cls, cls)

    @__class__.setter
    def __class__(self, cls):
        _set_class(self, cls)

    def __delattr__(self, name: str) -> None:
        # Compiled only (the pure build deletes it below the classes): asyncio's C
        # Future and Task refuse to delete their fields with AttributeError (CPython's
        # test_future_del_segfault, test_del__log_destroy_pending_segfault), and the
        # compiled fields' own descriptors would raise NotImplementedError or set None.
        if name in _UNDELETABLE:
            raise AttributeError(
                f"attribute {name!r} of {type(self).__name__!r} objects cannot be deleted"
            )
        generic_delattr(self, name)

    @property
    def _log_traceback(self):
        return self._log_traceback_flag

    @_log_traceback.setter
    def _log_traceback(self, val):
        if val:
            raise ValueError("_log_traceback can only be set to False")
        self._log_traceback_flag = False

    def get_loop(self) -> AbstractEventLoop:
        loop = getattr(self, "_loop", None)
        if loop is None:
            raise RuntimeError("Future object is not initialized.")
        return loop

    def _make_cancelled_error(self):
        exc = self._cancelled_exc
        if exc is not None:
            self._cancelled_exc = None
            return exc
        if self._cancel_message is None:
            return _CancelledError()
        return _CancelledError(self._cancel_message)

    def cancel(self, msg: Any | None = None) -> bool:
        self._log_traceback_flag = False
        state = self._state  # see "Borrowed fields" in remove_done_callback
        if state != _PENDING:
            if cython.compiled and state is None:
                _not_initialized(self, "_state")
            return False
        self._state = _CANCELLED
        self._cancel_message = msg
        self._schedule_callbacks()
        return True

    @property
    def _callbacks(self) -> list[tuple[Callable[[Any], object], Context | None]]:
        """The done callbacks as asyncio lists them: ``[(fn, context), ...]``."""
        callbacks: list[tuple[Callable[[Any], object], Context | None]] = []
        if self._callback0 is not None:
            callbacks.append((self._callback0, self._context0))
        if self._more_callbacks:
            callbacks.extend(self._more_callbacks)
        return callbacks

    def _schedule_callbacks(self):
        callback0 = self._callback0
        more = self._more_callbacks
        if callback0 is None and not more:
            return
        # Detach them first: a callback may add or remove callbacks while
        # these are queued, and those changes must touch a fresh set.
        context0 = self._context0
        self._callback0 = self._context0 = self._more_callbacks = None
        loop = self._loop
        ready = plain_queue(loop)
        if ready is not None:
            append = ready.append
            if callback0 is not None:
                append((callback0, self, context0))
            if more:
                for callback, ctx in more:
                    append((callback, self, ctx))
        else:
            call_soon = loop.call_soon
            if callback0 is not None:
                call_soon(callback0, self, context=context0)
            if more:
                for callback, ctx in more:
                    call_soon(callback, self, context=ctx)

    def cancelled(self) -> bool:
        try:
            state = self._state
            return state == _CANCELLED
        except AttributeError:  # never initialized: pending
            return False

    if cython.compiled:

        def done(self) -> bool:
            state = self._state
            return state is not None and state != _PENDING  # None: never initialized

    else:

        def done(self) -> bool:
            try:
                return self._state != _PENDING
            except AttributeError:  # never initialized: pending
                return False

    def result(self) -> _T:
        try:
            state = self._state
        except AttributeError:  # never initialized: pending
            state = _PENDING
        if state == _FINISHED:
            self._log_traceback_flag = False
            exc = self._exception
            if exc is not None:
                try:
                    raise exc.with_traceback(self._exception_tb)
                finally:
                    exc = self = None  # type: ignore[assignment]
            return self._result
        if state == _CANCELLED:
            try:
                raise self._make_cancelled_error()
            finally:
                self = None  # type: ignore[assignment]  # the error's traceback holds this frame
        raise _InvalidStateError("Result is not ready.")

    def exception(self) -> BaseException | None:
        try:
            state = self._state
        except AttributeError:  # never initialized: pending
            state = _PENDING
        if state == _FINISHED:
            self._log_traceback_flag = False
            return self._exception
        if state == _CANCELLED:
            raise self._make_cancelled_error()
        raise _InvalidStateError("Exception is not set.")

    def add_done_callback(
        self, fn: Callable[[Self], object], *, context: Context | None = None
    ) -> None:
        state = self._state
        if state != _PENDING:
            loop = self._loop
            loop.call_soon(fn, self, context=context)
            return
        if context is None:
            context = _copy_context()
        # Most futures get one callback (the task awaiting them): it is kept
        # in two attributes, and a list exists only from the second one on.
        more = self._more_callbacks
        if self._callback0 is None and more is None:
            self._callback0 = fn
            self._context0 = context
        elif more is None:
            self._more_callbacks = [(fn, context)]
        else:
            more.append((fn, context))

    def remove_done_callback(self, fn: Callable[[Self], object]) -> int:
        removed = 0
        # Borrowed fields: compiled, ``self._callback0 == fn`` would hand the
        # comparison the field's pointer without a reference of its own, and
        # a user's __eq__ (fn's reflected one runs first for a subclass) may
        # clear the field, freeing the object while it is being compared
        # (python/cpython#125966).  A local holds a reference, as the
        # interpreter's stack does; every field that user code could change
        # under a call is read into a local first, in this module and in
        # handles.py and runloop.py (docs/design.md, "Reentrancy").
        callback0 = self._callback0
        if callback0 is not None and callback0 == fn:
            # The local lets go first: the field's release then frees the
            # callback here, before the rest is walked, as asyncio's Futures
            # free what they remove (the interpreted frame would free it only
            # after the argument, at its return, and the compiled one before:
            # a finalizer would see the builds differ).
            callback0 = None
            self._callback0 = self._context0 = None
            removed = 1
        callback0 = None  # an __eq__ that removed it left the local the last one
        more = self._more_callbacks
        if more:
            count = len(more)
            kept = [(f, ctx) for (f, ctx) in more if f != fn]
            if not more or self._more_callbacks is not more:
                # An __eq__ emptied the list, or the future let go of it,
                # while it was walked: asyncio's C Future then counts the
                # whole list as removed and keeps none (its fix of
                # python/cpython#97592; the pure-Python one counts less
                # than nothing).
                removed += count
            elif len(kept) != len(more):
                removed += len(more) - len(kept)
                more[:] = kept
        elif cython.compiled and self._state is None:  # an identity test runs no user code
            _not_initialized(self, "_callback0")
        return removed

    def set_result(self, result: _T) -> None:
        state = self._state
        if state != _PENDING:
            if cython.compiled and state is None:
                _not_initialized(self, "_state")
            raise _InvalidStateError(f"{self._state}: {self!r}")
        self._result = result
        self._state = _FINISHED
        callback0 = self._callback0
        if callback0 is not None and self._more_callbacks is None:
            # One waiter (a task) on a snakeloop loop: _schedule_callbacks
            # with plain_queue(loop), written out.  The two calls cost a
            # streams echo (a future per read) 4% more instructions.
            ready = _plain_ready_attr(self._loop, "_plain_ready", None)
            if ready is not None:
                self._callback0 = None
                _append_plain(ready, (callback0, self, self._context0))
                self._context0 = None
                return
        self._schedule_callbacks()

    def set_exception(self, exception: type[BaseException] | BaseException) -> None:
        state = self._state
        if state != _PENDING:
            if cython.compiled and state is None:
                _not_initialized(self, "_state")
            raise _InvalidStateError(f"{self._state}: {self!r}")
        if isinstance(exception, type):
            exception = exception()
        if _PY313:
            if isinstance(exception, StopIteration):
                new_exc = RuntimeError(
                    "StopIteration interacts badly with generators "
                    "and cannot be raised into a Future"
                )
                new_exc.__cause__ = exception
                new_exc.__context__ = exception
                exception = new_exc
        elif type(exception) is StopIteration:
            raise TypeError(
                "StopIteration interacts badly with generators and cannot be raised into a Future"
            )
        self._exception = exception
        self._exception_tb = exception.__traceback__
        self._state = _FINISHED
        self._schedule_callbacks()
        self._log_traceback_flag = True

    def __await__(self) -> Generator[Any, None, _T]:
        try:
            state = self._state
            if state == _PENDING:
                self._asyncio_future_blocking = True
                yield self  # the Task hangs its wakeup on this future
            state = self._state
            if state == _FINISHED and self._exception is None:
                # result() inlined for the common outcome (whose traceback
                # flag is never set).
                return self._result
            if state == _PENDING:
                raise RuntimeError("await wasn't used with future")
            return self.result()
        finally:
            self = None  # type: ignore[assignment]

    def __iter__(self) -> Generator[Any, None, _T]:
        # Not the generator itself: its throw() differs from asyncio's (futureiter.py).
        return FutureIterator(self.__await__())  # type: ignore[return-value]


def _refuse_keyword(name: str) -> NoReturn:
    """The TypeError of asyncio's C Task for a keyword it does not take (loop.create_task
    passes it any keyword from 3.14 on)."""
    if _PY313:
        raise TypeError(f"Task() got an unexpected keyword argument {name!r}")
    raise TypeError(f"{name!r} is an invalid keyword argument for Task()")


class Task(Future[_T]):
    """Drives a coroutine; asyncio.Task's semantics for the running Python."""

    __slots__ = (
        "_log_destroy_pending",
        "_name",
        "_num_cancels_requested",
        "_must_cancel",
        "_fut_waiter",
        "_coro",
        "_context",
    )
    _log_destroy_pending: bool
    _name: str | int  # an int until get_name() first makes the string
    _num_cancels_requested: int
    _must_cancel: bool
    _fut_waiter: Any
    _coro: Any
    _context: Context

    def __init__(
        self,
        coro: Coroutine[Any, Any, _T] | Generator[Any, None, _T],
        *,
        loop: AbstractEventLoop | None = None,
        name: object = None,
        context: Context | None = None,
        eager_start: bool = False,
        **unexpected: Any,
    ) -> None:
        if unexpected:
            _refuse_keyword(next(iter(unexpected)))
        if eager_start and not _PY312:
            # Eager start came with 3.12; 3.11's Task has no such argument.
            _refuse_keyword("eager_start")
        if _PY315:
            _refuse_second_init(self)
        self._setup(coro, loop, name, context, eager_start, 1)
        self = None  # type: ignore[assignment]  # an eager first step ran under this frame

    def _setup(self, coro, loop, name, context, eager_start, hidden):
        """The body of __init__; ``loop.create_task`` calls it directly.

        ``hidden`` is how many frames of asyncio's own its pure-Python
        Task drops from the debug-mode record of where the task was made
        (``source_traceback``): 1 from ``__init__``, 2 from
        ``loop.create_task``.  Future.__init__ is written out here:
        calling it cost the spawn row 4% more instructions and gather 2%.
        """
        if loop is None:
            loop = _default_loop()
        # plain_queue(loop), written out: the call cost the spawn row 2% more
        # instructions.  Not None also means "not in debug mode", which
        # spares a get_debug() call.
        ready = _plain_ready_attr(loop, "_plain_ready", None)
        # All attributes in one order (see Future.__init__).
        self._loop = loop
        self._callback0 = None  # the first done callback, kept inline
        self._context0 = None
        self._more_callbacks = None  # a list, once there is a second one
        self._state = _PENDING
        self._result = None
        self._exception = None
        self._exception_tb = None
        self._cancel_message = None
        self._cancelled_exc = None
        self._asyncio_future_blocking = False
        self._log_traceback_flag = False
        if ready is None and loop.get_debug():
            self._source_traceback = source_traceback(hidden)
        else:
            self._source_traceback = None
        self._log_destroy_pending = True
        if coro.__class__ is not _CoroutineType and not iscoroutine(coro):
            self._log_destroy_pending = False
            raise TypeError(f"a coroutine was expected, got {coro!r}")
        if name is None:
            # The number is taken now; the string is made on first use (as
            # 3.13's C Task does), since most tasks are never asked.
            self._name = _task_name_counter()
        else:
            self._name = str(name)
        self._num_cancels_requested = 0
        self._must_cancel = False
        self._fut_waiter = None
        self._coro = coro
        if context is None:
            context = _copy_context()
        elif _PY315 and not isinstance(context, _Context):
            self._log_destroy_pending = False
            raise TypeError(f"a contextvars.Context was expected, got {type(context).__name__}")
        self._context = context
        if eager_start and loop.is_running():
            self._eager_start()
            self = None  # see _eager_start
            return
        if ready is not None:
            _append_plain(ready, (_TASK_STEP, self, context))
        else:
            loop.call_soon(self._step, context=context)
        _register_task(self)

    def __del__(self):
        try:
            state = self._state
            pending = state == _PENDING and self._log_destroy_pending
        except AttributeError:
            return  # never initialized
        if pending:
            context = {
                "task": self,
                "message": "Task was destroyed but it is pending!",
            }
            if self._source_traceback:
                context["source_traceback"] = self._source_traceback
            self._loop.call_exception_handler(context)
        if self._log_traceback_flag:
            self._log_unretrieved_exception()

    def __repr__(self) -> str:
        # asyncio's helpers take any task-shaped object; typeshed says Task.
        return base_tasks._task_repr(self)  # type: ignore[arg-type]

    def get_coro(self) -> Coroutine[Any, Any, _T] | Generator[Any, None, _T] | None:
        return self._coro

    if sys.version_info >= (3, 12):

        def get_context(self) -> Context:
            return self._context

    def get_name(self) -> str:
        name = self._name
        if isinstance(name, int):
            name = self._name = f"Task-{name}"
        return name

    def set_name(self, value: object) -> None:
        self._name = str(value)

    def set_result(self, result: object) -> NoReturn:
        raise RuntimeError("Task does not support set_result operation")

    def set_exception(self, exception: object) -> NoReturn:
        raise RuntimeError("Task does not support set_exception operation")

    def get_stack(self, *, limit: int | None = None) -> list[FrameType]:
        return base_tasks._task_get_stack(self, limit)  # type: ignore[arg-type]

    def print_stack(self, *, limit: int | None = None, file: TextIO | None = None) -> None:
        base_tasks._task_print_stack(self, limit, file)  # type: ignore[arg-type]

    def cancel(self, msg: Any | None = None) -> bool:
        self._log_traceback_flag = False
        state = self._state
        if state != _PENDING:
            if cython.compiled and state is None:
                _not_initialized(self, "_state")
            return False
        requested = self._num_cancels_requested
        self._num_cancels_requested = requested + 1
        waiter = self._fut_waiter
        if waiter is not None and waiter.cancel(msg=msg):
            return True
        # Nothing to interrupt right now: the next step throws it in.
        self._must_cancel = True
        self._cancel_message = msg
        return True

    def cancelling(self) -> int:
        return self._num_cancels_requested

    def uncancel(self) -> int:
        requested = self._num_cancels_requested
        if requested > 0:
            requested -= 1
            self._num_cancels_requested = requested
            if _PY313 and requested == 0:
                self._must_cancel = False
        return self._num_cancels_requested

    def _eager_start(self):
        # The first step runs now, inside create_task, as the current task;
        # the caller's task (if any) is current again afterwards.
        loop = self._loop
        # A loop's instruments bracket this step as any other (see
        # snakeloop.instruments); None on loops without them.
        hooks = getattr(loop, "_instrument_tasks", None)
        if hooks is not None:
            hooks.before_step(self)
        prev_task = _current_task(loop)
        if prev_task is not None:
            _swap_current_task(loop, None)
        try:
            _register_eager_task(self)
            try:
                context = self._context
                context.run(self._step)
            finally:
                _unregister_eager_task(self)
        finally:
            try:
                if prev_task is not None:
                    _swap_current_task(loop, prev_task)
            finally:
                state = self._state
                if state != _PENDING:
                    self._coro = None
                else:
                    _register_task(self)
        if hooks is not None:
            hooks.after_step(self)
        # If the first step raised, the error's traceback keeps the step's
        # frame and, through f_back, this one and its callers' (down to
        # create_task's), each with its locals at return: none may hold the
        # task, which holds the error.
        self = prev_task = hooks = None

    @cython.locals(returned="bint")
    def _step_now(self, exc=None):
        """One step of the coroutine, then what its return or its yield asks for.

        Compiled, a C method (``_wakeup`` calls it without looking ``_step`` up
        and binding it: about 350 instructions per wakeup), and a native
        coroutine is sent to with PyIter_Send (``coro_send``, futures.pxd), which
        returns a status: the StopIteration of ``coro.send()`` costs a task about
        3000 instructions (made, raised, traced and caught).  Interpreted, and
        for any other coroutine or a throw, the return is that StopIteration.
        """
        state = self._state
        if state != _PENDING:
            raise _InvalidStateError(f"_step(): already done: {self!r}, {exc!r}")
        if self._must_cancel:
            if not isinstance(exc, _CancelledError):
                exc = self._make_cancelled_error()
            self._must_cancel = False
        self._fut_waiter = None
        loop = self._loop
        _enter_task(loop, self)
        returned = False
        try:
            if _SEND_NATIVE and exc is None and is_native_coroutine(self._coro):
                result = coro_send(self._coro, cython.address(returned))
            else:
                try:
                    result = self._coro.send(None) if exc is None else self._coro.throw(exc)
                except StopIteration as stop:
                    result = stop.value
                    returned = True
        except _CancelledError as cancelled:
            self._cancelled_exc = cancelled
            Future.cancel(self)
        except (KeyboardInterrupt, SystemExit) as fatal:
            Future.set_exception(self, fatal)
            raise
        except BaseException as error:
            Future.set_exception(self, error)
        else:
            if returned:
                _task_returned(self, loop, result)
            elif result is None:
                # A bare yield (asyncio.sleep(0)): run again next iteration.
                # plain_queue(loop), written out: the call cost the sleep0 row 5%
                # more instructions (interpreted).
                ready = _plain_ready_attr(loop, "_plain_ready", None)
                if ready is not None:
                    _append_plain(ready, (_TASK_STEP, self, self._context))
                else:
                    context = self._context
                    loop.call_soon(self._step, context=context)
            elif type(result) in _OWN_CLASSES:
                _task_awaits_own(self, loop, result)
            else:
                self._handle_yield(result)
        finally:
            _leave_task(loop, self)
            self = None  # break the frame/task cycle on errors
            exc = None

    # What the ready queue runs.  Interpreted, the step itself: a call between
    # would cost every step.
    if cython.compiled:

        def _step(self, exc=None):
            """A step of the task: ``_step_now``."""
            return self._step_now(exc)

    else:
        _step = _step_now
        # Named as asyncio's and the compiled build's, in a handle's repr.
        _step.__name__ = "_step"
        _step.__qualname__ = "Task._step"

    def _reschedule_with_error(self, exc):
        loop = self._loop
        context = self._context
        loop.call_soon(self._step, exc, context=context)

    def _handle_yield(self, result):
        """What any other yielded value asks for (foreign futures, bugs)."""
        blocking = getattr(result, "_asyncio_future_blocking", None)
        loop = self._loop
        if blocking is not None:
            if _future_loop(result) is not loop:
                new_exc = RuntimeError(
                    f"Task {self!r} got Future {result!r} attached to a different loop"
                )
            elif blocking:
                if result is self:
                    new_exc = RuntimeError(f"Task cannot await on itself: {self!r}")
                else:
                    result._asyncio_future_blocking = False
                    context = self._context
                    result.add_done_callback(self._wakeup, context=context)
                    self._fut_waiter = result
                    if self._must_cancel:
                        # The future is foreign: its cancel() may change this
                        # task (python/cpython#126138).
                        msg = self._cancel_message
                        if result.cancel(msg=msg):
                            self._must_cancel = False
                    return
            else:
                new_exc = RuntimeError(
                    f"yield was used instead of yield from in task {self!r} with {result!r}"
                )
        elif inspect.isgenerator(result):
            new_exc = RuntimeError(
                "yield was used instead of yield from for "
                f"generator in task {self!r} with {result!r}"
            )
        else:
            new_exc = RuntimeError(f"Task got bad yield: {result!r}")
        self._reschedule_with_error(new_exc)

    def _wakeup(self, future):
        if (
            type(future) in _OWN_CLASSES
            and future._state == _FINISHED
            and future._exception is None
        ):
            # Our own future with a plain result: result() could not raise.
            self._step_now(None)
        else:
            try:
                future.result()
            except BaseException as exc:
                future = None
                self._step_now(exc)
            else:
                self._step_now(None)
        # If the step raised inside the coroutine, the exception's traceback
        # holds _step's frame, and through its f_back this one, with the
        # locals it returns with: the task would hold its own exception's
        # traceback, and be freed only by the cyclic collector.
        self = future = None


# Future reprs show the wakeup callback by the name asyncio's own Task gives it: the C
# Task's is task_wakeup, cb=[Task.task_wakeup()]; where asyncio.Task is the pure-Python
# one (PyPy, which has no _asyncio), its method's, cb=[Task.__wakeup()].
Task._wakeup.__qualname__ = getattr(
    getattr(_aio_tasks.Task, "_Task__wakeup", None), "__qualname__", "Task.task_wakeup"
)


def _task_returned(task, loop, result):
    """A task's coroutine returned ``result``: the task is done (or cancelled)."""
    if task._must_cancel:
        task._must_cancel = False
        msg = task._cancel_message
        Future.cancel(task, msg=msg)
        return
    # Future.set_result without its state check: a task only becomes done
    # here, so it is still pending.
    task._result = result
    task._state = _FINISHED
    callback0 = task._callback0
    ready = None
    if callback0 is not None and task._more_callbacks is None:
        ready = _plain_ready_attr(loop, "_plain_ready", None)
    if ready is not None:
        # The common case of _schedule_callbacks (one waiter, on a snakeloop
        # loop) with plain_queue(loop), written out: the two calls cost the
        # spawn row 5% more instructions and gather 4% (interpreted).
        task._callback0 = None
        _append_plain(ready, (callback0, task, task._context0))
        task._context0 = None
    elif callback0 is not None or task._more_callbacks:
        task._schedule_callbacks()


def _task_awaits_own(task, loop, result):
    """A task's coroutine yielded ``result``, a snakeloop Future or Task.

    Its fields are read and set in C when compiled (``fut`` is typed), not
    looked up by name: a quarter of the spawn row's step cost there.
    """
    fut = result
    if not fut._asyncio_future_blocking:
        task._handle_yield(result)
    elif fut._loop is not loop:
        task._reschedule_with_error(
            RuntimeError(f"Task {task!r} got Future {fut!r} attached to a different loop")
        )
    elif fut is task:
        task._reschedule_with_error(RuntimeError(f"Task cannot await on itself: {task!r}"))
    else:
        fut._asyncio_future_blocking = False
        if fut._state == _PENDING:
            # add_done_callback, written out for the common case.
            if fut._callback0 is None and fut._more_callbacks is None:
                fut._callback0 = task._wakeup
                fut._context0 = task._context
            else:
                context = task._context
                fut.add_done_callback(task._wakeup, context=context)
        else:
            context = task._context
            _schedule(loop, task._wakeup, fut, context)
        task._fut_waiter = fut
        if task._must_cancel:
            msg = task._cancel_message
            if fut.cancel(msg=msg):
                task._must_cancel = False


_OWN_CLASSES = frozenset((Future, Task))
# Whether Task._step_now sends to a native coroutine with PyIter_Send (compiled).  A
# global, not a test of cython.compiled there: interpreted, the attribute read of that
# test cost every step about 70 instructions (sleep0 row, 3.11).
_SEND_NATIVE = cython.compiled

# The fields and properties of Future and Task that ``del`` refuses (see Future.__delattr__).
_UNDELETABLE = frozenset(
    {name for cls in (Future, Task) for name in cls.__slots__ if not name.startswith("__")}
    | {"_log_traceback", "_callbacks", "__class__"}
)

if not cython.compiled:
    # Interpreted, a class that defines __delattr__ has every attribute store go
    # through a Python-level __setattr__ lookup (CPython's slot_tp_setattro), and
    # STORE_ATTR no longer specializes for its slots: creating a task cost twice the
    # instructions (callgrind, 3.11, spawn row: 29,640 -> 61,578; gather +84%,
    # sleep0 +15%).  Removing it gives the classes the generic store back, and the
    # pure build deletes its fields as asyncio's pure-Python Future and Task do
    # theirs (a cdef class's stores never pass through its __delattr__).
    del Future.__delattr__

# A step queued as a plain entry is ``(Task._step, task, context)``: the
# function and the task, not ``(task._step, None, context)``.  The bound method
# was one more object made for every step, and one the cyclic collector tracked
# while the step waited: gather over 10k tasks (3.13, compiled) ran 129 young
# collections instead of 152 without it.  Callgrind, 3.11, sleep(0) per switch:
# compiled 5,118 -> 4,719 instructions, interpreted 7,752 -> 7,210.
# snakeloop._insight.steps tells a step in either shape.
_TASK_STEP = Task._step

if not cython.compiled:
    skip_when_recording(Future.__init__, Task.__init__, Task._setup)

_set_class = object.__dict__["__class__"].__set__


# Only snakeloop's own two classes have views: a user's subclass is its own
# __class__, so that its class attributes stay reachable through it.
_ISINSTANCE_VIEWS = {
    Future: isinstance_view(Future, _aio_futures.Future),
    Task: isinstance_view(Task, _aio_tasks.Task),
}


def _set_result_unless_cancelled(fut, result):
    """Resolve a waiter someone may have cancelled (asyncio's name, for reprs)."""
    if not fut.cancelled():
        fut.set_result(result)
