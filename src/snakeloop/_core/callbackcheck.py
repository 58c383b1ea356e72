"""Whether a callback handed to the loop is a coroutine, or a function that makes one.

asyncio refuses both in ``call_soon``, ``call_later``, ``call_at``,
``call_soon_threadsafe``, ``run_in_executor`` and ``add_signal_handler``.  From 3.14
``asyncio.iscoroutinefunction`` is deprecated and warns on every call; asyncio's own loop
calls the private check beneath it instead, so that a debug-mode program that schedules a
callback warns of nothing.  snakeloop makes the same check the same silent way.
"""

from __future__ import annotations

from asyncio import coroutines

_is_coroutine_function = getattr(coroutines, "_iscoroutinefunction", coroutines.iscoroutinefunction)
_is_coroutine = coroutines.iscoroutine


def is_coroutine_callback(callback: object) -> bool:
    return _is_coroutine(callback) or _is_coroutine_function(callback)
