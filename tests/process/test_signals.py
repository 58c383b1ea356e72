"""R-SIG-1..6: Unix signals on snakeloop and on the stdlib loop.

The figures come from the reliability plan (section 2.11 and the Tier R
signal rows).  The stdlib loop is allowed to lose signals under a
``call_soon_threadsafe`` flood (R-SIG-3, python/cpython#74224).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from _loopkit import snakeloop_module, stdlib_xfail

from ._eintr_storm import HANG_LIMIT, STALL_LIMIT

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.skipif(sys.platform == "win32", reason="Unix signals"),
]

STDLIB_LOSES_SIGNALS = (
    "python/cpython#74224: the stdlib loop shares one self-pipe between signal bytes and "
    "call_soon_threadsafe wakeups, and drops signal bytes when it is full"
)


def _percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _src_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(snakeloop_module().__file__)))


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_src_dir(), env.get("PYTHONPATH")]))
    return env


class SignalProbe:
    """Sends signals from a helper thread, one at a time, and times them."""

    def __init__(self, loop, signum):
        self.loop = loop
        self.signum = signum
        self.sent_at = 0.0
        self.latencies = []
        self.waiter = None
        loop.add_signal_handler(signum, self._handled)

    def _handled(self):
        self.latencies.append(time.perf_counter() - self.sent_at)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _send_from_thread(self):
        self.sent_at = time.perf_counter()
        os.kill(os.getpid(), self.signum)

    async def run(self, count, budget):
        missed = 0
        for _ in range(count):
            self.waiter = self.loop.create_future()
            thread = threading.Thread(target=self._send_from_thread)
            thread.start()
            try:
                await asyncio.wait_for(self.waiter, budget)
            except TimeoutError:
                missed += 1
            thread.join()
        return missed

    def close(self):
        self.loop.remove_signal_handler(self.signum)


# -- R-SIG-1: latency on an idle loop --------------------------------------


@pytest.mark.slow
def test_r_sig_1_idle_latency(any_loop):
    probe = SignalProbe(any_loop, signal.SIGUSR1)
    try:
        missed = any_loop.run_until_complete(probe.run(200, budget=0.5))
    finally:
        probe.close()
    assert missed == 0
    assert _percentile(probe.latencies, 0.99) <= 0.010, sorted(probe.latencies)[-5:]


# -- R-SIG-2: an EINTR storm during a TCP echo -------------------------------

STDLIB_WAKEUP_DEADLOCK = (
    "CPython's C signal handler reports a full wakeup fd through _PyEval_AddPendingCall, "
    "which takes the pending-calls lock and is not async-signal-safe (python/cpython#74888): "
    "a SIGALRM that lands while the main thread holds that lock, running pending calls, "
    "deadlocks the process. asyncio asks for those reports (warn_on_full_buffer) and its "
    "socketpair fills after a few hundred signal bytes; snakeloop's signal pipe holds 1 MiB"
)

# The child's own limits, and time for Python to start and for faulthandler to act.
CHILD_LIMIT = STALL_LIMIT + HANG_LIMIT + 30
_STORM_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_eintr_storm.py")
_FAULTHANDLER_TIMEOUT = re.compile(r"^Timeout \(\d+:\d\d:\d\d(\.\d+)?\)!$", re.M)
_WAKEUP_FD_REPORT = "Exception ignored when trying to write to the signal wakeup fd:"


class StormChildHung(Exception):
    """The storm's loop stopped running its timers; faulthandler printed the child's stacks."""


def _storm_in_child(kind: str, connections: int, size: int) -> dict:
    # A child process: the storm needs SIGALRM, which the per-test time limit
    # uses here, and the stdlib loop's process can deadlock (see above).
    env = _child_env()
    tests_dir = os.path.dirname(os.path.dirname(_STORM_SCRIPT))
    env["PYTHONPATH"] = os.pathsep.join([tests_dir, env["PYTHONPATH"]])
    cmd = [sys.executable, _STORM_SCRIPT, kind, str(connections), str(size)]
    try:
        proc = subprocess.run(cmd, capture_output=True, env=env, timeout=CHILD_LIMIT)
    except subprocess.TimeoutExpired as exc:
        raise StormChildHung(
            f"the child still ran after {exc.timeout:g} s, past faulthandler's limit:\n"
            + _storm_stderr(exc.stderr)
        ) from None
    stderr = _storm_stderr(proc.stderr)
    if proc.returncode != 0 and _FAULTHANDLER_TIMEOUT.search(stderr):
        raise StormChildHung(f"the loop stopped running its timers; faulthandler:\n{stderr}")
    assert proc.returncode == 0, stderr
    return json.loads(proc.stdout)


def _storm_stderr(data: bytes | None) -> str:
    lines = (data or b"").decode(errors="replace").splitlines()
    return "\n".join(line for line in lines if line != _WAKEUP_FD_REPORT)[-8000:]


# Not strict: the deadlock needs a signal to land inside a short window, and most stdlib runs
# pass (seen as XPASS); only a hang is the expected failure.
@pytest.mark.slow
@stdlib_xfail(strict=False, raises=StormChildHung, reason=STDLIB_WAKEUP_DEADLOCK)
def test_r_sig_2_eintr_storm(loop_kind):
    # SIGALRM every 200 us while 50 x 1 MiB go through a TCP echo.
    result = _storm_in_child(loop_kind, connections=50, size=1 << 20)
    assert result["mismatched"] == 0
    assert result["signals"] > 0  # signals coalesce, but some arrive
    assert result["loop_errors"] == []
    assert result["fds_leaked"] == 0


# -- R-SIG-3: no signal lost under a call_soon_threadsafe flood ---------------


# Not strict: whether the stdlib's self-pipe fills depends on how the threads and the loop
# are scheduled; some stdlib runs lose no signal (seen as XPASS).
@pytest.mark.slow
@stdlib_xfail(strict=False, reason=STDLIB_LOSES_SIGNALS)
def test_r_sig_3_no_loss_under_threadsafe_flood(any_loop):
    missed, starved, latencies, dropped = _r_sig_3(any_loop)
    assert not starved, "the loop could not keep up with four call_soon_threadsafe threads"
    assert missed == 0, f"{missed} of 200 signals lost; {dropped} wakeup bytes dropped"


@pytest.mark.stress
@stdlib_xfail(strict=False, reason=STDLIB_LOSES_SIGNALS)
def test_r_sig_3_latency_under_threadsafe_flood(any_loop):
    # The plan's latency figure, p99 <= 50 ms, measured in real time: it
    # depends on how busy the machine is, so it is opt-in (-m stress) rather
    # than part of every run.  benchmarks/ is where speed is tracked.
    missed, starved, latencies, dropped = _r_sig_3(any_loop)
    assert not starved and missed == 0
    assert _percentile(latencies, 0.99) <= 0.050


@contextlib.contextmanager
def _count_unraisable():
    """Collect "Exception ignored" reports (a full signal wakeup fd) instead of failing."""
    reports = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: reports.append(str(unraisable.exc_value))
    try:
        yield reports
    finally:
        sys.unraisablehook = old_hook


# At most this many flood callbacks wait to run at once.  Unbounded, four
# threads calling in a loop produce about as fast as the loop runs their calls
# (it holds the GIL a fifth of the time), so whether the loop kept up was a
# coin toss that a seeded run's deferrals on a busy machine lost (CI, 3.12,
# 1 run in 3 of one seed; its replay passed).  Thousands queued still overflow
# a socketpair that gets a byte per call (278 one-byte sends fill one on
# Linux), which is how the stdlib loop loses signals here.
_FLOOD_BACKLOG = 4000


def _r_sig_3(loop):
    stop = threading.Event()
    backlog = threading.Semaphore(_FLOOD_BACKLOG)

    def flood():
        done = backlog.release
        while not stop.is_set():
            if not backlog.acquire(timeout=0.1):
                continue
            try:
                loop.call_soon_threadsafe(done)
            except RuntimeError:
                return

    probe = SignalProbe(loop, signal.SIGUSR1)
    threads = [threading.Thread(target=flood) for _ in range(4)]
    # A loop that cannot keep up with the flood never reaches its timers:
    # stopping the flood after a deadline turns that into a failure, not a hang.
    # The probe takes a few seconds alone; CI runs two test sessions at once on
    # two cores, and 20 s was seen too short there with other work loading them.
    watchdog = threading.Timer(60.0, stop.set)
    # The stdlib's C handler reports each dropped wakeup byte as unraisable.
    with contextlib.ExitStack() as stack:
        dropped_bytes = stack.enter_context(_count_unraisable())
        missed, starved = _flood_probe(loop, probe, threads, watchdog, stop)
    return missed, starved, probe.latencies, len(dropped_bytes)


def _flood_probe(loop, probe, threads, watchdog, stop):
    try:
        watchdog.start()
        for t in threads:
            t.start()
        # A signal is lost when its handler never runs: on snakeloop 5 s tells that
        # from a late one.  Under the flood, with a seeded run's I/O delays and
        # another test session on the second core, a handler was seen to take over
        # 0.5 s (an iteration's batch of flood callbacks alone took 0.25 s).  The
        # stdlib loop, which does lose signals here, keeps 0.5 s so that its run
        # stays short.
        budget = 5.0 if isinstance(loop, snakeloop_module().Loop) else 0.5
        missed = loop.run_until_complete(probe.run(200, budget=budget))
        starved = stop.is_set()
    finally:
        watchdog.cancel()
        watchdog.join()
        stop.set()
        for t in threads:
            t.join()
        probe.close()
        # Let the queued flood callbacks run before the loop is closed.
        loop.run_until_complete(asyncio.sleep(0))
    return missed, starved


# -- R-SIG-4: EINTR injected into epoll_wait ---------------------------------

_STRACE_CHILD = textwrap.dedent(
    """
    import asyncio, hashlib, os, sys
    kind = sys.argv[1]
    if kind == "snakeloop":
        import snakeloop
        loop = snakeloop.new_event_loop()
    else:
        loop = asyncio.SelectorEventLoop()

    async def main():
        r, w = os.pipe()
        data = bytes(range(256)) * 4096 * 8
        got = bytearray()
        done = loop.create_future()

        class Reader(asyncio.Protocol):
            def data_received(self, chunk):
                got.extend(chunk)
            def connection_lost(self, exc):
                done.set_result(None)

        await loop.connect_read_pipe(Reader, open(r, "rb", 0))
        wt, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, open(w, "wb", 0))
        for i in range(0, len(data), 100_000):
            wt.write(data[i:i + 100_000])
            await asyncio.sleep(0.001)
        wt.close()
        await done
        return hashlib.sha256(data).hexdigest() == hashlib.sha256(got).hexdigest()

    ok = loop.run_until_complete(main())
    loop.close()
    print("OK" if ok else "MISMATCH")
    """
)


def _strace_works() -> bool:
    if shutil.which("strace") is None:
        return False
    probe = subprocess.run(
        ["strace", "-f", "-qq", "-o", os.devnull, "true"], capture_output=True, timeout=20
    )
    return probe.returncode == 0


@pytest.mark.slow
def test_r_sig_4_injected_eintr(loop_kind, tmp_path):
    if not _strace_works():
        pytest.skip("strace is missing or ptrace is not allowed")
    trace = tmp_path / "trace.out"
    # The real interpreter, not a shim, so the trace holds only this program.
    cmd = [
        "strace", "-f", "-qq", "-o", str(trace),
        "-e", "trace=epoll_wait,epoll_pwait",
        "-e", "inject=epoll_wait,epoll_pwait:error=EINTR:when=2+2",
        sys.executable, "-c", _STRACE_CHILD, loop_kind,
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, env=_child_env(), timeout=120)
    assert result.stdout.strip() == b"OK", result.stderr.decode()[-2000:]
    assert b"(INJECTED)" in trace.read_bytes()


# -- R-SIG-5: the API's checks ------------------------------------------------


def _raised(fn, *args):
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - compared below
        return type(exc), str(exc)
    return None


async def _coro_callback():
    pass


def test_r_sig_5_invalid_arguments(any_loop):
    loop = any_loop
    assert _raised(loop.add_signal_handler, signal.SIGKILL, int) == (
        RuntimeError,
        f"sig {int(signal.SIGKILL)} cannot be caught",
    )
    assert _raised(loop.add_signal_handler, signal.SIGSTOP, int) == (
        RuntimeError,
        f"sig {int(signal.SIGSTOP)} cannot be caught",
    )
    assert _raised(loop.add_signal_handler, 0, int) == (ValueError, "invalid signal number 0")
    assert _raised(loop.add_signal_handler, 65, int) == (ValueError, "invalid signal number 65")
    assert _raised(loop.add_signal_handler, "x", int)[0] is TypeError
    assert _raised(loop.add_signal_handler, signal.SIGUSR1, _coro_callback) == (
        TypeError,
        "coroutines cannot be used with add_signal_handler()",
    )
    assert _raised(loop.remove_signal_handler, 0) == (ValueError, "invalid signal number 0")
    assert loop.remove_signal_handler(signal.SIGUSR2) is False
    # A failed add leaves no handler behind.
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_r_sig_5_main_thread_only(any_loop):
    box = {}

    def other_thread():
        box["add"] = _raised(any_loop.add_signal_handler, signal.SIGUSR1, int)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert box["add"] is not None and box["add"][0] in (ValueError, RuntimeError)
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_r_sig_5_remove_restores_defaults(any_loop):
    loop = any_loop
    loop.add_signal_handler(signal.SIGINT, int)
    loop.add_signal_handler(signal.SIGUSR1, int)
    assert signal.getsignal(signal.SIGINT) not in (signal.default_int_handler, signal.SIG_DFL)
    assert loop.remove_signal_handler(signal.SIGINT) is True
    assert loop.remove_signal_handler(signal.SIGUSR1) is True
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_r_sig_5_close_removes_handlers(any_loop):
    loop = any_loop
    loop.add_signal_handler(signal.SIGUSR1, int)
    loop.add_signal_handler(signal.SIGINT, int)
    loop.close()
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(RuntimeError):
        loop.add_signal_handler(signal.SIGUSR1, int)


def test_r_sig_5_wakeup_fd_unchanged_without_handlers(any_loop):
    a, b = os.pipe()
    os.set_blocking(a, False)
    old = signal.set_wakeup_fd(a)
    try:
        any_loop.run_until_complete(asyncio.sleep(0))
        any_loop.close()
        assert signal.set_wakeup_fd(a) == a
    finally:
        signal.set_wakeup_fd(old)
        os.close(a)
        os.close(b)


def test_r_sig_5_wakeup_fd_after_handlers_and_close(any_loop, loop_kind):
    # snakeloop puts back the wakeup fd it found (issue 4); asyncio resets it
    # to -1 when its last handler goes.
    a, b = os.pipe()
    os.set_blocking(a, False)
    old = signal.set_wakeup_fd(a)
    try:
        any_loop.add_signal_handler(signal.SIGUSR1, int)
        any_loop.close()
        expected = a if loop_kind == "snakeloop" else -1
        assert signal.set_wakeup_fd(-1) == expected
    finally:
        signal.set_wakeup_fd(old)
        os.close(a)
        os.close(b)


def test_r_sig_5_handler_args_and_replacement(any_loop):
    loop = any_loop
    got = []
    loop.add_signal_handler(signal.SIGUSR1, got.append, "first")
    loop.add_signal_handler(signal.SIGUSR1, got.append, "second")  # replaces

    async def main():
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(400):
            if got:
                break
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.01)

    try:
        loop.run_until_complete(main())
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
    assert got == ["second"]


# -- R-SIG-6: SIGINT at random moments ends the program cleanly ------------

_SIGINT_CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    kind, mode = sys.argv[1], sys.argv[2]

    def busy():
        # Keep the loop busy with a steady stream of short callbacks.
        loop = asyncio.get_running_loop()
        t = time.perf_counter()
        while time.perf_counter() - t < 0.0005:
            pass
        loop.call_soon(busy)

    async def main():
        loop = asyncio.get_running_loop()
        if mode == "busy":
            loop.call_soon(busy)
        elif mode == "sleep":
            loop.call_soon(time.sleep, 0.5)
        print("ready", flush=True)
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            print("cancelled", flush=True)
            raise

    if kind == "snakeloop":
        import snakeloop
        snakeloop.run(main())
    else:
        asyncio.run(main())
    """
)


def _sigint_run(kind: str, mode: str, delay: float):
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIGINT_CHILD, kind, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_child_env(),
        # A child of a background job may inherit SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(delay)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out.decode(), err.decode(), elapsed


def _check_sigint_runs(kind: str, runs_per_mode: int):
    rng = random.Random(6)
    for mode in ("idle", "busy", "sleep"):
        for _ in range(runs_per_mode):
            delay = rng.uniform(0, 0.05)
            rc, out, err, elapsed = _sigint_run(kind, mode, delay)
            context = f"{kind}/{mode} delay={delay:.3f}: rc={rc} out={out!r}\n{err}"
            assert rc != 0, context
            assert elapsed <= 2.0, context
            # asyncio's runner raises KeyboardInterrupt while handling the
            # main task's CancelledError: that chain, and nothing else.
            assert err.rstrip().endswith("KeyboardInterrupt"), context
            raised = re.findall(r"^(\w+(?:\.\w+)*(?:Error|Exception|Interrupt))\b", err, re.M)
            assert set(raised) <= {"asyncio.exceptions.CancelledError", "KeyboardInterrupt"}
            assert "Exception ignored" not in err and "Task was destroyed" not in err, context
            assert "cancelled" in out, context  # the runner cancelled main()


@pytest.mark.slow
def test_r_sig_6_sigint(loop_kind):
    _check_sigint_runs(loop_kind, runs_per_mode=3)


@pytest.mark.stress
def test_r_sig_6_sigint_full(loop_kind):
    _check_sigint_runs(loop_kind, runs_per_mode=17)  # 51 runs per loop
