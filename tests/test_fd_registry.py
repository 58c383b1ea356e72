"""Which registration ``add_reader``/``remove_reader`` & co. find, on both loops.

asyncio's selector keeps, per registered fd, the object the registration
was made through (the first ``add_reader``/``add_writer`` while the fd had
neither, until it has neither again).  When an object cannot give its fd any
more (a closed socket's ``fileno()`` is -1, a closed file's raises), the
registration made through that very object is found by identity.  So
``remove_reader(sock)`` after ``sock.close()`` works (anyio's socket streams
do exactly that), and no stale entry is left to swallow the registration of
the next socket given the same fd number.

A failed change of an fd's registration (the kernel's epoll no longer knows
the fd, because it was closed or reused) drops the fd's whole registration
in asyncio; the tests check that nothing stale survives that either.

Every test runs on both loops (``any_loop``) and asserts asyncio's outcome,
read from the stdlib loop of the running Python.
"""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from _loopkit import Raised, closing_socket_pair, outcome, run, socket_pair

pytestmark = pytest.mark.timeout(60)

GUARD = 2.0  # seconds; only a failing test waits this long

NO_FD = Raised(ValueError("Invalid file descriptor: -1"))
BAD_FD = Raised(OSError(9, "Bad file descriptor"))
UNKNOWN_FD = Raised(FileNotFoundError(2, "No such file or directory"))


def _noop(*args):
    return None


@pytest.fixture(params=["unix-stream", "unix-dgram", "tcp"])
def pair(request):
    with closing_socket_pair(request.param) as (a, b):
        yield a, b


@pytest.fixture
def closet():
    """Sockets to close at teardown (the ones a test makes along the way)."""
    socks = []
    yield socks
    for s in socks:
        s.close()


def _socket_at(fd, closet):
    """A fresh connected socket that got fd number ``fd`` (just closed), and its peer."""
    for _ in range(10):
        x, y = socket_pair()
        closet += [x, y]
        if x.fileno() == fd:
            return x, y
        if y.fileno() == fd:
            return y, x
    raise AssertionError(f"no new socket got fd {fd}")


def _set_once(fut):
    if not fut.done():
        fut.set_result(None)


def _reader_fires(loop, sock, peer):
    """Whether ``sock``'s reader runs once ``peer`` sends something."""
    fired = loop.create_future()
    loop.add_reader(sock, _set_once, fired)
    peer.send(b"x")
    try:
        run(loop, fired, GUARD)
        return "fired"
    except TimeoutError:
        return "never fired"
    finally:
        loop.remove_reader(sock)


# ------------------------------------------------- a closed registered socket


@pytest.mark.parametrize("side", ["reader", "writer"])
def test_remove_of_closed_registered_socket(any_loop, pair, side):
    a, _ = pair
    other = "writer" if side == "reader" else "reader"
    getattr(any_loop, f"add_{side}")(a, _noop)
    a.close()
    assert [
        # Found by identity; the other side was never registered.
        outcome(getattr(any_loop, f"remove_{other}"), a),
        outcome(getattr(any_loop, f"remove_{side}"), a),
        # Gone with its registration: the object is forgotten too.
        outcome(getattr(any_loop, f"remove_{side}"), a),
    ] == [("ok", False), ("ok", True), NO_FD]


def test_fd_reused_after_removing_a_closed_socket(any_loop, closet):
    a, a_peer = socket_pair("unix-stream")
    closet.append(a_peer)
    fd = a.fileno()
    any_loop.add_reader(a, _noop)
    a.close()
    removed = outcome(any_loop.remove_reader, a)
    sock, peer = _socket_at(fd, closet)
    assert [removed, _reader_fires(any_loop, sock, peer)] == [("ok", True), "fired"]


def test_add_reader_again_through_a_closed_registered_socket(any_loop, pair):
    # Same events: asyncio only swaps the callback (no epoll call), so the
    # closed object is accepted.
    a, _ = pair
    any_loop.add_reader(a, _noop)
    a.close()
    assert [
        outcome(any_loop.add_reader, a, _noop),
        outcome(any_loop.remove_reader, a),
    ] == [("ok", None), ("ok", True)]


def test_add_writer_through_a_closed_reader_socket_drops_the_fd(any_loop, pair):
    # A new event for a closed fd: epoll refuses the change and asyncio
    # forgets the fd's whole registration.
    a, _ = pair
    any_loop.add_reader(a, _noop)
    a.close()
    assert [
        outcome(any_loop.add_writer, a, _noop),
        outcome(any_loop.remove_reader, a),
    ] == [BAD_FD, NO_FD]


# --------------------------------------------------- objects never registered


def test_closed_object_never_registered_is_not_another_registration(any_loop, pair, closet):
    a, _ = pair
    stranger, peer = socket.socketpair()
    closet.append(peer)
    any_loop.add_reader(a, _noop)
    a.close()
    stranger.close()
    assert [
        outcome(any_loop.remove_reader, stranger),
        outcome(any_loop.remove_writer, stranger),
        outcome(any_loop.add_reader, stranger, _noop),
        outcome(any_loop.add_writer, stranger, _noop),
        # The failures left the registration made through ``a`` alone.
        outcome(any_loop.remove_reader, a),
    ] == [NO_FD, NO_FD, NO_FD, NO_FD, ("ok", True)]


# --------------------------------------------- one fd, registered two ways


class FdHolder:
    """An object for a socket's fd that can stop answering, the socket still open.

    (With the socket itself closed, epoll would refuse to change the fd's
    events, and these tests are about which object is found.)
    """

    def __init__(self, sock):
        self.fd = sock.fileno()

    def fileno(self):
        return self.fd

    def close(self):
        self.fd = -1


def test_fd_registered_through_two_objects_remembers_the_first(any_loop, pair):
    first, second = FdHolder(pair[0]), FdHolder(pair[0])
    any_loop.add_reader(first, _noop)
    any_loop.add_writer(second, _noop)
    first.close()
    second.close()
    assert [
        # ``second`` did not start the registration: it is not found.
        outcome(any_loop.remove_writer, second),
        # ``first`` did: it finds the writer added through ``second``.
        outcome(any_loop.remove_writer, first),
        outcome(any_loop.remove_reader, first),
        outcome(any_loop.remove_reader, first),
    ] == [NO_FD, ("ok", True), ("ok", True), NO_FD]


def test_first_object_is_kept_until_the_fd_has_no_registration(any_loop, pair):
    a, _ = pair
    fd = a.fileno()
    holder = FdHolder(a)
    any_loop.add_reader(a, _noop)
    any_loop.add_writer(fd, _noop)
    any_loop.add_writer(holder, _noop)  # replaces the writer, joins a registration
    # The half added through ``a`` goes; the fd stays registered, and still
    # under ``a``.
    assert any_loop.remove_reader(a) is True
    holder.close()
    a.close()
    assert [
        outcome(any_loop.remove_writer, holder),
        outcome(any_loop.remove_writer, a),
        outcome(any_loop.remove_writer, a),
    ] == [NO_FD, ("ok", True), NO_FD]


# ------------------------------------------ a file object whose fileno() raises


def test_closed_file_object(any_loop, closet):
    r, w = os.pipe()
    reader = os.fdopen(r, "rb", buffering=0)
    writer = os.fdopen(w, "wb", buffering=0)
    closet.append(writer)
    any_loop.add_reader(reader, _noop)
    reader.close()  # fileno() raises ValueError from now on
    results = [
        # The public method checks for a transport first, with the object's
        # own fileno(), and refuses it.
        outcome(any_loop.remove_reader, reader),
        # The registration is found by identity all the same.
        outcome(any_loop._remove_reader, reader),
        outcome(any_loop._remove_reader, reader),
    ]
    sock, peer = _socket_at(r, closet)
    results.append(_reader_fires(any_loop, sock, peer))
    assert results == [
        Raised(ValueError("Invalid file object: <_io.FileIO [closed]>")),
        ("ok", True),
        Raised(ValueError("Invalid file object: <_io.FileIO [closed]>")),
        "fired",
    ]


# ----------------------------------------- failed changes leave nothing stale


@pytest.mark.parametrize("as_object", [True, False], ids=["object", "fd"])
def test_failed_removal_drops_the_whole_fd(any_loop, closet, as_object):
    a, a_peer = socket_pair("unix-stream")
    closet.append(a_peer)
    fd = a.fileno()
    key = a if as_object else fd
    any_loop.add_reader(key, _noop)
    any_loop.add_writer(key, _noop)
    a.close()
    results = [
        # The writer stays: epoll is asked to change a closed fd and refuses.
        outcome(any_loop.remove_reader, key),
        # The refusal took the writer with it.
        outcome(any_loop.remove_writer, fd),
    ]
    sock, peer = _socket_at(fd, closet)
    results.append(_reader_fires(any_loop, sock, peer))
    assert results == [BAD_FD, ("ok", False), "fired"]


def test_failed_add_on_a_reused_fd_drops_the_stale_registration(any_loop, closet):
    a, a_peer = socket_pair("unix-stream")
    closet.append(a_peer)
    fd = a.fileno()
    any_loop.add_reader(a, _noop)
    a.close()  # never removed: the registration outlives the socket
    sock, peer = _socket_at(fd, closet)
    assert [
        # The fd is registered, but epoll does not know the new socket.
        outcome(any_loop.add_writer, sock, _noop),
        # The stale registration is gone with the refusal...
        outcome(any_loop.remove_reader, a),
        # ...so the new socket's reader is really registered.
        _reader_fires(any_loop, sock, peer),
    ] == [UNKNOWN_FD, NO_FD, "fired"]


# ------------------------------------------------ the transport check


class _Quiet(asyncio.Protocol):
    def __init__(self, lost):
        self.lost = lost

    def connection_lost(self, exc):
        _set_once(self.lost)


def test_transport_check_uses_the_objects_own_fileno(any_loop, closet):
    # A socket closed while registered, and a transport given its fd number:
    # the transport's reader lands on the stale registration (both loops;
    # the fd is not in epoll any more).  remove_reader(closed socket) asks
    # about a transport on fd -1, so it is not refused, and removes the
    # registration it finds by identity.
    a, a_peer = socket_pair("unix-stream")
    closet.append(a_peer)
    fd = a.fileno()
    any_loop.add_reader(a, _noop)
    a.close()
    sock, peer = _socket_at(fd, closet)
    closet.remove(sock)  # the transport owns it
    lost = any_loop.create_future()

    async def scenario():
        transport, _ = await any_loop.connect_accepted_socket(lambda: _Quiet(lost), sock)
        await asyncio.sleep(0)  # the transport starts reading
        try:
            return [
                outcome(any_loop.remove_reader, a),
                outcome(any_loop.remove_reader, fd),
            ]
        finally:
            transport.close()
            await lost

    removed, by_fd = run(any_loop, scenario(), GUARD)
    assert removed == ("ok", True)
    # The transport is live on that fd: asked by number, the check refuses.
    assert by_fd.type is RuntimeError
    assert by_fd.message.startswith(f"File descriptor {fd} is used by transport <")
