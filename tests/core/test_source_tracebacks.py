"""Debug mode records where each handle, future and task was made, as asyncio does.

asyncio records ``DEBUG_STACK_DEPTH`` frames from inside its own method and
then drops its own frames, so the record ends at the program's line and
holds fewer of the program's frames the more of its own it went through
(call_later one fewer than call_at).  snakeloop's makers go through other
frames, and in the compiled build through none: these tests hold both
builds to asyncio's records, frame for frame, from a stack deeper than the
record.  Futures and tasks are held to asyncio's pure-Python classes, whose
semantics snakeloop's promise (the C ones record the whole stack).
"""

from __future__ import annotations

import asyncio
import asyncio.constants
import asyncio.futures
import asyncio.tasks
import os
import threading

import pytest

import snakeloop
from tests._loopkit import future_class, loop_ctx, task_class

# The loops' own files: asyncio's, and snakeloop's wherever it is imported from (src/ in
# a checkout, site-packages when installed, as CI tests it).
_LIBRARY_DIRS = (
    os.path.dirname(asyncio.__file__) + os.sep,
    os.path.dirname(snakeloop.__file__) + os.sep,
)

# Deeper than any record.
DEPTH = 30


def _noop(*args):
    pass


async def _coro():
    pass


def _deep(n, function, *args):
    if n:
        return _deep(n - 1, function, *args)
    return function(*args)


def _frames(record):
    """The record as comparable tuples: (file, line, function).

    A frame of a loop method that the record keeps (asyncio keeps
    ``create_future``'s) is the loop's own: only its function's name counts.
    """
    return [
        ("<loop>", 0, frame.name)
        if frame.filename.startswith(_LIBRARY_DIRS)
        else (frame.filename, frame.lineno, frame.name)
        for frame in record
    ]


def _records(made, loop):
    records = {name: _frames(obj._source_traceback) for name, obj in made.items()}
    for obj in made.values():
        obj.cancel()
    loop.run_until_complete(asyncio.sleep(0))
    return records


def _make_all(loop):
    return {
        "call_soon": loop.call_soon(_noop),
        "call_soon_threadsafe": loop.call_soon_threadsafe(_noop),
        "call_later": loop.call_later(10, _noop),
        "call_at": loop.call_at(loop.time() + 10, _noop),
        "create_future": loop.create_future(),
        "create_task": loop.create_task(_coro()),
        "ensure_future": asyncio.ensure_future(_coro(), loop=loop),
    }


@pytest.fixture
def pure_python_asyncio(monkeypatch):
    """asyncio's loop making its pure-Python Future and Task."""
    monkeypatch.setattr(asyncio.futures, "Future", asyncio.futures._PyFuture)
    monkeypatch.setattr(asyncio.tasks, "Task", asyncio.tasks._PyTask)


def _on_each_loop(scenario, stdlib_futures=False):
    """``scenario(loop)`` on a debug loop of asyncio's, then of snakeloop's (whose own
    classes stand against asyncio's pure-Python ones, or its C ones against asyncio's)."""
    results = []
    for kind, options in (("stdlib", {}), ("snakeloop", {"stdlib_futures": stdlib_futures})):
        with loop_ctx(kind, **options) as loop:
            loop.set_debug(True)
            results.append(scenario(loop))
    return results


def test_the_loops_makers_record_the_same_stack(pure_python_asyncio):
    ref, got = _on_each_loop(lambda loop: _records(_deep(DEPTH, _make_all, loop), loop))
    assert got == ref


def test_the_loops_makers_of_c_tasks_record_the_same_stack():
    """With asyncio's C Future and Task (the default from 3.14)."""
    ref, got = _on_each_loop(
        lambda loop: _records(_deep(DEPTH, _make_all, loop), loop), stdlib_futures=True
    )
    assert got == ref


def test_a_seeded_loops_makers_record_the_same_stack(pure_python_asyncio):
    # A seeded loop puts methods of its own in front of the core's
    # (create_task records the task's site, _push_timer places ties).
    with loop_ctx("stdlib") as loop:
        loop.set_debug(True)
        ref = _records(_deep(DEPTH, _make_all, loop), loop)
    loop = snakeloop.new_event_loop(seed=1, stdlib_futures=False)
    try:
        assert {"timer_ties"} <= set(loop.perturbation) and loop._task_sites is not None
        loop.set_debug(True)
        got = _records(_deep(DEPTH, _make_all, loop), loop)
    finally:
        loop.close()
    assert got == ref


def _make_in_a_short_stack(results):
    for kind in ("stdlib", "snakeloop"):
        with loop_ctx(kind) as loop:
            loop.set_debug(True)
            made = _make_all(loop)
            results.append(_records(made, loop))


def test_a_short_stack_is_recorded_whole(pure_python_asyncio):
    # A new thread's stack is shorter than any record.
    results = []
    thread = threading.Thread(target=_make_in_a_short_stack, args=(results,))
    thread.start()
    thread.join()
    ref, got = results
    assert len(ref["call_later"]) < asyncio.constants.DEBUG_STACK_DEPTH - 3
    assert got == ref


def _after_the_loop(record):
    """The frames after the last of the loop's own."""
    last = max(i for i, frame in enumerate(record) if frame[0] == "<loop>")
    return record[last + 1 :]


def test_what_a_task_makes_records_the_same_stack_after_the_loops_frames(pure_python_asyncio):
    # Above the coroutine's frame are the loops' own, different frames.
    def scenario(loop):
        async def main():
            made = _deep(3, _make_all, loop)
            del made["call_soon_threadsafe"]
            await asyncio.sleep(0)
            return made

        records = _records(loop.run_until_complete(main()), loop)
        return {name: _after_the_loop(record) for name, record in records.items()}

    ref, got = _on_each_loop(scenario)
    assert got == ref


def test_a_call_soon_threadsafe_from_another_thread_records_that_threads_stack():
    def scenario(loop):
        made = []
        thread = threading.Thread(
            target=_deep, args=(DEPTH, lambda: made.append(loop.call_soon_threadsafe(_noop)))
        )
        thread.start()
        thread.join()
        return _records({"call_soon_threadsafe": made[0]}, loop)

    ref, got = _on_each_loop(scenario)
    assert got == ref


def _make_directly(loop, future_cls, task_cls):
    return {"Future": future_cls(loop=loop), "Task": task_cls(_coro(), loop=loop)}


def _subclasses(future_base, task_base):
    class MyFuture(future_base):
        def __init__(self, *, loop):
            super().__init__(loop=loop)

    class MyTask(task_base):
        def __init__(self, coro, *, loop):
            super().__init__(coro, loop=loop)

    return MyFuture, MyTask


@pytest.mark.parametrize("subclassed", [False, True], ids=["classes", "subclasses"])
def test_futures_and_tasks_made_directly_record_the_same_stack(subclassed):
    records = []
    for kind in ("stdlib-py", "snakeloop"):
        classes = (future_class(kind), task_class(kind))
        if subclassed:
            classes = _subclasses(*classes)
        with loop_ctx(kind) as loop:
            loop.set_debug(True)
            made = _deep(DEPTH, _make_directly, loop, *classes)
            records.append(_records(made, loop))
    assert records[1] == records[0]
