"""snakeloop: an asyncio event loop written in Python.

Use it with ``snakeloop.run(main())``, with
``asyncio.run(main(), loop_factory=snakeloop.new_event_loop)`` (3.12+), or
``python -m snakeloop script.py``.
"""

from __future__ import annotations

from ._core.futures import Future, Task
from ._core.handles import Handle, TimerHandle
from .clock import Clock, MonotonicClock
from .loop import Loop
from .runner import EventLoopPolicy, Runner, install, new_event_loop, run

__all__ = [
    "Clock",
    "EventLoopPolicy",
    "Future",
    "Handle",
    "Loop",
    "MonotonicClock",
    "Runner",
    "Task",
    "TimerHandle",
    "install",
    "new_event_loop",
    "run",
]

__version__ = "0.1.0"
