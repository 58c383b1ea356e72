"""``VirtualClock``: loop time that jumps to the next timer when the loop is idle.

Time is kept as a whole number of ticks of ``resolution`` seconds and read
as ``ticks / ticks_per_second``: a correctly rounded division, so ten
``sleep(0.1)`` end at exactly ``1.0`` and every reading is the decimal the
test author wrote, where a running float sum would drift.

The clock only says what time it is.  When time jumps is decided by the
loop's idle driver (``snakeloop.virtualtime``): it moves the clock with
``_jump_to`` when nothing is ready and nothing outside the loop can still
happen.  ``rate`` lets virtual time also flow with real time between jumps.
"""

from __future__ import annotations

import math
import time
import weakref
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import asyncio

__all__ = ["VirtualClock"]

_real = time.monotonic


def _non_negative(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"VirtualClock {name} must be a number of seconds, not {value!r}")
    if not value >= 0 or math.isinf(value):
        raise ValueError(f"VirtualClock {name} must be a finite number >= 0, got {value!r}")
    return float(value)


class VirtualClock:
    """Loop time for tests: jumps to the next timer instead of waiting for it.

    ``start``: the time the clock reads first, or ``"continue"`` to go on
    from the time of the clock it replaces (``loop.set_clock``), so that a
    loop shared by several tests never sees time go backwards.

    ``autojump``: jump to the earliest timer when the loop is idle and no
    outside work is pending; ``autojump_threshold``: real seconds the loop
    must stay quiet first.  ``rate``: virtual seconds that pass per real
    second between jumps (0: time stands still while code runs).

    ``external_time``: while outside work is pending (executor jobs,
    children, sockets awaiting a peer outside the loop), ``"frozen"`` keeps
    virtual time still and raises ``StallError`` after ``stall_timeout``
    real seconds without progress; ``"real"`` lets virtual time follow real
    time meanwhile.  ``reply_window``: real seconds a socket to a peer
    outside the loop holds the jump after it sent, waiting for the answer.

    ``end``: the loop time at which ``VirtualTimeoutError`` is raised instead
    of jumping past it.  ``resolution``: the tick, in seconds.
    """

    is_virtual = True

    __slots__ = (
        "__weakref__",
        "resolution",
        "autojump",
        "autojump_threshold",
        "rate",
        "external_time",
        "stall_timeout",
        "reply_window",
        "end",
        "_start",
        "_ticks_per_second",
        "_ticks",
        "_real_base",
        "_real_started",
        "_loop_ref",
    )

    def __init__(
        self,
        start: float | Literal["continue"] = 0.0,
        *,
        autojump: bool = True,
        autojump_threshold: float = 0.0,
        rate: float = 0.0,
        external_time: Literal["frozen", "real"] = "frozen",
        stall_timeout: float | None = 30.0,
        reply_window: float = 0.25,
        resolution: float = 1e-6,
        end: float | None = None,
    ) -> None:
        resolution = _non_negative("resolution", resolution)
        ticks_per_second = round(1 / resolution) if resolution else 0
        if not ticks_per_second or abs(ticks_per_second * resolution - 1) > 1e-9:
            raise ValueError(
                "VirtualClock resolution must divide one second into a whole number of "
                f"ticks, as 1e-6 or 0.001 do; got {resolution!r}"
            )
        if start != "continue":
            if isinstance(start, bool) or not isinstance(start, (int, float)):
                raise TypeError(
                    f"VirtualClock start must be a number of seconds or 'continue', not {start!r}"
                )
            if not math.isfinite(start):
                raise ValueError(f"VirtualClock start must be finite, got {start!r}")
        if external_time not in ("frozen", "real"):
            raise ValueError(
                f"VirtualClock external_time must be 'frozen' or 'real', not {external_time!r}"
            )
        self.resolution = 1 / ticks_per_second
        self.autojump = bool(autojump)
        self.autojump_threshold = _non_negative("autojump_threshold", autojump_threshold)
        self.rate = _non_negative("rate", rate)
        self.external_time = external_time
        self.stall_timeout = (
            None if stall_timeout is None else _non_negative("stall_timeout", stall_timeout)
        )
        self.reply_window = _non_negative("reply_window", reply_window)
        if end is not None and (isinstance(end, bool) or not isinstance(end, (int, float))):
            raise TypeError(f"VirtualClock end must be a loop time in seconds or None, not {end!r}")
        self.end = None if end is None else float(end)
        self._start = start
        self._ticks_per_second = ticks_per_second
        self._ticks = 0 if start == "continue" else self._to_ticks(float(start))
        self._real_base = _real()
        self._real_started = self._real_base
        self._loop_ref: weakref.ReferenceType[Any] | None = None

    def __repr__(self) -> str:
        return (
            f"<VirtualClock now={self.monotonic()!r} autojump={self.autojump} "
            f"external_time={self.external_time!r}>"
        )

    # -- reading -------------------------------------------------------------

    def monotonic(self) -> float:
        """The current virtual time in seconds (what ``loop.time()`` returns)."""
        if self.rate:
            flowed = int((_real() - self._real_base) * self.rate * self._ticks_per_second)
            return (self._ticks + flowed) / self._ticks_per_second
        return self._ticks / self._ticks_per_second

    @property
    def now(self) -> float:
        """The current virtual time: the same as ``loop.time()``."""
        return self.monotonic()

    @property
    def real_elapsed(self) -> float:
        """Real seconds since this clock was made or last attached to a loop."""
        return _real() - self._real_started

    # -- moving ----------------------------------------------------------------

    def jump(self, seconds: float) -> None:
        """Move time forward by ``seconds``; timers that come due fire on the next iteration."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"jump() takes a number of seconds, not {seconds!r}")
        if seconds < 0:
            raise ValueError("time can't go backwards")
        self._settle()
        old = self._ticks
        self._ticks += self._to_ticks(seconds)
        self._report_jump(old)

    def _to_ticks(self, seconds: float) -> int:
        return round(seconds * self._ticks_per_second)

    def _settle(self) -> None:
        """Fold the time that flowed at ``rate`` into the ticks."""
        now_real = _real()
        if self.rate:
            self._ticks += int((now_real - self._real_base) * self.rate * self._ticks_per_second)
        self._real_base = now_real

    def _jump_to(self, when: float) -> None:
        """Move to the tick nearest ``when``, where a timer is due; always forward.

        A deadline built by float sums (``0.001 + 0.05`` is
        ``0.051000000000000004``) lies a hair after its tick.  Reading the
        tick is what keeps ten ``sleep(0.1)`` at exactly 1.0; but when that
        tick is the current one, the jump moves one tick on instead, or code
        that re-arms a timer until ``loop.time() >= deadline`` (anyio's
        cancel scopes) would find time standing still for ever.
        """
        self._settle()
        target = self._to_ticks(when)
        if target <= self._ticks and when > self._ticks / self._ticks_per_second:
            target = self._ticks + 1
        if target > self._ticks:
            old = self._ticks
            self._ticks = target
            self._report_jump(old)

    def _report_jump(self, old_ticks: int) -> None:
        """Tell the loop's instruments (``clock_jumped``) that time jumped."""
        if self._ticks == old_ticks:
            return
        owner = self._owner()
        emit = getattr(owner, "_emit_clock_jumped", None)
        if emit is not None:
            per_second = self._ticks_per_second
            emit(old_ticks / per_second, self._ticks / per_second)

    def _advance_real(self, seconds: float) -> None:
        """Let ``seconds`` of real time pass in virtual time too (external_time='real')."""
        self._settle()
        if seconds > 0:
            self._ticks += self._to_ticks(seconds)

    # -- the loop it belongs to -------------------------------------------------

    def _owner(self) -> Any:
        owner = self._loop_ref() if self._loop_ref is not None else None
        if owner is not None and owner.is_closed():
            return None
        return owner

    def _check_attachable(self, loop: asyncio.AbstractEventLoop) -> None:
        owner = self._owner()
        if owner is not None and owner is not loop:
            raise RuntimeError(f"VirtualClock is already attached to {owner!r}")

    def _attach(self, loop: asyncio.AbstractEventLoop, previous_now: float | None) -> None:
        """Belong to ``loop``; start from ``previous_now`` if ``start='continue'``."""
        self._check_attachable(loop)
        owner = self._owner()
        if self._start == "continue" and owner is None:
            self._ticks = self._to_ticks(_real() if previous_now is None else previous_now)
        self._loop_ref = weakref.ref(loop)
        self._real_base = self._real_started = _real()

    def _detach(self, loop: asyncio.AbstractEventLoop) -> None:
        owner = self._loop_ref() if self._loop_ref is not None else None
        if owner is loop:
            self._loop_ref = None
