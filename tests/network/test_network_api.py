"""The stream connection and server methods look and fail as asyncio's do.

``create_connection``, ``create_server``, their Unix variants and
``connect_accepted_socket`` take the keywords of the running Python's asyncio
and no others, and ``create_server`` returns an ``asyncio.Server``.  The
accept path's pause on an fd shortage ends cleanly when the server closes.
Everything is compared with the stdlib loop on the same Python.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import os
import socket

import pytest
from _loopkit import assert_same, is_virtual, mask_addresses, run_within, stdlib_xfail

GUARD = 15.0  # a hang guard, never a timing assertion

run = run_within(GUARD)


def test_servers_are_asyncio_servers(any_loop, tmp_path):
    async def main():
        servers = [
            await any_loop.create_server(asyncio.Protocol, "127.0.0.1", 0),
            await any_loop.create_unix_server(asyncio.Protocol, str(tmp_path / "sock")),
        ]
        for server in servers:
            assert isinstance(server, asyncio.Server)
            assert isinstance(server, asyncio.AbstractServer)
            server.close()
            await server.wait_closed()

    run(any_loop, main())


# -- signatures --------------------------------------------------------------------

METHODS = [
    "create_connection",
    "create_server",
    "create_unix_connection",
    "create_unix_server",
    "connect_accepted_socket",
]


def _parameters(method):
    return [(p.name, p.kind, p.default) for p in inspect.signature(method).parameters.values()]


@pytest.mark.parametrize("name", METHODS)
def test_signatures_are_asyncios(loop, stdlib_loop, name):
    ours, theirs = getattr(loop, name), getattr(stdlib_loop, name)
    assert _parameters(ours) == _parameters(theirs)
    assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(theirs)


# Keywords asyncio took on in a later Python, with the value that Python
# defaults them to: a keyword this Python does not know is refused whatever
# its value, one it knows is taken (the call then fails for want of an address).
NEW_KEYWORDS = [
    ("create_connection", "all_errors", False),
    ("create_connection", "all_errors", True),
    ("create_server", "keep_alive", None),
    ("create_server", "keep_alive", True),
    ("create_unix_server", "cleanup_socket", True),
    ("create_unix_server", "cleanup_socket", False),
]


@pytest.mark.parametrize(("name", "keyword", "value"), NEW_KEYWORDS)
def test_new_keywords_as_this_pythons_asyncio(name, keyword, value):
    def scenario(loop):
        async def call():
            try:
                await getattr(loop, name)(asyncio.Protocol, **{keyword: value})
            except (TypeError, ValueError) as exc:
                return type(exc).__name__, mask_addresses(str(exc))
            raise AssertionError("no error")

        return run(loop, call())

    assert_same(scenario)


# -- the accept path: out of file descriptors ----------------------------------------


class StarvedSocket(socket.socket):
    """A listening socket whose first ``starved`` accept() calls find no fd left."""

    starved = 0

    def accept(self):
        if self.starved:
            self.starved -= 1
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return super().accept()


class Accepted(asyncio.Protocol):
    def __init__(self, made):
        self.made = made

    def connection_made(self, transport):
        self.made.set_result(None)
        transport.close()


def retry_delay(loop, monkeypatch):
    """asyncio's ACCEPT_RETRY_DELAY (1 s) on virtual time; a short one on the real clock."""
    if not is_virtual(loop):
        monkeypatch.setattr(asyncio.constants, "ACCEPT_RETRY_DELAY", 0.05)
    return asyncio.constants.ACCEPT_RETRY_DELAY


@stdlib_xfail(reason="asyncio reports every failed accept() (python/cpython#151615)")
def test_accept_pauses_once_then_resumes(any_loop_vt, loop_errors, monkeypatch):
    loop = any_loop_vt
    delay = retry_delay(loop, monkeypatch)

    async def main():
        made = loop.create_future()
        with StarvedSocket() as sock, socket.socket() as client:
            sock.bind(("127.0.0.1", 0))
            sock.starved = 3
            server = await loop.create_server(lambda: Accepted(made), sock=sock)
            client.setblocking(False)
            start = loop.time()
            await loop.sock_connect(client, sock.getsockname())
            await made  # accepted once the retry found fds again
            took = loop.time() - start
            server.close()
            await server.wait_closed()
            return took

    took = run(loop, main())
    assert loop_errors.messages() == ["socket.accept() out of system resource"]
    # Each failed accept() pauses the listener for the delay; only the first is reported.
    if is_virtual(loop):
        assert took == 3 * delay
    else:
        assert took >= 3 * delay


@stdlib_xfail(reason="asyncio reports every failed accept() (python/cpython#151615)")
def test_close_while_accepting_is_paused(any_loop_vt, loop_errors, monkeypatch):
    loop = any_loop_vt
    delay = retry_delay(loop, monkeypatch)

    async def main():
        with StarvedSocket() as sock, socket.socket() as client:
            sock.bind(("127.0.0.1", 0))
            sock.starved = 1_000_000
            server = await loop.create_server(asyncio.Protocol, sock=sock)
            client.setblocking(False)
            await loop.sock_connect(client, sock.getsockname())
            while not loop_errors:
                await asyncio.sleep(0.01)
            server.close()
            await server.wait_closed()
            # Past the retry delay: the closed listener stays closed.
            await asyncio.sleep(4 * delay)
            return sock.starved

    starved = run(loop, main())
    assert loop_errors.messages() == ["socket.accept() out of system resource"]
    assert starved == 1_000_000 - 1  # no accept() after the close


def test_start_serving_a_closed_server():
    def scenario(loop):
        async def main():
            server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0, start_serving=False)
            server.close()
            await server.wait_closed()
            try:
                await server.start_serving()
            except TypeError as exc:
                return str(exc), server.is_serving()
            raise AssertionError("no error")

        return run(loop, main())

    assert_same(scenario)


def test_close_a_server_whose_socket_was_closed():
    def scenario(loop):
        async def main():
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            server = await loop.create_server(asyncio.Protocol, sock=sock)
            sock.close()
            try:
                server.close()
            except ValueError as exc:
                return str(exc), server.is_serving(), server.sockets
            raise AssertionError("no error")

        return run(loop, main())

    assert_same(scenario)


def _cancel_serve_forever_with_a_connected_client(loop: asyncio.AbstractEventLoop) -> object:
    """What a cancelled ``serve_forever()`` does to a connection it still holds: from
    3.14 asyncio closes the server's connections too (gh-123720), and serve_forever()
    ends; before, the connection stays open, and serve_forever() waits for it in
    ``wait_closed()`` (3.12 and 3.13) or ends at once (3.11)."""

    async def main() -> object:
        made = asyncio.Event()
        lost: list[object] = []

        class Proto(asyncio.Protocol):
            def connection_made(self, transport):
                self.transport = transport
                made.set()

            def connection_lost(self, exc):
                lost.append(exc)

        protocols: list[Proto] = []

        def factory() -> Proto:
            protocols.append(Proto())
            return protocols[-1]

        server = await loop.create_server(factory, "127.0.0.1", 0)
        serving = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0)
        client = socket.create_connection(server.sockets[0].getsockname()[:2])
        try:
            await made.wait()
            serving.cancel()
            # 3.12 and 3.13 wait in serve_forever() for the connection to go: look at
            # where it stands after enough turns for a close to reach connection_lost.
            for _ in range(20):
                await asyncio.sleep(0)
            outcome = (serving.done(), server.is_serving(), list(lost))
            for proto in protocols:
                proto.transport.close()
            try:
                await serving
            except asyncio.CancelledError:
                pass
            await server.wait_closed()
            return outcome
        finally:
            client.close()

    return loop.run_until_complete(main())


def test_a_cancelled_serve_forever_closes_clients_as_asyncio():
    assert_same(_cancel_serve_forever_with_a_connected_client)
