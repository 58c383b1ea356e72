"""Step 5 of an iteration for a loop that watches its callbacks one by one.

The run loop's own step 5 (``_core.runloop``) runs callbacks without
looking at them.  When ``loop._observe`` is set it hands the step to an
``Observer`` instead, which runs the same callbacks in the same order and
also:

- in debug mode, sets ``loop._current_handle`` and logs asyncio's
  ``Executing <Handle ...> took 0.205 seconds`` for a slow one;
- in a metrics timing window or ``"exact"`` mode
  (``snakeloop.metrics.recorder``), times each callback and records a
  slow one with its task and the lines it ran between.

``Loop._update_observer`` sets ``_observe`` to an Observer when any of
these is wanted and back to None when none is, so the production
iteration pays one attribute test for all of them.
"""

from __future__ import annotations

import logging
from typing import Any

from ._core.runloop import _as_handle, format_handle

__all__ = ["Observer"]

# asyncio's logger: debug mode's slow-callback line is asyncio's own.
logger = logging.getLogger("asyncio")


class Observer:
    """Runs an iteration's ready callbacks one by one, watching each."""

    __slots__ = ("_loop", "_debug", "_recorder")

    def __init__(self, loop: Any, *, debug: bool, recorder: Any) -> None:
        self._loop = loop
        self._debug = debug
        # The metrics recorder while callbacks are timed, else None.
        self._recorder = recorder

    def run_ready(self, ntodo: int) -> None:
        loop = self._loop
        ready = loop._ready
        now = loop._now
        debug = self._debug
        recorder = self._recorder
        for _ in range(ntodo):
            # A plain entry runs as the Handle it stands for.
            handle = _as_handle(loop, ready.popleft())
            if handle._cancelled:
                continue
            if recorder is not None:
                task, start = recorder.start_of(handle)
            if debug:
                loop._current_handle = handle
            try:
                t0 = now()
                handle._run()
                dt = now() - t0
            finally:
                if debug:
                    loop._current_handle = None
            if dt >= loop.slow_callback_duration:
                if debug:
                    logger.warning("Executing %s took %.3f seconds", format_handle(handle), dt)
                if recorder is not None:
                    recorder.record(handle, dt, task, start)
        # The traceback of an error raised by the last callback may hold this
        # frame after the return.
        handle = task = start = None  # type: ignore[assignment]
        if recorder is not None and recorder.window_closed(now()):
            loop._update_observer()
