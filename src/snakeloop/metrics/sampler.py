"""``metrics="sampled"``: a thread that notices the loop thread stuck in one place.

Callback timing (``recorder``) needs the clock reads around callbacks; code
that holds the GIL in C for a long time, or a stall between two reads of a
busy loop outside a timing window, is seen only afterwards.  The sampler
looks at the loop thread's innermost frame every ``INTERVAL`` seconds with
``sys._current_frames()`` and reports a stall when the same frame stays at
the same instruction for ``slow_callback_duration`` or longer, unless
that frame is the run loop's own (a step in ``_core/runloop.py``) or a
``poll`` method: the loop waiting for I/O (its backends poll in C, called
from ``_run_iterations``).  In the compiled build ``_run_iterations`` has no
frame; the frame of the code that called it (``run_forever``'s) is then the
innermost one and stands for it,
and a wait in a poll is also told by the loop's counters, which mark it
(``wait_started`` after ``wait_ended``), for a loop run through a wrapped
``_run_once``.

Facts it relies on: ``sys._current_frames()`` is safe to call from any
thread and returns each thread's innermost frame; a thread that holds the
GIL keeps the sampler from running, so after such a stall the sampler's
first sample sees the time that passed.  The thread runs only while the
loop runs: ``run_forever`` starts it and stops and joins it on the way out.
"""

from __future__ import annotations

import sys
import threading
import time
from types import FrameType
from typing import Any

from .._core.runloop import CoreLoop

__all__ = ["INTERVAL", "Sampler"]

INTERVAL = 0.02

# The run loop and its steps (interpreted: the compiled ones have no frames).
_RUN_LOOP_FILE = CoreLoop._run_iterations.__code__.co_filename


def _waiting_in_poll(counters: Any) -> bool:
    started = counters.wait_started
    return started is not None and counters.wait_ended < started


class Sampler:
    """Samples one running loop's thread until ``stop()``."""

    def __init__(self, loop: Any, recorder: Any, runner: FrameType) -> None:
        """Sample the calling thread, which runs ``loop`` in the frame ``runner``."""
        self._loop = loop
        self._recorder = recorder
        self._runner: FrameType | None = runner
        self._thread_id = threading.get_ident()
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="snakeloop-metrics-sampler", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()
        self._runner = None

    def _run(self) -> None:
        held: Any = None  # (frame, instruction) seen last
        since = 0.0
        reported = False
        while not self._stopped.wait(INTERVAL):
            frame = sys._current_frames().get(self._thread_id)
            now = time.monotonic()
            if (
                frame is None
                or frame.f_code.co_filename == _RUN_LOOP_FILE
                or frame is self._runner
                or frame.f_code.co_name == "poll"
                or _waiting_in_poll(self._loop._counters)
            ):
                held = None
                continue
            place = (frame, frame.f_lasti)
            if held is None or place[0] is not held[0] or place[1] != held[1]:
                held, since, reported = place, now, False
                continue
            if not reported and now - since >= self._loop.slow_callback_duration:
                reported = True
                self._recorder.record_sampled(frame, now - since)
        held = frame = None
