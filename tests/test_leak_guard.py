"""The suite's fd leak guard (tests/conftest.py) compares which fds are open, not how many.

A planted swap: the test closes an fd that was open before it started and leaks one of its own,
which takes the same number.  The count stays the same, so a count-only guard passed it.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import textwrap

from _loopkit import new_fds, open_fds

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def test_an_fd_swapped_on_the_same_number_is_new():
    given, peer = socket.socketpair()  # open before the "test" below starts
    leaked = None
    try:
        before = open_fds()
        number = given.fileno()
        given.close()
        leaked = socket.socket()
        assert leaked.fileno() == number  # the lowest free number: the one just closed
        after = open_fds()

        assert len(after) == len(before)  # all a count-only check sees
        assert new_fds(before, after) == {number: after[number][1]}
        assert after[number][1].startswith("socket:[")
        assert new_fds(after, before) == {number: before[number][1]}  # what was closed
    finally:
        given.close()
        peer.close()
        if leaked is not None:
            leaked.close()


def test_an_fd_swapped_for_one_on_another_number_is_new():
    given = open(os.devnull, "rb")  # noqa: SIM115 - closed in the middle of the test
    before = open_fds()
    given.close()
    r, w = os.pipe()  # r takes the closed number, w a new one
    os.close(r)
    try:
        after = open_fds()
        assert len(after) == len(before)
        assert list(new_fds(before, after)) == [w]
    finally:
        os.close(w)


def test_the_same_files_are_no_new_fds():
    a, b = socket.socketpair()
    with a, b:
        before = open_fds()
        dup = os.dup(a.fileno())
        os.close(dup)
        assert new_fds(before, open_fds()) == {}


def _eventfd() -> int:
    if hasattr(os, "eventfd"):
        return os.eventfd(0)
    # PyPy's os has no eventfd: libc's, the same system call.
    import ctypes

    fd = ctypes.CDLL(None, use_errno=True).eventfd(0, 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "eventfd")
    return fd


def test_anonymous_inodes_of_other_kinds_differ():
    # An epoll instance and an eventfd share one inode (fstat cannot tell them apart).
    ep = select.epoll()
    before = open_fds()
    number = ep.fileno()
    ep.close()
    efd = _eventfd()
    try:
        assert efd == number
        assert before[number][0][:3] == open_fds()[number][0][:3]
        assert new_fds(before, open_fds()) == {number: "anon_inode:[eventfd]"}
    finally:
        os.close(efd)


SWAPS_AN_INHERITED_FD = """
import socket

GIVEN = socket.socket()  # open at import: before any test's guard looks
KEPT = []


def test_swaps_a_given_fd_for_a_leaked_one():
    number = GIVEN.fileno()
    GIVEN.close()
    KEPT.append(socket.socket())
    assert KEPT[0].fileno() == number


def test_closes_what_it_opens():
    with socket.socket():
        pass
"""


def test_the_guard_fails_a_test_that_swaps_an_inherited_fd(pytester, monkeypatch):
    # The suite's conftest is loaded as a plugin of an inner run, whose test keeps the count
    # of open fds while leaking a socket.
    pytester.makepyfile(test_inner=textwrap.dedent(SWAPS_AN_INHERITED_FD))
    pytester.makeini(
        "[pytest]\nfilterwarnings = error\nasyncio_default_fixture_loop_scope = function\n"
    )
    path = os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    result = pytester.runpytest_subprocess("-p", "conftest", "-p", "no:cacheprovider", timeout=60)
    result.assert_outcomes(passed=2, errors=1)
    out = result.stdout.str()
    assert "ERROR at teardown of test_swaps_a_given_fd_for_a_leaked_one" in out
    assert "file descriptors leaked: {" in out
    assert "closed during the test: {" in out


UNFORMATTABLE_FAILURE = """
import pytest

def _boom():
    raise ValueError("boom")

boom = _boom
# No line table: every traceback entry of boom has tb_lineno None (3.11+).
boom.__code__ = _boom.__code__.replace(co_linetable=b"")

def test_fails():
    boom()

@pytest.mark.xfail(strict=True, reason="fails")
def test_expected_to_fail():
    boom()
"""


def test_a_failure_pytest_cannot_format_is_reported_as_that_tests_failure(pytester, monkeypatch):
    # The suite's conftest as a plugin of an inner run (as above), warnings as errors.
    pytester.makepyfile(test_inner=textwrap.dedent(UNFORMATTABLE_FAILURE))
    pytester.makeini(
        "[pytest]\nfilterwarnings = error\nasyncio_default_fixture_loop_scope = function\n"
    )
    path = os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    result = pytester.runpytest_subprocess("-p", "conftest", "-p", "no:cacheprovider", timeout=60)
    result.assert_outcomes(failed=1, xfailed=1)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    # (PyPy numbers a traceback entry without a line -1, CPython None.)
    no_line = "None" if sys.implementation.name == "cpython" else "-1"
    result.stdout.fnmatch_lines(
        ["*pytest could not format this failure*", f"*line {no_line}, in _boom"]
    )
