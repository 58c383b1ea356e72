"""What the loop contract's services do for transports and the sock_* helpers.

Transports learn whether their fd is watched (their repr, ``set_protocol``),
own their fd (attach/detach: ``add_reader`` refuses it), lend it to
``loop.sendfile`` and take it back, and share the loop's receive buffer,
all through ``snakeloop._core.contract`` members.  What asyncio shows of
this is compared with the stdlib loop; the buffer is snakeloop's own.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time

import pytest
from _loopkit import Raised, outcome, run_within

GUARD = 10.0  # a hang guard, never a timing assertion
DATA = bytes(range(256)) * 400  # 100 KiB, for the data_file fixture

run = run_within(GUARD)


class Quiet(asyncio.Protocol):
    def __init__(self, loop):
        self.lost = loop.create_future()
        self.data = []

    def data_received(self, data):
        self.data.append(data)

    def connection_lost(self, exc):
        self.lost.set_result(exc)


class Buffered(asyncio.BufferedProtocol):
    def __init__(self, loop):
        self.lost = loop.create_future()
        self.got = loop.create_future()
        self.buffer = bytearray(64)

    def get_buffer(self, sizehint):
        return self.buffer

    def buffer_updated(self, nbytes):
        if not self.got.done():
            self.got.set_result(bytes(self.buffer[:nbytes]))

    def connection_lost(self, exc):
        self.lost.set_result(exc)


async def _connect(loop):
    """A stream transport over one end of a socket pair, and the other end."""
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    transport, protocol = await loop.create_connection(lambda: Quiet(loop), sock=ours)
    await asyncio.sleep(0)  # reading starts after connection_made
    return transport, protocol, peer


async def _close(transport, protocol, peer):
    transport.abort()
    await protocol.lost
    peer.close()


def _state(transport):
    """The repr without the class name and fd, which differ between loops."""
    return re.sub(r"^<\S+ fd=\d+ ", "", repr(transport))


def test_stream_repr_follows_the_fd_registrations(any_loop):
    async def main():
        transport, protocol, peer = await _connect(any_loop)
        states = [_state(transport)]
        transport.write(b"x" * (4 * 1024 * 1024))  # more than the socket takes
        states.append(re.sub(r"bufsize=\d+", "bufsize=N", _state(transport)))
        transport.pause_reading()
        states.append(re.sub(r"bufsize=\d+", "bufsize=N", _state(transport)))
        await _close(transport, protocol, peer)
        return states

    assert run(any_loop, main()) == [
        "read=polling write=<idle, bufsize=0>>",
        "read=polling write=<polling, bufsize=N>>",
        "read=idle write=<polling, bufsize=N>>",
    ]


def test_set_protocol_hands_reads_to_a_buffered_protocol(any_loop):
    async def main():
        transport, protocol, peer = await _connect(any_loop)
        buffered = Buffered(any_loop)
        transport.set_protocol(buffered)
        peer.send(b"hello")
        got = await buffered.got
        transport.abort()
        await buffered.lost
        peer.close()
        return got, protocol.data

    assert run(any_loop, main()) == (b"hello", [])


def test_a_transport_owns_its_fd_until_it_is_closed(any_loop):
    async def main():
        transport, protocol, peer = await _connect(any_loop)
        fd = transport.get_extra_info("socket").fileno()
        while_open = outcome(any_loop.add_reader, fd, print)
        await _close(transport, protocol, peer)
        return while_open

    while_open = run(any_loop, main())
    assert isinstance(while_open, Raised) and while_open.type is RuntimeError
    assert re.fullmatch(r"File descriptor \d+ is used by transport <.*>", while_open.message)


def test_sendfile_gives_the_fd_back_to_the_transport(any_loop, data_file):
    async def main():
        transport, protocol, peer = await _connect(any_loop)
        fd = transport.get_extra_info("socket").fileno()
        reading = asyncio.ensure_future(_drain(any_loop, peer))
        sent = await any_loop.sendfile(transport, data_file)
        after = outcome(any_loop.add_reader, fd, print)
        transport.close()
        received = await reading
        await protocol.lost
        peer.close()
        return sent, received, after

    sent, received, after = run(any_loop, main())
    assert sent == received == len(DATA)
    assert isinstance(after, Raised) and after.type is RuntimeError
    assert "is used by transport" in after.message


async def _drain(loop, sock):
    total = 0
    while data := await loop.sock_recv(sock, 65536):
        total += len(data)
    return total


def test_a_cancelled_sock_recv_leaves_the_reader_that_replaced_it(any_loop):
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)

    async def main():
        first = asyncio.ensure_future(any_loop.sock_recv(b, 10))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(any_loop.sock_recv(b, 10))
        await asyncio.sleep(0)  # the second call's reader replaces the first's
        first.cancel()
        await asyncio.sleep(0)  # the first call unwinds
        a.send(b"data")
        return first.cancelled(), await second

    try:
        assert run(any_loop, main()) == (True, b"data")
    finally:
        a.close()
        b.close()


def test_a_cancelled_sock_sendall_leaves_the_writer_that_replaced_it(any_loop):
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    stuffed = 0
    while True:  # fill b's send buffer, so that sends wait
        try:
            stuffed += b.send(b"s" * 4096)
        except BlockingIOError:
            break

    async def main():
        first = asyncio.ensure_future(any_loop.sock_sendall(b, b"1" * 100_000))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(any_loop.sock_sendall(b, b"2" * 10))
        await asyncio.sleep(0)  # the second call's writer replaces the first's
        first.cancel()
        await asyncio.sleep(0)  # the first call unwinds
        received = 0
        while not second.done():
            try:
                received += len(a.recv(65536))
            except BlockingIOError:
                await asyncio.sleep(0.001)
        await second
        return first.cancelled()

    try:
        assert run(any_loop, main()) is True
    finally:
        a.close()
        b.close()


def _worker_done_before_finish(loop):
    """Make every _call_blocking of ``loop`` return only once its worker is done.

    That is the order a busy machine sometimes picks: the worker thread runs
    the whole call before the loop thread gets the GIL back.
    """
    call_blocking = loop._call_blocking

    def finished_first(func, *args):
        call = call_blocking(func, *args)
        call._future.exception()  # waits for the worker
        return call

    loop._call_blocking = finished_first


def test_native_sendfile_lets_the_loop_run_while_it_sends(any_loop, data_file):
    # asyncio waits for the socket after each send, so other callbacks run
    # before sendfile() returns; snakeloop's worker may be done before the
    # loop looks, and the loop must still get its iteration.
    if hasattr(any_loop, "_call_blocking"):
        _worker_done_before_finish(any_loop)

    async def main():
        transport, protocol, peer = await _connect(any_loop)
        reading = asyncio.ensure_future(_drain(any_loop, peer))
        ran = []
        any_loop.call_soon(ran.append, "other callback")
        sent = await any_loop.sendfile(transport, data_file)
        ran_during_sendfile = list(ran)
        transport.close()
        received = await reading
        await protocol.lost
        peer.close()
        return sent, received, ran_during_sendfile

    assert run(any_loop, main()) == (len(DATA), len(DATA), ["other callback"])


def test_a_blocking_call_that_is_over_still_yields_once(loop):
    async def main():
        call = loop._call_blocking(sum, (1, 2))
        while not call._future.done():
            time.sleep(0.001)  # the worker finishes while the loop thread waits
        ran = []
        loop.call_soon(ran.append, "other callback")
        cancelled = await call.finish()
        return cancelled, call.ran(), call.result(), list(ran)

    assert run(loop, main()) == (None, True, 3, ["other callback"])


# -- snakeloop's own: one receive buffer per loop -------------------------------


def test_the_receive_buffer_is_made_on_first_use_and_shared(loop):
    assert loop._shared_recv_view is None
    view = loop._shared_recv_buffer()
    assert isinstance(view, memoryview) and len(view) == 256 * 1024 and not view.readonly
    assert loop._shared_recv_buffer() is view


def test_each_loop_has_its_own_receive_buffer(loop):
    other = type(loop)()
    try:
        assert other._shared_recv_buffer() is not loop._shared_recv_buffer()
    finally:
        other.close()


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="Unix datagram sockets")
def test_unix_datagram_transports_read_into_the_loop_buffer(loop):
    async def main():
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        got = loop.create_future()

        class Proto(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                got.set_result(data)

        transport, _ = await loop.create_datagram_endpoint(Proto, sock=a)
        b.send(b"ping")
        data = await got
        shared = transport._recv_view is loop._shared_recv_buffer()
        transport.close()
        await asyncio.sleep(0)
        b.close()
        return data, shared

    assert run(loop, main()) == (b"ping", True)


def test_detach_leaves_another_owner_in_place(loop):
    async def main():
        transport, protocol, peer = await _connect(loop)
        fd = transport.get_extra_info("socket").fileno()
        stranger = asyncio.Transport()
        detached_stranger = loop._detach_transport(fd, stranger)
        still_refused = outcome(loop.add_reader, fd, print)
        detached_owner = loop._detach_transport(fd, transport)
        loop.add_reader(fd, print)  # nobody owns the fd now
        loop.remove_reader(fd)
        loop._attach_transport(fd, transport)
        await _close(transport, protocol, peer)
        detached_after_close = loop._detach_transport(fd, transport)
        return detached_stranger, still_refused, detached_owner, detached_after_close

    detached_stranger, still_refused, detached_owner, after_close = run(loop, main())
    assert detached_stranger is False and detached_owner is True
    assert after_close is False  # connection_lost detached it
    assert isinstance(still_refused, Raised) and still_refused.type is RuntimeError
