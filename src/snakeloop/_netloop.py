"""The loop as the connecting and serving parts see it, for the type checker only.

A stand-in for ``_core.contract`` (``LoopContract`` and ``LoopMixinBase``),
written beside this module's users: it lists the private members that
``connecting``, ``serving`` and ``listeners`` use, all of them contract names.
Once ``_core.contract`` is in, its two names replace these and this module
goes.  At run time ``LoopMixinBase`` is ``object``, so nothing is added to the
loop's MRO.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["LoopContract", "LoopMixinBase"]

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable
    from typing import Any

    from ._core.handles import Handle
    from .offload import BlockingCall

    class LoopContract(asyncio.AbstractEventLoop):
        """asyncio's public loop, plus the contract members these parts use."""

        _debug: bool

        def _add_reader(self, fd: int, callback: Callable[..., object], *args: Any) -> Handle: ...

        def _remove_reader(self, fd: int) -> bool: ...

        def _call_blocking(self, func: Callable[..., Any], *args: Any) -> BlockingCall: ...

    LoopMixinBase = LoopContract
else:
    LoopContract = object
    LoopMixinBase = object
