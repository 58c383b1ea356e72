"""anyio's subprocesses, worker threads and worker processes on the asyncio backend.

Each test runs under ``anyio.run()`` on snakeloop and on the stdlib loop,
plainly and under blockbuster (the ``anyio_run`` fixture of this directory's
conftest).  ``anyio.run_process``/``open_process`` sit on the loop's
``subprocess_exec``/``subprocess_shell`` and its pipe transports;
``to_thread`` runs worker threads that call back with
``call_soon_threadsafe``; ``to_process`` keeps a pool of Python worker
processes that anyio kills and reaps when ``anyio.run()`` ends, so a test
checks that they are gone afterwards.
"""

from __future__ import annotations

import asyncio
import math
import operator
import os
import random
import signal
import subprocess
import threading
import time

import anyio
import pytest
from _loopkit import zombies
from anyio import from_thread, to_process, to_thread
from anyio.lowlevel import checkpoint
from anyio.streams.buffered import BufferedByteReceiveStream


def payload(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


async def read_all(stream) -> bytes:
    chunks = []
    async for chunk in stream:  # until EndOfStream
        chunks.append(chunk)
    return b"".join(chunks)


# -- subprocesses ---------------------------------------------------------------------


def test_run_process(anyio_run, tmp_path):
    async def main():
        result = await anyio.run_process(
            ["sh", "-c", "echo out; echo err >&2; exit 3"], check=False
        )
        assert (result.returncode, result.stdout, result.stderr) == (3, b"out\n", b"err\n")

        result = await anyio.run_process("echo $((6 * 7)) | tr 4 x")  # a shell command line
        assert (result.returncode, result.stdout) == (0, b"x2\n")

        data = payload(1_000_003)
        result = await anyio.run_process(["cat"], input=data)
        assert result.stdout == data and result.stderr == b""

        result = await anyio.run_process(
            ["sh", "-c", 'echo "$SNAKE"; pwd'],
            cwd=tmp_path,
            env={"SNAKE": "loop", "PATH": os.environ["PATH"]},
        )
        assert result.stdout == f"loop\n{tmp_path}\n".encode()

        with pytest.raises(subprocess.CalledProcessError) as caught:
            await anyio.run_process(["sh", "-c", "echo oops >&2; exit 5"])
        assert (caught.value.returncode, caught.value.stderr) == (5, b"oops\n")

        with pytest.raises(FileNotFoundError):
            await anyio.run_process([str(tmp_path / "no-such-command")])

    anyio_run(main)


def test_open_process(anyio_run):
    earlier = set(zombies())  # left by an earlier test: not this one's business

    async def main():
        # stdin and stdout at the same time: cat echoes what it is fed.
        async with await anyio.open_process(["cat"]) as process:
            data = payload(700_001, seed=1)
            received = bytearray()

            async def feed():
                for start in range(0, len(data), 100_000):
                    await process.stdin.send(data[start : start + 100_000])
                await process.stdin.aclose()

            async with anyio.create_task_group() as tg:
                tg.start_soon(feed)
                received += await read_all(process.stdout)
            assert received == data
            assert await process.wait() == 0
            assert process.returncode == 0

        # stderr, and an exit status.
        async with await anyio.open_process(["sh", "-c", "cat >&2; exit 7"]) as process:
            await process.stdin.send(b"to stderr\n")
            await process.stdin.aclose()
            assert await read_all(process.stderr) == b"to stderr\n"
            assert await read_all(process.stdout) == b""
            assert await process.wait() == 7

        # Line-wise conversation with a shell.
        async with await anyio.open_process(["sh"]) as process:
            lines = BufferedByteReceiveStream(process.stdout)
            for n in range(3):
                await process.stdin.send(f"echo line{n}\n".encode())
                assert await lines.receive_until(b"\n", 100) == f"line{n}".encode()
            await process.stdin.send(b"exit 4\n")
            assert await process.wait() == 4

        # A process that does not end by itself.
        async with await anyio.open_process(["sleep", "30"]) as process:
            with anyio.move_on_after(0.05) as scope:
                await process.wait()
            assert scope.cancelled_caught and process.returncode is None
            process.terminate()
            assert await process.wait() == -signal.SIGTERM

        with pytest.raises(FileNotFoundError):
            await anyio.open_process(["/no/such/command"])

    anyio_run(main)
    assert set(zombies()) <= earlier


# -- worker threads -------------------------------------------------------------------


def test_to_thread_run_sync(anyio_run):
    async def main():
        loop_thread = threading.get_ident()
        assert await to_thread.run_sync(threading.get_ident) != loop_thread
        assert await to_thread.run_sync(operator.add, 2, 3) == 5
        with pytest.raises(ZeroDivisionError):
            await to_thread.run_sync(operator.truediv, 1, 0)

        # A worker thread calls back into the loop.
        async def double(x):
            await checkpoint()
            return 2 * x

        def in_thread():
            return from_thread.run_sync(threading.get_ident), from_thread.run(double, 21)

        assert await to_thread.run_sync(in_thread) == (loop_thread, 42)

        # A limiter bounds how many threads run at once.
        limiter = anyio.CapacityLimiter(2)
        lock = threading.Lock()
        running = [0, 0]  # now, peak

        def busy():
            with lock:
                running[0] += 1
                running[1] = max(running[1], running[0])
            time.sleep(0.01)  # in the worker thread, not the loop's
            with lock:
                running[0] -= 1

        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(lambda: to_thread.run_sync(busy, limiter=limiter))
        assert running == [0, 2]

        # Cancelling the caller abandons the thread only when it is allowed to.
        release = threading.Event()
        with anyio.move_on_after(0.02) as scope:
            await to_thread.run_sync(release.wait, abandon_on_cancel=True)
        assert scope.cancelled_caught
        release.set()  # the abandoned thread finishes by itself

        def slow():
            time.sleep(0.05)
            return "done"

        start = anyio.current_time()
        outcome = []
        with anyio.move_on_after(0.01):
            outcome.append(await to_thread.run_sync(slow))  # shielded: it completes
            await checkpoint()
            outcome.append("after")
        assert outcome == ["done"]
        assert anyio.current_time() - start >= 0.05

    anyio_run(main)


def test_worker_threads_outlive_a_nested_task_under_run_until_complete(any_loop):
    """Without ``anyio.run()``, anyio's root task is that of ``run_until_complete()``.

    anyio recognises it by asyncio's ``_run_until_complete_cb`` among its done
    callbacks, and stops its idle worker threads when that task ends.  Taking
    a shorter-lived task for the root (the nested one below) would stop the
    worker when the nested task ends, and the next call would get a new thread.
    """

    async def main():
        async with asyncio.timeout(20):
            nested = asyncio.get_running_loop().create_task(
                to_thread.run_sync(threading.current_thread)
            )
            first = await nested
            await anyio.sleep(0.01)  # the nested task's done callbacks have run
            second = await to_thread.run_sync(threading.current_thread)
        return first, second

    first, second = any_loop.run_until_complete(main())
    assert first is second  # the idle worker thread was reused
    assert first is not threading.current_thread()


# -- worker processes -----------------------------------------------------------------


def test_to_process_run_sync(anyio_run):
    earlier = set(zombies())  # left by an earlier test: not this one's business
    workers = []

    async def main():
        pid = await to_process.run_sync(os.getpid)
        assert pid != os.getpid()
        workers.append(pid)
        assert await to_process.run_sync(os.getpid) == pid  # the idle worker is reused
        assert await to_process.run_sync(math.factorial, 25) == math.factorial(25)
        with pytest.raises(ZeroDivisionError):
            await to_process.run_sync(operator.truediv, 1, 0)

        # A cancellable call that is cancelled kills its worker; the next call starts one.
        with anyio.move_on_after(0.2) as scope:
            # (signal.pause: blockbuster replaces time.sleep, and its wrapper cannot be pickled)
            await to_process.run_sync(signal.pause, cancellable=True)
        assert scope.cancelled_caught
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed and reaped already
        second = await to_process.run_sync(os.getpid)
        assert second != pid
        workers.append(second)

    anyio_run(main)
    # anyio.run() shut the pool down: the worker is killed and reaped.
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert set(zombies()) <= earlier
