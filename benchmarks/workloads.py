"""The scheduling micro-benchmarks.

Each workload is a function ``(loop, scale) -> (operations, seconds)``. It gets a
fresh loop, does its set-up untimed, times only the part that exercises the loop
with ``clock()`` and returns how many operations that part did. The
runner turns that into a rate. ``scale`` shrinks the sizes for ``--quick``.

``clock`` is ``time.perf_counter`` (wall time). With ``--cpu-time`` the runner
sets it to ``time.thread_time``, which leaves out the time this thread spends
waiting for a CPU that another process holds; nothing here runs in other threads.

Nothing here reads ``loop.time()`` and nothing waits on the wall clock: timers
are set with delays far shorter than one loop iteration, so they fire on the
next pass over the heap.
"""

import asyncio
import random
import time

clock = time.perf_counter


def _noop():
    pass


async def _return_none():
    pass


def call_soon_chain(loop, scale):
    """One callback that schedules itself again with call_soon, N times."""
    total = int(150_000 * scale)
    remaining = total

    def step():
        nonlocal remaining
        remaining -= 1
        if remaining:
            loop.call_soon(step)
        else:
            loop.stop()

    loop.call_soon(step)
    started = clock()
    loop.run_forever()
    return total, clock() - started


def call_soon_100_chains(loop, scale):
    """100 such chains in flight at once: each loop iteration runs 100 callbacks."""
    chains = 100
    steps = int(3_000 * scale)
    unfinished = chains

    def step(left):
        nonlocal unfinished
        if left:
            loop.call_soon(step, left - 1)
        else:
            unfinished -= 1
            if not unfinished:
                loop.stop()

    for _ in range(chains):
        loop.call_soon(step, steps - 1)
    started = clock()
    loop.run_forever()
    return chains * steps, clock() - started


class _TimerWorker:
    __slots__ = ("decoy", "turn")

    def __init__(self, turn):
        self.decoy = None
        self.turn = turn  # index into the delay table, so delays differ per worker


def timer_churn(loop, scale):
    """10k workers, each always holding one due timer and one far-off decoy.

    When a worker's timer fires it cancels its decoy, sets a new decoy (10 s
    away, so it never fires) and a new timer with a random delay under 0.1 ms.
    One loop iteration over 10k timers takes far longer than 0.1 ms, so every
    timer is due on the next iteration; the heap holds about 20k live timers
    plus the cancelled decoys, and the cost is heap pushes, pops and lazy
    cancellation. Counted: timer callbacks fired.
    """
    workers = 10_000
    total = int(workers * 10 * scale)
    rng = random.Random(20240601)
    delays = [rng.random() * 1e-4 for _ in range(4096)]
    mask = len(delays) - 1
    fired = 0

    def fire(worker):
        nonlocal fired
        worker.decoy.cancel()
        fired += 1
        if fired == total:
            loop.stop()
            return
        worker.turn += 1
        delay = delays[worker.turn & mask]
        worker.decoy = loop.call_later(10.0 + delay, _noop)
        loop.call_later(delay, fire, worker)

    for i in range(workers):
        worker = _TimerWorker(i)
        worker.decoy = loop.call_later(10.0, _noop)
        loop.call_later(delays[i & mask], fire, worker)
    started = clock()
    loop.run_forever()
    return total, clock() - started


def task_spawn_await(loop, scale):
    """``await loop.create_task(coro())`` in a loop, one task at a time."""
    total = int(50_000 * scale)

    async def main():
        create_task = loop.create_task
        started = clock()
        for _ in range(total):
            await create_task(_return_none())
        return clock() - started

    return total, loop.run_until_complete(main())


def sleep0_switches(loop, scale):
    """1000 tasks that each ``await asyncio.sleep(0)`` repeatedly. Counted: switches."""
    tasks = 1_000
    rounds = int(250 * scale)

    async def sleeper():
        for _ in range(rounds):
            await asyncio.sleep(0)

    async def main():
        running = [loop.create_task(sleeper()) for _ in range(tasks)]
        started = clock()
        for task in running:
            await task
        return clock() - started

    return tasks * rounds, loop.run_until_complete(main())


def gather_10k(loop, scale):
    """``asyncio.gather`` over 10k fresh coroutines, repeated. Counted: tasks."""
    width = 10_000
    rounds = max(1, int(5 * scale))

    async def main():
        started = clock()
        for _ in range(rounds):
            await asyncio.gather(*[_return_none() for _ in range(width)])
        return clock() - started

    return width * rounds, loop.run_until_complete(main())


def async_tree(loop, scale):
    """A tree of tasks, 5 levels below the root with 5 children a node: each inner node
    gathers its children, each leaf awaits ``sleep(0)``. Counted: tasks (every node but
    the root, which runs as the main coroutine)."""
    levels, fanout = 5, 5
    rounds = max(1, int(8 * scale))

    async def node(level):
        if level:
            await asyncio.gather(*[node(level - 1) for _ in range(fanout)])
        else:
            await asyncio.sleep(0)

    async def main():
        started = clock()
        for _ in range(rounds):
            await node(levels)
        return clock() - started

    tasks = sum(fanout**level for level in range(1, levels + 1))
    return tasks * rounds, loop.run_until_complete(main())


def _chain_with_idle_timers(pending):
    def chain_with_idle_timers(loop, scale):
        # Timers an hour away never fire; each iteration still has a timer heap to look at.
        handles = [loop.call_later(3600.0 + i * 1e-3, _noop) for i in range(pending)]
        try:
            return call_soon_chain(loop, scale)
        finally:
            for handle in handles:
                handle.cancel()

    chain_with_idle_timers.__doc__ = (
        f"The call_soon chain with {pending:,} timers pending an hour away: what waiting "
        "timers cost each iteration (compare with the chain row of the same loop)."
    )
    return chain_with_idle_timers


# name, title, unit, function: in the order they are run and printed.
WORKLOADS = [
    ("chain", "call_soon chain, 1 in flight", "callbacks/s", call_soon_chain),
    ("chains100", "call_soon chains, 100 in flight", "callbacks/s", call_soon_100_chains),
    ("timers", "timer churn, 10k workers (call_later + cancel)", "fires/s", timer_churn),
    ("spawn", "task spawn + await", "tasks/s", task_spawn_await),
    ("sleep0", "sleep(0) among 1000 tasks", "switches/s", sleep0_switches),
    ("gather", "gather of 10k tasks", "tasks/s", gather_10k),
    ("async_tree", "tree of gathered tasks, 5 levels of 5", "tasks/s", async_tree),
    (
        "chain+1k",
        "call_soon chain, 1k idle timers pending",
        "callbacks/s",
        _chain_with_idle_timers(1_000),
    ),
    (
        "chain+10k",
        "call_soon chain, 10k idle timers pending",
        "callbacks/s",
        _chain_with_idle_timers(10_000),
    ),
    (
        "chain+100k",
        "call_soon chain, 100k idle timers pending",
        "callbacks/s",
        _chain_with_idle_timers(100_000),
    ),
]

# The idle-timer rows are read as a share of the chain row's rate on the same loop;
# the runner measures a chain sample beside each of their samples.
IDLE_TIMER_REFERENCE = "chain"
IDLE_TIMER_ROWS = ("chain+1k", "chain+10k", "chain+100k")
