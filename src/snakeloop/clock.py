"""Where loop time comes from.

``loop.time()`` asks the clock the loop was built with.  The default reads
``time.monotonic``: it never goes backwards, and on Linux its resolution is
well under a millisecond.  The clock is injected through the loop
constructor or ``loop.set_clock()``, which is the seam ``VirtualClock``
(``snakeloop.virtualclock``) plugs into.  A clock whose ``is_virtual`` is
true gets the loop's idle driver (``snakeloop.virtualtime``); any other
clock costs the loop nothing beyond the call to read it.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "MonotonicClock"]


@runtime_checkable
class Clock(Protocol):
    """What a loop needs from a clock."""

    #: Smallest step the clock can tell apart, in seconds; timers due within
    #: one resolution of now fire in the same iteration.
    resolution: float

    def monotonic(self) -> float:
        """Current time in seconds; never decreases."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic``."""

    #: Not a virtual clock: the loop waits for its timers in real time.
    is_virtual = False

    __slots__ = ("resolution", "monotonic")

    def __init__(self) -> None:
        self.resolution: float = time.get_clock_info("monotonic").resolution
        # A bound builtin: loop.time() calls it with no Python frame between.
        self.monotonic = time.monotonic

    def __repr__(self) -> str:
        return f"<MonotonicClock resolution={self.resolution}>"
