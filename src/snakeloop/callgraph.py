"""Async call graphs with the API and text of Python 3.14's ``asyncio.graph``.

``capture_call_graph``, ``format_call_graph`` and ``print_call_graph`` take the
arguments of their 3.14 namesakes, return the same data (on 3.14 the very same
``asyncio.FutureCallGraph``/``asyncio.FrameCallGraphEntry`` classes) and write
the same text, on 3.11 and later, for snakeloop's Task, asyncio's C Task and
``_PyTask`` alike, on any loop.

Facts this relies on:

- 3.14 learns who awaits a future from ``_asyncio_awaited_by``, which its
  tasks, gather, shield, wait and TaskGroup fill through
  ``future_add_to_awaited_by``; that is the C function, which records C futures
  awaited by C futures and tasks only (not ``_PyTask``, not snakeloop's Task).
  Here the awaiters are those 3.14 recorded, in its order, then those
  ``_insight.edges`` reads off the awaited future's done callbacks (a task's
  wakeup, gather, shield, wait, TaskGroup), so every kind of task gets the graph
  3.14 gives C tasks.  A task awaiting ``gather(a, b)`` awaits ``a`` and ``b``.
  The graph is built here on 3.14 too, not by ``asyncio.capture_call_graph``:
  that one cannot read a future without ``_asyncio_awaited_by`` (snakeloop's),
  and recurses without end on a cycle.
- A frame belongs to a coroutine, async generator or generator exactly when its
  code has the matching ``co_flags`` bit; 3.14 asks ``frame.f_generator``,
  which 3.11 to 3.13 lack.  The innermost frames of the current task are those
  from the caller up to the first coroutine (or async generator) frame whose
  caller is not a generator frame: the task's step method called it.
- A suspended task's stack is its coroutine and what it awaits, following
  ``cr_await`` through native coroutines only: a future's ``__await__``
  generator or ``asyncio.sleep(0)``'s generator ends it, as in 3.14.

Where 3.14.0 had bugs that later 3.14 releases fixed, this follows the fix:
``print_call_graph`` leaves its own frame out of the stack
(python/cpython#156327), a finished task has an empty stack instead of raising
AttributeError (#156408), and a sync generator on the current task's stack
does not end it (#156988).  One departure of its own: a cycle of tasks
awaiting each other (a deadlock) is cut where it closes instead of recursing
without end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import sys
import types
from asyncio import events, futures, tasks
from typing import TYPE_CHECKING, Any, TextIO

from ._core.futures import Task as _SnakeTask
from ._insight.edges import awaiting_futures

if TYPE_CHECKING:
    from ._core.futures import Future

    FutureLike = asyncio.Future[Any] | Future[Any]

__all__ = [
    "FrameCallGraphEntry",
    "FutureCallGraph",
    "capture_call_graph",
    "format_call_graph",
    "print_call_graph",
]

if sys.version_info >= (3, 14):
    from asyncio import FrameCallGraphEntry, FutureCallGraph
else:

    @dataclasses.dataclass(frozen=True, slots=True)
    class FrameCallGraphEntry:
        """One frame of a call stack."""

        frame: types.FrameType

    @dataclasses.dataclass(frozen=True, slots=True)
    class FutureCallGraph:
        """A future or task, its call stack (innermost first) and those awaiting it."""

        future: Any
        call_stack: tuple[FrameCallGraphEntry, ...]
        awaited_by: tuple[FutureCallGraph, ...]


_TASK_CLASSES = (tasks.Task, tasks._PyTask, _SnakeTask)  # type: ignore[attr-defined]

# co_flags bit -> the word 3.14 puts before a frame's name; a generator-based
# coroutine (@types.coroutine) has CO_GENERATOR too.
_GENERATOR_TAGS = (
    (inspect.CO_COROUTINE, "async"),
    (inspect.CO_ASYNC_GENERATOR, "async generator"),
    (inspect.CO_GENERATOR, "generator"),
)


# A sync generator's frame is no task boundary: the walk goes on past it.
_ASYNC_FLAGS = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _generator_tag(frame: types.FrameType) -> str | None:
    """ "async", "async generator" or "generator" for a frame of such code, else None."""
    flags = frame.f_code.co_flags
    for bit, tag in _GENERATOR_TAGS:
        if flags & bit:
            return tag
    return None


def _check_future(future: Any) -> None:
    if not futures.isfuture(future):
        raise TypeError(f"{future!r} object does not appear to be compatible with asyncio.Future")


def _truncated(entries: list[FrameCallGraphEntry], keep: int | None) -> list[FrameCallGraphEntry]:
    """``entries`` cut to ``abs(keep)``: the first ones if ``keep`` > 0, the last if < 0."""
    if keep is None or keep == 0:
        return entries
    return entries[:keep] if keep > 0 else entries[keep:]


def _awaited_by(future: Any, limit: int | None, path: set[int]) -> tuple[FutureCallGraph, ...]:
    path = path | {id(future)}
    return tuple(
        _graph_of_suspended(waiter, limit, path)
        for waiter in awaiting_futures(future)
        if id(waiter) not in path
    )


def _graph_of_suspended(future: Any, limit: int | None, path: set[int]) -> FutureCallGraph:
    """The graph of a future that is not running: its await chain, outermost read first."""
    _check_future(future)
    get_coro = getattr(future, "get_coro", None)
    coro = get_coro() if get_coro is not None and limit != 0 else None
    outermost_first: list[FrameCallGraphEntry] = []
    while coro is not None:
        if hasattr(coro, "cr_await"):
            if coro.cr_frame is not None:  # None once the coroutine has finished
                outermost_first.append(FrameCallGraphEntry(coro.cr_frame))
            coro = coro.cr_await
        elif hasattr(coro, "ag_await"):
            outermost_first.append(FrameCallGraphEntry(coro.ag_frame))
            coro = coro.ag_await
        else:
            break
    stack = _truncated(outermost_first, limit)
    stack.reverse()
    return FutureCallGraph(future, tuple(stack), _awaited_by(future, limit, path))


def _running_stack(frame: types.FrameType | None) -> list[FrameCallGraphEntry]:
    """From ``frame`` outwards to the current task's own coroutine, innermost first."""
    stack: list[FrameCallGraphEntry] = []
    while frame is not None:
        stack.append(FrameCallGraphEntry(frame))
        caller = frame.f_back
        is_async = frame.f_code.co_flags & _ASYNC_FLAGS
        if is_async and caller is not None and _generator_tag(caller) is None:
            break  # the task's step called this coroutine
        frame = caller
    return stack


def capture_call_graph(
    future: FutureLike | None = None,
    /,
    *,
    depth: int = 1,
    limit: int | None = None,
) -> FutureCallGraph | None:
    """The call graph of ``future``, or of the current task when it is None.

    Returns None when no task is running and ``future`` is None; raises
    RuntimeError when no loop is running either.  ``depth`` skips that many
    innermost frames when the graph is the current task's.  ``limit`` keeps
    ``abs(limit)`` entries of each call stack: the outermost ones when
    positive, the innermost when negative; 0 leaves the stacks empty.
    """
    loop = events._get_running_loop()
    current = tasks.current_task(loop) if loop is not None else None
    if future is not None and (loop is None or future is not current):
        return _graph_of_suspended(future, limit, set())
    if future is None and loop is None:
        raise RuntimeError(
            "capture_call_graph() is called outside of a running event loop "
            "and no *future* to introspect was provided"
        )
    if current is None:
        return None
    _check_future(current)
    frame = sys._getframe(depth) if limit != 0 else None
    try:
        innermost_first = _running_stack(frame)
    finally:
        del frame
    # The running stack is read innermost first, so the sign of limit flips.
    stack = _truncated(innermost_first, -limit if limit is not None else None)
    return FutureCallGraph(current, tuple(stack), _awaited_by(current, limit, set()))


def _frame_line(frame: types.FrameType) -> str:
    code = frame.f_code
    tag = _generator_tag(frame)
    name = f"{tag} {code.co_qualname}" if tag is not None else code.co_qualname
    return f"  |   File {code.co_filename!r}, line {frame.f_lineno}, in {name}()"


def _render(graph: FutureCallGraph, lines: list[str], level: int) -> None:
    indent = "    " * level
    fut = graph.future
    if isinstance(fut, _TASK_CLASSES):
        lines.append(f"{indent}* Task(name={fut.get_name()!r}, id={id(fut):#x})")
    else:
        lines.append(f"{indent}* Future(id={id(fut):#x})")
    if graph.call_stack:
        lines.append(f"{indent}  + Call stack:")
        lines.extend(indent + _frame_line(entry.frame) for entry in graph.call_stack)
    if graph.awaited_by:
        lines.append(f"{indent}  + Awaited by:")
        for waiter in graph.awaited_by:
            _render(waiter, lines, level + 1)


def format_call_graph(
    future: FutureLike | None = None,
    /,
    *,
    depth: int = 1,
    limit: int | None = None,
) -> str:
    """:func:`capture_call_graph` as text, "" when there is no graph."""
    graph = capture_call_graph(future, depth=depth + 1, limit=limit)
    if graph is None:
        return ""
    lines: list[str] = []
    try:
        _render(graph, lines, 0)
    finally:
        del graph  # it holds frames: let them go now
    return "\n".join(lines)


def print_call_graph(
    future: FutureLike | None = None,
    /,
    *,
    file: TextIO | None = None,
    depth: int = 1,
    limit: int | None = None,
) -> None:
    """Print :func:`format_call_graph` to ``file`` (default ``sys.stdout``)."""
    print(format_call_graph(future, depth=depth + 1, limit=limit), file=file)
