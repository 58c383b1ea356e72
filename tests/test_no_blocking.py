"""No blocking call in the loop thread, as blockbuster judges it.

blockbuster patches blocking functions (``os.read`` of a blocking fd,
``os.stat``, ``os.sendfile``, a ``Lock.acquire`` that would wait, ...) to
raise ``BlockingError`` when a thread running an event loop calls them.  It
allowlists call sites in asyncio's own files, so the stdlib loop passes
even where it does block; snakeloop has no such pass and must not make
those calls in the loop thread at all.  Each scenario runs on both loops.

A few tests check what blockbuster cannot see: that the loop keeps running
while a child is being started or the executor's helper thread ends, and
that a child's parent-death signal does not fire when its spawn is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from _loopkit import PY313, children, closing_socket_pair, run_within, stdlib_xfail, zombies

blockbuster = pytest.importorskip("blockbuster")

PY = sys.executable
GUARD = 20.0  # a hang guard, never a timing assertion
DATA = bytes(range(256)) * 1024  # 256 KiB


run = run_within(GUARD)


def run_watched(loop, coro):
    """Run ``coro`` with every blocking call in the loop thread an error."""
    with blockbuster.blockbuster_ctx():
        return run(loop, coro)


async def read_exactly(loop, sock, size):
    got = bytearray()
    while len(got) < size:
        data = await loop.sock_recv(sock, 65536)
        if not data:
            break
        got += data
    return bytes(got)


# -- spawning ---------------------------------------------------------------------


# start_new_session rules out posix_spawn (which 3.13 uses for the plain
# case): Popen forks, then reads its exec-error pipe until the exec.
@pytest.mark.parametrize("options", [{}, {"start_new_session": True}], ids=["plain", "forked"])
def test_subprocess_exec(any_loop, options):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            PY, "-c", "print('hi')", stdin=subprocess.PIPE, stdout=subprocess.PIPE, **options
        )
        out, _ = await proc.communicate(b"")
        return out, proc.returncode

    assert run_watched(any_loop, main()) == (b"hi\n", 0)


@pytest.mark.parametrize("options", [{}, {"start_new_session": True}], ids=["plain", "forked"])
def test_subprocess_shell(any_loop, options):
    async def main():
        proc = await asyncio.create_subprocess_shell("echo hi", stdout=subprocess.PIPE, **options)
        out, _ = await proc.communicate()
        return out, proc.returncode

    assert run_watched(any_loop, main()) == (b"hi\n", 0)


@pytest.mark.parametrize("options", [{}, {"start_new_session": True}], ids=["plain", "forked"])
def test_subprocess_exec_missing_program(any_loop, options):
    async def main():
        with pytest.raises(FileNotFoundError) as info:
            await asyncio.create_subprocess_exec("/nonexistent/program", **options)
        return info.value.errno, info.value.filename

    assert run_watched(any_loop, main()) == (2, "/nonexistent/program")


def _gate():
    """A pipe a child's preexec_fn waits on: (read end, release function)."""
    r, w = os.pipe()
    os.set_blocking(w, False)

    def release():
        os.write(w, b"x")

    return r, w, release


def _preexec_waiting_for(r):
    def preexec():
        # In the child, before exec: go on once the parent's loop wrote.
        if not select.select([r], [], [], 5)[0]:
            raise RuntimeError("the parent's loop never ran")

    return preexec


def test_loop_runs_while_a_child_is_started(loop):
    # The child's exec waits for a callback of the loop: with Popen in the
    # loop thread it would never run and the spawn would fail after 5 s.
    r, w, release = _gate()

    async def main():
        loop.call_soon(release)
        proc = await asyncio.create_subprocess_exec(
            PY, "-c", "pass", preexec_fn=_preexec_waiting_for(r)
        )
        return await proc.wait()

    try:
        assert run(loop, main()) == 0
    finally:
        os.close(r)
        os.close(w)


def test_cancel_while_a_child_is_started_kills_and_reaps_it(loop):
    r, w, release = _gate()
    events = []

    class Recorder(asyncio.SubprocessProtocol):
        def connection_made(self, transport):
            events.append(("made", transport.get_pid() is not None))
            self.transport = transport

        def process_exited(self):
            events.append(("exited", self.transport.get_returncode()))

        def connection_lost(self, exc):
            events.append(("lost", exc))

    async def main():
        task = asyncio.ensure_future(
            loop.subprocess_exec(
                Recorder,
                PY,
                "-c",
                "import time; time.sleep(30)",
                stdin=None,
                stdout=None,
                stderr=None,
                preexec_fn=_preexec_waiting_for(r),
            )
        )
        await asyncio.sleep(0.05)  # the spawn is under way, stuck in preexec_fn
        task.cancel()
        release()
        with pytest.raises(asyncio.CancelledError):
            await task
        while len(events) < 3:
            await asyncio.sleep(0.01)

    try:
        run(loop, main())
    finally:
        os.close(r)
        os.close(w)
    assert events == [("made", True), ("exited", -signal.SIGKILL), ("lost", None)]
    assert zombies() == []


@pytest.mark.parametrize("when", ["before_exec", "after_exec"])
def test_loop_closed_while_a_child_is_started_kills_and_reaps_it(loop, loop_errors, when):
    # The task awaiting the spawn never resumes: the loop closes under it.
    r, w, release = _gate()
    before = children(zombie=False)
    task = loop.create_task(
        asyncio.create_subprocess_exec(
            PY, "-c", "import time; time.sleep(30)", preexec_fn=_preexec_waiting_for(r)
        )
    )
    loop.run_until_complete(asyncio.sleep(0.05))  # the spawn is under way
    try:
        if when == "after_exec":
            release()
            # The spawning thread reports to the loop, which is not running:
            # the report waits in the ready queue when the loop closes.
            for _ in range(int(GUARD * 100)):
                if loop._ready:
                    break
                time.sleep(0.01)
            assert loop._ready
            loop.close()
        else:
            loop.close()
            release()  # the spawning thread finds the loop closed
        for thread in threading.enumerate():
            if thread.name == "snakeloop-spawn":
                thread.join(GUARD)
    finally:
        os.close(r)
        os.close(w)
    assert not task.done()
    assert children(zombie=False) == before
    assert zombies() == []


PR_SET_PDEATHSIG = 1


def _ask_for_death_signal():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGUSR1) != 0:
        raise OSError(ctypes.get_errno(), "prctl")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_parent_death_signal_does_not_fire_after_the_spawn(any_loop):
    # Linux sends PR_SET_PDEATHSIG when the thread that forked the child
    # ends: the spawning thread must outlive the child.
    async def main():
        proc = await asyncio.create_subprocess_exec(
            PY, "-c", "import time; time.sleep(30)", preexec_fn=_ask_for_death_signal
        )
        try:
            return await asyncio.wait_for(proc.wait(), 0.5)  # -SIGUSR1: it fired
        except TimeoutError:
            pass  # still running, as it should be
        proc.kill()
        return await proc.wait()

    assert run(any_loop, main()) == -signal.SIGKILL


# -- sendfile -------------------------------------------------------------------


def test_sock_sendfile(any_loop, data_file):
    with closing_socket_pair() as (a, b):

        async def main():
            reader = asyncio.ensure_future(read_exactly(any_loop, b, len(DATA)))
            sent = await any_loop.sock_sendfile(a, data_file)
            return sent, await reader

        assert run_watched(any_loop, main()) == (len(DATA), DATA)


def test_transport_sendfile(any_loop, data_file):
    with closing_socket_pair() as (a, b):

        async def main():
            transport, _ = await any_loop.create_connection(asyncio.Protocol, sock=a)
            reader = asyncio.ensure_future(read_exactly(any_loop, b, len(DATA)))
            try:
                sent = await any_loop.sendfile(transport, data_file)
            finally:
                transport.close()
            return sent, await reader

        assert run_watched(any_loop, main()) == (len(DATA), DATA)


# -- Unix servers -----------------------------------------------------------------


def test_create_unix_server(any_loop, tmp_path):
    path = str(tmp_path / "sock")

    async def main():
        return await any_loop.create_unix_server(asyncio.Protocol, path)

    server = run_watched(any_loop, main())
    assert server.sockets[0].getsockname() == path
    server.close()
    run(any_loop, server.wait_closed())


def test_create_unix_server_over_a_stale_socket_file(loop, tmp_path):
    # Not on the stdlib loop: blockbuster does not allow asyncio's os.remove
    # of the stale file.
    path = str(tmp_path / "sock")
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(path)

    async def main():
        return await loop.create_unix_server(asyncio.Protocol, path)

    server = run_watched(loop, main())
    assert server.sockets[0].getsockname() == path
    server.close()
    run(loop, server.wait_closed())


def test_create_unix_server_on_a_bound_socket(any_loop, tmp_path):
    path = str(tmp_path / "sock")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(path)

    async def main():
        return await any_loop.create_unix_server(asyncio.Protocol, sock=sock)

    server = run_watched(any_loop, main())
    server.close()
    run(any_loop, server.wait_closed())


def test_cancelled_create_unix_server_leaves_what_a_closed_server_would(
    loop, tmp_path, monkeypatch
):
    # Cancelled while the worker binds: the socket is closed, and on 3.13
    # its file is removed, as close() would have done.
    path = str(tmp_path / "sock")
    real_stat = os.stat
    started = threading.Event()
    go = threading.Event()

    def stat(*args, **kwargs):
        if threading.current_thread().name.startswith("snakeloop-blocking"):
            started.set()
            go.wait(GUARD)
        return real_stat(*args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)

    async def main():
        task = asyncio.ensure_future(loop.create_unix_server(asyncio.Protocol, path))
        await loop.run_in_executor(None, started.wait, GUARD)
        task.cancel()
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        run(loop, main())
    finally:
        go.set()
    assert os.path.exists(path) is not PY313


@pytest.mark.parametrize(
    "loop_kind",
    [
        pytest.param(
            "snakeloop",
            marks=pytest.mark.xfail(
                PY313,
                raises=blockbuster.BlockingError,
                strict=True,
                reason="3.13's close() removes the socket file before it returns "
                "(stat and unlink, in the loop thread); blockbuster allows that "
                "in asyncio's unix_events.py only (docs/design.md)",
            ),
        ),
        "stdlib",
    ],
)
def test_unix_server_close(any_loop, tmp_path):
    path = str(tmp_path / "sock")

    async def main():
        server = await any_loop.create_unix_server(asyncio.Protocol, path)
        try:
            with blockbuster.blockbuster_ctx():
                server.close()
        finally:
            server.close()
        await server.wait_closed()
        return os.path.exists(path)

    assert run(any_loop, main()) is not PY313


@stdlib_xfail(
    raises=blockbuster.BlockingError,
    strict=True,
    reason="asyncio checks the path for a stale socket file (os.stat) in the loop "
    "thread, in base_events.py, which blockbuster does not allow",
)
@pytest.mark.parametrize("stale", [False, True], ids=["new", "stale"])
def test_create_unix_datagram_endpoint(any_loop, tmp_path, stale):
    path = str(tmp_path / "dgram")
    if stale:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as old:
            old.bind(path)

    async def main():
        transport, _ = await any_loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=path, family=socket.AF_UNIX
        )
        transport.close()
        return transport.get_extra_info("sockname")

    assert run_watched(any_loop, main()) == path


# -- shutting the default executor down -------------------------------------------


@contextlib.contextmanager
def helper_thread_lingers(on_return):
    """Call ``on_return()`` in the executor's shutdown helper as it returns.

    The helper has told the loop it is done by then, so the loop resumes
    while the thread is still alive: the race asyncio's ``thread.join()``
    loses now and then, made certain.
    """

    def profile(frame, event, arg):
        if event == "return" and frame.f_code.co_name == "_do_shutdown":
            on_return()

    threading.setprofile(profile)
    try:
        yield
    finally:
        threading.setprofile(None)


def test_shutdown_default_executor(any_loop):
    done = threading.Event()

    async def main():
        await any_loop.run_in_executor(None, int)
        await any_loop.shutdown_default_executor()

    with helper_thread_lingers(lambda: done.wait(0.05)):
        run_watched(any_loop, main())


def test_loop_runs_while_the_executor_helper_ends(loop):
    ran = threading.Event()
    in_time = []

    def on_return():
        # Give the loop time to resume after the helper's report (and, if it
        # joins the helper, to block there); then it must run a callback
        # while the helper is still alive.
        ran.wait(0.1)
        loop.call_soon_threadsafe(ran.set)
        in_time.append(ran.wait(5))

    async def main():
        await loop.run_in_executor(None, int)
        await loop.shutdown_default_executor()

    with helper_thread_lingers(on_return):
        run(loop, main())
    assert in_time == [True]
