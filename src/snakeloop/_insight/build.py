"""``task_graph``: one read-only snapshot of a loop's pending tasks and their edges.

Safe from any thread: the task set is copied, each task is read through its
public methods, ``_fut_waiter`` and futures' ``_callbacks``; a task that
finishes while it is read is left out rather than failing the report.
"""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any

from .._core.futures import Task as _SnakeTask
from .cycles import find_cycles
from .edges import awaiters_of, is_task
from .frames import await_chain, frame_line, running_stack, site_line
from .loopstate import TASK_SITES, loop_private, loop_state
from .model import Edge, FrameLine, Graph, TaskNode, Waiting
from .primitives import (
    owner_from_frames,
    owner_from_referrers,
    state_of,
    state_text,
    type_name,
)
from .registry import tasks_of

_PY_TASK = asyncio.tasks._PyTask  # type: ignore[attr-defined]
_C_TASK = asyncio.tasks._CTask if hasattr(asyncio.tasks, "_CTask") else None  # type: ignore[attr-defined]


def task_id(task: Any) -> str:
    return f"0x{id(task):x}"


def _kind(task: Any) -> str:
    cls = type(task)
    if issubclass(cls, _SnakeTask):
        return "snakeloop"
    if _C_TASK is not None and issubclass(cls, _C_TASK):
        return "asyncio"
    if issubclass(cls, _PY_TASK):
        return "asyncio-py"
    return type_name(task)


def _natural(name: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


if sys.version_info >= (3, 14):
    # 3.14's _PyTask registers itself and is current only in the pure-Python registries
    # (_py_register_task, _py_enter_task), which asyncio.all_tasks() and current_task(),
    # the C ones, do not read: the report reads both, so that _PyTasks are in it too.
    _py_all_tasks = asyncio.tasks._py_all_tasks  # type: ignore[attr-defined]
    _py_current_task = asyncio.tasks._py_current_task  # type: ignore[attr-defined]

    def _tasks_of(loop: Any) -> set[Any]:
        return tasks_of(loop) | _py_all_tasks(loop)  # type: ignore[no-any-return]

    def _current_task(loop: Any) -> Any:
        current = asyncio.current_task(loop)
        return _py_current_task(loop) if current is None else current

else:
    _tasks_of = tasks_of
    _current_task = asyncio.current_task


def _all_tasks(loop: Any) -> list[Any]:
    for _ in range(10):
        try:
            return list(_tasks_of(loop))
        except RuntimeError:  # the set changed while another thread copied it (3.14+: _PyTask)
            continue
    return []


def _creation_site(loop: Any, task: Any) -> FrameLine | None:
    traceback = getattr(task, "_source_traceback", None)
    if traceback:
        last = traceback[-1]
        return site_line(last.filename, last.lineno, last.name)
    sites = loop_private(loop, TASK_SITES)
    if sites:
        try:
            site = sites.get(task)
        except TypeError:
            site = None
        if site is not None:
            return site_line(site[0], site[1])
    return None


def _waiting(fut: Any, frames: list[Any], referrers: bool) -> Waiting:
    owner = owner_from_referrers(fut) if referrers else None
    if owner is None:
        owner = owner_from_frames(frames)
    if owner is None:
        state: dict[str, object] = {}
        text = "cancelled" if fut.cancelled() else "done" if fut.done() else "pending"
        owner_name = None
    else:
        state = state_of(owner)
        text = state_text(owner, state)
        owner_name = type_name(owner)
    return Waiting(type(fut).__name__, task_id(fut), owner_name, state, text)


def _node(loop: Any, task: Any, current: Any, referrers: bool) -> TaskNode:
    coro = task.get_coro()
    running = task is current
    frames = (running_stack(coro) or []) if running else await_chain(coro)
    fut = None if running else getattr(task, "_fut_waiter", None)
    node = TaskNode(
        id=task_id(task),
        name=task.get_name(),
        kind=_kind(task),
        state="running" if running else "waiting" if fut is not None else "ready",
        created_at=_creation_site(loop, task),
        frames=[frame_line(frame) for frame in frames],
    )
    if fut is not None and not is_task(fut):
        node.waits_on = _waiting(fut, frames, referrers)
    return node


def _report_order(nodes: dict[str, TaskNode], awaits: dict[str, list[str]]) -> list[str]:
    """Tasks nobody awaits first, each followed by what it awaits, depth first."""

    def key(node_id: str) -> tuple[list[Any], str]:
        return _natural(nodes[node_id].name), node_id

    awaited = {target for targets in awaits.values() for target in targets}
    roots = sorted((n for n in nodes if n not in awaited), key=key)
    rest = sorted((n for n in nodes if n in awaited), key=key)
    order: list[str] = []
    placed: set[str] = set()
    for root in [*roots, *rest]:
        stack = [root]
        while stack:
            node_id = stack.pop()
            if node_id in placed:
                continue
            placed.add(node_id)
            order.append(node_id)
            stack.extend(sorted(awaits.get(node_id, ()), key=key, reverse=True))
    return order


def task_graph(loop: Any, *, referrers: bool = False) -> Graph:
    current = _current_task(loop)
    tasks: dict[str, Any] = {}
    nodes: dict[str, TaskNode] = {}
    for task in _all_tasks(loop):
        try:
            if task.done():
                continue
            node = _node(loop, task, current, referrers)
        except Exception:  # finished or changed under us, from another thread
            continue
        tasks[node.id] = task
        nodes[node.id] = node

    edges: list[Edge] = []
    seen: set[tuple[str, str, str | None]] = set()

    def add(awaiter: Any, awaited: str, via: str | None) -> None:
        key = (task_id(awaiter), awaited, via)
        if key[0] in nodes and key not in seen:
            seen.add(key)
            edges.append(Edge(*key))

    for node_id, task in tasks.items():
        try:
            fut = getattr(task, "_fut_waiter", None)
            if fut is not None and is_task(fut) and task_id(fut) in nodes:
                add(task, task_id(fut), None)
            found, outside = awaiters_of(task)
        except Exception:
            continue
        for awaiter, via in found:
            add(awaiter, node_id, via)
        nodes[node_id].external_awaiters = outside

    awaits: dict[str, list[str]] = {}
    for edge in edges:
        nodes[edge.awaiter].awaits.append(edge)
        nodes[edge.awaited].awaited_by.append(edge)
        awaits.setdefault(edge.awaiter, []).append(edge.awaited)
    for node in nodes.values():
        if node.awaits:
            node.waits_on = None  # the edges say what it waits for

    order = _report_order(nodes, awaits)
    rank = {node_id: i for i, node_id in enumerate(order)}
    for node in nodes.values():
        node.awaits.sort(key=lambda edge: rank[edge.awaited])
        node.awaited_by.sort(key=lambda edge: rank[edge.awaiter])
    return Graph(
        tasks=[nodes[node_id] for node_id in order],
        cycles=find_cycles(order, awaits),
        loop=loop_state(loop),
    )
