"""The task graph: a read-only snapshot of a loop's tasks, made of plain data."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FrameLine:
    """One frame of an await chain or stack: where it stands and the source there."""

    file: str  # shortened: relative to the working directory, or to the stdlib
    line: int
    function: str  # the code's qualified name, e.g. "Queue.get"
    source: str  # the stripped source line, "" when unavailable


@dataclass(frozen=True)
class Edge:
    """One task awaiting another, directly or through a combinator."""

    awaiter: str  # the task id of the one that waits
    awaited: str  # the task id of the one waited for
    via: str | None  # None (await task), "gather", "shield", "wait", "wait_for", "TaskGroup"


@dataclass(frozen=True)
class Waiting:
    """The future a task waits on, when it is not a task of the graph."""

    kind: str  # "Future", or the future's class name
    id: str  # hex id of the future
    owner: str | None  # "asyncio.Queue", "asyncio.Event", ... when known
    state: dict[str, object]  # the owner's state, e.g. {"maxsize": 0, "size": 0}
    text: str  # the owner's state as report text, or the future's state


@dataclass
class TaskNode:
    """One pending task of the loop."""

    id: str  # hex id of the task object
    name: str
    # "snakeloop", "asyncio" (the C Task), "asyncio-py" (_PyTask, which on PyPy is
    # asyncio.Task itself: there is no C one) or the class name
    kind: str
    state: str  # "waiting", "running" or "ready" (its step is queued)
    created_at: FrameLine | None
    frames: list[FrameLine] = field(default_factory=list)
    waits_on: Waiting | None = None
    awaits: list[Edge] = field(default_factory=list)
    awaited_by: list[Edge] = field(default_factory=list)
    external_awaiters: list[str] = field(default_factory=list)  # e.g. "run_until_complete"


@dataclass(frozen=True)
class FdLine:
    fd: int
    description: str
    reading: bool
    writing: bool


@dataclass(frozen=True)
class LoopState:
    time: float
    virtual: bool
    ready: int
    timers: int | None  # None when the loop does not say
    fds: list[FdLine]


@dataclass
class Graph:
    """What ``task_graph`` returns: the tasks in report order, cycles, the loop line."""

    tasks: list[TaskNode]
    cycles: list[list[str]]  # each a list of task ids, first one repeated at the end
    loop: LoopState
