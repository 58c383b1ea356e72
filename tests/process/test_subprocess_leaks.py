"""R-FD-3 and R-FD-4: no fd, zombie or fd inheritance leaks from subprocesses."""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import subprocess
import sys
import time

import pytest
from _loopkit import LIST_FDS_SCRIPT, fd_set, run, zombies

pytestmark = pytest.mark.reliability

PY = sys.executable
# The cat binary starts far faster than an interpreter; either will do.
CAT = (
    [shutil.which("cat")]
    if shutil.which("cat")
    else [PY, "-c", "import sys, shutil; shutil.copyfileobj(sys.stdin.buffer, sys.stdout.buffer)"]
)
SLEEPER = [PY, "-c", "import sys, time; sys.stdout.write('up'); sys.stdout.flush(); time.sleep(60)"]


async def _round_trips(count: int, parallel: int, kills: int):
    sem = asyncio.Semaphore(parallel)
    payload = b"z" * 100_000

    async def cat():
        async with sem:
            proc = await asyncio.create_subprocess_exec(
                *CAT, stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            out, _ = await proc.communicate(payload)
            assert out == payload and proc.returncode == 0

    async def kill_while_communicating():
        proc = await asyncio.create_subprocess_exec(
            *SLEEPER, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        await proc.stdout.readexactly(2)  # it runs
        comm = asyncio.ensure_future(proc.communicate(b"ignored"))
        await asyncio.sleep(0)
        proc.kill()
        out, _ = await comm
        assert proc.returncode == -9

    await asyncio.gather(*(cat() for _ in range(count)))
    await asyncio.gather(*(kill_while_communicating() for _ in range(kills)))


def _check_no_leaks(loop, count, parallel, kills, budget):
    loop.run_until_complete(asyncio.sleep(0))  # the loop's own fds exist now
    before = fd_set()
    start = time.monotonic()
    run(loop, _round_trips(count, parallel, kills), budget)
    elapsed = time.monotonic() - start
    assert zombies() == []
    assert fd_set() == before
    assert elapsed <= budget


def test_r_fd_3_fds_and_zombies(any_loop):
    _check_no_leaks(any_loop, count=60, parallel=16, kills=4, budget=20)


@pytest.mark.stress
def test_r_fd_3_fds_and_zombies_full(any_loop):
    # 220 subprocesses: 200 cat round trips 16 at a time, 20 killed mid-way.
    _check_no_leaks(any_loop, count=200, parallel=16, kills=20, budget=20)


def test_r_fd_3_failed_spawns_leak_nothing(any_loop):
    before = fd_set()

    async def main():
        for _ in range(20):
            with pytest.raises(FileNotFoundError):
                await asyncio.create_subprocess_exec(
                    "/nonexistent/binary",
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            with pytest.raises(PermissionError):
                await asyncio.create_subprocess_exec("/", stdout=subprocess.PIPE)

    any_loop.run_until_complete(main())
    assert fd_set() - before == set()
    assert zombies() == []


def test_r_fd_4_child_sees_only_std_fds_and_pass_fds(any_loop):
    loop = any_loop
    extra_r, extra_w = os.pipe()
    os.set_inheritable(extra_r, True)  # inheritable, but not passed: stays home

    async def main():
        # Give the loop every internal fd it can have: a signal handler, a
        # running subprocess (pidfd), a pipe transport.
        loop.add_signal_handler(__import__("signal").SIGUSR1, int)
        try:
            keeper = await asyncio.create_subprocess_exec(*SLEEPER, stdout=subprocess.PIPE)
            await keeper.stdout.readexactly(2)
            proc = await asyncio.create_subprocess_exec(
                PY, "-c", LIST_FDS_SCRIPT, stdout=subprocess.PIPE, pass_fds=(extra_w,)
            )
            out, _ = await proc.communicate()
            keeper.kill()
            await keeper.communicate()
            return eval(out)
        finally:
            loop.remove_signal_handler(__import__("signal").SIGUSR1)

    try:
        assert run(loop, main(), 20) == sorted({0, 1, 2, extra_w})
    finally:
        os.close(extra_r)
        os.close(extra_w)
    # The parent's standard fds are not close-on-exec.
    for fd in (0, 1, 2):
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFD)
        except OSError:
            continue
        assert not flags & fcntl.FD_CLOEXEC
