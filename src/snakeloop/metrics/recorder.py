"""Slow-callback attribution: which task and which lines held the loop.

The run loop hands over two things (``_core.runloop``):

- ``on_slow_stretch(duration)``: the stretch between two of its clock
  reads ran longer than ``slow_callback_duration``.  It cannot say which
  of its callbacks was slow, so the loop then times every callback
  for ``WINDOW`` seconds (a timing window, at most one every
  ``WINDOW_EVERY`` seconds, so its cost stays under 1% of the time), and
  any slow one in the window is recorded with its task and lines;
- with the window open (or in ``"exact"`` mode), each slow callback from
  the observer (``snakeloop.observing``) through ``record``.

A record goes to the ring of the last ``RING`` records
(``loop.metrics().slow_callbacks``) and to the instruments' ``slow_callback``
hook.  Nothing is logged unless the loop was asked to
(``log_slow_callbacks=True``, ``SNAKELOOP_LOG_SLOW_CALLBACKS=1``): asyncio
says nothing of a slow callback outside debug mode, and a program's stderr
must not differ from asyncio's.  Debug mode's ``Executing ... took`` line
is asyncio's own and comes from the observer (``snakeloop.observing``).
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any

from . import SlowCallback

# The attribution helpers (``_insight.steps``) are imported when a window
# first times a callback: a loop that is never slow never loads them.

__all__ = ["RING", "WINDOW", "WINDOW_EVERY", "MetricsRecorder"]

logger = logging.getLogger("snakeloop")

RING = 32
WINDOW = 10.0
WINDOW_EVERY = 100.0


class MetricsRecorder:
    """A loop's slow-callback records and its timing window."""

    __slots__ = (
        "_loop",
        "mode",
        "exact",
        "log",
        "_ring",
        "_window_until",
        "_window_opened",
        "_quiet_until",
        "_unreported",
    )

    def __init__(self, loop: Any, mode: bool | str, log: bool = False) -> None:
        self._loop = loop
        self.mode = mode
        self.exact = mode == "exact"
        # Whether slow stretches and records are also logged (opt-in).
        self.log = log
        self._ring: collections.deque[SlowCallback] = collections.deque(maxlen=RING)
        self._window_until = float("-inf")
        self._window_opened = float("-inf")
        # Slow stretches outside a window are logged once per WINDOW seconds.
        self._quiet_until = float("-inf")
        self._unreported = 0

    def recent(self) -> tuple[SlowCallback, ...]:
        return tuple(self._ring)

    def timing(self, now: float) -> bool:
        """Whether every callback is timed at loop time ``now``."""
        return self.exact or now < self._window_until

    def on_slow_stretch(self, duration: float) -> None:
        loop = self._loop
        # The loop's own clock: the windows are stretches of real (or virtual)
        # time, whatever replaced loop.time.
        now = loop._clock.monotonic()
        if self.timing(now):
            return  # the observer times each callback itself
        opens = now - self._window_opened >= WINDOW_EVERY
        if not self.log:
            if opens:
                self._open_window(now)
            return
        if not opens and now < self._quiet_until:
            # Between windows, one message per window length at most: a
            # handler that blocks on every request would flood the log.
            self._unreported += 1
            return
        self._quiet_until = now + WINDOW
        unreported, self._unreported = self._unreported, 0
        logger.warning(
            "%r ran callbacks for %.3f seconds without a pause, longer than "
            "slow_callback_duration (%.3f s)%s",
            loop,
            duration,
            loop.slow_callback_duration,
            (
                f"; timing every callback for the next {WINDOW:g} s to name the slow one "
                "(see loop.metrics().slow_callbacks)"
                if opens
                else f"; {unreported} more such stretches since the last message"
                if unreported
                else ""
            ),
        )
        if opens:
            self._open_window(now)

    def _open_window(self, now: float) -> None:
        self._window_opened = now
        self._window_until = now + WINDOW
        self._loop._update_observer()

    def timing_until(self) -> float:
        """The loop time at which the timing window closes (inf in ``"exact"`` mode)."""
        return float("inf") if self.exact else self._window_until

    def window_closed(self, now: float) -> bool:
        return not self.exact and now >= self._window_until

    def record_sampled(self, frame: Any, duration: float) -> SlowCallback:
        """The sampler thread saw the loop thread held at ``frame`` for ``duration``."""
        import asyncio

        from .._insight.steps import coro_qualname, place_text, user_frame

        loop = self._loop
        task = asyncio.current_task(loop)
        where = user_frame(frame)
        place = (where.f_code.co_filename, where.f_lineno or where.f_code.co_firstlineno)
        record = SlowCallback(
            duration=duration,
            task_name=None if task is None else task.get_name(),
            coro_qualname=None if task is None else coro_qualname(task),
            segment=f"? → {place_text(place)}",
            callback_label=f"sampled: held in {where.f_code.co_qualname}",
            iteration=loop._counters.iterations,
            wall_time=time.time(),
        )
        self._ring.append(record)
        if self.log:
            self._log_sampled(record, where, place, task)
        try:
            loop.call_soon_threadsafe(loop._emit_slow_callback, record)
        except RuntimeError:  # the loop closed meanwhile
            pass
        return record

    def _log_sampled(self, record: SlowCallback, where: Any, place: Any, task: Any) -> None:
        from .._insight.steps import place_text

        logger.warning(
            "The loop's thread has been held for %.3f seconds at %s (in %s)%s",
            record.duration,
            place_text(place),
            where.f_code.co_qualname,
            "" if task is None else f", in a step of task {task.get_name()!r}",
        )

    def record(self, entry: Any, duration: float, task: Any, start: Any) -> SlowCallback:
        """Record a slow callback: ``entry`` as the ready queue held it, the
        ``task`` it stepped (or None) and ``start``, where that task stood
        before the step (a ``suspension_of`` reading)."""
        from .._insight.steps import (
            callback_label,
            callback_of,
            coro_qualname,
            place_of,
            place_text,
            where_suspended,
        )

        callback = callback_of(entry)
        loop = self._loop
        if task is None:
            name = qualname = segment = None
            label = callback_label(callback)
        else:
            try:
                name = task.get_name()
            except Exception:
                name = None
            qualname = coro_qualname(task)
            # None once the step finished the task: its frame is gone.
            end = where_suspended(task)
            segment = f"{place_text(place_of(start))} → {place_text(end)}"
            label = f"step of {name!r}" if name else "task step"
        record = SlowCallback(
            duration=duration,
            task_name=name,
            coro_qualname=qualname,
            segment=segment,
            callback_label=label,
            iteration=loop._counters.iterations,
            wall_time=time.time(),
        )
        self._ring.append(record)
        if self.log:
            if task is None:
                logger.warning("Slow callback %s took %.3f seconds", label, duration)
            else:
                logger.warning(
                    "Slow step of task %r (%s) took %.3f seconds: %s",
                    name,
                    qualname,
                    duration,
                    segment,
                )
        loop._emit_slow_callback(record)
        return record
