"""Resource hygiene: descriptors, threads, objects and the logs of lost work."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import weakref

import pytest
from _loopkit import (
    LOOP_KINDS,
    capture_logs,
    close_loop,
    collect_unless_refcounted,
    loop_ctx,
    new_fds,
    new_loop,
    open_fds,
    run_once,
)


class Payload:
    """Something to hold a weak reference to."""


def _cycle(kind: str, with_executor: bool) -> None:
    loop = new_loop(kind)
    try:

        async def work():
            await asyncio.sleep(0)
            if with_executor:
                return await loop.run_in_executor(None, sum, [1, 2])
            return 3

        assert loop.run_until_complete(work()) == 3
    finally:
        close_loop(loop)


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_create_close_cycles_leak_no_fds(kind):
    _cycle(kind, False)  # warm up lazily created module state
    before = open_fds()
    for _ in range(200):
        _cycle(kind, False)
    gc.collect()
    assert open_fds() == before


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_create_close_cycles_with_executor_leak_no_threads(kind):
    before_threads = set(threading.enumerate())
    before_fds = open_fds()
    for _ in range(30):
        _cycle(kind, True)
    gc.collect()
    assert set(threading.enumerate()) == before_threads
    assert open_fds() == before_fds


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_close_without_run_leaks_nothing(kind):
    before = open_fds()
    for _ in range(100):
        new_loop(kind).close()
    gc.collect()
    assert open_fds() == before


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_closed_loop_is_collectable(kind):
    loop = new_loop(kind)

    async def work():
        running = asyncio.get_running_loop()
        fut = running.create_future()
        running.call_soon(fut.set_result, 1)
        return await fut

    loop.run_until_complete(work())
    close_loop(loop)
    ref = weakref.ref(loop)
    del loop
    gc.collect()
    collect_unless_refcounted()  # PyPy frees an object with __del__ a collection later
    assert ref() is None


@pytest.mark.parametrize(
    "options",
    [
        {"perturb": "io_order"},
        {"replay": [("io_order", "")]},
        {"seed": "not a seed"},
        {"seed": 1, "perturb": "epoch"},
        {"on_deadlock": "shout"},
    ],
    ids=["perturb-without-seed", "replay-without-seed", "bad-seed", "epoch-without-virtual-time",
         "bad-on_deadlock"],
)  # fmt: skip
def test_a_refused_loop_opens_no_fd(options):
    import snakeloop

    before = open_fds()
    try:
        snakeloop.new_event_loop(**options)
    except ValueError:
        # While the error and its frames are still alive: nothing the refused loop opened
        # may wait for them, or for a collection, to be closed.
        assert new_fds(before, open_fds()) == {}
    else:
        pytest.fail(f"new_event_loop(**{options!r}) was not refused")


def test_loops_in_threads_leak_nothing():
    before_fds = open_fds()
    before_threads = set(threading.enumerate())
    errors = []

    def body(kind):
        try:
            loop = new_loop(kind)
            try:
                loop.run_until_complete(asyncio.sleep(0))
            finally:
                close_loop(loop)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    for _ in range(10):
        threads = [threading.Thread(target=body, args=(k,)) for k in LOOP_KINDS * 2]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert not errors
    gc.collect()
    assert open_fds() == before_fds
    assert set(threading.enumerate()) == before_threads


def test_reader_registration_cycles_leak_no_fds(any_loop):
    before = open_fds()
    for _ in range(200):
        a, b = socket.socketpair()
        any_loop.add_reader(a, lambda: None)
        any_loop.add_writer(b, lambda: None)
        run_once(any_loop)
        assert any_loop.remove_reader(a)
        assert any_loop.remove_writer(b)
        a.close()
        b.close()
    gc.collect()
    assert open_fds() == before


# ------------------------------------------------------ no retained objects


def test_callback_args_released_after_run(any_loop):
    payload = Payload()
    ref = weakref.ref(payload)
    any_loop.call_soon(lambda p: None, payload)
    del payload
    run_once(any_loop)
    run_once(any_loop)
    collect_unless_refcounted()
    assert ref() is None


def test_timer_args_released_after_run(fake_loop, fake_clock):
    payload = Payload()
    ref = weakref.ref(payload)
    fake_loop.call_later(1, lambda p: None, payload)
    del payload
    fake_clock.advance(1)
    run_once(fake_loop)
    run_once(fake_loop)
    collect_unless_refcounted()
    assert ref() is None


def test_failed_callback_released_after_run(any_loop, loop_errors):
    payload = Payload()
    ref = weakref.ref(payload)

    def bad(p):
        raise ValueError("x")

    any_loop.call_soon(bad, payload)
    del payload
    run_once(any_loop)
    assert len(loop_errors) == 1
    loop_errors.clear()
    gc.collect()
    assert ref() is None


def test_finished_task_not_retained(any_loop):
    async def work(p):
        await asyncio.sleep(0)
        return None

    payload = Payload()
    payload_ref = weakref.ref(payload)
    task = any_loop.create_task(work(payload))
    task_ref = weakref.ref(task)
    del payload
    any_loop.run_until_complete(task)
    del task
    gc.collect()
    assert task_ref() is None
    assert payload_ref() is None
    assert asyncio.all_tasks(any_loop) == set()


def test_done_future_callbacks_released(any_loop):
    fut = any_loop.create_future()
    payload = Payload()
    ref = weakref.ref(payload)

    def cb(f, p=payload):
        return None

    fut.add_done_callback(cb)
    del payload, cb
    fut.set_result(None)
    run_once(any_loop)
    run_once(any_loop)
    collect_unless_refcounted()
    assert ref() is None


def test_many_tasks_do_not_accumulate(any_loop):
    async def child(i):
        await asyncio.sleep(0)
        return i

    async def main():
        total = 0
        for i in range(500):
            total += await asyncio.ensure_future(child(i))
        return total, len(asyncio.all_tasks())

    total, alive = any_loop.run_until_complete(main())
    assert total == sum(range(500))
    assert alive == 1


def test_exception_traceback_does_not_pin_frames(any_loop):
    payload_ref = []

    async def fails():
        local = Payload()
        payload_ref.append(weakref.ref(local))
        raise RuntimeError("fail")

    async def main():
        try:
            await fails()
        except RuntimeError:
            pass

    any_loop.run_until_complete(main())
    gc.collect()
    assert payload_ref[0]() is None


# ----------------------------------------------------- logs of lost work


def first_line(record) -> str:
    return record.getMessage().split("\n", 1)[0]


def _lose_pending_task(loop):
    async def forever():
        await loop.create_future()

    task = loop.create_task(forever(), name="lost")
    run_once(loop)
    loop.close()
    del task
    gc.collect()


def test_task_destroyed_pending_is_logged(loop_kind, asyncio_errors):
    loop = new_loop(loop_kind)
    with capture_logs() as logs:
        _lose_pending_task(loop)
    messages = [first_line(r) for r in logs.records]
    assert messages == ["Task was destroyed but it is pending!"]
    assert [first_line(r) for r in asyncio_errors] == messages


def test_task_destroyed_pending_context(loop_kind):
    loop = new_loop(loop_kind)
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    _lose_pending_task(loop)
    assert len(contexts) == 1
    ctx = contexts[0]
    assert ctx["message"] == "Task was destroyed but it is pending!"
    assert ctx["task"].get_name() == "lost"
    contexts.clear()
    del ctx
    gc.collect()


def test_destroyed_pending_task_log_matches_stdlib(asyncio_errors):
    texts = []
    for kind in ("stdlib", "snakeloop"):
        loop = new_loop(kind)
        with capture_logs() as logs:
            _lose_pending_task(loop)
        texts.append([(lvl, text.split("\n")[0], text.count("\n")) for lvl, text in logs.texts()])
    assert texts[1] == texts[0]
    assert len(asyncio_errors) == 2


def test_unretrieved_future_exception_is_logged(loop_kind, asyncio_errors):
    with loop_ctx(loop_kind) as loop, capture_logs() as logs:
        fut = loop.create_future()
        fut.set_exception(ValueError("lost"))
        del fut
        gc.collect()
    assert [first_line(r) for r in logs.records] == ["Future exception was never retrieved"]
    assert isinstance(logs.records[0].exc_info[1], ValueError)
    assert asyncio_errors


def test_unretrieved_task_exception_is_logged(loop_kind, asyncio_errors):
    with loop_ctx(loop_kind) as loop:

        async def fails():
            raise KeyError("lost")

        with capture_logs() as logs:
            task = loop.create_task(fails())
            run_once(loop)
            assert task.done()
            del task
            gc.collect()
    assert [first_line(r) for r in logs.records] == ["Task exception was never retrieved"]
    assert isinstance(logs.records[0].exc_info[1], KeyError)
    assert asyncio_errors


def test_retrieved_exception_is_not_logged(any_loop):
    async def fails():
        raise KeyError("seen")

    with capture_logs() as logs:
        task = any_loop.create_task(fails())
        run_once(any_loop)
        assert isinstance(task.exception(), KeyError)
        fut = any_loop.create_future()
        fut.set_exception(ValueError())
        with pytest.raises(ValueError):
            fut.result()
        del task, fut
        gc.collect()
    assert logs.records == []


def test_cancelled_pending_task_is_not_logged(any_loop):
    async def forever():
        await any_loop.create_future()

    with capture_logs() as logs:
        task = any_loop.create_task(forever())
        run_once(any_loop)
        task.cancel()
        run_once(any_loop)
        run_once(any_loop)
        assert task.cancelled()
        del task
        gc.collect()
    assert logs.records == []
