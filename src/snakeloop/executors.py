"""Running blocking functions in threads: the default executor.

``run_in_executor(None, ...)`` lazily creates one ThreadPoolExecutor per
loop.  Shutting it down joins its threads from a helper thread, so the loop
keeps running while they finish; each Python version's timeout behaviour
for ``shutdown_default_executor`` is kept as asyncio has it.  asyncio then
joins the helper itself, blocking the loop thread for as long as the helper
takes to end; snakeloop polls for its end from the loop instead.
"""

from __future__ import annotations

import concurrent.futures
import sys
import threading
import warnings
from asyncio import futures, tasks, timeouts

from ._core.futures import _set_result_unless_cancelled

__all__ = ["ExecutorMixin"]

_PY312 = sys.version_info >= (3, 12)
_PY313 = sys.version_info >= (3, 13)

# Polling for the end of the shutdown helper thread (see _join_thread).
_JOIN_POLL_FIRST = 0.001
_JOIN_POLL_MAX = 0.05


class ExecutorMixin:
    """``run_in_executor``, ``set_default_executor``, ``shutdown_default_executor``."""

    def _init_executors(self):
        self._default_executor = None
        self._executor_shutdown_called = False

    def run_in_executor(self, executor, func, *args):
        """Run ``func(*args)`` in ``executor`` (None: the default one)."""
        self._check_closed()
        if self._debug:
            self._check_callback(func, "run_in_executor")
        if executor is None:
            executor = self._default_executor
            if self._executor_shutdown_called:
                raise RuntimeError("Executor shutdown has been called")
            if executor is None:
                executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="asyncio")
                self._default_executor = executor
        return futures.wrap_future(executor.submit(func, *args), loop=self)

    def set_default_executor(self, executor):
        if not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            raise TypeError("executor must be ThreadPoolExecutor instance")
        self._default_executor = executor

    def _do_shutdown(self, future):
        # Runs in a helper thread: the join must not block the loop.
        try:
            self._default_executor.shutdown(wait=True)
            if not self.is_closed():
                if _PY313:
                    self.call_soon_threadsafe(_set_result_unless_cancelled, future, None)
                else:
                    self.call_soon_threadsafe(future.set_result, None)
        except Exception as ex:
            if not self.is_closed() and not (_PY313 and future.cancelled()):
                self.call_soon_threadsafe(future.set_exception, ex)

    async def _shutdown_default_executor(self, timeout):
        self._executor_shutdown_called = True
        if self._default_executor is None:
            return
        future = self.create_future()
        thread = threading.Thread(target=self._do_shutdown, args=(future,))
        thread.start()
        if _PY313:
            try:
                async with timeouts.timeout(timeout):
                    await future
            except TimeoutError:
                self._warn_executor_timeout(timeout)
            else:
                await self._join_thread(thread, None)
            return
        try:
            await future
        finally:
            await self._join_thread(thread, timeout)
        if thread.is_alive():
            self._warn_executor_timeout(timeout)

    async def _join_thread(self, thread, timeout):
        # thread.join() as asyncio has it, without blocking the loop thread:
        # the helper has reported, but may still be finishing, and a blocking
        # join would hold the loop for that moment (or, on 3.12 after a
        # cancel, until the executor's threads end).  Each sleep of at least
        # a millisecond releases the GIL in the poll, which is what the
        # helper needs to finish.
        deadline = None if timeout is None else self.time() + timeout
        delay = _JOIN_POLL_FIRST
        while thread.is_alive():
            if deadline is not None:
                left = deadline - self.time()
                if left <= 0:
                    return
                delay = min(delay, left)
            await tasks.sleep(delay)
            delay = min(delay * 2, _JOIN_POLL_MAX)
        thread.join()  # it has ended: this only tidies up

    def _warn_executor_timeout(self, timeout):
        warnings.warn(
            f"The executor did not finishing joining its threads within {timeout} seconds.",
            RuntimeWarning,
            stacklevel=3,
        )
        self._default_executor.shutdown(wait=False)

    if _PY312:

        async def shutdown_default_executor(self, timeout=None):
            """Shut the default executor down, joining its threads."""
            await self._shutdown_default_executor(timeout)

    else:

        async def shutdown_default_executor(self):
            """Shut the default executor down, joining its threads."""
            await self._shutdown_default_executor(None)
