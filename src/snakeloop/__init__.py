"""snakeloop: an asyncio event loop written in Python.

Use it with ``snakeloop.run(main())``, with
``asyncio.run(main(), loop_factory=snakeloop.new_event_loop)`` (3.12+), or
``python -m snakeloop script.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._core.futures import Future, Task
from ._core.handles import Handle, TimerHandle
from ._core.runloop import COMPILED
from .callgraph import capture_call_graph, format_call_graph, print_call_graph
from .clock import Clock, MonotonicClock
from .exceptions import DeadlockError, StallError, VirtualTimeoutError
from .instruments import CallbackInfo, Instrument
from .loop import Loop
from .runner import POLICIES_DEPRECATED, Runner, install, loop_factory, new_event_loop, run
from .virtualclock import VirtualClock

__all__ = [
    "COMPILED",
    "CallbackInfo",
    "Clock",
    "DeadlockError",
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

# From 3.14 the policy class is read through __getattr__, which warns as asyncio does when
# asyncio.DefaultEventLoopPolicy is read; like that name, it leaves __all__ there.
if TYPE_CHECKING or not POLICIES_DEPRECATED:
    from .runner import EventLoopPolicy as EventLoopPolicy
if not POLICIES_DEPRECATED:
    __all__.insert(__all__.index("Future"), "EventLoopPolicy")
else:

    def __getattr__(name: str) -> object:
        if name == "EventLoopPolicy":
            from .runner import EventLoopPolicy, warn_policy_deprecated

            warn_policy_deprecated("snakeloop.EventLoopPolicy")
            return EventLoopPolicy
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__version__ = "0.1.0"
