"""The child side of fork(): a failure while a loop is disowned is reported, not swallowed.

asyncio's own at-fork hook (3.12+) raises whatever fails in it, and CPython
hands an exception from an at-fork hook to ``sys.unraisablehook``.  snakeloop's
hook must do no less, and must still disown every part and every loop.

Each child reports a JSON result through a pipe and leaves with ``os._exit``
so that nothing of pytest runs twice.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys

import pytest
from _loopkit import fork_call, reap, snakeloop_module

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


def _fork_and_report(child_main) -> tuple[int, object]:
    """Fork; the child's ``child_main()`` result comes back as JSON (``_loopkit.fork_call``)."""
    pid, r = fork_call(child_main)
    with open(r, "rb") as f:
        data = f.read()
    return reap(pid), json.loads(data or b"null")


class _BackendThatFailsToCloseInAChild:
    """The default backend, whose close() fails in any process but its creator's."""

    def __init__(self) -> None:
        from snakeloop._io import default_backend

        self._inner = default_backend()
        self._owner = os.getpid()
        self.poll = self._inner.poll

    def fileno(self) -> int:
        return self._inner.fileno()

    def register(self, fd: int, events: int) -> None:
        self._inner.register(fd, events)

    def modify(self, fd: int, events: int) -> None:
        self._inner.modify(fd, events)

    def unregister(self, fd: int) -> None:
        self._inner.unregister(fd)

    def close(self) -> None:
        self._inner.close()
        if os.getpid() != self._owner:
            raise OSError(errno.EIO, "injected close failure")


def test_a_failure_while_disowning_is_reported_and_the_rest_still_runs(monkeypatch):
    snakeloop = snakeloop_module()
    reports = []
    # The hook that runs in the child is whichever is set when fork() is
    # called: the child records into its own copy of ``reports``.
    monkeypatch.setattr(sys, "unraisablehook", reports.append)
    failing = snakeloop.Loop(io_backend=_BackendThatFailsToCloseInAChild())
    healthy = snakeloop.Loop()
    failing.add_signal_handler(signal.SIGUSR1, lambda: None)
    # White-box: closing the waker's copy is the step after the one that fails.
    waker_fd = failing._waker.fileno()

    def closed(fd):
        try:
            os.fstat(fd)
        except OSError as exc:
            return exc.errno == errno.EBADF
        return False

    def child():
        return {
            "reports": [
                {
                    "type": type(report.exc_value).__name__,
                    "message": str(report.exc_value),
                    "notes": getattr(report.exc_value, "__notes__", []),
                }
                for report in reports
            ],
            "closed": [failing.is_closed(), healthy.is_closed()],
            # The other parts ran although the backend's failed.
            "wakeup_fd": signal.set_wakeup_fd(-1),
            "waker_closed": closed(waker_fd),
        }

    try:
        rc, result = _fork_and_report(child)
    finally:
        failing.remove_signal_handler(signal.SIGUSR1)
        failing.close()
        healthy.close()
    assert rc == 0, result
    assert result == {
        "reports": [
            {
                "type": "OSError",
                "message": "[Errno 5] injected close failure",
                "notes": [f"while disowning {failing!r} in a forked child"],
            }
        ],
        "closed": [True, True],
        "wakeup_fd": -1,
        "waker_closed": True,
    }
