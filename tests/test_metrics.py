"""Always-on loop metrics: counts, idle time, timer lag, slow-callback attribution.

Slow callbacks are real (``time.sleep`` in a task step, outside debug
mode) and timed on the real clock; the thresholds they are checked
against are far from the sleeps.  Everything else about time runs on a
``VirtualClock``, where the lags and idle times are exact.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import threading
import time

import pytest

import snakeloop
import snakeloop.metrics
from snakeloop import VirtualClock
from snakeloop.metrics import LAG_BUCKET_BOUNDS, LoopMetrics, prometheus_text, utilization
from snakeloop.metrics.recorder import WINDOW

TASK_KINDS = pytest.mark.parametrize("stdlib_futures", [False, True], ids=["snake", "ctask"])
BLOCK = 0.15


def _line_of(function, text):
    """The line number of the first line of ``function`` that contains ``text``."""
    lines, first = inspect.getsourcelines(function)
    for offset, line in enumerate(lines):
        if text in line:
            return first + offset
    raise AssertionError(f"{text!r} not in {function.__name__}")


def _place(function, text):
    return f"tests/test_metrics.py:{_line_of(function, text)}"


def run_then_read(main, **loop_options):
    """Run ``main()`` on a new loop; its result and the loop's metrics once it stopped.

    A snapshot taken after the run is exact; one taken inside it lacks the
    last iterations (see snakeloop.metrics).
    """
    loop = snakeloop.new_event_loop(**loop_options)
    try:
        result = loop.run_until_complete(main())
        return result, loop.metrics()
    finally:
        loop.close()


# -- counts -------------------------------------------------------------------------------


def test_a_call_soon_chain_is_counted_callback_by_callback():
    loop = snakeloop.new_event_loop()
    try:
        before = loop.metrics()
        n = 1000
        left = [n]

        def step():
            left[0] -= 1
            if left[0]:
                loop.call_soon(step)
            else:
                loop.stop()

        loop.call_soon(step)
        loop.run_forever()
        after = loop.metrics()
    finally:
        loop.close()
    assert after.callbacks - before.callbacks == n
    assert after.ready_total - before.ready_total == n
    # One callback per iteration; no fd but the loop's own is watched, so
    # every iteration with a callback ready skips its poll.
    assert after.iterations - before.iterations == n
    assert after.polls_skipped - before.polls_skipped == n
    assert after.polls + after.polls_skipped == after.iterations
    assert after.ready_depth == 0
    assert isinstance(after, LoopMetrics)


def test_counts_read_from_inside_the_loop_are_at_most_256_iterations_old():
    async def main():
        loop = asyncio.get_running_loop()
        for _ in range(2000):
            await asyncio.sleep(0)
        return loop.metrics()

    loop = snakeloop.new_event_loop()
    try:
        seen = loop.run_until_complete(main())
        final = loop.metrics()
    finally:
        loop.close()
    assert 2000 - 256 <= seen.iterations <= final.iterations
    assert final.iterations >= 2000


def test_io_events_are_counted():
    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        try:
            got = loop.create_future()
            loop.add_reader(a, lambda: got.done() or got.set_result(a.recv(100)))
            b.send(b"x")
            assert await got == b"x"
            loop.remove_reader(a)
        finally:
            a.close()
            b.close()

    _, m = run_then_read(main)
    assert m.io_events == 1
    assert m.io_backlog == 0


def test_timers_fired_and_pending_are_counted():
    async def main():
        loop = asyncio.get_running_loop()
        fired = []
        for i in range(5):
            loop.call_later(0.1 * (i + 1), fired.append, i)
        far = loop.call_later(100, fired.append, "far")
        pending = loop.metrics().timers_pending
        await asyncio.sleep(1)
        far.cancel()
        return pending, fired

    (pending, fired), m = run_then_read(main, clock=VirtualClock())
    assert pending == 6
    assert fired == [0, 1, 2, 3, 4]
    # The five timers and the sleep's own.
    assert m.timers_fired == 6


def test_executor_jobs_is_a_live_gauge():
    release = threading.Event()

    async def main():
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(None, release.wait, 10)
        running = loop.metrics().executor_jobs
        release.set()
        await job
        return running, loop.metrics().executor_jobs

    running, after = snakeloop.run(main())
    assert (running, after) == (1, 0)


def test_tasks_alive_and_fds_are_gauges():
    async def main():
        loop = asyncio.get_running_loop()
        blocker = asyncio.Event()
        tasks = [asyncio.create_task(blocker.wait()) for _ in range(3)]
        await asyncio.sleep(0)
        a, b = socket.socketpair()
        try:
            loop.add_reader(a, lambda: None)
            m = loop.metrics()
            loop.remove_reader(a)
        finally:
            a.close()
            b.close()
        blocker.set()
        await asyncio.gather(*tasks)
        return m

    m = snakeloop.run(main())
    assert m.tasks_alive == 4  # main and its three
    assert m.fds == 1


# -- time: idle, busy, lag ---------------------------------------------------------------


def test_idle_time_is_the_time_spent_waiting_in_polls():
    async def main():
        await asyncio.sleep(5)
        return asyncio.get_running_loop().metrics()

    m = snakeloop.run(main(), clock=VirtualClock())
    # The sleep's five virtual seconds pass in a poll; nothing else takes time.
    assert m.idle == pytest.approx(5.0)
    assert m.uptime == pytest.approx(5.0)
    assert m.busy == pytest.approx(0.0, abs=1e-6)
    assert m.utilization == pytest.approx(0.0, abs=1e-6)


def test_timer_lag_is_measured_against_a_known_stall():
    clock = VirtualClock()

    async def main():
        loop = asyncio.get_running_loop()
        fired = loop.create_future()
        loop.call_later(0.1, fired.set_result, None)
        # A stall of 0.5 s in the loop: the timer due at 0.1 runs at 0.5.
        clock.jump(0.5)
        await fired

    _, m = run_then_read(main, clock=clock)
    assert m.timer_lag_count == 1
    assert m.timer_lag_max == pytest.approx(0.4)
    assert m.timer_lag_sum == pytest.approx(0.4)
    # 400 ms: the bucket of lags from 256 ms up to 512 ms.
    bucket = next(i for i, bound in enumerate(LAG_BUCKET_BOUNDS) if bound > 0.4)
    assert LAG_BUCKET_BOUNDS[bucket - 1] <= 0.4
    expected = [0] * len(m.timer_lag_hist)
    expected[bucket] = 1
    assert list(m.timer_lag_hist) == expected


def test_timers_that_run_on_time_have_no_lag():
    async def main():
        for _ in range(10):
            await asyncio.sleep(0.25)

    _, m = run_then_read(main, clock=VirtualClock())
    assert m.timer_lag_count == 10
    assert m.timer_lag_max == 0.0
    assert m.timer_lag_hist[0] == 10


def test_reset_peaks_starts_the_lag_peak_over():
    clock = VirtualClock()

    async def late_timer():
        loop = asyncio.get_running_loop()
        fired = loop.create_future()
        loop.call_later(0.1, fired.set_result, None)
        clock.jump(0.3)
        await fired

    loop = snakeloop.new_event_loop(clock=clock)
    try:
        loop.run_until_complete(late_timer())
        first = loop.metrics(reset_peaks=True)
        second = loop.metrics()
    finally:
        loop.close()
    assert first.timer_lag_max == pytest.approx(0.2)
    assert second.timer_lag_max == 0.0
    assert second.timer_lag_sum == pytest.approx(0.2)


def test_utilization_between_two_snapshots():
    clock = VirtualClock()

    async def main():
        loop = asyncio.get_running_loop()
        first = loop.metrics()
        await asyncio.sleep(1)  # idle
        loop.call_soon(clock.jump, 1.0)  # busy: a callback takes a second
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return first, loop.metrics()

    first, second = snakeloop.run(main(), clock=clock)
    assert utilization(first, second) == pytest.approx(0.5, abs=0.01)
    assert utilization(second, second) == 0.0


# -- slow callbacks ----------------------------------------------------------------------


async def _blocks_twice():
    await asyncio.sleep(0.01)
    time.sleep(BLOCK)  # first block
    await asyncio.sleep(0.01)  # between the blocks
    time.sleep(BLOCK)  # second block
    await asyncio.sleep(0.01)  # after the blocks


def _run_blocking(stdlib_futures, metrics=True, **options):
    async def main():
        worker = asyncio.create_task(_blocks_twice(), name="blocker")
        await worker
        return asyncio.get_running_loop().metrics()

    loop = snakeloop.new_event_loop(stdlib_futures=stdlib_futures, metrics=metrics, **options)
    try:
        assert not loop.get_debug()
        return loop.run_until_complete(main())
    finally:
        loop.close()


def _spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_long_batch_of_quick_callbacks_is_a_slow_stretch_only_interpreted():
    """2,000 callbacks of 0.5 ms each, queued at once: one batch of 1 s.

    Interpreted, the loop reads its clock once per iteration, so the batch is
    one stretch of 1 s, longer than slow_callback_duration.  Compiled, it reads
    the C clock after every 64 callbacks: no stretch is longer than 32 ms, and
    nothing is slow.  A callback that does hold the loop is slow in both, and
    counted once (the poll that ended its stretch without waiting once left
    it to step 4 to count again).
    """
    loop = snakeloop.new_event_loop()
    try:
        loop.slow_callback_duration = 0.5
        for _ in range(2000):
            loop.call_soon(_spin, 0.0005)
        # Stopped from a timer due after the batch: the next iteration's clock
        # read ends the batch's last stretch (a loop stopped within the batch
        # reads none).
        loop.call_later(0.01, loop.stop)
        loop.run_forever()
        quick = loop.metrics().slow_iterations
        for _ in range(100):
            loop.call_soon(_spin, 0.0005)
        loop.call_soon(_spin, 0.6)
        loop.call_later(0.01, loop.stop)
        loop.run_forever()
        held = loop.metrics().slow_iterations - quick
    finally:
        loop.close()
    assert quick == (0 if snakeloop.COMPILED else 1)
    assert held == 1


@TASK_KINDS
@pytest.mark.parametrize("logged", [False, True], ids=["quiet", "logged"])
def test_a_slow_step_is_found_then_attributed_to_its_task_and_lines(stdlib_futures, logged, caplog):
    caplog.set_level(logging.DEBUG)
    options = {"log_slow_callbacks": True} if logged else {}
    m = _run_blocking(stdlib_futures, **options)
    # The first block is seen as a slow stretch between two clock reads, of
    # the timer that woke the task and the task's step: it is put to that
    # step, and opens the timing window, in which the second is timed alone.
    assert m.slow_iterations >= 2
    first, record = m.slow_callbacks
    # The first block is named when it is seen: its stretch ended with the
    # task's step, and where the step began is read from the code.
    assert (first.task_name, first.coro_qualname) == ("blocker", "_blocks_twice")
    assert first.segment == (
        f"{_place(_blocks_twice, 'await asyncio.sleep(0.01)')} → "
        f"{_place(_blocks_twice, 'between the blocks')}"
    )
    assert first.callback_label.startswith("step of 'blocker'")
    assert record.task_name == "blocker"
    assert record.coro_qualname == "_blocks_twice"
    assert record.segment == (
        f"{_place(_blocks_twice, 'between the blocks')} → "
        f"{_place(_blocks_twice, 'after the blocks')}"
    )
    assert record.duration >= BLOCK
    assert record.callback_label == "step of 'blocker'"
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("snakeloop")]
    if not logged:
        # asyncio logs nothing of a slow callback outside debug mode; nor does snakeloop
        # unless asked to.
        assert messages == []
        return
    assert any("without a pause" in text and f"next {WINDOW:g} s" in text for text in messages)
    assert any(
        text.startswith("Slow step of task 'blocker' (_blocks_twice) took 0.1")
        and record.segment in text
        for text in messages
    ), messages


@TASK_KINDS
def test_exact_mode_attributes_the_first_slow_step_too(stdlib_futures):
    m = _run_blocking(stdlib_futures, metrics="exact")
    assert [r.segment for r in m.slow_callbacks] == [
        f"{_place(_blocks_twice, 'await asyncio.sleep(0.01)')} → "
        f"{_place(_blocks_twice, 'between the blocks')}",
        f"{_place(_blocks_twice, 'between the blocks')} → "
        f"{_place(_blocks_twice, 'after the blocks')}",
    ]
    assert all(r.task_name == "blocker" for r in m.slow_callbacks)


async def _helper_that_blocks_on_its_way_out():
    await asyncio.sleep(0.01)  # the helper waits
    time.sleep(BLOCK)


async def _blocks_in_a_helper_then_in_itself():
    await _helper_that_blocks_on_its_way_out()
    await asyncio.sleep(0.01)  # back in the task's own coroutine
    await _helper_that_blocks_on_its_way_out()


class _Counting(snakeloop.Instrument):
    """An instrument: callbacks run through the observer's general path."""

    def __init__(self):
        self.steps = 0

    def before_task_step(self, task):
        self.steps += 1


@TASK_KINDS
@pytest.mark.parametrize("instrumented", [False, True], ids=["timed", "instrumented"])
def test_a_slow_step_runs_between_the_lines_of_nested_coroutines(stdlib_futures, instrumented):
    # Each slow step starts in the helper (a coroutine the task awaits) and
    # ends in the task's own coroutine, or in the helper again: where the task
    # stood before a step is read before it runs, and its line looked up once
    # the step proved slow, after the helper's frame moved on or was gone.
    async def main():
        worker = asyncio.create_task(_blocks_in_a_helper_then_in_itself(), name="nested")
        await worker
        return asyncio.get_running_loop().metrics()

    instrument = _Counting()
    loop = snakeloop.new_event_loop(
        stdlib_futures=stdlib_futures,
        metrics="exact",
        instruments=[instrument] if instrumented else (),
    )
    try:
        m = loop.run_until_complete(main())
    finally:
        loop.close()
    waits = _place(_helper_that_blocks_on_its_way_out, "the helper waits")
    assert [r.segment for r in m.slow_callbacks] == [
        f"{waits} → {_place(_blocks_in_a_helper_then_in_itself, 'back in the task')}",
        f"{waits} → ?",
    ]
    assert all(r.task_name == "nested" for r in m.slow_callbacks)
    assert (instrument.steps > 0) == instrumented


@pytest.mark.parametrize("metrics", [False, "exact"])
def test_timed_callbacks_report_errors_and_skip_cancelled_ones_as_untimed_ones_do(metrics):
    # In exact mode (as in a timing window) the core runs each entry itself
    # (CoreLoop._run_ready_timed): the same errors reach the handler, with
    # the same Handle and message, and a cancelled handle does not run.
    loop = snakeloop.new_event_loop(metrics=metrics)
    seen, ran = [], []

    def fail(n):
        raise ValueError(n)

    try:
        loop.set_exception_handler(lambda _, context: seen.append(context))
        loop.call_soon(fail, 1)
        loop.call_soon(ran.append, "cancelled").cancel()
        loop.call_soon(ran.append, "kept")
        loop.call_soon(loop.stop)
        loop.run_forever()
    finally:
        loop.close()
    assert ran == ["kept"]
    [context] = seen
    assert context["message"].startswith("Exception in callback ")
    # (3.13 leaves the arguments out of the name outside debug mode.)
    assert ".fail(" in context["message"]
    assert isinstance(context["handle"], asyncio.Handle)
    assert type(context["exception"]) is ValueError


async def _blocks_at_its_first_step_and_after_a_yield():
    time.sleep(BLOCK)  # the first step
    await asyncio.sleep(0)
    time.sleep(BLOCK)  # after sleep(0)


@TASK_KINDS
def test_slow_steps_queued_by_the_task_itself_are_attributed_to_it(stdlib_futures):
    # The first step and the one after sleep(0) are queued by the task, not
    # by a future's callback: snakeloop's Task queues them as (Task._step,
    # task, context), the C Task as a Handle.
    async def main():
        worker = asyncio.create_task(_blocks_at_its_first_step_and_after_a_yield(), name="yielder")
        await worker
        return asyncio.get_running_loop().metrics()

    loop = snakeloop.new_event_loop(stdlib_futures=stdlib_futures, metrics="exact")
    try:
        m = loop.run_until_complete(main())
    finally:
        loop.close()
    assert [(r.task_name, r.callback_label) for r in m.slow_callbacks] == [
        ("yielder", "step of 'yielder'"),
        ("yielder", "step of 'yielder'"),
    ]


def test_a_slow_plain_callback_is_named_by_its_function():
    def stall():
        time.sleep(BLOCK)

    loop = snakeloop.new_event_loop(metrics="exact")
    try:
        loop.call_soon(stall)
        loop.call_soon(loop.stop)
        loop.run_forever()
        [record] = loop.metrics().slow_callbacks
    finally:
        loop.close()
    assert record.task_name is None and record.segment is None
    assert record.callback_label.endswith("stall")


async def _stalls_once():
    await asyncio.sleep(0.01)  # before the stall
    time.sleep(BLOCK)
    await asyncio.sleep(0.01)  # after the stall


@TASK_KINDS
def test_one_stall_is_attributed_to_its_task_and_lines_when_it_happens(stdlib_futures):
    """Outside debug mode and without a timing window: the one stall of a
    program is named at once, with the lines it ran between."""

    async def main():
        await asyncio.create_task(_stalls_once(), name="stalls")
        return asyncio.get_running_loop().metrics()

    loop = snakeloop.new_event_loop(stdlib_futures=stdlib_futures)
    try:
        assert not loop.get_debug()
        m = loop.run_until_complete(main())
    finally:
        loop.close()
    [record] = m.slow_callbacks
    assert record.task_name == "stalls"
    assert record.coro_qualname == "_stalls_once"
    assert record.segment == (
        f"{_place(_stalls_once, 'before the stall')} → {_place(_stalls_once, 'after the stall')}"
    )
    assert record.duration >= BLOCK
    assert record.callback_label.startswith("step of 'stalls'")
    assert m.slow_iterations == 1


def test_a_stall_alone_in_its_stretch_is_named_without_a_window():
    def stall():
        time.sleep(BLOCK)

    loop = snakeloop.new_event_loop()
    try:
        loop.call_soon(stall)
        # Due after the stall: the wait before it ends the stretch, which ran
        # the stall alone.
        loop.call_later(0.01, loop.stop)
        loop.run_forever()
        [record] = loop.metrics().slow_callbacks
        timing = loop._observe is not None
    finally:
        loop.close()
    assert record.task_name is None and record.segment is None
    assert record.callback_label.endswith("stall")
    assert record.duration >= BLOCK
    # Known exactly: no window opens to find it.
    assert not timing


def test_a_stretch_of_several_callbacks_says_how_many_ran_and_opens_the_window():
    def stall():
        time.sleep(BLOCK)

    def quick():
        pass

    loop = snakeloop.new_event_loop()
    try:
        loop.call_soon(stall)
        loop.call_soon(quick)
        loop.call_soon(loop.stop)
        loop.run_forever()
        [record] = loop.metrics().slow_callbacks
        timing = loop._observe is not None
    finally:
        loop.close()
    assert record.callback_label == "3 callbacks"
    assert (record.task_name, record.coro_qualname, record.segment) == (None, None, None)
    assert record.duration >= BLOCK
    assert timing


def test_ready_max_is_the_longest_ready_queue_an_iteration_ran():
    loop = snakeloop.new_event_loop()
    try:
        for _ in range(50):
            loop.call_soon(lambda: None)
        loop.call_soon(loop.stop)
        loop.run_forever()
        burst = loop.metrics(reset_peaks=True)
        after_reset = loop.metrics()
        loop.call_soon(lambda: None)
        loop.call_soon(loop.stop)
        loop.run_forever()
        steady = loop.metrics()
    finally:
        loop.close()
    assert burst.ready_max == 51
    assert after_reset.ready_max == 0
    assert steady.ready_max == 2
    assert steady.ready_total == 53


def test_the_timing_window_closes_after_its_time():
    # On virtual time: on the real clock a busy machine moved it between the window's
    # opening and the read of ``now``, by more than the 10 ms this checks.
    loop = snakeloop.new_event_loop(clock=VirtualClock())
    try:
        recorder = loop._metrics_recorder
        assert not recorder.timing(loop.time()) and loop._observe is None
        recorder.on_slow_stretch(0.5)
        now = loop.time()
        assert recorder.timing(now) and loop._observe is not None
        assert not recorder.window_closed(now + WINDOW - 0.01)
        assert recorder.window_closed(now + WINDOW)
    finally:
        loop.close()


def test_a_running_loop_stops_timing_once_the_window_is_over():
    # The window closes at the first clock read past its end, taken by the
    # core's timed step (CoreLoop._run_ready_timed).
    async def main():
        loop = asyncio.get_running_loop()
        loop._metrics_recorder.on_slow_stretch(0.5)
        opened = loop._observe is not None
        await asyncio.sleep(WINDOW / 2)
        halfway = loop._observe is not None
        await asyncio.sleep(WINDOW / 2)
        await asyncio.sleep(0)
        return opened, halfway, loop._observe is not None

    (opened, halfway, after), _ = run_then_read(main, clock=VirtualClock())
    assert (opened, halfway, after) == (True, True, False)


# -- modes and exporters --------------------------------------------------------------------


def test_metrics_false_keeps_nothing():
    loop = snakeloop.new_event_loop(metrics=False)
    try:
        loop.run_until_complete(asyncio.sleep(0))
        with pytest.raises(RuntimeError, match="metrics=False"):
            loop.metrics()
        assert loop._observe is None
    finally:
        loop.close()


@pytest.mark.parametrize(
    ("value", "mode"), [("0", False), ("off", False), ("1", True), ("exact", "exact")]
)
def test_the_environment_chooses_the_default_mode(monkeypatch, value, mode):
    monkeypatch.setenv("SNAKELOOP_METRICS", value)
    loop = snakeloop.new_event_loop()
    try:
        if mode is False:
            with pytest.raises(RuntimeError):
                loop.metrics()
        else:
            assert loop.metrics().mode == mode
    finally:
        loop.close()


def test_a_bad_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="metrics must be True, False, 'sampled' or 'exact'"):
        snakeloop.new_event_loop(metrics="fast")


def test_a_bad_environment_value_is_refused(monkeypatch):
    monkeypatch.setenv("SNAKELOOP_METRICS", "maybe")
    with pytest.raises(ValueError, match="SNAKELOOP_METRICS must be one of"):
        snakeloop.new_event_loop()


@pytest.mark.parametrize(
    ("value", "logged"), [("1", True), ("on", True), ("0", False), ("false", False), ("", False)]
)
def test_the_environment_chooses_whether_slow_callbacks_are_logged(monkeypatch, value, logged):
    monkeypatch.setenv("SNAKELOOP_LOG_SLOW_CALLBACKS", value)
    loop = snakeloop.new_event_loop()
    try:
        assert loop._metrics_recorder.log is logged
    finally:
        loop.close()


def test_a_bad_logging_choice_is_refused_with_the_choices(monkeypatch):
    with pytest.raises(ValueError, match="log_slow_callbacks must be True, False or None"):
        snakeloop.new_event_loop(log_slow_callbacks="yes")  # type: ignore[arg-type]
    monkeypatch.setenv("SNAKELOOP_LOG_SLOW_CALLBACKS", "exact")
    with pytest.raises(ValueError, match="SNAKELOOP_LOG_SLOW_CALLBACKS must be one of"):
        snakeloop.new_event_loop()


_ONE_STALL = """
import asyncio, sys, time

async def main():
    await asyncio.sleep(0)
    time.sleep(0.15)  # one blocking call, once
    await asyncio.sleep(0)

if sys.argv[1] == "asyncio":
    asyncio.run(main())
else:
    import snakeloop
    snakeloop.run(main())
print("done")
"""


@pytest.mark.parametrize(
    "env", [{}, {"SNAKELOOP_LOG_SLOW_CALLBACKS": "1"}], ids=["default", "opted-in"]
)
def test_one_stall_outside_debug_mode_writes_nothing_to_stderr_as_on_asyncio(tmp_path, env):
    import os
    import subprocess
    import sys

    script = tmp_path / "stall.py"
    script.write_text(_ONE_STALL)
    environment = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHONASYNCIODEBUG", "SNAKELOOP_"))
    }
    runs = {
        which: subprocess.run(
            [sys.executable, str(script), which],
            capture_output=True,
            text=True,
            timeout=60,
            env={**environment, **env},
        )
        for which in ("asyncio", "snakeloop")
    }
    for done in runs.values():
        assert done.returncode == 0, done.stderr
        assert done.stdout == "done\n"
    assert runs["asyncio"].stderr == ""
    if env:
        assert "without a pause, longer than slow_callback_duration" in runs["snakeloop"].stderr
    else:
        assert runs["snakeloop"].stderr == ""


def test_prometheus_text_is_valid_exposition_format():
    clock = VirtualClock()

    async def main():
        loop = asyncio.get_running_loop()
        fired = loop.create_future()
        loop.call_later(0.1, fired.set_result, None)
        clock.jump(0.05 + 0.1)
        await fired

    loop = snakeloop.new_event_loop(clock=clock)
    try:
        loop.run_until_complete(main())
        text = prometheus_text(loop)
    finally:
        loop.close()
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert line.split()[1] in ("HELP", "TYPE")
            continue
        name, value = line.rsplit(" ", 1)
        samples[name] = float(value)
    assert samples["snakeloop_timer_lag_seconds_count"] == 1
    assert samples['snakeloop_timer_lag_seconds_bucket{le="+Inf"}'] == 1
    # 50 ms late: in the buckets from 64 ms up, not in those below.
    assert samples['snakeloop_timer_lag_seconds_bucket{le="0.032"}'] == 0
    assert samples['snakeloop_timer_lag_seconds_bucket{le="0.064"}'] == 1
    assert samples["snakeloop_timers_fired_total"] == 1
    assert samples["snakeloop_tasks_alive"] == 0
    assert "# TYPE snakeloop_callbacks_total counter" in text


def test_importing_the_exporters_imports_no_exporter_library():
    import subprocess
    import sys

    code = (
        "import sys, snakeloop, snakeloop.metrics, snakeloop.metrics.otel; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


def test_opentelemetry_reads_the_loop_metrics():
    # OpenTelemetry's SDK is a test extra (pyproject.toml).
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from snakeloop.metrics import otel

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:

        async def main():
            for _ in range(10):
                await asyncio.sleep(0.1)

        loop = snakeloop.new_event_loop(clock=VirtualClock())
        try:
            otel.register(provider.get_meter("test"), loop)
            loop.run_until_complete(main())
            data = reader.get_metrics_data()
            m = loop.metrics()
        finally:
            loop.close()
    finally:
        provider.shutdown()
    points = {
        metric.name: metric.data.data_points[0].value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert points["snakeloop.timers_fired"] == m.timers_fired == 10
    assert points["snakeloop.tasks_alive"] == 0
    assert points["snakeloop.idle"] == pytest.approx(1.0)


def test_sampled_mode_reports_where_the_loop_thread_is_held():
    async def held():
        await asyncio.sleep(0)
        time.sleep(0.3)  # held here
        await asyncio.sleep(0)

    async def main():
        await asyncio.create_task(held(), name="holder")

    loop = snakeloop.new_event_loop(metrics="sampled")
    try:
        loop.run_until_complete(main())
        sampled = [
            r for r in loop.metrics().slow_callbacks if r.callback_label.startswith("sampled")
        ]
        assert not [t for t in threading.enumerate() if t.name == "snakeloop-metrics-sampler"]
    finally:
        loop.close()
    [record] = [r for r in sampled if r.segment == f"? → {_place(held, 'held here')}"]
    assert record.task_name == "holder"
    assert record.coro_qualname.endswith("held")
    assert record.duration >= 0.1


def test_sampled_mode_does_not_report_a_loop_waiting_in_a_poll():
    async def main():
        await asyncio.sleep(0.3)

    loop = snakeloop.new_event_loop(metrics="sampled")
    try:
        loop.run_until_complete(main())
        assert loop.metrics().slow_callbacks == ()
    finally:
        loop.close()


def test_sampled_mode_leaves_a_callback_the_run_loop_calls_in_c_to_the_recorder():
    # No Python frame runs during time.sleep: the innermost one is the run
    # loop's (in the compiled build, that of run_forever, which calls it),
    # not a place the program holds the thread.
    async def main():
        asyncio.get_running_loop().call_soon(time.sleep, 0.3)
        await asyncio.sleep(0)

    loop = snakeloop.new_event_loop(metrics="sampled")
    try:
        loop.run_until_complete(main())
        labels = [r.callback_label for r in loop.metrics().slow_callbacks]
        assert not [label for label in labels if label.startswith("sampled")]
    finally:
        loop.close()


def test_sampled_mode_does_not_report_a_poll_under_a_wrapped_run_once():
    # Monitoring tools wrap _run_once; the wrapper's frame is then the one
    # that calls the run loop (in the compiled build, the innermost one
    # during its poll).
    async def main():
        await asyncio.sleep(0.3)

    loop = snakeloop.new_event_loop(metrics="sampled")
    run_once = loop._run_once
    iterations = []

    def counting():
        iterations.append(None)
        run_once()

    loop._run_once = counting  # type: ignore[method-assign]
    try:
        loop.run_until_complete(main())
        assert iterations
        assert loop.metrics().slow_callbacks == ()
    finally:
        loop.close()


def test_slow_stretches_between_windows_are_logged_once_per_window_length(caplog):
    from snakeloop.metrics.recorder import WINDOW_EVERY

    caplog.set_level(logging.WARNING, logger="snakeloop")
    clock = VirtualClock()
    loop = snakeloop.new_event_loop(clock=clock, log_slow_callbacks=True)
    try:
        recorder = loop._metrics_recorder
        recorder.on_slow_stretch(0.5)  # opens the window
        clock.jump(WINDOW + 1)  # closed, and too soon for another
        for _ in range(3):
            recorder.on_slow_stretch(0.5)  # the first is logged, two are counted
        clock.jump(WINDOW + 1)
        recorder.on_slow_stretch(0.5)
        clock.jump(WINDOW_EVERY)
        recorder.on_slow_stretch(0.5)  # a new window
    finally:
        loop.close()
    messages = [r.getMessage() for r in caplog.records if r.name == "snakeloop"]
    assert len(messages) == 4, messages
    assert "timing every callback" in messages[0]
    assert messages[1].endswith("longer than slow_callback_duration (0.100 s)")
    assert messages[2].endswith("; 2 more such stretches since the last message")
    assert "timing every callback" in messages[3]


@pytest.mark.parametrize("metrics", [True, False])
def test_a_wait_without_a_timer_is_timed_only_with_metrics_on(metrics):
    loop = snakeloop.new_event_loop(metrics=metrics)
    try:
        woken = loop.create_future()
        # No timer is pending: the loop waits in a poll without a timeout.
        timer = threading.Timer(0.05, loop.call_soon_threadsafe, (woken.set_result, None))
        timer.start()
        loop.run_until_complete(woken)
        timer.join()
        idle = loop._counters.idle
    finally:
        loop.close()
    # metrics=False makes no clock read around such a wait.
    assert (idle > 0.0) if metrics else (idle == 0.0)
