"""Testing asyncio code on snakeloop: virtual time, deadlock errors, and a pytest plugin.

``VirtualClock`` makes ``loop.time()`` jump to the next timer when nothing
else can happen, so an hour of ``asyncio.sleep`` takes no real time;
``wait_all_tasks_blocked()``, ``external()`` and ``autojump_paused()`` steer
it from a test.  ``find_seed()`` finds a seed under which an async
function fails on a seeded loop, and ``replay()`` runs it again under one;
``SeedRun`` is the seed of one run of a seeded test, for a loop it makes itself.
The pytest plugin (``snakeloop.testing.pytest_plugin``, registered as the
``snakeloop`` pytest11 entry point) runs tests on such loops: see its
docstring for the marker, options and fixtures.

Importing this package does not import pytest.
"""

from __future__ import annotations

from ..exceptions import DeadlockError, StallError, VirtualTimeoutError
from ..virtualclock import VirtualClock
from ..virtualtime import autojump_paused, external, wait_all_tasks_blocked
from ._seed_run import SeedRun
from ._seeds import find_seed, replay

__all__ = [
    "DeadlockError",
    "SeedRun",
    "StallError",
    "VirtualClock",
    "VirtualTimeoutError",
    "autojump_paused",
    "external",
    "find_seed",
    "replay",
    "wait_all_tasks_blocked",
]
