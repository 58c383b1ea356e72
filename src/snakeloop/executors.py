"""Running blocking functions in threads: the loop's ``Executors``.

``run_in_executor(None, ...)`` lazily creates one ThreadPoolExecutor per
loop.  Shutting it down joins its threads from a helper thread, so the loop
keeps running while they finish; each Python version's timeout behaviour
for ``shutdown_default_executor`` is kept as asyncio has it.  asyncio then
joins the helper itself, blocking the loop thread for as long as the helper
takes to end; snakeloop polls for its end from the loop instead.

In virtual time and test mode (``loop._watch_outside_work``) the loop
also keeps a census of its unfinished jobs (``pending()``), read only while
it is idle.  A job counts from
its submission until its outcome has reached the loop's future, or, if that
future was cancelled, until the job itself has ended: either way something
outside the loop can still wake it.  The census holds the job's futures
weakly and drops finished entries in batches, so that a job costs a small
record and a set add, and nothing outlives what asyncio would keep.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import sys
import threading
import time
import warnings
import weakref
from asyncio import futures, tasks, timeouts
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ._core.futures import _set_result_unless_cancelled

if TYPE_CHECKING:
    from ._core.contract import LoopMixinBase
    from .pending import Pending

__all__ = ["Executors"]

_T = TypeVar("_T")

_PY313 = sys.version_info >= (3, 13)

# Polling for the end of the shutdown helper thread (see _join_thread).
_JOIN_POLL_FIRST = 0.001
_JOIN_POLL_MAX = 0.05

# warnings.warn's stacklevel that names the caller of
# loop.shutdown_default_executor(), as asyncio's does: past _warn_timeout,
# shutdown_default and the loop's delegate.
_CALLER_OF_SHUTDOWN = 4

# The census drops its finished entries once it has grown past this many,
# then past twice what it kept: linear work, spread over the submissions.
_PRUNE_FIRST = 64


def callable_name(func: object) -> str:
    """``module.qualname`` of what ``func`` runs, for reports.

    Looks through ``functools.partial`` and through the ``Context.run``
    partial that ``asyncio.to_thread`` submits, to the function inside.
    """
    while isinstance(func, functools.partial):
        inner = func.func
        if isinstance(getattr(inner, "__self__", None), contextvars.Context) and func.args:
            func = func.args[0]
        else:
            func = inner
    qualname = getattr(func, "__qualname__", None)
    if not isinstance(qualname, str):
        qualname = type(func).__qualname__
    module = getattr(func, "__module__", None)
    return f"{module}.{qualname}" if isinstance(module, str) else qualname


class _Job:
    """One run_in_executor job in the census; its futures are held weakly."""

    __slots__ = ("name", "since", "_source", "_future")

    def __init__(
        self,
        name: str,
        source: concurrent.futures.Future[Any],
        future: asyncio.Future[Any],
    ) -> None:
        self.name = name
        self.since = time.monotonic()
        self._source = weakref.ref(source)
        self._future = weakref.ref(future)

    def unfinished(self) -> bool:
        # Running (or queued) in its thread, or done there with the wakeup
        # that carries its outcome still on its way to the loop.  A dead
        # future is one nobody waits for; its job has ended (a queued or
        # running job's future holds the loop's future through its callback).
        source = self._source()
        if source is not None and not source.done():
            return True
        future = self._future()
        return future is not None and not future.done()


def _since(job: _Job) -> float:
    return job.since


class Executors:
    """``run_in_executor`` and the loop's default executor, made on first use.

    ``loop`` is used only through the loop contract (``_check_closed``,
    ``_debug``) and its public methods.
    """

    __slots__ = (
        "_loop",
        "_default",
        "_shutdown_called",
        "_jobs",
        "_prune_at",
        "_used",
        "_shutdown_thread",
        "_submitted",
        "_finished",
        "_finished_lock",
    )

    def __init__(self, loop: LoopMixinBase) -> None:
        self._loop = loop
        self._default: concurrent.futures.ThreadPoolExecutor | None = None
        self._shutdown_called = False
        self._jobs: set[_Job] = set()
        self._prune_at = _PRUNE_FIRST
        # Every executor this loop gave work to, for worker_threads().
        self._used: weakref.WeakSet[concurrent.futures.Executor] = weakref.WeakSet()
        self._shutdown_thread: threading.Thread | None = None
        # Jobs handed to executors and jobs their threads finished (the
        # metrics' executor_jobs gauge).  Worker threads count the second,
        # under a lock: an unlocked += from several threads can lose counts.
        self._submitted = 0
        self._finished = 0
        self._finished_lock = threading.Lock()

    def run(
        self,
        executor: concurrent.futures.Executor | None,
        func: Callable[..., _T],
        args: tuple[Any, ...],
    ) -> asyncio.Future[_T]:
        """``loop.run_in_executor(executor, func, *args)``."""
        loop = self._loop
        loop._check_closed()
        if loop._debug:
            loop._check_callback(func, "run_in_executor")
        if executor is None:
            executor = self._default
            if self._shutdown_called:
                raise RuntimeError("Executor shutdown has been called")
            if executor is None:
                executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="asyncio")
                self._default = executor
        source = executor.submit(func, *args)
        self._submitted += 1
        source.add_done_callback(self._job_finished)
        future = futures.wrap_future(source, loop=loop)
        if loop._watch_outside_work:
            # Virtual time and test mode only: the census costs a few
            # microseconds a job, which production does not pay.
            self._used.add(executor)
            jobs = self._jobs
            jobs.add(_Job(callable_name(func), source, future))
            if len(jobs) > self._prune_at:
                self._prune()
        return future

    def _job_finished(self, source: concurrent.futures.Future[Any]) -> None:
        with self._finished_lock:
            self._finished += 1

    def in_flight(self) -> int:
        """Jobs handed to an executor whose function has not returned yet."""
        return self._submitted - self._finished

    def _prune(self) -> None:
        jobs = self._jobs
        jobs.difference_update([job for job in jobs if not job.unfinished()])
        self._prune_at = max(_PRUNE_FIRST, 2 * len(jobs))

    def pending(self) -> list[Pending]:
        """This loop's unfinished jobs, on any executor, and the shutdown's joining thread."""
        from .pending import Pending  # the census: loaded when asked for

        self._prune()
        found = [
            Pending("executor", f"executor job {job.name}", job.since)
            for job in sorted(self._jobs, key=_since)
        ]
        thread = self._shutdown_thread
        if thread is not None and thread.is_alive():
            label = "shutdown_default_executor joining the executor's threads"
            found.append(Pending("executor", label, None))
        return found

    def worker_threads(self) -> set[threading.Thread]:
        """The threads of the executors this loop gave work to (idle or not).

        Only while the loop keeps the census (``_watch_outside_work``):
        without it a worker's job is unknown, so its thread is not claimed
        as idle.
        """
        threads: set[threading.Thread] = set()
        if not self._loop._watch_outside_work:
            return threads
        if self._default is not None:
            self._used.add(self._default)
        for executor in list(self._used):
            # ThreadPoolExecutor keeps its workers in _threads;
            # ProcessPoolExecutor has one thread of its own, the manager.
            threads.update(getattr(executor, "_threads", ()))
            manager = getattr(executor, "_executor_manager_thread", None)
            if isinstance(manager, threading.Thread):
                threads.add(manager)
        return threads

    def set_default(self, executor: concurrent.futures.Executor) -> None:
        """``loop.set_default_executor(executor)``."""
        if not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            raise TypeError("executor must be ThreadPoolExecutor instance")
        self._default = executor

    def close(self) -> None:
        """The loop is closing: refuse new work, let the threads end unwaited."""
        self._shutdown_called = True
        self._jobs.clear()
        executor = self._default
        if executor is not None:
            self._default = None
            executor.shutdown(wait=False)

    def disown_after_fork(self) -> None:
        """In a forked child: the executor's threads stayed in the parent."""
        self._shutdown_called = True
        self._default = None
        self._jobs.clear()
        self._used = weakref.WeakSet()
        self._shutdown_thread = None

    def _do_shutdown(self, future: asyncio.Future[None]) -> None:
        # Runs in a helper thread: the join must not block the loop.
        loop = self._loop
        try:
            self._default.shutdown(wait=True)  # type: ignore[union-attr]
            if not loop.is_closed():
                if _PY313:
                    loop.call_soon_threadsafe(_set_result_unless_cancelled, future, None)
                else:
                    loop.call_soon_threadsafe(future.set_result, None)
        except Exception as ex:
            if not loop.is_closed() and not (_PY313 and future.cancelled()):
                loop.call_soon_threadsafe(future.set_exception, ex)

    async def shutdown_default(self, timeout: float | None) -> None:
        """``loop.shutdown_default_executor([timeout])``: join the threads."""
        self._shutdown_called = True
        if self._default is None:
            return
        future = self._loop.create_future()
        thread = threading.Thread(target=self._do_shutdown, args=(future,))
        thread.start()
        self._shutdown_thread = thread
        if _PY313:
            try:
                async with timeouts.timeout(timeout):
                    await future
            except TimeoutError:
                self._warn_timeout(timeout)
            else:
                await self._join_thread(thread, None)
            return
        try:
            await future
        finally:
            await self._join_thread(thread, timeout)
        if thread.is_alive():
            self._warn_timeout(timeout)

    async def _join_thread(self, thread: threading.Thread, timeout: float | None) -> None:
        # thread.join() as asyncio has it, without blocking the loop thread:
        # the helper has reported, but may still be finishing, and a blocking
        # join would hold the loop for that moment (or, on 3.12 after a
        # cancel, until the executor's threads end).  Each sleep of at least
        # a millisecond releases the GIL in the poll, which is what the
        # helper needs to finish.
        now = self._loop.time
        deadline = None if timeout is None else now() + timeout
        delay = _JOIN_POLL_FIRST
        while thread.is_alive():
            if deadline is not None:
                left = deadline - now()
                if left <= 0:
                    return
                delay = min(delay, left)
            await tasks.sleep(delay)
            delay = min(delay * 2, _JOIN_POLL_MAX)
        thread.join()  # it has ended: this only tidies up

    def _warn_timeout(self, timeout: float | None) -> None:
        warnings.warn(
            f"The executor did not finishing joining its threads within {timeout} seconds.",
            RuntimeWarning,
            stacklevel=_CALLER_OF_SHUTDOWN,
        )
        self._default.shutdown(wait=False)  # type: ignore[union-attr]
