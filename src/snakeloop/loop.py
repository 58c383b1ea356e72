"""``snakeloop.Loop``: the public ``asyncio.AbstractEventLoop`` surface.

The class is assembled from small parts, each in its own module:

* ``_core.runloop.CoreLoop``: the ready deque, timer heap, ``run_once``,
  ``call_soon``/``call_later``/``call_at``, the fd dispatch table;
* ``errors``, ``debug``, ``asyncgens``, ``executors``, ``offload``,
  ``dns``, ``signals``, ``connecting``, ``serving``: mixins with one job each;
* this module: running and closing, futures and tasks, and readiness
  registration (``add_reader`` & co.).

None of those parts imports this module, so dependencies run one way.
"""

from __future__ import annotations

import asyncio
import logging
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
from asyncio.base_events import _run_until_complete_cb
from collections.abc import Callable, Coroutine
from typing import Any

from ._core.futures import Future, Task
from ._core.handles import Handle
from ._core.runloop import CoreLoop
from ._io import READABLE, WRITABLE, default_backend
from ._io.waker import Waker
from .asyncgens import AsyncGenMixin
from .clock import Clock, MonotonicClock
from .connecting import ConnectingMixin
from .datagrams import DatagramMixin
from .debug import DebugMixin, debug_from_environment
from .dns import DnsMixin
from .errors import ExceptionHandlingMixin
from .executors import ExecutorMixin
from .offload import OffloadMixin
from .sendfile import SendfileMixin
from .serving import ServingMixin
from .signals import SignalsMixin
from .sockets import SocketMixin
from .subprocess import SubprocessMixin
from .tls import TLSMixin
from .transports.pipes import PipesMixin

__all__ = ["Loop"]

logger = logging.getLogger("asyncio")

# 3.13.0 names a factory-made task with set_name(name) even when name is
# None (so the task is called "None"); 3.11, 3.12 and later 3.13 releases
# only set a name that was given.
_SET_NAME_ALWAYS = sys.version_info[:3] == (3, 13, 0)

_new_object = object.__new__


def _fd_of(fileobj) -> int:
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


def _named(task, name):
    """Name a task made by a task factory, as asyncio's create_task does."""
    if _SET_NAME_ALWAYS:
        task.set_name(name)
    else:
        aio_tasks._set_task_name(task, name)
    return task


class Loop(
    CoreLoop,
    ExceptionHandlingMixin,
    DebugMixin,
    AsyncGenMixin,
    ExecutorMixin,
    OffloadMixin,
    DnsMixin,
    SignalsMixin,
    PipesMixin,
    SubprocessMixin,
    ConnectingMixin,
    ServingMixin,
    TLSMixin,
    SocketMixin,
    SendfileMixin,
    DatagramMixin,
    asyncio.AbstractEventLoop,
):
    """An asyncio event loop written in Python.

    ``clock`` supplies ``loop.time()`` (default: ``time.monotonic``).
    ``stdlib_futures=True`` makes ``create_future``/``create_task`` build
    asyncio's own (C) Future and Task instead of snakeloop's, for code that
    needs ``type(x) is asyncio.Task`` (snakeloop's pass ``isinstance`` checks).
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        stdlib_futures: bool = False,
        io_backend: Any = None,
    ) -> None:
        if clock is None:
            clock = MonotonicClock()
        if io_backend is None:
            io_backend = default_backend()
        CoreLoop.__init__(self, clock, io_backend, Waker())
        self._debug = debug_from_environment()
        self._task_factory = None
        self._exception_handler = None
        self._old_agen_hooks = None
        self._transports = weakref.WeakValueDictionary()
        self._stream_recv_view = None  # the stream transports' shared read buffer
        if stdlib_futures:
            self._future_class = asyncio.Future
            self._task_class = asyncio.Task
        else:
            self._future_class = Future
            self._task_class = Task
        self._init_asyncgens()
        self._init_executors()
        self._init_offload()
        self._init_signals()
        self._init_subprocess()

    def __repr__(self) -> str:
        return (
            f"<{self.__class__.__name__} running={self.is_running()} "
            f"closed={self.is_closed()} debug={self.get_debug()}>"
        )

    def __del__(self, _warn=warnings.warn):
        if not self.is_closed():
            _warn(f"unclosed event loop {self!r}", ResourceWarning, source=self)
            if not self.is_running():
                self.close()

    # -- running -------------------------------------------------------------

    def _check_running(self):
        if self.is_running():
            raise RuntimeError("This event loop is already running")
        if events._get_running_loop() is not None:
            raise RuntimeError("Cannot run the event loop while another loop is running")

    def _run_forever_setup(self):
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

    def _run_forever_cleanup(self):
        self._stopping = False
        self._thread_id = None
        events._set_running_loop(None)
        self._set_coroutine_origin_tracking(False)
        if self._old_agen_hooks is not None:
            sys.set_asyncgen_hooks(*self._old_agen_hooks)
            self._old_agen_hooks = None

    def run_forever(self) -> None:
        """Run iterations until ``stop()`` is called."""
        try:
            self._run_forever_setup()
            if "_run_once" in self.__dict__ or type(self)._run_once is not CoreLoop._run_once:
                # Someone wraps _run_once (to count or time iterations, as
                # some monitoring tools do): call it once per iteration.
                run_once = self._run_once
                while True:
                    run_once()
                    if self._stopping:
                        break
            else:
                self._run_iterations(False)
        finally:
            self._run_forever_cleanup()

    def run_until_complete(self, future):
        """Run until ``future`` (a future, coroutine or awaitable) is done."""
        self._check_closed()
        self._check_running()
        new_task = not aio_futures.isfuture(future)
        future = aio_tasks.ensure_future(future, loop=self)
        if new_task:
            # Nobody else holds this task: a leftover is not worth a warning.
            future._log_destroy_pending = False
        future.add_done_callback(_run_until_complete_cb)
        try:
            try:
                self.run_forever()
            except BaseException:
                if new_task and future.done() and not future.cancelled():
                    # Mark the exception retrieved: it is being raised right now.
                    future.exception()
                raise
            finally:
                future.remove_done_callback(_run_until_complete_cb)
            if not future.done():
                raise RuntimeError("Event loop stopped before Future completed.")
            return future.result()
        finally:
            # The traceback of an exception raised from here keeps this
            # frame; the task holding that exception must not stay in it.
            future = None

    def close(self) -> None:
        """Close the loop: drop pending callbacks, release the fds."""
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self._closed:
            return
        if self._debug:
            logger.debug("Close %r", self)
        self._closed = True
        self._ready.clear()
        self._scheduled.clear()
        self._timers.clear()
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is not None:
            self._default_executor = None
            executor.shutdown(wait=False)
        self._close_offload()
        self._close_signals()
        self._close_subprocess()
        for table in (self._readers, self._writers):
            for handle in table.values():
                handle.cancel()
            table.clear()
        self._fileobjs.clear()
        self._io.close()
        self._waker.close()

    # -- futures and tasks -------------------------------------------------

    def create_future(self):
        """A new future attached to this loop."""
        return self._future_class(loop=self)

    def create_task(self, coro: Coroutine[Any, Any, Any], *, name=None, context=None):
        """Wrap ``coro`` in a task scheduled on this loop."""
        if self._closed:
            raise RuntimeError("Event loop is closed")
        factory = self._task_factory
        if factory is None:
            if self._task_class is Task:
                # Task(coro, loop=self, ...) without the keyword-argument call.
                task = _new_object(Task)
                task._setup(coro, self, name, context, False, 1)
            else:
                task = self._task_class(coro, loop=self, name=name, context=context)
            if task._source_traceback:
                del task._source_traceback[-1]
            return task
        # No ``task`` local: an eager factory runs the first step under this
        # frame, which an error's traceback then keeps (see Task._eager_start).
        if context is None:
            return _named(factory(self, coro), name)
        return _named(factory(self, coro, context=context), name)

    def set_task_factory(self, factory: Callable[..., Any] | None) -> None:
        """Use ``factory(loop, coro[, context=...])`` for ``create_task``."""
        if factory is not None and not callable(factory):
            raise TypeError("task factory must be a callable or None")
        self._task_factory = factory

    def get_task_factory(self):
        return self._task_factory

    # -- readiness callbacks -------------------------------------------------

    def _ensure_fd_no_transport(self, fd):
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

    def _fd_for(self, fileobj) -> int:
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

    def _add_reader(self, fd, callback, *args):
        self._check_closed()
        handle = Handle(callback, args, self, None)
        self._set_io_handle(self._fd_for(fd), handle, self._readers, READABLE, fd)
        return handle

    def _add_writer(self, fd, callback, *args):
        self._check_closed()
        handle = Handle(callback, args, self, None)
        self._set_io_handle(self._fd_for(fd), handle, self._writers, WRITABLE, fd)
        return handle

    def _remove_reader(self, fd):
        if self._closed:
            return False
        return self._clear_io_handle(self._fd_for(fd), self._readers, READABLE)

    def _remove_writer(self, fd):
        if self._closed:
            return False
        return self._clear_io_handle(self._fd_for(fd), self._writers, WRITABLE)

    def add_reader(self, fd, callback, *args) -> None:
        """Call ``callback(*args)`` whenever ``fd`` is readable."""
        self._ensure_fd_no_transport(fd)
        self._add_reader(fd, callback, *args)

    def remove_reader(self, fd) -> bool:
        """Stop watching ``fd`` for reading; True if it was watched."""
        self._ensure_fd_no_transport(fd)
        return self._remove_reader(fd)

    def add_writer(self, fd, callback, *args) -> None:
        """Call ``callback(*args)`` whenever ``fd`` is writable."""
        self._ensure_fd_no_transport(fd)
        self._add_writer(fd, callback, *args)

    def remove_writer(self, fd) -> bool:
        """Stop watching ``fd`` for writing; True if it was watched."""
        self._ensure_fd_no_transport(fd)
        return self._remove_writer(fd)
