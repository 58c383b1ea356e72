"""Futures and tasks pass the stdlib's class checks on every loop.

Libraries check ``isinstance(x, asyncio.Future)`` and ``isinstance(t,
asyncio.Task)``, and anyio decides with the first whether a task may be
cancelled: a check that fails there loses a wake-up or a stream item.
snakeloop's own classes answer these checks through ``__class__`` (see
``snakeloop._core.futures``), while ``type()`` stays the real class.
"""

from __future__ import annotations

import asyncio

import pytest
from _loopkit import close_loop

import snakeloop
from snakeloop._core.futures import Future as SnakeFuture
from snakeloop._core.futures import Task as SnakeTask


async def _idle():
    await asyncio.sleep(0)


@pytest.fixture
def loop():
    """A snakeloop loop making snakeloop's own classes (from 3.14 the default is asyncio's)."""
    made = snakeloop.new_event_loop(stdlib_futures=False)
    yield made
    close_loop(made)


def _objects(loop):
    fut = loop.create_future()
    task = loop.create_task(_idle())
    return fut, task


def _finish(loop, task):
    loop.run_until_complete(task)


def test_isinstance_checks_hold_on_every_loop(any_loop):
    fut, task = _objects(any_loop)
    assert isinstance(fut, asyncio.Future)
    assert not isinstance(fut, asyncio.Task)
    assert isinstance(task, asyncio.Task)
    assert isinstance(task, asyncio.Future)
    assert asyncio.isfuture(fut) and asyncio.isfuture(task)
    assert fut.__class__.__name__ == "Future"
    assert task.__class__.__name__ == "Task"
    assert repr(fut).startswith("<Future pending")
    _finish(any_loop, task)


def test_snakeloop_objects_keep_their_real_type(loop):
    fut, task = _objects(loop)
    assert type(fut) is SnakeFuture and type(task) is SnakeTask
    assert isinstance(fut, snakeloop.Future) and isinstance(task, snakeloop.Task)
    assert not isinstance(fut, snakeloop.Task)
    # The class isinstance() is shown stands for the real one: calling it
    # builds a real snakeloop future, initialised once.
    other = fut.__class__(loop=loop)
    assert type(other) is SnakeFuture and other.get_loop() is loop and not other.done()
    _finish(loop, task)


def test_stdlib_futures_option_gives_the_c_classes():
    loop = snakeloop.new_event_loop(stdlib_futures=True)
    try:
        fut, task = _objects(loop)
        assert type(fut) is asyncio.Future and type(task) is asyncio.Task
        _finish(loop, task)
    finally:
        loop.close()


def test_uninitialised_objects_answer_class_checks():
    fut = SnakeFuture.__new__(SnakeFuture)
    assert isinstance(fut, asyncio.Future) and fut.__class__.__name__ == "Future"


def test_a_subclass_is_its_own_class(loop):
    class Recording(SnakeTask):
        label = "recording"

    task = Recording(_idle(), loop=loop)
    assert task.__class__ is Recording and task.__class__.label == "recording"
    assert isinstance(task, SnakeTask)
    _finish(loop, task)


def test_class_assignment_works_as_on_asyncios_future_of_the_same_build(loop):
    # Interpreted, a future's class can be changed to a subclass, as an
    # asyncio pure-Python Future's can.  Compiled, the class is a C type,
    # whose instances keep their class, as asyncio's C Future's do.
    class Marked(SnakeFuture):
        pass

    fut = loop.create_future()
    if snakeloop.COMPILED:

        class CMarked(asyncio.Future):  # type: ignore[type-arg]
            pass

        with pytest.raises(TypeError) as expected:
            asyncio.Future(loop=loop).__class__ = CMarked
        with pytest.raises(TypeError) as got:
            fut.__class__ = Marked
        assert str(got.value) == str(expected.value)
        assert type(fut) is SnakeFuture
        return
    fut.__class__ = Marked
    assert type(fut) is Marked and fut.__class__ is Marked
    with pytest.raises(TypeError):
        fut.__class__ = int


# anyio's asyncio backend (CancelScope._deliver_cancellation) skips a task
# whose waiter already holds its result, only when that waiter is an
# asyncio.Future.  Written out here so the rule is checked without anyio.
def _anyio_would_cancel(task) -> bool:
    waiter = task._fut_waiter
    return not isinstance(waiter, asyncio.Future) or not waiter.done()


def test_a_task_woken_in_this_iteration_is_not_cancelled(any_loop):
    async def scenario():
        event = asyncio.Event()
        woke = []

        async def waiter():
            await event.wait()
            woke.append(True)

        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0)
        event.set()  # the waiter's future is done; its wakeup is queued
        cancelled = _anyio_would_cancel(task)
        if cancelled:
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return cancelled, woke

    cancelled, woke = any_loop.run_until_complete(scenario())
    assert not cancelled and woke == [True]


def _classes_made_after_asyncio_swapped_them(loop):
    """asyncio's loop looks ``futures.Future`` and ``tasks.Task`` up at each call: a test
    that points them at the pure-Python classes after the loop exists (CPython's
    test_graph and test_free_threading do) gets those."""
    import asyncio.futures as aio_futures
    import asyncio.tasks as aio_tasks

    saved = aio_futures.Future, aio_tasks.Task
    # Subclasses, so that the swap shows where the default classes are the pure-Python
    # ones too (PyPy, which has no C ones).
    swapped = (
        type("Future", (aio_futures._PyFuture,), {"__module__": __name__}),
        type("Task", (aio_tasks._PyTask,), {"__module__": __name__}),
    )
    made = []
    try:
        for future_class, task_class in (swapped, saved):
            aio_futures.Future, aio_tasks.Task = future_class, task_class
            fut = loop.create_future()

            task = loop.create_task(_idle())
            for made_one in (fut, task):
                made.append((type(made_one).__name__, type(made_one).__module__))
            loop.run_until_complete(task)
            fut.cancel()
    finally:
        aio_futures.Future, aio_tasks.Task = saved
    return made


@pytest.mark.skipif(
    not hasattr(asyncio.futures, "_PyFuture"),
    reason="needs asyncio's C Future beside its Python one",
)
def test_stdlib_futures_are_looked_up_at_each_call():
    stdlib = asyncio.new_event_loop()
    ours = snakeloop.new_event_loop(stdlib_futures=True)
    try:
        expected = _classes_made_after_asyncio_swapped_them(stdlib)
        defaults = [(cls.__name__, cls.__module__) for cls in (asyncio.Future, asyncio.Task)]
        assert expected == [("Future", __name__), ("Task", __name__), *defaults]
        assert _classes_made_after_asyncio_swapped_them(ours) == expected
    finally:
        stdlib.close()
        close_loop(ours)
