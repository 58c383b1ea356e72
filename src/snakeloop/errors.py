"""The loop's exception handler: where errors nobody awaited end up.

Callbacks that raise, futures whose exception was never retrieved, tasks
destroyed while pending: each becomes a *context* dict passed to
``loop.call_exception_handler``.  With no custom handler the default one
logs it on the ``asyncio`` logger, in asyncio's exact format, so log
scrapers and tests written against asyncio keep working.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._core.contract import LoopMixinBase

if TYPE_CHECKING:
    from asyncio import AbstractEventLoop

__all__ = ["ExceptionHandlingMixin"]

logger = logging.getLogger("asyncio")

_RUN_HANDLER_IN_CONTEXT = sys.version_info >= (3, 12)


def _format_context(context: dict[str, Any]) -> str:
    message = context.get("message") or "Unhandled exception in event loop"
    lines = [message]
    for key in sorted(context):
        if key in ("message", "exception"):
            continue
        value = context[key]
        if key == "source_traceback":
            tb = "".join(traceback.format_list(value)).rstrip()
            value = "Object created at (most recent call last):\n" + tb
        elif key == "handle_traceback":
            tb = "".join(traceback.format_list(value)).rstrip()
            value = "Handle created at (most recent call last):\n" + tb
        else:
            value = repr(value)
        lines.append(f"{key}: {value}")
    return "\n".join(lines)


class ExceptionHandlingMixin(LoopMixinBase):
    """``set/get/default/call_exception_handler`` for the loop."""

    # A slot of Loop, None until set_exception_handler() (loop._SLOT_DEFAULTS).
    _exception_handler: Callable[[AbstractEventLoop, dict[str, Any]], object] | None

    def get_exception_handler(
        self,
    ) -> Callable[[AbstractEventLoop, dict[str, Any]], object] | None:
        """The custom handler, or None when the default one is in use."""
        return self._exception_handler

    def set_exception_handler(
        self, handler: Callable[[AbstractEventLoop, dict[str, Any]], object] | None
    ) -> None:
        """Use ``handler(loop, context)``; None restores the default."""
        if handler is not None and not callable(handler):
            raise TypeError(f"A callable object or None is expected, got {handler!r}")
        self._exception_handler = handler

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        """Log ``context`` on the ``asyncio`` logger."""
        exception = context.get("exception")
        exc_info: tuple[type[BaseException], BaseException, TracebackType | None] | bool
        if exception is not None:
            exc_info = (type(exception), exception, exception.__traceback__)
        else:
            exc_info = False
        current = self._current_handle
        # _source_traceback: asyncio's slot of every handle, not in typeshed.
        if (
            "source_traceback" not in context and current is not None and current._source_traceback  # type: ignore[attr-defined]
        ):
            context["handle_traceback"] = current._source_traceback  # type: ignore[attr-defined]
        logger.error(_format_context(context), exc_info=exc_info)

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        """Pass ``context`` to the custom handler, or the default one."""
        handler = self._exception_handler
        if handler is None:
            try:
                self.default_exception_handler(context)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                logger.error("Exception in default exception handler", exc_info=True)
            return
        try:
            ctx = None
            if _RUN_HANDLER_IN_CONTEXT:
                # The handler runs in the context of the object at fault, so
                # context variables (request ids...) are there for logging.
                thing = context.get("task")
                if thing is None:
                    thing = context.get("future")
                if thing is None:
                    thing = context.get("handle")
                if thing is not None and hasattr(thing, "get_context"):
                    ctx = thing.get_context()
            if ctx is not None and hasattr(ctx, "run"):
                ctx.run(handler, self, context)
            else:
                handler(self, context)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            try:
                self.default_exception_handler(
                    {
                        "message": "Unhandled error in exception handler",
                        "exception": exc,
                        "context": context,
                    }
                )
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                logger.error(
                    "Exception in default exception handler while handling an "
                    "unexpected error in custom exception handler",
                    exc_info=True,
                )
