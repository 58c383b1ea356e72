"""Which asyncio primitive a waited-on future belongs to, and its state.

A task blocked in ``Queue.get`` waits on a bare future that the queue keeps
in its ``_getters`` deque; the future itself does not know the queue.  The
owner is found from the waiting side: the innermost frame of the task's
await chain whose ``self`` is a primitive (``Queue.get``, ``Event.wait``,
``Lock.acquire``, ``Condition.wait``, ``Semaphore.acquire``,
``Barrier.wait``).  With ``referrers=True`` it is found from the future's
side instead, through the garbage collector's referrers (the deque holding
the future, then the primitive holding the deque), which also works when the
waiting frame is not the primitive's own method; that walk is slow and only
runs when asked for.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

_PRIMITIVES = (
    asyncio.Queue,
    asyncio.Event,
    asyncio.Condition,
    asyncio.Semaphore,
    asyncio.Lock,
    asyncio.Barrier,
)
# Where each primitive keeps its waiting futures.
_WAITER_DEQUES = ("_waiters", "_getters", "_putters")


def type_name(obj: Any) -> str:
    cls = type(obj)
    module = cls.__module__
    if module == "asyncio" or module.startswith("asyncio."):
        return f"asyncio.{cls.__qualname__}"
    return f"{module}.{cls.__qualname__}"


def _count(deque: Any) -> int:
    return len(deque) if deque is not None else 0


def state_of(owner: Any) -> dict[str, object]:
    """The primitive's state, as report fields in a fixed order."""
    if isinstance(owner, asyncio.Queue):
        return {
            "maxsize": owner.maxsize,
            "size": owner.qsize(),
            "getters": _count(getattr(owner, "_getters", None)),
            "putters": _count(getattr(owner, "_putters", None)),
        }
    waiters = _count(getattr(owner, "_waiters", None))
    if isinstance(owner, asyncio.Event):
        return {"set": owner.is_set(), "waiters": waiters}
    if isinstance(owner, asyncio.Condition):
        return {"locked": owner.locked(), "waiters": waiters}
    if isinstance(owner, asyncio.Semaphore):
        return {"value": owner._value, "waiters": waiters}
    if isinstance(owner, asyncio.Lock):
        return {"locked": owner.locked(), "waiters": waiters}
    if isinstance(owner, asyncio.Barrier):
        return {"parties": owner.parties, "n_waiting": owner.n_waiting, "broken": owner.broken}
    return {}


def state_text(owner: Any, state: dict[str, object]) -> str:
    """``asyncio.Queue <maxsize=0 size=0 getters=1 putters=0>``, ``asyncio.Event <unset
    waiters=1>``, ``asyncio.Lock <locked waiters=1>``: flags as words, numbers as fields."""
    words = []
    for key, value in state.items():
        if key == "set":
            words.append("set" if value else "unset")
        elif key == "locked":
            words.append("locked" if value else "unlocked")
        elif key == "broken":
            if value:
                words.append("broken")
        else:
            words.append(f"{key}={value}")
    return f"{type_name(owner)} <{' '.join(words)}>"


def owner_from_frames(frames: list[Any]) -> Any:
    """The primitive whose method the innermost frames are in, or None."""
    for frame in reversed(frames):
        if "self" not in frame.f_code.co_varnames:
            continue
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, _PRIMITIVES):
            return candidate
    return None


def _holds_in_deque(owner: Any, deque: Any) -> bool:
    return any(getattr(owner, name, None) is deque for name in _WAITER_DEQUES)


def owner_from_referrers(fut: Any) -> Any:
    """The primitive whose waiter deque holds ``fut``, found through gc referrers."""
    for deque in gc.get_referrers(fut):
        if type(deque).__name__ != "deque":
            continue
        for holder in gc.get_referrers(deque):
            # An instance dict when the object has one, else the object itself.
            candidates = gc.get_referrers(holder) if isinstance(holder, dict) else [holder]
            for owner in candidates:
                if isinstance(owner, _PRIMITIVES) and _holds_in_deque(owner, deque):
                    return owner
    return None


def frames_holding(obj: Any, frames: list[Any]) -> bool:
    """Whether any of ``frames`` has ``obj`` in a local variable."""
    for frame in frames:
        try:
            values = list(frame.f_locals.values())
        except Exception:
            continue
        if any(value is obj for value in values):
            return True
    return False
