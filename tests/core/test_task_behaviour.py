"""Task behaviour beyond cancellation, against stdlib: misuse errors, reprs,
contexts, eager start, and sleeps on the fake clock."""

from __future__ import annotations

import asyncio
import collections.abc
import contextvars
import io
import re
import types

import pytest
from _loopkit import (
    LOOP_KINDS,
    PY312,
    FakeClock,
    Raised,
    assert_same,
    loop_ctx,
    mask_addresses,
    outcome,
    run_fake,
    run_once,
    snakeloop_module,
    task_class,
)


def result_of(loop, task):
    try:
        return ("ok", loop.run_until_complete(task))
    except BaseException as exc:  # noqa: BLE001 - compared
        return Raised(exc)


# ------------------------------------------------------------------- misuse


def test_task_set_result_and_set_exception_unsupported():
    def scenario(loop):
        async def work():
            return 1

        task = loop.create_task(work(), name="t")
        out = [outcome(task.set_result, 1), outcome(task.set_exception, ValueError())]
        loop.run_until_complete(task)
        return out

    result = assert_same(scenario)
    assert all(isinstance(r, Raised) and r.type is RuntimeError for r in result[1])


def test_task_awaiting_itself():
    def scenario(loop):
        async def selfish():
            await asyncio.current_task()

        return result_of(loop, loop.create_task(selfish(), name="selfish"))

    result = assert_same(scenario)
    assert result[1].type is RuntimeError


def test_coroutine_raising_stop_iteration():
    def scenario(loop):
        async def bad():
            raise StopIteration("leak")

        return result_of(loop, loop.create_task(bad(), name="bad"))

    result = assert_same(scenario)
    assert result[1].type is RuntimeError


class _HandMadeCoroutine(collections.abc.Coroutine):
    """A coroutine that is not a native one: yields None once, then returns ``value``."""

    def __init__(self, value):
        self._value = value
        self._steps = 0

    def send(self, _):
        self._steps += 1
        if self._steps == 1:
            return None
        raise StopIteration(self._value)

    def throw(self, *exc_info):
        raise exc_info[0] if len(exc_info) == 1 else exc_info[1]

    def close(self):
        pass

    def __await__(self):
        raise NotImplementedError


RETURNED_VALUES = {
    "none": lambda loop: None,
    "tuple": lambda loop: (1, 2),
    "false": lambda loop: False,
    "pending-future": lambda loop: loop.create_future(),
    "done-future": lambda loop: done_future(loop),
    "exception-instance": lambda loop: ValueError("returned, not raised"),
}


def done_future(loop):
    future = loop.create_future()
    future.set_result(1)
    return future


@pytest.mark.parametrize("native", [True, False], ids=["native", "hand-made"])
@pytest.mark.parametrize("value", sorted(RETURNED_VALUES))
def test_what_a_coroutine_returns_is_the_result_whatever_it_is(value, native):
    # The compiled Task tells a native coroutine's return from its yield by
    # PyIter_Send's status, and any other coroutine's by StopIteration: a
    # returned None, future or exception is the result, never awaited, raised
    # or run again.
    def scenario(loop):
        returned = RETURNED_VALUES[value](loop)

        async def native_coroutine():
            await asyncio.sleep(0)
            return returned

        coro = native_coroutine() if native else _HandMadeCoroutine(returned)
        task = loop.create_task(coro, name="t")
        loop.run_until_complete(task)
        result = task.result()
        if isinstance(returned, asyncio.Future) and not returned.done():
            returned.cancel()
        return result is returned, repr(type(result)) if result is not returned else None

    assert assert_same(scenario) == ("ok", (True, None))


def test_a_task_cancelled_in_its_last_step_is_cancelled_not_finished():
    def scenario(loop):
        async def cancel_self_then_return():
            await asyncio.sleep(0)
            asyncio.current_task().cancel("in the last step")
            return "value"

        task = loop.create_task(cancel_self_then_return(), name="t")
        return result_of(loop, task), task.cancelled()

    outcome_, cancelled = assert_same(scenario)[1]
    assert isinstance(outcome_, Raised) and outcome_.type is asyncio.CancelledError
    assert cancelled is True


def test_yield_instead_of_await():
    def scenario(loop):
        fut = loop.create_future()

        @types.coroutine
        def legacy():
            yield fut  # a bare yield of a future, without await

        async def main():
            await legacy()

        res = result_of(loop, loop.create_task(main(), name="legacy"))
        fut.cancel()
        return res

    result = assert_same(scenario)
    assert result[1].type is RuntimeError


@pytest.mark.parametrize(
    "arg",
    [pytest.param(lambda: 1, id="int"), pytest.param(lambda: None, id="none")],
)
def test_task_constructor_rejects_non_coroutine(arg):
    results = []
    for kind in ("stdlib-py", "snakeloop"):
        with loop_ctx(kind) as loop:
            results.append(outcome(task_class(kind), arg(), loop=loop))
    assert results[1] == results[0]
    assert isinstance(results[1], Raised)


def test_task_exception_with_base_exception_subclass():
    def scenario(loop):
        class Custom(BaseException):
            pass

        async def bad():
            raise Custom("custom")

        task = loop.create_task(bad(), name="bad")
        res = result_of(loop, task)
        return (
            type(res).__name__,
            res.message if isinstance(res, Raised) else res,
            task.done(),
            task.cancelled(),
        )

    assert_same(scenario)


# -------------------------------------------------------------------- reprs


def _repr_states(loop):
    fut = loop.create_future()

    async def work():
        await fut
        return "done"

    task = loop.create_task(work(), name="repr-task")
    reprs = [repr(task)]
    run_once(loop)
    reprs.append(repr(task))
    reprs.append(repr(fut))
    fut.set_result(None)
    loop.run_until_complete(task)
    reprs.append(repr(task))

    async def cancelled():
        await asyncio.sleep(3600)

    t2 = loop.create_task(cancelled(), name="cancelled-task")
    run_once(loop)
    t2.cancel()
    run_once(loop)
    run_once(loop)
    reprs.append(repr(t2))
    return [mask_addresses(r) for r in reprs]


def test_task_repr_matches_stdlib():
    """snakeloop's reprs read like asyncio's default Task's: the C one, or on PyPy (no
    _asyncio) the pure-Python one, whose wakeup callback has another name."""
    assert_same(_repr_states)


def test_task_stack():
    def scenario(loop):
        fut = loop.create_future()

        async def inner():
            await fut

        task = loop.create_task(inner(), name="stacked")
        run_once(loop)
        frames = [f.f_code.co_name for f in task.get_stack()]
        buf = io.StringIO()
        task.print_stack(file=buf)
        fut.set_result(None)
        loop.run_until_complete(task)
        # The header holds the task's repr, checked by test_task_repr_matches_stdlib.
        header = re.sub(r" cb=\[[^\]]*\]", "", mask_addresses(buf.getvalue()).splitlines()[0])
        return frames, header, len(buf.getvalue().splitlines()), task.get_stack()

    assert_same(scenario)


# ----------------------------------------------------------------- contexts


def test_task_runs_in_copied_context(any_loop):
    var = contextvars.ContextVar("var", default="outer")

    async def child():
        before = var.get()
        var.set("child")
        return before

    async def main():
        var.set("main")
        seen = await any_loop.create_task(child())
        return seen, var.get()

    assert any_loop.run_until_complete(main()) == ("main", "main")
    assert var.get() == "outer"


def test_done_callbacks_run_in_task_context(any_loop):
    var = contextvars.ContextVar("var", default="unset")
    seen = []

    async def work():
        var.set("inside")

    async def main():
        task = any_loop.create_task(work())
        task.add_done_callback(lambda t: seen.append(var.get()))
        await task
        await asyncio.sleep(0)

    var.set("creator")
    any_loop.run_until_complete(main())
    var.set("unset")
    # The callback runs in the context current when add_done_callback was
    # called (main's copy of the creator context), not the task's own.
    assert seen == ["creator"]


# ------------------------------------------------------------- eager tasks


@pytest.mark.skipif(not PY312, reason="eager tasks exist from Python 3.12")
def test_eager_task_factory():
    def scenario(loop):
        trace = []
        if isinstance(loop, snakeloop_module().Loop):
            task_cls = snakeloop_module().Task
        else:
            task_cls = task_class("stdlib-py")
        loop.set_task_factory(asyncio.create_eager_task_factory(task_cls))

        async def quick():
            trace.append(("quick ran", asyncio.current_task() is not None))
            return "quick"

        async def slow():
            trace.append("slow started")
            await asyncio.sleep(0)
            trace.append("slow resumed")
            return "slow"

        async def main():
            t1 = loop.create_task(quick(), name="quick")
            trace.append(("after quick", t1.done()))
            t2 = loop.create_task(slow(), name="slow")
            trace.append(("after slow", t2.done()))
            return await t1, await t2

        trace.append(loop.run_until_complete(main()))
        return trace

    result = assert_same(scenario)
    assert ("after quick", True) in result[1]


# --------------------------------------------------------- fake-time sleeps


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_sleeps_wake_at_their_deadlines(kind):
    clock = FakeClock()
    with loop_ctx(kind, clock=clock) as loop:
        woke = []
        start = loop.time()

        async def sleeper(delay):
            await asyncio.sleep(delay)
            woke.append((delay, loop.time() - start))

        async def main():
            await asyncio.gather(*(sleeper(d) for d in (3.0, 1.0, 2.5, 0.5, 2.0)))

        run_fake(loop, clock, main(), step=0.5)
    assert [d for d, _ in woke] == [0.5, 1.0, 2.0, 2.5, 3.0]
    assert all(at == pytest.approx(delay) for delay, at in woke)


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_long_sleep_costs_no_real_time(kind):
    clock = FakeClock()
    with loop_ctx(kind, clock=clock) as loop:

        async def main():
            await asyncio.sleep(86_400)
            return loop.time()

        start = loop.time()
        assert run_fake(loop, clock, main(), step=3_600) - start == 86_400


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_wait_for_times_out_on_fake_clock(kind):
    clock = FakeClock()
    with loop_ctx(kind, clock=clock) as loop:
        fut = loop.create_future()

        async def main():
            start = loop.time()
            try:
                await asyncio.wait_for(fut, 5)
            except TimeoutError:
                return loop.time() - start
            return None

        assert run_fake(loop, clock, main(), step=1.0) == 5.0
        assert fut.cancelled()


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_timeout_context_reschedule_on_fake_clock(kind):
    clock = FakeClock()
    with loop_ctx(kind, clock=clock) as loop:

        async def main():
            start = loop.time()
            try:
                async with asyncio.timeout(2) as cm:
                    await asyncio.sleep(1)
                    cm.reschedule(loop.time() + 3)
                    await asyncio.sleep(10)
            except TimeoutError:
                return loop.time() - start, cm.expired()
            return None

        assert run_fake(loop, clock, main(), step=0.5) == (4.0, True)


def test_wait_first_completed_on_fake_clock():
    def scenario(loop, clock):
        async def sleeper(d):
            await asyncio.sleep(d)
            return d

        async def main():
            tasks = [loop.create_task(sleeper(d), name=f"s{d}") for d in (3, 1, 2)]
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            first = sorted(t.result() for t in done)
            for t in pending:
                t.cancel()
            order = []
            for coro in asyncio.as_completed([sleeper(d) for d in (0.5, 1.5, 1.0)]):
                order.append(await coro)
            return first, order

        return run_fake(loop, clock, main(), step=0.5)

    results = []
    for kind in ("stdlib", "snakeloop"):
        clock = FakeClock()
        with loop_ctx(kind, clock=clock) as loop:
            results.append(outcome(scenario, loop, clock))
    assert results[1] == results[0]
    assert results[0] == ("ok", ([1], [0.5, 1.0, 1.5]))
