"""snakeloop.Task held against asyncio's pure-Python Task on random schedules.

Up to five tasks run small random scripts (await futures, sleep(0), each
other, a Lock, an Event, a Queue, shield, gather, wait_for, timeouts, cancel
each other, uncancel themselves).  From outside, the state machine completes
or cancels the futures, cancels and uncancels tasks, feeds the queue, sets
the event and steps both loops one iteration at a time, in lockstep.  Every
event the scripts see is traced; the traces of snakeloop (snakeloop Task on a
snakeloop loop) and of the reference (``asyncio.tasks._PyTask`` on a stdlib
loop whose futures are ``_PyFuture``) must be identical.
"""

from __future__ import annotations

import asyncio
import gc
import re

import pytest
from _loopkit import (
    ExceptionRecorder,
    FrozenHeapMixin,
    close_loop,
    future_class,
    machine_examples,
    new_loop,
    run_machine,
    run_once,
    task_class,
)
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
MAX_TASKS = 5
MAX_FUTURES = 5
MSGS = st.sampled_from([None, "msg-a", "msg-b"])
IDX = st.integers(min_value=0, max_value=4)

OPS = st.one_of(
    st.tuples(st.just("sleep0")),
    st.tuples(st.just("fut"), IDX),
    st.tuples(st.just("task"), IDX),
    st.tuples(st.just("shield"), IDX),
    st.tuples(st.just("gather"), IDX, IDX, st.booleans()),
    st.tuples(st.just("lock")),
    st.tuples(st.just("event")),
    st.tuples(st.just("get")),
    st.tuples(st.just("put"), st.integers(min_value=0, max_value=3)),
    st.tuples(st.just("wait_for"), IDX),
    st.tuples(st.just("timeout"), IDX),
    st.tuples(st.just("uncancel_self")),
    st.tuples(st.just("cancel_other"), IDX, MSGS),
)
# Each op comes with a flag: swallow CancelledError and go on, or re-raise.
SCRIPTS = st.lists(st.tuples(OPS, st.booleans()), min_size=1, max_size=4)

FUTURE_EXCEPTIONS = {
    "ValueError": lambda: ValueError("bad"),
    "KeyError-class": lambda: KeyError,
    "CancelledError": lambda: asyncio.CancelledError("as exception"),
}


def mask(text: str) -> str:
    return _ADDRESS.sub("0x?", text)


class Side:
    def __init__(self, kind: str, task_cls=None) -> None:
        self.kind = kind
        self.loop = new_loop(kind)
        self.Future = future_class(kind)
        self.Task = task_cls or task_class(kind)
        self.handler = ExceptionRecorder()
        self.loop.set_exception_handler(self.handler)
        self.futs = [self.Future(loop=self.loop) for _ in range(3)]
        self.tasks: list = []
        self.trace: list = []
        self.lock = asyncio.Lock()
        self.event = asyncio.Event()
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=1)

    # -- normalisation

    def norm(self, value):
        if value is self.loop:
            return "<loop>"
        for i, t in enumerate(self.tasks):
            if value is t:
                return ("T", i)
        for i, f in enumerate(self.futs):
            if value is f:
                return ("F", i)
        if isinstance(value, BaseException):
            plain = all(isinstance(a, (int, str, type(None))) for a in value.args)
            args = value.args if plain else None
            return ("exc", type(value), mask(str(value)), args)
        if isinstance(value, (list, tuple)):
            return type(value)(self.norm(v) for v in value)
        if isinstance(value, (int, str, bool, type(None))):
            return value
        return ("object", type(value).__name__, mask(repr(value)))

    def call(self, fn, *args):
        try:
            value = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - the outcome is compared
            return ("raise", type(exc), mask(str(exc)))
        return ("ok", self.norm(value))

    def task_state(self, task) -> tuple:
        if not task.done():
            return ("pending", task.cancelling())
        return ("done", task.cancelled(), task.cancelling())

    # -- the scripts

    async def perform(self, op, tid):
        kind = op[0]
        if kind == "sleep0":
            return await asyncio.sleep(0)
        if kind == "fut":
            return await self.futs[op[1] % len(self.futs)]
        if kind == "task":
            earlier = self.tasks[:tid]
            if not earlier:
                await asyncio.sleep(0)
                return "no earlier task"
            return await earlier[op[1] % len(earlier)]
        if kind == "shield":
            return await asyncio.shield(self.futs[op[1] % len(self.futs)])
        if kind == "gather":
            a = self.futs[op[1] % len(self.futs)]
            b = self.futs[op[2] % len(self.futs)]
            return await asyncio.gather(a, b, return_exceptions=op[3])
        if kind == "lock":
            async with self.lock:
                await asyncio.sleep(0)
                return self.lock.locked()
        if kind == "event":
            return await self.event.wait()
        if kind == "get":
            return await self.queue.get()
        if kind == "put":
            return await self.queue.put(op[1])
        if kind == "wait_for":
            return await asyncio.wait_for(self.futs[op[1] % len(self.futs)], None)
        if kind == "timeout":
            async with asyncio.timeout(-1):
                return await self.futs[op[1] % len(self.futs)]
        if kind == "uncancel_self":
            me = asyncio.current_task()
            return (me.uncancel(), me.cancelling())
        if kind == "cancel_other":
            target = self.tasks[op[1] % len(self.tasks)]
            return target.cancel() if op[2] is None else target.cancel(msg=op[2])
        raise AssertionError(op)

    async def script(self, tid, ops):
        me = asyncio.current_task()
        self.trace.append((tid, "start", me is self.tasks[tid]))
        for i, (op, swallow) in enumerate(ops):
            try:
                value = await self.perform(op, tid)
            except asyncio.CancelledError as exc:
                self.trace.append((tid, i, "cancelled", self.norm(exc), me.cancelling()))
                if not swallow:
                    raise
            except Exception as exc:  # noqa: BLE001 - traced and compared
                self.trace.append((tid, i, "error", self.norm(exc)))
            else:
                self.trace.append((tid, i, "ok", self.norm(value)))
        return ("finished", tid)

    def close(self) -> None:
        close_loop(self.loop)
        self.futs.clear()
        self.tasks.clear()


class TaskMachine(FrozenHeapMixin, RuleBasedStateMachine):
    CANDIDATE = "snakeloop"
    CANDIDATE_TASK = None
    REFERENCE = "stdlib-py"

    def __init__(self) -> None:
        super().__init__()
        self.ref = Side(self.REFERENCE)
        self.cand = Side(self.CANDIDATE, self.CANDIDATE_TASK)
        self.sides = (self.ref, self.cand)
        self.steps: list[str] = []

    def both(self, label, action):
        self.steps.append(label)
        results = [side.call(action, side) for side in self.sides]
        assert results[1] == results[0], (
            f"divergence at {label!r}\n  {self.REFERENCE}: {results[0]!r}\n"
            f"  {self.CANDIDATE}: {results[1]!r}\n  steps: {self.steps!r}"
        )
        self.compare()
        return results[0]

    def compare(self):
        assert self.cand.trace == self.ref.trace, (
            f"traces differ\n  {self.REFERENCE}: {self.ref.trace!r}\n"
            f"  {self.CANDIDATE}: {self.cand.trace!r}\n  steps: {self.steps!r}"
        )

    # -- rules

    @initialize(first=SCRIPTS, second=SCRIPTS)
    def start_two_tasks(self, first, second):
        for ops in (first, second):
            self.create_task(ops, settle=0)

    @precondition(lambda self: len(self.ref.tasks) < MAX_TASKS)
    @rule(ops=SCRIPTS, settle=st.integers(min_value=0, max_value=2))
    def create_task(self, ops, settle):
        def action(s):
            tid = len(s.tasks)
            s.tasks.append(s.Task(s.script(tid, ops), loop=s.loop, name=f"t{tid}"))
            return s.tasks[-1].get_name()

        self.both(f"create_task({ops!r})", action)
        for _ in range(settle):
            self.both("iterate", lambda s: run_once(s.loop))

    @precondition(lambda self: self.ref.tasks)
    @rule(t=IDX, msg=MSGS)
    def cancel_task(self, t, msg):
        def action(s):
            task = s.tasks[t % len(s.tasks)]
            return task.cancel() if msg is None else task.cancel(msg=msg)

        self.both(f"cancel_task({t}, {msg!r})", action)

    @precondition(lambda self: self.ref.tasks)
    @rule(t=IDX)
    def uncancel_task(self, t):
        self.both(f"uncancel_task({t})", lambda s: s.tasks[t % len(s.tasks)].uncancel())

    @precondition(lambda self: self.ref.tasks)
    @rule(
        t=IDX,
        query=st.sampled_from(["done", "cancelled", "cancelling", "result", "exception"]),
    )
    def ask_task(self, t, query):
        self.both(f"{query}(task {t})", lambda s: getattr(s.tasks[t % len(s.tasks)], query)())

    @precondition(lambda self: len(self.ref.futs) < MAX_FUTURES)
    @rule()
    def new_future(self):
        def action(s):
            s.futs.append(s.Future(loop=s.loop))

        self.both("new_future", action)

    @rule(k=IDX, value=st.integers(min_value=0, max_value=3))
    def set_result(self, k, value):
        self.both(
            f"set_result(F{k}, {value})",
            lambda s: s.futs[k % len(s.futs)].set_result(value),
        )

    @rule(k=IDX, kind=st.sampled_from(sorted(FUTURE_EXCEPTIONS)))
    def set_exception(self, k, kind):
        self.both(
            f"set_exception(F{k}, {kind})",
            lambda s: s.futs[k % len(s.futs)].set_exception(FUTURE_EXCEPTIONS[kind]()),
        )

    @rule(k=IDX, msg=MSGS)
    def cancel_future(self, k, msg):
        self.both(f"cancel(F{k}, {msg!r})", lambda s: s.futs[k % len(s.futs)].cancel(msg))

    @rule()
    def event_set(self):
        self.both("event.set()", lambda s: s.event.set())

    @rule()
    def event_clear(self):
        self.both("event.clear()", lambda s: s.event.clear())

    @rule(value=st.integers(min_value=0, max_value=3))
    def queue_put(self, value):
        self.both(f"queue.put_nowait({value})", lambda s: s.queue.put_nowait(value))

    @rule()
    def queue_get(self):
        self.both("queue.get_nowait()", lambda s: s.queue.get_nowait())

    @rule(n=st.integers(min_value=1, max_value=3))
    def iterate(self, n):
        for _ in range(n):
            self.both("iterate", lambda s: run_once(s.loop))

    # Stepping is what makes anything happen: give it more weight.
    @rule()
    def iterate_once(self):
        self.both("iterate", lambda s: run_once(s.loop))

    @rule()
    def iterate_once_more(self):
        self.both("iterate", lambda s: run_once(s.loop))

    @invariant()
    def task_states_agree(self):
        a = [self.ref.task_state(t) for t in self.ref.tasks]
        b = [self.cand.task_state(t) for t in self.cand.tasks]
        assert b == a, f"task states differ: {a} vs {b}; steps: {self.steps!r}"

    def finish_all(self):
        """Resolve everything and cancel all tasks until every task is done."""
        for round_ in range(100):
            if all(t.done() for t in self.ref.tasks) and all(t.done() for t in self.cand.tasks):
                return
            for side in self.sides:
                side_finish_step(side, cancel=round_ >= 4)
            self.both(f"teardown-iterate-{round_}", lambda s: run_once(s.loop))
            self.task_states_agree()
        raise AssertionError("tasks did not finish in teardown")

    def teardown(self):
        try:
            self.finish_all()
            finals = [[s.call(t.result) for t in s.tasks] for s in self.sides]
            assert finals[1] == finals[0], f"final results differ; steps: {self.steps!r}"
        finally:
            for side in self.sides:
                side.close()
            gc.collect()
        handler = [sorted(map(repr, s.handler.summary())) for s in self.sides]
        assert handler[1] == handler[0], (
            f"exception handler calls differ: {handler}; steps: {self.steps!r}"
        )


def side_finish_step(side: Side, cancel: bool) -> None:
    for fut in side.futs:
        if not fut.done():
            fut.set_result("teardown")
    side.event.set()
    while not side.queue.empty():
        side.trace.append(("drained", side.queue.get_nowait()))
    if not cancel:
        return
    for task in side.tasks:
        if not task.done():
            task.cancel(msg="teardown")


FAST = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=machine_examples(120),
    stateful_step_count=30,
)


def test_task_differential():
    run_machine(TaskMachine, settings=FAST)


@pytest.mark.stress
def test_task_differential_stress():
    run_machine(
        TaskMachine,
        settings=settings(
            derandomize=False,
            database=None,
            deadline=None,
            max_examples=1500,
            stateful_step_count=60,
        ),
    )


# The machine must be able to fail: deliberately broken Tasks are caught.

PyTask = task_class("stdlib-py")


class _CancelReturnsFalse(PyTask):
    def cancel(self, msg=None):
        super().cancel(msg=msg)
        return False


class _UncancelNoop(PyTask):
    def uncancel(self):
        return self.cancelling()


class _DropsCancelMessage(PyTask):
    def cancel(self, msg=None):
        return super().cancel()


@pytest.mark.parametrize("mutant", [_CancelReturnsFalse, _UncancelNoop, _DropsCancelMessage])
def test_machine_catches_mutants(mutant):
    machine = type(
        "MutantMachine",
        (TaskMachine,),
        {"CANDIDATE": "stdlib-py", "CANDIDATE_TASK": mutant},
    )
    with pytest.raises(AssertionError):
        run_machine(machine, settings=settings(FAST, max_examples=300, phases=[Phase.generate]))
