"""The ``threadsafe`` dimension: other threads' callbacks arrive 0 to 2 polls late.

When another thread calls ``call_soon_threadsafe`` (an executor job's
completion does), when its callback joins the loop is a race asyncio leaves
open: on a slower machine it may be seen an iteration or two later.  A
seeded loop with ``threadsafe`` takes such calls into this inbox instead of
the ready queue, and hands each on after a drawn number of polls (0, 1 or
2).  Calls from one thread keep their order: a call is never handed on
before an earlier one of its thread.  Calls from the loop's own thread go
straight to the ready queue, as always.

The ``signals`` dimension uses a second inbox the same way: a signal's
handler runs 0 to 2 polls after the signal was read, handlers in the order
their signals came.

Thread safety: other threads only ``append`` to a deque (atomic) and wake
the loop; everything else runs in the loop's thread, at its poll.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from .seeding import Schedule

__all__ = ["Inbox"]

_MAX_DEFERRAL = 2


class Inbox:
    """Callbacks from other threads, waiting for their turn (one seeded loop's)."""

    __slots__ = ("_arrivals", "_waiting", "_schedule", "_stream", "_deliver", "_dimension")

    def __init__(
        self, schedule: Schedule, deliver: Callable[[Any], None], dimension: str = "threadsafe"
    ) -> None:
        # (thread ident, handle), appended by other threads.
        self._arrivals: collections.deque[tuple[int, Any]] = collections.deque()
        # thread ident -> [(poll it is due at, handle), ...], oldest first.
        self._waiting: dict[int, collections.deque[tuple[int, Any]]] = {}
        self._schedule = schedule
        self._dimension = dimension
        self._stream = schedule.stream(dimension)
        self._deliver = deliver

    def put(self, thread: int, handle: Any) -> None:
        """From any thread: a handle to hand on later (the caller wakes the loop)."""
        self._arrivals.append((thread, handle))

    def arrive(self, loop_thread: int | None, handle: Any) -> None:
        """``call_soon_threadsafe``'s handle: the loop's own thread (or a loop not
        running) queues it at once, as always; another thread's waits here."""
        thread = threading.get_ident()
        if loop_thread is None or thread == loop_thread:
            self._deliver(handle)
        else:
            self._arrivals.append((thread, handle))

    def holding(self) -> bool:
        """Whether a callback waits here (the loop must not sleep or jump)."""
        return bool(self._arrivals) or bool(self._waiting)

    def release(self, iteration: int) -> None:
        """At a poll: take new arrivals in, hand on every callback whose turn came."""
        arrivals = self._arrivals
        waiting = self._waiting
        # Only the calls there now: other threads append while this runs, and a drain
        # that took them too would never end under a steady flood of calls.
        for _ in range(len(arrivals)):
            thread, handle = arrivals.popleft()
            polls = self._stream.randint(0, _MAX_DEFERRAL)
            queue = waiting.get(thread)
            if queue is None:
                queue = waiting[thread] = collections.deque()
            # The poll it is due at, so that waiting costs nothing per poll.
            queue.append((iteration + polls, handle))
            if polls:
                self._schedule.record(iteration, self._dimension, f"deferred {polls}")
        for thread in list(waiting):
            queue = waiting[thread]
            # Per-thread FIFO: only the oldest may go, and those behind it wait for it.
            while queue and queue[0][0] <= iteration:
                self._deliver(queue.popleft()[1])
            if not queue:
                del waiting[thread]

    def clear(self) -> None:
        """The loop closed: what waits is dropped, as the ready queue's callbacks are."""
        self._arrivals.clear()
        self._waiting.clear()
