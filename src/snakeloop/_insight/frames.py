"""Await chains and stacks of tasks, as report lines.

A suspended coroutine is read the way asyncio's own stack helpers read it:
``cr_frame`` and ``cr_await`` (``ag_frame``/``ag_await`` for async
generators, ``gi_frame``/``gi_yieldfrom`` for generator-based coroutines),
down to the object the innermost frame awaits.  A running coroutine has no
such chain to follow: its frames are on some thread's stack, found with
``sys._current_frames()`` (the reporting thread's own stack included).
"""

from __future__ import annotations

import linecache
import os
import sys
from asyncio import futures as aio_futures
from typing import Any

from .._core.futures import Future as _SnakeFuture
from .model import FrameLine


def _await_code(cls: Any) -> Any:
    """The code of the generator ``cls.__await__`` returns (compiled, Cython's)."""
    generator = cls.__new__(cls).__await__()
    code = generator.gi_code
    generator.close()
    return code


# The generator behind ``await fut`` of a Python future: it only yields the
# future, so the chain stops above it (the C Future's iterator has no frame).
# Read from a generator: compiled, snakeloop's __await__ is a C slot, with no
# code of its own.
_FUTURE_AWAIT_CODES = frozenset({_await_code(_SnakeFuture), _await_code(aio_futures._PyFuture)})  # type: ignore[attr-defined]

_STDLIB = os.path.dirname(os.__file__)
_INSIGHT_DIR = os.path.dirname(os.path.abspath(__file__))
_INSIGHT_FACE = os.path.join(os.path.dirname(_INSIGHT_DIR), "insight.py")
_LOOP_FILE = os.path.join(os.path.dirname(_INSIGHT_DIR), "loop.py")


def short_path(filename: str) -> str:
    """``filename`` relative to the working directory when under it, else to the
    standard library (``asyncio/queues.py``), else as it is."""
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    for base in (cwd, _STDLIB):
        if base and filename.startswith(base + os.sep):
            return filename[len(base) + 1 :]
    return filename


def frame_line(frame: Any) -> FrameLine:
    code = frame.f_code
    lineno = frame.f_lineno or code.co_firstlineno
    source = linecache.getline(code.co_filename, lineno, frame.f_globals).strip()
    return FrameLine(short_path(code.co_filename), lineno, code.co_qualname, source)


def site_line(filename: str, lineno: int, function: str = "") -> FrameLine:
    source = linecache.getline(filename, lineno).strip()
    return FrameLine(short_path(filename), lineno, function, source)


def await_chain(coro: Any) -> list[Any]:
    """The frames of a suspended coroutine and of what it awaits, outermost first."""
    frames = []
    seen = set()
    obj = coro
    while obj is not None and id(obj) not in seen:
        seen.add(id(obj))
        if hasattr(obj, "cr_frame"):
            frame, obj = obj.cr_frame, obj.cr_await
        elif hasattr(obj, "ag_frame"):
            frame, obj = obj.ag_frame, obj.ag_await
        elif hasattr(obj, "gi_frame"):
            if getattr(obj, "gi_code", None) in _FUTURE_AWAIT_CODES:
                break
            frame, obj = obj.gi_frame, obj.gi_yieldfrom
        else:
            break
        if frame is None:  # finished, or not started yet
            break
        frames.append(frame)
    return frames


def _is_report_machinery(frame: Any) -> bool:
    filename = frame.f_code.co_filename
    return (
        filename.startswith(_INSIGHT_DIR + os.sep)
        or filename == _INSIGHT_FACE
        or (filename == _LOOP_FILE and frame.f_code.co_name == "report")
    )


def running_stack(coro: Any) -> list[Any] | None:
    """The frames from a running coroutine down to the innermost call of the thread
    that runs it, outermost first; None when no thread is running it.

    The report's own frames are left out: a task that asks for a report sees its
    stack end at the call.
    """
    top = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
    if top is None:
        return None
    stacks = list(sys._current_frames().values())
    stacks.insert(0, sys._getframe())
    for innermost in stacks:
        frames = []
        frame: Any = innermost
        while frame is not None:
            frames.append(frame)
            if frame is top:
                frames.reverse()
                while frames and _is_report_machinery(frames[-1]):
                    frames.pop()
                return frames
            frame = frame.f_back
    return None
