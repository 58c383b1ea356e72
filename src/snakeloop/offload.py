"""Blocking system calls the loop makes for itself, run in a thread of the loop's own.

A few calls the loop needs can wait on a disk or a network filesystem:
``os.sendfile`` (a page-cache miss reads the file) and the ``stat``/
``remove`` of a Unix socket path.  asyncio makes them in the loop thread;
snakeloop hands them to one worker thread per loop, started on first use
and told to stop when the loop closes, and the loop runs on meanwhile.

The worker is not the default executor: that one belongs to the user, who
may replace it, shut it down (``run_in_executor`` then refuses work) or fill
it with long jobs, and none of that may hold up a sendfile.

A task awaiting a call that gets cancelled still waits for the call to
finish before it unwinds (``BlockingCall.finish`` returns the cancellation
instead of raising it): the caller must know what the call did, such as how
many bytes ``sendfile`` sent, to leave things consistent.  A call that has
not started yet is dropped instead.

``finish`` returns once the loop thread has heard that the call is over,
never straight away, even when the worker was done before ``finish`` was
called: so the loop runs at least one iteration during every call, as it
does while asyncio's native sendfile waits for the socket, and whether it
does no longer depends on which thread the scheduler ran first.

The loop lists the calls not yet heard of (``_offload_pending()``) and the
worker's thread (``_offload_threads()``) for its census of outside work
(``snakeloop.pending``), read only while it is idle.
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
import time
from asyncio import exceptions
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from ._core.contract import LoopMixinBase
from .executors import callable_name

if TYPE_CHECKING:
    import asyncio
    from typing import TypeVarTuple, Unpack

    from ._core.contract import LoopContract
    from .pending import Pending

    _Ts = TypeVarTuple("_Ts")

__all__ = ["BlockingCall", "OffloadMixin"]

_T = TypeVar("_T")


class _Wakeup:
    """What the worker's done callback needs: the loop and the task's waiter.

    Apart from the call, so that the concurrent future, which keeps its done
    callbacks after running them, does not lead back to the call that holds
    it: that would be a reference cycle per call.
    """

    __slots__ = ("loop", "waiter", "heard", "unheard", "name", "since")

    def __init__(self, loop: LoopContract, unheard: set[_Wakeup], name: str) -> None:
        self.loop = loop
        self.waiter: asyncio.Future[None] | None = None
        self.heard = False  # set in the loop thread once the call is over
        # The loop's census of calls not heard of yet: this one is in it until then.
        self.unheard = unheard
        self.name = name
        self.since = time.monotonic()
        unheard.add(self)


def _on_done(wakeup: _Wakeup, future: concurrent.futures.Future[object]) -> None:
    # In the worker thread, or in the loop thread if dropped before it ran.
    try:
        wakeup.loop.call_soon_threadsafe(_wake, wakeup)
    except RuntimeError:
        pass  # the loop closed meanwhile: nobody is waiting


def _wake(wakeup: _Wakeup) -> None:
    wakeup.heard = True
    wakeup.unheard.discard(wakeup)
    waiter = wakeup.waiter
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class BlockingCall(Generic[_T]):
    """One call running in the loop's worker thread."""

    __slots__ = ("_loop", "_future", "_wakeup")

    def __init__(
        self,
        loop: LoopContract,
        future: concurrent.futures.Future[_T],
        unheard: set[_Wakeup],
        name: str,
    ) -> None:
        self._loop = loop
        self._future = future
        self._wakeup = _Wakeup(loop, unheard, name)
        future.add_done_callback(functools.partial(_on_done, self._wakeup))

    async def finish(self) -> exceptions.CancelledError | None:
        """Wait until the call is over; return the cancellation that came meanwhile."""
        cancelled = None
        future = self._future
        wakeup = self._wakeup
        while not wakeup.heard:
            waiter = wakeup.waiter = self._loop.create_future()
            try:
                await waiter
            except exceptions.CancelledError as exc:
                cancelled = exc
                future.cancel()  # succeeds only if the call has not started
            finally:
                # Only wakeup holds it: a cancellation's traceback keeps this frame.
                del waiter
        wakeup.waiter = None
        return cancelled

    def result(self) -> _T:
        """The call's return value; raises what the call raised."""
        return self._future.result()

    def ran(self) -> bool:
        """False if the call was dropped before it started."""
        return not self._future.cancelled()


class OffloadMixin(LoopMixinBase):
    """The loop's worker thread for its own blocking calls."""

    def _init_offload(self) -> None:
        self._offload_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._offload_unheard: set[_Wakeup] = set()

    def _close_offload(self) -> None:
        # A call still running can no longer report: the census forgets it.
        self._offload_unheard.clear()
        executor = self._offload_executor
        if executor is not None:
            self._offload_executor = None
            # As for the default executor: close() does not wait for it.
            executor.shutdown(wait=False)

    def _call_blocking(self, func: Callable[[Unpack[_Ts]], _T], *args: *_Ts) -> BlockingCall[_T]:
        """Start ``func(*args)`` in the worker thread; await ``.finish()`` on the result."""
        executor = self._offload_executor
        if executor is None:
            executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="snakeloop-blocking"
            )
            self._offload_executor = executor
        future = executor.submit(func, *args)
        return BlockingCall(self, future, self._offload_unheard, callable_name(func))

    def _offload_pending(self) -> list[Pending]:
        """The worker's calls whose end the loop has not heard of yet."""
        from .pending import Pending  # the census: loaded when asked for

        calls = sorted(self._offload_unheard, key=_since)
        return [Pending("blocking", f"blocking call {call.name}", call.since) for call in calls]

    def _offload_threads(self) -> set[threading.Thread]:
        """The worker's thread, once started (it stays, idle, until the loop closes)."""
        executor = self._offload_executor
        if executor is None:
            return set()
        # ThreadPoolExecutor keeps its workers in _threads.
        return set(getattr(executor, "_threads", ()))


def _since(wakeup: _Wakeup) -> float:
    return wakeup.since
