"""How a signal's handler reaches the loop: through the core's internal-reader table.

``signal.pthread_kill`` at the calling thread delivers the signal before it
returns, so CPython's C handler has written the wakeup byte by then: the
iteration in which the signal is read is known.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import threading

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Unix signals")


def _raise_here(sig: int) -> None:
    signal.pthread_kill(threading.get_ident(), sig)


@pytest.mark.parametrize("watching_a_reader", [False, True])
def test_handler_runs_in_the_iteration_that_reads_the_signal(loop, watching_a_reader):
    # Iteration 2 raises the signal and queues ``marker``.  Iteration 3
    # polls, reads the signal byte, and runs ``marker`` then the handler;
    # ``marker``'s own callback waits for iteration 4.  Had the handler been
    # queued for the next iteration, it would come after ``after_marker``.
    # (The signal is raised in iteration 2, not 1: with callbacks waiting,
    # snakeloop skips the poll of an iteration that follows one that polled,
    # and a run's first iteration polls, so iteration 2 may not.)
    order = []

    def marker():
        order.append("marker")
        loop.call_soon(order.append, "after_marker")

    def second():
        _raise_here(signal.SIGUSR1)
        loop.call_soon(marker)

    def first():
        loop.call_soon(second)

    idle_a, idle_b = socket.socketpair()
    if watching_a_reader:
        loop.add_reader(idle_a, order.append, "never readable")
    loop.add_signal_handler(signal.SIGUSR1, order.append, "handler")
    try:
        loop.call_soon(first)
        loop.run_until_complete(asyncio.sleep(0.05))
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
        loop.remove_reader(idle_a)
        idle_a.close()
        idle_b.close()
    assert order == ["marker", "handler", "after_marker"]


def test_handler_runs_while_callbacks_keep_the_loop_busy(any_loop):
    # No fd is watched and a callback is always ready: the loop must still
    # poll for the signal pipe, or the handler waits for an idle moment
    # that never comes.
    got = []
    any_loop.add_signal_handler(signal.SIGUSR1, got.append, "handler")

    async def spin():
        _raise_here(signal.SIGUSR1)
        for _ in range(10_000):
            if got:
                break
            await asyncio.sleep(0)
        return got

    try:
        assert any_loop.run_until_complete(spin()) == ["handler"]
    finally:
        any_loop.remove_signal_handler(signal.SIGUSR1)
