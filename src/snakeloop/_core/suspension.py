# cython: annotation_typing=False
"""Where a suspended task stands: the frames of its await chain, read cheaply.

The run loop's timed ready loop (``CoreLoop._run_ready_timed``, compiled) and the
insight code (``snakeloop._insight.steps``, ``observing``) read a task's place
between its steps with ``suspension_of``; a slow step is then told by the lines it
ran between.  It is compiled with the run loop, which calls it in C before every
step that a metrics timing window times.

CPython facts it relies on (3.11 to 3.15): a native coroutine's ``cr_await`` is
what it awaits and ``cr_frame`` its frame, None once it is finished; a
generator-based coroutine's are ``gi_yieldfrom`` and ``gi_frame``; reading
``cr_frame`` makes a frame object if there was none; ``cr_suspended`` (3.11+)
tells a coroutine that has started and waits from one that has not; a frame's
``f_lasti``, read, names the place for good, where its line read later would be
wherever the frame has moved on to.
"""

from __future__ import annotations

import types
from typing import Any

__all__ = ["suspension_of"]

# The chain a suspended task is followed down (see suspension_of): native
# coroutines and generator-based ones, by their exact types first.
_CoroutineType = types.CoroutineType
_GeneratorType = types.GeneratorType
# A chain is a few levels deep; a cycle or an endless chain of custom awaitables
# stops here.
_MAX_SUSPENSION_DEPTH = 64
# Whether a coroutine tells it is suspended (3.11+; maybe not elsewhere).
_TELLS_SUSPENDED = hasattr(_CoroutineType, "cr_suspended")


def _in_library(filename: str, library_files: dict[str, bool], judge: Any) -> bool:
    verdict = library_files.get(filename)
    if verdict is None:
        verdict = judge(filename)
    return bool(verdict)


def suspension_of(
    task: Any, library_files: dict[str, bool], judge: Any, before_step: bool = False
) -> list[Any] | None:
    """Where ``task`` is suspended, cheaply: ``[frame, lasti, frame, lasti, ...]``
    from its coroutine down what it awaits, outermost first, each frame with
    its instruction offset; None when nothing is suspended (finished, or no
    frame to read).

    The chain stops above the first coroutine below the task's own whose
    file is a library's (asyncio's, snakeloop's): ``library_files`` maps the
    files seen to that verdict, and ``judge(filename)`` gives it for a new
    one (and adds it).  The innermost frame left is the task's own code where
    it waits.  A library's frames are not even read: reading ``cr_frame``
    makes a frame object.

    Taken before every step that a metrics timing window times
    (``before_step``: a coroutine that is not suspended then has not started;
    it stands as its code with offset -1, its frame unread), so it keeps
    offsets, not lines: they stay true after the step moves the frames on,
    and a line is looked up (``snakeloop._insight.steps.place_of``) only for
    a step that proved slow.
    """
    try:
        obj = task.get_coro()
    except Exception:
        return None
    chain: list[Any] = []
    depth = 0
    while obj is not None and depth < _MAX_SUSPENSION_DEPTH:
        kind = type(obj)
        if kind is _CoroutineType:
            if depth:
                if _in_library(obj.cr_code.co_filename, library_files, judge):
                    break
            elif _TELLS_SUSPENDED and not obj.cr_suspended and not obj.cr_running:
                # The task's coroutine has not started (or is over): its frame
                # is not read, which would make a frame object per new task.
                if before_step:
                    chain.append(obj.cr_code)
                    chain.append(-1)
                break
            frame = obj.cr_frame
            obj = obj.cr_await
        elif kind is _GeneratorType:
            if depth and _in_library(obj.gi_code.co_filename, library_files, judge):
                break
            frame = obj.gi_frame
            obj = obj.gi_yieldfrom
        else:
            # Another coroutine-like type (a compiled or a custom one), read
            # the way asyncio's stack helpers read it.
            frame = getattr(obj, "cr_frame", None)
            if frame is not None:
                obj = getattr(obj, "cr_await", None)
            else:
                frame = getattr(obj, "gi_frame", None)
                obj = getattr(obj, "gi_yieldfrom", None)
            if frame is None:
                break
            if depth and _in_library(frame.f_code.co_filename, library_files, judge):
                break
        if frame is None:
            break
        chain.append(frame)
        chain.append(frame.f_lasti)
        depth += 1
    return chain or None
