"""Cancellation corner cases, run on both loops.

Scenarios whose outcome is fixed across Python versions assert it directly on
each loop (``any_loop``); scenarios whose details moved between versions are
run on a stdlib loop and a snakeloop loop and the traces are compared.
"""

from __future__ import annotations

import asyncio

import pytest
from _loopkit import assert_same, run_iterations, run_once

CancelledError = asyncio.CancelledError


def exc_info(exc: BaseException) -> tuple[str, tuple]:
    return (type(exc).__name__, exc.args)


def task_state(task: asyncio.Future) -> tuple:
    if not task.done():
        return ("pending",)
    if task.cancelled():
        try:
            task.result()
        except CancelledError as exc:
            return ("cancelled", exc.args)
        raise AssertionError("cancelled task did not raise")
    exc = task.exception()
    if exc is not None:
        return ("exception", exc_info(exc))
    return ("result", task.result())


async def await_recording_cancel(fut, seen):
    """Await ``fut``; on cancellation record the error's args, then re-raise."""
    try:
        await fut
    except CancelledError as exc:
        seen.append(exc.args)
        raise


def finish(loop, *tasks, limit=50):
    for _ in range(limit):
        if all(t.done() for t in tasks):
            return
        run_once(loop)
    raise AssertionError("tasks did not finish")


# ------------------------------------------------------- cancel during wakeup


def test_cancel_after_result_before_wakeup(any_loop):
    """The awaited future got its result, the wakeup is queued, then cancel().

    cancel() returns True, the coroutine sees CancelledError carrying the
    message and the result is dropped.
    """
    trace = []
    fut = any_loop.create_future()

    async def body():
        try:
            value = await fut
        except CancelledError as exc:
            trace.append(("cancelled", exc.args))
            raise
        trace.append(("got", value))
        return value

    task = any_loop.create_task(body())
    run_once(any_loop)  # task now waits on fut
    assert trace == []
    fut.set_result(42)  # wakeup scheduled, not yet run
    assert task.cancel("late cancel") is True
    assert not task.done()
    assert task.cancelling() == 1
    finish(any_loop, task)
    assert trace == [("cancelled", ("late cancel",))]
    assert task_state(task) == ("cancelled", ("late cancel",))
    assert fut.result() == 42


def test_cancel_after_exception_before_wakeup(any_loop):
    trace = []
    fut = any_loop.create_future()

    async def body():
        try:
            await fut
        except CancelledError as exc:
            trace.append(("cancelled", exc.args))
            raise
        except ValueError as exc:  # pragma: no cover - must not happen
            trace.append(("value-error", exc.args))

    task = any_loop.create_task(body())
    run_once(any_loop)
    fut.set_exception(ValueError("dropped"))
    assert task.cancel("wins") is True
    finish(any_loop, task)
    assert trace == [("cancelled", ("wins",))]
    assert task_state(task) == ("cancelled", ("wins",))
    assert isinstance(fut.exception(), ValueError)  # retrieved: no log


def test_cancel_twice_during_wakeup_delivers_one_cancellation(any_loop):
    fut = any_loop.create_future()
    seen = []

    task = any_loop.create_task(await_recording_cancel(fut, seen))
    run_once(any_loop)
    fut.set_result(None)
    assert task.cancel("first") is True
    assert task.cancel("second") is True
    assert task.cancelling() == 2
    finish(any_loop, task)
    # The message is whatever stdlib keeps; compare against it below.
    assert len(seen) == 1
    assert seen[0] in (("first",), ("second",))


def test_cancel_twice_message_matches_stdlib():
    def scenario(loop):
        fut = loop.create_future()
        seen = []

        task = loop.create_task(await_recording_cancel(fut, seen))
        run_once(loop)
        fut.set_result(None)
        r = (task.cancel("first"), task.cancel("second"))
        finish(loop, task)
        return r, seen, task_state(task)

    assert_same(scenario)


def test_future_cancelled_with_message_reaches_coroutine(any_loop):
    fut = any_loop.create_future()
    seen = []

    task = any_loop.create_task(await_recording_cancel(fut, seen))
    run_once(any_loop)
    assert fut.cancel("from the future") is True
    finish(any_loop, task)
    assert seen == [("from the future",)]
    assert task_state(task) == ("cancelled", ("from the future",))
    # Cancelling the awaited future is not a cancel() of the task itself.
    assert task.cancelling() == 0


# ---------------------------------------------------- tasks waiting on nothing


def test_cancel_before_first_step_never_runs_body(any_loop):
    ran = []

    async def body():
        ran.append(True)

    task = any_loop.create_task(body())
    assert task.cancel("before start") is True
    finish(any_loop, task)
    assert ran == []
    assert task_state(task) == ("cancelled", ("before start",))


def test_cancel_task_that_yielded_bare(any_loop):
    """A task suspended on a bare yield (sleep(0)) has no future to cancel."""
    seen = []

    async def body():
        try:
            await asyncio.sleep(0)
        except CancelledError as exc:
            seen.append(exc.args)
            raise
        seen.append("not cancelled")

    task = any_loop.create_task(body())
    run_once(any_loop)  # task yielded, already rescheduled itself
    assert task.cancel("bare") is True
    finish(any_loop, task)
    assert seen == [("bare",)]
    assert task_state(task) == ("cancelled", ("bare",))


def test_task_cancels_itself(any_loop):
    seen = []

    async def body():
        me = asyncio.current_task()
        assert me.cancel("self") is True
        assert me.cancelling() == 1
        try:
            await asyncio.sleep(0)
        except CancelledError as exc:
            seen.append(exc.args)
            raise

    task = any_loop.create_task(body())
    finish(any_loop, task)
    assert seen == [("self",)]
    assert task.cancelled()


def test_cancel_done_task_returns_false(any_loop):
    async def body():
        return 7

    task = any_loop.create_task(body())
    finish(any_loop, task)
    assert task.cancel("too late") is False
    assert task.cancelling() == 0
    assert task_state(task) == ("result", 7)


def test_cancel_done_future_returns_false(any_loop):
    fut = any_loop.create_future()
    fut.set_result(1)
    assert fut.cancel() is False
    fut2 = any_loop.create_future()
    assert fut2.cancel("x") is True
    assert fut2.cancel("y") is False
    with pytest.raises(CancelledError) as info:
        fut2.result()
    assert info.value.args == ("x",)


# ------------------------------------------------------- cancelling / uncancel


def test_cancelling_counts_and_uncancel(any_loop):
    fut = any_loop.create_future()

    async def body():
        try:
            await fut
        except CancelledError:
            me = asyncio.current_task()
            counts = [me.cancelling()]
            counts.append(me.uncancel())
            counts.append(me.uncancel())
            counts.append(me.uncancel())  # never below zero
            return counts
        return None

    task = any_loop.create_task(body())
    run_once(any_loop)
    assert task.cancelling() == 0
    assert task.cancel() is True
    assert task.cancel() is True
    assert task.cancelling() == 2
    finish(any_loop, task)
    assert task_state(task) == ("result", [2, 1, 0, 0])
    assert task.cancelling() == 0


def test_swallowed_cancel_lets_task_finish(any_loop):
    fut = any_loop.create_future()
    trace = []

    async def body():
        try:
            await fut
        except CancelledError as exc:
            trace.append(("swallowed", exc.args))
        await asyncio.sleep(0)
        trace.append("after")
        return "done"

    task = any_loop.create_task(body())
    run_once(any_loop)
    task.cancel("ignored")
    finish(any_loop, task)
    assert trace == [("swallowed", ("ignored",)), "after"]
    assert task_state(task) == ("result", "done")
    assert task.cancelling() == 1  # nobody called uncancel()
    assert fut.cancelled()


def test_uncancel_before_task_runs_matches_stdlib():
    """3.13 forgets a pending cancel when uncancel() reaches zero; 3.11 does not."""

    def scenario(loop):
        fut = loop.create_future()
        trace = []

        async def body():
            try:
                await asyncio.sleep(0)
                await fut
            except CancelledError as exc:
                trace.append(("cancelled", exc.args))
                raise
            return "finished"

        task = loop.create_task(body())
        run_once(loop)
        trace.append(("cancel", task.cancel("m")))
        trace.append(("uncancel", task.uncancel()))
        run_iterations(loop, 3)
        if not task.done():
            fut.set_result(None)
        finish(loop, task)
        trace.append(task_state(task))
        return trace

    assert_same(scenario)


def test_timeout_uses_uncancel(any_loop):
    fut = any_loop.create_future()

    async def body():
        me = asyncio.current_task()
        try:
            async with asyncio.timeout(-1):
                await fut
        except TimeoutError:
            return ("timeout", me.cancelling())
        return ("no timeout",)

    task = any_loop.create_task(body())
    finish(any_loop, task)
    assert task_state(task) == ("result", ("timeout", 0))
    assert fut.cancelled()


def test_outer_cancel_beats_timeout(any_loop):
    fut = any_loop.create_future()

    async def body():
        async with asyncio.timeout(-1):
            await fut

    task = any_loop.create_task(body())
    run_once(any_loop)
    # The timeout has fired (its cancel is in flight); an outer cancel now
    # must win: the task ends cancelled, not with TimeoutError.
    task.cancel("outer")
    finish(any_loop, task)
    assert task.cancelled()


def test_outer_cancel_beats_timeout_matches_stdlib():
    def scenario(loop):
        fut = loop.create_future()

        async def body():
            async with asyncio.timeout(-1):
                await fut

        task = loop.create_task(body())
        run_once(loop)
        r = task.cancel("outer")
        finish(loop, task)
        return r, task_state(task), task.cancelling()

    assert_same(scenario)


# -------------------------------------------------------- await another task


def test_cancel_propagates_to_awaited_task(any_loop):
    inner_fut = any_loop.create_future()
    trace = []

    async def inner():
        try:
            await inner_fut
        except CancelledError as exc:
            trace.append(("inner", exc.args))
            raise

    async def outer(t):
        try:
            await t
        except CancelledError as exc:
            trace.append(("outer", exc.args))
            raise

    t_inner = any_loop.create_task(inner())
    t_outer = any_loop.create_task(outer(t_inner))
    run_iterations(any_loop, 2)
    assert t_outer.cancel("stop") is True
    finish(any_loop, t_outer, t_inner)
    assert trace == [("inner", ("stop",)), ("outer", ("stop",))]
    assert t_inner.cancelled()
    assert task_state(t_outer) == ("cancelled", ("stop",))
    assert t_inner.cancelling() == 1


def test_cancelled_task_result_twice_matches_stdlib():
    """result() hands out the stored CancelledError once, then a fresh one."""

    def scenario(loop):
        inner_fut = loop.create_future()

        async def inner():
            await inner_fut

        async def outer(t):
            await t

        t_inner = loop.create_task(inner())
        t_outer = loop.create_task(outer(t_inner))
        run_iterations(loop, 2)
        t_outer.cancel("stop")
        finish(loop, t_outer, t_inner)
        return [task_state(t_inner), task_state(t_inner), task_state(t_outer), task_state(t_outer)]

    assert_same(scenario)


def test_awaiting_cancelled_task_from_other_task(any_loop):
    async def victim():
        await asyncio.sleep(3600)

    async def watcher(t):
        try:
            await t
        except CancelledError as exc:
            return ("saw cancel", exc.args, asyncio.current_task().cancelling())

    t_victim = any_loop.create_task(victim())
    t_watch = any_loop.create_task(watcher(t_victim))
    run_iterations(any_loop, 2)
    t_victim.cancel("victim msg")
    finish(any_loop, t_victim, t_watch)
    assert task_state(t_watch) == ("result", ("saw cancel", ("victim msg",), 0))


# ----------------------------------------------------------- gather / shield


def test_cancel_with_message_through_gather(any_loop):
    futs = [any_loop.create_future() for _ in range(2)]
    trace = []

    async def child(i):
        try:
            await futs[i]
        except CancelledError as exc:
            trace.append((i, exc.args))
            raise

    async def parent():
        try:
            await asyncio.gather(child(0), child(1))
        except CancelledError as exc:
            trace.append(("parent", exc.args))
            raise

    task = any_loop.create_task(parent())
    run_iterations(any_loop, 3)
    assert task.cancel("through gather") is True
    finish(any_loop, task)
    assert sorted(trace[:2]) == [(0, ("through gather",)), (1, ("through gather",))]
    assert trace[2][0] == "parent"
    assert task.cancelled()


def test_cancel_through_gather_matches_stdlib():
    def scenario(loop):
        futs = [loop.create_future() for _ in range(3)]
        futs[2].set_result("ready")
        trace = []

        async def child(i):
            try:
                return await futs[i]
            except CancelledError as exc:
                trace.append((i, exc.args))
                raise

        async def parent():
            try:
                return await asyncio.gather(child(0), child(1), child(2))
            except CancelledError as exc:
                trace.append(("parent", exc.args))
                raise

        task = loop.create_task(parent())
        run_iterations(loop, 3)
        trace.append(("cancel", task.cancel("msg")))
        finish(loop, task)
        trace.append(task_state(task))
        return trace

    assert_same(scenario)


def test_gather_outer_future_cancel(any_loop):
    f1 = any_loop.create_future()
    f2 = any_loop.create_future()
    outer = asyncio.gather(f1, f2)
    assert outer.cancel("outer msg") is True
    run_iterations(any_loop, 3)
    assert f1.cancelled() and f2.cancelled()
    assert outer.done()
    with pytest.raises(CancelledError):
        outer.result()


def test_gather_outer_future_cancel_matches_stdlib():
    # The gathering future ends with set_exception(CancelledError(msg)),
    # so cancelled() is False while result() raises CancelledError.
    def scenario(loop):
        f1 = loop.create_future()
        f2 = loop.create_future()
        outer = asyncio.gather(f1, f2)
        r = outer.cancel("outer msg")
        run_iterations(loop, 3)
        return r, outer.cancelled(), task_state(outer), f1.cancelled(), task_state(f1)

    assert_same(scenario)


def test_gather_child_cancel_cancels_outer_unless_return_exceptions():
    def scenario(loop):
        results = []
        for return_exceptions in (False, True):
            f1 = loop.create_future()
            f2 = loop.create_future()
            outer = asyncio.gather(f1, f2, return_exceptions=return_exceptions)
            f1.cancel("child msg")
            f2.set_result(2)
            run_iterations(loop, 3)
            if outer.cancelled():
                try:
                    outer.result()
                except CancelledError as exc:
                    results.append(("cancelled", exc.args))
            else:
                res = outer.result()
                results.append([exc_info(r) if isinstance(r, BaseException) else r for r in res])
        return results

    assert_same(scenario)


def test_shield_protects_inner(any_loop):
    inner = any_loop.create_future()
    trace = []

    async def body():
        try:
            await asyncio.shield(inner)
        except CancelledError as exc:
            trace.append(("outer cancelled", exc.args))
            raise

    task = any_loop.create_task(body())
    run_once(any_loop)
    assert task.cancel("shielded") is True
    finish(any_loop, task)
    assert trace == [("outer cancelled", ("shielded",))]
    assert not inner.cancelled()
    inner.set_result("still fine")
    run_once(any_loop)
    assert inner.result() == "still fine"


def test_shield_inner_cancelled_propagates():
    def scenario(loop):
        inner = loop.create_future()
        trace = []

        async def body():
            try:
                await asyncio.shield(inner)
            except CancelledError as exc:
                trace.append(("cancelled", exc.args))
                raise

        task = loop.create_task(body())
        run_once(loop)
        inner.cancel("inner msg")
        finish(loop, task)
        trace.append(task_state(task))
        return trace

    assert_same(scenario)


def test_shield_of_task_keeps_running(any_loop):
    fut = any_loop.create_future()

    async def worker():
        return await fut

    async def body(t):
        await asyncio.shield(t)

    w = any_loop.create_task(worker())
    b = any_loop.create_task(body(w))
    run_iterations(any_loop, 2)
    b.cancel()
    finish(any_loop, b)
    assert b.cancelled()
    assert not w.done()
    fut.set_result("kept")
    finish(any_loop, w)
    assert w.result() == "kept"


# ------------------------------------------------------------ wait / wait_for


def test_wait_for_cancel_cancels_inner():
    def scenario(loop):
        fut = loop.create_future()

        async def body():
            return await asyncio.wait_for(fut, timeout=None)

        task = loop.create_task(body())
        run_iterations(loop, 2)
        r = task.cancel("wf")
        finish(loop, task)
        return r, task_state(task), fut.cancelled()

    assert_same(scenario)


def test_wait_for_zero_timeout():
    def scenario(loop):
        fut = loop.create_future()

        async def body():
            try:
                await asyncio.wait_for(fut, timeout=0)
            except TimeoutError:
                return ("timeout", asyncio.current_task().cancelling())

        task = loop.create_task(body())
        finish(loop, task)
        return task_state(task), fut.cancelled()

    assert_same(scenario)


def test_wait_does_not_cancel_children_on_cancel(any_loop):
    fut = any_loop.create_future()

    async def body():
        await asyncio.wait([fut])

    task = any_loop.create_task(body())
    run_iterations(any_loop, 2)
    task.cancel()
    finish(any_loop, task)
    assert task.cancelled()
    assert not fut.done()
    fut.cancel()


# ----------------------------------------------------------------- TaskGroup


def test_taskgroup_error_cancels_siblings():
    def scenario(loop):
        trace = []
        gate = loop.create_future()

        async def sibling(i):
            try:
                await gate
            except CancelledError as exc:
                trace.append((f"sibling{i}", exc.args))
                raise

        async def failing():
            await asyncio.sleep(0)
            raise ValueError("boom")

        async def body():
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(sibling(0))
                    tg.create_task(sibling(1))
                    tg.create_task(failing())
            except ExceptionGroup as eg:
                trace.append(("group", [exc_info(e) for e in eg.exceptions]))
            return asyncio.current_task().cancelling()

        task = loop.create_task(body())
        finish(loop, task)
        trace.append(task_state(task))
        return sorted(map(repr, trace))

    assert_same(scenario)


def test_taskgroup_outer_cancel():
    def scenario(loop):
        trace = []

        async def child():
            try:
                await asyncio.sleep(3600)
            except CancelledError as exc:
                trace.append(("child", exc.args))
                raise

        async def body():
            async with asyncio.TaskGroup() as tg:
                tg.create_task(child())
                await asyncio.sleep(3600)

        task = loop.create_task(body())
        run_iterations(loop, 2)
        task.cancel("tg")
        finish(loop, task)
        trace.append(task_state(task))
        return trace

    assert_same(scenario)


# ------------------------------------------------- awaiting inside finally


def test_cancel_while_handling_cancel():
    def scenario(loop):
        fut1 = loop.create_future()
        fut2 = loop.create_future()
        trace = []

        async def body():
            try:
                await fut1
            except CancelledError as exc:
                trace.append(("first", exc.args))
                try:
                    await fut2
                except CancelledError as exc2:
                    trace.append(("second", exc2.args))
                    raise
                raise

        task = loop.create_task(body())
        run_once(loop)
        trace.append(task.cancel("one"))
        run_iterations(loop, 2)
        trace.append(task.cancel("two"))
        finish(loop, task)
        trace.append(task_state(task))
        trace.append(task.cancelling())
        return trace

    result = assert_same(scenario)
    assert result[0] == "ok"


def test_cancelled_error_subclass_and_message_from_result():
    def scenario(loop):
        fut = loop.create_future()
        fut.cancel("the msg")
        out = []
        try:
            fut.result()
        except CancelledError as exc:
            out.append(("result", type(exc).__name__, exc.args))
        try:
            fut.exception()
        except CancelledError as exc:
            out.append(("exception", type(exc).__name__, exc.args))
        return out

    assert_same(scenario)
