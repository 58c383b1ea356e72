"""Step 5 of an iteration for a loop that watches its callbacks one by one.

The run loop's own step 5 (``_core.runloop``) runs callbacks without
looking at them.  When ``loop._observe`` is set it hands the step to an
``Observer`` instead, which runs the same callbacks in the same order and
also:

- in debug mode, sets ``loop._current_handle`` and logs asyncio's
  ``Executing <Handle ...> took 0.205 seconds`` for a slow one;
- in a metrics timing window or ``"exact"`` mode
  (``snakeloop.metrics.recorder``), times each callback and records a
  slow one with its task and the lines it ran between;
- with instruments installed (``snakeloop.instruments``), calls their
  callback and task-step hooks around each callback.

``Loop._update_observer`` sets ``_observe`` to an Observer when any of
these is wanted and back to None when none is, so the production
iteration pays one attribute test for all of them.  When timing is all
that is wanted, it sets ``_observe`` to a ``TimedSteps`` instead, and
``_timed`` to its fields, and the core runs the step itself (``CoreLoop._run_ready_timed``,
in C when compiled): a clock read per callback and a cheap reading of
where each task stands, so that the window a slow stretch opens costs the
loop little for the window's length.
"""

from __future__ import annotations

import logging
from typing import Any

from ._core.handles import context_of
from ._core.runloop import _as_handle, format_handle
from ._core.suspension import suspension_of
from ._insight.steps import (
    LIBRARY_FILES,
    SNAKE_TASK_STEP,
    SNAKE_TASK_WAKEUP,
    judge_file,
    task_stepped_by,
    task_stepped_in,
)

__all__ = ["Observer", "TimedSteps"]

# asyncio's logger: debug mode's slow-callback line is asyncio's own.
logger = logging.getLogger("asyncio")


class Observer:
    """Runs an iteration's ready callbacks one by one, watching each."""

    __slots__ = ("_loop", "_debug", "_recorder", "_instruments", "_tasks")

    def __init__(
        self,
        loop: Any,
        *,
        debug: bool,
        recorder: Any,
        instruments: Any = None,
        tasks: Any = None,
    ) -> None:
        self._loop = loop
        self._debug = debug
        # The metrics recorder while callbacks are timed, else None.
        self._recorder = recorder
        # The loop's InstrumentSet and TaskHooks while instruments are
        # installed, else None.
        self._instruments = instruments
        self._tasks = tasks

    def run_ready(self, ntodo: int) -> None:
        loop = self._loop
        ready = loop._ready
        # Read as asyncio's debug mode reads it, through loop.time: a test
        # that replaced it sees the durations it made.  The metrics record
        # only durations of the loop's own clock.
        now = loop._now
        debug = self._debug
        recorder = self._recorder
        record = recorder is not None and not loop._time_is_replaced()
        instruments = self._instruments
        tasks = self._tasks
        for _ in range(ntodo):
            entry = ready.popleft()
            # A plain entry runs as the Handle it stands for.
            handle = _as_handle(loop, entry)
            if handle._cancelled:
                continue
            if recorder is not None or instruments is not None:
                stepped = task_stepped_by(handle._callback, handle._args)
                if recorder is not None:
                    # Where the task stands now is where a slow step began.
                    start = (
                        None
                        if stepped is None
                        else suspension_of(stepped, LIBRARY_FILES, judge_file, True)
                    )
                if instruments is not None:
                    info = self._before(entry, handle, stepped)
            if debug:
                loop._current_handle = handle
            try:
                t0 = now()
                handle._run()
                dt = now() - t0
            finally:
                if debug:
                    loop._current_handle = None
            if instruments is not None:
                if stepped is not None:
                    tasks.after_step(stepped)
                if info is not None:
                    instruments.call("after_callback", info)
            if dt >= loop.slow_callback_duration:
                if debug:
                    logger.warning("Executing %s took %.3f seconds", format_handle(handle), dt)
                if record:
                    recorder.record(handle, dt, stepped, start)
        # The traceback of an error raised by the last callback may hold this
        # frame after the return.
        entry = handle = start = stepped = info = None  # type: ignore[assignment]
        if recorder is not None and recorder.window_closed(loop._clock.monotonic()):
            loop._update_observer()

    def _before(self, entry: Any, handle: Any, task: Any) -> Any:
        """The hooks before a callback; its CallbackInfo if after_callback wants one."""
        instruments = self._instruments
        info = None
        if instruments.has("before_callback") or instruments.has("after_callback"):
            from .instruments import CallbackInfo

            info = CallbackInfo(
                handle._callback,
                handle._args,
                context_of(handle),
                None if entry.__class__ is tuple else handle,
                task,
            )
            instruments.call("before_callback", info)
        if task is not None:
            self._tasks.before_step(task)
        return info


class TimedSteps:
    """What the core reads to time a window's callbacks itself
    (``CoreLoop._run_ready_timed``), while timing is all that is watched:
    the loop's ``_observe`` is this, and its ``_timed`` is ``fields()``."""

    __slots__ = ("_fields",)

    def __init__(self, loop: Any, recorder: Any) -> None:
        self._fields = (
            # The functions of snakeloop's plain step entries, (Task._step,
            # task, context) and (task._wakeup, future, context), told
            # without a call; any other entry is asked of task_stepped_in.
            SNAKE_TASK_STEP,
            SNAKE_TASK_WAKEUP,
            task_stepped_in,
            recorder.record,
            LIBRARY_FILES,
            judge_file,
            # Loop time at which the window closes (inf in "exact" mode).
            recorder.timing_until(),
            # Called at the first clock read past that time.
            loop._update_observer,
        )

    def fields(self) -> tuple[Any, ...]:
        return self._fields
