"""TLS transports (``snakeloop.transports.tls``) and ``loop.start_tls``.

Most scenarios run on snakeloop and on the stdlib loop (``any_loop``,
``fake_loop``) and assert the same outcome on both: asyncio's behaviour is
the specification.  The few snakeloop-only tests pin places where snakeloop
deliberately does better than asyncio; each says how and why.

Certificates are the ones CPython's own test-suite ships (found through
``test.test_asyncio.utils``): ``keycert3.pem`` is a certificate for
``localhost`` signed by the test CA ``pycacert.pem``.  Everything talks over
127.0.0.1.  The helpers at the top are shared with ``test_tls_failures.py``.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import gc
import logging
import socket
import ssl
import threading
import warnings
import weakref

import _upstream
import pytest
from _loopkit import LOOP_KINDS, NO_REFCOUNTING, REFCOUNTED, run_fake, run_within, stdlib_xfail

certs = pytest.importorskip("test.test_asyncio.utils")

TLS12 = ssl.TLSVersion.TLSv1_2
TLS13 = ssl.TLSVersion.TLSv1_3
TLS_VERSIONS = [pytest.param(TLS12, id="tls1.2"), pytest.param(TLS13, id="tls1.3")]
TIMEOUT = 15.0  # a guard against hangs, never reached when things work
EPS = 1e-6  # the fake clock adds up float steps


# -- helpers (also used by test_tls_failures.py) -------------------------------


def server_context(version=None, *, certfile=None, require_client_cert=False):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certfile or certs.SIGNED_CERTFILE)
    if version is not None:
        ctx.minimum_version = ctx.maximum_version = version
    if require_client_cert:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(certs.SIGNING_CA)
    return ctx


def client_context(version=None, *, cafile=None, certfile=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile or certs.SIGNING_CA)
    if certfile is not None:
        ctx.load_cert_chain(certfile)
    if version is not None:
        ctx.minimum_version = ctx.maximum_version = version
    return ctx


run = run_within(TIMEOUT)


class Recorder(asyncio.Protocol):
    """Records every protocol callback; fails loudly on a second connection_lost."""

    def __init__(self):
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.events = []
        self.data = bytearray()
        self.transport = None
        self.exc = None
        self.made = loop.create_future()
        self.eof = loop.create_future()
        self.lost = loop.create_future()
        self._wanted = None

    def _note(self, event):
        self.events.append(event)

    def connection_made(self, transport):
        self._note("made")
        self.transport = transport
        self.made.set_result(transport)

    def data_received(self, data):
        self._got(data)

    def _got(self, data):
        if not self.events or self.events[-1] != "data":
            self._note("data")
        self.data += data
        if self._wanted is not None and len(self.data) >= self._wanted[0]:
            fut = self._wanted[1]
            self._wanted = None
            if not fut.done():
                fut.set_result(None)

    def eof_received(self):
        self._note("eof")
        self.eof.set_result(None)

    def connection_lost(self, exc):
        self._note("lost")
        self.exc = exc
        self.lost.set_result(exc)  # a second call raises InvalidStateError

    def pause_writing(self):
        self._note("pause")

    def resume_writing(self):
        self._note("resume")

    async def received(self, nbytes):
        """Wait until ``nbytes`` in total have arrived."""
        if len(self.data) < nbytes:
            fut = self.loop.create_future()
            self._wanted = (nbytes, fut)
            await fut
        return bytes(self.data)


class BufferedRecorder(Recorder, asyncio.BufferedProtocol):
    """The same, fed through small buffers, to cut records into pieces."""

    def __init__(self, size=1000, as_bytearray=False):
        Recorder.__init__(self)
        self.buffer = bytearray(size)
        self.as_bytearray = as_bytearray
        self.sizehints = []

    def get_buffer(self, sizehint):
        self.sizehints.append(sizehint)
        return self.buffer if self.as_bytearray else memoryview(self.buffer)

    def buffer_updated(self, nbytes):
        self._got(bytes(self.buffer[:nbytes]))


class Echo(Recorder):
    def data_received(self, data):
        super().data_received(data)
        self.transport.write(data)


class Servers:
    """Every server-side protocol the factory made, in order."""

    def __init__(self, cls=Recorder, **kwargs):
        self.cls = cls
        self.kwargs = kwargs
        self.protocols = []

    def __call__(self):
        proto = self.cls(**self.kwargs)
        self.protocols.append(proto)
        return proto

    async def first(self):
        while not self.protocols:
            await asyncio.sleep(0)
        return self.protocols[0]


async def tls_server(loop, factory, version=None, context=None, **kwargs):
    context = context or server_context(version)
    server = await loop.create_server(factory, "127.0.0.1", 0, ssl=context, **kwargs)
    return server, server.sockets[0].getsockname()


async def tls_connect(loop, factory, addr, version=None, context=None, **kwargs):
    kwargs.setdefault("server_hostname", "localhost")
    return await loop.create_connection(
        factory, *addr, ssl=context or client_context(version), **kwargs
    )


async def close_server(server):
    server.close()
    await server.wait_closed()


async def raw_tls_handshake(loop, addr, context, server_hostname="localhost"):
    """A TLS client by hand (SSLObject over loop.sock_*), independent of SSLProtocol.

    Returns ``(sock, sslobj, outgoing)``; the caller owns ``sock``.
    """
    sock = socket.socket()
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, addr)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        sslobj = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
        while True:
            try:
                sslobj.do_handshake()
                break
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    await loop.sock_sendall(sock, outgoing.read())
                data = await loop.sock_recv(sock, 65536)
                if not data:
                    raise ConnectionResetError("EOF during the handshake") from None
                incoming.write(data)
        if outgoing.pending:
            await loop.sock_sendall(sock, outgoing.read())
    except BaseException:
        sock.close()
        raise
    return sock, sslobj, outgoing


async def recv_until_eof(loop, sock):
    chunks = []
    while True:
        try:
            data = await loop.sock_recv(sock, 65536)
        except ConnectionResetError:
            return b"".join(chunks), "reset"
        if not data:
            return b"".join(chunks), "eof"
        chunks.append(data)


class BlockingPeer(threading.Thread):
    """A peer run by the ``ssl`` module's own blocking sockets, in a thread.

    ``script(ssl_sock)`` runs on the accepted (server) connection; whatever
    it returns or raises is kept in ``result``/``error``.
    """

    def __init__(self, context, script):
        super().__init__(daemon=True)
        self.context = context
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(TIMEOUT)
        self.addr = self.listener.getsockname()
        self.result = self.error = None

    def run(self):
        try:
            conn, _ = self.listener.accept()
            conn.settimeout(TIMEOUT)
            with self.context.wrap_socket(
                conn, server_side=True, suppress_ragged_eofs=False
            ) as tls:
                self.result = self.script(tls)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.listener.close()


# -- the round trip ------------------------------------------------------------


@pytest.mark.parametrize("version", TLS_VERSIONS)
@pytest.mark.parametrize("buffered", [False, True], ids=["protocol", "buffered"])
def test_echo_round_trip(any_loop, version, buffered):
    payload = bytes(range(256)) * 4096  # 1 MiB

    async def main():
        servers = Servers(Echo)
        server, addr = await tls_server(any_loop, servers, version)
        factory = BufferedRecorder if buffered else Recorder
        tr, client = await tls_connect(any_loop, factory, addr, version)
        assert tr.get_extra_info("ssl_object").version() == (
            "TLSv1.2" if version == TLS12 else "TLSv1.3"
        )
        for i in range(0, len(payload), 100_000):
            tr.write(payload[i : i + 100_000])
        assert await client.received(len(payload)) == payload
        tr.close()
        assert await client.lost is None
        echo = await servers.first()
        assert await echo.lost is None
        await close_server(server)
        return client.events, echo.events

    client_events, server_events = run(any_loop, main())
    # Closing sends close_notify; the server answers in kind, and both
    # applications hear about the end of the stream before losing it.
    assert client_events == ["made", "data", "eof", "lost"]
    assert server_events == ["made", "data", "eof", "lost"]


@pytest.mark.parametrize("version", TLS_VERSIONS)
def test_interop_with_blocking_ssl_socket(any_loop, version):
    """Against the ssl module's own socket: data, then close_notify both ways."""

    def script(tls):
        data = b""
        while len(data) < 100_000:
            data += tls.recv(65536)
        tls.sendall(data[::-1])
        # recv() returns b"" only for a close_notify: a bare FIN raises
        # SSLEOFError because of suppress_ragged_eofs=False.
        assert tls.recv(1) == b""
        tls.unwrap()
        return data

    peer = BlockingPeer(server_context(version), script)
    peer.start()
    payload = b"abcdefghij" * 10_000

    async def main():
        tr, client = await tls_connect(any_loop, Recorder, peer.addr, version)
        tr.write(payload)
        assert await client.received(len(payload)) == payload[::-1]
        tr.close()
        assert await client.lost is None
        return client.events

    try:
        events = run(any_loop, main())
    finally:
        peer.join(TIMEOUT)
    assert peer.error is None, peer.error
    assert peer.result == payload
    assert events == ["made", "data", "eof", "lost"]


def test_peer_fin_without_close_notify(any_loop, loop_kind):
    def script(tls):
        tls.sendall(b"bye")
        socket.socket.shutdown(tls, socket.SHUT_WR)  # TCP FIN, no close_notify
        # The client sends nothing back (no close_notify: it got none) and closes.  Read
        # beneath TLS: to the ssl module that EOF is an SSLEOFError, or with OpenSSL 3.6
        # a BrokenPipeError from the alert it tries to send on the half-closed socket.
        assert socket.socket.recv(tls, 1) == b""

    class Client(Recorder):
        def eof_received(self):
            super().eof_received()
            self.closing_at_eof = self.transport.is_closing()

    peer = BlockingPeer(server_context(), script)
    peer.start()

    async def main():
        tr, client = await tls_connect(any_loop, Client, peer.addr)
        assert await client.lost is None
        assert bytes(client.data) == b"bye"
        return client.events, client.closing_at_eof

    try:
        events, closing_at_eof = run(any_loop, main())
    finally:
        peer.join(TIMEOUT)
    assert peer.error is None, peer.error
    assert events == ["made", "data", "eof", "lost"]
    # snakeloop: writes are dropped from here on, and is_closing() says so;
    # asyncio's transport claims to be open until connection_lost.
    assert closing_at_eof == (loop_kind == "snakeloop")


# From 3.14 asyncio's TLS transport is closing as soon as the transport beneath it is.
LOWER_CLOSING_CLOSES = hasattr(asyncio.sslproto.SSLProtocol, "_is_transport_closing")


@pytest.mark.parametrize("how", ["close", "abort"])
def test_is_closing_once_the_transport_below_is(any_loop, how):
    async def main():
        server, addr = await tls_server(any_loop, Servers(Echo))
        tr, client = await tls_connect(any_loop, Recorder, addr)
        below = tr._ssl_protocol._transport  # the same attribute path on both loops
        before = tr.is_closing()
        getattr(below, how)()
        after = tr.is_closing()
        await client.lost
        lost = tr.is_closing()
        await close_server(server)
        return before, after, lost

    assert run(any_loop, main()) == (False, LOWER_CLOSING_CLOSES, True)


# -- the application transport -----------------------------------------------


def test_extra_info(any_loop):
    async def main():
        servers = Servers()
        server, addr = await tls_server(any_loop, servers)
        ctx = client_context()
        tr, client = await tls_connect(any_loop, Recorder, addr, context=ctx)
        try:
            assert tr.get_extra_info("sslcontext") is ctx
            sslobj = tr.get_extra_info("ssl_object")
            assert isinstance(sslobj, ssl.SSLObject)
            peercert = tr.get_extra_info("peercert")
            assert dict(x[0] for x in peercert["subject"])["commonName"] == "localhost"
            assert peercert == sslobj.getpeercert()
            assert tr.get_extra_info("cipher") == sslobj.cipher()
            assert tr.get_extra_info("compression") is None
            sock = tr.get_extra_info("socket")
            assert tr.get_extra_info("peername") == addr == sock.getpeername()
            assert tr.get_extra_info("sockname") == sock.getsockname()
            assert tr.get_extra_info("no such key", "dflt") == "dflt"
            server_proto = await servers.first()
            server_tr = await server_proto.made
            assert server_tr.get_extra_info("peercert") is None  # no client certificate
            assert server_tr.get_extra_info("peername") == sock.getsockname()
        finally:
            tr.close()
            await client.lost
            await close_server(server)
        # After the connection is gone the TLS facts remain, the socket's don't.
        assert tr.get_extra_info("peercert") == peercert
        assert tr.get_extra_info("peername") is None

    run(any_loop, main())


def test_transport_api(any_loop):
    async def main():
        server, addr = await tls_server(any_loop, Servers())
        tr, client = await tls_connect(any_loop, Recorder, addr)
        assert isinstance(tr, asyncio.Transport)
        assert isinstance(tr, asyncio.WriteTransport)
        assert not tr.can_write_eof()
        with pytest.raises(NotImplementedError):
            tr.write_eof()
        assert tr.get_protocol() is client
        assert tr.get_write_buffer_limits() == (128 * 1024, 512 * 1024)
        tr.set_write_buffer_limits(high=1000)
        assert tr.get_write_buffer_limits() == (250, 1000)
        tr.set_write_buffer_limits(low=100)
        assert tr.get_write_buffer_limits() == (100, 400)
        with pytest.raises(ValueError, match=r"^high \(10\) must be >= low \(20\) must be >= 0$"):
            tr.set_write_buffer_limits(high=10, low=20)
        with pytest.raises(TypeError, match="^data: expecting a bytes-like instance, got str$"):
            tr.write("text")
        tr.write(b"")
        assert tr.get_write_buffer_size() == 0
        assert tr.is_reading()
        tr.pause_reading()
        assert not tr.is_reading()
        tr.pause_reading()
        tr.resume_reading()
        tr.resume_reading()
        assert tr.is_reading()
        other = Recorder()
        tr.set_protocol(other)
        assert tr.get_protocol() is other
        tr.set_protocol(client)
        assert not tr.is_closing()
        tr.close()
        assert tr.is_closing()
        tr.close()
        await client.lost
        await close_server(server)
        return client.events

    assert run(any_loop, main()) == ["made", "eof", "lost"]


def test_writelines_and_memoryviews(any_loop):
    async def main():
        servers = Servers(Echo)
        server, addr = await tls_server(any_loop, servers)
        tr, client = await tls_connect(any_loop, Recorder, addr)
        tr.writelines([b"ab", bytearray(b"cd"), memoryview(b"xxefxx")[2:4]])
        tr.write(memoryview(b"gh"))
        assert await client.received(8) == b"abcdefgh"
        tr.close()
        await client.lost
        await close_server(server)

    run(any_loop, main())


def test_write_after_close_is_dropped(any_loop, caplog):
    async def main():
        server, addr = await tls_server(any_loop, Servers())
        tr, client = await tls_connect(any_loop, Recorder, addr)
        tr.close()
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            for _ in range(25):
                tr.write(b"late")
        assert tr.get_write_buffer_size() == 0
        await client.lost
        await close_server(server)

    run(any_loop, main())
    warnings = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert warnings and set(warnings) == {"SSL connection is closed"}


def test_abort(any_loop):
    async def main():
        servers = Servers()
        server, addr = await tls_server(any_loop, servers)
        tr, client = await tls_connect(any_loop, Recorder, addr)
        peer = await servers.first()
        await peer.made
        tr.write(b"x" * 100_000)
        tr.abort()
        assert tr.is_closing()
        tr.abort()
        tr.close()
        assert await client.lost is None
        await peer.lost
        await close_server(server)
        return client.events

    assert run(any_loop, main()) == ["made", "lost"]


def test_close_with_pending_data_delivers_it(any_loop):
    payload = b"z" * (3 * 1024 * 1024)

    async def main():
        servers = Servers()
        server, addr = await tls_server(any_loop, servers)
        tr, client = await tls_connect(any_loop, Recorder, addr)
        tr.write(payload)
        tr.close()
        peer = await servers.first()
        assert await peer.lost is None
        assert len(peer.data) == len(payload)
        await client.lost
        await close_server(server)
        return peer.events

    assert run(any_loop, main()) == ["made", "data", "eof", "lost"]


def test_exception_in_data_received(any_loop, loop_errors):
    class Boom(Recorder):
        def data_received(self, data):
            super().data_received(data)
            raise ZeroDivisionError("boom")

    async def main():
        servers = Servers(Boom)
        server, addr = await tls_server(any_loop, servers)
        tr, client = await tls_connect(any_loop, Recorder, addr)
        tr.write(b"ping")
        peer = await servers.first()
        exc = await peer.lost
        await client.lost
        await close_server(server)
        return exc

    exc = run(any_loop, main())
    assert isinstance(exc, ZeroDivisionError)
    assert [(c["message"], type(c["exception"])) for c in loop_errors] == [
        ("Fatal error on SSL protocol", ZeroDivisionError)
    ]


def test_eof_received_returning_true_is_ignored(any_loop, caplog):
    class KeepOpen(Recorder):
        def eof_received(self):
            super().eof_received()
            return True

    async def main():
        servers = Servers(KeepOpen)
        server, addr = await tls_server(any_loop, servers)
        tr, client = await tls_connect(any_loop, Recorder, addr)
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            tr.close()
            peer = await servers.first()
            assert await peer.lost is None
        await client.lost
        await close_server(server)

    run(any_loop, main())
    assert "returning true from eof_received() has no effect when using ssl" in [
        r.getMessage() for r in caplog.records
    ]


# -- buffered application protocols --------------------------------------------


@pytest.mark.parametrize("size", [1, 7, 16384, 300_000])
def test_buffered_protocol_small_and_large_buffers(any_loop, size):
    payload = bytes(range(251)) * 400

    async def main():
        servers = Servers(Echo)
        server, addr = await tls_server(any_loop, servers)
        tr, client = await tls_connect(any_loop, lambda: BufferedRecorder(size), addr)
        tr.write(payload)
        data = await client.received(len(payload))
        tr.close()
        await client.lost
        await close_server(server)
        return data, client.sizehints

    data, hints = run(any_loop, main())
    assert data == payload
    assert all(h >= 0 for h in hints)


def test_buffered_protocol_returning_a_bytearray(loop):
    # snakeloop only: asyncio reads the rest of a record into a *copy* of a
    # bytearray buffer (``buf[offset:]``), so it delivers garbage.  Reading
    # through a memoryview fills the application's own buffer.
    payload = bytes(range(256)) * 400

    async def main():
        servers = Servers(Echo)
        server, addr = await tls_server(loop, servers)
        tr, client = await tls_connect(
            loop, lambda: BufferedRecorder(1000, as_bytearray=True), addr
        )
        tr.write(payload)
        data = await client.received(len(payload))
        tr.close()
        await client.lost
        await close_server(server)
        return data

    assert run(loop, main()) == payload


# -- flow control --------------------------------------------------------------


class Pausing(Recorder):
    """A server that stops reading as soon as it is connected."""

    def connection_made(self, transport):
        super().connection_made(transport)
        transport.pause_reading()


def test_write_flow_control_and_read_pausing_propagate(any_loop):
    """The server pausing its reads must end in the client's pause_writing."""
    chunk = b"q" * 65536

    async def main():
        servers = Servers(Pausing)
        server, addr = await tls_server(any_loop, servers)
        tr, client = await tls_connect(any_loop, Recorder, addr)
        tr.set_write_buffer_limits(high=256 * 1024)
        peer = await servers.first()
        await peer.made
        sent = 0
        # Without propagation the server would keep draining the socket
        # into memory and the client would never be paused.
        while "pause" not in client.events:
            tr.write(chunk)
            sent += len(chunk)
            await asyncio.sleep(0)
            assert sent < 256 * 1024 * 1024, "the client was never paused"
        assert tr.get_write_buffer_size() >= 256 * 1024
        assert not peer.data
        assert not peer.transport.is_reading()
        peer.transport.resume_reading()
        assert await peer.received(sent) == chunk * (sent // len(chunk))
        while "resume" not in client.events:
            await asyncio.sleep(0)
        assert tr.get_write_buffer_size() <= 64 * 1024
        tr.close()
        await client.lost
        await peer.lost
        await close_server(server)
        return client.events

    events = run(any_loop, main())
    assert events == ["made", "pause", "resume", "eof", "lost"]


def test_pause_reading_holds_back_data(any_loop):
    async def main():
        servers = Servers(Pausing)
        server, addr = await tls_server(any_loop, servers)
        tr, client = await tls_connect(any_loop, Recorder, addr)
        tr.write(b"hello")
        peer = await servers.first()
        for _ in range(50):
            await asyncio.sleep(0)
        assert not peer.data
        peer.transport.resume_reading()
        assert await peer.received(5) == b"hello"
        tr.close()
        await client.lost
        await close_server(server)

    run(any_loop, main())


STDLIB_TLS13_STALLS = (
    "asyncio stalls here: a TLS 1.3 client's Finished waits in its BIO while the application "
    "has reading paused (see the snakeloop test below)"
)
# The stall is certain: waiting it out takes this long instead of TIMEOUT.
STALL_GUARD = 3.0


def _pausing_client_params():
    for kind in LOOP_KINDS:
        for version in TLS_VERSIONS:
            stalls = kind == "stdlib" and version.values[0] == TLS13
            marks = (
                [pytest.mark.xfail(strict=True, raises=TimeoutError, reason=STDLIB_TLS13_STALLS)]
                if stalls
                else []
            )
            yield pytest.param(kind, version.values[0], id=f"{kind}-{version.id}", marks=marks)


@pytest.mark.parametrize(("loop_kind", "version"), list(_pausing_client_params()))
def test_client_pausing_in_connection_made(any_loop, loop_kind, version):
    async def main():
        servers = Servers(Echo)
        server, addr = await tls_server(any_loop, servers, version)
        tr = None
        try:
            tr, client = await tls_connect(any_loop, Pausing, addr, version)
            peer = await servers.first()
            await peer.made
            tr.write(b"ping")
            await peer.received(4)
            for _ in range(10):
                await asyncio.sleep(0)
            assert not client.data
            tr.resume_reading()
            assert await client.received(4) == b"ping"
            tr.close()
            await client.lost
            await peer.lost
            await close_server(server)
        except BaseException:
            # Stopped by the guard (or failed): close what is open, the loop's teardown
            # runs the rest.
            if tr is not None:
                tr.abort()
            server.close()
            raise

    stalls = loop_kind == "stdlib" and version == TLS13
    run(any_loop, main(), timeout=STALL_GUARD if stalls else TIMEOUT)


def test_tls13_handshake_completes_while_client_reading_is_paused(loop):
    # snakeloop only: the handshake's last flight (a TLS 1.3 client's
    # Finished) is sent even when connection_made() paused reading; asyncio
    # leaves it in the BIO, so the server never completes its handshake
    # (and times out) unless the client writes or resumes.
    async def main():
        servers = Servers()
        server, addr = await tls_server(loop, servers, TLS13)
        tr, client = await tls_connect(loop, Pausing, addr, TLS13)
        peer = await servers.first()
        await peer.made
        tr.close()
        await client.lost
        await peer.lost
        await close_server(server)

    run(loop, main())


def test_zero_high_water_mark_pauses_only_a_non_empty_buffer(loop):
    # snakeloop only: asyncio pauses at size >= high, so high=0 calls
    # pause_writing() on an *empty* buffer and then flips to resume on the
    # next write, which can leave a drain() waiting for unrelated I/O.
    async def main():
        servers = Servers(Echo)
        server, addr = await tls_server(loop, servers)
        tr, client = await tls_connect(loop, Recorder, addr)
        tr.set_write_buffer_limits(high=0)
        assert client.events == ["made"]
        tr.write(b"ping")
        assert await client.received(4) == b"ping"
        tr.close()
        await client.lost
        await close_server(server)
        return client.events

    events = run(loop, main())
    assert events.count("pause") == events.count("resume")


# -- handshake failures ----------------------------------------------------------


def test_untrusted_certificate(any_loop):
    async def main():
        servers = Servers()
        server, addr = await tls_server(any_loop, servers)
        made = []
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # trusts nobody
        with pytest.raises(ssl.SSLCertVerificationError):
            await tls_connect(any_loop, lambda: made.append(1) or Recorder(), addr, context=ctx)
        for _ in range(20):
            await asyncio.sleep(0)
        await close_server(server)
        return made, [p.events for p in servers.protocols]

    made, server_events = run(any_loop, main())
    assert made == [1]  # the factories run before the handshake...
    assert server_events == [[]]  # ...but no application hears anything


def test_hostname_mismatch(any_loop):
    async def main():
        server, addr = await tls_server(any_loop, Servers())
        with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
            await tls_connect(any_loop, Recorder, addr, server_hostname="example.com")
        await close_server(server)

    run(any_loop, main())


def test_ssl_true_means_the_default_context(any_loop):
    async def main():
        server, addr = await tls_server(any_loop, Servers())
        # The test CA is not in the system store: verification is on.
        with pytest.raises(ssl.SSLCertVerificationError):
            await any_loop.create_connection(Recorder, *addr, ssl=True, server_hostname="")
        await close_server(server)

    run(any_loop, main())


def test_handshake_eof_is_a_connection_reset(any_loop):
    class CloseAtOnce(asyncio.Protocol):
        def connection_made(self, transport):
            transport.close()

    async def main():
        plain = await any_loop.create_server(CloseAtOnce, "127.0.0.1", 0)
        addr = plain.sockets[0].getsockname()
        with pytest.raises(ConnectionResetError):
            await tls_connect(any_loop, Recorder, addr)
        await close_server(plain)

    run(any_loop, main())


def test_client_sends_the_failure_alert(loop):
    # snakeloop only: asyncio drops the alert OpenSSL queues for a failed
    # handshake together with the connection, so its peer sees a bare reset
    # or EOF.  snakeloop sends it, and the peer learns why.
    async def main():
        listener = socket.create_server(("127.0.0.1", 0))
        listener.setblocking(False)
        addr = listener.getsockname()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        connect = loop.create_task(tls_connect(loop, Recorder, addr, context=ctx))
        conn, _ = await loop.sock_accept(listener)
        listener.close()
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        sslobj = server_context().wrap_bio(incoming, outgoing, server_side=True)
        try:
            with pytest.raises(ssl.SSLError, match="ALERT_UNKNOWN_CA"):
                while True:
                    try:
                        sslobj.do_handshake()
                        break
                    except ssl.SSLWantReadError:
                        if outgoing.pending:
                            await loop.sock_sendall(conn, outgoing.read())
                        data = await loop.sock_recv(conn, 65536)
                        assert data, "EOF instead of an alert"
                        incoming.write(data)
        finally:
            conn.close()
        with pytest.raises(ssl.SSLCertVerificationError):
            await connect

    run(loop, main())


def test_server_side_needs_a_context(loop):
    from snakeloop.transports.tls import SSLProtocol

    async def main():
        with pytest.raises(ValueError, match="^Server side SSL needs a valid SSLContext$"):
            SSLProtocol(loop, Recorder(), None, None, server_side=True)
        proto = SSLProtocol(loop, Recorder(), None, None)
        proto.app_transport.close()
        ctx = proto._sslcontext
        assert ctx.verify_mode == ssl.CERT_REQUIRED
        assert not ctx.check_hostname  # no server_hostname given
        # asyncio's default context: the ssl module's (its minimum TLS version is
        # OpenSSL's own from 3.14, TLS 1.2 before).
        ref = asyncio.sslproto._create_transport_context(False, None)
        assert (ctx.minimum_version, ctx.maximum_version, ctx.options) == (
            ref.minimum_version,
            ref.maximum_version,
            ref.options,
        )
        proto = SSLProtocol(loop, Recorder(), None, None, server_hostname="localhost")
        assert proto._sslcontext.check_hostname
        proto.app_transport.close()

    run(loop, main())


# -- timeouts ------------------------------------------------------------------


def _protocol_classes():
    import asyncio.sslproto

    from snakeloop.transports import tls

    return [
        pytest.param(tls.SSLProtocol, id="snakeloop"),
        pytest.param(asyncio.sslproto.SSLProtocol, id="stdlib"),
    ]


@pytest.mark.parametrize("cls", _protocol_classes())
@pytest.mark.parametrize("name", ["ssl_handshake_timeout", "ssl_shutdown_timeout"])
@pytest.mark.parametrize("value", [0, -1, -0.5])
def test_bad_timeouts(cls, name, value):
    msg = f"^{name} should be a positive number, got {value}$"
    with pytest.raises(ValueError, match=msg):
        cls(None, None, client_context(), None, **{name: value})


def test_bad_timeout_through_start_tls(any_loop):
    async def main():
        server = await any_loop.create_server(Recorder, "127.0.0.1", 0)
        addr = server.sockets[0].getsockname()
        tr, client = await any_loop.create_connection(Recorder, *addr)
        for name in ("ssl_handshake_timeout", "ssl_shutdown_timeout"):
            with pytest.raises(ValueError, match=f"^{name} should be a positive number, got 0$"):
                await any_loop.start_tls(tr, client, client_context(), **{name: 0})
        # Nothing was touched: the plain transport still works.
        assert tr.is_reading() and not tr.is_closing()
        tr.close()
        await client.lost
        await close_server(server)

    run(any_loop, main())


def test_default_timeouts(loop):
    from snakeloop.transports import tls

    async def main():
        proto = tls.SSLProtocol(loop, Recorder(), client_context(), None, False, "localhost")
        assert proto._ssl_handshake_timeout == tls.SSL_HANDSHAKE_TIMEOUT == 60.0
        assert proto._ssl_shutdown_timeout == tls.SSL_SHUTDOWN_TIMEOUT == 30.0
        proto.app_transport.close()

    run(loop, main())


class Silent(asyncio.Protocol):
    """A plain server that accepts and never answers."""

    def connection_made(self, transport):
        self.transport = transport


def test_client_handshake_timeout(fake_loop, fake_clock):
    async def main():
        transports = []

        def factory():
            proto = Silent()
            transports.append(proto)
            return proto

        plain = await fake_loop.create_server(factory, "127.0.0.1", 0)
        addr = plain.sockets[0].getsockname()
        made = []
        start = fake_loop.time()
        with pytest.raises(ConnectionAbortedError) as info:
            await tls_connect(
                fake_loop, lambda: made.append(1) or Recorder(), addr, ssl_handshake_timeout=5.0
            )
        elapsed = fake_loop.time() - start
        for proto in transports:
            proto.transport.close()
        await close_server(plain)
        return str(info.value), elapsed

    msg, elapsed = run_fake(fake_loop, fake_clock, main(), step=0.01)
    assert msg == "SSL handshake is taking longer than 5.0 seconds: aborting the connection"
    assert 5.0 - EPS <= elapsed < 5.5


def test_server_handshake_timeout_frees_the_fd(fake_loop, fake_clock):
    """A client that never sends its ClientHello is dropped at the timeout."""

    async def main():
        servers = Servers()
        server, addr = await tls_server(fake_loop, servers, ssl_handshake_timeout=10.0)
        socks = []
        # The server may accept a connection (and start its timer) before the
        # client sees its connect complete, so the clock starts before the first
        # connect, which every accept follows.
        start = fake_loop.time()
        try:
            for _ in range(5):
                sock = socket.socket()
                sock.setblocking(False)
                socks.append(sock)
                await fake_loop.sock_connect(sock, addr)
            outcomes = [await recv_until_eof(fake_loop, s) for s in socks]
            elapsed = fake_loop.time() - start
        finally:
            for sock in socks:
                sock.close()
        await close_server(server)
        return outcomes, elapsed, [p.events for p in servers.protocols]

    outcomes, elapsed, events = run_fake(fake_loop, fake_clock, main(), step=0.01)
    assert all(data == b"" for data, _ in outcomes)
    assert 10.0 - EPS <= elapsed < 10.5
    assert events == [[]] * 5


def test_shutdown_timeout(fake_loop, fake_clock):
    """close() waits for the peer's close_notify only ssl_shutdown_timeout."""

    async def main():
        servers = Servers(Pausing)  # never reads, so never answers close_notify
        server, addr = await tls_server(fake_loop, servers)
        tr, client = await tls_connect(fake_loop, Recorder, addr, ssl_shutdown_timeout=3.0)
        peer = await servers.first()
        await peer.made
        start = fake_loop.time()
        tr.close()
        exc = await client.lost
        elapsed = fake_loop.time() - start
        peer.transport.abort()
        await peer.lost
        await close_server(server)
        return exc, elapsed, client.events

    exc, elapsed, events = run_fake(fake_loop, fake_clock, main(), step=0.01)
    assert isinstance(exc, asyncio.TimeoutError)
    assert str(exc) == "SSL shutdown timed out"
    assert 3.0 - EPS <= elapsed < 3.5
    assert events == ["made", "lost"]


def test_close_while_paused_after_peer_eof(loop):
    # snakeloop only: in asyncio, when the peer's EOF arrives while the
    # application has paused reading, close() does nothing at all (the
    # shutdown waits for a resume_reading() that never comes) and the fd
    # stays open for good.  snakeloop finishes the shutdown at once.
    async def main():
        servers = Servers(Pausing)
        # TLS 1.2: no session tickets in flight that could turn the
        # client's close into a reset.
        server, addr = await tls_server(loop, servers, TLS12)
        tr, client = await tls_connect(loop, Recorder, addr, TLS12)
        peer = await servers.first()
        await peer.made
        tr.abort()  # the server sees a bare EOF
        await client.lost
        for _ in range(20):
            await asyncio.sleep(0)
        peer.transport.close()
        assert await peer.lost is None
        await close_server(server)
        return peer.events

    assert run(loop, main()) == ["made", "eof", "lost"]


# -- start_tls -------------------------------------------------------------------


class LineServer(Recorder):
    """Plain text until "STARTTLS", then TLS on the same connection."""

    def __init__(self, version=None):
        super().__init__()
        self.version = version
        self.upgraded = None

    def data_received(self, data):
        super().data_received(data)
        # The line may come in several reads; nothing follows it before "GO".
        if self.upgraded is None and self.data.endswith(b"STARTTLS\n"):
            self.transport.write(b"GO\n")
            self.upgraded = self.loop.create_task(self.upgrade())

    async def upgrade(self):
        tls = await self.loop.start_tls(
            self.transport, self, server_context(self.version), server_side=True
        )
        self.transport = tls
        return tls


@pytest.mark.parametrize("version", TLS_VERSIONS)
def test_start_tls_both_sides(any_loop, version):
    async def main():
        servers = Servers(LineServer, version=version)
        plain = await any_loop.create_server(servers, "127.0.0.1", 0)
        addr = plain.sockets[0].getsockname()
        tr, client = await any_loop.create_connection(Recorder, *addr)
        tr.write(b"STARTTLS\n")
        assert await client.received(3) == b"GO\n"
        tls = await any_loop.start_tls(
            tr, client, client_context(version), server_hostname="localhost"
        )
        assert tls.get_protocol() is client
        assert tls.get_extra_info("peercert") is not None
        assert tls.get_extra_info("socket") is tr.get_extra_info("socket")
        server_proto = await servers.first()
        server_tls = await server_proto.upgraded
        server_proto.data.clear()
        tls.write(b"secret")
        assert await server_proto.received(6) == b"secret"
        server_tls.write(b"reply")
        assert await client.received(3 + 5) == b"GO\nreply"
        tls.close()
        assert await client.lost is None
        assert await server_proto.lost is None
        await close_server(plain)
        return client.events, server_proto.events

    client_events, server_events = run(any_loop, main())
    # No second connection_made: the protocol was connected already.
    assert client_events == ["made", "data", "eof", "lost"]
    assert server_events == ["made", "data", "eof", "lost"]


def test_start_tls_wrong_arguments(any_loop):
    async def main():
        server = await any_loop.create_server(Recorder, "127.0.0.1", 0)
        addr = server.sockets[0].getsockname()
        tr, client = await any_loop.create_connection(Recorder, *addr)
        with pytest.raises(TypeError, match="^sslcontext is expected to be an instance of"):
            await any_loop.start_tls(tr, client, None)
        with pytest.raises(TypeError, match=r"sslcontext .* got 'ctx'$"):
            await any_loop.start_tls(tr, client, "ctx")

        class NotStartTLS(asyncio.Transport):
            pass

        other = NotStartTLS()
        with pytest.raises(TypeError, match=r"is not supported by start_tls\(\)$"):
            await any_loop.start_tls(other, client, client_context())
        with pytest.raises(ValueError, match="^ssl_handshake_timeout should be a positive"):
            await any_loop.start_tls(tr, client, client_context(), ssl_handshake_timeout=0)
        tr.close()
        await client.lost
        await close_server(server)

    run(any_loop, main())


def test_start_tls_cancelled_closes_the_transport(any_loop):
    async def main():
        servers = Servers()  # a plain server that never answers the ClientHello
        plain = await any_loop.create_server(servers, "127.0.0.1", 0)
        addr = plain.sockets[0].getsockname()
        tr, client = await any_loop.create_connection(Recorder, *addr)
        task = any_loop.create_task(
            any_loop.start_tls(tr, client, client_context(), server_hostname="localhost")
        )
        peer = await servers.first()
        await peer.received(1)  # the ClientHello
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert tr.is_closing()
        assert await peer.lost is None
        for _ in range(5):
            await asyncio.sleep(0)
        await close_server(plain)
        return client.events

    # asyncio's rule: a protocol whose start_tls() never completed is not
    # told about the end of the connection.
    assert run(any_loop, main()) == ["made"]


def test_start_tls_handshake_failure(any_loop):
    async def main():
        servers = Servers(LineServer)
        plain = await any_loop.create_server(servers, "127.0.0.1", 0)
        addr = plain.sockets[0].getsockname()
        tr, client = await any_loop.create_connection(Recorder, *addr)
        tr.write(b"STARTTLS\n")
        await client.received(3)
        with pytest.raises(ssl.SSLCertVerificationError):  # no CA to verify with
            await any_loop.start_tls(
                tr, client, ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), server_hostname="localhost"
            )
        server_proto = await servers.first()
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            await server_proto.upgraded
        await client.lost
        await server_proto.lost
        await close_server(plain)
        return client.events, client.exc

    events, exc = run(any_loop, main())
    # The protocol had connection_made before start_tls, so it is told.
    assert events == ["made", "data", "lost"]
    assert isinstance(exc, ssl.SSLCertVerificationError)


def _wrap_bio_without_a_name():
    """What this ssl module does when a context that checks host names wraps a BIO given no
    server_hostname: "ValueError" (CPython 3.14), "DeprecationWarning" (PyPy 3.11, which
    then goes on), or None (CPython before 3.14: the handshake checks no name)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            client_context().wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO())
        except ValueError:
            return "ValueError"
    assert [(w.category, str(w.message)) for w in caught] in (
        [],
        [(DeprecationWarning, "check_hostname requires server_hostname")],
    )
    return caught[0].category.__name__ if caught else None


def test_start_tls_without_server_hostname(loop, stdlib_loop):
    """A context that checks host names given no name: both loops alike.

    From 3.14 the ssl module refuses to make the TLS object (ValueError out of start_tls,
    the plain transport left as it was); before, the handshake went ahead and checked no
    name.  PyPy 3.11's ssl warns (DeprecationWarning) and goes ahead.
    """

    async def main(lp):
        servers = Servers(LineServer)
        plain = await lp.create_server(servers, "127.0.0.1", 0)
        addr = plain.sockets[0].getsockname()
        tr, client = await lp.create_connection(Recorder, *addr)
        tr.write(b"STARTTLS\n")
        await client.received(3)
        server_proto = await servers.first()
        # Recorded: the suite's filter would make PyPy's warning an error out of start_tls.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                inner = await lp.start_tls(tr, client, client_context())
            except ValueError as exc:
                inner = exc
        warned = [(w.category.__name__, str(w.message)) for w in caught]
        if isinstance(inner, ValueError):
            outcome = f"ValueError: {inner}"
            state = (tr.is_closing(), tr.is_reading(), tr.get_protocol() is client)
            tr.close()
        else:
            outcome = "upgraded"
            await server_proto.upgraded
            state = (tr.is_closing(), inner.is_closing(), tr.get_protocol() is client)
            inner.close()
        await client.lost
        await server_proto.lost
        # The server's own start_tls fails if the client never began its handshake.
        (upgraded,) = await asyncio.gather(server_proto.upgraded, return_exceptions=True)
        await close_server(plain)
        server_outcome = "upgraded"
        if isinstance(upgraded, BaseException):
            server_outcome = type(upgraded).__name__
        return outcome, state, client.events, server_outcome, warned

    ours = run(loop, main(loop))
    assert ours == run(stdlib_loop, main(stdlib_loop))
    outcome, state, _, _, warned = ours
    ssl_does = _wrap_bio_without_a_name()
    if ssl_does == "ValueError":
        assert (outcome, state) == (
            "ValueError: check_hostname requires server_hostname",
            (False, True, True),
        )
    else:
        assert (outcome, state) == ("upgraded", (False, False, False))
    if ssl_does == "DeprecationWarning":
        assert warned == [("DeprecationWarning", "check_hostname requires server_hostname")]
    else:
        assert warned == []


@stdlib_xfail(
    not _upstream.start_tls_takes_reader_buffer(),
    strict=True,
    raises=TimeoutError,
    reason="python/cpython#142352: a server's start_tls() leaves the ClientHello that its "
    "StreamReader buffered with the STARTTLS line there, so the handshake never starts",
)
def test_start_tls_takes_what_the_stream_reader_buffered(any_loop):
    """The client sends its ClientHello right behind the STARTTLS line, in one segment."""

    async def handle(reader, writer):
        try:
            assert await reader.readline() == b"STARTTLS\n"
            await writer.start_tls(server_context())
            writer.write((await reader.readexactly(5))[::-1])
            await writer.drain()
        except ConnectionResetError:
            pass  # the client gave up waiting for the handshake
        finally:
            writer.close()

    async def client(addr):
        sock = socket.socket()
        sock.setblocking(False)
        try:
            await any_loop.sock_connect(sock, addr)
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            sslobj = client_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
            with contextlib.suppress(ssl.SSLWantReadError):
                sslobj.do_handshake()
            await any_loop.sock_sendall(sock, b"STARTTLS\n" + outgoing.read())
            handshaken = False
            reply = b""
            while len(reply) < 5:
                data = await any_loop.sock_recv(sock, 65536)
                assert data, "EOF before the reply"
                incoming.write(data)
                if not handshaken:
                    try:
                        sslobj.do_handshake()
                    except ssl.SSLWantReadError:
                        await any_loop.sock_sendall(sock, outgoing.read())
                        continue
                    handshaken = True
                    sslobj.write(b"hello")
                    await any_loop.sock_sendall(sock, outgoing.read())
                with contextlib.suppress(ssl.SSLWantReadError):
                    reply += sslobj.read(65536)
            return reply
        finally:
            sock.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        try:
            return await asyncio.wait_for(client(server.sockets[0].getsockname()), 2.0)
        finally:
            server.close()
            await server.wait_closed()

    assert run(any_loop, main()) == b"olleh"


def test_tls_over_tls(any_loop):
    async def main():
        servers = Servers(LineServer)
        server, addr = await tls_server(any_loop, servers)
        tr, client = await tls_connect(any_loop, Recorder, addr)
        tr.write(b"STARTTLS\n")
        assert await client.received(3) == b"GO\n"
        inner = await any_loop.start_tls(tr, client, client_context(), server_hostname="localhost")
        server_proto = await servers.first()
        await server_proto.upgraded
        server_proto.data.clear()
        inner.write(b"nested")
        assert await server_proto.received(6) == b"nested"
        inner.close()
        await client.lost
        await server_proto.lost
        await close_server(server)

    run(any_loop, main())


# -- references ------------------------------------------------------------------


@pytest.mark.skipif(not REFCOUNTED, reason=NO_REFCOUNTING)
def test_context_and_protocol_freed_without_gc(any_loop):
    """No reference cycles: plain refcounting frees everything after close."""

    async def main():
        server, addr = await tls_server(any_loop, Servers(Echo))
        ctx = client_context()
        tr, client = await tls_connect(any_loop, Recorder, addr, context=ctx)
        tr.write(b"x")
        await client.received(1)
        tr.close()
        await client.lost
        await close_server(server)
        refs = weakref.ref(ctx), weakref.ref(client), weakref.ref(tr)
        return refs

    gc.disable()
    try:
        refs = run(any_loop, main())
        any_loop.run_until_complete(asyncio.sleep(0))
        assert [r() for r in refs] == [None, None, None]
    finally:
        gc.enable()
