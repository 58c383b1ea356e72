"""When callbacks are waiting, snakeloop polls at most every other iteration.

asyncio polls in every iteration, with a timeout of 0 when callbacks are
ready.  snakeloop skips that poll when the run's previous iteration polled
(``_run_iterations``, step 3): I/O it would have found is found one iteration
later, after the callbacks that were waiting, which is what asyncio does when
the I/O comes a moment later.  A server whose reader wakes a task then pays
one ``epoll_wait`` per request instead of two.  A seeded loop polls every
iteration, as asyncio does.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

import snakeloop

# Under seeds every snakeloop loop is seeded, and a seeded loop never skips.
pytestmark = pytest.mark.unseeded

# Enough chain links for the reader's place to show, and for the poll counts.
LINKS = 6


def _chain_then_read(loop, sock_pair):
    """The order of a call_soon chain and a reader whose fd turns readable in link 0."""
    a, b = sock_pair
    order = []

    def on_read():
        a.recv(16)
        order.append("read")

    def link(n):
        order.append(n)
        if n == 0:
            b.send(b"x")
        if n + 1 < LINKS:
            loop.call_soon(link, n + 1)
        else:
            loop.stop()

    loop.add_reader(a, on_read)
    try:
        loop.call_soon(link, 0)
        loop.run_forever()
    finally:
        loop.remove_reader(a)
    return order


@pytest.fixture
def sock_pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    yield a, b
    a.close()
    b.close()


def test_io_is_found_by_the_next_poll_after_the_waiting_callbacks(loop, sock_pair):
    # Iteration 1 polls (a run's first always does) and runs link 0, which
    # makes the fd readable.  Iteration 2 skips its poll, since 1 polled, and
    # runs link 1; iteration 3 polls and finds the fd, behind link 2.
    assert _chain_then_read(loop, sock_pair) == [0, 1, 2, "read", 3, 4, 5]


def test_asyncio_finds_the_same_io_one_iteration_earlier(stdlib_loop, sock_pair):
    # The order snakeloop's would be if the byte had come during link 1.
    assert _chain_then_read(stdlib_loop, sock_pair) == [0, 1, "read", 2, 3, 4, 5]


def test_a_seeded_loop_polls_every_iteration_as_asyncio_does(sock_pair):
    loop = snakeloop.new_event_loop(seed=1)
    try:
        assert _chain_then_read(loop, sock_pair) == [0, 1, "read", 2, 3, 4, 5]
        metrics = loop.metrics()
    finally:
        loop.close()
    assert metrics.polls_skipped == 0


def test_a_busy_loop_watching_an_fd_polls_every_other_iteration(loop, sock_pair):
    a, _ = sock_pair
    loop.add_reader(a, pytest.fail, "the fd never turns readable")
    try:
        before = loop.metrics()

        def link(n):
            if n:
                loop.call_soon(link, n - 1)
            else:
                loop.stop()

        loop.call_soon(link, 99)
        loop.run_forever()
        after = loop.metrics()
    finally:
        loop.remove_reader(a)
    iterations = after.iterations - before.iterations
    polls = after.polls - before.polls
    assert iterations == 100
    # Iterations 1, 3, 5, ... poll; 2, 4, 6, ... skip.
    assert polls == 50
    assert after.polls_skipped - before.polls_skipped == 50


def test_a_runs_first_iteration_polls_even_after_a_run_that_polled(loop, sock_pair):
    # stop() before run_forever: its one iteration is the run's first and
    # polls.  Run twice, so the second run follows a run that polled.
    a, b = sock_pair
    seen = []
    loop.add_reader(a, seen.append, "read")
    try:
        for _ in range(2):
            b.send(b"x")
            loop.call_soon(seen.append, "callback")
            loop.stop()
            loop.run_forever()
            a.recv(16)
    finally:
        loop.remove_reader(a)
    assert seen == ["callback", "read", "callback", "read"]


def _count_polls_of_an_echo(loop, sock_pair, requests):
    """Polls made while a task answers ``requests`` requests, one at a time.

    The client is a reader of the loop's own: it sends the next request when
    it reads an answer, so every request comes while the loop is idle.
    """
    server, client = sock_pair
    client.setblocking(False)
    answered = 0

    def on_answer():
        nonlocal answered
        client.recv(16)
        answered += 1
        if answered == requests:
            client.shutdown(socket.SHUT_WR)
        else:
            client.send(b"ping")

    async def serve():
        while True:
            data = await loop.sock_recv(server, 16)
            if not data:
                return
            await loop.sock_sendall(server, data)

    polls = 0
    poll = loop._poll

    def counted_poll(timeout):
        nonlocal polls
        polls += 1
        return poll(timeout)

    loop.add_reader(client, on_answer)
    loop._poll = counted_poll
    try:
        client.send(b"ping")
        loop.run_until_complete(asyncio.wait_for(serve(), 30))
    finally:
        loop._poll = poll
        loop.remove_reader(client)
    return polls


def test_an_echo_served_by_a_task_costs_one_poll_per_request(loop, sock_pair):
    # Per request: the poll that finds it runs the server's reader, which
    # wakes the task; the task's iteration skips its poll and sends the
    # answer; the next poll finds the answer and runs the client, which sends
    # the next request.  asyncio polls in the task's iteration too.
    requests = 50
    polls = _count_polls_of_an_echo(loop, sock_pair, requests)
    assert 2 * requests <= polls <= 2 * requests + 3, polls


def test_a_seeded_loop_polls_in_the_task_iteration_too(sock_pair):
    requests = 50
    loop = snakeloop.new_event_loop(seed=1)
    try:
        polls = _count_polls_of_an_echo(loop, sock_pair, requests)
    finally:
        loop.close()
    # At least the three of asyncio's iterations per request (a seeded
    # loop's perturbations may add polls of their own).
    assert polls >= 3 * requests, polls
