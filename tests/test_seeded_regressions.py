"""Races and stalls that seeded runs of the project's own tests found in snakeloop.

Each test is the smallest reproduction of one bug, a strict xfail until the
bug is fixed (the reason says where it is).
"""

from __future__ import annotations

import collections

import pytest

from snakeloop.inbox import Inbox
from snakeloop.seeding import Schedule

OTHER_THREAD = 1


class FloodedArrivals(collections.deque):
    """An inbox's arrivals while other threads keep calling call_soon_threadsafe:
    each call taken out is followed by a new one, up to ``limit`` in all."""

    def __init__(self, count: int, limit: int) -> None:
        super().__init__((OTHER_THREAD, f"early {i}") for i in range(count))
        self.limit = limit
        self.taken = 0

    def popleft(self):
        item = super().popleft()
        self.taken += 1
        if self.taken + len(self) < self.limit:
            self.append((OTHER_THREAD, f"late {self.taken}"))
        return item


@pytest.mark.xfail(
    strict=True,
    reason=(
        "Inbox.release() takes arrivals 'while arrivals:', so calls that other threads "
        "append during the drain are taken too: under a steady call_soon_threadsafe flood "
        "the drain never ends and the loop never reaches its timers, signals or I/O "
        "(test_r_sig_3_no_loss_under_threadsafe_flood starved under a seed); it must take "
        "only the arrivals there when the poll began"
    ),
)
def test_inbox_release_takes_only_the_calls_there_when_it_began():
    delivered = []
    inbox = Inbox(Schedule(1, {"threadsafe": True}), delivered.append)
    arrivals = FloodedArrivals(count=10, limit=10_000)
    inbox._arrivals = arrivals
    inbox.release(0)
    assert arrivals.taken == 10
