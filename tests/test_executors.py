"""R-EX-1: default executor shutdown, on both loops."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest
from _loopkit import PY312, PY313, run

pytestmark = pytest.mark.reliability


def _executor_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("asyncio")]


def test_r_ex_1_many_calls_half_cancelled(any_loop):
    loop = any_loop
    rng = random.Random(1)
    baseline = len(_executor_threads())

    def work(i):
        time.sleep(((i * 7919) % 1000) / 2_000_000)  # up to 0.5 ms
        return i * i

    async def main():
        futures = [loop.run_in_executor(None, work, i) for i in range(1000)]
        # A job can finish before run_in_executor returns: its future is then done
        # already (asyncio's wrap_future copies a finished job's result at once), and
        # cancel() says so.  Only those that cancel() cancelled must end cancelled.
        cancelled = {i for i in rng.sample(range(1000), 500) if futures[i].cancel()}
        assert len(cancelled) >= 400
        results = await asyncio.gather(*futures, return_exceptions=True)
        for i, result in enumerate(results):
            if i in cancelled:
                assert isinstance(result, asyncio.CancelledError)
            else:
                assert result == i * i
        await loop.shutdown_default_executor()
        with pytest.raises(RuntimeError, match="Executor shutdown has been called"):
            loop.run_in_executor(None, work, 0)

    run(loop, main(), 60)
    assert len(_executor_threads()) == baseline


@pytest.mark.skipif(not PY312, reason="shutdown_default_executor() takes a timeout from 3.12")
@pytest.mark.xfail(
    not PY313,
    strict=True,
    raises=pytest.fail.Exception,  # DID NOT WARN: the worker ended before the join
    reason="3.12 awaits the executor's shutdown before it applies the timeout "
    "(asyncio 3.12 behaviour, which snakeloop keeps); 3.13 bounds the wait",
)
def test_r_ex_1_shutdown_timeout_with_blocked_worker(any_loop):
    loop = any_loop
    release = threading.Event()

    async def main():
        # Blocked far beyond the timeout below, and not for ever: 3.12 waits it out.
        fut = loop.run_in_executor(None, release.wait, 3)
        await asyncio.sleep(0.01)
        start = time.monotonic()
        with pytest.warns(RuntimeWarning, match="did not finishing joining its threads"):
            await loop.shutdown_default_executor(timeout=0.5)
        elapsed = time.monotonic() - start
        release.set()
        await fut
        return elapsed

    try:
        elapsed = run(loop, main(), 30)
    finally:
        release.set()
    assert 0.4 <= elapsed <= 1.0
    for t in _executor_threads():
        t.join(5)


def test_r_ex_1_close_never_joins(any_loop):
    loop = any_loop
    release = threading.Event()

    async def main():
        loop.run_in_executor(None, release.wait, 30)
        await asyncio.sleep(0.01)

    loop.run_until_complete(main())
    start = time.monotonic()
    loop.close()
    elapsed = time.monotonic() - start
    release.set()
    for t in _executor_threads():
        t.join(5)
    assert elapsed < 0.5
