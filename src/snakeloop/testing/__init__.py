"""Testing asyncio code on snakeloop: virtual time, deadlock errors, and a pytest plugin.

``VirtualClock`` makes ``loop.time()`` jump to the next timer when nothing
else can happen, so an hour of ``asyncio.sleep`` takes no real time;
``wait_all_tasks_blocked()``, ``external()`` and ``autojump_paused()`` steer
it from a test.  The pytest plugin (``snakeloop.testing.pytest_plugin``,
registered as the ``snakeloop`` pytest11 entry point) runs tests on such
loops: see its docstring for the marker, options and fixtures.

Importing this package does not import pytest.
"""

from __future__ import annotations

from ..exceptions import DeadlockError, StallError, VirtualTimeoutError
from ..virtualclock import VirtualClock
from ..virtualtime import autojump_paused, external, wait_all_tasks_blocked

__all__ = [
    "DeadlockError",
    "StallError",
    "VirtualClock",
    "VirtualTimeoutError",
    "autojump_paused",
    "external",
    "wait_all_tasks_blocked",
]
