"""Staggered connection attempts (Happy Eyeballs, RFC 8305).

Attempts start one at a time, ``delay`` seconds apart, or at once when the
previous attempt fails.  The first to connect wins; the others are
cancelled, and any that connected anyway in the same iteration have their
sockets closed, so no fd outlives the race.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

__all__ = ["staggered_connect"]


async def staggered_connect(
    attempts: Iterable[Callable[[], Coroutine[Any, Any, socket.socket]]], delay: float
) -> socket.socket | None:
    """The result of the first attempt that succeeds, or None if all fail.

    Each attempt records its own failure (the caller collects errors); an
    attempt's result must be a socket, closed here if it loses the race.
    """
    loop = asyncio.get_running_loop()
    pending = iter(attempts)
    running: set[asyncio.Task[socket.socket]] = set()
    winner = None
    try:
        while True:
            factory = next(pending, None)
            if factory is not None:
                running.add(loop.create_task(factory()))
            if not running:
                return None
            done, _ = await asyncio.wait(
                running,
                timeout=delay if factory is not None else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            for task in done:
                running.discard(task)
                if not task.cancelled() and task.exception() is None and winner is None:
                    winner = task.result()
                    return winner
    finally:
        for task in running:
            task.cancel()
        if running:
            # Let the losers unwind (their own cleanup closes half-open
            # sockets); one that connected anyway is closed here.
            try:
                done, _ = await asyncio.wait(running)
            except BaseException:
                # Cancelled while waiting for them: the winner will never be
                # returned, and the losers finish on their own.
                if winner is not None:
                    winner.close()
                for task in running:
                    task.add_done_callback(_close_if_connected)
                raise
            for task in done:
                if not task.cancelled() and task.exception() is None:
                    sock = task.result()
                    if sock is not winner:
                        sock.close()


def _close_if_connected(task: asyncio.Task[socket.socket]) -> None:
    if not task.cancelled() and task.exception() is None:
        task.result().close()
