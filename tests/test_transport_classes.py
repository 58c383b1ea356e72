"""Transport and server classes: the same asyncio ABCs as the stdlib loop's.

For every kind of transport a loop creates, the test opens the real thing on
the stdlib loop and on snakeloop side by side and compares:

* the asyncio ABCs the object is an instance of (every class of
  ``asyncio.transports`` -- ``BaseTransport`` ... ``SubprocessTransport`` and
  the private ``_FlowControlMixin`` -- and ``asyncio.AbstractServer``);
* what calling each method those ABCs define does, for every method that the
  object of either loop leaves to the ABC (asyncio's ABCs raise
  ``NotImplementedError`` for most of them): same result or same exception,
  with the same message.

Nothing is hard-coded: the expected answers are the stdlib loop's, on the
running Python (3.11's datagram transport, for one, is not yet an
``asyncio.DatagramTransport``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import os
import signal
import socket
import subprocess
import sys
import weakref

import pytest
from _loopkit import Raised, outcome, run_within, tls_contexts

GUARD = 15.0  # a hang guard, never a timing assertion

ASYNCIO_ABCS = [
    cls
    for cls in vars(asyncio.transports).values()
    if isinstance(cls, type) and issubclass(cls, asyncio.BaseTransport)
] + [asyncio.AbstractServer]

# An argument for each required parameter of an ABC method, chosen to do no
# harm should the method turn out to be implemented on one loop only.
HARMLESS_ARGUMENTS = {
    "name": "no such extra info",
    "data": b"",
    "list_of_data": [],
    "fd": 0,
    "signal": signal.SIGCONT,
}


run = run_within(GUARD)


def abcs_of(obj):
    return sorted(cls.__qualname__ for cls in ASYNCIO_ABCS if isinstance(obj, cls))


def abc_methods(obj):
    """Public method name -> the functions the ABCs of ``obj`` define under it."""
    methods: dict[str, list] = {}
    for cls in ASYNCIO_ABCS:
        if isinstance(obj, cls):
            for name, value in vars(cls).items():
                if inspect.isfunction(value) and not name.startswith("_"):
                    methods.setdefault(name, []).append(value)
    return methods


def left_to_the_abc(obj):
    """The ABC methods that ``type(obj)`` does not implement itself."""
    return {
        name
        for name, functions in abc_methods(obj).items()
        if any(getattr(type(obj), name) is fn for fn in functions)
    }


def call_outcome(loop, obj, name, function):
    args = []
    for param in list(inspect.signature(function).parameters.values())[1:]:
        if param.default is param.empty and param.kind is param.POSITIONAL_OR_KEYWORD:
            if param.name not in HARMLESS_ARGUMENTS:
                pytest.fail(f"add a harmless argument for {name}({param.name})")
            args.append(HARMLESS_ARGUMENTS[param.name])
    result = outcome(lambda: getattr(obj, name)(*args))
    if not isinstance(result, Raised) and inspect.iscoroutine(result[1]):
        result = outcome(run, loop, result[1])
    return result


def differences(ref_loop, ref, got_loop, got):
    """How ``got`` (snakeloop's) differs from ``ref`` (the stdlib loop's)."""
    found = []
    if abcs_of(got) != abcs_of(ref):
        found.append(f"instance of {abcs_of(got)}, asyncio's of {abcs_of(ref)}")
    ref_methods, got_methods = abc_methods(ref), abc_methods(got)
    for name in sorted(left_to_the_abc(ref) | left_to_the_abc(got)):
        function = (ref_methods.get(name) or got_methods[name])[0]
        expected = call_outcome(ref_loop, ref, name, function)
        actual = call_outcome(got_loop, got, name, function)
        if actual != expected:
            found.append(f"{name}(): {actual!r}, asyncio: {expected!r}")
    return found


# -- what each scenario opens ------------------------------------------------------


class Keeper(asyncio.Protocol):
    """Keeps its transport; ``made`` and ``lost`` are futures."""

    def __init__(self, loop):
        self.transport = None
        self.made = loop.create_future()
        self.lost = loop.create_future()

    def connection_made(self, transport):
        self.transport = transport
        self.made.set_result(None)

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


class DatagramKeeper(Keeper, asyncio.DatagramProtocol):
    pass


class SubprocessKeeper(Keeper, asyncio.SubprocessProtocol):
    def __init__(self, loop):
        super().__init__(loop)
        self.exited = loop.create_future()

    def process_exited(self):
        self.exited.set_result(None)


async def closed(proto):
    proto.transport.close()
    await proto.lost


async def server_closed(server):
    server.close()
    await server.wait_closed()


async def open_stream_pair(loop, stack, serve, connect):
    """A server, a connection to it and the accepted end, in ``stack``."""
    accepted = Keeper(loop)
    server = await serve(lambda: accepted)
    stack.push_async_callback(server_closed, server)
    client = Keeper(loop)
    await connect(lambda: client, server.sockets[0].getsockname())
    stack.push_async_callback(closed, client)
    await accepted.made
    stack.push_async_callback(closed, accepted)
    return server, client, accepted


async def tcp(loop, stack, tmp_path):
    server, client, accepted = await open_stream_pair(
        loop,
        stack,
        lambda factory: loop.create_server(factory, "127.0.0.1", 0),
        lambda factory, addr: loop.create_connection(factory, *addr),
    )
    return {"server": server, "client": client.transport, "accepted": accepted.transport}


async def unix(loop, stack, tmp_path):
    path = str(tmp_path / "stream.sock")
    server, client, accepted = await open_stream_pair(
        loop,
        stack,
        lambda factory: loop.create_unix_server(factory, path),
        lambda factory, addr: loop.create_unix_connection(factory, addr),
    )
    return {"server": server, "client": client.transport, "accepted": accepted.transport}


async def accepted_socket(loop, stack, tmp_path):
    ours, peer = socket.socketpair()
    stack.callback(peer.close)
    proto = Keeper(loop)
    try:
        await loop.connect_accepted_socket(lambda: proto, ours)
    except BaseException:
        ours.close()
        raise
    stack.push_async_callback(closed, proto)
    return {"transport": proto.transport}


async def tls(loop, stack, tmp_path):
    server_ctx, client_ctx = tls_contexts()
    server, client, accepted = await open_stream_pair(
        loop,
        stack,
        lambda factory: loop.create_server(factory, "127.0.0.1", 0, ssl=server_ctx),
        lambda factory, addr: loop.create_connection(
            factory, *addr, ssl=client_ctx, server_hostname="localhost"
        ),
    )
    return {"client": client.transport, "accepted": accepted.transport}


async def start_tls(loop, stack, tmp_path):
    server_ctx, client_ctx = tls_contexts()
    accepted = Keeper(loop)
    server = await loop.create_server(lambda: accepted, "127.0.0.1", 0, ssl=server_ctx)
    stack.push_async_callback(server_closed, server)
    client = Keeper(loop)
    plain, _ = await loop.create_connection(lambda: client, *server.sockets[0].getsockname())
    try:
        client.transport = await loop.start_tls(
            plain, client, client_ctx, server_hostname="localhost"
        )
    except BaseException:
        plain.close()
        raise
    stack.push_async_callback(closed, client)
    await accepted.made
    stack.push_async_callback(closed, accepted)
    return {"client": client.transport}


async def open_datagram(loop, stack, **kwargs):
    proto = DatagramKeeper(loop)
    await loop.create_datagram_endpoint(lambda: proto, **kwargs)
    stack.push_async_callback(closed, proto)
    return proto.transport


async def datagram(loop, stack, tmp_path):
    udp = await open_datagram(loop, stack, local_addr=("127.0.0.1", 0))
    peer = udp.get_extra_info("sockname")
    connected = await open_datagram(loop, stack, remote_addr=peer)
    local = await open_datagram(
        loop, stack, family=socket.AF_UNIX, local_addr=str(tmp_path / "dgram.sock")
    )
    return {"udp": udp, "udp connected": connected, "unix": local}


async def pipes(loop, stack, tmp_path):
    read_fd, write_fd = os.pipe()
    read_end, write_end = open(read_fd, "rb", 0), open(write_fd, "wb", 0)
    stack.callback(read_end.close)  # a no-op once a transport closed them
    stack.callback(write_end.close)
    reader, writer = Keeper(loop), Keeper(loop)
    await loop.connect_read_pipe(lambda: reader, read_end)
    stack.push_async_callback(closed, reader)
    await loop.connect_write_pipe(lambda: writer, write_end)
    stack.push_async_callback(closed, writer)
    return {"read pipe": reader.transport, "write pipe": writer.transport}


async def child_process(loop, stack, tmp_path):
    proto = SubprocessKeeper(loop)
    pipe = subprocess.PIPE
    await loop.subprocess_exec(
        lambda: proto,
        sys.executable,
        "-c",
        "import sys; sys.stdin.read()",
        stdin=pipe,
        stdout=pipe,
        stderr=pipe,
    )
    transport = proto.transport

    async def ended():
        transport.get_pipe_transport(0).close()  # the child exits on EOF
        await proto.exited
        await closed(proto)

    stack.push_async_callback(ended)
    return {
        "subprocess": transport,
        "stdin": transport.get_pipe_transport(0),
        "stdout": transport.get_pipe_transport(1),
        "stderr": transport.get_pipe_transport(2),
    }


SCENARIOS = {
    "tcp": tcp,
    "unix": unix,
    "connect_accepted_socket": accepted_socket,
    "tls": tls,
    "start_tls": start_tls,
    "datagram": datagram,
    "pipes": pipes,
    "subprocess": child_process,
}


@contextlib.contextmanager
def opened_on_both(scenario, loop, stdlib_loop, tmp_path):
    """``scenario``'s objects, opened on each loop: ``(ref_loop, refs, got_loop, gots)``."""
    opened = {}
    try:
        for kind, lp in (("stdlib", stdlib_loop), ("snakeloop", loop)):
            directory = tmp_path / kind
            directory.mkdir()
            stack = contextlib.AsyncExitStack()
            opened[kind] = (lp, stack, {})
            opened[kind] = (lp, stack, run(lp, scenario(lp, stack, directory)))
        ref_loop, _, refs = opened["stdlib"]
        got_loop, _, gots = opened["snakeloop"]
        assert gots.keys() == refs.keys()
        yield ref_loop, refs, got_loop, gots
    finally:
        for lp, stack, _ in opened.values():
            run(lp, stack.aclose())


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_same_abcs_and_inherited_methods_as_asyncio(scenario, loop, stdlib_loop, tmp_path):
    with opened_on_both(scenario, loop, stdlib_loop, tmp_path) as (ref_loop, refs, got_loop, gots):
        report = [
            f"{name} ({type(gots[name]).__name__}): {difference}"
            for name in refs
            for difference in differences(ref_loop, refs[name], got_loop, gots[name])
        ]
        assert not report, "snakeloop differs from asyncio:\n  " + "\n  ".join(report)


def object_traits(obj):
    """What code outside the loop can do to the object itself, method calls aside."""
    set_attribute = outcome(setattr, obj, "set_by_user_code", "kept")
    return {
        "set an attribute": set_attribute,
        "read it back": outcome(getattr, obj, "set_by_user_code"),
        "refer to it weakly": outcome(lambda: weakref.ref(obj)() is obj),
        "class name in repr": type(obj).__name__ in repr(obj) or None,
    }


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_objects_take_attributes_and_weak_references_as_asyncio_s(
    scenario, loop, stdlib_loop, tmp_path
):
    # The socket transports are C types in the compiled build (no Python base
    # class): they keep a __dict__ and a __weakref__ slot to stay like these.
    with opened_on_both(scenario, loop, stdlib_loop, tmp_path) as (_, refs, _, gots):
        report = [
            f"{name} ({type(gots[name]).__name__}): {trait}: {got!r}, asyncio: {ref!r}"
            for name in refs
            for (trait, ref), got in zip(
                object_traits(refs[name]).items(), object_traits(gots[name]).values(), strict=True
            )
            if got != ref
        ]
        assert not report, "snakeloop differs from asyncio:\n  " + "\n  ".join(report)


@pytest.mark.parametrize("scenario", [tcp, datagram], ids=["tcp", "datagram"])
def test_a_socket_transport_has_no_dict_until_an_attribute_is_set(scenario, loop, tmp_path):
    # Compiled, Cython's tp_new would give each one an empty __dict__, and
    # CPython (3.13 on) specializes a protocol's transport.write() call only
    # on an instance without one.
    stack = contextlib.AsyncExitStack()
    try:
        opened = run(loop, scenario(loop, stack, tmp_path))
        transports = [obj for obj in opened.values() if isinstance(obj, asyncio.BaseTransport)]
        assert transports
        for transport in transports:
            dicts = [r for r in gc.get_referents(transport) if type(r) is dict]
            # The one dict a socket transport holds is its extra info.
            assert dicts == [transport._extra], transport
        transports[0].set_by_user_code = "kept"
        assert vars(transports[0]) == {"set_by_user_code": "kept"}
    finally:
        run(loop, stack.aclose())
