"""snakeloop: an asyncio event loop written in Python.

Use it with ``snakeloop.run(main())``, with
``asyncio.run(main(), loop_factory=snakeloop.new_event_loop)`` (3.12+), or
``python -m snakeloop script.py``.
"""

from __future__ import annotations

from ._core.futures import Future, Task
from ._core.handles import Handle, TimerHandle
from ._core.runloop import COMPILED
from .callgraph import capture_call_graph, format_call_graph, print_call_graph
from .clock import Clock, MonotonicClock
from .exceptions import DeadlockError, StallError, VirtualTimeoutError
from .instruments import CallbackInfo, Instrument
from .loop import Loop
from .runner import EventLoopPolicy, Runner, install, loop_factory, new_event_loop, run
from .virtualclock import VirtualClock

__all__ = [
    "COMPILED",
    "CallbackInfo",
    "Clock",
    "DeadlockError",
    "EventLoopPolicy",
    "Future",
    "Handle",
    "Instrument",
    "Loop",
    "MonotonicClock",
    "Runner",
    "StallError",
    "Task",
    "TimerHandle",
    "VirtualClock",
    "VirtualTimeoutError",
    "capture_call_graph",
    "format_call_graph",
    "install",
    "loop_factory",
    "new_event_loop",
    "print_call_graph",
    "run",
]

__version__ = "0.1.0"
