"""File descriptor accounting for streams (R-FD-1, R-FD-2), snakeloop and stdlib.

* R-FD-1: connect/close cycles in four modes (clean close, abort/RST,
  ``open_connection`` cancelled part-way, ``create_connection(sock=)``
  cancelled part-way) leave exactly the fds there were before, and no
  ``ResourceWarning`` (warnings are errors, and the suite's leak guard
  collects garbage after every test).
* R-FD-2: the fd-reuse "victim" probe (uvloop#738, #645; aiohttp#10506).
  Each fd-adopting API is cancelled right after it took the socket; then a
  victim connection opens, likely on the same fd number, the stale socket
  object is closed the way user code would close it, and the victim must be
  untouched: its data reaches its peer, and a spy put on a freed fd number
  gets nothing.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import socket
import warnings

import pytest
from _loopkit import fd_set, stdlib_xfail
from _streamkit import (
    StrictProtocol,
    cancel_after,
    close_leaked_sockets,
    run,
    set_linger_rst,
    tcp_pair,
    victim_probe,
)

pytestmark = pytest.mark.reliability

# -- R-FD-1 -----------------------------------------------------------------------------


class Echo(StrictProtocol):
    def data_received(self, data):
        super().data_received(data)
        self.transport.write(data)


async def cycles(loop, count, rng):
    protocols = []

    def factory():
        proto = Echo(loop)
        protocols.append(proto)
        return proto

    server = await loop.create_server(factory, "127.0.0.1", 0, backlog=1024)
    host, port = server.sockets[0].getsockname()
    before = fd_set()
    cancelled = 0

    async def clean():
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        writer.close()
        await writer.wait_closed()

    async def rst():
        tr, proto = await loop.create_connection(lambda: StrictProtocol(loop), host, port)
        set_linger_rst(tr.get_extra_info("socket"))
        tr.abort()
        assert await proto.lost is None

    async def cancel_open_connection():
        nonlocal cancelled
        finished, result = await cancel_after(
            loop, lambda: asyncio.open_connection(host, port), rng.randint(0, 4)
        )
        if finished:
            _, writer = result
            writer.close()
            await writer.wait_closed()
        else:
            cancelled += 1

    async def cancel_sock_connection():
        nonlocal cancelled
        sock = socket.socket()
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, (host, port))
            finished, result = await cancel_after(
                loop,
                lambda: loop.create_connection(lambda: StrictProtocol(loop), sock=sock),
                rng.randint(0, 3),
            )
            if finished:
                tr, proto = result
                tr.close()
                await proto.lost
            else:
                cancelled += 1
        finally:
            sock.close()  # a no-op once a transport closed it

    modes = [clean, rst, cancel_open_connection, cancel_sock_connection]
    try:
        for i in range(count):
            await modes[i % 4]()
        # Let the server side finish with every connection.
        for _ in range(1000):
            if all(p.lost.done() for p in protocols):
                break
            await asyncio.sleep(0)
        for _ in range(3):
            await asyncio.sleep(0)
        after = fd_set()
    finally:
        server.close()
        await server.wait_closed()
    assert after == before, f"fds before {sorted(before)}, after {sorted(after)}"
    assert cancelled > 0, "no call was ever cancelled before it completed"
    for proto in protocols:
        assert proto.violations == []


def test_r_fd_1_connect_close_cycles(any_loop, rng):
    run(any_loop, cycles(any_loop, 1000, rng))


@pytest.mark.stress
def test_r_fd_1_connect_close_cycles_full(any_loop, rng):
    run(any_loop, cycles(any_loop, 1000, rng))


# -- R-FD-2 ------------------------------------------------------------------------------


def _listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


async def adopting_call(loop, api, tmpdir):
    """(coroutine factory, stale socket, things to close) for one adopting API."""
    if api == "create_connection":
        client, peer = tcp_pair()
        return (
            lambda: loop.create_connection(lambda: StrictProtocol(loop), sock=client),
            client,
            [peer],
        )
    if api == "create_unix_connection":
        client, peer = socket.socketpair()
        return (
            lambda: loop.create_unix_connection(lambda: StrictProtocol(loop), sock=client),
            client,
            [peer],
        )
    if api == "connect_accepted_socket":
        peer, accepted = tcp_pair()
        return (
            lambda: loop.connect_accepted_socket(lambda: StrictProtocol(loop), accepted),
            accepted,
            [peer],
        )
    if api == "create_server":
        listener = _listener()
        return (lambda: loop.create_server(StrictProtocol, sock=listener), listener, [])
    raise AssertionError(api)


async def close_result(result):
    if result is None:
        return
    if isinstance(result, tuple):
        tr, proto = result
        tr.close()
        await proto.lost
    else:
        result.close()
        await result.wait_closed()


ADOPTING = [
    "create_connection",
    "create_unix_connection",
    "connect_accepted_socket",
    "create_server",
]


STDLIB_SERVER_LEAK = (
    "asyncio's create_server() starts serving and then awaits sleep(0); a cancel "
    "there leaves the listener registered, so the next socket on that fd number "
    "is never watched (no upstream issue found)"
)


async def probe_rounds(loop, api, sock_dir):
    """Cancel ``api`` after k = 0, 1, ... iterations; the victim probe after each."""
    rounds = 0
    for k in range(12):
        before = fd_set()
        factory, stale, extra = await adopting_call(loop, api, sock_dir)
        stale_fd = stale.fileno()
        try:
            finished, result = await cancel_after(loop, factory, k)
            await close_result(result)
            for _ in range(3):
                await asyncio.sleep(0)
            await victim_probe(loop, [stale], [stale_fd])
        finally:
            for sock in extra:
                sock.close()
        assert fd_set() == before
        rounds += 1
        if finished:
            break
    assert finished, "the call never completed within 12 iterations"
    assert rounds >= 2, "the call completed before any cancel: nothing was tested"


@pytest.mark.parametrize("api", [a for a in ADOPTING if a != "create_server"])
def test_r_fd_2_victim_probe(any_loop, api, sock_dir):
    """Cancel each adopting API at every early step, then run the victim probe."""
    run(any_loop, probe_rounds(any_loop, api, sock_dir))


@stdlib_xfail(strict=True, reason=STDLIB_SERVER_LEAK)
def test_r_fd_2_victim_probe_server(any_loop, sock_dir):
    run(any_loop, probe_rounds(any_loop, "create_server", sock_dir))


# -- a protocol factory that raises ----------------------------------------------------------


def _stdlib_closes_sock_without_transport():
    import asyncio.base_events as be

    return "sock.close()" in inspect.getsource(be.BaseEventLoop._create_connection_transport)


@stdlib_xfail(
    not _stdlib_closes_sock_without_transport(),
    strict=True,
    reason="python/cpython#153133: the socket leaks when the protocol factory raises",
)
def test_failing_protocol_factory_leaks_no_socket(any_loop):
    class Boom(Exception):
        pass

    def factory():
        raise Boom

    async def main():
        accepted = []

        def server_side():
            accepted.append(StrictProtocol(any_loop))
            return accepted[-1]

        server = await any_loop.create_server(server_side, "127.0.0.1", 0)
        host, port = server.sockets[0].getsockname()
        before = fd_set()
        try:
            for _ in range(3):
                with pytest.raises(Boom):
                    await any_loop.create_connection(factory, host, port)
            # The server's ends close once it has accepted them and seen the
            # client's close, which takes as many polls as the loop needs.
            for _ in range(1000):
                if len(accepted) == 3 and all(proto.lost.done() for proto in accepted):
                    break
                await asyncio.sleep(0)
            for _ in range(5):
                await asyncio.sleep(0)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                gc.collect()
            leaked = fd_set() - before
            if leaked:
                close_leaked_sockets(before)
            assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
            assert not leaked
        finally:
            server.close()
            await server.wait_closed()

    run(any_loop, main())
