"""Helpers shared by the stream tests of the reliability plan (``network/test_stream_*.py``).

The suite-wide fixtures (``any_loop``, ``loop_kind``, ``loop_errors``, ``rng``,
``sock_dir``, the leak guard) come from ``tests/conftest.py`` and the helpers
every test may use from ``_loopkit``; this module adds what the stream tests
have in common:

* :class:`StrictProtocol`, a recording protocol that checks asyncio's
  protocol grammar as the callbacks arrive
  (``connection_made -> data_received* -> eof_received? -> connection_lost``,
  each at most once, nothing after ``connection_lost``, ``pause_writing`` and
  ``resume_writing`` strictly alternating);
* random payloads, chunking and digests, drawn from the ``rng`` fixture
  (every test prints its seed, so a failure can be replayed);
* connected socket pairs over loopback;
* :func:`cancel_after` and :func:`victim_probe` (uvloop#738's fd-reuse
  scenario) for the cancellation and fd-ownership tests;
* clean-up helpers for the leaks of the stdlib variants that are expected to
  fail (``_loopkit.stdlib_xfail``).

Test modules import these as ``from _streamkit import ...``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import os
import socket
import time

from _loopkit import fd_is_open, fd_set, run_within

GUARD = 60.0  # a watchdog for run(); never reached when things work


# -- loops -------------------------------------------------------------------


run = run_within(GUARD)


# -- randomness ---------------------------------------------------------------


def payload(rng, size):
    return rng.randbytes(size)


def chunks(rng, data, low=1, high=256 * 1024):
    """Split ``data`` into consecutive pieces of random sizes in [low, high]."""
    view = memoryview(data)
    pos = 0
    while pos < len(data):
        size = rng.randint(low, high)
        yield view[pos : pos + size]
        pos += size


def digest(data):
    return hashlib.sha256(data).hexdigest(), len(data)


class Digest:
    """A running SHA-256 and byte count."""

    def __init__(self):
        self.sha = hashlib.sha256()
        self.size = 0

    def update(self, data):
        self.sha.update(data)
        self.size += len(data)

    def result(self):
        return self.sha.hexdigest(), self.size


# -- fds and sockets ------------------------------------------------------------


def tcp_pair(family=socket.AF_INET):
    """Two connected blocking TCP sockets over loopback (client, server)."""
    host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.bind((host, 0))
        listener.listen(1)
        client = socket.socket(family, socket.SOCK_STREAM)
        try:
            client.connect(listener.getsockname())
            server, _ = listener.accept()
        except BaseException:
            client.close()
            raise
    return client, server


def stream_pair(family):
    """A connected pair of the given family ("tcp" or "unix")."""
    if family == "unix":
        return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return tcp_pair()


def set_linger_rst(sock):
    """Make ``close()`` send a RST instead of a FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")


def drain_nonblocking(sock, limit=1 << 30):
    """Read what ``sock`` has now, without blocking; (data, eof)."""
    out = bytearray()
    while len(out) < limit:
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            return bytes(out), False
        except ConnectionResetError:
            return bytes(out), True
        if not data:
            return bytes(out), True
        out += data
    return bytes(out), False


def close_leaked_sockets(before):
    """Close socket objects whose fds were opened since ``before`` (a fd set).

    For expected-failure paths only: a stdlib bug that leaks a socket would
    otherwise make the suite's leak guard fail in teardown, where an xfail
    mark does not reach.
    """
    new = fd_set() - before
    if not new:
        return 0
    objects = gc.get_objects()
    # Sockets that a live transport owns are the transport's to close.
    owned = {
        id(obj._sock)
        for obj in objects
        if isinstance(obj, asyncio.BaseTransport) and getattr(obj, "_sock", None) is not None
    }
    closed = 0
    for obj in objects:
        if isinstance(obj, socket.socket) and id(obj) not in owned:
            with contextlib.suppress(OSError):
                if obj.fileno() in new:
                    obj.close()
                    closed += 1
    return closed


def abort_live_transports(loop):
    """Abort every transport of ``loop`` that is still open (expected-failure cleanup)."""
    count = 0
    for obj in gc.get_objects():
        if (
            isinstance(obj, asyncio.BaseTransport)
            and getattr(obj, "_loop", None) is loop
            and not obj.is_closing()
        ):
            obj.abort()
            count += 1
    return count


# -- the strict protocol ---------------------------------------------------------


class StrictProtocol(asyncio.Protocol):
    """Records every callback and checks asyncio's protocol grammar on the fly.

    Grammar violations are collected in ``violations`` (raising would only
    reach the loop's exception handler); tests assert the list is empty.
    """

    def __init__(self, loop=None):
        loop = loop or asyncio.get_running_loop()
        self.loop = loop
        self.transport = None
        self.events = []
        self.violations = []
        self.received = bytearray()
        self.digest = Digest()
        self.keep_data = True
        self.eof = False
        self.paused = False
        self.made = loop.create_future()
        self.lost = loop.create_future()
        self.eof_seen = loop.create_future()
        self.lost_exc = None

    def _check(self, ok, what):
        if not ok:
            self.violations.append(f"{what}; events so far: {self._summary()}")

    def _summary(self):
        return [e if isinstance(e, str) else e[0] for e in self.events[-8:]]

    def connection_made(self, transport):
        self._check(not self.events, "connection_made is not the first callback")
        self.transport = transport
        self.events.append("made")
        self.made.set_result(None)

    def data_received(self, data):
        self._check(self.made.done(), "data_received before connection_made")
        self._check(not self.eof, "data_received after eof_received")
        self._check(not self.lost.done(), "data_received after connection_lost")
        self._check(len(data) > 0, "data_received with empty data")
        if self.events and self.events[-1] == "data":
            pass  # keep the event list short: one entry per run of data
        else:
            self.events.append("data")
        if self.keep_data:
            self.received += data
        self.digest.update(data)

    def eof_received(self):
        self._check(self.made.done(), "eof_received before connection_made")
        self._check(not self.eof, "eof_received twice")
        self._check(not self.lost.done(), "eof_received after connection_lost")
        self.eof = True
        self.events.append("eof")
        if not self.eof_seen.done():
            self.eof_seen.set_result(None)
        return self.keep_open()

    def keep_open(self):
        return None

    def pause_writing(self):
        self._check(not self.lost.done(), "pause_writing after connection_lost")
        self._check(not self.paused, "pause_writing twice in a row")
        self.paused = True
        self.events.append(("pause", self.transport.get_write_buffer_size()))

    def resume_writing(self):
        self._check(not self.lost.done(), "resume_writing after connection_lost")
        self._check(self.paused, "resume_writing without pause_writing")
        self.paused = False
        self.events.append(("resume", self.transport.get_write_buffer_size()))

    def connection_lost(self, exc):
        self._check(self.made.done(), "connection_lost before connection_made")
        self._check(not self.lost.done(), "connection_lost twice")
        self.events.append(("lost", exc))
        self.lost_exc = exc
        if not self.lost.done():
            self.lost.set_result(exc)

    def flow_events(self):
        return [e[0] for e in self.events if isinstance(e, tuple) and e[0] in ("pause", "resume")]

    def plain_events(self):
        """The events without pause/resume (which may come at any point)."""
        return [e for e in self.events if not (isinstance(e, tuple) and e[0] != "lost")]


class StrictBufferedProtocol(StrictProtocol, asyncio.BufferedProtocol):
    """The same checks for ``BufferedProtocol``; buffer sizes come from ``sizes``."""

    def __init__(self, loop=None, sizes=None):
        super().__init__(loop)
        self._sizes = sizes or (lambda hint: 65536)
        self._buf = None
        self.get_buffer_calls = 0

    def get_buffer(self, sizehint):
        self._check(self.made.done(), "get_buffer before connection_made")
        self._check(not self.eof, "get_buffer after eof_received")
        self._check(not self.lost.done(), "get_buffer after connection_lost")
        self.get_buffer_calls += 1
        self._buf = bytearray(self._sizes(sizehint))
        return self._buf

    def buffer_updated(self, nbytes):
        self._check(0 < nbytes <= len(self._buf), f"buffer_updated({nbytes}) out of range")
        self.data_received(bytes(self._buf[:nbytes]))


# -- cancellation and the fd-reuse victim probe ------------------------------------------


async def cancel_after(loop, coro_factory, k):
    """Start ``coro_factory()`` as a task, cancel it after ``k`` loop iterations.

    Returns ``(finished_first, result)``: whether the call had completed
    before the cancel arrived, and its result (None if it was cancelled).
    """
    task = loop.create_task(coro_factory())
    for _ in range(k):
        await asyncio.sleep(0)
        # One loop iteration per step, and a moment without the GIL: a step
        # of snakeloop's create_unix_server runs in the loop's worker thread,
        # which a loop that never blocks would leave waiting for the GIL (the
        # switch interval is 5 ms, 40 sleep(0) iterations far less), so the
        # call never completed within the steps on a busy machine.
        time.sleep(0.0001)
    finished_first = task.done()
    task.cancel()
    try:
        return finished_first, await task
    except asyncio.CancelledError:
        if finished_first:
            raise
        return False, None


def _victim_on(fds):
    """A connected TCP pair whose first socket sits on a free fd from ``fds`` if any."""
    victim, peer = tcp_pair()
    for fd in fds:
        if fd >= 0 and not fd_is_open(fd):
            os.dup2(victim.fileno(), fd)
            victim.close()
            return socket.socket(fileno=fd), peer
    return victim, peer


async def _exercise_victim(loop, tr, proto, peer, fd, ino, spy_in, spy_out):
    intact = fd_is_open(fd) and os.fstat(fd).st_ino == ino
    if not fd_is_open(fd):
        os.dup2(spy_in.fileno(), fd)
    tr.write(b"LEAKED")
    peer.settimeout(10)
    got = peer.recv(64) if intact else b""
    spy_out.setblocking(False)
    spied, _ = drain_nonblocking(spy_out)
    # The victim must also still be watched for reading: a stale
    # registration under its fd number would leave it deaf.
    if intact:
        peer.sendall(b"PING")
        for _ in range(1000):
            # All of it: the loop may deliver the four bytes in several reads.
            if len(proto.received) >= len(b"PING") or proto.lost.done():
                break
            await asyncio.sleep(0)
    tr.close()
    await proto.lost
    assert spied == b"", "a stale socket closed the victim's fd: its data reached a spy"
    assert intact, "a stale socket closed another connection's fd"
    assert got == b"LEAKED"
    assert proto.received == b"PING", "the victim no longer receives: stale fd registration"
    assert proto.violations == []


async def victim_probe(loop, stale_socks, fds=()):
    """uvloop#738's scenario: can a stale owner hurt the next user of its fd number?

    ``fds`` are the numbers the stale sockets had.  Two victims, each a
    transport whose data must go both ways (a spy socket takes over the fd
    number if the victim's fd is closed under it):

    1. opened on one of ``fds`` if the call under test already released it
       (else on the lowest free fd), *before* the stale socket objects are
       closed the way user code closes them in a ``finally`` and collected:
       a stale object must not close the victim's fd;
    2. opened on one of ``fds`` *after* that: nothing the loop still holds
       under the old number (a registration, a transport) may touch it.
    """
    spy_in, spy_out = socket.socketpair()
    peers = []
    try:
        victim, peer = _victim_on(fds)
        peers.append(peer)
        tr, proto = await loop.create_connection(lambda: StrictProtocol(loop), sock=victim)
        fd = tr.get_extra_info("socket").fileno()
        ino = os.fstat(fd).st_ino
        for sock in stale_socks:
            sock.close()
        gc.collect()
        for _ in range(3):
            await asyncio.sleep(0)
        await _exercise_victim(loop, tr, proto, peer, fd, ino, spy_in, spy_out)

        victim, peer = _victim_on(fds)
        peers.append(peer)
        tr, proto = await loop.create_connection(lambda: StrictProtocol(loop), sock=victim)
        fd = tr.get_extra_info("socket").fileno()
        await _exercise_victim(loop, tr, proto, peer, fd, os.fstat(fd).st_ino, spy_in, spy_out)
    finally:
        for peer in peers:
            peer.close()
        spy_in.close()
        spy_out.close()
