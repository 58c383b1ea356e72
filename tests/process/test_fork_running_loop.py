"""R-FORK-1 and R-FORK-2: fork() next to a running loop, on both loops."""

from __future__ import annotations

import asyncio
import hashlib
import json
import multiprocessing
import os
import random
import signal
import sys
import threading
import time

import pytest
from _loopkit import (
    CHILD_GET_EVENT_LOOP,
    PY312,
    child_get_event_loop,
    echo_back,
    fork_call,
    new_loop,
    quiet_fork,
    reap,
    run,
    stdlib_xfail,
)

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()"),
]

STDLIB_SHARES_EPOLL = (
    "the stdlib selector loop keeps using the epoll instance it shares with a forked child"
)


def read_all_blocking(fd) -> object:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return json.loads(b"".join(chunks) or b"null")


async def read_all(loop, fd) -> object:
    return await loop.run_in_executor(None, read_all_blocking, fd)


def child_fresh_loop(kind: str) -> float:
    start = time.monotonic()
    loop = new_loop(kind)
    try:

        async def main():
            r, w = os.pipe()
            got = loop.create_future()
            loop.add_reader(r, lambda: got.done() or got.set_result(os.read(r, 10)))
            os.write(w, b"ok")
            data = await got
            loop.remove_reader(r)
            os.close(r)
            os.close(w)
            return data

        assert loop.run_until_complete(main()) == b"ok"
    finally:
        loop.close()
    return time.monotonic() - start


async def echo_round(size: int, connections: int):
    server = await asyncio.start_server(echo_back, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    async def client(seed):
        payload = random.Random(seed).randbytes(size)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(payload)
        writer.write_eof()
        received = await reader.read()
        writer.close()
        await writer.wait_closed()
        return hashlib.sha256(payload).digest() == hashlib.sha256(received).digest()

    try:
        return await asyncio.gather(*(client(i) for i in range(connections)))
    finally:
        server.close()
        await server.wait_closed()


# -- R-FORK-1 ---------------------------------------------------------------------


def test_r_fork_1_fork_in_coroutine_while_echoing(any_loop, loop_kind):
    loop = any_loop

    async def forker():
        results = []
        for _ in range(20):
            pid, rfd = fork_call(lambda: child_fresh_loop(loop_kind))
            results.append((await read_all(loop, rfd), reap(pid)))
            await asyncio.sleep(0)
        return results

    async def main():
        return await asyncio.gather(forker(), echo_round(1 << 20, 10))

    forks, echoes = run(loop, main(), 60)
    assert all(rc == 0 and isinstance(t, float) and t <= 1.0 for t, rc in forks), forks
    assert echoes == [True] * 10


def _mp_child_sigterm(started, handled_w):
    def on_term(*args):
        os.write(handled_w, b"child")
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    started.set()
    while True:
        time.sleep(0.1)


@stdlib_xfail(
    not PY312,
    strict=True,
    raises=AssertionError,
    reason="asyncio resets the signal wakeup fd in a forked child only from 3.12",
)
def test_r_fork_1_child_sigterm_not_seen_by_parent(any_loop):
    loop = any_loop
    parent_calls = []
    loop.add_signal_handler(signal.SIGTERM, parent_calls.append, "parent")
    ctx = multiprocessing.get_context("fork")
    r, w = os.pipe()

    async def main():
        started = ctx.Event()
        with quiet_fork():
            proc = ctx.Process(target=_mp_child_sigterm, args=(started, w))
            proc.start()
        await loop.run_in_executor(None, started.wait, 10)
        os.kill(proc.pid, signal.SIGTERM)
        await loop.run_in_executor(None, proc.join, 10)
        await asyncio.sleep(0.05)
        return os.read(r, 10)

    try:
        assert run(loop, main(), 30) == b"child"
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        os.close(r)
        os.close(w)
    assert parent_calls == []


def _mp_child_runs_subprocess(kind, conn):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "print(6 * 7)", stdout=asyncio.subprocess.PIPE
        )
        out, _ = await proc.communicate()
        return int(out)

    try:
        loop = new_loop(kind)
        try:
            conn.send(loop.run_until_complete(main()))
        finally:
            loop.close()
    except BaseException as exc:  # noqa: BLE001
        conn.send(repr(exc))


def test_r_fork_1_multiprocessing_child_spawns_subprocess(any_loop, loop_kind):
    loop = any_loop
    ctx = multiprocessing.get_context("fork")

    async def main():
        parent_conn, child_conn = ctx.Pipe()
        with quiet_fork():
            proc = ctx.Process(target=_mp_child_runs_subprocess, args=(loop_kind, child_conn))
            proc.start()
        child_conn.close()
        result = await loop.run_in_executor(None, parent_conn.recv)
        await loop.run_in_executor(None, proc.join, 10)
        parent_conn.close()
        return result, proc.exitcode

    assert run(loop, main(), 30) == (42, 0)


def test_r_fork_1_fork_from_thread_then_signal_handler(any_loop, loop_kind):
    loop = any_loop

    def child():
        fresh = new_loop(loop_kind)
        try:
            got = []
            fresh.add_signal_handler(signal.SIGUSR1, got.append, 1)

            async def main():
                os.kill(os.getpid(), signal.SIGUSR1)
                for _ in range(200):
                    if got:
                        break
                    await asyncio.sleep(0.005)

            fresh.run_until_complete(main())
            return got
        finally:
            fresh.close()

    box = {}

    async def main():
        t = threading.Thread(
            target=lambda: box.update(zip(("pid", "fd"), fork_call(child), strict=True))
        )
        t.start()
        await loop.run_in_executor(None, t.join)
        return await read_all(loop, box["fd"]), reap(box["pid"])

    assert run(loop, main(), 30) == ([1], 0)


# The time limit interrupts a blocking read from a hung child; SIGALRM is the limit's own.
@pytest.mark.timeout(30)
def test_r_fork_1_server_start_stop_in_threads_and_forks(loop_kind):
    def one_server_cycle() -> bool:
        loop = new_loop(loop_kind)
        try:
            return run(loop, echo_round(1000, 2), 5) == [True] * 2
        finally:
            loop.close()

    for _ in range(10):
        box = []
        t = threading.Thread(target=lambda out=box: out.append(one_server_cycle()))
        t.start()
        t.join()
        assert box == [True]
        pid, rfd = fork_call(one_server_cycle)
        assert read_all_blocking(rfd) is True
        assert reap(pid) == 0


# -- R-FORK-2 ---------------------------------------------------------------------


@stdlib_xfail(
    not PY312,
    strict=True,
    raises=AssertionError,
    reason="3.11's get_event_loop() returns the parent's stdlib loop in a forked child",
)
def test_r_fork_2_get_event_loop_in_child_is_fresh(any_loop):
    loop = any_loop
    asyncio.set_event_loop(loop)

    def child():
        return child_get_event_loop(loop)

    try:
        pid, rfd = fork_call(child)
        outcome = read_all_blocking(rfd)
        assert reap(pid) == 0
        assert outcome == CHILD_GET_EVENT_LOOP
    finally:
        asyncio.set_event_loop(None)


@stdlib_xfail(strict=True, raises=AssertionError, reason=STDLIB_SHARES_EPOLL)
def test_r_fork_2_parent_loop_in_child(any_loop, loop_kind):
    loop = any_loop
    r, w = os.pipe()
    fired = []
    loop.add_reader(r, lambda: fired.append(os.read(r, 10)))

    def child():
        outcome = {}
        try:
            loop.remove_reader(r)
            loop.run_until_complete(asyncio.sleep(0))
            outcome["used"] = "ok"
        except RuntimeError as exc:
            outcome["used"] = f"RuntimeError: {exc}"
        return outcome

    try:
        pid, rfd = fork_call(child)
        outcome = read_all_blocking(rfd)
        assert reap(pid) == 0
        if loop_kind == "snakeloop":
            # Documented: an inherited snakeloop loop is closed in the child.
            assert outcome == {"used": "RuntimeError: Event loop is closed"}
        os.write(w, b"!")

        async def wait_fired():
            for _ in range(100):
                if fired:
                    return True
                await asyncio.sleep(0.01)
            return False

        assert loop.run_until_complete(wait_fired())
        assert fired == [b"!"]
    finally:
        loop.remove_reader(r)
        os.close(r)
        os.close(w)
