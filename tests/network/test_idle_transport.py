"""What an idle connection's transport holds (issue 33): no write buffer until a write waits.

A server with many idle connections pays for each one's transport.  An empty
``collections.deque`` holds a block of 64 slots (about 760 bytes on 64-bit
CPython), which was a third of what an idle protocol connection cost, so the
stream and datagram transports make their write buffer when the first write
that cannot go at once needs it, and keep it from then on.  These tests read
the transport's ``_buffer`` (white-box) and check that the bytes still arrive
whole, in order, and before the close.  The scale figure is measured in
``benchmarks/``, not here.
"""

from __future__ import annotations

import asyncio
import collections
import socket

import pytest
from _streamkit import drain_nonblocking, tcp_pair


class Keeper(asyncio.Protocol, asyncio.DatagramProtocol):
    """Keeps its transport, and tells when the connection is lost (streams and datagrams)."""

    def connection_made(self, transport):
        self.transport = transport
        self.lost = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc):
        self.lost.set_result(exc)


async def _connect(loop, sock):
    transport, protocol = await loop.create_connection(Keeper, sock=sock)
    return transport, protocol


def test_an_idle_stream_transport_holds_no_write_buffer(loop):
    client, server = tcp_pair()
    with client, server:
        client.setblocking(False)

        async def main():
            transport, protocol = await _connect(loop, server)
            assert transport._buffer is None
            # A write that goes at once leaves none behind either.
            transport.write(b"ping")
            assert transport._buffer is None
            assert transport.get_write_buffer_size() == 0
            await asyncio.sleep(0)
            assert drain_nonblocking(client)[0] == b"ping"
            transport.close()
            await protocol.lost

        loop.run_until_complete(main())


def test_a_write_that_waits_makes_the_buffer_and_every_byte_arrives(loop):
    client, server = tcp_pair()
    with client, server:
        client.setblocking(False)
        # More than loopback's socket buffers hold, so that part of it waits.
        data = bytes(range(251)) * 160_000

        async def main():
            transport, protocol = await _connect(loop, server)
            transport.write(data)
            assert isinstance(transport._buffer, collections.deque)
            assert transport.get_write_buffer_size() > 0
            # close() with bytes still queued: they are delivered, then EOF.
            transport.close()
            received = bytearray()
            while chunk := await loop.sock_recv(client, 1 << 20):
                received += chunk
            assert bytes(received) == data
            assert await protocol.lost is None

        loop.run_until_complete(main())


@pytest.mark.parametrize("connected", [True, False], ids=["connected", "unconnected"])
def test_an_idle_datagram_transport_holds_no_write_buffer(loop, connected):
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with peer:
        peer.bind(("127.0.0.1", 0))
        peer.setblocking(False)
        address = peer.getsockname()

        async def main():
            transport, protocol = await loop.create_datagram_endpoint(
                Keeper,
                local_addr=("127.0.0.1", 0),
                remote_addr=address if connected else None,
            )
            assert transport._buffer is None
            transport.sendto(b"ping", None if connected else address)
            assert transport._buffer is None
            assert transport.get_write_buffer_size() == 0
            await asyncio.sleep(0)
            assert peer.recv(16) == b"ping"
            transport.close()
            await protocol.lost

        loop.run_until_complete(main())


def test_accepted_connections_share_their_listeners_sockname_and_peer_host(loop):
    """Each connection keeps asyncio's extra info, equal to its socket's; the connections
    of one listener hold one sockname tuple and one peer host string between them, not
    one each (about 200 bytes of an idle connection)."""
    accepted = []

    class Accepted(Keeper):
        def connection_made(self, transport):
            super().connection_made(transport)
            accepted.append(self)

    async def main():
        server = await loop.create_server(Accepted, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        try:
            while len(accepted) < 3:
                await asyncio.sleep(0)
            transports = [protocol.transport for protocol in accepted]
            by_client = {sock.getsockname(): sock for sock in clients}
            for transport in transports:
                sock = transport.get_extra_info("socket")
                assert transport.get_extra_info("sockname") == sock.getsockname()
                peername = transport.get_extra_info("peername")
                assert peername == sock.getpeername()
                assert by_client[peername].getpeername() == sock.getsockname()
            socknames = [t.get_extra_info("sockname") for t in transports]
            hosts = [t.get_extra_info("peername")[0] for t in transports]
            assert all(name is socknames[0] for name in socknames)
            assert all(host is hosts[0] for host in hosts)
        finally:
            for sock in clients:
                sock.close()
            for protocol in accepted:
                protocol.transport.close()
                await protocol.lost
            server.close()
            await server.wait_closed()

    loop.run_until_complete(main())
