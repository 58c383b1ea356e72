"""snakeloop.insight: the task graph report, for every kind of task and mixes of them.

Each scenario blocks some tasks in a known way, then compares ``loop.report()``
with text built here from the scenario's own code: line numbers come from
``inspect`` (this file's functions and asyncio's), ids from the task objects,
so the expectations hold on every Python version without hard-coded numbers.
The loops use a FakeClock, so ``loop.time()`` is fixed too.

Task kinds: snakeloop's Task (``Loop()``), asyncio's default Task
(``Loop(stdlib_futures=True)``: the C Task, or on PyPy, which has no ``_asyncio``,
the pure-Python one), asyncio's ``_PyTask`` (a task factory), and a mixed loop whose
factory cycles through those that are distinct classes (on PyPy, two).
"""

from __future__ import annotations

import asyncio
import inspect
import io
import itertools
import json
import os
import sys
import threading
import weakref

import pytest
from _loopkit import FakeClock, PyTask, close_loop

import snakeloop
from snakeloop import insight
from snakeloop._core.futures import Task as SnakeTask

KINDS = ("snakeloop", "c", "py", "mixed")
HERE = os.path.relpath(__file__) if __file__.startswith(os.getcwd() + os.sep) else __file__


def py_task_factory(loop, coro, **kwargs):
    return PyTask(coro, loop=loop, **kwargs)


# asyncio's Task is its C Task where _asyncio exists; on PyPy it is _PyTask itself.
C_TASK = getattr(asyncio.tasks, "_CTask", None)
MIXED_CLASSES = tuple(dict.fromkeys((asyncio.Task, SnakeTask, PyTask)))


class MixedFactory:
    """Makes a C Task (where there is one), a snakeloop Task and a _PyTask in turn."""

    def __init__(self):
        self.kinds = itertools.cycle(MIXED_CLASSES)

    def __call__(self, loop, coro, **kwargs):
        return next(self.kinds)(coro, loop=loop, **kwargs)


def make_loop(kind):
    # The factory first: a loop made before a failure would be left open.
    factory = MixedFactory() if kind == "mixed" else py_task_factory if kind == "py" else None
    loop = snakeloop.Loop(clock=FakeClock(), stdlib_futures=(kind == "c"))
    if factory is not None:
        loop.set_task_factory(factory)
    return loop


@pytest.fixture(params=KINDS)
def loop(request):
    loop = make_loop(request.param)
    yield loop
    close_loop(loop)


async def _tick():
    await asyncio.sleep(0)


def settle(loop, rounds=6):
    """Run the loop until the scenario's tasks have reached their waits."""
    for _ in range(rounds):
        loop.run_until_complete(_tick())


def report(loop, **kwargs):
    out = io.StringIO()
    text = loop.report(out, **kwargs) if not kwargs else insight.report(loop, out, **kwargs)
    assert out.getvalue() == text
    return text


# -- expectations built from the code ----------------------------------------


def _line(func, snippet):
    lines, start = inspect.getsourcelines(func)
    for i, text in enumerate(lines):
        if snippet in text:
            return start + i, text.strip()
    raise AssertionError(f"{snippet!r} not in {func.__qualname__}")


def here(func, snippet):
    """The report line of a frame of this file, suspended at ``snippet``."""
    lineno, source = _line(func, snippet)
    return f"{HERE}:{lineno} in {func.__qualname__}: {source}"


def stdlib(func, snippet):
    """The report line of a standard library frame (``asyncio/queues.py:158 ...``)."""
    lineno, source = _line(func, snippet)
    path = inspect.getsourcefile(func)
    stdlib_dir = os.path.dirname(os.__file__)
    return f"{os.path.relpath(path, stdlib_dir)}:{lineno} in {func.__qualname__}: {source}"


def ident(obj):
    return f"0x{id(obj):x}"


def frames(*lines):
    return [f"  {'└' if i == len(lines) - 1 else '├'} {line}" for i, line in enumerate(lines)]


def header(task, suffix=""):
    return f"Task {task.get_name()!r} (id {ident(task)}){suffix}"


LOOP_LINE = "Loop: loop.time()=1000.000, 0 ready, 0 timers, fds: none"


def expect(*lines, cycles="Cycles: none", loop_line=LOOP_LINE):
    flat = []
    for line in lines:
        flat.extend(line if isinstance(line, list) else [line])
    return "\n".join([*flat, cycles, loop_line]) + "\n"


# -- scenarios ------------------------------------------------------------------


async def consume(q):
    return await q.get()


async def await_task(other):
    return await other


def test_a_task_awaiting_a_task_awaiting_queue_get(loop):
    q = asyncio.Queue()
    consumer = loop.create_task(consume(q), name="consumer")
    main = loop.create_task(await_task(consumer), name="main")
    settle(loop)
    getter = consumer._fut_waiter
    assert report(loop) == expect(
        header(main),
        "  awaits Task 'consumer'",
        frames(here(await_task, "return await other")),
        header(consumer),
        frames(here(consume, "await q.get()"), stdlib(asyncio.Queue.get, "await getter")),
        "  waits on Future (asyncio.Queue <maxsize=0 size=0 getters=1 putters=0>, "
        f"id {ident(getter)})",
        "  awaited by Task 'main'",
    )
    q.put_nowait("item")
    assert loop.run_until_complete(main) == "item"


async def wait_event(ev):
    await ev.wait()


def test_event_wait(loop):
    ev = asyncio.Event()
    waiter = loop.create_task(wait_event(ev), name="waiter")
    settle(loop)
    assert report(loop) == expect(
        header(waiter),
        frames(here(wait_event, "await ev.wait()"), stdlib(asyncio.Event.wait, "await fut")),
        f"  waits on Future (asyncio.Event <unset waiters=1>, id {ident(waiter._fut_waiter)})",
    )
    ev.set()
    loop.run_until_complete(waiter)


async def hold_lock(lock, release):
    async with lock:
        await release.wait()


async def contend(lock):
    async with lock:
        pass


def test_lock_contention(loop):
    lock = asyncio.Lock()
    release = asyncio.Event()
    holder = loop.create_task(hold_lock(lock, release), name="holder")
    settle(loop)
    contender = loop.create_task(contend(lock), name="contender")
    settle(loop)
    assert report(loop) == expect(
        header(contender),
        frames(
            here(contend, "async with lock"),
            stdlib(asyncio.locks._ContextManagerMixin.__aenter__, "await self.acquire()"),
            stdlib(asyncio.Lock.acquire, "await fut"),
        ),
        f"  waits on Future (asyncio.Lock <locked waiters=1>, id {ident(contender._fut_waiter)})",
        header(holder),
        frames(here(hold_lock, "await release.wait()"), stdlib(asyncio.Event.wait, "await fut")),
        f"  waits on Future (asyncio.Event <unset waiters=1>, id {ident(holder._fut_waiter)})",
    )
    release.set()
    loop.run_until_complete(contender)


async def gather_them(*tasks):
    return await asyncio.gather(*tasks)


def test_gather(loop):
    ev = asyncio.Event()
    a = loop.create_task(wait_event(ev), name="a")
    b = loop.create_task(wait_event(ev), name="b")
    parent = loop.create_task(gather_them(a, b), name="parent")
    settle(loop)
    event_frames = frames(
        here(wait_event, "await ev.wait()"), stdlib(asyncio.Event.wait, "await fut")
    )
    assert report(loop) == expect(
        header(parent),
        "  awaits Task 'a' (via gather)",
        "  awaits Task 'b' (via gather)",
        frames(here(gather_them, "await asyncio.gather")),
        header(a),
        event_frames,
        f"  waits on Future (asyncio.Event <unset waiters=2>, id {ident(a._fut_waiter)})",
        "  awaited by Task 'parent' (via gather)",
        header(b),
        event_frames,
        f"  waits on Future (asyncio.Event <unset waiters=2>, id {ident(b._fut_waiter)})",
        "  awaited by Task 'parent' (via gather)",
    )
    ev.set()
    loop.run_until_complete(parent)


async def shield_it(task):
    return await asyncio.shield(task)


async def wait_for_them(*tasks):
    return await asyncio.wait(tasks)


async def in_task_group(ev, children):
    async with asyncio.TaskGroup() as tg:
        children.append(tg.create_task(wait_event(ev), name="child"))


def task_group_exit():
    """The frames of a TaskGroup's ``async with`` waiting for its tasks."""
    if hasattr(asyncio.TaskGroup, "_aexit"):  # 3.14 moved the wait into _aexit
        return [
            stdlib(asyncio.TaskGroup.__aexit__, "await self._aexit("),
            stdlib(asyncio.TaskGroup._aexit, "await self._on_completed_fut"),
        ]
    return [stdlib(asyncio.TaskGroup.__aexit__, "await self._on_completed_fut")]


def test_shield(loop):
    ev = asyncio.Event()
    child = loop.create_task(wait_event(ev), name="child")
    parent = loop.create_task(shield_it(child), name="parent")
    settle(loop)
    assert report(loop) == expect(
        header(parent),
        "  awaits Task 'child' (via shield)",
        frames(here(shield_it, "await asyncio.shield")),
        header(child),
        frames(here(wait_event, "await ev.wait()"), stdlib(asyncio.Event.wait, "await fut")),
        f"  waits on Future (asyncio.Event <unset waiters=1>, id {ident(child._fut_waiter)})",
        "  awaited by Task 'parent' (via shield)",
    )
    ev.set()
    loop.run_until_complete(parent)


def test_asyncio_wait(loop):
    ev = asyncio.Event()
    child = loop.create_task(wait_event(ev), name="child")
    parent = loop.create_task(wait_for_them(child), name="parent")
    settle(loop)
    assert report(loop) == expect(
        header(parent),
        "  awaits Task 'child' (via wait)",
        frames(
            here(wait_for_them, "await asyncio.wait"),
            stdlib(asyncio.wait, "await _wait("),
            stdlib(asyncio.tasks._wait, "await waiter"),
        ),
        header(child),
        frames(here(wait_event, "await ev.wait()"), stdlib(asyncio.Event.wait, "await fut")),
        f"  waits on Future (asyncio.Event <unset waiters=1>, id {ident(child._fut_waiter)})",
        "  awaited by Task 'parent' (via wait)",
    )
    ev.set()
    loop.run_until_complete(parent)


def test_task_group(loop):
    ev = asyncio.Event()
    children = []
    parent = loop.create_task(in_task_group(ev, children), name="parent")
    settle(loop)
    (child,) = children
    assert report(loop) == expect(
        header(parent),
        "  awaits Task 'child' (via TaskGroup)",
        frames(
            here(in_task_group, "async with asyncio.TaskGroup()"),
            *task_group_exit(),
        ),
        header(child),
        frames(here(wait_event, "await ev.wait()"), stdlib(asyncio.Event.wait, "await fut")),
        f"  waits on Future (asyncio.Event <unset waiters=1>, id {ident(child._fut_waiter)})",
        "  awaited by Task 'parent' (via TaskGroup)",
    )
    ev.set()
    loop.run_until_complete(parent)


CYCLE = {}


async def cycle_a():
    return await CYCLE["b"]


async def cycle_b():
    # Through wait(), so that the test can end the cycle: cancelling a task
    # that directly awaits a task that directly awaits it recurses forever
    # (in asyncio too).
    await asyncio.wait([CYCLE["a"]])


def test_a_cycle_of_two_tasks(loop):
    a = CYCLE["a"] = loop.create_task(cycle_a(), name="a")
    b = CYCLE["b"] = loop.create_task(cycle_b(), name="b")
    try:
        settle(loop)
        graph = insight.task_graph(loop)
        assert graph.cycles == [[ident(a), ident(b), ident(a)]]
        assert report(loop) == expect(
            header(a),
            "  awaits Task 'b'",
            frames(here(cycle_a, 'await CYCLE["b"]')),
            "  awaited by Task 'b' (via wait)",
            header(b),
            "  awaits Task 'a' (via wait)",
            frames(
                here(cycle_b, "await asyncio.wait"),
                stdlib(asyncio.wait, "await _wait("),
                stdlib(asyncio.tasks._wait, "await waiter"),
            ),
            "  awaited by Task 'a'",
            cycles="Cycles:\n  Task 'a' -> Task 'b' -> Task 'a'",
        )
        b.cancel()
        settle(loop)
        assert a.cancelled() and b.cancelled()
    finally:
        CYCLE.clear()


async def report_from_inside(out):
    out.append(asyncio.get_running_loop().report(io.StringIO()))


def test_a_task_that_asks_for_the_report_is_running(loop):
    out = []
    task = loop.create_task(report_from_inside(out), name="reporter")
    loop.run_until_complete(task)
    assert out == [
        expect(
            header(task, " running"),
            frames(here(report_from_inside, "report(io.StringIO())")),
            "  awaited by loop.run_until_complete()",
        )
    ]


def test_asyncios_own_py_task_is_in_the_report():
    # The "py" kind above is _loopkit.PyTask, current to asyncio.current_task() on 3.14.
    # asyncio's _PyTask itself is in neither of the C registries there (it registers with
    # and is current to the pure-Python ones only): the report still lists it, running
    # when it asks for the report itself, waiting otherwise.
    loop = snakeloop.Loop(clock=FakeClock())
    loop.set_task_factory(lambda loop, coro, **kw: asyncio.tasks._PyTask(coro, loop=loop, **kw))
    try:
        ev = asyncio.Event()
        waiter = loop.create_task(wait_event(ev), name="waiter")
        out = []
        reporter = loop.create_task(report_from_inside(out), name="reporter")
        loop.run_until_complete(reporter)
        fut = waiter._fut_waiter
        assert out == [
            expect(
                header(reporter, " running"),
                frames(here(report_from_inside, "report(io.StringIO())")),
                "  awaited by loop.run_until_complete()",
                header(waiter),
                frames(
                    here(wait_event, "await ev.wait()"), stdlib(asyncio.Event.wait, "await fut")
                ),
                f"  waits on Future (asyncio.Event <unset waiters=1>, id {ident(fut)})",
            )
        ]
        ev.set()
        loop.run_until_complete(waiter)
    finally:
        close_loop(loop)


def block_the_loop(entered, release):
    entered.set()
    release.wait(30)


async def blocking_step(entered, release):
    block_the_loop(entered, release)


def test_report_from_another_thread_shows_the_step_that_runs(loop):
    entered, release = threading.Event(), threading.Event()
    out = []

    def reporter():
        entered.wait(30)
        try:
            out.append(report(loop))
        finally:
            release.set()

    thread = threading.Thread(target=reporter)
    thread.start()
    task = loop.create_task(blocking_step(entered, release), name="blocker")
    try:
        loop.run_until_complete(task)
    finally:
        release.set()
        thread.join()
    assert out == [
        expect(
            header(task, " running"),
            frames(
                here(blocking_step, "block_the_loop("),
                here(block_the_loop, "release.wait(30)"),
                stdlib(threading.Event.wait, "self._cond.wait(timeout)"),
                stdlib(threading.Condition.wait, "waiter.acquire(True, timeout)"),
            ),
            "  awaited by loop.run_until_complete()",
        )
    ]


async def ping_pong(inbox, outbox):
    while True:
        ball = await inbox.get()
        outbox.put_nowait(ball)
        if ball == "stop":
            return


@pytest.mark.timeout(60)
def test_reports_from_another_thread_while_tasks_switch(loop):
    queues = [asyncio.Queue() for _ in range(8)]
    workers = [
        loop.create_task(ping_pong(queues[i], queues[(i + 1) % 8]), name=f"w{i}") for i in range(8)
    ]
    queues[0].put_nowait("ball")
    reports = []
    errors = []

    def reporter():
        try:
            while len(reports) < 40:
                reports.append(json.loads(insight.report(loop, io.StringIO(), format="json")))
                reports.append(report(loop))
        except BaseException as exc:
            errors.append(exc)
        finally:
            loop.call_soon_threadsafe(queues[0].put_nowait, "stop")

    thread = threading.Thread(target=reporter)
    thread.start()
    try:
        loop.run_until_complete(asyncio.gather(*workers))
    finally:
        thread.join()
    assert not errors
    names = {f"w{i}" for i in range(8)}
    for data, text in zip(reports[::2], reports[1::2], strict=True):
        assert set(data) == {"tasks", "cycles", "loop"}
        assert {task["name"] for task in data["tasks"]} <= names
        assert {task["state"] for task in data["tasks"]} <= {"waiting", "ready", "running"}
        assert text.splitlines()[-1].startswith("Loop: loop.time()=1000.000, ")


def test_json_has_the_same_data(loop):
    q = asyncio.Queue(maxsize=3)
    consumer = loop.create_task(consume(q), name="consumer")
    main = loop.create_task(await_task(consumer), name="main")
    settle(loop)
    data = json.loads(report(loop, format="json"))
    assert data == insight.format_json(insight.task_graph(loop))
    kinds = {ident(t): type(t) for t in (main, consumer)}

    def kind_name(task_id):
        cls = kinds[task_id]
        if issubclass(cls, SnakeTask):
            return "snakeloop"
        return "asyncio" if C_TASK is not None and issubclass(cls, C_TASK) else "asyncio-py"

    def frame(func, snippet, path):
        lineno, source = _line(func, snippet)
        return {"file": path, "line": lineno, "function": func.__qualname__, "source": source}

    assert data == {
        "tasks": [
            {
                "id": ident(main),
                "name": "main",
                "kind": kind_name(ident(main)),
                "state": "waiting",
                "created_at": None,
                "frames": [frame(await_task, "return await other", HERE)],
                "waits_on": None,
                "awaits": [{"task": ident(consumer), "name": "consumer", "via": None}],
                "awaited_by": [],
                "external_awaiters": [],
            },
            {
                "id": ident(consumer),
                "name": "consumer",
                "kind": kind_name(ident(consumer)),
                "state": "waiting",
                "created_at": None,
                "frames": [
                    frame(consume, "await q.get()", HERE),
                    frame(asyncio.Queue.get, "await getter", "asyncio/queues.py"),
                ],
                "waits_on": {
                    "kind": "Future",
                    "id": ident(consumer._fut_waiter),
                    "owner": "asyncio.Queue",
                    "state": {"maxsize": 3, "size": 0, "getters": 1, "putters": 0},
                    "text": "asyncio.Queue <maxsize=3 size=0 getters=1 putters=0>",
                },
                "awaits": [],
                "awaited_by": [{"task": ident(main), "name": "main", "via": None}],
                "external_awaiters": [],
            },
        ],
        "cycles": [],
        "loop": {"time": 1000.0, "virtual": False, "ready": 0, "timers": 0, "fds": []},
    }
    q.put_nowait(1)
    loop.run_until_complete(main)


def test_the_registry_read_gives_what_asyncio_all_tasks_gives():
    # The report reads the task registry its own way (_insight/registry.py, for other
    # threads' sake): the same tasks as asyncio.all_tasks(), each loop's pending ones only.
    from snakeloop._insight.registry import tasks_of

    loops = [make_loop("snakeloop"), make_loop("c")]
    try:
        events = [asyncio.Event() for _ in loops]  # an Event is bound to one loop
        for loop, ev in zip(loops, events, strict=True):
            pending = [loop.create_task(wait_event(ev)) for _ in range(4)]
            done = loop.create_task(_tick())
            settle(loop)
            assert done.done()
            assert tasks_of(loop) == asyncio.all_tasks(loop) == set(pending)
        for loop, ev in zip(loops, events, strict=True):
            ev.set()
            settle(loop)
            assert tasks_of(loop) == asyncio.all_tasks(loop) == set()
    finally:
        for loop in loops:
            close_loop(loop)


def test_the_kind_names_the_task_implementation():
    # "asyncio" is asyncio's C Task and "asyncio-py" its pure-Python one.  PyPy has no
    # _asyncio: its asyncio.Task, the loop's default task with stdlib_futures=True, is the
    # pure-Python one, and the report says so rather than calling it a C task.
    loop = make_loop("c")
    try:
        ev = asyncio.Event()
        tasks = {"default": loop.create_task(wait_event(ev), name="default")}
        for name, cls in (("py", PyTask), ("snake", SnakeTask)):
            loop.set_task_factory(lambda loop, coro, cls=cls, **kw: cls(coro, loop=loop, **kw))
            tasks[name] = loop.create_task(wait_event(ev), name=name)
        settle(loop)
        data = json.loads(report(loop, format="json"))
        assert type(tasks["default"]) is asyncio.Task
        default = "asyncio-py" if sys.implementation.name == "pypy" else "asyncio"
        assert {task["name"]: task["kind"] for task in data["tasks"]} == {
            "default": default,
            "py": "asyncio-py",
            "snake": "snakeloop",
        }
        ev.set()
        loop.run_until_complete(asyncio.gather(*tasks.values()))
    finally:
        close_loop(loop)


async def wait_unseen(ev):
    # Waits on the event's future without being in Event.wait: only the
    # future's referrers can tell what it belongs to.
    fut = asyncio.get_running_loop().create_future()
    ev._waiters.append(fut)
    await fut


def test_referrers_find_the_primitive_the_frames_do_not_show(loop):
    ev = asyncio.Event()
    task = loop.create_task(wait_unseen(ev), name="sneaky")
    settle(loop)
    fut = task._fut_waiter
    lines = [header(task), frames(here(wait_unseen, "await fut"))]
    assert report(loop) == expect(*lines, f"  waits on Future (pending, id {ident(fut)})")
    assert report(loop, referrers=True) == expect(
        *lines, f"  waits on Future (asyncio.Event <unset waiters=1>, id {ident(fut)})"
    )
    ev.set()
    loop.run_until_complete(task)


class OwnWakeupTask(asyncio.tasks._PyTask):
    """A task class whose wakeup callback the report cannot recognize."""

    def _Task__wakeup(self, future):
        return super()._Task__wakeup(future)


def test_an_unknown_wakeup_still_gives_the_edge_from_fut_waiter():
    loop = snakeloop.Loop(clock=FakeClock())
    loop.set_task_factory(lambda loop, coro, **kwargs: OwnWakeupTask(coro, loop=loop, **kwargs))
    try:
        q = asyncio.Queue()
        consumer = loop.create_task(consume(q), name="consumer")
        main = loop.create_task(await_task(consumer), name="main")
        settle(loop)
        text = report(loop)
        assert "  awaits Task 'consumer'\n" in text
        assert "  awaited by Task 'main'\n" in text
        q.put_nowait(1)
        loop.run_until_complete(main)
    finally:
        close_loop(loop)


def test_creation_site_in_debug_mode_and_from_task_sites(loop):
    loop.set_debug(True)
    ev = asyncio.Event()
    task = loop.create_task(wait_event(ev), name="w")  # created here
    settle(loop)
    if loop.get_task_factory() is None:
        site = _line(test_creation_site_in_debug_mode_and_from_task_sites, "# created here")[0]
        where = f"{HERE}:{site}"
    else:
        factory = loop.get_task_factory()
        func = factory.__call__ if isinstance(factory, MixedFactory) else factory
        where = f"{HERE}:{_line(func, '(coro, loop=loop, **kwargs)')[0]}"
    assert report(loop).splitlines()[0] == f"Task 'w' (id {ident(task)}, created at {where})"
    loop.set_debug(False)
    ev.set()
    loop.run_until_complete(task)

    task = loop.create_task(wait_event(ev := asyncio.Event()), name="v")
    loop._task_sites = weakref.WeakKeyDictionary({task: (__file__, 7)})
    settle(loop)
    assert report(loop).splitlines()[0] == f"Task 'v' (id {ident(task)}, created at {HERE}:7)"
    ev.set()
    loop.run_until_complete(task)


def test_loop_line_counts_ready_callbacks_timers_and_fds(loop):
    import socket

    a, b = socket.socketpair()
    try:
        loop.add_reader(a, lambda: None)
        loop.add_writer(b, lambda: None)
        timer = loop.call_later(10, lambda: None)
        cancelled = loop.call_later(20, lambda: None)
        cancelled.cancel()
        loop.call_soon(lambda: None)
        last = report(loop).splitlines()[-1]
        fds = f"{describe(loop, a.fileno(), a)} (read), {describe(loop, b.fileno(), b)} (write)"
        if a.fileno() > b.fileno():
            fds = ", ".join(reversed(fds.split(", ")))
        assert last == f"Loop: loop.time()=1000.000, 1 ready, 1 timers, fds: {fds}"
        timer.cancel()
    finally:
        loop.remove_reader(a)
        loop.remove_writer(b)
        a.close()
        b.close()
    settle(loop, 1)


def describe(loop, fd, fileobj):
    try:
        from snakeloop.pending import describe_fd
    except ImportError:
        return f"fd {fd}"
    return describe_fd(loop, fd, fileobj)


def test_deadlock_message(loop):
    ev = asyncio.Event()
    waiters = [loop.create_task(wait_event(ev), name=f"w{i}") for i in (1, 2)]
    settle(loop)
    graph_text = report(loop)
    reasons = "no ready callbacks, no timers, {}, no executor jobs, no other threads"
    assert insight.deadlock_message(loop, virtual=True, fds_note=None) == (
        "snakeloop: deadlock: no task can make progress ("
        + reasons.format("no watched file descriptors")
        + "). 2 tasks are blocked forever.\n\n"
        + graph_text
    )
    note = "fds watched: listener 127.0.0.1:8080 (no connection can arrive)"
    assert insight.deadlock_message(loop, virtual=False, fds_note=note) == (
        "snakeloop: deadlock: no task can make progress ("
        + reasons.format(note)
        + "). 2 tasks are blocked forever. The loop keeps waiting.\n\n"
        + graph_text
    )
    ev.set()
    loop.run_until_complete(asyncio.gather(*waiters))


def test_no_tasks_and_bad_format(loop):
    assert report(loop) == expect("No pending tasks.")
    with pytest.raises(ValueError, match="format must be"):
        loop.report(io.StringIO(), format="xml")


async def wait_with_timeout(task):
    return await asyncio.wait_for(task, 10)


def test_wait_for(loop):
    ev = asyncio.Event()
    child = loop.create_task(wait_event(ev), name="child")
    parent = loop.create_task(wait_with_timeout(child), name="parent")
    settle(loop)
    if sys.version_info < (3, 12):
        # 3.11's wait_for waits on its own future, released by a callback on the task.
        via, inner = " (via wait_for)", stdlib(asyncio.wait_for, "await waiter")
    else:
        via, inner = "", stdlib(asyncio.wait_for, "return await fut")
    assert report(loop) == expect(
        header(parent),
        f"  awaits Task 'child'{via}",
        frames(here(wait_with_timeout, "await asyncio.wait_for"), inner),
        header(child),
        frames(here(wait_event, "await ev.wait()"), stdlib(asyncio.Event.wait, "await fut")),
        f"  waits on Future (asyncio.Event <unset waiters=1>, id {ident(child._fut_waiter)})",
        f"  awaited by Task 'parent'{via}",
        loop_line=LOOP_LINE.replace("0 timers", "1 timers"),
    )
    ev.set()
    loop.run_until_complete(parent)


async def wait_condition(cond):
    async with cond:
        await cond.wait()


async def take_semaphore(sem):
    async with sem:
        pass


def test_condition_and_semaphore(loop):
    cond = asyncio.Condition()
    sem = asyncio.Semaphore(0)
    waiter = loop.create_task(wait_condition(cond), name="cond")
    taker = loop.create_task(take_semaphore(sem), name="sem")
    settle(loop)
    assert report(loop) == expect(
        header(waiter),
        frames(
            here(wait_condition, "await cond.wait()"), stdlib(asyncio.Condition.wait, "await fut")
        ),
        "  waits on Future (asyncio.Condition <unlocked waiters=1>, "
        f"id {ident(waiter._fut_waiter)})",
        header(taker),
        frames(
            here(take_semaphore, "async with sem"),
            stdlib(asyncio.locks._ContextManagerMixin.__aenter__, "await self.acquire()"),
            stdlib(asyncio.Semaphore.acquire, "await fut"),
        ),
        f"  waits on Future (asyncio.Semaphore <value=0 waiters=1>, id {ident(taker._fut_waiter)})",
    )
    sem.release()

    async def notify():
        async with cond:
            cond.notify_all()

    loop.run_until_complete(notify())
    loop.run_until_complete(asyncio.gather(waiter, taker))
