"""Where a task's last step began, read from its code after the step
(``snakeloop._insight.resumes``): what a slow stretch's record gives as the
start of its segment when nothing was read before the step.

CPython's bytecode and PyPy's (of another shape) are read alike.  Each case
drives a coroutine by hand through ``asyncio.sleep(0)`` (a bare
yield of asyncio's, passed over as library code), takes the step under test,
and compares the line found with the line of the source that says it.
"""

from __future__ import annotations

import asyncio
import inspect
import time

from snakeloop._insight.steps import step_start, suspension_after_step


class _Holder:
    """What suspension_of reads of a task: its coroutine."""

    def __init__(self, coro):
        self._coro = coro

    def get_coro(self):
        return self._coro


def _line(function, text):
    lines, first = inspect.getsourcelines(function)
    [offset] = [i for i, line in enumerate(lines) if text in line]
    return first + offset


def _start_after_steps(function, steps, *args):
    """Take ``steps`` steps of ``function(*args)``; the start its code gives
    for the last one, as (file, line), or None."""
    coro = function(*args)
    try:
        for _ in range(steps):
            coro.send(None)
        return step_start(suspension_after_step(_Holder(coro)))
    finally:
        coro.close()


async def _straight():
    await asyncio.sleep(0)  # first await
    time.sleep(0)
    await asyncio.sleep(0)  # second await


def test_a_step_between_two_awaits_began_at_the_first():
    assert _start_after_steps(_straight, 2) == (__file__, _line(_straight, "first await"))


def test_a_first_step_began_at_the_coroutines_first_line():
    assert _start_after_steps(_straight, 1) == (__file__, _straight.__code__.co_firstlineno)


async def _loops():
    n = 0
    while n < 10:
        await asyncio.sleep(0)  # the loop's await
        time.sleep(0)
        n += 1


def test_a_step_of_a_loop_began_at_its_own_await():
    assert _start_after_steps(_loops, 3) == (__file__, _line(_loops, "the loop's await"))


async def _branches(left):
    if left:
        await asyncio.sleep(0)  # left
    else:
        await asyncio.sleep(0)  # right
    time.sleep(0)
    await asyncio.sleep(0)  # joined


def test_two_awaits_on_two_lines_before_it_name_none():
    assert _start_after_steps(_branches, 2, True) is None


async def _after_a_try():
    try:
        await asyncio.sleep(0)  # in the try
        raise ValueError
    except ValueError:
        time.sleep(0)
    await asyncio.sleep(0)  # after the try


def test_the_way_through_an_exception_handler_is_followed():
    assert _start_after_steps(_after_a_try, 2) == (__file__, _line(_after_a_try, "in the try"))


async def _helper():
    await asyncio.sleep(0)  # in the helper
    time.sleep(0)


async def _calls_a_helper_that_returns():
    await _helper()  # awaits the helper
    await asyncio.sleep(0)  # back in the caller


def test_a_step_out_of_a_helper_that_returned_began_at_the_await_of_the_helper():
    # The helper's frame is gone: its caller's code tells where the step came from.
    assert _start_after_steps(_calls_a_helper_that_returns, 2) == (
        __file__,
        _line(_calls_a_helper_that_returns, "awaits the helper"),
    )


async def _enters_a_helper():
    await asyncio.sleep(0)  # before the helper
    await _helper()


def test_a_step_into_a_new_helper_began_where_its_caller_stood():
    # The helper was entered in this step: the start is its caller's, before it.
    assert _start_after_steps(_enters_a_helper, 2) == (
        __file__,
        _line(_enters_a_helper, "before the helper"),
    )


def test_a_coroutine_not_started_names_no_start():
    assert _start_after_steps(_helper, 0) is None
