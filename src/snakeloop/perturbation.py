"""A seeded loop's poll: I/O readiness reordered and delayed, as asyncio allows.

OS facts relied on: the backends register fds level-triggered (no
``EPOLLET``), so an fd whose event is not handed on is reported again by the
next poll for as long as it stays ready; and one poll reports each fd once,
with its readable and writable bits combined.

What asyncio leaves open, and so may be chosen by the seed:

- ``io_order``: the order of the fds one poll reports ("order within one
  poll batch unspecified").  The batch is sorted by fd first, so that the
  kernel's order does not leak into the choice, then shuffled.  The core
  still runs one fd's reader before its writer.
- ``io_delay``: an fd's readiness handed on 1 to 3 polls late (as on a
  slower machine, or a later packet).  Never more than 3 polls in a row for
  one fd; the loop's waker and internal fds (the signal pipe) are never held.
  While anything is held the next poll does not block, and virtual time does
  not jump.
- ``io_latency=(lo, hi)`` (opt-in, with a ``VirtualClock``): an fd that
  turns ready is not handed on for a drawn ``lo`` to ``hi`` virtual seconds
  (``IoLatency``), as if its bytes or its peer were that far away; a timer
  hands it on again.  Unlike ``io_delay`` this lets virtual time run: the
  loop sleeps until the timer, and code that waits with a timeout sees the
  wait.

- ``timer_ties``: the order of timers set for one deadline ("undefined
  which will be called first"): each new timer of a tie takes a drawn place
  among the others that can still run (``Loop._choose_tie_place``, which
  the core asks through ``_timer_ties``), which makes every order of the
  tie equally likely.  Timers of different deadlines keep
  their order, and none fires before its deadline.

- ``timer_delay`` (opt-in): how late a due timer runs (asyncio only
  promises "not before its deadline").  With probability 0.1, when
  callbacks are already ready, the timers due at one poll wait one
  iteration (``TimerDelay``), as on a machine that reached the check a
  little early.  They keep their order, none runs early, and the next
  iteration is never held, so a timer waits one iteration at most.

- ``chunking``: where a stream's bytes are split between reads ("any
  split"): a TCP or Unix stream read, a transport's or ``sock_recv``'s,
  takes ``min(available, drawn)`` bytes, small sizes favoured
  (``snakeloop.chunking``).  Bytes are conserved and keep their order;
  datagram reads are never cut.
- ``chunking_writes`` (opt-in): how much of what it is offered a stream
  send takes: a transport's ``send``/``sendmsg`` and ``sock_sendall``'s
  sends are capped at a drawn size, small ones favoured, so partial
  writes, ``pause_writing`` and ``drain()`` happen on a fast loopback too.
  Datagram sends are never cut.

- ``threadsafe``: when another thread's ``call_soon_threadsafe`` joins the
  loop (``inbox.py``): handed on at a poll 0 to 2 polls late, each thread's
  calls in their order.
- ``signals`` (opt-in): a signal handler runs 0 to 2 polls after its
  signal was read, in the order the signals came (a second inbox).
- ``epoch`` (opt-in, with a ``VirtualClock``): virtual time starts a drawn
  10 000 to 200 000 s later (``Loop.set_clock``), for code that assumes
  ``loop.time()`` starts near 0.

Never touched: the ready queue and everything on it.  Callbacks queued
before a poll still run before that poll's I/O callbacks: the core, not this
module, decides that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .seeding import Schedule

__all__ = ["IMPLEMENTED", "IoLatency", "PerturbedPoll", "PollEveryIteration", "TimerDelay"]

#: The dimensions this build implements (the others are refused by name).
IMPLEMENTED = (
    "io_order",
    "io_delay",
    "timer_ties",
    "timer_delay",
    "chunking",
    "chunking_writes",
    "io_latency",
    "threadsafe",
    "signals",
    "epoch",
)

_DELAY_PROBABILITY = 0.25
_MAX_DELAY = 3
_TIMER_DELAY_PROBABILITY = 0.1


class PerturbedPoll:
    """Wraps the OS poll of one seeded loop."""

    __slots__ = (
        "_os_poll",
        "_schedule",
        "_exempt",
        "_order",
        "_delay",
        "_held",
        "_iteration",
        "inbox",
        "signal_inbox",
        "timer_delay",
        "latency",
    )

    def __init__(
        self,
        os_poll: Callable[[float | None], Any],
        schedule: Schedule,
        exempt: Callable[[int], bool],
    ) -> None:
        self._os_poll = os_poll
        self._schedule = schedule
        self._exempt = exempt
        chosen = schedule.perturbation
        self._order = schedule.stream("io_order") if "io_order" in chosen else None
        self._delay = schedule.stream("io_delay") if "io_delay" in chosen else None
        # fd -> polls it is still held for (it is handed on when this reaches 0).
        self._held: dict[int, int] = {}
        self._iteration = 0
        # Other threads' callbacks, when "threadsafe" is perturbed (set by the loop).
        self.inbox: Any = None
        self.signal_inbox: Any = None
        # Due timers held back an iteration, when "timer_delay" is perturbed (set by the loop).
        self.timer_delay: TimerDelay | None = None
        # Readiness held back for virtual seconds, when "io_latency" is perturbed (set by the loop).
        self.latency: IoLatency | None = None

    @property
    def iteration(self) -> int:
        """Polls so far: the iteration number decisions are recorded under."""
        return self._iteration

    def holding(self) -> bool:
        """Whether readiness or callbacks are being held back (the loop is not idle)."""
        return (
            bool(self._held)
            or (self.inbox is not None and self.inbox.holding())
            or (self.signal_inbox is not None and self.signal_inbox.holding())
            or (self.timer_delay is not None and self.timer_delay.holding)
        )

    def poll(self, timeout: float | None) -> list[tuple[int, int]]:
        if self.holding():
            timeout = 0
        events = self._os_poll(timeout)
        self._iteration += 1
        if self.timer_delay is not None:
            # Before the inbox hands on its callbacks: "ready" means ready before this poll.
            self.timer_delay.choose(self._iteration)
        if self.inbox is not None:
            self.inbox.release(self._iteration)
        if self.signal_inbox is not None:
            # Signals read by this poll's drain wait at least until the next one.
            self.signal_inbox.release(self._iteration)
        if self.latency is not None:
            events = self.latency.filter(events, self._iteration, self._exempt)
        if self._delay is not None:
            events = self._hold_some(events)
        if self._order is not None and len(events) > 1:
            events = sorted(events)
            self._order.shuffle(events)
            self._schedule.record(
                self._iteration, "io_order", "[" + ", ".join(f"fd {fd}" for fd, _ in events) + "]"
            )
        return events

    def _hold_some(self, events: list[tuple[int, int]]) -> list[tuple[int, int]]:
        held = self._held
        reported = {fd for fd, _ in events}
        for fd in [fd for fd in held if fd not in reported]:
            del held[fd]  # no longer ready (read, or unregistered): nothing to hand on
        delay = self._delay
        assert delay is not None
        passed = []
        for fd, mask in sorted(events):
            left = held.get(fd)
            if left is not None:
                if left > 1:
                    held[fd] = left - 1
                    continue
                del held[fd]
                passed.append((fd, mask))
                continue
            if not self._exempt(fd) and delay.random() < _DELAY_PROBABILITY:
                polls = delay.randint(1, _MAX_DELAY)
                held[fd] = polls
                self._schedule.record(self._iteration, "io_delay", f"fd {fd} held {polls}")
                continue
            passed.append((fd, mask))
        return passed


class TimerDelay:
    """``timer_delay``: the timers due at a poll may wait one iteration.

    The loop's seam (``Loop._hold_due_timers``) makes no timer due for
    one iteration and leaves the heap as it is, so nothing is lost or
    reordered, none runs early, and the next poll's timeout is 0 (its
    earliest timer is overdue).  That next poll lets the timers come due
    again and is never held itself: a timer waits one iteration at most.
    Only while callbacks are ready, so the held iteration runs something
    and the wait is never idle.
    """

    __slots__ = ("_schedule", "_stream", "_due_behind", "_hold", "holding")

    def __init__(
        self,
        schedule: Schedule,
        due_behind: Callable[[], int],
        hold: Callable[[bool], None],
    ) -> None:
        """``due_behind()``: the callbacks ready if a timer is due, else 0; ``hold(on)``."""
        self._schedule = schedule
        self._stream = schedule.stream("timer_delay")
        self._due_behind = due_behind
        self._hold = hold
        self.holding = False

    def choose(self, iteration: int) -> None:
        """Called by each poll, before the core looks for due timers."""
        if self.holding:
            self._hold(False)
            self.holding = False
            return
        ready = self._due_behind()
        if not ready or self._stream.random() >= _TIMER_DELAY_PROBABILITY:
            return
        self._hold(True)
        self.holding = True
        self._schedule.record(iteration, "timer_delay", f"due timers wait behind {ready} ready")


class PollEveryIteration(dict):  # type: ignore[type-arg]
    """A loop's table of internal readers that makes its core poll every iteration.

    The core skips the poll when callbacks are ready and no fd is watched
    (it tests this table among others).  A loop with ``timer_delay`` takes
    this table instead of the plain dict, so that the poll after a held
    iteration always comes and hands the timers back, as asyncio, which
    polls every iteration, would; so does one with ``threadsafe``, whose
    other threads' calls reach the ready queue only at a poll.
    """

    __slots__ = ()

    def __bool__(self) -> bool:
        return True


class IoLatency:
    """``io_latency``: an fd that turns ready waits a drawn number of virtual seconds.

    The backends are level-triggered, so an fd whose readiness is not
    handed on is reported again by every poll: leaving it out of the
    events while it waits is the same, for the loop, as taking the fd out
    of the poll, and it leaves the registrations (which ``add_reader`` and
    ``remove_reader`` change meanwhile) as they are.  A timer ends the
    wait; from then on the fd's readiness is handed on until a poll finds
    it not ready, and its next readiness waits again.  Waiting fds do not
    count as held work: virtual time jumps to the timer.
    """

    __slots__ = ("_schedule", "_stream", "_call_later", "_lo", "_hi", "_waiting", "_open")

    def __init__(
        self, schedule: Schedule, call_later: Callable[..., Any], lo: float, hi: float
    ) -> None:
        self._schedule = schedule
        self._stream = schedule.stream("io_latency")
        self._call_later = call_later
        self._lo = lo
        self._hi = hi
        self._waiting: set[int] = set()
        self._open: set[int] = set()

    def filter(
        self, events: list[tuple[int, int]], iteration: int, exempt: Callable[[int], bool]
    ) -> list[tuple[int, int]]:
        """The events handed on now; a fresh readiness starts its wait."""
        reported = {fd for fd, _ in events}
        self._open &= reported  # not ready any more: its next readiness waits again
        passed = []
        for fd, mask in sorted(events):
            if fd in self._open or exempt(fd):
                passed.append((fd, mask))
            elif fd not in self._waiting:
                delay = self._stream.uniform(self._lo, self._hi)
                self._waiting.add(fd)
                self._call_later(delay, self._end_wait, fd)
                self._schedule.record(iteration, "io_latency", f"fd {fd} waits {delay:.6f} s")
        return passed

    def _end_wait(self, fd: int) -> None:
        self._waiting.discard(fd)
        self._open.add(fd)
