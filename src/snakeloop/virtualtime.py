"""What a loop does when it would block: virtual time's autojump, and idle waiters.

The loop's core polls through ``loop._poll(timeout)``.  With a virtual
clock, that attribute is this module's ``VirtualTime.poll``: a poll that
returns at once goes straight to the OS, and one that would block (nothing
ready, the next timer in the future or none) runs these steps instead:

1. poll the OS without waiting, twice: a loopback peer's reply can trail
   its ``send()`` by one look;
2. wake ``wait_all_tasks_blocked()`` waiters, smallest cushion first, once
   the loop has been quiet for that cushion in real time (no jump);
3. ask ``pending.external_work()`` what outside the loop can still happen:
   executor jobs, children, connects, sockets awaiting a peer outside the
   loop, open ``external()`` blocks;
4. none, and a timer: jump the clock to it (after ``autojump_threshold``
   real seconds of quiet), or stop at ``end`` with ``VirtualTimeoutError``;
5. none, and no timer: nothing can ever wake the loop unless a signal,
   another thread or a peer outside the loop does; otherwise a deadlock
   (``deadlock.py``);
6. outside work: wait for it in real time, with virtual time still
   (``external_time="frozen"``, ``StallError`` after ``stall_timeout`` real
   seconds without any event) or following real time (``"real"``).

Peers inside the loop need none of this: their bytes are already in the
kernel when the poll of step 1 looks, so a loopback client and server in
one test never hold time back.

A loop with a real clock gets this driver only while someone waits in
``wait_all_tasks_blocked()``; it then does step 2 and polls as usual.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from asyncio import events
from typing import TYPE_CHECKING, Any

from . import deadlock, insight, pending
from .exceptions import StallError, VirtualTimeoutError

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType
    from typing import Self

    from ._core.contract import LoopMixinBase

__all__ = ["VirtualTime", "autojump_paused", "external", "wait_all_tasks_blocked"]

_real = time.monotonic

# How often a frozen wait looks again at work that ends without an event
# (a socket's reply window running out), in real seconds.
_RECHECK = 0.05


class VirtualTime:
    """The idle driver of one loop (``loop._virtual_time``)."""

    __slots__ = (
        "_loop",
        "_clock",
        "_os_poll",
        "_marks",
        "_mark_ids",
        "_paused",
        "_waiters",
        "_waiter_ids",
        "_quiet_since",
        "_stall_since",
        "_held",
    )

    def __init__(
        self,
        loop: LoopMixinBase,
        clock: Any,
        os_poll: Callable[[float | None], Any],
        held: Callable[[], bool] | None = None,
    ):
        self._loop = loop
        # A seeded loop holding I/O back is not idle (snakeloop.perturbation).
        self._held = held
        self._clock = clock
        self._os_poll = os_poll
        self._marks: dict[int, tuple[str, float]] = {}
        self._mark_ids = itertools.count()
        self._paused = 0
        # [cushion, order, future]: the smallest cushion is woken first, and
        # among equal ones the first to wait.
        self._waiters: list[tuple[float, int, asyncio.Future[None]]] = []
        self._waiter_ids = itertools.count()
        self._quiet_since: float | None = None
        self._stall_since: float | None = None

    @property
    def clock(self) -> Any:
        return self._clock

    @property
    def is_virtual(self) -> bool:
        return bool(getattr(self._clock, "is_virtual", False))

    def is_needed(self) -> bool:
        """Whether a real-clock loop still needs this driver (a waiter is left)."""
        return self.is_virtual or bool(self._waiters)

    # -- the poll ----------------------------------------------------------------

    def poll(self, timeout: float | None) -> Any:
        """The loop's poll: at once when ``timeout`` is 0, else the steps above."""
        if timeout == 0:
            return self._os_poll(0)
        events_ = self._os_poll(0)
        if not events_:
            events_ = self._os_poll(0)
        # A seeded loop's poll may hand on held callbacks into the ready
        # queue, or still hold some: either way the loop is not idle.
        if events_ or self._loop._ready or (self._held is not None and self._held()):
            self._quiet_since = self._stall_since = None
            return events_
        now_real = _real()
        if self._quiet_since is None:
            self._quiet_since = now_real
        if self._waiters:
            return self._serve_waiters(timeout, now_real)
        if not self.is_virtual:
            return self._os_poll(timeout)
        return self._idle(timeout)

    def _serve_waiters(self, timeout: float | None, now_real: float) -> Any:
        cushion = self._waiters[0][0]
        quiet = now_real - (self._quiet_since or now_real)
        if quiet < cushion:
            wait = cushion - quiet
            if timeout is not None and not self.is_virtual:
                wait = min(wait, timeout)
            events_ = self._os_poll(wait)
            if events_:
                self._quiet_since = None
                return events_
            if _real() - (self._quiet_since or now_real) < cushion:
                return []  # a real-clock timer came due first
        # Quiet for long enough: wake every waiter with this cushion.
        while self._waiters and self._waiters[0][0] == cushion:
            _, _, future = self._waiters.pop(0)
            if not future.done():
                future.set_result(None)
        self._quiet_since = None
        return []

    def _idle(self, timeout: float | None) -> Any:
        loop = self._loop
        clock = self._clock
        work = pending.external_work(
            loop, reply_window=clock.reply_window, marks=list(self._marks.values())
        )
        if self._paused:
            return self._follow_real_time(timeout, work)
        if not work:
            if not clock.autojump:
                if clock.rate:  # time flows on its own: wait for it
                    return self._os_poll(None if timeout is None else timeout / clock.rate)
                off = "autojump=False and rate=0: only clock.jump() moves time"
                return self._frozen(timeout, [pending.Pending("autojump", off, None)])
            when = loop._next_timer_when()
            if when is not None:
                if loop._time_is_replaced():
                    # The timers are due by what replaced loop.time, which
                    # virtual time cannot move: wait for it in real time, as
                    # asyncio's loop would.
                    return self._os_poll(timeout)
                return self._jump(when)
            work = deadlock.what_can_wake(loop, test_mode=True)
            if not work:
                deadlock.report_deadlock(loop, mode=loop._deadlock_mode(), virtual=True)
                return self._os_poll(None)  # on_deadlock="log" or "ignore": wait as asked
            if all(item.kind == "signal" for item in work):
                return self._os_poll(None)  # waiting for a signal is never a deadlock
        if clock.external_time == "real":
            return self._follow_real_time(timeout, work)
        return self._frozen(timeout, work)

    def _jump(self, when: float) -> Any:
        clock = self._clock
        threshold = clock.autojump_threshold
        if threshold:
            quiet = _real() - (self._quiet_since or _real())
            if quiet < threshold:
                events_ = self._os_poll(threshold - quiet)
                if events_:
                    self._quiet_since = None
                    return events_
        end = clock.end
        if end is not None and when > end:
            clock._jump_to(end)
            raise self._end_reached()
        clock._jump_to(when)
        self._quiet_since = self._stall_since = None
        return []

    def _follow_real_time(self, timeout: float | None, work: list[pending.Pending]) -> Any:
        """Wait in real time; virtual time moves by what passed."""
        wait = _recheck_interval(work)
        if timeout is not None:
            wait = timeout if wait is None else min(wait, timeout)
        end = self._clock.end
        if end is not None:
            left = max(0.0, end - self._clock.monotonic())
            wait = left if wait is None else min(wait, left)
        started = _real()
        events_ = self._os_poll(wait)
        self._clock._advance_real(_real() - started)
        if end is not None and self._clock.monotonic() >= end and not events_:
            raise self._end_reached()
        self._quiet_since = None
        return events_

    def _frozen(self, timeout: float | None, work: list[pending.Pending]) -> Any:
        """Wait in real time with virtual time still, up to the stall limit."""
        now_real = _real()
        if self._stall_since is None:
            self._stall_since = now_real
        limit = self._clock.stall_timeout
        wait = _recheck_interval(work)
        if limit is not None:
            left = self._stall_since + limit - now_real
            if left <= 0:
                raise self._stalled(work, now_real - self._stall_since)
            wait = left if wait is None else min(wait, left)
        events_ = self._os_poll(wait)
        if events_:
            self._stall_since = self._quiet_since = None
        return events_

    # -- errors --------------------------------------------------------------------

    def _end_reached(self) -> VirtualTimeoutError:
        loop = self._loop
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]  # type: ignore[arg-type]
        report = insight.format_text(insight.task_graph(loop))
        message = (
            f"snakeloop: virtual time reached end={self._clock.end!r} "
            f"({self._clock.real_elapsed:.3f} s real) and the test is still running; "
            f"{len(tasks)} tasks pending:\n{report}"
        )
        return VirtualTimeoutError(message, report)

    def _stalled(self, work: list[pending.Pending], frozen_for: float) -> StallError:
        now_real = _real()
        lines = [
            f"snakeloop: virtual time has been frozen for {frozen_for:.1f} s of real time "
            "waiting on external work:"
        ]
        for item in work:
            lines.append("  " + _describe_work(item, now_real))
        lines.append(
            "Use VirtualClock(external_time='real') to let virtual time follow real time, "
            "mark the work with snakeloop.testing.external(), or raise stall_timeout."
        )
        return StallError("\n".join(lines), insight.format_text(insight.task_graph(self._loop)))

    # -- what testing's helpers use --------------------------------------------------

    def add_waiter(self, cushion: float, future: asyncio.Future[None]) -> None:
        entry = (cushion, next(self._waiter_ids), future)
        self._waiters.append(entry)
        self._waiters.sort(key=lambda e: (e[0], e[1]))

    def discard_waiter(self, future: asyncio.Future[None]) -> None:
        self._waiters = [e for e in self._waiters if e[2] is not future]

    def open_mark(self, label: str) -> int:
        token = next(self._mark_ids)
        self._marks[token] = (label, _real())
        return token

    def close_mark(self, token: int) -> None:
        self._marks.pop(token, None)

    def marks(self) -> list[tuple[str, float]]:
        return list(self._marks.values())

    def pause(self) -> None:
        self._paused += 1

    def resume(self) -> None:
        self._paused -= 1


def _recheck_interval(work: list[pending.Pending]) -> float | None:
    """How long a wait may last before the work must be looked at again.

    Jobs, children and connects end with an event (the waker, a pidfd, a
    writable socket); a socket's reply window, or a mark, ends silently.
    """
    if any(item.kind in ("socket", "thread", "autojump") for item in work):
        return _RECHECK
    return None


def _describe_work(item: pending.Pending, now_real: float) -> str:
    if item.since is None:
        return item.label
    held = now_real - item.since
    if item.kind == "socket":
        return f"{item.label} awaiting a reply for {held:.1f} s"
    return f"{item.label} (running {held:.1f} s)"


# -- snakeloop.testing's helpers -------------------------------------------------------


async def wait_all_tasks_blocked(cushion: float = 0.0) -> None:
    """Return once every other task has been blocked for ``cushion`` real seconds.

    As trio's: "blocked" means nothing is ready to run and no I/O is
    arriving; with a virtual clock, the waiter is woken before time jumps.
    """
    if isinstance(cushion, bool) or not isinstance(cushion, (int, float)) or not cushion >= 0:
        raise ValueError(f"cushion must be a number of seconds >= 0, got {cushion!r}")
    loop: Any = events.get_running_loop()
    if not hasattr(loop, "_use_idle_driver"):
        raise RuntimeError(
            "wait_all_tasks_blocked() needs a snakeloop loop, and this one is "
            f"{type(loop).__module__}.{type(loop).__qualname__}: run the test on snakeloop "
            "(snakeloop.run(), or pytest with the snakeloop marker)"
        )
    driver: VirtualTime = loop._use_idle_driver()
    future: asyncio.Future[None] = loop.create_future()
    driver.add_waiter(float(cushion), future)
    try:
        await future
    finally:
        driver.discard_waiter(future)
        loop._release_idle_driver()


class _DriverBlock:
    """A ``with`` or ``async with`` block that tells the running loop's driver it is open."""

    __slots__ = ("_driver",)

    def __init__(self) -> None:
        self._driver: VirtualTime | None = None

    def _open(self, driver: VirtualTime) -> None:
        raise NotImplementedError

    def _close(self, driver: VirtualTime) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        driver = getattr(events._get_running_loop(), "_virtual_time", None)
        if driver is not None and driver.is_virtual:
            self._driver = driver
            self._open(driver)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        driver, self._driver = self._driver, None
        if driver is not None:
            self._close(driver)

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


class external(_DriverBlock):  # noqa: N801 - used like a function: ``with external("label"):``
    """Hold virtual time while work the loop cannot see is under way.

    ``with external("billing API"):`` (or ``async with``) around code that
    waits for something outside the loop's view: a thread the loop did not
    start, a C library's own I/O.  Time does not jump while a block is open,
    and ``StallError`` names its label.  Outside a snakeloop loop with a
    virtual clock it does nothing.  Enter and leave it in the loop's thread.
    """

    __slots__ = ("_label", "_token")

    def __init__(self, label: str = "external work") -> None:
        super().__init__()
        self._label = str(label)
        self._token = -1

    def _open(self, driver: VirtualTime) -> None:
        self._token = driver.open_mark(f"external() block {self._label!r}")

    def _close(self, driver: VirtualTime) -> None:
        driver.close_mark(self._token)


class autojump_paused(_DriverBlock):  # noqa: N801 - used like a function
    """Stop virtual time from jumping while the block is open.

    Meanwhile virtual time follows real time, so timers still come due, in
    real time.  Outside a snakeloop loop with a virtual clock it does
    nothing.
    """

    __slots__ = ()

    def _open(self, driver: VirtualTime) -> None:
        driver.pause()

    def _close(self, driver: VirtualTime) -> None:
        driver.resume()
