"""``snakeloop.insight.enable()``, ``--insight`` and ``python -m snakeloop ps|pstree|top PID``.

The commands are run against live child processes whose tasks are blocked
in a known shape: a TaskGroup in ``main`` holding ``worker-1`` (blocked in
``Queue.get`` under ``consume``) and ``supervisor`` (awaiting ``worker-1``).
Closing the child's stdin releases the workers, so it ends normally.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import linecache
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _loopkit import snakeloop_module

PROGRAM = textwrap.dedent(
    """\
    import asyncio
    import sys
    import threading


    async def consume(queue):
        return await queue.get()


    async def worker(queue):
        await consume(queue)


    async def supervisor(task):
        await task


    released = threading.Event()


    def spin(seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not released.is_set():
            pass


    async def busy():
        spin(30)


    def release_on_eof(loop, queue):
        sys.stdin.read()
        released.set()
        loop.call_soon_threadsafe(queue.put_nowait, None)


    async def main():
        queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        MODE
        async with asyncio.TaskGroup() as group:
            first = group.create_task(worker(queue), name="worker-1")
            group.create_task(supervisor(first), name="supervisor")
            threading.Thread(target=release_on_eof, args=(loop, queue), daemon=True).start()
            print("ready", flush=True)
            BUSY


    import time
    asyncio.run(main())
    """
)


def _line_of(text: str) -> int:
    """The line of PROGRAM that has ``text``."""
    (line,) = [i for i, source in enumerate(PROGRAM.splitlines(), 1) if text in source]
    return line


MAIN_LINE = _line_of("async with asyncio.TaskGroup()")
WORKER_LINE = _line_of("await consume(queue)")
CONSUME_LINE = _line_of("return await queue.get()")
SUPERVISOR_LINE = _line_of("await task")

STUB_METRICS = textwrap.dedent(
    """\
    import dataclasses


    @dataclasses.dataclass(frozen=True)
    class SlowCallback:
        duration: float
        task_name: str
        coro_qualname: str
        segment: str
        callback_label: str
        iteration: int
        wall_time: float


    @dataclasses.dataclass(frozen=True)
    class LoopMetrics:
        uptime: float = 10.0
        idle: float = 6.0
        busy: float = 4.0
        utilization: float = 0.4
        iterations: int = 1000
        polls: int = 900
        polls_skipped: int = 100
        callbacks: int = 2500
        io_events: int = 70
        io_backlog: int = 3
        timers_fired: int = 40
        timer_lag_max: float = 0.0031
        timer_lag_sum: float = 0.02
        timer_lag_count: int = 40
        timer_lag_hist: tuple = (30, 8, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        ready_depth: int = 4
        ready_total: int = 1200
        slow_iterations: int = 1
        slow_callbacks: tuple = (
            SlowCallback(
                0.25, "worker-1", "worker", "program.py:11 → program.py:12",
                "Task.__step", 77, 1700000000.0,
            ),
        )
        executor_jobs: int = 2
        timers_pending: int = 5
        fds: int = 3
        tasks_alive: int = 3
        mode: str = "exact"
    """
)


class Child:
    def __init__(self, proc: subprocess.Popen[str], env: dict[str, str]) -> None:
        self.proc = proc
        self.env = env

    @property
    def pid(self) -> int:
        return self.proc.pid

    def snakeloop(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "snakeloop", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
        )

    def snapshot(self) -> dict[str, Any]:
        done = self.snakeloop("ps", "--json", str(self.pid))
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def _wait_for_line(proc: subprocess.Popen[str], expected: str, timeout: float = 30) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
        if ready:
            line = proc.stdout.readline()
            if line.strip() == expected:
                return
            if not line:
                break
    raise AssertionError(f"the child did not print {expected!r} (exit code {proc.poll()})")


def _stop(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(OSError):
        assert proc.stdin is not None
        proc.stdin.close()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


@contextlib.contextmanager
def child(tmp_path: Path, *, source: str, flags: tuple[str, ...] = ("--insight",)):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    script = tmp_path / "program.py"
    script.write_text(source)
    command = [sys.executable, "-m", "snakeloop", *flags, str(script)] if flags is not None else []
    proc = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_line(proc, "ready")
        yield Child(proc, env)
    finally:
        _stop(proc)


def program(mode: str = "", busy: str = "") -> str:
    return PROGRAM.replace("MODE", mode or "pass").replace("BUSY", busy or "pass")


@pytest.fixture
def blocked(tmp_path):
    with child(tmp_path, source=program()) as running:
        yield running


def _task(snapshot: dict[str, Any], name: str) -> dict[str, Any]:
    (loop,) = snapshot["loops"]
    (task,) = [task for task in loop["graph"]["tasks"] if task["name"] == name]
    return task


def _stdlib_frame(task: dict[str, Any], function: str, file: str) -> str:
    """``function file:line`` of the task's frame in the stdlib, checked to be an await there."""
    (frame,) = [f for f in task["frames"] if f["function"] == function]
    assert frame["file"] == file
    source = linecache.getline(os.path.join(os.path.dirname(os.__file__), file), frame["line"])
    assert "await" in source
    return f"{function} {file}:{frame['line']}"


# ---------------------------------------------------------------- ps, pstree, --json


def test_json_is_the_snapshot_of_the_programs_loop(blocked):
    snapshot = blocked.snapshot()
    assert snapshot["pid"] == blocked.pid
    assert snapshot["python"] == ".".join(map(str, sys.version_info[:3]))
    (loop,) = snapshot["loops"]
    assert loop["running"] is True
    assert loop["thread"]["native_id"] == blocked.pid  # the main thread
    assert loop["thread"]["name"] == "MainThread"
    assert loop["metrics"] is None or isinstance(loop["metrics"], dict)
    assert loop["error"] is None
    assert [task["name"] for task in loop["graph"]["tasks"]] == ["Task-1", "supervisor", "worker-1"]
    worker = _task(snapshot, "worker-1")
    assert [(f["file"], f["line"], f["function"]) for f in worker["frames"][:2]] == [
        ("program.py", WORKER_LINE, "worker"),
        ("program.py", CONSUME_LINE, "consume"),
    ]
    assert worker["frames"][2]["function"] == "Queue.get"
    assert worker["waits_on"]["owner"] == "asyncio.Queue"
    assert sorted((edge["name"], edge["via"]) for edge in worker["awaited_by"]) == [
        ("Task-1", "TaskGroup"),
        ("supervisor", None),
    ]


# Where main waits in ``async with TaskGroup()``, innermost first: 3.14 moved the wait from
# TaskGroup.__aexit__ into TaskGroup._aexit, which __aexit__ awaits.
TASK_GROUP_EXIT = (
    (("TaskGroup._aexit", "asyncio/taskgroups.py"),) if hasattr(asyncio.TaskGroup, "_aexit") else ()
) + (("TaskGroup.__aexit__", "asyncio/taskgroups.py"),)


def _ps_line(*values: object) -> str:
    widths = (10, 20, 20, 50, 50, 15, 15)
    return " ".join(f"{value!s:<{width}}" for value, width in zip(values, widths, strict=True))


def test_ps_prints_the_table_of_python_m_asyncio_ps(blocked):
    ids = {task["name"]: task["id"] for task in blocked.snapshot()["loops"][0]["graph"]["tasks"]}
    done = blocked.snakeloop("ps", str(blocked.pid))
    assert done.returncode == 0, done.stderr
    pid = blocked.pid
    main_stack = " -> ".join(f[0] for f in TASK_GROUP_EXIT) + " -> main"
    assert done.stdout.splitlines() == [
        _ps_line(
            "tid",
            "task id",
            "task name",
            "coroutine stack",
            "awaiter chain",
            "awaiter name",
            "awaiter id",
        ),
        "-" * 180,
        _ps_line(pid, ids["Task-1"], "Task-1", main_stack, "", "", "0x0"),
        _ps_line(
            pid, ids["supervisor"], "supervisor", "supervisor", main_stack, "Task-1", ids["Task-1"]
        ),
        _ps_line(
            pid,
            ids["worker-1"],
            "worker-1",
            "Queue.get -> consume -> worker",
            main_stack,
            "Task-1",
            ids["Task-1"],
        ),
        _ps_line(
            pid,
            ids["worker-1"],
            "worker-1",
            "Queue.get -> consume -> worker",
            "supervisor",
            "supervisor",
            ids["supervisor"],
        ),
    ]


def test_pstree_prints_the_tree_of_python_m_asyncio_pstree(blocked):
    snapshot = blocked.snapshot()
    main = _task(snapshot, "Task-1")
    # Outermost first, as the tree goes down: __aexit__, then (3.14) _aexit.
    exits = [_stdlib_frame(main, name, file) for name, file in reversed(TASK_GROUP_EXIT)]
    get = _stdlib_frame(_task(snapshot, "worker-1"), "Queue.get", "asyncio/queues.py")
    done = blocked.snakeloop("pstree", str(blocked.pid))
    assert done.returncode == 0, done.stderr
    below = "    " * (len(exits) + 1)  # the group's tasks hang below its last frame
    assert done.stdout.splitlines() == [
        "└── (T) Task-1",
        f"    └──  main program.py:{MAIN_LINE}",
        *[f"    {'    ' * depth}└──  {frame}" for depth, frame in enumerate(exits, 1)],
        f"    {below}├── (T) supervisor",
        f"    {below}│   └──  supervisor program.py:{SUPERVISOR_LINE}",
        f"    {below}│       └── (T) worker-1",
        f"    {below}│           └──  worker program.py:{WORKER_LINE}",
        f"    {below}│               └──  consume program.py:{CONSUME_LINE}",
        f"    {below}│                   └──  {get}",
        f"    {below}└── (T) worker-1",
        f"    {below}    └──  worker program.py:{WORKER_LINE}",
        f"    {below}        └──  consume program.py:{CONSUME_LINE}",
        f"    {below}            └──  {get}",
    ]


# The child with asyncio's C tasks, which 3.14's ``python -m asyncio ps|pstree`` read out of
# a process's memory (it sees no other kind: not snakeloop's own Task), on a snakeloop loop.
def _program_with_tasks(stdlib_futures: bool) -> str:
    return program().replace(
        "asyncio.run(main())",
        "import snakeloop\n"
        "asyncio.run(main(), loop_factory=lambda: "
        f"snakeloop.new_event_loop(stdlib_futures={stdlib_futures}))",
    )


C_TASKS_PROGRAM = _program_with_tasks(True)
OWN_TASKS_PROGRAM = _program_with_tasks(False)


def _tree(lines: list[str]) -> list[Any]:
    """A pstree drawing as nested [label, children], each node's children in one order:
    3.14's own lists a task's awaiters in the order of a set, which changes from run to run.
    """
    root: list[Any] = ["", []]
    stack = [root]
    for line in lines:
        depth = line.index("── ") // 4
        node: list[Any] = [line[line.index("── ") + 3 :], []]
        del stack[depth + 1 :]
        stack[-1][1].append(node)
        stack.append(node)

    def settle(node: list[Any]) -> list[Any]:
        return [node[0], sorted(settle(kid) for kid in node[1])]

    return settle(root)


@pytest.mark.skipif(sys.version_info < (3, 14), reason="python -m asyncio ps|pstree are 3.14's")
@pytest.mark.parametrize("command", ["ps", "pstree"])
@pytest.mark.parametrize(
    "tasks",
    [
        "c",
        # The loop's default: asyncio's C Task from 3.14.
        "default",
        pytest.param(
            "own",
            marks=pytest.mark.xfail(
                strict=True,
                raises=AssertionError,
                reason="python -m asyncio ps|pstree read C asyncio.Task objects out of the "
                "process's memory and list none of snakeloop's own Task (stdlib_futures=False)",
            ),
        ),
    ],
)
def test_the_same_output_as_python_m_asyncio(tmp_path, command, tasks):
    source = {"c": C_TASKS_PROGRAM, "default": program(), "own": OWN_TASKS_PROGRAM}[tasks]
    with child(tmp_path, source=source) as running:
        ours = running.snakeloop(command, str(running.pid))
        theirs = subprocess.run(
            [sys.executable, "-m", "asyncio", command, str(running.pid)],
            capture_output=True,
            text=True,
            timeout=30,
            env=running.env,
        )
    assert theirs.returncode == 0, theirs.stderr
    assert ours.returncode == 0, ours.stderr
    if command == "ps":
        # The same header and rows; 3.14's come in the order of its task list and of a set.
        head, rows = ours.stdout.splitlines()[:2], ours.stdout.splitlines()[2:]
        assert theirs.stdout.splitlines()[:2] == head
        assert sorted(theirs.stdout.splitlines()[2:]) == sorted(rows)
        assert len(rows) == 4
    else:
        # snakeloop's file names are relative, to the program's directory or the stdlib's.
        stdlib_dir = os.path.dirname(os.__file__)
        theirs_text = theirs.stdout.replace(f"{tmp_path}{os.sep}", "")
        theirs_text = theirs_text.replace(f"{stdlib_dir}{os.sep}", "")
        assert _tree(theirs_text.splitlines()) == _tree(ours.stdout.splitlines())
        assert len(ours.stdout.splitlines()) == 14


def test_pstree_json_and_ps_json_give_the_same_data(blocked):
    first = blocked.snakeloop("pstree", "--json", str(blocked.pid))
    second = blocked.snakeloop("ps", "--json", str(blocked.pid))
    assert first.returncode == second.returncode == 0
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert one["loops"][0]["graph"]["tasks"] == two["loops"][0]["graph"]["tasks"]


def test_the_snapshot_file_is_private_and_gone_when_the_program_ends(blocked):
    blocked.snapshot()
    directory = Path(blocked.env["XDG_RUNTIME_DIR"]) / "snakeloop"
    path = directory / f"{blocked.pid}.json"
    assert directory.stat().st_mode & 0o777 == 0o700
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in directory.iterdir()) == [path.name]  # no temporary left
    _stop(blocked.proc)
    assert blocked.proc.returncode == 0, blocked.proc.stderr
    assert not path.exists()


def test_a_busy_program_answers_with_the_task_that_runs(tmp_path):
    with child(
        tmp_path, source=program(busy="await group.create_task(busy(), name='spinner')")
    ) as busy:
        snapshot = busy.snapshot()
    spinner = _task(snapshot, "spinner")
    assert spinner["state"] == "running"
    functions = [frame["function"] for frame in spinner["frames"]]
    # The stack ends where the program is, not in the handler that read it.
    assert functions[:2] == ["busy", "spin"]
    assert functions[-1] in ("spin", "Event.is_set")
    assert not [frame for frame in spinner["frames"] if "_insight" in frame["file"]]


# ---------------------------------------------------------------- top


def test_top_once_shows_the_tasks_and_says_when_there_are_no_metrics(tmp_path):
    source = program(mode="loop.metrics = None")
    with child(tmp_path, source=source) as running:
        done = running.snakeloop("top", "--once", str(running.pid))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"snakeloop top - pid {running.pid} - Python ")
    assert "\x1b" not in done.stdout
    assert f"running in thread {running.pid} (MainThread)" in lines[2]
    assert "  no metrics: this loop does not keep them" in lines
    assert "  3 pending tasks:" in lines
    assert any(line.split()[:2] == ["worker-1", "waiting"] for line in lines)


def test_top_once_shows_the_loops_metrics(tmp_path):
    # The program's loop gets a metrics() shaped like snakeloop.metrics.LoopMetrics.
    source = program(mode="loop.metrics = LoopMetrics").replace(
        "asyncio.run(main())", STUB_METRICS + "\n\nasyncio.run(main())"
    )
    with child(tmp_path, source=source) as running:
        done = running.snakeloop("top", "--once", str(running.pid))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # First screen: over the whole uptime (busy 4 of 10 s, 1000 iterations in 10 s).
    assert "  utilization  40.0% (since start), uptime 10.0 s, mode exact" in lines
    assert "  iterations/s 100.0  callbacks/s 250.0  io events/s 7.0 (total 70, backlog 3)" in lines
    assert (
        "  tasks 3  fds 3  executor jobs 2  timers pending 5  ready 4  slow iterations 1" in lines
    )
    assert "  timer lag over 40 iterations that ran timers: max 3.1 ms, mean 0.5 ms" in lines
    assert "         <1ms " + "#" * 40 + " 30" in lines
    assert "        1-2ms " + "#" * 11 + " " * 29 + " 8" in lines
    slow = [line for line in lines if "250.0 ms" in line]
    assert slow == [
        f"    {'250.0 ms':>10}  {'worker-1':<20} {'worker':<30} program.py:11 → program.py:12"
    ]
    assert "  3 pending tasks:" in lines


def test_top_once_shows_a_real_loops_own_metrics(tmp_path):
    with child(tmp_path, source=program()) as running:
        done = running.snakeloop("top", "--once", str(running.pid))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    [header] = [line for line in lines if line.startswith("  utilization")]
    assert header.endswith(", mode True"), header
    assert any(line.startswith("  iterations/s ") for line in lines), lines
    assert any(line.startswith("  tasks 3  fds ") for line in lines), lines
    assert "  3 pending tasks:" in lines


def test_top_rates_are_over_the_interval_between_screens():
    from snakeloop._insight.top import render

    def snap(n: int) -> dict[str, Any]:
        metrics = {
            "uptime": 10.0 * n,
            "busy": 1.0 if n == 1 else 9.0,
            "iterations": 100 * n,
            "callbacks": 200 * n,
            "io_events": 0,
            "io_backlog": 0,
            "tasks_alive": 0,
            "fds": 0,
            "executor_jobs": 0,
            "timers_pending": 0,
            "ready_depth": 0,
            "slow_iterations": 0,
            "timer_lag_count": 0,
            "timer_lag_sum": 0.0,
            "timer_lag_max": 0.0,
            "timer_lag_hist": [0] * 12,
            "slow_callbacks": [],
            "mode": "exact",
        }
        loop = {"id": "0x1", "thread": None, "graph": {"tasks": []}, "metrics": metrics}
        return {"pid": 1, "python": "3", "snakeloop": "0", "time": 0.0, "loops": [loop]}

    screen = render(snap(2), snap(1)).splitlines()
    assert "  utilization  80.0% (since last screen), uptime 20.0 s, mode exact" in screen
    assert "  iterations/s 10.0  callbacks/s 20.0  io events/s 0.0 (total 0, backlog 0)" in screen
    assert "  slowest recent callbacks: none" in screen
    assert "loop 0x1, not running" in screen


# ---------------------------------------------------------------- errors


def test_a_process_without_insight_is_not_signalled_and_the_fix_is_named(tmp_path):
    with child(tmp_path, source=program(), flags=()) as plain:
        done = plain.snakeloop("ps", str(plain.pid))
        assert plain.proc.poll() is None  # SIGUSR1 would have ended it
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        f"snakeloop ps: process {plain.pid} has no handler for SIGUSR1, so it cannot report "
        "its loops (and SIGUSR1 would end it); start it with python -m snakeloop --insight "
        "or call snakeloop.insight.enable()\n"
    )


def test_a_process_that_does_not_answer_times_out_with_the_fix_named(tmp_path):
    source = program(mode="import signal; signal.signal(signal.SIGUSR1, lambda *args: None)")
    with child(tmp_path, source=source, flags=()) as deaf:
        # An old snapshot of the same PID is no answer.
        stale = Path(deaf.env["XDG_RUNTIME_DIR"]) / "snakeloop" / f"{deaf.pid}.json"
        stale.parent.mkdir(mode=0o700)
        stale.write_text(json.dumps({"pid": deaf.pid, "loops": []}))
        done = deaf.snakeloop("top", "--once", "--timeout", "0.5", str(deaf.pid))
    assert done.returncode == 1
    assert done.stderr == (
        f"snakeloop top: process {deaf.pid} did not answer SIGUSR1 within 0.5 s: it is not a "
        "snakeloop program with insight enabled, or its main thread is stuck in C code; "
        "start it with python -m snakeloop --insight or call snakeloop.insight.enable()\n"
    )


def test_no_such_process(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    done = subprocess.run(
        [sys.executable, "-m", "snakeloop", "pstree", str(proc.pid)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert done.stderr == f"snakeloop pstree: no process with PID {proc.pid}\n"


def test_pstree_refuses_a_cycle_as_asyncio_pstree_does(capsys, monkeypatch):
    from snakeloop._insight import commands

    def task(tid: str, name: str, awaiter: str, awaiter_name: str) -> dict[str, Any]:
        frame = {"file": "app.py", "line": 3, "function": f"wait_{name}", "source": ""}
        return {
            "id": tid,
            "name": name,
            "frames": [frame],
            "awaited_by": [{"task": awaiter, "name": awaiter_name, "via": None}],
        }

    tasks = [task("0x1", "a", "0x2", "b"), task("0x2", "b", "0x1", "a")]
    snapshot = {"loops": [{"thread": None, "graph": {"tasks": tasks}}]}
    monkeypatch.setattr(commands, "request_snapshot", lambda pid, timeout: snapshot)
    assert commands.main("pstree", ["1"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "ERROR: await-graph contains cycles - cannot print a tree!\n\ncycle: b → a → b\n"
    )


def test_subcommands_win_over_scripts_of_the_same_name(tmp_path):
    (tmp_path / "ps").write_text("print('the script ran')\n")
    run = {"capture_output": True, "text": True, "timeout": 30, "cwd": tmp_path}
    subcommand = subprocess.run([sys.executable, "-m", "snakeloop", "ps"], **run)
    assert subcommand.returncode == 2
    assert "python -m snakeloop ps" in subcommand.stderr
    script = subprocess.run([sys.executable, "-m", "snakeloop", "./ps"], **run)
    assert script.returncode == 0
    assert script.stdout == "the script ran\n"


# ---------------------------------------------------------------- enable() in this process


@pytest.fixture
def restored_sigusr():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR1, signal.SIGUSR2)}
    yield
    snakeloop_module().insight.disable()
    for sig, handler in before.items():
        signal.signal(sig, handler)


def test_enable_twice_then_disable_puts_back_the_original_handler(restored_sigusr):
    insight = snakeloop_module().insight
    original = signal.getsignal(signal.SIGUSR1)
    insight.enable()
    first = signal.getsignal(signal.SIGUSR1)
    assert first not in (original, signal.SIG_DFL)
    insight.enable()
    assert signal.getsignal(signal.SIGUSR1) not in (original, first)
    insight.disable()
    assert signal.getsignal(signal.SIGUSR1) == original
    insight.disable()  # no-op
    assert signal.getsignal(signal.SIGUSR1) == original


def test_enable_on_another_signal_gives_the_first_one_back(restored_sigusr):
    insight = snakeloop_module().insight
    original = signal.getsignal(signal.SIGUSR1)
    insight.enable(signal=signal.SIGUSR1)
    insight.enable(signal=signal.SIGUSR2)
    assert signal.getsignal(signal.SIGUSR1) == original
    insight.disable()
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL


def test_the_signal_reports_a_loop_running_in_another_thread(tmp_path, restored_sigusr):
    snakeloop = snakeloop_module()
    path = tmp_path / "snapshot.json"
    snakeloop.insight.enable(path=str(path))
    loop = snakeloop.new_event_loop()
    started = threading.Event()
    release = asyncio.Event()

    async def parked() -> None:
        started.set()
        await release.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(parked(),), name="loop-thread")
    thread.start()
    try:
        assert started.wait(10)
        signal.raise_signal(signal.SIGUSR1)
        data = json.loads(path.read_text())
    finally:
        loop.call_soon_threadsafe(release.set)
        thread.join(10)
        loop.close()
    (entry,) = [entry for entry in data["loops"] if entry["id"] == f"0x{id(loop):x}"]
    assert entry["thread"]["name"] == "loop-thread"
    assert entry["thread"]["native_id"] == thread.native_id
    (task,) = entry["graph"]["tasks"]
    assert task["frames"][0]["function"].endswith("parked")
    assert task["waits_on"]["owner"] == "asyncio.Event"


def test_snapshots_while_another_thread_churns_tasks(tmp_path, restored_sigusr):
    snakeloop = snakeloop_module()
    path = tmp_path / "snapshot.json"
    snakeloop.insight.enable(path=str(path))
    loop = snakeloop.new_event_loop()
    stop = threading.Event()

    async def churn() -> None:
        while not stop.is_set():
            await asyncio.gather(*(asyncio.sleep(0) for _ in range(50)))

    thread = threading.Thread(target=loop.run_until_complete, args=(churn(),))
    thread.start()
    try:
        # Snapshots taken while the other thread's loop makes and ends tasks.
        for _ in range(50):
            signal.raise_signal(signal.SIGUSR1)
            data = json.loads(path.read_text())
            assert all(entry["error"] is None for entry in data["loops"])
    finally:
        stop.set()
        thread.join(10)
        loop.close()


async def _nothing() -> None:
    pass


def test_a_snapshot_reads_a_big_task_registry_while_another_thread_adds_to_it(
    tmp_path, restored_sigusr
):
    # On 3.11 (PyPy's too) asyncio.all_tasks() copies its registry, a WeakSet, by iterating
    # it, and starts again when another thread adds or drops a task meanwhile: with enough
    # tasks registered every try outlasts a thread switch and the snapshot never ends.  On
    # PyPy a finished task stays registered until a major collection, so any busy program
    # gets there (the test above, in some runs); here finished tasks are held, on every Python.
    snakeloop = snakeloop_module()
    path = tmp_path / "snapshot.json"
    snakeloop.insight.enable(path=str(path))
    other = snakeloop.new_event_loop()
    try:
        held = [other.create_task(_nothing()) for _ in range(100_000)]
        other.run_until_complete(asyncio.gather(*held))
    finally:
        other.close()
    loop = snakeloop.new_event_loop()
    stop = threading.Event()

    async def churn() -> None:
        while not stop.is_set():
            await asyncio.gather(*(asyncio.sleep(0) for _ in range(50)))

    main = loop.create_task(churn(), name="churn")
    thread = threading.Thread(target=loop.run_until_complete, args=(main,))
    thread.start()
    try:
        for _ in range(10):
            signal.raise_signal(signal.SIGUSR1)
            data = json.loads(path.read_text())
            (entry,) = [entry for entry in data["loops"] if entry["id"] == f"0x{id(loop):x}"]
            assert entry["error"] is None
            assert "churn" in {task["name"] for task in entry["graph"]["tasks"]}
            assert entry["metrics"]["tasks_alive"] >= 1
    finally:
        stop.set()
        thread.join(10)
        loop.close()
    assert all(task.done() for task in held)
