"""Async-generator hooks: finalize generators on the loop that ran them.

While the loop runs, ``sys.set_asyncgen_hooks`` points at this loop.  A
generator first iterated here is remembered (weakly); when it is garbage
collected before being exhausted, its ``aclose()`` is scheduled as a task
on the loop, because its ``finally`` blocks may need to await.
``shutdown_asyncgens`` closes the ones still alive at the end.
"""

from __future__ import annotations

import warnings
import weakref
from asyncio import tasks

from ._core.contract import LoopMixinBase

__all__ = ["AsyncGenMixin"]


class AsyncGenMixin(LoopMixinBase):
    """Hooks and ``shutdown_asyncgens``."""

    def _init_asyncgens(self):
        self._asyncgens = weakref.WeakSet()
        self._asyncgens_shutdown_called = False

    def _asyncgen_finalizer_hook(self, agen):
        self._asyncgens.discard(agen)
        if not self.is_closed():
            # May run in any thread (the GC's), hence threadsafe.
            self.call_soon_threadsafe(self.create_task, agen.aclose())

    def _asyncgen_firstiter_hook(self, agen):
        if self._asyncgens_shutdown_called:
            warnings.warn(
                f"asynchronous generator {agen!r} was scheduled after "
                f"loop.shutdown_asyncgens() call",
                ResourceWarning,
                stacklevel=1,  # asyncio's: the warning names this line
                source=self,
            )
        self._asyncgens.add(agen)

    async def shutdown_asyncgens(self) -> None:
        """Close every async generator that is still alive."""
        self._asyncgens_shutdown_called = True
        if not len(self._asyncgens):
            return
        closing = list(self._asyncgens)
        self._asyncgens.clear()
        results = await tasks.gather(*[ag.aclose() for ag in closing], return_exceptions=True)
        for result, agen in zip(results, closing, strict=True):
            if isinstance(result, Exception):
                self.call_exception_handler(
                    {
                        "message": (
                            f"an error occurred during closing of asynchronous generator {agen!r}"
                        ),
                        "exception": result,
                        "asyncgen": agen,
                    }
                )
