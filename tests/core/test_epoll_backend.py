"""The epoll backend (src/snakeloop/_io/epoll.py) on every interpreter."""

from __future__ import annotations

import select
import socket
import threading

import pytest

import snakeloop
from snakeloop._core.runloop import EpollWait
from snakeloop._io.epoll import EpollBackend

pytestmark = pytest.mark.skipif(not hasattr(select, "epoll"), reason="epoll is Linux's")


@pytest.mark.parametrize(
    "wait",
    [
        None,
        pytest.param(
            EpollWait,
            marks=pytest.mark.skipif(not snakeloop.COMPILED, reason="the compiled build's"),
        ),
    ],
    ids=["epoll.poll", "EpollWait"],
)
def test_the_epoll_backend_blocks_on_none_until_an_fd_is_ready(wait):
    # The loop polls with None when it watches fds and has no timer.  PyPy's epoll.poll
    # refuses None (TypeError), where CPython's blocks: the backend hides the difference.
    backend = EpollBackend(wait)
    a, b = socket.socketpair()
    try:
        backend.register(a.fileno(), select.EPOLLIN)
        timer = threading.Timer(0.05, b.send, (b"x",))
        timer.start()
        try:
            assert backend.poll(None) == [(a.fileno(), select.EPOLLIN)]
        finally:
            timer.join()
    finally:
        backend.close()
        a.close()
        b.close()
