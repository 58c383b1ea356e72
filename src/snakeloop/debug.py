"""Debug mode: switches and coroutine-origin tracking.

Debug mode is on when ``PYTHONASYNCIODEBUG`` is set (unless ``-E``), under
``-X dev``, or after ``loop.set_debug(True)``.  The core loop reads the
same ``_debug`` flag to record where handles were created, to time
callbacks against ``slow_callback_duration`` and to refuse
non-thread-safe calls from other threads.
"""

from __future__ import annotations

import sys
from asyncio import constants, coroutines

from ._core.contract import LoopMixinBase

__all__ = ["DebugMixin", "debug_from_environment"]


def debug_from_environment() -> bool:
    """What asyncio's debug default is for this process.

    asyncio's own switch is asked, so anything that overrides it for asyncio
    (tests patch it) overrides it for snakeloop too.
    """
    return bool(coroutines._is_debug_mode())  # type: ignore[attr-defined]  # not in typeshed


class DebugMixin(LoopMixinBase):
    """``set_debug`` and coroutine-origin tracking (``get_debug`` is the core loop's)."""

    _debug: bool  # the core loop's flag; this mixin is the one that sets it

    _origin_tracking_enabled = False
    _origin_tracking_saved_depth = 0

    def set_debug(self, enabled: bool) -> None:
        self._debug = enabled
        self._refresh_plain_ready()
        # Debug mode runs each callback through the observer, which times it.
        self._update_observer()
        if self.is_running():
            self.call_soon_threadsafe(self._set_coroutine_origin_tracking, enabled)

    def _set_coroutine_origin_tracking(self, enabled):
        # "coroutine was never awaited" warnings then say where it was made.
        if bool(enabled) == bool(self._origin_tracking_enabled):
            return
        if enabled:
            self._origin_tracking_saved_depth = sys.get_coroutine_origin_tracking_depth()
            sys.set_coroutine_origin_tracking_depth(constants.DEBUG_STACK_DEPTH)
        else:
            sys.set_coroutine_origin_tracking_depth(self._origin_tracking_saved_depth)
        self._origin_tracking_enabled = enabled
