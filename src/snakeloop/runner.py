"""Entry points: ``run``, ``Runner``, ``install`` and the policy.

``Runner`` is asyncio's own ``asyncio.Runner`` with snakeloop as its loop
factory, so the lifecycle is exactly asyncio's: Ctrl-C cancels the main
task, leftover tasks are cancelled, async generators and the default
executor are shut down, and the loop is closed.
"""

from __future__ import annotations

import asyncio
from asyncio import events
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .loop import Loop

__all__ = ["EventLoopPolicy", "Runner", "install", "new_event_loop", "run"]

_T = TypeVar("_T")


def new_event_loop(**options: Any) -> Loop:
    """A new snakeloop loop; ``options`` go to ``snakeloop.Loop``."""
    return Loop(**options)


class Runner(asyncio.Runner):
    """``asyncio.Runner`` whose loop is a snakeloop loop by default."""

    def __init__(
        self,
        *,
        debug: bool | None = None,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
    ) -> None:
        super().__init__(debug=debug, loop_factory=loop_factory or new_event_loop)


def run(main: Coroutine[Any, Any, _T], *, debug: bool | None = None) -> _T:
    """Run ``main`` on a new snakeloop loop, like ``asyncio.run``."""
    if events._get_running_loop() is not None:
        raise RuntimeError("snakeloop.run() cannot be called from a running event loop")
    with Runner(debug=debug) as runner:
        return runner.run(main)


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """The default policy, except that new loops are snakeloop loops."""

    def new_event_loop(self) -> Loop:
        return new_event_loop()


def install() -> None:
    """Make snakeloop the loop of ``asyncio.run`` and ``new_event_loop``."""
    asyncio.set_event_loop_policy(EventLoopPolicy())
