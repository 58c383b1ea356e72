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

3.12 and 3.13 keep the same WeakSet (of scheduled tasks) beside a plain set of eager ones,
and copy it the same way: both are copied here as on 3.11.  From 3.14 the C module keeps the
tasks, and its ``asyncio.all_tasks()`` reads them in one call: it is used as it is.
"""

from __future__ import annotations

import asyncio
import sys
from asyncio import futures
from typing import Any

if sys.version_info < (3, 14):
    if sys.version_info < (3, 12):
        _registry = asyncio.tasks._all_tasks  # type: ignore[attr-defined]
        _eager: Any = ()
    else:
        _registry = asyncio.tasks._scheduled_tasks  # type: ignore[attr-defined]
        _eager = asyncio.tasks._eager_tasks  # type: ignore[attr-defined]

    def tasks_of(loop: Any) -> set[Any]:
        # Eager tasks first, as asyncio does: one that becomes a scheduled task
        # meanwhile is then not missed.  Each copy is one builtin call, which no
        # other thread interrupts.
        eager = list(_eager)
        refs = _registry.data.copy()  # the WeakSet's own set: one copy, not an iteration
        found = {task for ref in refs if (task := ref()) is not None}
        found.update(eager)
        return {
            task
            for task in found
            if futures._get_loop(task) is loop  # type: ignore[attr-defined]
            and not task.done()
        }

else:
    tasks_of = asyncio.all_tasks
