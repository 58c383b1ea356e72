"""Slow-callback attribution: which task and which lines held the loop.

The run loop hands over two things (``_core.runloop``):

- ``on_slow_stretch(duration, count, timers, last)``: the stretch between
  two of its clock reads ran ``count`` callbacks (``timers`` of them timers,
  ``last`` the last one) and lasted longer than ``slow_callback_duration``.
  When it ran one, that one is recorded at once.  When it ran timers and
  then one task step (an ``asyncio.sleep`` timer waking the task that then
  blocked: the common shape), the step is recorded, with the timers
  counted in its label.  A task's record gives the line where it stands
  now and the line where the step began as its code tells it
  (``_insight.resumes``): where it stood was not read before the step,
  which would cost every step a frame walk.  Of any other stretch only how
  many callbacks ran is known: a record says so, and the loop then times
  every callback for ``WINDOW`` seconds (a timing window, at most one
  every ``WINDOW_EVERY`` seconds, so its cost stays under 1% of the time),
  and any slow one in the window is recorded with its task and lines;
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

    def on_slow_stretch(
        self, duration: float, count: int = 0, timers: int = 0, last: Any = None
    ) -> None:
        """The ``count`` callbacks between two of the run loop's clock reads,
        ``timers`` of them timers, ran ``duration`` seconds; ``last`` is the
        entry of the last of them, when the run loop kept it (None otherwise)."""
        loop = self._loop
        # The loop's own clock: the windows are stretches of real (or virtual)
        # time, whatever replaced loop.time.
        now = loop._clock.monotonic()
        if self.timing(now):
            return  # the observer times each callback itself
        task = None
        if last is not None:
            from .._insight.steps import task_stepped_in

            task = task_stepped_in(last)
            if count == 1:
                # One callback held the loop: it is the slow one, known without
                # timing anything.
                self.record(last, duration, task, None)
                return
        if task is not None and count - timers == 1:
            # Timers, then one task step: the timer that woke the task (an
            # asyncio.sleep's) and the step, its usual shape.  The step is
            # named, with the timers that ran before it counted; a timer may
            # have been the slow one, so the window below opens all the same.
            self.record(last, duration, task, None, timers)
        else:
            self._record_stretch(duration, count)
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
            "%r ran %s for %.3f seconds without a pause, longer than "
            "slow_callback_duration (%.3f s)%s",
            loop,
            _callbacks_text(count),
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

    def _record_stretch(self, duration: float, count: int) -> None:
        """A record of a slow stretch of several callbacks, none of them named:
        how many ran is what is known without a clock read per callback."""
        loop = self._loop
        record = SlowCallback(
            duration=duration,
            task_name=None,
            coro_qualname=None,
            segment=None,
            callback_label=_callbacks_text(count),
            iteration=loop._counters.iterations,
            wall_time=time.time(),
        )
        self._ring.append(record)
        loop._emit_slow_callback(record)

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

    def record(
        self, entry: Any, duration: float, task: Any, start: Any, timers: int = 0
    ) -> SlowCallback:
        """Record a slow callback: ``entry`` as the ready queue held it, the
        ``task`` it stepped (or None) and ``start``, where that task stood
        before the step (a ``suspension_of`` reading, None when not read).
        ``timers``: ``duration`` is that of a stretch in which that many
        timers ran before this callback."""
        from .._insight.steps import (
            callback_label,
            callback_of,
            coro_qualname,
            place_of,
            place_text,
            step_start,
            suspension_after_step,
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
            after = suspension_after_step(task)
            end = place_of(after)
            if start is None:
                # Not read before the step: where the code says it began.
                began = step_start(after)
                segment = f"{place_text(began)} → {place_text(end)}"
            else:
                segment = f"{place_text(place_of(start))} → {place_text(end)}"
            label = f"step of {name!r}" if name else "task step"
        if timers:
            label = f"{label}, after {_timers_text(timers)} in the same stretch"
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


def _callbacks_text(count: int) -> str:
    if count <= 0:
        return "the loop's own work (no callback ran)"
    return "1 callback" if count == 1 else f"{count} callbacks"


def _timers_text(count: int) -> str:
    return "1 timer" if count == 1 else f"{count} timers"
