"""Failures leave no reference cycles behind (issue 9, item 4).

A task that raised, a refused connection or a cancelled ``sock_*`` call must
be freed by reference counting alone once user code drops it, as on the
stdlib loop.  The usual way to break that is a frame of snakeloop's own:
on CPython 3.11+ a frame that an exception's traceback keeps alive keeps
its caller's frame alive too (``f_back``), with whatever locals each had
when it returned, and a local that leads back to the exception (the task
or future holding it, a handle whose arguments do) closes a cycle that
only the cyclic collector frees, late, and after running finalizers in an
arbitrary order.

Each test runs its scenario once to warm up (first-use caches, lazily
created loop state), collects, then runs it again under
``gc.DEBUG_SAVEALL`` and asserts that a collection finds nothing: every
object that only the cyclic collector could free shows up in
``gc.garbage``.  Scenarios run on both loops and in and out of debug mode;
where the stdlib loop itself leaves cycles on some Python version, its
parametrization is a strict xfail that says why.

The scenarios themselves are written not to make cycles of their own: no
exception is kept in a local of a coroutine whose frame is in that
exception's traceback, and tasks are dropped before their coroutine ends.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import gc
import socket
import ssl
import struct
import sys
import types

import _upstream
import pytest
from _loopkit import NO_REFCOUNTING, REFCOUNTED, socket_pair, stdlib_xfail, task_class

pytestmark = [
    pytest.mark.timeout(60),
    # What these tests tell apart, freed by reference counting or only by the cyclic
    # collector, does not exist without reference counting.
    pytest.mark.skipif(not REFCOUNTED, reason=NO_REFCOUNTING),
]

DEBUG_MODES = [pytest.param(False, id="nodebug"), pytest.param(True, id="debug")]


# -- the check -------------------------------------------------------------------


def _frame_text(frame: types.FrameType) -> str:
    code = frame.f_code
    name = getattr(code, "co_qualname", code.co_name)
    return f"frame {name} ({code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})"


def _short(obj: object) -> str:
    if isinstance(obj, types.FrameType):
        return _frame_text(obj)
    if isinstance(obj, BaseException):
        return f"{type(obj).__name__}({obj})"
    if isinstance(obj, asyncio.Future):
        return f"{type(obj).__module__}.{type(obj).__qualname__}"
    return type(obj).__qualname__


def describe_garbage(garbage: list) -> str:
    """What the cyclic collector found: types, and who holds the interesting ones."""
    counts = collections.Counter(
        _short(o) if isinstance(o, types.FrameType) else type(o).__qualname__ for o in garbage
    )
    lines = [
        f"{len(garbage)} objects in cycles: "
        + ", ".join(f"{n} x{c}" for n, c in counts.most_common())
    ]
    in_garbage = {id(o) for o in garbage}
    # Frames name the code that kept a local too long; show what each holds.
    for obj in garbage:
        if isinstance(obj, types.FrameType):
            held = [k for k, v in obj.f_locals.items() if id(v) in in_garbage]
            lines.append(f"  {_frame_text(obj)} holds {held}")
    # And who refers to the futures, tasks and exceptions in the cycles.
    shown = 0
    for obj in garbage:
        if shown >= 6 or not isinstance(obj, (asyncio.Future, BaseException)):
            continue
        shown += 1
        referrers = [_short(r) for r in gc.get_referrers(obj) if id(r) in in_garbage]
        lines.append(f"  {_short(obj)} <- {referrers}")
    return "\n".join(lines)


def assert_run_leaves_no_cycles(run) -> None:
    """Call ``run()`` twice; the second call must leave nothing for the cyclic GC."""
    run()  # first-use caches and lazily created state are not garbage
    gc.collect()
    flags = gc.get_debug()
    gc.set_debug(flags | gc.DEBUG_SAVEALL)
    try:
        run()
        gc.collect()
        report = describe_garbage(gc.garbage) if gc.garbage else ""
    finally:
        gc.set_debug(flags)
        # Freed by the leak guard's collections once the list lets go.
        gc.garbage.clear()
    assert not report, report


def assert_no_cycles(loop: asyncio.AbstractEventLoop, scenario) -> None:
    """Run the coroutine ``scenario()`` on ``loop``: see assert_run_leaves_no_cycles."""
    assert_run_leaves_no_cycles(lambda: loop.run_until_complete(scenario()))


@pytest.fixture(params=DEBUG_MODES)
def debug(request: pytest.FixtureRequest) -> bool:
    return request.param


@pytest.fixture
def dloop(any_loop, debug):
    """``any_loop`` in or out of debug mode."""
    any_loop.set_debug(debug)
    # Debug mode flags slow callbacks with a warning; a busy machine would
    # make that noise, not a failure, so only real hangs count.
    any_loop.slow_callback_duration = 60.0
    return any_loop


# -- helpers of the scenarios -----------------------------------------------------


class fails_with:
    """``with fails_with(E):`` the block must raise ``E``, which is then dropped.

    Like ``except E: pass`` it keeps nothing of the error (no cycle of its own), and unlike it
    a scenario whose error path is never taken fails instead of passing with nothing to check.
    """

    __slots__ = ("expected",)

    def __init__(self, *expected: type[BaseException]) -> None:
        self.expected = expected

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            names = " or ".join(e.__name__ for e in self.expected)
            raise AssertionError(f"{names} was expected and nothing was raised")
        return issubclass(exc_type, self.expected)


def refused_port(host: str = "127.0.0.1", family: int = socket.AF_INET) -> int:
    """A port on ``host`` that nothing listens on (bound once, then released)."""
    with socket.socket(family) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def fill_send_buffer(sock: socket.socket) -> None:
    chunk = b"x" * 65536
    with contextlib.suppress(BlockingIOError):
        while True:
            sock.send(chunk)


def reset(sock: socket.socket) -> None:
    """Close ``sock`` with a zero linger time: the peer gets a reset, not a FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def cancel_after_start(coro) -> None:
    """Start ``coro`` as a task, let it block, cancel it, and wait for it."""
    task = asyncio.get_running_loop().create_task(coro)
    await asyncio.sleep(0)
    assert not task.done()
    task.cancel()
    with fails_with(asyncio.CancelledError):
        await task
    task = None  # the traceback holds this frame


# -- tasks ---------------------------------------------------------------------------


async def raise_at_once() -> None:
    raise ValueError("boom")


async def raise_after_await() -> None:
    # Resumed by a future's wakeup with a plain result, not a bare yield.
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    loop.call_soon(fut.set_result, None)
    await fut
    raise ValueError("boom")


async def wait_forever() -> None:
    await asyncio.get_running_loop().create_future()


async def await_failing_task(body) -> None:
    task = asyncio.get_running_loop().create_task(body())
    with fails_with(ValueError):
        await task
    task = None  # the error's traceback holds this frame


@pytest.mark.parametrize("body", [raise_at_once, raise_after_await], ids=["at_once", "after_await"])
def test_task_that_raised(dloop, body):
    assert_no_cycles(dloop, lambda: await_failing_task(body))


EAGER = pytest.mark.skipif(sys.version_info < (3, 12), reason="eager tasks came with 3.12")


def run_eager_task(loop, loop_kind, body) -> None:
    # The first step runs inside create_task(), under the frames of the
    # task's constructor and of create_task itself.
    loop.set_task_factory(asyncio.create_eager_task_factory(task_class(loop_kind)))
    assert_no_cycles(loop, lambda: await_failing_task(body))


@EAGER
@stdlib_xfail(
    not _upstream.create_task_drops_task(),
    reason="BaseEventLoop.create_task() keeps `task` in its frame",
)
def test_eager_task_that_raised_at_once(dloop, loop_kind):
    run_eager_task(dloop, loop_kind, raise_at_once)


@EAGER
def test_eager_task_that_raised_after_await(dloop, loop_kind):
    run_eager_task(dloop, loop_kind, raise_after_await)


def test_task_cancelled_while_waiting(dloop):
    async def scenario():
        await cancel_after_start(wait_forever())

    assert_no_cycles(dloop, scenario)


async def fail_when_cancelled() -> None:
    try:
        await asyncio.get_running_loop().create_future()
    except asyncio.CancelledError:
        raise ValueError("cancelled") from None


def test_task_cancelled_by_timer_raises(dloop):
    # The timer's handle holds the task (its bound cancel), and the task
    # holds its error: the run loop must not keep the handle in its frame.
    async def scenario():
        loop = asyncio.get_running_loop()
        task = loop.create_task(fail_when_cancelled())
        loop.call_later(0.001, task.cancel)
        with fails_with(ValueError):
            await task
        task = None

    assert_no_cycles(dloop, scenario)


# -- TaskGroup ------------------------------------------------------------------------


async def fail_soon(n: int) -> None:
    await asyncio.sleep(0)
    raise ValueError(n)


def clear_taskgroup_frames(group: BaseExceptionGroup) -> None:
    """Break the cycle that asyncio's own TaskGroup makes, whatever the loop.

    ``TaskGroup.__aexit__`` (in 3.11.7, 3.12.1 and 3.13.0 at least) raises
    its group from a local, ``me``, that it never clears, so the group's
    traceback holds the frame that holds the group, on any loop.  Clearing
    that finished frame leaves the cycles of the loop's own code to be found.
    From 3.14 the work is in ``TaskGroup._aexit``, and 3.15's keeps the
    CancelledError it met (``pending_cancellation_error``), whose traceback
    holds that frame: it is cleared too.
    """
    codes = {asyncio.TaskGroup.__aexit__.__code__}
    if hasattr(asyncio.TaskGroup, "_aexit"):
        codes.add(asyncio.TaskGroup._aexit.__code__)
    tb = group.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            tb.tb_frame.clear()
        tb = tb.tb_next


def test_taskgroup_children_raise(dloop):
    async def scenario():
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(fail_soon(1))
                tg.create_task(fail_soon(2))
        except* ValueError as group:
            clear_taskgroup_frames(group)
        tg = None

    assert_no_cycles(dloop, scenario)


def test_taskgroup_body_raises(dloop):
    async def scenario():
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(wait_forever())
                await asyncio.sleep(0)
                raise ValueError("body")
        except* ValueError as group:
            clear_taskgroup_frames(group)
        tg = None

    assert_no_cycles(dloop, scenario)


# -- connecting -----------------------------------------------------------------------


def test_sock_connect_refused(dloop):
    async def scenario():
        loop = asyncio.get_running_loop()
        port = refused_port()
        with socket.socket() as sock:
            sock.setblocking(False)
            with fails_with(ConnectionRefusedError):
                await loop.sock_connect(sock, ("127.0.0.1", port))

    assert_no_cycles(dloop, scenario)


def test_create_connection_refused(dloop):
    async def scenario():
        loop = asyncio.get_running_loop()
        with fails_with(ConnectionRefusedError):
            await loop.create_connection(asyncio.Protocol, "127.0.0.1", refused_port())

    assert_no_cycles(dloop, scenario)


def refused_addrinfos() -> list[tuple]:
    """Two (or three, with IPv6) address infos that all refuse connections."""
    stream = (socket.SOCK_STREAM, socket.IPPROTO_TCP, "")
    infos = [
        (socket.AF_INET, *stream, ("127.0.0.1", refused_port())),
        (socket.AF_INET, *stream, ("127.0.0.1", refused_port())),
    ]
    if has_ipv6_loopback():
        infos.append(
            (socket.AF_INET6, *stream, ("::1", refused_port("::1", socket.AF_INET6), 0, 0))
        )
    return infos


ALL_ERRORS = [pytest.param(None, id="one_error")]
if sys.version_info >= (3, 12):
    ALL_ERRORS.append(pytest.param(True, id="all_errors"))


@stdlib_xfail(
    reason="asyncio.staggered keeps `exceptions` in its run_one_coro frames, and "
    "run_one_coro refers to itself through its closure cell"
)
@pytest.mark.parametrize("all_errors", ALL_ERRORS)
def test_happy_eyeballs_all_refused(dloop, all_errors, monkeypatch):
    infos = refused_addrinfos()

    async def resolve(host, port, **kwargs):
        return list(infos)

    # Both loops ask the loop for the addresses of a host name.
    monkeypatch.setattr(dloop, "getaddrinfo", resolve)
    expected = ExceptionGroup if all_errors else OSError

    async def scenario():
        loop = asyncio.get_running_loop()
        with fails_with(expected):
            await loop.create_connection(
                asyncio.Protocol,
                "refusing.invalid",
                80,
                happy_eyeballs_delay=0.25,
                **({} if all_errors is None else {"all_errors": all_errors}),
            )

    assert_no_cycles(dloop, scenario)


# -- cancelled sock_* calls ----------------------------------------------------------


def test_cancelled_sock_recv(dloop):
    async def scenario():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        with a, b:
            a.setblocking(False)
            await cancel_after_start(loop.sock_recv(a, 100))

    assert_no_cycles(dloop, scenario)


def test_cancelled_sock_sendall(dloop):
    async def scenario():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        with a, b:
            a.setblocking(False)
            fill_send_buffer(a)
            await cancel_after_start(loop.sock_sendall(a, b"y" * 65536))

    assert_no_cycles(dloop, scenario)


def test_cancelled_sock_accept(dloop):
    async def scenario():
        loop = asyncio.get_running_loop()
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            listener.setblocking(False)
            await cancel_after_start(loop.sock_accept(listener))

    assert_no_cycles(dloop, scenario)


def test_cancelled_sock_connect(dloop):
    # A connect to 127.0.0.1 is in progress (EINPROGRESS) until the next
    # poll reports it: cancelling it one iteration after it started beats
    # that report, on both loops.
    async def scenario():
        loop = asyncio.get_running_loop()
        with socket.socket() as sock:
            sock.setblocking(False)
            await cancel_after_start(loop.sock_connect(sock, ("127.0.0.1", refused_port())))

    assert_no_cycles(dloop, scenario)


# -- transports -----------------------------------------------------------------------


# Not an error path: the stdlib's socket transport keeps a bound method of
# its own (_read_ready_cb), so each one is a cycle, closed or not.
TRANSPORT_CYCLE = "_SelectorSocketTransport keeps its bound _read_ready_cb: always a cycle"
# From the fix that drops the bound callbacks when the connection is lost, no cycle.
TRANSPORT_CYCLE_FIXED = _upstream.transport_drops_read_callback()


class Recorder(asyncio.Protocol):
    """Remembers how the connection ended (keeping the error, as user code does)."""

    def __init__(self) -> None:
        self.lost = asyncio.get_running_loop().create_future()
        self.error: BaseException | None = None

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(type(exc))

    def error_received(self, exc):
        self.error = exc
        if not self.lost.done():
            self.lost.set_result(type(exc))


@stdlib_xfail(not TRANSPORT_CYCLE_FIXED, reason=TRANSPORT_CYCLE)
def test_stream_reset_by_peer(dloop):
    async def scenario():
        loop = asyncio.get_running_loop()
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            transport, protocol = await loop.create_connection(Recorder, *listener.getsockname())
            peer, _ = listener.accept()
        reset(peer)
        assert await protocol.lost is ConnectionResetError
        del transport, protocol

    assert_no_cycles(dloop, scenario)


class Raising(asyncio.Protocol):
    def __init__(self) -> None:
        self.lost = asyncio.get_running_loop().create_future()

    def data_received(self, data):
        raise RuntimeError("protocol bug")

    def connection_lost(self, exc):
        self.lost.set_result(type(exc))


@stdlib_xfail(not TRANSPORT_CYCLE_FIXED, reason=TRANSPORT_CYCLE)
def test_protocol_method_raises(dloop, loop_errors):
    async def scenario():
        loop = asyncio.get_running_loop()
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            transport, protocol = await loop.create_connection(Raising, *listener.getsockname())
            peer, _ = listener.accept()
        with peer:
            peer.sendall(b"hello")
            assert await protocol.lost is RuntimeError
        del transport, protocol
        assert [type(ctx.get("exception")) for ctx in loop_errors] == [RuntimeError]
        loop_errors.clear()

    assert_no_cycles(dloop, scenario)


def test_datagram_error(dloop):
    async def scenario():
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.create_datagram_endpoint(
            Recorder, remote_addr=("127.0.0.1", refused_port())
        )
        # The ICMP "port unreachable" comes back as ECONNREFUSED on the
        # connected socket's next receive.
        transport.sendto(b"ping")
        assert await protocol.lost is ConnectionRefusedError
        assert protocol.error.errno == errno.ECONNREFUSED
        transport.close()
        await asyncio.sleep(0)
        del transport, protocol

    assert_no_cycles(dloop, scenario)


@stdlib_xfail(
    reason="create_datagram_endpoint() raises from its `exceptions` list, left in its frame"
)
def test_datagram_endpoint_cannot_bind(dloop):
    async def scenario():
        loop = asyncio.get_running_loop()
        # 192.0.2.1 (TEST-NET-1) is no address of this host: EADDRNOTAVAIL.
        try:
            await loop.create_datagram_endpoint(Recorder, local_addr=("192.0.2.1", 0))
        except OSError as exc:
            assert exc.errno == errno.EADDRNOTAVAIL
        else:
            raise AssertionError("binding to an address of no interface succeeded")

    assert_no_cycles(dloop, scenario)


# -- sock_* calls that fail after waiting -------------------------------------------


@stdlib_xfail(reason="_sock_recv() keeps `fut` (which holds the error) in its frame")
def test_sock_recv_reset_while_waiting(dloop):
    async def scenario():
        loop = asyncio.get_running_loop()
        client, server = socket_pair("tcp")
        with client:
            loop.call_soon(reset, server)
            with fails_with(ConnectionResetError):
                await loop.sock_recv(client, 100)

    assert_no_cycles(dloop, scenario)


@stdlib_xfail(reason="_sock_sendall() keeps `fut` (which holds the error) in its frame")
def test_sock_sendall_reset_while_waiting(dloop):
    async def scenario():
        loop = asyncio.get_running_loop()
        client, server = socket_pair("tcp")
        with client:
            fill_send_buffer(client)
            loop.call_soon(reset, server)
            with fails_with(ConnectionResetError, BrokenPipeError):
                await loop.sock_sendall(client, b"y" * 65536)

    assert_no_cycles(dloop, scenario)


@stdlib_xfail(reason="_sock_sendfile_native() keeps `fut` (which holds the error) in its frame")
def test_sock_sendfile_fails(dloop, tmp_path):
    path = tmp_path / "data"
    path.write_bytes(b"x" * 1000)

    async def scenario():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        # os.sendfile() cannot read a file opened for writing only (EBADF).
        with a, b, open(path, "ab") as file:
            a.setblocking(False)
            with fails_with(asyncio.SendfileNotAvailableError):
                await loop.sock_sendfile(a, file, fallback=False)

    assert_no_cycles(dloop, scenario)


# -- executors, name resolution, subprocesses ------------------------------------


def fail_in_thread() -> None:
    raise ValueError("in a worker thread")


def test_executor_call_raises(dloop):
    async def scenario():
        loop = asyncio.get_running_loop()
        with fails_with(ValueError):
            await loop.run_in_executor(None, fail_in_thread)

    assert_no_cycles(dloop, scenario)


def test_getaddrinfo_fails(dloop):
    async def scenario():
        loop = asyncio.get_running_loop()
        # Refused by the C library at once: no name server is asked.
        with fails_with(socket.gaierror):
            await loop.getaddrinfo("127.0.0.1", 80, family=socket.AF_UNIX)

    assert_no_cycles(dloop, scenario)


def test_subprocess_cannot_start(dloop):
    async def scenario():
        with fails_with(FileNotFoundError):
            await asyncio.create_subprocess_exec("/nonexistent/snakeloop-test-program")

    assert_no_cycles(dloop, scenario)


# -- TLS handshakes that fail ------------------------------------------------------


NOT_TLS = b"HTTP/1.1 400 Bad Request\r\n\r\n" + b"x" * 100


@stdlib_xfail(
    not _upstream.create_connection_drops_waiter(),
    reason="_create_connection_transport() keeps `waiter` (which holds the error)",
)
def test_tls_client_handshake_fails(dloop):
    async def scenario():
        loop = asyncio.get_running_loop()
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            listener.setblocking(False)
            connecting = loop.create_task(
                loop.create_connection(
                    asyncio.Protocol,
                    *listener.getsockname(),
                    ssl=ssl.create_default_context(),
                    server_hostname="localhost",
                )
            )
            peer, _ = await loop.sock_accept(listener)
        with peer:
            # Whatever the ClientHello says, the answer is not TLS.
            await loop.sock_sendall(peer, NOT_TLS)
            with fails_with(ssl.SSLError):
                await connecting
        connecting = None

    assert_no_cycles(dloop, scenario)


def test_tls_server_handshake_fails(request, dloop, loop_kind, debug, loop_errors):
    if loop_kind == "stdlib":
        if not TRANSPORT_CYCLE_FIXED:
            request.applymarker(pytest.mark.xfail(reason=TRANSPORT_CYCLE))
        elif debug:
            request.applymarker(
                pytest.mark.xfail(
                    reason="in debug mode _accept_connection2() keeps the exception "
                    "handler's context (which holds the error) in its frame"
                )
            )
    certs = pytest.importorskip("test.test_asyncio.utils")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.SIGNED_CERTFILE)

    async def scenario():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0, ssl=context)
        with socket.socket() as client:
            client.setblocking(False)
            await loop.sock_connect(client, server.sockets[0].getsockname())
            await loop.sock_sendall(client, NOT_TLS)
            # The server answers with an alert and closes.
            with contextlib.suppress(ConnectionResetError):
                while await loop.sock_recv(client, 1024):
                    pass
        server.close()
        await server.wait_closed()
        # The accepting task sees the failed handshake and finishes.
        for _ in range(10):
            await asyncio.sleep(0)
        server = None
        # In debug mode both loops report the failure to the handler.
        expected = ["Error on transport creation for incoming connection"] if debug else []
        assert [ctx["message"] for ctx in loop_errors] == expected
        loop_errors.clear()

    assert_no_cycles(dloop, scenario)


# -- run_until_complete ------------------------------------------------------------


@stdlib_xfail(reason="run_until_complete() keeps `future` (the task) in its frame")
def test_run_until_complete_raises(dloop):
    def run():
        with fails_with(ValueError):
            dloop.run_until_complete(raise_after_await())

    assert_run_leaves_no_cycles(run)
