"""What a second ``__init__`` and a wrong ``context`` do to a Future or Task.

3.15 refuses both: ``Future.__init__``/``Task.__init__`` on an initialized
object raise ``RuntimeError`` ("... object is already initialized"), and a
Task whose ``context`` is not a ``contextvars.Context`` raises ``TypeError``
(gh-157301).  Earlier Pythons take both.  snakeloop's classes are held
against asyncio's pure-Python ones, on the running Python.
"""

from __future__ import annotations

import asyncio
from asyncio import futures, tasks

import pytest
from _loopkit import Raised, outcome

import snakeloop

PAIRS = [
    pytest.param(snakeloop.Future, futures._PyFuture, id="future"),
    pytest.param(snakeloop.Task, tasks._PyTask, id="task"),
]


@pytest.fixture
def idle_loop():
    """A loop that never runs: the tasks made here take no step, and their
    coroutines are closed unstarted."""
    loop = asyncio.SelectorEventLoop()
    yield loop
    loop.close()


async def _nothing():
    pass


def _is_task(cls):
    # snakeloop's classes answer isinstance checks, not issubclass ones
    # (see test_future_classes).
    return cls in (snakeloop.Task, tasks._PyTask)


def _make(cls, loop, coro, **kwargs):
    if _is_task(cls):
        task = cls(coro, loop=loop, **kwargs)
        task._log_destroy_pending = False  # never run here
        return task
    return cls(loop=loop, **kwargs)


def _second_init(cls, loop):
    coro = _nothing()
    try:
        made = _make(cls, loop, coro)
        again = _nothing()
        try:
            args = (again,) if _is_task(cls) else ()
            return outcome(made.__init__, *args, loop=loop)
        finally:
            again.close()
            if _is_task(cls):
                made._log_destroy_pending = False  # a second __init__ that ran set it again
    finally:
        coro.close()


@pytest.mark.parametrize(("ours", "reference"), PAIRS)
def test_a_second_init_does_what_asyncio_does(idle_loop, ours, reference):
    got, ref = _second_init(ours, idle_loop), _second_init(reference, idle_loop)
    assert got == ref
    if isinstance(ref, Raised):
        assert ref.type is RuntimeError and "already initialized" in ref.message


def _task_with_context(cls, loop, context):
    coro = _nothing()
    try:
        made = outcome(_make, cls, loop, coro, context=context)
        return made if isinstance(made, Raised) else "made"
    finally:
        coro.close()


@pytest.mark.parametrize("context", ["not a context", {}, None])
def test_a_task_context_that_is_no_context_does_what_asyncio_does(idle_loop, context):
    got = _task_with_context(snakeloop.Task, idle_loop, context)
    ref = _task_with_context(tasks._PyTask, idle_loop, context)
    assert got == ref
