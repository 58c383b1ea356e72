"""``snakeloop.Runner`` wraps ``asyncio.Runner`` and must not be told apart from it in use.

asyncio's Runner is final, so snakeloop's hands each call to one instead of
subclassing it.  These tests hold the wrapper to asyncio's signatures and to
its Ctrl-C handling, which lives in ``asyncio.Runner.run``.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import threading

import pytest
from _loopkit import snakeloop_module


def _shape(function):
    """Parameter names, kinds and defaults, without the annotations."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("name", ["__init__", "__enter__", "__exit__", "close", "get_loop", "run"])
def test_runner_methods_take_what_asyncio_runners_take(name):
    ours = getattr(snakeloop_module().Runner, name)
    assert _shape(ours) == _shape(getattr(asyncio.Runner, name))


def test_runner_is_not_an_asyncio_runner_subclass():
    # typeshed marks asyncio.Runner @final.
    assert not issubclass(snakeloop_module().Runner, asyncio.Runner)


def _interrupted_run(make_runner):
    """Run a main coroutine that gets SIGINT; what it saw, and what run() raised."""
    seen = []

    async def main():
        signal.raise_signal(signal.SIGINT)
        try:
            await asyncio.sleep(5)
        except BaseException as exc:
            seen.append(type(exc).__name__)
            raise

    with make_runner() as runner:
        try:
            runner.run(main())
        except KeyboardInterrupt as exc:
            raised = type(exc).__name__
        else:
            raised = None
        loop = runner.get_loop()
    return seen, raised, loop.is_closed()


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread()
    or signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
    reason="Runner handles Ctrl-C only in the main thread with Python's own SIGINT handler",
)
def test_ctrl_c_cancels_the_main_task_and_raises_keyboard_interrupt():
    ref = _interrupted_run(asyncio.Runner)
    got = _interrupted_run(snakeloop_module().Runner)
    assert got == ref
    assert ref == (["CancelledError"], "KeyboardInterrupt", True)
