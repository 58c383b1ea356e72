"""The census of outside work (``snakeloop.pending``), on real loops, sockets and processes.

Each kind of work is started for real, seen in ``external_work()`` while it
is under way, and seen gone once it is over.  Peers inside the loop
(loopback client and server, socketpairs) never count; peers outside it (a
plain blocking server in a thread of the test, another process) do.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref

import pytest
from _loopkit import close_loop, new_loop, run

from snakeloop import pending
from snakeloop.pending import Pending, describe_fd, external_work, wake_sources

pytestmark = pytest.mark.timeout(30)

WINDOW = 0.25  # reply_window, real seconds
GUARD = 10.0  # run()'s watchdog: never reached when things work


@pytest.fixture(params=[False, True], ids=["snakeloop-futures", "stdlib-futures"])
def sloop(request: pytest.FixtureRequest):
    """A snakeloop Loop in test mode (which keeps the census), with either kind of task."""
    loop = new_loop("snakeloop", stdlib_futures=request.param, on_deadlock="raise")
    errors: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    yield loop
    close_loop(loop)
    assert errors == []


@pytest.fixture
def release():
    """An event jobs wait on; set at teardown, before the loop closes, if a test failed."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def loop():
    lp = new_loop("snakeloop", on_deadlock="raise")
    yield lp
    close_loop(lp)


def test_a_production_loop_keeps_no_census_of_executor_jobs(release):
    """The census costs a few microseconds a job: only virtual time and test mode pay it."""
    production = new_loop("snakeloop")
    try:

        async def main():
            future = production.run_in_executor(None, release.wait)
            # Unknown, the job's worker is not claimed as idle either.
            seen = external_work(production, reply_window=WINDOW), production._worker_threads()
            release.set()
            await future
            return seen

        assert production.run_until_complete(main()) == ([], set())
    finally:
        close_loop(production)


def work(loop, **kw) -> list[Pending]:
    return external_work(loop, reply_window=kw.pop("reply_window", WINDOW), **kw)


def kinds(entries: list[Pending]) -> list[tuple[str, str]]:
    return [(entry.kind, entry.label) for entry in entries]


def sockets_in(entries: list[Pending]) -> list[Pending]:
    return [entry for entry in entries if entry.kind in ("socket", "connect")]


def threads_in(entries: list[Pending]) -> list[str]:
    return [entry.label for entry in entries if entry.kind == "thread"]


def new_threads_in(entries: list[Pending], before: set[str]) -> list[str]:
    """Thread entries but those of threads that ran before the test (other tests' pools)."""
    return [label for label in threads_in(entries) if label not in before]


@pytest.fixture
def threads_before() -> set[str]:
    current = threading.current_thread()
    return {f"thread {t.name!r}" for t in threading.enumerate() if t is not current}


async def until(predicate, timeout: float = 5.0) -> None:
    """Let the loop run until ``predicate()`` holds (threads finishing, kernels settling)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


# -- executor jobs, to_thread, name resolution, the loop's blocking calls ---------


def test_executor_job_is_listed_until_its_result_reaches_the_loop(sloop, release):

    async def main():
        before = time.monotonic()
        future = sloop.run_in_executor(None, release.wait)
        [entry] = work(sloop)
        assert entry.kind == "executor"
        assert entry.label == "executor job threading.Event.wait"
        assert before <= entry.since <= time.monotonic()
        release.set()
        assert await future is True
        assert work(sloop) == []

    run(sloop, main(), GUARD)


class _HeldExecutor(concurrent.futures.Executor):
    """An executor whose jobs end when the test says so, in the loop thread."""

    def __init__(self) -> None:
        self.futures: list[concurrent.futures.Future] = []

    def submit(self, fn, /, *args, **kwargs):
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        self.futures.append(future)
        return future


def test_a_finished_job_counts_until_its_wakeup_has_run(sloop):
    executor = _HeldExecutor()

    async def main():
        future = sloop.run_in_executor(executor, len, "abc")
        # Ended in a thread of its own, as an executor's job ends: from the loop thread
        # 3.14's wrap_future sets the outcome at once (the next test).
        ender = threading.Thread(target=executor.futures[0].set_result, args=(3,))
        ender.start()
        ender.join()
        # The job is over; its outcome is on its way to the loop, not there yet.
        assert not future.done()
        assert kinds(work(sloop)) == [("executor", "executor job builtins.len")]
        assert await future == 3
        assert work(sloop) == []

    run(sloop, main(), GUARD)


def test_a_job_ended_in_the_loop_thread(sloop):
    # Up to 3.13 wrap_future always hands the outcome to the loop with
    # call_soon_threadsafe; from 3.14 it sets it at once when the job ends in the loop's
    # own thread, and nothing is left on its way.
    executor = _HeldExecutor()

    async def main():
        future = sloop.run_in_executor(executor, len, "abc")
        executor.futures[0].set_result(3)
        if sys.version_info >= (3, 14):
            assert future.done()
            assert work(sloop) == []
        else:
            assert not future.done()
            assert kinds(work(sloop)) == [("executor", "executor job builtins.len")]
        assert await future == 3
        assert work(sloop) == []

    run(sloop, main(), GUARD)


def test_a_cancelled_job_counts_while_its_thread_still_runs_it(sloop, release):
    started = threading.Event()

    def job():
        started.set()
        release.wait()

    async def main():
        future = sloop.run_in_executor(None, job)
        await until(started.is_set)
        future.cancel()
        await asyncio.sleep(0)
        assert future.cancelled()
        assert kinds(work(sloop)) == [("executor", f"executor job {__name__}.{job.__qualname__}")]
        release.set()
        await until(lambda: work(sloop) == [])

    run(sloop, main(), GUARD)


def test_to_thread_is_named_after_the_function_it_runs(sloop, release):

    async def main():
        task = asyncio.ensure_future(asyncio.to_thread(release.wait, 5))
        await asyncio.sleep(0)
        assert kinds(work(sloop)) == [("executor", "executor job threading.Event.wait")]
        release.set()
        assert await task is True
        assert work(sloop) == []

    run(sloop, main(), GUARD)


def test_getaddrinfo_queued_behind_a_busy_executor(sloop, release):
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    sloop.set_default_executor(executor)

    async def main():
        blocker = sloop.run_in_executor(None, release.wait)
        lookup = asyncio.ensure_future(sloop.getaddrinfo("localhost", 80))
        await asyncio.sleep(0)
        assert [entry.label for entry in work(sloop)] == [
            "executor job threading.Event.wait",
            "executor job socket.getaddrinfo",
        ]
        release.set()
        await blocker
        assert await lookup
        assert work(sloop) == []

    run(sloop, main(), GUARD)


def test_a_job_on_a_given_executor_and_its_idle_workers(sloop, release, threads_before):
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="given")

    async def main(executor):
        future = sloop.run_in_executor(executor, release.wait)
        assert kinds(work(sloop)) == [("executor", "executor job threading.Event.wait")]
        assert sloop._worker_threads() == set(executor._threads)
        release.set()
        await future
        assert work(sloop) == []
        assert new_threads_in(wake_sources(sloop), threads_before) == []

    try:
        run(sloop, main(executor), GUARD)
    finally:
        release.set()
        executor.shutdown(wait=True)
    # The census holds the executor weakly.
    ref = weakref.ref(executor)
    del executor
    gc.collect()
    assert ref() is None


def test_the_census_keeps_no_future_alive(sloop):
    async def main():
        future = sloop.run_in_executor(None, len, "ab")
        ref = weakref.ref(future)
        assert await future == 2
        del future
        await asyncio.sleep(0)  # the last wakeup's arguments go too
        gc.collect()
        assert ref() is None
        assert work(sloop) == []

    run(sloop, main(), GUARD)


def test_the_census_forgets_finished_jobs_in_batches(sloop):
    async def main():
        for _ in range(5):
            await asyncio.gather(*(sloop.run_in_executor(None, len, "x") for _ in range(100)))
        # Records of finished jobs are dropped once they outnumber what was kept.
        assert len(sloop._executors._jobs) <= 128

    run(sloop, main(), GUARD)


def test_shutdown_default_executor_waits_on_its_joining_thread(sloop, release):
    started = threading.Event()

    def job():
        started.set()
        release.wait()

    async def main():
        sloop.run_in_executor(None, job)
        await until(started.is_set)
        shutdown = asyncio.ensure_future(sloop.shutdown_default_executor())
        await asyncio.sleep(0.01)
        assert kinds(work(sloop)) == [
            ("executor", f"executor job {__name__}.{job.__qualname__}"),
            ("executor", "shutdown_default_executor joining the executor's threads"),
        ]
        release.set()
        await shutdown
        assert work(sloop) == []

    run(sloop, main(), GUARD)


def test_the_loops_blocking_call_worker(sloop, release, threads_before):

    async def main():
        call = sloop._call_blocking(release.wait, 5)
        [entry] = work(sloop)
        assert (entry.kind, entry.label) == ("blocking", "blocking call threading.Event.wait")
        assert entry.since <= time.monotonic()
        release.set()
        assert await call.finish() is None
        assert call.result() is True
        assert work(sloop) == []
        assert sloop._worker_threads() == sloop._offload_threads() != set()
        assert new_threads_in(wake_sources(sloop), threads_before) == []

    run(sloop, main(), GUARD)


# -- children -------------------------------------------------------------------------


def test_a_child_is_listed_from_its_spawn_until_its_exit_is_delivered(sloop):
    async def main():
        start = asyncio.ensure_future(asyncio.create_subprocess_exec("sleep", "10"))
        await asyncio.sleep(0)
        assert kinds(work(sloop)) == [("spawn", "starting child process (sleep 10)")]
        proc = await start
        [entry] = work(sloop)
        assert (entry.kind, entry.label) == ("child", f"child process {proc.pid} (sleep 10)")
        proc.kill()
        await proc.wait()
        assert work(sloop) == []

    run(sloop, main(), GUARD)


# -- sockets ---------------------------------------------------------------------------


def accept_queue(listener: socket.socket) -> tuple[int, int]:
    """(connections queued, backlog) of a listening socket.

    Linux: a listener's TCP_INFO has its accept queue's length as tcpi_unacked (u32 at
    offset 24) and its backlog as tcpi_sacked (28); a SYN is dropped while the length is
    more than the backlog.
    """
    info = listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 32)
    return struct.unpack_from("=II", info, 24)


@contextlib.contextmanager
def full_listener():
    """A plain listener whose accept queue is full: a further connect stays in SYN_SENT."""
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        # The backlog is what the kernel says, not 0: PyPy's listen() makes 0 a 1.
        listener.listen(0)
        while True:
            queued, backlog = accept_queue(listener)
            if queued > backlog:
                break
            filler = socket.socket()
            fillers.append(filler)
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(listener.getsockname())
            # Queued once its handshake is over, which connect() does not wait for: until
            # then a further SYN is still answered, and that connect completes.
            deadline = time.monotonic() + GUARD
            while accept_queue(listener)[0] == queued:
                assert time.monotonic() < deadline, "a filler's connection was never queued"
                time.sleep(0.001)
        yield listener.getsockname()
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_a_connect_in_progress(loop):
    async def main():
        with full_listener() as address, socket.socket() as sock:
            sock.setblocking(False)
            connect = asyncio.ensure_future(loop.sock_connect(sock, address))
            await asyncio.sleep(0.02)
            assert not connect.done()
            port = sock.getsockname()[1]
            label = f"socket 127.0.0.1:{port} connecting"
            assert kinds(work(loop)) == [("connect", f"{label} (connect in progress)")]
            assert kinds(sockets_in(wake_sources(loop))) == [("socket", label)]
            connect.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await connect
            assert work(loop) == []

    run(loop, main(), GUARD)


class OutsideServer:
    """A plain blocking TCP server in a thread of the test: a peer outside the loop."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        self.got_request = threading.Event()
        self.answer = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="outside-server")
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.recv(100)
            self.got_request.set()
            self.answer.wait()
            conn.sendall(b"reply\n")
            conn.recv(100)  # until the client closes

    def close(self) -> None:
        self.answer.set()
        self.thread.join()
        self.listener.close()


def test_a_request_to_a_peer_outside_the_loop_awaits_a_reply(loop):
    server = OutsideServer()

    async def main():
        reader, writer = await asyncio.open_connection(*server.address)
        try:
            host, port = writer.get_extra_info("sockname")
            local = f"{host}:{port}"
            label = f"socket {local} -> 127.0.0.1:{server.address[1]}"
            writer.write(b"request\n")
            await writer.drain()
            sent = time.monotonic()
            await until(server.got_request.is_set)
            await asyncio.sleep(0.01)  # the reply comes in a later jiffy than the request
            [entry] = work(loop)
            assert (entry.kind, entry.label) == ("socket", f"{label} awaiting a reply")
            assert sent - 0.05 <= entry.since <= time.monotonic()
            # Past the reply window, the socket no longer holds a jump.
            assert work(loop, reply_window=0.005) == []
            sources = wake_sources(loop)
            assert ("socket", label) in kinds(sources)
            assert "'outside-server'" in " ".join(threads_in(sources))
            server.answer.set()
            assert await reader.readline() == b"reply\n"
            assert work(loop) == []
        finally:
            writer.close()
            await writer.wait_closed()

    try:
        run(loop, main(), GUARD)
    finally:
        server.close()


def test_a_write_that_waits_for_a_peer_outside_the_loop(loop):
    server = OutsideServer()

    async def main():
        reader, writer = await asyncio.open_connection(*server.address)
        try:
            writer.transport.set_write_buffer_limits(high=1)
            writer.write(b"request\n")
            await until(server.got_request.is_set)
            # The server reads no more: the kernel's buffers fill, the loop waits to write.
            writer.write(b"x" * 20_000_000)
            [entry] = work(loop)
            assert entry.kind == "socket"
            assert entry.label.endswith(" waiting to write")
            writer.transport.abort()
        finally:
            writer.close()

    try:
        run(loop, main(), GUARD)
    finally:
        server.close()


def _listener(kind: str) -> socket.socket:
    if kind == "dualstack":
        # An IPv4 client shows at the server's end as ::ffff:127.0.0.1.
        return socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True)
    family = socket.AF_INET6 if ":" in kind else socket.AF_INET
    return socket.create_server((kind, 0), family=family)


@pytest.mark.parametrize(
    ("listen", "connect"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("0.0.0.0", "127.0.0.1"),
        pytest.param("::1", "::1", marks=pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6")),
        pytest.param(
            "dualstack",
            "127.0.0.1",
            marks=pytest.mark.skipif(not socket.has_dualstack_ipv6(), reason="no dual stack"),
        ),
    ],
)
@pytest.mark.parametrize("paused", [False, True], ids=["reading", "client-paused"])
def test_loopback_client_and_server_on_the_loop_are_not_outside_work(loop, listen, connect, paused):
    # With the client's reading paused, the loop does not watch its socket:
    # the server's end finds its peer among the transports' sockets.
    handled = asyncio.Event()
    finish = asyncio.Event()

    async def handle(reader, writer):
        handled.set()
        await finish.wait()  # does not answer while the census is taken
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, sock=_listener(listen))
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(connect, port)
        try:
            if paused:
                writer.transport.pause_reading()
            writer.write(b"request\n")
            await writer.drain()
            await handled.wait()
            await asyncio.sleep(0.01)
            assert work(loop) == []
            assert sockets_in(wake_sources(loop)) == []
        finally:
            finish.set()
            writer.close()
            await writer.wait_closed()
            server.close()
            await server.wait_closed()

    run(loop, main(), GUARD)


def test_a_socketpair_is_not_outside_work(loop):
    a, b = socket.socketpair()

    async def main():
        loop.add_reader(a, lambda: None)
        loop.add_reader(b, lambda: None)
        try:
            b.send(b"unread by a")
            a.send(b"x" * 100)
            loop.remove_reader(a)  # b's peer is now not watched, and still this process
            assert work(loop) == []
            assert sockets_in(wake_sources(loop)) == []
        finally:
            loop.remove_reader(a)
            loop.remove_reader(b)

    try:
        run(loop, main(), GUARD)
    finally:
        a.close()
        b.close()


_UNIX_PEER = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
sys.stdin.readline()
s.recv(100)
print("read", flush=True)
sys.stdin.readline()
"""


def test_a_unix_socket_to_another_process(loop, tmp_path):
    path = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    child = subprocess.Popen(
        [sys.executable, "-c", _UNIX_PEER, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    conn, _ = listener.accept()

    async def main():
        loop.add_reader(conn, lambda: None)
        try:
            assert work(loop) == []
            conn.send(b"request")
            assert kinds(work(loop)) == [
                ("socket", f"unix socket {path} awaiting a reply (peer still reading)")
            ]
            child.stdin.write(b"go\n")
            child.stdin.flush()
            assert child.stdout.readline() == b"read\n"
            assert work(loop) == []
            assert kinds(sockets_in(wake_sources(loop))) == [("socket", f"unix socket {path}")]
        finally:
            loop.remove_reader(conn)

    try:
        run(loop, main(), GUARD)
    finally:
        conn.close()
        listener.close()
        child.stdin.close()
        child.stdout.close()
        child.wait()


def test_marks_are_external_work(loop):
    assert work(loop, marks=[("fetching the weather", 12.5)]) == [
        Pending("external", "fetching the weather", 12.5)
    ]


def test_the_wildcard_listener_rule():
    # The accepted end of a connection to a wildcard listener has a
    # concrete address: before the loop accepts it, only the listener's
    # port and the peer being this host tell that it is inside.
    def tcp(local, peer=None, listening=False):
        info = pending._TcpInfo(10 if listening else 1, 0, 0, 0)
        family = socket.AF_INET6 if ":" in local[0] else socket.AF_INET
        args = (3, family, socket.SOCK_STREAM, local, peer, listening, info, None, True, False)
        return pending._Socket(*args)

    listeners = [tcp(("0.0.0.0", 8080), listening=True), tcp(("::", 9090), listening=True)]
    inside = pending._Inside(listeners)
    assert inside.holds_peer_of(tcp(("127.0.0.1", 5000), ("127.0.0.1", 8080)))
    assert inside.holds_peer_of(tcp(("::1", 5000, 0, 0), ("::1", 9090, 0, 0)))
    assert inside.holds_peer_of(tcp(("10.1.2.3", 5000), ("10.1.2.3", 8080)))
    assert not inside.holds_peer_of(tcp(("10.1.2.3", 5000), ("10.9.9.9", 8080)))
    assert not inside.holds_peer_of(tcp(("127.0.0.1", 5000), ("127.0.0.1", 8081)))
    # An IPv4 client of a dual-stack socket shows as IPv4-mapped.
    inside = pending._Inside([tcp(("::ffff:127.0.0.1", 8080, 0, 0))])
    assert inside.holds_peer_of(tcp(("127.0.0.1", 5000), ("127.0.0.1", 8080)))


# -- threads ---------------------------------------------------------------------------


def test_wake_sources_lists_foreign_threads_but_not_idle_workers(sloop, threads_before):
    stop = threading.Event()
    foreign = threading.Thread(target=stop.wait, name="foreign")

    async def main():
        await sloop.run_in_executor(None, len, "x")
        await sloop.run_in_executor(executor, len, "x")
        assert work(sloop) == []
        assert new_threads_in(wake_sources(sloop), threads_before) == []
        foreign.start()
        try:
            assert new_threads_in(wake_sources(sloop), threads_before) == ["thread 'foreign'"]
        finally:
            stop.set()
            foreign.join()

    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        run(sloop, main(), GUARD)
    finally:
        executor.shutdown(wait=True)


# -- describe_fd -----------------------------------------------------------------------


def test_describe_fd(loop, tmp_path):
    path = str(tmp_path / "d.sock")
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        port = listener.getsockname()[1]
        client = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
        accepted = stack.enter_context(listener.accept()[0])
        cport = client.getsockname()[1]
        v6 = stack.enter_context(socket.socket(socket.AF_INET6))
        v6.bind(("::1", 0))
        v6.listen()
        udp = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        udp.bind(("127.0.0.1", 0))
        ulisten = stack.enter_context(socket.socket(socket.AF_UNIX))
        ulisten.bind(path)
        ulisten.listen()
        uclient = stack.enter_context(socket.socket(socket.AF_UNIX))
        uclient.connect(path)
        pair = socket.socketpair()
        for sock in pair:
            stack.enter_context(sock)
        r, w = os.pipe()
        stack.callback(os.close, r)
        stack.callback(os.close, w)
        regular = stack.enter_context(open(tmp_path / "f", "wb"))
        pidfd = None
        if hasattr(os, "pidfd_open"):  # not on PyPy 3.11, where snakeloop opens no pidfd
            pidfd = os.pidfd_open(os.getpid())
            stack.callback(os.close, pidfd)

        assert describe_fd(loop, listener.fileno(), listener) == f"listener 127.0.0.1:{port}"
        expected = f"socket 127.0.0.1:{cport} -> 127.0.0.1:{port}"
        assert describe_fd(loop, client.fileno(), client) == expected
        # A bare fd, as transports register them, reads the same.
        assert describe_fd(loop, client.fileno(), client.fileno()) == expected
        assert describe_fd(loop, accepted.fileno(), accepted.fileno()) == (
            f"socket 127.0.0.1:{port} -> 127.0.0.1:{cport}"
        )
        v6port = v6.getsockname()[1]
        assert describe_fd(loop, v6.fileno(), v6) == f"listener [::1]:{v6port}"
        uport = udp.getsockname()[1]
        assert describe_fd(loop, udp.fileno(), udp) == f"udp socket 127.0.0.1:{uport}"
        assert describe_fd(loop, ulisten.fileno(), ulisten) == f"unix listener {path}"
        assert describe_fd(loop, uclient.fileno(), uclient) == f"unix socket {path}"
        assert describe_fd(loop, pair[0].fileno(), pair[0]) == "unix socketpair"
        assert describe_fd(loop, r, r) == "pipe"
        if pidfd is not None:
            assert describe_fd(loop, pidfd, pidfd) == f"pidfd of process {os.getpid()}"
        assert describe_fd(loop, regular.fileno(), regular) == f"fd {regular.fileno()}"
        # Borrowed views leave the fds open.
        assert client.fileno() >= 0 and os.fstat(client.fileno())


def test_describe_fd_leaves_a_bare_fds_blocking_mode(loop):
    """A bare fd, as the loop's parts register theirs, is read through a borrowed view that
    must not change it: PyPy's socket(fileno=) made the fd blocking, and a listener's next
    accept() until EAGAIN then blocked the loop (the idle driver of virtual time had looked
    at it)."""
    with (
        socket.create_server(("127.0.0.1", 0)) as listener,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
    ):
        udp.bind(("127.0.0.1", 0))
        labels = {
            listener: f"listener 127.0.0.1:{listener.getsockname()[1]}",
            udp: f"udp socket 127.0.0.1:{udp.getsockname()[1]}",
        }
        for sock, label in labels.items():
            for blocking in (False, True):
                sock.setblocking(blocking)
                assert describe_fd(loop, sock.fileno(), sock.fileno()) == label
                assert os.get_blocking(sock.fileno()) is blocking
