"""fork() from a process running a loop: the child starts afresh, the parent goes on.

Each child reports a JSON result through a pipe and leaves with
``os._exit`` so that nothing of pytest runs twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading

import pytest
from _loopkit import (
    CHILD_GET_EVENT_LOOP,
    PY312,
    child_get_event_loop,
    fork_call,
    new_loop,
    quiet_fork,
    reap,
    run,
    snakeloop_module,
    stdlib_xfail,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


async def read_result(loop, rfd) -> object:
    """Read the child's report through the parent's loop (which must still work)."""
    chunks = []
    done = loop.create_future()

    class Collect(asyncio.Protocol):
        def data_received(self, data):
            chunks.append(data)

        def connection_lost(self, exc):
            done.set_result(None)

    await loop.connect_read_pipe(Collect, open(rfd, "rb", 0))
    await done
    return json.loads(b"".join(chunks) or b"null")


def fresh_loop_work(kind: str) -> dict:
    """What a child does: a new loop, with timers, a pipe and a subprocess."""
    loop = new_loop(kind)
    try:

        async def main():
            await asyncio.sleep(0.001)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", "print('grandchild')", stdout=asyncio.subprocess.PIPE
            )
            out, _ = await proc.communicate()
            return {"out": out.decode().strip(), "rc": proc.returncode}

        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_child_runs_a_fresh_loop_parent_goes_on(any_loop, loop_kind):
    loop = any_loop

    async def main():
        ticks = []
        handle = loop.call_later(0.01, ticks.append, "tick")
        pid, rfd = fork_call(lambda: fresh_loop_work(loop_kind))
        result = await read_result(loop, rfd)
        await asyncio.sleep(0.02)
        handle.cancel()
        return result, reap(pid), ticks

    result, rc, ticks = run(loop, main(), 20)
    assert result == {"out": "grandchild", "rc": 0}
    assert rc == 0
    assert ticks == ["tick"]


def test_inherited_loop_is_closed_in_child(loop):
    snakeloop = snakeloop_module()

    def child():
        r, w = os.pipe()
        outcome = {"closed": loop.is_closed()}
        for name, call in [
            ("add_reader", lambda: loop.add_reader(r, lambda: None)),
            ("call_soon", lambda: loop.call_soon(print)),
            ("run", lambda: loop.run_until_complete(asyncio.sleep(0))),
        ]:
            try:
                call()
            except RuntimeError as exc:
                outcome[name] = str(exc)
        loop.close()  # a no-op, and harmless to the parent
        # A fresh loop in the child is fine.
        fresh = snakeloop.new_event_loop()
        outcome["fresh"] = fresh.run_until_complete(asyncio.sleep(0, "ok"))
        fresh.close()
        return outcome

    # Forked while the loop is idle, so the child may try to run it.
    pid, rfd = fork_call(child)
    result = run(loop, read_result(loop, rfd), 20)
    assert reap(pid) == 0, result
    assert result == {
        "closed": True,
        "add_reader": "Event loop is closed",
        "call_soon": "Event loop is closed",
        "run": "Event loop is closed",
        "fresh": "ok",
    }
    # ...and the parent's loop is as it was.
    assert loop.run_until_complete(asyncio.sleep(0.001, "still fine")) == "still fine"


@stdlib_xfail(
    strict=True,
    raises=AssertionError,
    reason="the stdlib selector loop shares its epoll instance with a forked child",
)
def test_child_cannot_unregister_parent_fds(any_loop):
    loop = any_loop
    r, w = os.pipe()
    fired = []
    loop.add_reader(r, lambda: fired.append(os.read(r, 10)))

    def child():
        # Through the shared epoll instance this would drop the parent's
        # registration (EPOLL_CTL_DEL works on the open file description).
        try:
            loop.remove_reader(r)
        finally:
            os.close(r)
        return "done"

    async def main():
        pid, rfd = fork_call(child)
        result = await read_result(loop, rfd)
        reap(pid)
        os.write(w, b"!")
        for _ in range(200):
            if fired:
                break
            await asyncio.sleep(0.01)
        return result

    try:
        assert loop.run_until_complete(main()) == "done"
        assert fired == [b"!"]
    finally:
        loop.remove_reader(r)
        os.close(r)
        os.close(w)


@stdlib_xfail(
    not PY312,
    strict=True,
    raises=AssertionError,
    reason="asyncio resets the signal wakeup fd in a forked child only from 3.12",
)
def test_child_signal_does_not_reach_parent_handler(any_loop):
    loop = any_loop
    got = []
    loop.add_signal_handler(signal.SIGUSR1, got.append, "parent")

    def child():
        os.kill(os.getpid(), signal.SIGUSR1)
        return "signalled"

    async def main():
        pid, rfd = fork_call(child)
        result = await read_result(loop, rfd)
        reap(pid)
        for _ in range(5):
            await asyncio.sleep(0.01)
        before = list(got)
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(200):
            if len(got) > len(before):
                break
            await asyncio.sleep(0.005)
        return result, before

    try:
        result, before = run(loop, main(), 20)
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
    assert result == "signalled"
    assert before == []
    assert got == ["parent"]


def test_fork_from_thread_then_signals_in_child(loop):
    snakeloop = snakeloop_module()

    def child():
        fresh = snakeloop.new_event_loop()
        try:
            got = []
            fresh.add_signal_handler(signal.SIGUSR2, got.append, "child")

            async def main():
                os.kill(os.getpid(), signal.SIGUSR2)
                for _ in range(200):
                    if got:
                        break
                    await asyncio.sleep(0.005)
                return got

            return fresh.run_until_complete(main())
        finally:
            fresh.close()

    box = {}

    def in_thread():
        box["pid"], box["rfd"] = fork_call(child)

    async def main():
        t = threading.Thread(target=in_thread)
        t.start()
        t.join()
        result = await read_result(loop, box["rfd"])
        return result, reap(box["pid"])

    result, rc = run(loop, main(), 20)
    assert (result, rc) == (["child"], 0)


def test_get_event_loop_in_child_is_not_the_parents(loop):
    asyncio.set_event_loop(loop)
    try:

        def child():
            return child_get_event_loop(loop)

        async def main():
            pid, rfd = fork_call(child)
            return await read_result(loop, rfd), reap(pid)

        assert loop.run_until_complete(main()) == (CHILD_GET_EVENT_LOOP, 0)
    finally:
        asyncio.set_event_loop(None)


def test_parent_loop_closed_in_child_is_harmless(loop):
    r, w = os.pipe()
    fired = []
    loop.add_reader(r, lambda: fired.append(os.read(r, 10)))

    def child():
        loop.close()
        return "closed"

    async def main(rfd):
        result = await read_result(loop, rfd)
        os.write(w, b"x")
        while not fired:
            await asyncio.sleep(0.005)
        return result

    try:
        pid, rfd = fork_call(child)  # the loop is idle: the child may close it
        assert run(loop, main(rfd), 20) == "closed"
        assert reap(pid) == 0
    finally:
        loop.remove_reader(r)
        os.close(r)
        os.close(w)


def test_child_returning_into_the_running_loop_is_refused_at_its_next_poll(loop):
    from snakeloop._process.forking import INHERITED_LOOP_MESSAGE

    parent = os.getpid()
    r, w = os.pipe()

    async def main():
        with quiet_fork():
            pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            # Back into the inherited loop, which now has to poll.
            await loop.create_future()
        return pid

    try:
        pid = loop.run_until_complete(main())
    except BaseException as exc:
        if os.getpid() != parent:  # pragma: no cover - the child reports and leaves
            os.write(w, f"{type(exc).__name__}: {exc}".encode())
            os._exit(0)
        raise
    os.close(w)
    with open(r, "rb") as f:
        report = f.read().decode()
    assert reap(pid) == 0
    assert report == f"RuntimeError: {INHERITED_LOOP_MESSAGE}"
    # The parent's loop is untouched.
    assert loop.run_until_complete(asyncio.sleep(0, "fine")) == "fine"
