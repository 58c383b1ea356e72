"""Starting a child process in a thread of its own, so the loop thread never waits for it.

OS and CPython facts this module relies on:

* ``subprocess.Popen`` returns once the child has called ``exec()`` or
  failed before it: the parent reads a close-on-exec pipe until EOF, which
  blocks, and re-raises the child's error (``FileNotFoundError`` for a
  missing program, with its ``errno`` and ``filename``).  The fork and the
  ``exec`` before that take time too, more with ``preexec_fn`` or a large
  parent.
* A new thread inherits its creator's signal mask, CPU affinity and
  scheduling attributes (on Linux the nice value is per thread), and a
  child inherits them from the thread that forked it.  The thread is
  started by the loop thread for each spawn, so the child gets what the
  loop thread has at that moment, as if it had been forked there.
* On Linux ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the
  child ends, not the process.  A child that asked for a death signal (a
  common ``preexec_fn`` recipe, and some programs ask for one themselves)
  would get it as soon as a short-lived spawning thread ended.  So the
  thread stays until the child has exited: it waits in
  ``waitid(WEXITED | WNOWAIT)``, which reaps nothing and leaves the exit
  status to the loop's exit watch (``exitwatch``).  PyPy 3.11 has no
  ``os.waitid``: there the thread looks now and then, at most 50 ms apart,
  whether the child was reaped (``Popen.returncode``, which the exit watch
  sets) or is a zombie (Linux: the state field of ``/proc/PID/stat`` is
  ``Z`` for a process that exited and was not reaped; a pid cannot be
  reused before its zombie is reaped).
* Any thread may wait for and reap a child forked by another thread of the
  same process (Linux, without ``__WNOTHREAD``), so the exit watch works
  from the loop thread.
* File descriptors belong to the process: ``pass_fds`` and the pipes
  ``Popen`` makes work from any thread, and the fds the loop thread opens
  meanwhile are close-on-exec unless made inheritable on purpose.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from asyncio import exceptions
from typing import TYPE_CHECKING, Any

from .procstat import is_zombie

if TYPE_CHECKING:
    from .._core.contract import LoopContract

__all__ = ["Spawn"]

_HAVE_WAITID = hasattr(os, "waitid") and hasattr(os, "WNOWAIT")


class Spawn:
    """One ``subprocess.Popen(*args, **kwargs)`` made in a new thread.

    The loop awaits ``finish()`` and then takes the child with ``take()``.
    If the loop closes first, ``abandon()`` (from the loop's close) has the
    thread kill and reap the child instead, so none is left running or a
    zombie.
    """

    __slots__ = (
        "_loop",
        "_args",
        "_kwargs",
        "_lock",
        "_proc",
        "_error",
        "_done",
        "_taken",
        "_abandoned",
        "_waiter",
        "command",
        "since",
    )

    def __init__(
        self, loop: LoopContract, args: tuple[Any, ...], kwargs: dict[str, Any], command: str = ""
    ) -> None:
        self._loop = loop
        # For the loop's census of outside work (snakeloop.pending).
        self.command = command
        self.since = time.monotonic()
        # Dropped once Popen was called: the thread outlives the start.
        self._args: Any = args
        self._kwargs: Any = kwargs
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[Any] | None = None
        self._error: BaseException | None = None
        self._done = False  # the outcome has reached the loop thread
        self._taken = False
        self._abandoned = False
        self._waiter: asyncio.Future[None] | None = None
        threading.Thread(target=self._thread_main, name="snakeloop-spawn", daemon=True).start()

    # -- the spawning thread ---------------------------------------------------

    def _thread_main(self) -> None:
        try:
            proc = subprocess.Popen(*self._args, **self._kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the loop thread
            self._error = exc
            self._report()
            return
        finally:
            self._args = self._kwargs = None
        with self._lock:
            self._proc = proc
            abandoned = self._abandoned
        if abandoned or not self._report():
            _kill_and_reap(proc)
            return
        self._wait_for_exit(proc)
        with self._lock:
            abandoned = self._abandoned
        if abandoned:
            proc.wait()  # nobody else will reap it

    def _wait_for_exit(self, proc: subprocess.Popen[Any]) -> None:
        """Block until the child has exited, without reaping it, or has been abandoned
        (``abandon()`` kills it; this thread reaps it then)."""
        if _HAVE_WAITID:
            try:
                os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            except ChildProcessError:
                pass  # reaped already
            return
        # Returning at once would end this thread: the child's death signal would fire
        # (PR_SET_PDEATHSIG), and a child the loop abandons later would stay a zombie.
        delay = 0.0005
        while not self._abandoned and proc.returncode is None and not is_zombie(proc.pid):
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _report(self) -> bool:
        try:
            self._loop.call_soon_threadsafe(self._on_reported)
        except RuntimeError:
            return False  # the loop is closed
        return True

    # -- the loop thread ---------------------------------------------------------

    def _on_reported(self) -> None:
        self._done = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def finish(self) -> exceptions.CancelledError | None:
        """Wait for the outcome; return the cancellation that came meanwhile.

        A cancel cannot stop a spawn under way; the caller gets the child
        all the same and must dispose of it.
        """
        cancelled = None
        while not self._done:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            except exceptions.CancelledError as exc:
                cancelled = exc
        self._waiter = None
        return cancelled

    def take(self) -> subprocess.Popen[Any]:
        """The child (after ``finish()``); raises what ``Popen`` raised."""
        error = self._error
        if error is not None:
            self._error = None
            try:
                raise error
            finally:
                error = None
        self._taken = True
        proc = self._proc
        assert proc is not None  # finish() returned, and Popen did not fail
        return proc

    def abandon(self) -> None:
        """The loop is closing before it took the child: have it killed and reaped."""
        if self._taken:
            return
        with self._lock:
            self._abandoned = True
            proc = self._proc
            if proc is not None:
                # Not reaped yet: the thread reaps only after seeing
                # _abandoned, which it reads under this lock.
                _kill(proc)


def _kill(proc: subprocess.Popen) -> None:
    try:
        proc.kill()
    except (ProcessLookupError, PermissionError):
        pass


def _kill_and_reap(proc: subprocess.Popen) -> None:
    _kill(proc)
    proc.wait()
