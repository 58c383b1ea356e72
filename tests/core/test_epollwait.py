"""The compiled build's epoll_wait (``runloop.EpollWait``) answers as ``select.epoll.poll``.

The compiled epoll backend polls through it instead of the epoll object's method; the
interpreted build has no such object, so these run on the compiled build only.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import threading
import time

import pytest

import snakeloop
from snakeloop._core.runloop import EpollWait

pytestmark = [
    pytest.mark.skipif(not snakeloop.COMPILED, reason="the compiled build's epoll_wait"),
    pytest.mark.skipif(not hasattr(select, "epoll"), reason="epoll is Linux's"),
]


@pytest.fixture
def epoll():
    ep = select.epoll()
    yield ep, EpollWait(ep.fileno()).poll
    ep.close()


def test_it_reports_what_epoll_poll_reports(epoll):
    ep, wait = epoll
    a, b = socket.socketpair()
    r, w = os.pipe()
    try:
        ep.register(a.fileno(), select.EPOLLIN | select.EPOLLOUT)
        ep.register(r, select.EPOLLIN)
        ep.register(w, select.EPOLLOUT)
        assert (
            sorted(wait(0))
            == sorted(ep.poll(0))
            == [
                (a.fileno(), select.EPOLLOUT),
                (w, select.EPOLLOUT),
            ]
        )
        b.send(b"x")
        os.write(w, b"y")
        ep.unregister(w)
        got = sorted(wait(None))
        assert got == sorted(ep.poll(None))
        assert got == [
            (a.fileno(), select.EPOLLIN | select.EPOLLOUT),
            (r, select.EPOLLIN),
        ]
        assert all(type(fd) is int and type(mask) is int for fd, mask in got)
    finally:
        a.close()
        b.close()
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("timeout", [0.0005, 0.003, 0.02])
def test_it_never_returns_before_its_timeout(epoll, timeout):
    _, wait = epoll
    started = time.monotonic()
    assert wait(timeout) == []
    assert time.monotonic() - started >= timeout


def test_bad_timeouts_and_a_closed_epoll_raise_as_epoll_poll_does(epoll):
    ep, wait = epoll

    class Custom:
        pass

    for bad in ("1", [1], object(), Custom(), 1j):
        with pytest.raises(TypeError) as ours:
            wait(bad)
        with pytest.raises(TypeError) as theirs:
            ep.poll(bad)
        # 3.15 words it "timeout must be a real number or None, not str".
        assert str(ours.value) == str(theirs.value)
        assert str(ours.value).startswith("timeout must be ")
    for huge in (3e6, 1e10):  # more ms than an int holds; more ns than an int64
        with pytest.raises(OverflowError) as ours:
            wait(huge)
        with pytest.raises(OverflowError) as theirs:
            ep.poll(huge)
        assert str(ours.value) == str(theirs.value)
    wait.__self__.close()
    with pytest.raises(ValueError, match="^I/O operation on closed epoll object$"):
        wait(0)


def _signal_main_thread_in(seconds):
    main = threading.get_ident()
    timer = threading.Timer(seconds, signal.pthread_kill, (main, signal.SIGUSR1))
    timer.start()
    return timer


def test_a_signal_runs_its_handler_and_the_wait_goes_on(epoll):
    # PEP 475: the handler runs, then the wait resumes for what is left of it.
    _, wait = epoll
    seen = []
    previous = signal.signal(signal.SIGUSR1, lambda *args: seen.append("signal"))
    try:
        timer = _signal_main_thread_in(0.02)
        started = time.monotonic()
        assert wait(0.2) == []
        assert time.monotonic() - started >= 0.2
        timer.join()
        assert seen == ["signal"]

        def fail(*args):
            raise RuntimeError("from the handler")

        signal.signal(signal.SIGUSR1, fail)
        timer = _signal_main_thread_in(0.02)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="^from the handler$"):
            wait(5)
        assert time.monotonic() - started < 4
        timer.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_the_compiled_epoll_backend_polls_through_it():
    # The module runs only where select.epoll exists, so the default backend is epoll's.
    loop = snakeloop.new_event_loop()
    try:
        assert type(loop._io).__name__ == "EpollBackend"
        assert isinstance(loop._io.poll.__self__, EpollWait)
    finally:
        loop.close()
