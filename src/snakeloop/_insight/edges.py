"""Who awaits a future, read from its done callbacks.

Nothing records "task A awaits task B" as it happens (that would cost every
task switch); the report derives it from what the waiting side left on the
awaited future's callback list:

- a task's wakeup: snakeloop's ``Task._wakeup`` and ``_PyTask``'s
  ``__wakeup`` (bound methods), the C Task's builtin ``task_wakeup``; the
  task is ``__self__``;
- ``gather``'s ``_done_callback`` and ``shield``'s ``_inner_done_callback``
  (the combined future is their closure cell ``outer``), ``wait``'s
  ``_on_completion`` (cell ``waiter``), 3.11's ``wait_for`` (a partial of
  ``_release_waiter`` on its waiter): whoever awaits that future awaits this
  one, through the combinator;
- ``TaskGroup._on_task_done``: the group's ``_parent_task`` waits for it;
- ``run_until_complete``'s ``_run_until_complete_cb``: the loop's caller.

Futures are read only through ``_callbacks`` (snakeloop's Future offers it as
a view of its inline callback slots); tasks through public methods.
"""

from __future__ import annotations

import functools
from asyncio import base_events, futures, tasks
from typing import Any

from .._core.futures import Task as _SnakeTask

_WAKEUPS = frozenset({_SnakeTask._wakeup, tasks._PyTask._Task__wakeup})  # type: ignore[attr-defined]

# (module, qualified name) of a combinator's callback -> (closure cell, name in reports)
_CLOSURE_CALLBACKS = {
    ("asyncio.tasks", "gather.<locals>._done_callback"): ("outer", "gather"),
    ("asyncio.tasks", "shield.<locals>._inner_done_callback"): ("outer", "shield"),
    ("asyncio.tasks", "_wait.<locals>._on_completion"): ("waiter", "wait"),
}
_RELEASE_WAITER = getattr(tasks, "_release_waiter", None)  # 3.11's wait_for
_RUN_UNTIL_COMPLETE_CB = getattr(base_events, "_run_until_complete_cb", None)


def is_task(obj: Any) -> bool:
    return futures.isfuture(obj) and hasattr(obj, "get_coro")


def callbacks_of(fut: Any) -> list[Any]:
    """The callables on ``fut``'s done-callback list, as a snapshot."""
    try:
        entries = fut._callbacks
    except AttributeError:
        return []
    if not entries:
        return []
    return [entry[0] if isinstance(entry, tuple) else entry for entry in list(entries)]


def task_of_wakeup(callback: Any) -> Any:
    """The task whose wakeup ``callback`` is, or None."""
    owner = getattr(callback, "__self__", None)
    if owner is None or not is_task(owner):
        return None
    if getattr(callback, "__func__", None) in _WAKEUPS:
        return owner
    if getattr(callback, "__name__", None) == "task_wakeup":  # the C Task's builtin
        return owner
    return None


def _cell(function: Any, name: str) -> Any:
    try:
        index = function.__code__.co_freevars.index(name)
        return function.__closure__[index].cell_contents
    except (AttributeError, ValueError, IndexError, TypeError):
        return None


def _combined_future(callback: Any) -> tuple[Any, str] | None:
    """``(future, combinator)`` when ``callback`` forwards to another future."""
    if isinstance(callback, functools.partial):
        if _RELEASE_WAITER is not None and callback.func is _RELEASE_WAITER and callback.args:
            return callback.args[0], "wait_for"
        return None
    key = (getattr(callback, "__module__", None), getattr(callback, "__qualname__", None))
    found = _CLOSURE_CALLBACKS.get(key)  # type: ignore[arg-type]
    if found is None:
        return None
    cell, via = found
    target = _cell(callback, cell)
    return (target, via) if target is not None else None


def _task_group_parent(callback: Any) -> Any:
    func = getattr(callback, "__func__", None)
    if func is None or getattr(func, "__qualname__", None) != "TaskGroup._on_task_done":
        return None
    if getattr(func, "__module__", None) != "asyncio.taskgroups":
        return None
    return getattr(callback.__self__, "_parent_task", None)


def awaiters_of(fut: Any) -> tuple[list[tuple[Any, str | None]], list[str]]:
    """``([(task, via), ...], [outside waiter, ...])`` of those waiting for ``fut``.

    ``via`` names the combinators in between, nearest first ("gather",
    "shield, gather"), or is None for a plain ``await``.
    """
    found: list[tuple[Any, str | None]] = []
    outside: list[str] = []
    seen: set[int] = set()

    def visit(target: Any, via: list[str]) -> None:
        if id(target) in seen:
            return
        seen.add(id(target))
        label = ", ".join(via) or None
        for callback in callbacks_of(target):
            try:
                task = task_of_wakeup(callback)
                if task is not None:
                    found.append((task, label))
                    continue
                parent = _task_group_parent(callback)
                if parent is not None:
                    found.append((parent, ", ".join([*via, "TaskGroup"])))
                    continue
                if _RUN_UNTIL_COMPLETE_CB is not None and callback is _RUN_UNTIL_COMPLETE_CB:
                    outside.append("run_until_complete")
                    continue
                combined = _combined_future(callback)
                if combined is not None:
                    visit(combined[0], [*via, combined[1]])
            except Exception:  # a callback changing under a report from another thread
                continue

    visit(fut, [])
    return found, outside


def awaiting_futures(fut: Any) -> list[Any]:
    """Each future (in practice a task) waiting for ``fut``, once: those Python
    3.14+ recorded in ``_asyncio_awaited_by``, in the order 3.14's call graph
    lists them, then those :func:`awaiters_of` derives that it did not record
    (3.14 records only its C futures and tasks).  The combinators in between do
    not count, as in 3.14's call graph: a task awaiting ``gather(fut, ...)``
    awaits ``fut``."""
    found: list[Any] = []
    seen: set[int] = set()
    recorded = getattr(fut, "_asyncio_awaited_by", None) or ()
    for waiter in list(recorded) + [task for task, _via in awaiters_of(fut)[0]]:
        if id(waiter) not in seen:
            seen.add(id(waiter))
            found.append(waiter)
    return found
