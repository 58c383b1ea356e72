"""The ``loop.sock_*`` coroutines, on snakeloop and on the stdlib loop.

Every test runs on both loops (``any_loop``); where the two are compared
directly, the stdlib result is the reference.  Cancellation tests check the
promise of the ``sock_*`` API that a cancelled call leaves no reader or
writer behind (``remove_reader``/``remove_writer`` return False), and that
the next call on the same socket works (R-CAN-2).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct

import pytest
from _loopkit import closing_socket_pair, differential, run_within

GUARD = 10.0  # seconds; a hang guard, never a timing assertion


run = run_within(GUARD)


@contextlib.contextmanager
def udp_pair():
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for s in (a, b):
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
        yield a, b
    finally:
        a.close()
        b.close()


def fill_stream(sock):
    """Write until the kernel takes no more; return the bytes written."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    total = 0
    chunk = b"x" * 65536
    size = len(chunk)
    while size:
        try:
            total += sock.send(chunk[:size])
        except BlockingIOError:
            size //= 2
    return total


def fill_datagrams(sock):
    """Send datagrams to the peer of a Unix datagram pair until it blocks."""
    n = 0
    while True:
        try:
            sock.send(b"d" * 1024)
        except BlockingIOError:
            return n
        n += 1


def nothing_registered(loop, fd):
    return not loop.remove_reader(fd) and not loop.remove_writer(fd)


async def recv_rest(loop, sock, got, expected):
    """Read on until ``expected`` arrived, starting from the ``got`` read so far.

    A stream recv may return fewer bytes than are waiting (a seeded loop does
    so on purpose); each read must be non-empty and continue the expected bytes.
    """
    got = bytes(got)
    assert got and expected.startswith(got), (got, expected)
    while len(got) < len(expected):
        more = await loop.sock_recv(sock, len(expected) - len(got))
        assert more and expected.startswith(got + more), (got, more, expected)
        got += more
    return got


# -- the plain operations --------------------------------------------------------


def test_recv_and_sendall_roundtrip(any_loop):
    with closing_socket_pair() as (a, b):

        async def main():
            await any_loop.sock_sendall(a, b"hello")
            first = await recv_rest(any_loop, b, await any_loop.sock_recv(b, 100), b"hello")
            buf = bytearray(10)
            await any_loop.sock_sendall(a, memoryview(b"world"))
            second = b""
            while len(second) < 5:
                n = await any_loop.sock_recv_into(b, buf)
                assert n > 0
                second += bytes(buf[:n])
            return first, second

        assert run(any_loop, main()) == (b"hello", b"world")
        assert nothing_registered(any_loop, b.fileno())


def test_recv_waits_for_data(any_loop):
    with closing_socket_pair() as (a, b):

        async def main():
            task = asyncio.ensure_future(any_loop.sock_recv(b, 100))
            await asyncio.sleep(0)
            assert not task.done()
            a.send(b"late")
            return await recv_rest(any_loop, b, await task, b"late")

        assert run(any_loop, main()) == b"late"
        assert nothing_registered(any_loop, b.fileno())


def test_recv_into_waits_for_data(any_loop):
    with closing_socket_pair() as (a, b):
        buf = bytearray(8)

        async def main():
            task = asyncio.ensure_future(any_loop.sock_recv_into(b, buf))
            await asyncio.sleep(0)
            assert not task.done()
            a.send(b"abc")
            n = await task
            return await recv_rest(any_loop, b, buf[:n], b"abc")

        assert run(any_loop, main()) == b"abc"
        assert nothing_registered(any_loop, b.fileno())


def test_recv_eof_returns_empty(any_loop):
    with closing_socket_pair() as (a, b):

        async def main():
            task = asyncio.ensure_future(any_loop.sock_recv(b, 100))
            await asyncio.sleep(0)
            a.shutdown(socket.SHUT_WR)
            return await task

        assert run(any_loop, main()) == b""


def test_recv_error_after_wait_is_raised(any_loop):
    with closing_socket_pair("tcp") as (client, server):

        async def main():
            task = asyncio.ensure_future(any_loop.sock_recv(server, 100))
            await asyncio.sleep(0)
            # An abortive close (RST) of the peer.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            return await task

        with pytest.raises(ConnectionResetError):
            run(any_loop, main())
        assert nothing_registered(any_loop, server.fileno())


def test_sendall_large_with_partial_sends(any_loop):
    payload = bytes(range(256)) * (16 * 1024)  # 4 MiB
    with closing_socket_pair() as (a, b):
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)

        async def reader():
            got = bytearray()
            while len(got) < len(payload):
                data = await any_loop.sock_recv(b, 65536)
                assert data
                got += data
            return bytes(got)

        async def main():
            rtask = asyncio.ensure_future(reader())
            await any_loop.sock_sendall(a, payload)
            return await rtask

        assert run(any_loop, main()) == payload
        assert nothing_registered(any_loop, a.fileno())


def test_sendall_of_wide_items_memoryview(any_loop):
    # A memoryview whose items are 4 bytes: every byte still goes out once.
    import array

    data = array.array("i", range(300_000))
    with closing_socket_pair() as (a, b):
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        expected = data.tobytes()

        async def reader():
            got = bytearray()
            while len(got) < len(expected):
                got += await any_loop.sock_recv(b, 65536)
            return bytes(got)

        async def main():
            rtask = asyncio.ensure_future(reader())
            await any_loop.sock_sendall(a, data.tobytes())
            return await rtask

        assert run(any_loop, main()) == expected


def test_sendall_error_is_raised(any_loop):
    with closing_socket_pair() as (a, b):
        fill_stream(a)
        with pytest.raises(OSError):

            async def main():
                task = asyncio.ensure_future(any_loop.sock_sendall(a, b"y" * 100_000))
                await asyncio.sleep(0)
                b.close()
                await task

            run(any_loop, main())
        assert not any_loop.remove_writer(a.fileno())


def test_recvfrom_sendto_and_recvfrom_into(any_loop):
    with udp_pair() as (a, b):

        async def main():
            n = await any_loop.sock_sendto(a, b"ping", b.getsockname())
            data, addr = await any_loop.sock_recvfrom(b, 100)
            buf = bytearray(16)
            await any_loop.sock_sendto(b, b"pong!", a.getsockname())
            nbytes, addr2 = await any_loop.sock_recvfrom_into(a, buf)
            got = bytes(buf[:nbytes])
            await any_loop.sock_sendto(b, b"0123456789", a.getsockname())
            cut, _ = await any_loop.sock_recvfrom_into(a, buf, 4)
            return n, data, addr, nbytes, got, addr2, cut, bytes(buf[:4])

        n, data, addr, nbytes, got, addr2, cut, head = run(any_loop, main())
        assert (n, data, addr) == (4, b"ping", a.getsockname())
        assert (nbytes, got, addr2) == (5, b"pong!", b.getsockname())
        assert (cut, head) == (4, b"0123")


def test_recvfrom_waits(any_loop):
    with udp_pair() as (a, b):

        async def main():
            t1 = asyncio.ensure_future(any_loop.sock_recvfrom(b, 100))
            buf = bytearray(100)
            t2 = asyncio.ensure_future(any_loop.sock_recvfrom_into(a, buf))
            await asyncio.sleep(0)
            assert not t1.done() and not t2.done()
            a.sendto(b"one", b.getsockname())
            b.sendto(b"two", a.getsockname())
            return await t1, await t2, bytes(buf[:3])

        (d1, _), (n2, _), got = run(any_loop, main())
        assert (d1, n2, got) == (b"one", 3, b"two")


def test_sendto_waits_when_the_buffer_is_full(any_loop, tmp_path):
    path = str(tmp_path / "peer")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as peer:
        peer.bind(path)
        peer.setblocking(False)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.connect(path)
            queued = fill_datagrams(sock)

            async def main():
                task = asyncio.ensure_future(any_loop.sock_sendto(sock, b"last", path))
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                assert not task.done()
                for _ in range(queued):
                    peer.recv(2048)
                return await task

            assert run(any_loop, main()) == 4
            assert peer.recv(100) == b"last"
            assert nothing_registered(any_loop, sock.fileno())


def test_connect_and_accept(any_loop):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(5)
        listener.setblocking(False)
        client = socket.socket()
        client.setblocking(False)
        with client:

            async def main():
                accept = asyncio.ensure_future(any_loop.sock_accept(listener))
                await asyncio.sleep(0)
                await any_loop.sock_connect(client, listener.getsockname())
                return await accept

            conn, addr = run(any_loop, main())
            with conn:
                assert conn.gettimeout() == 0  # asyncio makes it non-blocking
                assert addr == client.getsockname()
                assert client.getpeername() == listener.getsockname()
        assert nothing_registered(any_loop, listener.fileno())


def test_accept_ready_at_once(any_loop):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(5)
        listener.setblocking(False)
        with socket.create_connection(listener.getsockname()) as client:
            conn, addr = run(any_loop, any_loop.sock_accept(listener))
            with conn:
                assert conn.gettimeout() == 0
                assert addr == client.getsockname()


def test_connect_resolves_host_names(any_loop):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        client = socket.socket(socket.AF_INET)
        client.setblocking(False)
        with client:
            run(any_loop, any_loop.sock_connect(client, ("localhost", port)))
            assert client.getpeername() == ("127.0.0.1", port)


def test_connect_unix_path(any_loop, tmp_path):
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen(1)
        client = socket.socket(socket.AF_UNIX)
        client.setblocking(False)
        with client:
            run(any_loop, any_loop.sock_connect(client, path))
            assert client.getpeername() == path


def _refused_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connect_refused_message_matches_asyncio():
    port = _refused_port()

    def scenario(loop):
        with socket.socket() as sock:
            sock.setblocking(False)
            try:
                loop.run_until_complete(loop.sock_connect(sock, ("127.0.0.1", port)))
            except OSError as exc:
                return type(exc), exc.errno, str(exc)
            assert nothing_registered(loop, sock.fileno())
            return None

    ref, got = differential(scenario)
    assert got == ref
    assert ref[1][0] is ConnectionRefusedError
    assert "Connect call failed" in ref[1][2]


# -- argument checks -------------------------------------------------------------


def _calls(loop, sock, peer_addr):
    return {
        "sock_recv": lambda: loop.sock_recv(sock, 10),
        "sock_recv_into": lambda: loop.sock_recv_into(sock, bytearray(10)),
        "sock_recvfrom": lambda: loop.sock_recvfrom(sock, 10),
        "sock_recvfrom_into": lambda: loop.sock_recvfrom_into(sock, bytearray(10)),
        "sock_sendall": lambda: loop.sock_sendall(sock, b"x"),
        "sock_sendto": lambda: loop.sock_sendto(sock, b"x", peer_addr),
        "sock_connect": lambda: loop.sock_connect(sock, peer_addr),
        "sock_accept": lambda: loop.sock_accept(sock),
    }


# Every sock_* coroutine, as named in _calls.
SOCK_METHODS = [
    "sock_recv",
    "sock_recv_into",
    "sock_recvfrom",
    "sock_recvfrom_into",
    "sock_sendall",
    "sock_sendto",
    "sock_connect",
    "sock_accept",
]


@pytest.mark.parametrize("method", SOCK_METHODS)
def test_debug_mode_refuses_blocking_sockets(method):
    def scenario(loop):
        loop.set_debug(True)
        with socket.socket() as sock:
            coro = _calls(loop, sock, ("127.0.0.1", 1))[method]()
            try:
                loop.run_until_complete(coro)
            except ValueError as exc:
                return str(exc)
            return "no error"

    ref, got = differential(scenario)
    assert got == ref == ("ok", "the socket must be non-blocking")


@pytest.mark.parametrize("method", SOCK_METHODS)
def test_ssl_sockets_are_refused(any_loop, method):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    with ctx.wrap_socket(socket.socket(), do_handshake_on_connect=False) as sock:
        coro = _calls(any_loop, sock, ("127.0.0.1", 1))[method]()
        with pytest.raises(TypeError, match="^Socket cannot be of type SSLSocket$"):
            any_loop.run_until_complete(coro)


def test_fd_owned_by_a_transport_is_refused(any_loop):
    """A sock_* call that has to wait on a transport's fd raises RuntimeError."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))

        async def main():
            transport, _ = await any_loop.create_datagram_endpoint(
                asyncio.DatagramProtocol, sock=sock
            )
            try:
                with pytest.raises(RuntimeError, match="is used by transport"):
                    await any_loop.sock_recvfrom(sock, 100)
            finally:
                transport.close()
            await asyncio.sleep(0)

        run(any_loop, main())


# -- cancellation leaves nothing registered (R-CAN-2) ----------------------------


def _cancel_and_wait(loop, coro_factory, *, then=None):
    async def main():
        task = asyncio.ensure_future(coro_factory())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        if then is not None:
            return await then()
        return None

    return run(loop, main())


@pytest.mark.parametrize("method", ["sock_recv", "sock_recv_into"])
def test_cancelled_recv_leaves_no_reader(any_loop, method):
    with closing_socket_pair() as (a, b):
        call = _calls(any_loop, b, None)[method]

        async def then():
            a.send(b"after")
            return await recv_rest(any_loop, b, await any_loop.sock_recv(b, 100), b"after")

        assert _cancel_and_wait(any_loop, call, then=then) == b"after"
        assert nothing_registered(any_loop, b.fileno())


@pytest.mark.parametrize("method", ["sock_recvfrom", "sock_recvfrom_into"])
def test_cancelled_recvfrom_leaves_no_reader(any_loop, method):
    with udp_pair() as (a, b):
        call = _calls(any_loop, b, None)[method]

        async def then():
            a.sendto(b"after", b.getsockname())
            return await any_loop.sock_recvfrom(b, 100)

        assert _cancel_and_wait(any_loop, call, then=then) == (b"after", a.getsockname())
        assert nothing_registered(any_loop, b.fileno())


def test_cancelled_sendall_leaves_no_writer(any_loop):
    with closing_socket_pair() as (a, b):
        fill_stream(a)

        async def then():
            # Drain the peer; a new sendall gets through.
            while True:
                try:
                    if not b.recv(65536):
                        break
                except BlockingIOError:
                    break
            await any_loop.sock_sendall(a, b"next")
            return True

        assert _cancel_and_wait(
            any_loop, lambda: any_loop.sock_sendall(a, b"z" * 200_000), then=then
        )
        assert nothing_registered(any_loop, a.fileno())


def test_cancelled_sendto_leaves_no_writer(any_loop, tmp_path):
    path = str(tmp_path / "peer")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as peer:
        peer.bind(path)
        peer.setblocking(False)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.connect(path)
            fill_datagrams(sock)
            _cancel_and_wait(any_loop, lambda: any_loop.sock_sendto(sock, b"x", path))
            assert nothing_registered(any_loop, sock.fileno())


def test_cancelled_connect_leaves_no_writer(any_loop):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        addr = listener.getsockname()
        # Fill the accept queue: a further connect stays in progress.
        filler = socket.socket()
        filler.setblocking(False)
        with filler, socket.socket() as sock:
            with contextlib.suppress(BlockingIOError):
                filler.connect(addr)
            sock.setblocking(False)

            async def wait_filler():
                await any_loop.sock_connect(filler, addr)

            run(any_loop, wait_filler())
            _cancel_and_wait(any_loop, lambda: any_loop.sock_connect(sock, addr))
            assert nothing_registered(any_loop, sock.fileno())


def test_cancelled_accept_leaves_no_reader(any_loop):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)

        async def then():
            client = socket.socket()
            client.setblocking(False)
            with client:
                accept = asyncio.ensure_future(any_loop.sock_accept(listener))
                await any_loop.sock_connect(client, listener.getsockname())
                conn, _ = await accept
                conn.close()
            return True

        assert _cancel_and_wait(any_loop, lambda: any_loop.sock_accept(listener), then=then)
        assert nothing_registered(any_loop, listener.fileno())


def test_wait_for_timeout_on_recv_leaves_no_reader(any_loop):
    with closing_socket_pair() as (a, b):

        async def main():
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(any_loop.sock_recv(b, 10), 0)

        run(any_loop, main())
        assert nothing_registered(any_loop, b.fileno())


def test_cancel_racing_with_new_call_keeps_the_new_reader(any_loop):
    """A new sock_recv issued before the cancelled one unwinds keeps its reader."""
    with closing_socket_pair() as (a, b):

        async def main():
            first = asyncio.ensure_future(any_loop.sock_recv(b, 10))
            await asyncio.sleep(0)
            first.cancel()
            second = asyncio.ensure_future(any_loop.sock_recv(b, 10))
            await asyncio.sleep(0)  # second registers, first unwinds
            await asyncio.sleep(0)
            a.send(b"data")
            return first.cancelled(), await recv_rest(any_loop, b, await second, b"data")

        assert run(any_loop, main()) == (True, b"data")
        assert nothing_registered(any_loop, b.fileno())


def test_many_cancel_cycles_leave_nothing(any_loop):
    with closing_socket_pair() as (a, b):

        async def main():
            for _ in range(200):
                task = asyncio.ensure_future(any_loop.sock_recv(b, 10))
                await asyncio.sleep(0)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            a.send(b"end")
            return await recv_rest(any_loop, b, await any_loop.sock_recv(b, 10), b"end")

        assert run(any_loop, main()) == b"end"
        assert nothing_registered(any_loop, b.fileno())


# -- large reads go through the shared buffer -------------------------------------


@pytest.mark.parametrize("n", [65536, 65537, 200_000, 262144, 262145, 1_000_000])
def test_large_recv_sizes(any_loop, n):
    payload = bytes(range(256)) * 1200  # 300 KiB
    with closing_socket_pair() as (a, b):
        a.setblocking(True)
        a.sendall(payload[:100_000])

        async def main():
            first = await any_loop.sock_recv(b, n)
            late = asyncio.ensure_future(any_loop.sock_recv(b, n))
            await asyncio.sleep(0)
            # From a thread: how much the first read took is the kernel's (or a seed's)
            # choice, so the rest may not fit in the socket's buffer before it is read.
            sender = asyncio.ensure_future(asyncio.to_thread(a.sendall, payload[100_000:]))
            second = await late
            rest = bytearray()
            while len(first) + len(second) + len(rest) < len(payload):
                rest += await any_loop.sock_recv(b, 65536)
            await sender
            return first, second, bytes(rest)

        first, second, rest = run(any_loop, main())
        assert 0 < len(first) <= min(n, 100_000)
        assert 0 < len(second) <= n
        assert first + second + rest == payload


@pytest.mark.parametrize("n", [1000, 70000, 262144])
def test_large_recvfrom_sizes(any_loop, n, tmp_path):
    # A Unix datagram can be bigger than a UDP one.
    path = str(tmp_path / "big")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as rx:
        rx.bind(path)
        rx.setblocking(False)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as tx:
            tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            data = bytes(range(256)) * 400  # 100 KiB

            async def main():
                late = asyncio.ensure_future(any_loop.sock_recvfrom(rx, n))
                await asyncio.sleep(0)
                tx.sendto(data, path)
                got, _ = await late
                tx.sendto(data[:10], path)
                again, _ = await any_loop.sock_recvfrom(rx, n)
                return got, again

            got, again = run(any_loop, main())
            assert got == data[:n]
            assert again == data[:10]


# -- many concurrent connects (R-MC-3) ----------------------------------------------


def _connect_storm(loop, n, max_delay):
    import random

    rng = random.Random(7)

    async def main():
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(4096)
        listener.setblocking(False)
        addr = listener.getsockname()
        accepted = []

        async def serve():
            while True:
                conn, _ = await loop.sock_accept(listener)
                accepted.append(conn)
                loop.call_later(rng.random() * max_delay, conn.close)

        server = asyncio.ensure_future(serve())
        clients = [socket.socket() for _ in range(n)]
        for c in clients:
            c.setblocking(False)
        try:
            results = await asyncio.gather(
                *(loop.sock_connect(c, addr) for c in clients), return_exceptions=True
            )
        finally:
            server.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await server
            for c in clients:
                c.close()
            listener.close()
            await asyncio.sleep(max_delay)
            for conn in accepted:
                conn.close()
        return results

    return run(loop, main(), timeout=60)


def test_concurrent_connects_all_resolve(any_loop):
    results = _connect_storm(any_loop, 500, 0.005)
    kinds = {type(r) for r in results}
    assert kinds <= {type(None), ConnectionRefusedError, ConnectionResetError}


@pytest.mark.stress
def test_concurrent_connects_all_resolve_5k(any_loop):
    results = _connect_storm(any_loop, 5000, 0.05)
    kinds = {type(r) for r in results}
    assert kinds <= {type(None), ConnectionRefusedError, ConnectionResetError}
