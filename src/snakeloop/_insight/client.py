"""The CLI's side of ``enable()``: signal a process, wait for its snapshot, read it.

OS facts this module relies on:

* SIGUSR1's default action terminates the process, so a process without a
  handler must not be sent it.  Linux lists the signals a process catches
  in ``/proc/PID/status`` (``SigCgt``, a hex mask, bit ``signum - 1``).
* ``kill(pid, 0)`` checks that the process exists and may be signalled,
  without sending anything.
* The snapshot replaces its file (``os.replace``): a new inode, so a
  changed ``(st_ino, st_mtime_ns)`` says a new snapshot has arrived.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from .ondemand import DEFAULT_SIGNAL, snapshot_path

HOW_TO_ENABLE = "start it with python -m snakeloop --insight or call snakeloop.insight.enable()"


class NoSnapshot(Exception):
    """The process gave no snapshot; the message says why and what to do."""


def _catches(pid: int, signum: int) -> bool | None:
    """Whether ``pid`` has a handler for ``signum``; None when the OS does not say."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns


def request_snapshot(
    pid: int, *, signum: int = DEFAULT_SIGNAL, timeout: float = 5.0, path: str | None = None
) -> dict[str, Any]:
    """Ask ``pid`` for a snapshot and return it; ``NoSnapshot`` when none comes."""
    name = signal.Signals(signum).name
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise NoSnapshot(f"no process with PID {pid}") from None
    except PermissionError:
        raise NoSnapshot(f"not allowed to signal process {pid}") from None
    if _catches(pid, signum) is False:
        raise NoSnapshot(
            f"process {pid} has no handler for {name}, so it cannot report its loops "
            f"(and {name} would end it); {HOW_TO_ENABLE}"
        )
    path = path or snapshot_path(pid)
    before = _identity(path)
    os.kill(pid, signum)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.01)
        now = _identity(path)
        if now is None or now == before:
            continue
        try:
            with open(path, encoding="utf-8") as data:
                loaded: dict[str, Any] = json.load(data)
        except (OSError, ValueError):
            continue
        if loaded.get("pid") == pid:
            return loaded
    raise NoSnapshot(
        f"process {pid} did not answer {name} within {timeout:g} s: it is not a snakeloop "
        f"program with insight enabled, or its main thread is stuck in C code; {HOW_TO_ENABLE}"
    )
