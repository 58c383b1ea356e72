"""A race asyncio can produce: two connections ready in one poll, handled in either order.

The server answers the first withdrawal and sends the second one's trigger in
one callback; when the trigger is handled first, both withdrawals see 100.
"""

from __future__ import annotations

import asyncio
import socket


async def bank():
    """Withdraw twice from 100: the second withdrawal is triggered over another connection.

    The server answers the first request and sends the trigger in one
    callback, so both connections become readable in one poll.  If the
    trigger is handled first, the second check still sees 100: overdrawn.
    """
    loop = asyncio.get_running_loop()
    account = {"balance": 100}
    reply_a, serve_a = socket.socketpair()
    trigger_b, serve_b = socket.socketpair()
    for sock in (reply_a, serve_a, trigger_b, serve_b):
        sock.setblocking(False)
    try:

        def server_reads():
            serve_a.recv(100)
            serve_a.send(b"ok")  # the answer to the first withdrawal
            serve_b.send(b"go")  # and, at once, the second one's trigger

        loop.add_reader(serve_a, server_reads)

        async def withdraw(amount, before_act):
            if account["balance"] >= amount:
                await before_act()
                account["balance"] -= amount

        async def round_trip():
            await loop.sock_sendall(reply_a, b"req")
            await loop.sock_recv(reply_a, 100)

        async def no_wait():
            pass

        first = asyncio.create_task(withdraw(60, round_trip))
        await loop.sock_recv(trigger_b, 100)
        await withdraw(60, no_wait)
        await first
        loop.remove_reader(serve_a)
        return account["balance"]
    finally:
        for sock in (reply_a, serve_a, trigger_b, serve_b):
            sock.close()
