"""Datagram endpoints and their transport, on snakeloop and on the stdlib loop.

Behaviour is compared with the stdlib loop wherever asyncio's own is the
contract (messages, callback order, flow-control events).  The few places
where snakeloop deliberately differs are tested on snakeloop alone and say
so.  Flow control needs a socket whose sends block: a Unix datagram socket
whose peer does not read does that deterministically (a UDP socket on
loopback drops instead of blocking).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import sys

import pytest
from _loopkit import Raised, capture_logs, differential, outcome, run_within, unix_dgram_pair

GUARD = 10.0  # a hang guard, never a timing assertion
PY313 = sys.version_info >= (3, 13)
HEADER = 8 if PY313 else 0
HAS_IPV6 = socket.has_ipv6


run = run_within(GUARD)


def ipv6_loopback_works():
    if not HAS_IPV6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


class Recorder(asyncio.DatagramProtocol):
    """Records every protocol call, in order."""

    def __init__(self, loop, echo=False):
        self.events = []
        self.datagrams = []
        self.errors = []
        self.echo = echo
        self.transport = None
        self.lost = loop.create_future()
        self.arrived = asyncio.Event()

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("made")

    def datagram_received(self, data, addr):
        self.events.append("datagram")
        self.datagrams.append((data, addr))
        self.arrived.set()
        if self.echo:
            self.transport.sendto(b"echo:" + data, addr)

    def error_received(self, exc):
        self.events.append(("error", type(exc)))
        self.errors.append(exc)
        self.arrived.set()

    def pause_writing(self):
        self.events.append(("pause", self.transport.get_write_buffer_size()))

    def resume_writing(self):
        self.events.append(("resume", self.transport.get_write_buffer_size()))

    def connection_lost(self, exc):
        self.events.append(("lost", exc))
        self.lost.set_result(exc)

    async def next_datagram(self):
        while not self.datagrams:
            self.arrived.clear()
            await self.arrived.wait()
        return self.datagrams.pop(0)


async def wait_for_error(proto):
    while not proto.errors:
        proto.arrived.clear()
        await proto.arrived.wait()
    return proto.errors.pop(0)


async def endpoint(loop, **kwargs):
    return await loop.create_datagram_endpoint(lambda: Recorder(loop), **kwargs)


async def close(transport, proto):
    transport.close()
    await proto.lost


# -- endpoints and the basic transport -------------------------------------------


def test_echo_between_a_server_and_a_connected_client(any_loop):
    async def main():
        s_tr, s_proto = await any_loop.create_datagram_endpoint(
            lambda: Recorder(any_loop, echo=True), local_addr=("127.0.0.1", 0)
        )
        addr = s_tr.get_extra_info("sockname")
        c_tr, c_proto = await endpoint(any_loop, remote_addr=addr)
        assert isinstance(s_tr, asyncio.Transport)
        # asyncio's datagram transport is a DatagramTransport from 3.12 on
        # (tests/test_transport_classes.py compares every transport's ABCs).
        assert isinstance(s_tr, asyncio.DatagramTransport) == (sys.version_info >= (3, 12))
        assert c_tr.get_extra_info("peername") == addr
        assert s_tr.get_extra_info("peername") is None
        assert c_tr.get_extra_info("socket").family == socket.AF_INET
        c_tr.sendto(b"hello")
        data, from_addr = await c_proto.next_datagram()
        assert from_addr == addr
        got = (data, await s_proto.next_datagram())
        await close(c_tr, c_proto)
        await close(s_tr, s_proto)
        return got, c_proto.events, s_proto.events

    (reply, (request, client_addr)), c_events, s_events = run(any_loop, main())
    assert reply == b"echo:hello" and request == b"hello"
    assert c_events == ["made", "datagram", ("lost", None)]
    assert s_events == ["made", "datagram", ("lost", None)]


@pytest.mark.skipif(not ipv6_loopback_works(), reason="no IPv6 loopback")
def test_ipv6_endpoints(any_loop):
    async def main():
        s_tr, s_proto = await any_loop.create_datagram_endpoint(
            lambda: Recorder(any_loop, echo=True), local_addr=("::1", 0)
        )
        c_tr, c_proto = await endpoint(any_loop, remote_addr=s_tr.get_extra_info("sockname")[:2])
        c_tr.sendto(b"six")
        data, _ = await c_proto.next_datagram()
        await close(c_tr, c_proto)
        await close(s_tr, s_proto)
        return data

    assert run(any_loop, main()) == b"echo:six"


def test_unconnected_endpoint_sends_to_many(any_loop):
    async def main():
        a_tr, a_proto = await endpoint(any_loop, local_addr=("127.0.0.1", 0))
        b_tr, b_proto = await endpoint(any_loop, local_addr=("127.0.0.1", 0))
        c_tr, c_proto = await endpoint(any_loop, family=socket.AF_INET)
        c_tr.sendto(b"to a", a_tr.get_extra_info("sockname"))
        c_tr.sendto(bytearray(b"to b"), b_tr.get_extra_info("sockname"))
        c_tr.sendto(memoryview(b"xx to a again")[3:], a_tr.get_extra_info("sockname"))
        got = [
            (await a_proto.next_datagram())[0],
            (await b_proto.next_datagram())[0],
            (await a_proto.next_datagram())[0],
        ]
        for tr, proto in ((a_tr, a_proto), (b_tr, b_proto), (c_tr, c_proto)):
            await close(tr, proto)
        return got

    assert run(any_loop, main()) == [b"to a", b"to b", b"to a again"]


def test_existing_socket(any_loop):
    async def main():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        tr, proto = await endpoint(any_loop, sock=sock)
        assert sock.gettimeout() == 0  # made non-blocking
        assert tr.get_extra_info("sockname") == sock.getsockname()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
            peer.sendto(b"in", sock.getsockname())
            data, addr = await proto.next_datagram()
        await close(tr, proto)
        return data, sock.fileno()

    data, fileno = run(any_loop, main())
    assert data == b"in"
    assert fileno == -1  # the transport closed the socket


def test_extra_info_and_repr(any_loop):
    async def main():
        tr, proto = await endpoint(any_loop, local_addr=("127.0.0.1", 0))
        info = (
            tr.get_extra_info("sockname"),
            tr.get_extra_info("peername"),
            tr.get_extra_info("nothing", "default"),
        )
        sock = tr.get_extra_info("socket")
        text = repr(tr)
        await close(tr, proto)
        return info, sock, text, repr(tr)

    (sockname, peername, default), sock, text, closed_text = run(any_loop, main())
    assert sockname[0] == "127.0.0.1" and peername is None and default == "default"
    assert sock.type == socket.SOCK_DGRAM
    assert f"fd={sock.fileno()}" in text or "fd=" in text
    assert "read=polling" in text and "write=<idle, bufsize=0>" in text
    assert "closed" in closed_text


def test_write_is_not_a_datagram_method(any_loop):
    async def main():
        tr, proto = await endpoint(any_loop, family=socket.AF_INET)
        try:
            with pytest.raises(NotImplementedError):
                tr.write(b"x")
        finally:
            await close(tr, proto)

    run(any_loop, main())


def test_sendto_checks_match_asyncio():
    def scenario(loop):
        async def main():
            s_tr, s_proto = await endpoint(loop, local_addr=("127.0.0.1", 0))
            addr = s_tr.get_extra_info("sockname")
            c_tr, c_proto = await endpoint(loop, remote_addr=addr)
            results = []
            for args in (("text",), (123,), (b"x", ("127.0.0.1", 1)), (b"ok", addr), (b"ok",)):
                try:
                    c_tr.sendto(*args)
                    results.append("sent")
                except Exception as exc:  # noqa: BLE001 - compared, not handled
                    results.append(Raised(exc).message.replace(str(addr[1]), "PORT"))
            await close(c_tr, c_proto)
            await close(s_tr, s_proto)
            return results

        return loop.run_until_complete(main())

    ref, got = differential(scenario)
    assert got == ref
    assert ref[1][0] == "data argument must be a bytes-like object, not 'str'"
    assert ref[1][2] == "Invalid address: must be None or ('127.0.0.1', PORT)"


def test_empty_datagrams_follow_the_running_asyncio():
    def scenario(loop):
        async def main():
            s_tr, s_proto = await endpoint(loop, local_addr=("127.0.0.1", 0))
            c_tr, c_proto = await endpoint(loop, remote_addr=s_tr.get_extra_info("sockname"))
            c_tr.sendto(b"")
            c_tr.sendto(b"marker")
            first = (await s_proto.next_datagram())[0]
            await close(c_tr, c_proto)
            await close(s_tr, s_proto)
            return first

        return loop.run_until_complete(main())

    ref, got = differential(scenario)
    assert got == ref == ("ok", b"" if PY313 else b"marker")


def test_sendto_without_address_on_unconnected_endpoint_is_fatal(any_loop, loop_errors):
    """asyncio treats the TypeError from socket.sendto as a fatal error."""

    async def main():
        tr, proto = await endpoint(any_loop, family=socket.AF_INET)
        tr.sendto(b"nowhere")
        exc = await proto.lost
        return exc

    exc = run(any_loop, main())
    assert isinstance(exc, TypeError)
    assert loop_errors.messages() == ["Fatal write error on datagram transport"]


def test_error_received_for_refused_port(any_loop):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        closed_addr = s.getsockname()

    async def main():
        tr, proto = await endpoint(any_loop, remote_addr=closed_addr)
        tr.sendto(b"anyone?")
        exc = await wait_for_error(proto)
        # The transport carries on after the error.
        assert not tr.is_closing()
        await close(tr, proto)
        return exc, proto.events

    exc, events = run(any_loop, main())
    assert isinstance(exc, ConnectionRefusedError)
    assert events[0] == "made" and events[-1] == ("lost", None)


def test_oversized_datagram_gives_error_received(any_loop):
    async def main():
        s_tr, s_proto = await endpoint(any_loop, local_addr=("127.0.0.1", 0))
        c_tr, c_proto = await endpoint(any_loop, remote_addr=s_tr.get_extra_info("sockname"))
        c_tr.sendto(b"x" * 65508)
        exc = c_proto.errors[0] if c_proto.errors else None
        c_tr.sendto(b"y" * 65507)  # the largest UDP/IPv4 payload still goes
        data, _ = await s_proto.next_datagram()
        await close(c_tr, c_proto)
        await close(s_tr, s_proto)
        return exc, len(data)

    exc, size = run(any_loop, main())
    assert isinstance(exc, OSError) and exc.errno == 90  # EMSGSIZE
    assert size == 65507


def test_exception_in_datagram_received_goes_to_the_handler(any_loop, loop_errors):
    class Boom(Recorder):
        def datagram_received(self, data, addr):
            super().datagram_received(data, addr)
            if data == b"boom":
                raise ZeroDivisionError

    async def main():
        tr, proto = await any_loop.create_datagram_endpoint(
            lambda: Boom(any_loop), local_addr=("127.0.0.1", 0)
        )
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
            peer.sendto(b"boom", tr.get_extra_info("sockname"))
            await proto.next_datagram()
            peer.sendto(b"fine", tr.get_extra_info("sockname"))
            data, _ = await proto.next_datagram()
        await close(tr, proto)
        return data

    assert run(any_loop, main()) == b"fine"
    assert [type(c.get("exception")) for c in loop_errors] == [ZeroDivisionError]


# -- reading control ---------------------------------------------------------------


def test_pause_and_resume_reading(any_loop):
    async def main():
        tr, proto = await endpoint(any_loop, local_addr=("127.0.0.1", 0))
        addr = tr.get_extra_info("sockname")
        assert tr.is_reading()
        tr.pause_reading()
        tr.pause_reading()  # twice is fine
        assert not tr.is_reading()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
            peer.sendto(b"one", addr)
            peer.sendto(b"two", addr)
            for _ in range(5):
                await asyncio.sleep(0)
            held = list(proto.datagrams)
            tr.resume_reading()
            tr.resume_reading()
            first = await proto.next_datagram()
            second = await proto.next_datagram()
        await close(tr, proto)
        tr.resume_reading()  # no effect once closed
        return held, first[0], second[0], tr.is_reading()

    assert run(any_loop, main()) == ([], b"one", b"two", False)


def test_pause_reading_in_connection_made(any_loop):
    class PauseAtOnce(Recorder):
        def connection_made(self, transport):
            super().connection_made(transport)
            transport.pause_reading()

    async def main():
        tr, proto = await any_loop.create_datagram_endpoint(
            lambda: PauseAtOnce(any_loop), local_addr=("127.0.0.1", 0)
        )
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
            peer.sendto(b"held", tr.get_extra_info("sockname"))
            for _ in range(5):
                await asyncio.sleep(0)
            held = list(proto.datagrams)
            tr.resume_reading()
            data, _ = await proto.next_datagram()
        await close(tr, proto)
        return held, data

    assert run(any_loop, main()) == ([], b"held")


# -- write buffering and flow control -------------------------------------------------


def drain(peer):
    n = 0
    while True:
        try:
            peer.recv(70000)
        except BlockingIOError:
            return n
        n += 1


def flow_control_scenario(tmp_path, loop):
    sock, peer, path = unix_dgram_pair(tmp_path)
    with peer:

        async def main():
            tr, proto = await endpoint(loop, sock=sock)
            tr.set_write_buffer_limits(high=4000, low=1000)
            sent = 0
            while len(proto.events) == 1:  # until pause_writing
                tr.sendto(b"p" * 500)
                sent += 1
            queued = tr.get_write_buffer_size()
            received = 0
            # (Not "until the buffer size is 0": 3.13.0's asyncio never gets
            # back to 0, it forgets the 8 header bytes when it sends.)
            while received < sent:
                received += drain(peer)
                await asyncio.sleep(0)
            await close(tr, proto)
            return proto.events, queued, sent

        return run(loop, main())


def test_flow_control_events_match_asyncio(tmp_path):
    ref, got = differential(lambda loop: flow_control_scenario(tmp_path, loop))
    assert got[0] == "ok", got
    events, queued, received = got[1]
    ref_events = ref[1][0]
    kinds = [e[0] if isinstance(e, tuple) else e for e in events]
    assert kinds == [k[0] if isinstance(k, tuple) else k for k in ref_events]
    assert kinds == ["made", "pause", "resume", "lost"]
    assert events[1][1] > 4000  # paused once above the high-water mark
    assert events[2][1] <= 1000  # resumed at or below the low-water mark
    assert queued == events[1][1]


def test_write_buffer_accounting(loop, tmp_path):
    """Each queued datagram counts its length (plus 8 header bytes on 3.13+)."""
    sock, peer, path = unix_dgram_pair(tmp_path)
    with peer:

        async def main():
            tr, proto = await endpoint(loop, sock=sock)
            while not tr.get_write_buffer_size():
                tr.sendto(b"a" * 100)
            sizes = [tr.get_write_buffer_size()]
            tr.sendto(b"b" * 50)
            tr.sendto(bytearray(b"c" * 7))
            sizes.append(tr.get_write_buffer_size())
            while tr.get_write_buffer_size():
                drain(peer)
                await asyncio.sleep(0)
            sizes.append(tr.get_write_buffer_size())
            await close(tr, proto)
            return sizes

        assert run(loop, main()) == [100 + HEADER, 157 + 3 * HEADER, 0]


def test_queued_datagrams_keep_their_order_and_content(any_loop, tmp_path):
    sock, peer, path = unix_dgram_pair(tmp_path)
    with peer:

        async def main():
            tr, proto = await endpoint(any_loop, sock=sock)
            buf = bytearray(8)
            for i in range(3000):
                buf[:] = i.to_bytes(8, "big")
                tr.sendto(buf)  # the transport must copy what it queues
            assert tr.get_write_buffer_size() > 0
            seen = []
            while len(seen) < 3000:
                while True:
                    try:
                        seen.append(int.from_bytes(peer.recv(100), "big"))
                    except BlockingIOError:
                        break
                await asyncio.sleep(0)
            await close(tr, proto)
            return seen

        assert run(any_loop, main()) == list(range(3000))


def test_close_sends_the_queue_before_connection_lost(any_loop, tmp_path):
    sock, peer, path = unix_dgram_pair(tmp_path)
    with peer:

        async def main():
            tr, proto = await endpoint(any_loop, sock=sock)
            n = 0
            while not tr.get_write_buffer_size():
                tr.sendto(n.to_bytes(4, "big"))
                n += 1
            for _ in range(100):
                tr.sendto(n.to_bytes(4, "big"))
                n += 1
            tr.close()
            assert tr.is_closing()
            got = []
            while not proto.lost.done():
                while True:
                    try:
                        got.append(int.from_bytes(peer.recv(100), "big"))
                    except BlockingIOError:
                        break
                await asyncio.sleep(0)
            got.extend(int.from_bytes(d, "big") for d in iter_recv(peer))
            return n, got, proto.events

        n, got, events = run(any_loop, main())
        assert got == list(range(n))
        assert events == ["made", ("lost", None)]


def iter_recv(sock):
    while True:
        try:
            yield sock.recv(100)
        except BlockingIOError:
            return


def test_abort_drops_the_queue(any_loop, tmp_path):
    sock, peer, path = unix_dgram_pair(tmp_path)
    with peer:

        async def main():
            tr, proto = await endpoint(any_loop, sock=sock)
            while not tr.get_write_buffer_size():
                tr.sendto(b"q" * 10)
            tr.abort()
            tr.abort()
            tr.close()
            assert tr.is_closing()
            exc = await proto.lost
            return exc, proto.events

        exc, events = run(any_loop, main())
        assert exc is None
        assert events == ["made", ("lost", None)]


def test_abort_resets_the_buffer_size(loop, tmp_path):
    """snakeloop: after abort() the buffer is empty and says so (asyncio keeps the count)."""
    sock, peer, path = unix_dgram_pair(tmp_path)
    with peer:

        async def main():
            tr, proto = await endpoint(loop, sock=sock)
            while not tr.get_write_buffer_size():
                tr.sendto(b"q" * 10)
            tr.abort()
            assert tr.get_write_buffer_size() == 0
            await proto.lost

        run(loop, main())


def test_close_is_idempotent_and_connection_lost_runs_once(any_loop):
    async def main():
        tr, proto = await endpoint(any_loop, local_addr=("127.0.0.1", 0))
        tr.close()
        tr.close()
        tr.abort()
        await proto.lost
        for _ in range(3):
            await asyncio.sleep(0)
        return proto.events

    assert run(any_loop, main()) == ["made", ("lost", None)]


def test_sendto_after_close_warns_past_the_threshold(caplog):
    def scenario(loop):
        async def main():
            s_tr, s_proto = await endpoint(loop, local_addr=("127.0.0.1", 0))
            c_tr, c_proto = await endpoint(loop, remote_addr=s_tr.get_extra_info("sockname"))
            await close(c_tr, c_proto)
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="asyncio"):
                for _ in range(10):
                    c_tr.sendto(b"late")
            warnings = [r.getMessage() for r in caplog.records]
            await close(s_tr, s_proto)
            return warnings, s_proto.datagrams

        return loop.run_until_complete(main())

    ref, got = differential(scenario)
    assert got == ref
    assert ref[1] == (["socket.send() raised exception."] * 6, [])


def test_sendto_after_close_unconnected_sends_until_connection_lost(loop, caplog):
    """An unconnected endpoint sends while it closes, as asyncio's does; once
    connection_lost came, snakeloop counts and drops what follows.

    (asyncio raises AttributeError on its socket, gone by then, and reports a
    fatal write error; see the next test for the closing part against it.)
    """

    async def main():
        s_tr, s_proto = await endpoint(loop, local_addr=("127.0.0.1", 0))
        addr = s_tr.get_extra_info("sockname")
        c_tr, c_proto = await endpoint(loop, family=socket.AF_INET)
        c_tr.close()
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            for _ in range(10):
                c_tr.sendto(b"late", addr)
            await c_proto.lost
            c_tr.sendto(b"later", addr)
        while len(s_proto.datagrams) < 10:  # the run's guard bounds this
            await asyncio.sleep(0.001)
        for _ in range(5):
            await asyncio.sleep(0)
        await close(s_tr, s_proto)
        return [data for data, _ in s_proto.datagrams]

    assert run(loop, main()) == [b"late"] * 10
    # One dropped after connection_lost: under the threshold of the warning.
    assert [r.getMessage() for r in caplog.records] == []


def test_set_write_buffer_limits_checks(any_loop):
    async def main():
        tr, proto = await endpoint(any_loop, family=socket.AF_INET)
        try:
            assert tr.get_write_buffer_limits() == (16384, 65536)
            tr.set_write_buffer_limits(high=100)
            assert tr.get_write_buffer_limits() == (25, 100)
            with pytest.raises(ValueError, match="must be >= low"):
                tr.set_write_buffer_limits(high=0, low=1)
        finally:
            await close(tr, proto)

    run(any_loop, main())


# -- create_datagram_endpoint options and errors ------------------------------------


def test_socket_options_follow_the_arguments(any_loop):
    async def main():
        plain, p1 = await endpoint(any_loop, local_addr=("127.0.0.1", 0))
        tuned, p2 = await endpoint(
            any_loop, local_addr=("127.0.0.1", 0), reuse_port=True, allow_broadcast=True
        )
        try:
            opts = []
            for tr in (plain, tuned):
                s = tr.get_extra_info("socket")
                opts.append(
                    (
                        bool(s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)),
                        bool(s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)),
                        bool(s.getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST)),
                    )
                )
            return opts
        finally:
            await close(plain, p1)
            await close(tuned, p2)

    assert run(any_loop, main()) == [(False, False, False), (False, True, True)]


def test_reuse_port_shares_an_address(any_loop):
    async def main():
        a, pa = await endpoint(any_loop, local_addr=("127.0.0.1", 0), reuse_port=True)
        addr = a.get_extra_info("sockname")
        b, pb = await endpoint(any_loop, local_addr=addr, reuse_port=True)
        same = b.get_extra_info("sockname") == addr
        await close(a, pa)
        await close(b, pb)
        return same

    assert run(any_loop, main()) is True


def test_allow_broadcast_with_remote_addr_does_not_connect(any_loop):
    async def main():
        s_tr, s_proto = await endpoint(any_loop, local_addr=("127.0.0.1", 0))
        addr = s_tr.get_extra_info("sockname")
        c_tr, c_proto = await endpoint(any_loop, remote_addr=addr, allow_broadcast=True)
        peer = c_tr.get_extra_info("peername")
        c_tr.sendto(b"default destination")
        data, _ = await s_proto.next_datagram()
        with pytest.raises(ValueError, match="Invalid address"):
            c_tr.sendto(b"x", ("127.0.0.1", 9))
        await close(c_tr, c_proto)
        await close(s_tr, s_proto)
        return peer, data

    assert run(any_loop, main()) == (None, b"default destination")


def test_local_and_remote_together(any_loop):
    async def main():
        s_tr, s_proto = await endpoint(any_loop, local_addr=("127.0.0.1", 0))
        addr = s_tr.get_extra_info("sockname")
        c_tr, c_proto = await endpoint(any_loop, local_addr=("127.0.0.1", 0), remote_addr=addr)
        c_tr.sendto(b"both")
        data, from_addr = await s_proto.next_datagram()
        same = from_addr == c_tr.get_extra_info("sockname")
        await close(c_tr, c_proto)
        await close(s_tr, s_proto)
        return data, same

    assert run(any_loop, main()) == (b"both", True)


def test_remote_addr_by_name(any_loop):
    async def main():
        s_tr, s_proto = await endpoint(any_loop, local_addr=("127.0.0.1", 0))
        port = s_tr.get_extra_info("sockname")[1]
        c_tr, c_proto = await endpoint(
            any_loop, remote_addr=("localhost", port), family=socket.AF_INET
        )
        c_tr.sendto(b"named")
        data, _ = await s_proto.next_datagram()
        await close(c_tr, c_proto)
        await close(s_tr, s_proto)
        return data

    assert run(any_loop, main()) == b"named"


def _errors_scenario(kwargs_factory):
    def scenario(loop):
        async def main():
            kwargs = kwargs_factory()
            sock = kwargs.get("sock")
            try:
                tr, proto = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, **kwargs)
            finally:
                if sock is not None:
                    sock.close()
            tr.close()
            return "created"

        return loop.run_until_complete(main())

    return scenario


class FakeDatagramSock:
    type = socket.SOCK_DGRAM

    def __repr__(self):
        return "<FakeDatagramSock>"

    def close(self):
        pass


ERROR_CASES = {
    "no address no family": dict,
    "local_addr not a tuple": lambda: {"local_addr": "localhost"},
    "local_addr too long": lambda: {"local_addr": ("localhost", 1, 2, 3)},
    "families do not match": lambda: {
        "remote_addr": ("127.0.0.1", 1),
        "local_addr": ("::1", 0),
    },
    "unix address not a string": lambda: {"family": socket.AF_UNIX, "local_addr": ("a", 1)},
    "stream socket": lambda: {"sock": socket.socket(socket.AF_INET, socket.SOCK_STREAM)},
    "sock with local_addr": lambda: {"sock": FakeDatagramSock(), "local_addr": ("127.0.0.1", 0)},
    "sock with everything": lambda: {
        "sock": FakeDatagramSock(),
        "remote_addr": ("127.0.0.1", 1),
        "family": socket.AF_INET,
        "proto": 17,
        "flags": 1,
        "reuse_port": True,
        "allow_broadcast": True,
    },
    "reuse_address is gone": lambda: {"local_addr": ("127.0.0.1", 0), "reuse_address": True},
    "bind fails": lambda: {"local_addr": ("127.0.0.1", 1)},
    "unknown host": lambda: {"remote_addr": ("no-such-host.invalid", 1)},
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_endpoint_errors_match_asyncio(case):
    if case == "bind fails" and os.geteuid() == 0:
        # root may bind privileged ports: use a port that is in use instead.
        holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        holder.bind(("127.0.0.1", 0))
        addr = holder.getsockname()

        def factory():
            return {"local_addr": addr}
    else:
        holder = None
        factory = ERROR_CASES[case]
    try:
        ref, got = differential(_errors_scenario(factory))
    finally:
        if holder is not None:
            holder.close()
    assert isinstance(ref, Raised), ref
    if case == "unknown host":
        # The resolver's message may differ between two calls; the type not.
        assert got.type is ref.type
    else:
        # A socket's repr names its fd, which differs between the two runs.
        assert got.type is ref.type
        assert re.sub(r"fd=\d+", "fd=N", got.message) == re.sub(r"fd=\d+", "fd=N", ref.message)


def test_sock_modifier_message_lists_the_arguments(any_loop):
    with pytest.raises(ValueError) as info:
        any_loop.run_until_complete(
            any_loop.create_datagram_endpoint(
                asyncio.DatagramProtocol, sock=FakeDatagramSock(), family=2, reuse_port=True
            )
        )
    assert str(info.value) == (
        "socket modifier keyword arguments can not be used when sock is specified. "
        "(family=2, reuse_port=True)"
    )


def test_sock_type_message(any_loop):
    with socket.socket() as sock, pytest.raises(ValueError) as info:
        any_loop.run_until_complete(
            any_loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=sock)
        )
    # PyPy 3.11's asyncio already has 3.13's check and words.
    new_words = PY313 or sys.implementation.name == "pypy"
    expected = "A datagram socket was expected" if new_words else "A UDP Socket was expected"
    assert str(info.value).startswith(expected + ", got <socket.socket")


def test_sock_already_used_by_a_transport(any_loop):
    async def main():
        tr, proto = await endpoint(any_loop, local_addr=("127.0.0.1", 0))
        sock = tr.get_extra_info("socket")
        dup = socket.socket(fileno=os.dup(sock.fileno()))
        try:
            # A different fd: allowed.
            tr2, proto2 = await endpoint(any_loop, sock=dup)
            await close(tr2, proto2)
        finally:
            dup.close()
        await close(tr, proto)

    run(any_loop, main())


def test_unix_endpoint_removes_a_stale_socket_file(any_loop, tmp_path):
    path = str(tmp_path / "dgram")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as old:
        old.bind(path)
    assert os.path.exists(path)

    async def main():
        tr, proto = await endpoint(any_loop, local_addr=path, family=socket.AF_UNIX)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as peer:
            peer.sendto(b"unix", path)
            data, addr = await proto.next_datagram()
        name = tr.get_extra_info("sockname")
        await close(tr, proto)
        return data, name

    assert run(any_loop, main()) == (b"unix", path)


def test_unix_endpoint_logs_a_failed_stale_check_and_raises_the_bind_error(
    tmp_path, asyncio_errors
):
    # A path under a regular file: the check and the bind both fail (ENOTDIR).
    (tmp_path / "file").write_text("")
    path = str(tmp_path / "file" / "dgram")

    def scenario(loop):
        with capture_logs() as logs:
            result = outcome(
                loop.run_until_complete,
                loop.create_datagram_endpoint(
                    asyncio.DatagramProtocol, local_addr=path, family=socket.AF_UNIX
                ),
            )
        return logs.texts(), result

    ref, got = differential(scenario)
    assert got == ref
    assert ref == (
        "ok",
        (
            [
                (
                    "ERROR",
                    f"Unable to check or remove stale UNIX socket {path!r}: "
                    "NotADirectoryError(20, 'Not a directory')",
                )
            ],
            Raised(NotADirectoryError(20, "Not a directory")),
        ),
    )


def test_unix_endpoint_cancelled_while_starting(tmp_path):
    # asyncio removes the stale file and binds without yielding: the
    # cancellation lands where it first waits, after the transport is made.
    path = str(tmp_path / "dgram")

    def scenario(loop):
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as old:
            old.bind(path)
        proto = Recorder(loop)

        async def main():
            task = asyncio.ensure_future(
                loop.create_datagram_endpoint(lambda: proto, local_addr=path, family=socket.AF_UNIX)
            )
            await asyncio.sleep(0)
            task.cancel("stop")
            try:
                await task
            except asyncio.CancelledError as exc:
                outcome = exc.args
            await proto.lost
            return outcome, proto.events, os.path.exists(path)

        try:
            return run(loop, main())
        finally:
            os.unlink(path)

    ref, got = differential(scenario)
    assert got == ref
    assert ref == ("ok", (("stop",), ["made", ("lost", None)], True))


def test_unix_endpoint_does_not_remove_a_regular_file(any_loop, tmp_path):
    path = tmp_path / "regular"
    path.write_text("keep me")

    async def main():
        with pytest.raises(OSError):
            await endpoint(any_loop, local_addr=str(path), family=socket.AF_UNIX)

    run(any_loop, main())
    assert path.read_text() == "keep me"


def test_unix_endpoint_abstract_namespace(any_loop):
    name = f"\0snakeloop-test-{os.getpid()}-{id(any_loop)}"

    async def main():
        tr, proto = await endpoint(any_loop, local_addr=name, family=socket.AF_UNIX)
        c_tr, c_proto = await endpoint(any_loop, remote_addr=name, family=socket.AF_UNIX)
        c_tr.sendto(b"abstract")
        data, _ = await proto.next_datagram()
        await close(c_tr, c_proto)
        await close(tr, proto)
        return data

    assert run(any_loop, main()) == b"abstract"


def test_debug_logs_the_new_endpoint(any_loop, caplog):
    any_loop.set_debug(True)

    async def main():
        with caplog.at_level(logging.DEBUG, logger="asyncio"):
            tr, proto = await endpoint(any_loop, local_addr=("127.0.0.1", 0))
            tr2, proto2 = await endpoint(any_loop, family=socket.AF_INET)
        await close(tr, proto)
        await close(tr2, proto2)

    run(any_loop, main())
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        m.startswith("Datagram endpoint local_addr=('127.0.0.1', 0) remote_addr=None")
        for m in messages
    )
    assert any(m.startswith("Datagram endpoint remote_addr=None created") for m in messages)


def test_cancelled_endpoint_creation_closes_the_socket(any_loop):
    async def main():
        task = asyncio.ensure_future(endpoint(any_loop, local_addr=("127.0.0.1", 0)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(3):
            await asyncio.sleep(0)

    # The leak guard fails the test if the socket stays open.
    run(any_loop, main())


def test_a_transport_closed_by_error_received_still_sends_until_its_socket_goes():
    # asyncio drops datagrams after close() only for a transport with a fixed
    # remote address; one without keeps sending while it closes, and each
    # failure reaches error_received.  Here error_received closes the
    # transport on the first of two oversized datagrams: the second fails
    # too, and connection_lost still comes.
    def scenario(loop):
        class Closer(asyncio.DatagramProtocol):
            def connection_made(self, transport):
                self.transport = transport
                self.events = []
                self.lost = loop.create_future()

            def error_received(self, exc):
                self.events.append(("error", type(exc).__name__))
                self.transport.close()

            def connection_lost(self, exc):
                self.events.append(("lost", exc))
                self.lost.set_result(None)

        async def main():
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setblocking(False)
            sock.bind(("127.0.0.1", 0))
            transport, proto = await loop.create_datagram_endpoint(Closer, sock=sock)
            addr = sock.getsockname()
            transport.sendto(b"\0" * 70000, addr)  # over the 65507-byte limit
            transport.sendto(b"\0" * 70000, addr)
            await proto.lost
            return proto.events

        return loop.run_until_complete(main())

    ref, got = differential(scenario)
    assert got == ref
    assert ref == ("ok", [("error", "OSError"), ("error", "OSError"), ("lost", None)])
