"""Cross-thread entry points: call_soon_threadsafe, executors, run_coroutine_threadsafe."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import statistics
import threading
import time

import pytest
from _loopkit import LOOP_KINDS, Raised, assert_same, close_loop, new_loop, outcome, run_once

SAFETY = 30.0  # seconds; only reached when something is broken


def flood(loop, n_threads: int, per_thread: int) -> list[list[int]]:
    """n_threads threads each send per_thread numbered callbacks; return them per thread."""
    received: list[list[int]] = [[] for _ in range(n_threads)]
    total = n_threads * per_thread
    count = [0]

    def deliver(tid, i):
        received[tid].append(i)
        count[0] += 1
        if count[0] == total:
            loop.stop()

    barrier = threading.Barrier(n_threads + 1)

    def producer(tid):
        barrier.wait()
        send = loop.call_soon_threadsafe
        for i in range(per_thread):
            send(deliver, tid, i)

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    watchdog = loop.call_later(SAFETY * 4, loop.stop)
    try:
        barrier.wait()
        loop.run_forever()
    finally:
        watchdog.cancel()
        for th in threads:
            th.join()
    assert count[0] == total, f"only {count[0]} of {total} callbacks delivered"
    return received


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_call_soon_threadsafe_flood_small(kind):
    loop = new_loop(kind)
    try:
        received = flood(loop, 8, 10_000)
    finally:
        close_loop(loop)
    for tid, got in enumerate(received):
        assert got == list(range(10_000)), f"thread {tid} out of order or lossy"


def test_call_soon_threadsafe_flood_full():
    loop = new_loop("snakeloop")
    try:
        received = flood(loop, 8, 100_000)
    finally:
        close_loop(loop)
    for tid, got in enumerate(received):
        assert got == list(range(100_000)), f"thread {tid} out of order or lossy"


@pytest.mark.stress
@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_call_soon_threadsafe_flood_stress(kind):
    loop = new_loop(kind)
    try:
        for _ in range(3):
            received = flood(loop, 8, 200_000)
            for got in received:
                assert got == list(range(200_000))
    finally:
        close_loop(loop)


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_threadsafe_callbacks_interleave_with_local_ones(kind):
    """A busy loop (always something ready) still picks up foreign callbacks."""
    loop = new_loop(kind)
    try:
        seen = []
        local_runs = [0]

        def local():
            local_runs[0] += 1
            if len(seen) < 1000:
                loop.call_soon(local)
            else:
                loop.stop()

        def producer():
            for i in range(1000):
                loop.call_soon_threadsafe(seen.append, i)

        loop.call_soon(local)
        th = threading.Thread(target=producer)
        th.start()
        watchdog = loop.call_later(SAFETY, loop.stop)
        loop.run_forever()
        watchdog.cancel()
        th.join()
        assert seen == list(range(1000))
        assert local_runs[0] >= 1
    finally:
        close_loop(loop)


@contextlib.contextmanager
def loop_in_thread(kind: str, **kwargs):
    """A loop running run_forever() in a background thread."""
    loop = new_loop(kind, **kwargs)
    started = threading.Event()
    errors: list[BaseException] = []

    def runner():
        try:
            loop.call_soon(started.set)
            loop.run_forever()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=runner, name=f"{kind}-loop")
    thread.start()
    try:
        assert started.wait(SAFETY), "loop thread did not start"
        yield loop
    finally:
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(SAFETY)
        alive = thread.is_alive()
        if not alive:
            close_loop(loop)
        assert not alive, "loop thread did not stop: call_soon_threadsafe did not wake it"
        assert not errors, errors


@pytest.mark.slow
@pytest.mark.parametrize("kind", LOOP_KINDS)
@pytest.mark.parametrize(
    "far_timer", [None, 3600, 1e9], ids=["no-timer", "hour-timer", "huge-timer"]
)
def test_idle_loop_woken_promptly(kind, far_timer):
    """Also checks that a poll timeout from a far deadline neither overflows nor spins."""
    latencies = []
    with loop_in_thread(kind) as loop:
        if far_timer is not None:
            far = concurrent.futures.Future()
            loop.call_soon_threadsafe(
                lambda: far.set_result(loop.call_later(far_timer, lambda: None))
            )
            far_handle = far.result(SAFETY)
        idle_wall = idle_cpu = 0.0
        for _ in range(5):
            # Let the loop settle into its blocking poll; an idle loop must
            # not burn CPU meanwhile (process time covers the loop thread).
            cpu0, wall0 = time.process_time(), time.perf_counter()
            time.sleep(0.1)
            idle_cpu += time.process_time() - cpu0
            idle_wall += time.perf_counter() - wall0
            woke = threading.Event()
            stamp = []

            def cb(stamp=stamp, woke=woke):
                stamp.append(time.perf_counter())
                woke.set()

            t0 = time.perf_counter()
            loop.call_soon_threadsafe(cb)
            assert woke.wait(SAFETY), "idle loop never woke up"
            latencies.append(stamp[0] - t0)
        if far_timer is not None:
            loop.call_soon_threadsafe(far_handle.cancel)
    assert statistics.median(latencies) < 0.05, latencies
    assert max(latencies) < 1.0, latencies
    assert idle_cpu < 0.5 * idle_wall, f"idle loop used {idle_cpu:.3f}s CPU in {idle_wall:.3f}s"


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_stop_from_other_thread(kind):
    with loop_in_thread(kind) as loop:
        assert loop.is_running()
        loop.call_soon_threadsafe(loop.stop)
        deadline = time.monotonic() + SAFETY
        while loop.is_running() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert not loop.is_running()


def test_call_soon_from_foreign_thread_in_debug_mode():
    def scenario(loop):
        loop.set_debug(True)
        box = []

        def other():
            box.append(outcome(loop.call_soon, lambda: None))

        async def main():
            th = threading.Thread(target=other)
            th.start()
            await loop.run_in_executor(None, th.join)
            return box[0]

        result = loop.run_until_complete(main())
        if isinstance(result, Raised):
            return result
        return "no error"

    ref = assert_same(scenario)
    assert isinstance(ref[1], Raised) and ref[1].type is RuntimeError


# ------------------------------------------------------------ run_in_executor


def test_run_in_executor_runs_in_a_thread(any_loop):
    async def main():
        ident = await any_loop.run_in_executor(None, threading.get_ident)
        return ident

    assert any_loop.run_until_complete(main()) != threading.get_ident()


def test_run_in_executor_passes_args_and_returns(any_loop):
    async def main():
        return await any_loop.run_in_executor(None, pow, 2, 10)

    assert any_loop.run_until_complete(main()) == 1024


def test_run_in_executor_exception_propagates(any_loop):
    def boom():
        raise ValueError("from the thread")

    async def main():
        with pytest.raises(ValueError, match="from the thread"):
            await any_loop.run_in_executor(None, boom)

    any_loop.run_until_complete(main())


def test_run_in_executor_custom_executor(any_loop):
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="custom") as ex:

        async def main():
            return await any_loop.run_in_executor(ex, lambda: threading.current_thread().name)

        name = any_loop.run_until_complete(main())
    assert name.startswith("custom")


def test_set_default_executor(any_loop):
    ex = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dflt")
    any_loop.set_default_executor(ex)

    async def main():
        return await any_loop.run_in_executor(None, lambda: threading.current_thread().name)

    assert any_loop.run_until_complete(main()).startswith("dflt")
    any_loop.run_until_complete(any_loop.shutdown_default_executor())
    with pytest.raises(RuntimeError):
        ex.submit(int)


def test_set_default_executor_rejects_non_thread_pool():
    def scenario(loop):
        class NotAPool(concurrent.futures.Executor):
            pass

        return outcome(loop.set_default_executor, NotAPool())

    assert_same(scenario)


def test_shutdown_default_executor_joins_threads(any_loop):
    before = set(threading.enumerate())

    async def main():
        await asyncio.gather(*(any_loop.run_in_executor(None, time.sleep, 0) for _ in range(4)))

    any_loop.run_until_complete(main())
    workers = set(threading.enumerate()) - before
    assert workers, "the default executor should have started worker threads"
    any_loop.run_until_complete(any_loop.shutdown_default_executor())
    assert not any(th.is_alive() for th in workers)


def test_run_in_executor_after_shutdown():
    def scenario(loop):
        async def main():
            await loop.shutdown_default_executor()
            try:
                await loop.run_in_executor(None, int)
            except BaseException as exc:  # noqa: BLE001
                return Raised(exc)
            return "ran"

        return loop.run_until_complete(main())

    assert_same(scenario)


def test_to_thread_propagates_context(any_loop):
    var = contextvars.ContextVar("var")

    async def main():
        var.set("in-task")
        return await asyncio.to_thread(var.get)

    assert any_loop.run_until_complete(main()) == "in-task"


def test_cancel_run_in_executor_future(any_loop):
    gate = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as ex:

        async def main():
            blocker = any_loop.run_in_executor(ex, gate.wait, SAFETY)
            queued = any_loop.run_in_executor(ex, int, "5")
            await asyncio.sleep(0)
            queued.cancel()
            gate.set()
            assert await blocker is True
            return queued.cancelled()

        assert any_loop.run_until_complete(main()) is True


# ---------------------------------------------------- run_coroutine_threadsafe


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_run_coroutine_threadsafe_result(kind):
    with loop_in_thread(kind) as loop:

        async def work(x):
            await asyncio.sleep(0)
            return x * 2, asyncio.get_running_loop() is loop

        cf = asyncio.run_coroutine_threadsafe(work(21), loop)
        assert cf.result(SAFETY) == (42, True)


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_run_coroutine_threadsafe_exception(kind):
    with loop_in_thread(kind) as loop:

        async def work():
            raise KeyError("k")

        cf = asyncio.run_coroutine_threadsafe(work(), loop)
        with pytest.raises(KeyError):
            cf.result(SAFETY)


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_run_coroutine_threadsafe_cancel(kind):
    with loop_in_thread(kind) as loop:
        entered = threading.Event()
        saw_cancel = threading.Event()

        async def work():
            entered.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                saw_cancel.set()
                raise

        cf = asyncio.run_coroutine_threadsafe(work(), loop)
        assert entered.wait(SAFETY)
        assert cf.cancel() is True
        assert saw_cancel.wait(SAFETY)
        assert cf.cancelled()


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_run_coroutine_threadsafe_sees_task(kind):
    with loop_in_thread(kind) as loop:

        async def work():
            task = asyncio.current_task()
            return task is not None and task in asyncio.all_tasks()

        assert asyncio.run_coroutine_threadsafe(work(), loop).result(SAFETY) is True


def test_run_coroutine_threadsafe_requires_coroutine(any_loop):
    with pytest.raises(TypeError, match="A coroutine object is required"):
        asyncio.run_coroutine_threadsafe(42, any_loop)


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_many_threads_submit_coroutines(kind):
    with loop_in_thread(kind) as loop:

        async def work(i):
            await asyncio.sleep(0)
            return i

        results = [None] * 8

        def submitter(t):
            futs = [asyncio.run_coroutine_threadsafe(work(t * 100 + i), loop) for i in range(100)]
            results[t] = [f.result(SAFETY) for f in futs]

        threads = [threading.Thread(target=submitter, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(SAFETY)
        assert results == [list(range(t * 100, t * 100 + 100)) for t in range(8)]


def test_call_soon_threadsafe_on_loop_before_running(any_loop):
    seen = []
    th = threading.Thread(target=any_loop.call_soon_threadsafe, args=(seen.append, "x"))
    th.start()
    th.join()
    run_once(any_loop)
    assert seen == ["x"]


# ------------------------------------------- call_soon_threadsafe's handle (3.14)
# From 3.14 (and in the 3.13 releases that have the class) asyncio's call_soon_threadsafe
# returns an events._ThreadSafeHandle: cancel() and cancelled() from another thread wait
# while the callback runs, and a callback cancelled before it starts does not run.


def _threadsafe_handle_scenario(loop):
    """What another thread sees of call_soon_threadsafe's handle, on this loop."""
    seen: dict[str, object] = {}
    started, about_to_cancel, cancel_returned = (threading.Event() for _ in range(3))
    ran: list[str] = []

    def callback(arg):
        started.set()
        about_to_cancel.wait(SAFETY)
        # The other thread is in cancel() or about to be: give it time to get there.
        # It must still be waiting when the callback ends, on a thread-safe handle.
        time.sleep(0.05)
        seen["cancel_returned_while_running"] = cancel_returned.is_set()
        ran.append(arg)

    def other_thread():
        handle = loop.call_soon_threadsafe(callback, "hello")
        seen["is_threadsafe"] = isinstance(
            handle, getattr(asyncio.events, "_ThreadSafeHandle", type(None))
        )
        seen["repr"] = repr(handle).split()[0]
        started.wait(SAFETY)
        about_to_cancel.set()
        handle.cancel()
        cancel_returned.set()
        seen["cancelled_after"] = handle.cancelled()
        # Cancelled before it runs: never runs.
        gate = threading.Event()
        loop.call_soon_threadsafe(gate.wait, SAFETY)
        late = loop.call_soon_threadsafe(ran.append, "cancelled in time")
        late.cancel()
        seen["late_cancelled"] = late.cancelled()
        gate.set()
        loop.call_soon_threadsafe(loop.stop)

    thread = threading.Thread(target=other_thread)
    thread.start()
    loop.run_forever()
    thread.join(SAFETY)
    seen["ran"] = ran
    return seen


def test_call_soon_threadsafe_handle_as_on_asyncio():
    got = assert_same(_threadsafe_handle_scenario)[1]
    assert got["ran"] == ["hello"]
    assert got["late_cancelled"] is True
    if hasattr(asyncio.events, "_ThreadSafeHandle"):
        assert got["is_threadsafe"] is True
        assert got["cancel_returned_while_running"] is False
        assert got["repr"] == "<_ThreadSafeHandle"


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_call_soon_threadsafe_handle_cancelled_by_its_own_callback(kind):
    """A callback that cancels its own handle runs to the end (same thread: no wait)."""
    loop = new_loop(kind)
    try:
        handles: list[asyncio.Handle] = []
        ran = []

        def callback():
            handles[0].cancel()
            ran.append(handles[0].cancelled())

        handles.append(loop.call_soon_threadsafe(callback))
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert ran == [True]
        if hasattr(asyncio.Handle, "get_context"):  # 3.12+
            assert type(handles[0].get_context()) is contextvars.Context
    finally:
        close_loop(loop)
