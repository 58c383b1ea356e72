"""Running blocking functions in threads: the loop's ``Executors``.

``run_in_executor(None, ...)`` lazily creates one ThreadPoolExecutor per
loop.  Shutting it down joins its threads from a helper thread, so the loop
keeps running while they finish; each Python version's timeout behaviour
for ``shutdown_default_executor`` is kept as asyncio has it.  asyncio then
joins the helper itself, blocking the loop thread for as long as the helper
takes to end; snakeloop polls for its end from the loop instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
import warnings
from asyncio import futures, tasks, timeouts
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ._core.futures import _set_result_unless_cancelled

if TYPE_CHECKING:
    from ._core.contract import LoopMixinBase

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


class Executors:
    """``run_in_executor`` and the loop's default executor, made on first use.

    ``loop`` is used only through the loop contract (``_check_closed``,
    ``_debug``) and its public methods.
    """

    __slots__ = ("_loop", "_default", "_shutdown_called")

    def __init__(self, loop: LoopMixinBase) -> None:
        self._loop = loop
        self._default: concurrent.futures.ThreadPoolExecutor | None = None
        self._shutdown_called = False

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
        return futures.wrap_future(executor.submit(func, *args), loop=loop)

    def set_default(self, executor: concurrent.futures.Executor) -> None:
        """``loop.set_default_executor(executor)``."""
        if not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            raise TypeError("executor must be ThreadPoolExecutor instance")
        self._default = executor

    def close(self) -> None:
        """The loop is closing: refuse new work, let the threads end unwaited."""
        self._shutdown_called = True
        executor = self._default
        if executor is not None:
            self._default = None
            executor.shutdown(wait=False)

    def disown_after_fork(self) -> None:
        """In a forked child: the executor's threads stayed in the parent."""
        self._shutdown_called = True
        self._default = None

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
