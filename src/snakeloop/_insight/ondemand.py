"""``enable()``: a signal makes the process write a snapshot of all its loops to a file.

OS and CPython facts this module relies on:

* CPython runs a Python-level signal handler in the main thread, between
  two bytecodes.  A system call the signal interrupts (``epoll_wait``,
  ``sleep``, ``read``) fails with EINTR; CPython then runs the handler and
  retries the call (PEP 475).  So the handler runs whether the main thread
  is in busy Python code, blocked in a poll, or runs no loop at all; it
  cannot run while the main thread is inside one long C call that holds
  on without returning to the interpreter.
* ``signal.signal`` may only be called from the main thread.
* A handler can be entered again by a signal arriving while it runs.
* ``os.replace`` within one filesystem is atomic: a reader opens either the
  old file or the new one, never a half-written one.
* ``$XDG_RUNTIME_DIR`` is the user's own directory (mode 0700, usually a
  tmpfs).  Without it, a directory under the shared temp dir is made with
  mode 0700 and checked to be ours, since another user could have made it
  first.
"""

from __future__ import annotations

import atexit
import json
import os
import signal as _signal
import sys
import tempfile
from typing import Any

from .snapshot import snapshot

DEFAULT_SIGNAL = _signal.SIGUSR1


def snapshot_dir() -> str:
    """The directory snapshots go to: ``$XDG_RUNTIME_DIR/snakeloop``, else one of our own
    under the temp dir."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "snakeloop")
    return os.path.join(tempfile.gettempdir(), f"snakeloop-{os.getuid()}")


def snapshot_path(pid: int) -> str:
    return os.path.join(snapshot_dir(), f"{pid}.json")


def _own_directory(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{path} is not a private directory of this user")


def write_snapshot(path: str) -> None:
    """Write the snapshot as JSON to ``path``, atomically."""
    directory = os.path.dirname(path) or "."
    if os.path.abspath(directory) == os.path.abspath(snapshot_dir()):
        _own_directory(directory)
    text = json.dumps(snapshot(), indent=1, default=str)
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


# (pid, path) of the snapshots written at the default place: a forked child
# inherits the set, and must leave its parent's file alone.
_written: set[tuple[int, str]] = set()


def _unlink_written() -> None:
    for pid, path in _written:
        if pid == os.getpid():
            try:
                os.unlink(path)
            except OSError:
                pass


def _remove_at_exit(path: str) -> None:
    """A default-place snapshot lives as long as its process: no stale files pile up."""
    if not _written:
        atexit.register(_unlink_written)
    _written.add((os.getpid(), path))


class _Installed:
    """What ``enable()`` installed, and the handler it replaced."""

    __slots__ = ("path", "previous", "signum", "writing")

    def __init__(self, signum: int, previous: Any, path: str | None) -> None:
        self.signum = signum
        self.previous = previous
        self.path = path
        self.writing = False

    def handle(self, signum: int, frame: Any) -> None:
        if self.writing:  # a second signal during the write: the file is on its way
            return
        self.writing = True
        try:
            if self.path is None:
                path = snapshot_path(os.getpid())
                write_snapshot(path)
                _remove_at_exit(path)
            else:
                write_snapshot(self.path)
        except Exception as exc:  # never into the code the signal interrupted
            print(f"snakeloop: the insight snapshot was not written: {exc}", file=sys.stderr)
        finally:
            self.writing = False


_installed: _Installed | None = None


def enable(signal: int = DEFAULT_SIGNAL, path: str | None = None) -> None:
    global _installed
    signum = int(signal)
    previous = _installed
    if previous is not None and previous.signum == signum:
        restore = previous.previous  # enabled again: what to restore stays the original
    else:
        restore = _signal.getsignal(signum)
    installed = _Installed(signum, restore, path)
    _signal.signal(signum, installed.handle)
    if previous is not None and previous.signum != signum:
        _signal.signal(previous.signum, previous.previous)
    _installed = installed


def disable() -> None:
    global _installed
    installed = _installed
    if installed is None:
        return
    previous = installed.previous
    _signal.signal(installed.signum, _signal.SIG_DFL if previous is None else previous)
    _installed = None


def enabled_signal() -> int | None:
    return None if _installed is None else _installed.signum
