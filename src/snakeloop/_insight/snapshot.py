"""One snapshot of every live snakeloop loop of the process, as JSON-ready data.

It is taken from a signal handler on the main thread, which may have
interrupted anything, while other threads run their loops: everything here
only reads, copies each container before walking it (retrying when another
thread changes it meanwhile), and takes no lock the interrupted code could be
holding.  A loop whose state cannot be read is listed with the error instead
of failing the whole snapshot.

The data::

    {"pid": int, "time": float (time.time()), "python": "3.12.4",
     "snakeloop": "0.1.0",
     "loops": [{"id": "0x...", "running": bool,
                "thread": {"ident": int, "native_id": int | null,
                           "name": str | null} | null,
                "graph": <snakeloop.insight.format_json data> | null,
                "metrics": {LoopMetrics fields} | null,
                "error": str | null}, ...]}
"""

from __future__ import annotations

import dataclasses
import os
import platform
import threading
import time
from typing import Any

from .._process.forking import live_loops
from .build import task_graph
from .render import format_json


def _version() -> str:
    from .. import __version__

    return __version__


def _threads() -> dict[int, threading.Thread]:
    # threading.enumerate() takes a lock the interrupted main thread may hold
    # (it could be inside Thread.start()); a copy of the registry takes none.
    registry: Any = getattr(threading, "_active", {})
    for _ in range(10):
        try:
            return dict(registry)
        except RuntimeError:
            continue
    return {}


def _thread_of(loop: Any, threads: dict[int, threading.Thread]) -> dict[str, Any] | None:
    ident = getattr(loop, "_thread_id", None)
    if ident is None:
        return None
    thread = threads.get(ident)
    return {
        "ident": ident,
        "native_id": getattr(thread, "native_id", None),
        "name": None if thread is None else thread.name,
    }


def _metrics(loop: Any) -> dict[str, Any] | None:
    read = getattr(loop, "metrics", None)
    if read is None:
        return None
    for _ in range(10):
        try:
            return dataclasses.asdict(read())
        except RuntimeError:  # changed by the loop's thread while read
            continue
    return None


def loop_snapshot(loop: Any, threads: dict[int, threading.Thread]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": f"0x{id(loop):x}",
        "running": bool(loop.is_running()),
        "thread": _thread_of(loop, threads),
        "graph": None,
        "metrics": None,
        "error": None,
    }
    try:
        entry["graph"] = format_json(task_graph(loop))
        entry["metrics"] = _metrics(loop)
    except Exception as exc:  # a report must not take the program down
        entry["error"] = f"{type(exc).__name__}: {exc}"
    return entry


def snapshot() -> dict[str, Any]:
    threads = _threads()
    return {
        "pid": os.getpid(),
        "time": time.time(),
        "python": platform.python_version(),
        "snakeloop": _version(),
        "loops": [loop_snapshot(loop, threads) for loop in live_loops() if not loop.is_closed()],
    }
