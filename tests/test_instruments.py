"""Instruments (snakeloop.instruments): which hooks the loop calls, when, and in what order.

Task hooks are checked for both task kinds (determinism.md section 1):
snakeloop's own Task and asyncio's C Task (``Loop(stdlib_futures=True)``).
Instruments are snakeloop's alone, so these tests run on snakeloop loops only.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import pathlib
import re
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

import snakeloop
from snakeloop import CallbackInfo, DeadlockError, Instrument, VirtualClock

TASK_KINDS = {"snakeloop-task": {}, "c-task": {"stdlib_futures": True}}

TASK_HOOKS = (
    "task_spawned",
    "task_scheduled",
    "before_task_step",
    "after_task_step",
    "task_exited",
)


def _name(task: Any) -> Any:
    # The task itself: its name is read when the log is (a task factory's
    # task is named after its eager first step ran).
    return task


class Recorder(Instrument):
    """Every hook, each appending (hook, detail) to ``log``."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []

    def before_run(self, loop: Any) -> None:
        self.log.append(("before_run", loop))

    def after_run(self, loop: Any) -> None:
        self.log.append(("after_run", loop))

    def task_spawned(self, task: Any) -> None:
        self.log.append(("task_spawned", _name(task)))

    def task_scheduled(self, task: Any) -> None:
        self.log.append(("task_scheduled", _name(task)))

    def before_task_step(self, task: Any) -> None:
        self.log.append(("before_task_step", _name(task)))

    def after_task_step(self, task: Any) -> None:
        self.log.append(("after_task_step", _name(task)))

    def task_exited(self, task: Any) -> None:
        self.log.append(("task_exited", _name(task)))

    def before_io_wait(self, timeout: float | None) -> None:
        self.log.append(("before_io_wait", timeout))

    def after_io_wait(self, timeout: float | None, nevents: int) -> None:
        self.log.append(("after_io_wait", timeout, nevents))

    def before_callback(self, cb: CallbackInfo) -> None:
        self.log.append(("before_callback", cb.label()))

    def after_callback(self, cb: CallbackInfo) -> None:
        self.log.append(("after_callback", cb.label()))

    def clock_jumped(self, old: float, new: float) -> None:
        self.log.append(("clock_jumped", old, new))

    def slow_callback(self, record: Any) -> None:
        self.log.append(("slow_callback", record))

    def deadlock(self, report: Any) -> None:
        self.log.append(("deadlock", report))

    def only(self, *hooks: str) -> list[tuple[Any, ...]]:
        return [
            tuple(x.get_name() if hasattr(x, "get_name") else x for x in entry)
            for entry in self.log
            if entry[0] in hooks
        ]


@pytest.fixture(params=list(TASK_KINDS))
def task_kind(request: pytest.FixtureRequest) -> dict[str, Any]:
    return TASK_KINDS[request.param]


def _run(main: Any, instrument: Any, **options: Any) -> Any:
    loop = snakeloop.new_event_loop(instruments=[instrument], **options)
    try:
        return loop.run_until_complete(loop.create_task(main(), name="main"))
    finally:
        loop.close()


async def _child_then_parent() -> int:
    async def child() -> int:
        await asyncio.sleep(0)
        return 1

    return await asyncio.get_running_loop().create_task(child(), name="child")


def test_task_hooks_in_order(task_kind: dict[str, Any]) -> None:
    rec = Recorder()
    assert _run(_child_then_parent, rec, **task_kind) == 1
    assert rec.only(*TASK_HOOKS) == [
        ("task_spawned", "main"),
        ("task_scheduled", "main"),
        ("before_task_step", "main"),
        ("task_spawned", "child"),
        ("task_scheduled", "child"),
        ("after_task_step", "main"),
        ("before_task_step", "child"),
        ("task_scheduled", "child"),  # sleep(0)
        ("after_task_step", "child"),
        ("before_task_step", "child"),
        ("task_scheduled", "main"),  # child's result wakes main
        ("task_exited", "child"),
        ("after_task_step", "child"),
        ("before_task_step", "main"),
        ("task_exited", "main"),
        ("after_task_step", "main"),
    ]


def test_callback_hooks_wrap_task_steps_and_plain_callbacks(task_kind: dict[str, Any]) -> None:
    infos: list[CallbackInfo] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        loop.call_soon(done.set_result, None)
        await done

    class Infos(Recorder):
        def before_callback(self, cb: CallbackInfo) -> None:
            infos.append(cb)
            super().before_callback(cb)

    rec = Infos()
    _run(main, rec, **task_kind)
    hooks = ("before_callback", "after_callback", "before_task_step", "after_task_step")
    log = rec.only(*hooks)
    assert log[:4] == [
        ("before_callback", "step of 'main'"),
        ("before_task_step", "main"),
        ("after_task_step", "main"),
        ("after_callback", "step of 'main'"),
    ]
    assert log[4][0] == "before_callback"
    assert log[4][1].endswith("Future.set_result")
    assert log[5] == ("after_callback", log[4][1])
    first, second = infos[0], infos[1]
    assert first.task.get_name() == "main"
    # While instruments are installed every step goes through call_soon, so
    # the loop holds a Handle for snakeloop's Task as for asyncio's.
    assert isinstance(first.handle, asyncio.Handle)
    assert second.task is None
    assert second.args == (None,)
    # call_soon made a Handle; the loop holds it.
    assert isinstance(second.handle, asyncio.Handle)
    handle: Any = second.handle
    assert handle._callback == second.callback
    assert isinstance(second.context, type(first.context))
    assert repr(second).startswith("<CallbackInfo ")


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager task factories came in 3.12")
def test_snakeloop_eager_task_step_is_bracketed() -> None:
    rec = Recorder()

    async def main() -> str:
        loop = asyncio.get_running_loop()
        make: Any = asyncio.create_eager_task_factory  # type: ignore[attr-defined,unused-ignore]
        factory = make(snakeloop.Task)
        loop.set_task_factory(factory)

        async def quick() -> str:
            return "done"

        task = loop.create_task(quick(), name="eager")
        assert task.done()
        return await task

    assert _run(main, rec) == "done"
    assert rec.only(*TASK_HOOKS)[2:6] == [
        ("before_task_step", "main"),
        ("task_spawned", "eager"),
        ("before_task_step", "eager"),
        ("task_exited", "eager"),
    ]
    assert rec.only(*TASK_HOOKS)[6] == ("after_task_step", "eager")


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager task factories came in 3.12")
def test_c_eager_task_is_reported_after_its_constructor() -> None:
    """asyncio's C Task takes its eager step in the constructor: no step hooks for it."""
    rec = Recorder()

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined,unused-ignore]

        async def quick() -> str:
            return "done"

        async def slow() -> str:
            await asyncio.sleep(0)
            return "later"

        first = loop.create_task(quick(), name="quick")
        second = loop.create_task(slow(), name="slow")
        return [await first, await second]

    assert _run(main, rec, stdlib_futures=True) == ["done", "later"]
    log = rec.only(*TASK_HOOKS)
    assert log[2:7] == [
        ("before_task_step", "main"),
        ("task_spawned", "quick"),
        ("task_exited", "quick"),
        # slow's eager step queued its next one (sleep(0)) inside the constructor.
        ("task_spawned", "slow"),
        ("task_scheduled", "slow"),
    ]
    assert ("task_exited", "slow") in log


def test_a_task_that_raises_exits_after_its_last_step(task_kind: dict[str, Any]) -> None:
    rec = Recorder()

    async def main() -> None:
        async def fails() -> None:
            await asyncio.sleep(0)
            raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            await asyncio.get_running_loop().create_task(fails(), name="fails")

    _run(main, rec, **task_kind)
    log = [e for e in rec.only(*TASK_HOOKS) if e[1] == "fails"]
    assert log == [
        ("task_spawned", "fails"),
        ("task_scheduled", "fails"),
        ("before_task_step", "fails"),
        ("task_scheduled", "fails"),
        ("after_task_step", "fails"),
        ("before_task_step", "fails"),
        ("task_exited", "fails"),
        ("after_task_step", "fails"),
    ]


def test_a_cancelled_task_exits_once(task_kind: dict[str, Any]) -> None:
    rec = Recorder()

    async def main() -> None:
        async def waits() -> None:
            await asyncio.sleep(3600)

        task = asyncio.get_running_loop().create_task(waits(), name="waits")
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    _run(main, rec, **task_kind)
    log = [e for e in rec.only(*TASK_HOOKS) if e[1] == "waits"]
    assert log == [
        ("task_spawned", "waits"),
        ("task_scheduled", "waits"),
        ("before_task_step", "waits"),
        ("after_task_step", "waits"),
        ("task_scheduled", "waits"),  # cancel() wakes it
        ("before_task_step", "waits"),
        ("task_exited", "waits"),
        ("after_task_step", "waits"),
    ]


def test_every_poll_is_paired_with_io_wait_hooks() -> None:
    rec = Recorder()
    a, b = socket.socketpair()
    try:

        async def main() -> None:
            loop = asyncio.get_running_loop()
            arrived = loop.create_future()

            def read() -> None:
                if not arrived.done():
                    arrived.set_result(a.recv(10))

            loop.add_reader(a, read)
            try:
                # A callback ready while an fd is watched: the loop polls with 0.
                await asyncio.sleep(0)
                loop.call_later(0.01, b.send, b"x")
                assert await arrived == b"x"
            finally:
                loop.remove_reader(a)

        _run(main, rec)
    finally:
        a.close()
        b.close()
    waits = rec.only("before_io_wait", "after_io_wait")
    assert waits, "the loop polled"
    for before, after in zip(waits[::2], waits[1::2], strict=True):
        assert before[0] == "before_io_wait"
        assert after[:2] == ("after_io_wait", before[1])
    timeouts = [entry[1] for entry in waits[::2]]
    assert 0 in timeouts
    assert any(t is not None and 0 < t <= 0.01 for t in timeouts)
    assert any(entry[2] == 1 for entry in waits[1::2])


def test_no_io_wait_hooks_for_skipped_polls() -> None:
    """With no fd watched and callbacks ready, the core skips the poll: no hook pair."""
    rec = Recorder()

    async def main() -> None:
        for _ in range(10):
            await asyncio.sleep(0)

    _run(main, rec)
    assert rec.only("before_io_wait", "after_io_wait") == []


def test_before_and_after_run_pair_every_run() -> None:
    rec = Recorder()
    loop = snakeloop.Loop(instruments=[rec])
    try:
        loop.run_until_complete(asyncio.sleep(0))
        loop.call_soon(loop.stop)
        loop.run_forever()
        with pytest.raises(ZeroDivisionError):
            loop.run_until_complete(_raise_zero())
    finally:
        loop.close()
    runs = rec.only("before_run", "after_run")
    assert runs == [("before_run", loop), ("after_run", loop)] * 3


async def _raise_zero() -> None:
    1 / 0  # noqa: B018


class TrioStyle:
    """An instrument written exactly as trio documents one: trio's signatures."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def before_run(self) -> None:
        self.calls.append("before_run")

    def after_run(self) -> None:
        self.calls.append("after_run")

    def task_spawned(self, task: Any) -> None:
        self.calls.append("task_spawned")

    def task_scheduled(self, task: Any) -> None:
        self.calls.append("task_scheduled")

    def before_task_step(self, task: Any) -> None:
        self.calls.append("before_task_step")

    def after_task_step(self, task: Any) -> None:
        self.calls.append("after_task_step")

    def task_exited(self, task: Any) -> None:
        self.calls.append("task_exited")

    def before_io_wait(self, timeout: float) -> None:
        self.calls.append("before_io_wait")

    def after_io_wait(self, timeout: float) -> None:
        self.calls.append("after_io_wait")


def test_a_trio_instrument_works_unchanged(asyncio_errors: list[logging.LogRecord]) -> None:
    trio_style = TrioStyle()

    async def main() -> None:
        await asyncio.sleep(0.01)

    _run(main, trio_style)
    assert asyncio_errors == []
    assert trio_style.calls[0] == "task_spawned"
    assert trio_style.calls[2] == "before_run"
    assert trio_style.calls[-1] == "after_run"
    assert {"before_io_wait", "after_io_wait", "task_exited"} <= set(trio_style.calls)


def test_inherited_hooks_are_not_called() -> None:
    class OnlyExits(Instrument):
        def __init__(self) -> None:
            self.exited: list[str] = []

        def task_exited(self, task: Any) -> None:
            self.exited.append(task.get_name())

    only = OnlyExits()
    loop = snakeloop.Loop(instruments=[only])
    try:
        loop.run_until_complete(loop.create_task(asyncio.sleep(0), name="t"))
        assert only.exited == ["t"]
        assert loop._instrument_set is not None
        assert not loop._instrument_set.has("task_spawned")
    finally:
        loop.close()


def test_a_raising_hook_disables_its_instrument(
    asyncio_errors: list[logging.LogRecord], caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(Recorder):
        def before_task_step(self, task: Any) -> None:
            raise RuntimeError("hook failed")

    broken = Broken()
    fine = Recorder()
    loop = snakeloop.Loop(instruments=[broken, fine])
    try:
        with caplog.at_level(logging.ERROR, logger="snakeloop.instrument"):
            loop.run_until_complete(loop.create_task(asyncio.sleep(0), name="t"))
        with pytest.raises(KeyError):
            loop.remove_instrument(broken)
        loop.remove_instrument(fine)
    finally:
        loop.close()
    records = [r for r in caplog.records if r.name == "snakeloop.instrument"]
    assert len(records) == 1
    assert records[0].getMessage() == (
        f"Exception raised when calling 'before_task_step' on instrument {broken!r}. "
        "Instrument has been disabled."
    )
    assert records[0].exc_info is not None
    assert str(records[0].exc_info[1]) == "hook failed"
    assert [r.getMessage() for r in asyncio_errors] == [records[0].getMessage()]
    # The other instrument saw the whole run; the broken one nothing after its failure.
    assert ("after_task_step", "t") in fine.only("after_task_step")
    assert broken.only("after_task_step") == []


def test_remove_instrument_raises_keyerror_when_absent() -> None:
    loop = snakeloop.Loop()
    try:
        rec = Recorder()
        with pytest.raises(KeyError):
            loop.remove_instrument(rec)
        loop.add_instrument(rec)
        loop.add_instrument(rec)  # already in: no second copy
        loop.remove_instrument(rec)
        with pytest.raises(KeyError):
            loop.remove_instrument(rec)
        # An instrument with no hooks at all is still an instrument.
        empty = object()
        loop.add_instrument(empty)
        loop.remove_instrument(empty)
    finally:
        loop.close()


def test_no_instrument_costs_nothing() -> None:
    loop = snakeloop.Loop()
    try:
        unwrapped = loop._poll
        assert loop._observe is None
        assert type(loop._ready) is collections.deque
        rec = Recorder()
        loop.add_instrument(rec)
        assert loop._observe is not None
        assert type(loop._ready) is not collections.deque
        assert loop._poll is not unwrapped
        loop.remove_instrument(rec)
        assert loop._observe is None
        assert type(loop._ready) is collections.deque
        assert loop._poll == unwrapped
        loop.run_until_complete(asyncio.sleep(0))
        assert rec.log == []
    finally:
        loop.close()


def test_instruments_come_and_go_while_the_loop_runs(task_kind: dict[str, Any]) -> None:
    rec = Recorder()
    seen: list[Any] = []

    async def main() -> None:
        loop: Any = asyncio.get_running_loop()
        loop.add_instrument(rec)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        seen.append(type(loop._ready))
        loop.remove_instrument(rec)
        await asyncio.sleep(0)
        seen.append(type(loop._ready))
        await asyncio.sleep(0)

    loop = snakeloop.Loop(**task_kind)
    try:
        loop.run_until_complete(loop.create_task(main(), name="main"))
        assert loop._observe is None
    finally:
        loop.close()
    assert seen[0] is not collections.deque
    assert seen[1] is collections.deque
    # The switch of ready queue did not stop the loop.  The step queued in
    # the step that added the instrument went to the plain deque, unseen;
    # the next one was seen queued.  The step that removed the instrument
    # had no after_task_step (as in trio).
    assert rec.only(*TASK_HOOKS) == [
        ("task_spawned", "main"),
        ("before_task_step", "main"),
        ("task_scheduled", "main"),
        ("after_task_step", "main"),
        ("before_task_step", "main"),
    ]
    assert rec.only("before_run") == []
    assert rec.only("after_run") == []


def test_clock_jumps_are_reported() -> None:
    rec = Recorder()

    async def main() -> None:
        await asyncio.sleep(5)

    clock = VirtualClock()
    loop = snakeloop.Loop(clock=clock, instruments=[rec])
    try:
        start = loop.time()
        loop.run_until_complete(main())
        clock.jump(2)
    finally:
        loop.close()
    jumps = rec.only("clock_jumped")
    assert jumps[0] == ("clock_jumped", start, start + 5)
    assert jumps[-1] == ("clock_jumped", start + 5, start + 7)
    # The jump happens inside an io wait: the loop was idle.
    log = rec.log
    where = log.index(jumps[0])
    assert log[where - 1][0] == "before_io_wait"
    assert log[where + 1][0] == "after_io_wait"


def test_deadlock_hook_sees_the_error() -> None:
    rec = Recorder()

    async def main() -> None:
        await asyncio.get_running_loop().create_future()

    clock = VirtualClock()
    loop = snakeloop.Loop(clock=clock, instruments=[rec])
    try:
        task = loop.create_task(main())
        with pytest.raises(DeadlockError) as raised:
            loop.run_until_complete(task)
        task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    deadlocks = rec.only("deadlock")
    assert len(deadlocks) == 1
    assert deadlocks[0][1] is raised.value


def test_slow_callbacks_are_reported() -> None:
    rec = Recorder()
    loop = snakeloop.Loop(metrics="exact", instruments=[rec])
    try:
        loop.slow_callback_duration = 0.01
        loop.call_soon(time.sleep, 0.03)
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    slow = rec.only("slow_callback")
    assert len(slow) == 1
    record = slow[0][1]
    assert record.duration >= 0.03
    assert "sleep" in record.callback_label


def test_the_readme_example_prints_what_the_readme_shows(tmp_path: pathlib.Path) -> None:
    readme = (pathlib.Path(__file__).resolve().parent.parent / "README.md").read_text()
    found = re.search(
        r"<!-- readme-example: tracer.py .*?-->\n```python\n(.*?)```\n\n```\n(.*?)```", readme, re.S
    )
    assert found is not None
    script = tmp_path / "tracer.py"
    script.write_text(found.group(1))
    ran = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True
    )
    assert ran.stdout == found.group(2)


def test_a_call_queued_on_the_swapped_out_deque_still_runs() -> None:
    """Another thread that read ``_ready`` just before the swap appends to the old deque."""
    loop = snakeloop.Loop()
    try:
        old = loop._ready
        loop.add_instrument(Recorder())
        ran: list[str] = []
        old.append(asyncio.Handle(ran.append, ("late",), loop, None))
        loop.run_until_complete(asyncio.sleep(0.01))
        assert ran == ["late"]
    finally:
        loop.close()


def test_hooks_follow_a_new_clock_and_a_seeded_poll() -> None:
    rec = Recorder()
    loop = snakeloop.Loop(seed=3, instruments=[rec])
    try:
        clock = VirtualClock()
        loop.set_clock(clock)
        start = loop.time()
        loop.run_until_complete(asyncio.sleep(2))
    finally:
        loop.close()
    assert ("clock_jumped", start, start + 2) in rec.log
    waits = rec.only("before_io_wait", "after_io_wait")
    assert waits and len(waits) % 2 == 0


def test_debug_mode_and_instruments_share_the_observer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rec = Recorder()
    loop = snakeloop.Loop(instruments=[rec])
    try:
        loop.set_debug(True)
        loop.slow_callback_duration = 0.01
        loop.call_soon(time.sleep, 0.02)
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            loop.run_until_complete(asyncio.sleep(0))
        loop.set_debug(False)
        assert loop._observe is not None  # the instrument still wants it
    finally:
        loop.close()
    assert any("Executing <Handle sleep" in r.getMessage() for r in caplog.records)
    labels = [entry[1] for entry in rec.only("before_callback")]
    assert "time.sleep" in labels


def test_io_wait_hooks_stay_after_set_clock() -> None:
    rec = Recorder()
    loop = snakeloop.Loop(instruments=[rec])
    try:
        loop.set_clock(snakeloop.MonotonicClock())
        loop.run_until_complete(asyncio.sleep(0.01))
    finally:
        loop.close()
    assert rec.only("before_io_wait")


def test_adding_an_instrument_does_not_stop_a_loop_whose_run_once_is_wrapped() -> None:
    """Monitoring tools wrap _run_once; run_forever then calls it per iteration."""
    rec = Recorder()
    loop = snakeloop.Loop()
    iterations = 0
    run_once = loop._run_once

    def counting() -> None:
        nonlocal iterations
        iterations += 1
        run_once()

    loop._run_once = counting  # type: ignore[method-assign]

    async def main() -> None:
        asyncio.get_running_loop().add_instrument(rec)  # type: ignore[attr-defined]
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(loop.create_task(main(), name="main"))
    finally:
        loop.close()
    assert iterations >= 3
    assert ("task_scheduled", "main") in rec.only("task_scheduled")
