"""``tasks_of(loop)``: ``asyncio.all_tasks(loop)``, safe to call while other threads make tasks.

Reports and ``loop.metrics()`` read a loop's tasks from any thread, often while the loop's
own thread makes and ends tasks.  On 3.11, ``asyncio.all_tasks()`` copies asyncio's registry,
a ``WeakSet``, by iterating it in Python: a task added or dropped by another thread meanwhile
makes the copy fail with RuntimeError, and it tries again, up to 1000 times.  A try that lasts
longer than a thread switch then always fails.  That is what happens on PyPy: a finished task
leaves the set only when the collector frees it, and a task (it has ``__del__``) waits for a
major collection, so the set holds hundreds of thousands of dead tasks; each try outlasted a
switch, and one snapshot took minutes.  Here the set of weak references under the WeakSet is
copied by one builtin call, which no other thread interrupts, and read afterwards.

From 3.12 asyncio's registry has another shape (scheduled and eager tasks; from 3.14 kept by
the C module): there ``asyncio.all_tasks()`` is used as it is.
"""

from __future__ import annotations

import asyncio
import sys
from asyncio import futures
from typing import Any

if sys.version_info < (3, 12):
    _registry = asyncio.tasks._all_tasks  # type: ignore[attr-defined]

    def tasks_of(loop: Any) -> set[Any]:
        refs = _registry.data.copy()  # the WeakSet's own set: one copy, not an iteration
        return {
            task
            for ref in refs
            if (task := ref()) is not None
            and futures._get_loop(task) is loop  # type: ignore[attr-defined]
            and not task.done()
        }

else:
    tasks_of = asyncio.all_tasks
