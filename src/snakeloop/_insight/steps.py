"""Which task a ready callback steps, and where that task's code stands.

A task step reaches the ready queue in one of these shapes (see
``docs/design.md`` and determinism.md section 1):

- snakeloop's ``Task``: a plain entry ``(Task._step, task, context)`` or
  ``(task._wakeup, future, context)``, or a Handle holding the bound
  ``task._step`` (debug mode, or a loop that takes no plain entries);
- asyncio's C ``Task``: a Handle whose callback is a ``TaskStepMethWrapper``
  or the builtin ``task_wakeup``, both with the task as ``__self__``;
- asyncio's ``_PyTask``: a Handle holding its bound ``__step``/``__wakeup``.

A task as ``__self__`` is not enough (``call_soon(task.cancel)`` is no
step), so the callback itself is recognised.  ``Task._step`` itself, the
function, is a step of the task it is given.
"""

from __future__ import annotations

import os
from asyncio import tasks as aio_tasks
from types import FrameType
from typing import Any

from .._core.futures import Task as _SnakeTask
from .._core.suspension import suspension_of
from .frames import _STDLIB, short_path

_STEP_FUNCTIONS = frozenset(
    {
        _SnakeTask._step,
        _SnakeTask._wakeup,
        aio_tasks._PyTask._Task__step,  # type: ignore[attr-defined]
        aio_tasks._PyTask._Task__wakeup,  # type: ignore[attr-defined]
    }
)
# The callback of a plain step entry, (SNAKE_TASK_STEP, task, context), and
# the function of the bound method in a wakeup entry, (task._wakeup, future,
# context).
SNAKE_TASK_STEP = _SnakeTask._step
SNAKE_TASK_WAKEUP = _SnakeTask._wakeup
_ASYNCIO_DIR = os.path.dirname(aio_tasks.__file__) + os.sep
_SNAKELOOP_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIBRARY_DIRS = (_STDLIB + os.sep, _SNAKELOOP_DIR)


def callback_of(entry: Any) -> Any:
    """The callable a ready-queue entry (plain tuple or Handle) runs."""
    if entry.__class__ is tuple:
        return entry[0]
    return getattr(entry, "_callback", None)


def task_stepped_in(entry: Any) -> Any:
    """The task a ready-queue entry (plain tuple or Handle) takes a step of, or None."""
    if entry.__class__ is tuple:
        return task_stepped_by(entry[0], entry[1:2])
    return task_stepped_by(getattr(entry, "_callback", None), getattr(entry, "_args", ()))


def task_stepped_by(callback: Any, args: Any = ()) -> Any:
    """The task ``callback(*args)`` takes a step of, or None."""
    if callback is SNAKE_TASK_STEP:
        return args[0] if args else None
    owner = getattr(callback, "__self__", None)
    if owner is None:
        return None
    if getattr(callback, "__func__", None) in _STEP_FUNCTIONS:
        return owner
    if type(callback).__name__ == "TaskStepMethWrapper":
        return owner
    if getattr(callback, "__name__", None) == "task_wakeup" and hasattr(owner, "get_coro"):
        return owner
    return None


# Whether a source file is asyncio's or snakeloop's, learnt once per file by
# judge_file: what suspension_of reads to stop at library code.
LIBRARY_FILES: dict[str, bool] = {}


def judge_file(filename: str) -> bool:
    verdict = LIBRARY_FILES[filename] = filename.startswith((_ASYNCIO_DIR, _SNAKELOOP_DIR))
    return verdict


def where_suspended(task: Any) -> tuple[str, int] | None:
    """``(file, line)`` of the innermost code of the task's own where it waits.

    Frames of asyncio and snakeloop are passed over, so ``await
    asyncio.sleep(1)`` stands at the line of that await, not in ``sleep``.
    None when the task has no suspended frame (finished, or not started).
    """
    return place_of(suspension_after_step(task))


def suspension_after_step(task: Any) -> list[Any] | None:
    """``suspension_of`` the task, read between its steps."""
    return suspension_of(task, LIBRARY_FILES, judge_file)


def step_start(suspension: list[Any] | None) -> tuple[str, int] | None:
    """``(file, line)`` where the step that left a task at ``suspension`` (read
    after it) began, as its code tells it (``_insight.resumes``), or None."""
    from .resumes import step_start as start_in_code

    began = start_in_code(suspension, _line_at)
    return None if began is None else (began[0].co_filename, began[1])


def place_of(suspension: list[Any] | None) -> tuple[str, int] | None:
    """``(file, line)`` that a ``suspension_of`` reading stands for, as
    ``where_suspended`` gives it, even after the frames have moved on: the
    innermost frame of the reading (a code object for a coroutine that had
    not started)."""
    if not suspension:
        return None
    where = suspension[-2]
    code = where.f_code if isinstance(where, FrameType) else where
    return (code.co_filename, _line_at(code, suspension[-1]))


def _line_at(code: Any, lasti: int) -> int:
    """The line of the instruction at byte offset ``lasti``: the frame's
    ``f_lineno`` when it stood there; the first line for a coroutine not
    started (-1)."""
    if lasti < 0:
        return code.co_firstlineno  # type: ignore[no-any-return]
    for start, end, line in code.co_lines():
        if start <= lasti < end:
            return line or code.co_firstlineno  # type: ignore[no-any-return]
    return code.co_firstlineno  # type: ignore[no-any-return]


def user_frame(frame: Any) -> Any:
    """The innermost frame of ``frame``'s stack outside the standard library and
    snakeloop (``frame`` itself when there is none): where a program's own code is."""
    user = frame
    while user is not None and user.f_code.co_filename.startswith(_LIBRARY_DIRS):
        user = user.f_back
    return frame if user is None else user


def place_text(place: tuple[str, int] | None) -> str:
    """``file:line`` for a report, ``?`` when unknown."""
    if place is None:
        return "?"
    return f"{short_path(place[0])}:{place[1]}"


def coro_qualname(task: Any) -> str | None:
    try:
        coro = task.get_coro()
    except Exception:
        return None
    code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
    if code is not None:
        return code.co_qualname  # type: ignore[no-any-return]
    return getattr(coro, "__qualname__", None) or type(coro).__qualname__


def callback_label(callback: Any, args: Any = ()) -> str:
    """A short name for a callback that is no task step."""
    name = getattr(callback, "__qualname__", None) or getattr(callback, "__name__", None)
    if name is None:
        return repr(callback)
    module = getattr(callback, "__module__", None)
    return f"{module}.{name}" if module else name
