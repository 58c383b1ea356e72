"""Reports on what a loop's tasks are doing: the task graph, on demand.

``report(loop)`` (also ``loop.report()``) lists every pending task with its
await chain, what it waits on and who waits for it, then the cycles among
them and one line about the loop::

    Task 'main' (id 0x7f3a..., created at tests/test_app.py:10)
      awaits Task 'consumer'
      └ tests/test_app.py:14 in main: await consumer_task
      awaited by loop.run_until_complete()
    Task 'consumer' (id 0x7f3b..., created at tests/test_app.py:12)
      ├ app/pipeline.py:40 in consume: item = await q.get()
      └ asyncio/queues.py:158 in Queue.get: await getter
      waits on Future (asyncio.Queue <maxsize=0 size=0 getters=1 putters=0>, id 0x7f3c...)
      awaited by Task 'main'
    Cycles: none
    Loop: loop.time()=12.004 (virtual), 0 ready, 0 timers, fds: none

A task's header says ``running`` when its step is executing (the report was
asked for from inside it, or from another thread meanwhile; its frames are
then that thread's stack) and ``ready`` when its step is queued.  ``awaits``
and ``awaited by`` name the combinator in between: ``(via gather)``,
``shield``, ``wait``, ``wait_for``, ``TaskGroup``.

``format="json"`` gives the same data, with these keys (always all present)::

    {"tasks": [{"id": "0x...", "name": str,
                "kind": "snakeloop" | "asyncio" | "asyncio-py" | class name,
                "state": "waiting" | "running" | "ready",
                "created_at": FRAME | null,
                "frames": [FRAME, ...],              # outermost first
                "waits_on": {"kind": "Future", "id": "0x...",
                             "owner": "asyncio.Queue" | ... | null,
                             "state": {...}, "text": str} | null,
                "awaits": [{"task": id, "name": str, "via": str | null}, ...],
                "awaited_by": [{"task": id, "name": str, "via": str | null}, ...],
                "external_awaiters": ["run_until_complete", ...]}, ...],
     "cycles": [[id, id, ..., id], ...],             # first id repeated at the end
     "loop": {"time": float, "virtual": bool, "ready": int, "timers": int | null,
              "fds": [{"fd": int, "description": str, "reading": bool,
                       "writing": bool}, ...]}}

    FRAME = {"file": str, "line": int, "function": str, "source": str}

``kind`` names the task's class: "asyncio" is asyncio's C Task, "asyncio-py" its
pure-Python ``_PyTask`` (on PyPy, which has no C Task, that is ``asyncio.Task``).
Paths are relative to the working directory when under it, and to the
standard library for its modules (``asyncio/queues.py``).

``enable()`` (or ``python -m snakeloop --insight script.py``) lets another
process ask for all the loops' graphs and metrics: a signal (SIGUSR1) makes
the program write a snapshot, as JSON, to
``$XDG_RUNTIME_DIR/snakeloop/<pid>.json`` (without that variable, to a
private directory under the temp dir); ``python -m snakeloop ps|pstree|top
PID`` send the signal and show the snapshot.  The snapshot has ``pid``,
``time``, ``python``, ``snakeloop`` and ``loops``: for each live loop its
``id``, ``running``, ``thread`` (``ident``, ``native_id``, ``name``, or null),
``graph`` (the JSON data above), ``metrics`` (``loop.metrics()`` as a dict,
or null) and ``error`` (null, or why the loop could not be read).

Everything here is read-only and safe from any thread, and nothing of it runs
until a report is asked for: the graph is derived from the tasks' coroutines
and the futures' done callbacks at that moment.  Works for snakeloop's Task,
asyncio's C Task and its Python ``_PyTask``, in any mix.
"""

from __future__ import annotations

import json
import signal as _signal
import sys
from typing import IO, TYPE_CHECKING, Any

from ._insight import ondemand as _ondemand
from ._insight.build import task_graph as _task_graph
from ._insight.model import Graph
from ._insight.render import deadlock_text
from ._insight.render import format_json as _format_json
from ._insight.render import format_text as _format_text

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "Graph",
    "deadlock_message",
    "disable",
    "enable",
    "format_json",
    "format_text",
    "report",
    "snapshot_path",
    "task_graph",
]


def task_graph(loop: asyncio.AbstractEventLoop, *, referrers: bool = False) -> Graph:
    """A snapshot of ``loop``'s pending tasks, their await chains and edges.

    ``referrers=True`` also finds the asyncio primitive behind a waited-on
    future through the garbage collector's referrers (slow; for a report
    asked for by hand).
    """
    return _task_graph(loop, referrers=referrers)


def format_text(graph: Graph) -> str:
    """The graph as report text (see the module docstring)."""
    return _format_text(graph)


def format_json(graph: Graph) -> dict[str, Any]:
    """The graph as JSON-ready data (see the module docstring for the keys)."""
    return _format_json(graph)


def report(
    loop: asyncio.AbstractEventLoop,
    file: IO[str] | None = None,
    format: str = "text",
    *,
    referrers: bool = False,
) -> str:
    """Write the report on ``loop`` to ``file`` (default ``sys.stderr``) and return it.

    ``format`` is ``"text"`` or ``"json"``.
    """
    if format not in ("text", "json"):
        raise ValueError(f"format must be 'text' or 'json', not {format!r}")
    graph = _task_graph(loop, referrers=referrers)
    if format == "json":
        text = json.dumps(_format_json(graph), indent=2) + "\n"
    else:
        text = _format_text(graph)
    out = sys.stderr if file is None else file
    out.write(text)
    out.flush()
    return text


def deadlock_message(
    loop: asyncio.AbstractEventLoop, *, virtual: bool, fds_note: str | None
) -> str:
    """The deadlock report: one summary line, then the task graph's text.

    ``fds_note`` replaces "no watched file descriptors" in the summary when
    fds are watched but nothing can arrive on them (e.g. ``fds watched:
    listener 127.0.0.1:8080 (no connection can arrive from inside this
    process)``).  ``virtual`` says the loop's clock is virtual: the tasks are
    blocked forever and the error is raised; otherwise the summary adds that
    the loop keeps waiting.
    """
    return deadlock_text(_task_graph(loop), virtual=virtual, fds_note=fds_note)


def enable(signal: int = _signal.SIGUSR1, path: str | None = None) -> None:
    """Have ``signal`` write a snapshot of all live snakeloop loops to ``path``.

    ``path`` defaults to ``snapshot_path(os.getpid())``, worked out when the
    signal arrives (so a forked child writes its own).  The handler is
    installed with ``signal.signal``: call this from the main thread.  It
    runs in the main thread whatever that thread is doing, loop or no loop,
    and only reads the loops.  Calling it again replaces the first call;
    ``disable()`` puts back the handler that was there before.
    """
    _ondemand.enable(signal, path)


def disable() -> None:
    """Undo ``enable()``: the signal gets back its earlier handler.  No-op if not enabled."""
    _ondemand.disable()


def snapshot_path(pid: int) -> str:
    """Where process ``pid`` writes its snapshot by default."""
    return _ondemand.snapshot_path(pid)
