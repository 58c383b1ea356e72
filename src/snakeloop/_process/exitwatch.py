"""Watching one child process for its exit, with no global child watcher.

OS facts this module relies on:

* ``pidfd_open(pid)`` (Linux 5.3+, ``os.pidfd_open`` since Python 3.9)
  returns an fd that refers to the process itself, not to its pid number,
  and becomes readable once the process has exited.  Readiness does not
  reap it.  The fd is always close-on-exec, so other children never inherit
  it.  It can be opened on a child that has already exited (a zombie).
* An exited child stays a zombie, and its pid stays reserved, until its
  parent reaps it with ``waitpid()``.  As long as nobody else reaps it,
  ``kill(pid, sig)`` cannot reach another process that reused the pid, and
  on a zombie it is a harmless no-op.
* Anyone in the process can reap a child: ``Popen.poll()``/``wait()``, or a
  ``waitpid(-1)`` in unrelated code.  Our ``waitpid`` then fails with ECHILD
  and the status is lost; asyncio reports 255 with a warning in that case,
  unless ``Popen`` stored the status it read.
* ``waitid(P_PID, pid, WEXITED | WNOWAIT)`` waits for the exit without
  reaping, and with ``WNOHANG`` it asks whether the child has exited.  The
  thread fallback waits that way, then reaps under a lock that
  ``send_signal`` also takes, so a signal never goes to a reaped (and maybe
  reused) pid.
* ``pidfd_open`` can be missing (not Linux) or fail: ENOSYS on old kernels,
  EPERM under some seccomp policies, EMFILE.  The fallback is a thread per
  child, blocked in ``waitid``; a blocked wait syscall is retried after
  EINTR by Python (PEP 475).  PyPy 3.11 has neither ``os.pidfd_open`` nor
  ``os.waitid``: there the thread asks ``waitpid(pid, WNOHANG)`` under the
  lock, at most 50 ms apart, and ``has_exited()`` reads whether the child is
  a zombie (``procstat``).
* A pidfd is readable also for a child that some other code reaped: the
  watch then meets ECHILD, as above.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .procstat import is_zombie

if TYPE_CHECKING:
    from .._core.contract import LoopContract

__all__ = ["ChildWatch", "ChildWatches"]

logger = logging.getLogger("asyncio")

_HAVE_WAITID = hasattr(os, "waitid") and hasattr(os, "WNOWAIT")


def _exitcode(status: int) -> int:
    try:
        return os.waitstatus_to_exitcode(status)
    except ValueError:
        # A status we cannot decode (it cannot happen for exited or killed
        # children): pass it on raw, which is what asyncio does too.
        return status


class ChildWatch:
    """Reaps one child and reports its exit code to ``on_exit`` on the loop.

    ``on_exit(returncode)`` runs as a loop callback once the child is
    reaped.  ``proc`` is the ``subprocess.Popen`` object; its ``returncode``
    is set as soon as the child is reaped, so Popen never warns about it
    nor tries to reap it again.
    """

    __slots__ = (
        "pid",
        "since",
        "_proc",
        "_loop",
        "_on_exit",
        "_lock",
        "_pidfd",
        "_reaped",
        "_detached",
    )

    def __init__(
        self, loop: LoopContract, proc: subprocess.Popen[Any], on_exit: Callable[[int], object]
    ) -> None:
        self.pid = proc.pid
        self.since = time.monotonic()
        self._proc = proc
        self._loop = loop
        self._on_exit: Callable[[int], object] | None = on_exit
        self._lock = threading.Lock()
        self._pidfd = -1
        self._reaped = False
        self._detached = False
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self._start_thread(report=True)
        else:
            try:
                loop._add_reader(self._pidfd, self._pidfd_ready)
            except BaseException:
                os.close(self._pidfd)
                self._pidfd = -1
                raise

    # -- reaping -----------------------------------------------------------

    def _reap(self) -> int:
        """waitpid() the child (it has exited) and record its exit code."""
        returncode = self._reap_if_exited(0)
        assert returncode is not None  # a blocking waitpid returns only on an exit
        return returncode

    def _reap_if_exited(self, options: int) -> int | None:
        """waitpid(pid, options) under the lock: the exit code, recorded, or None while
        the child runs (with WNOHANG)."""
        with self._lock:
            proc = self._proc
            try:
                pid, status = os.waitpid(self.pid, options)
                if pid == 0:
                    return None
            except ChildProcessError:
                # Somebody else reaped it.  Popen knows the code if it was Popen.
                returncode = proc.returncode
                if returncode is None:
                    logger.warning(
                        "child process pid %d exit status already read: "
                        " will report returncode 255",
                        self.pid,
                    )
                    returncode = 255
            else:
                returncode = _exitcode(status)
            if proc.returncode is None:
                proc.returncode = returncode
            self._reaped = True
        return returncode

    def _pidfd_ready(self) -> None:
        self._close_pidfd()
        returncode = self._reap()
        self._deliver(returncode)

    def _close_pidfd(self) -> None:
        pidfd = self._pidfd
        if pidfd >= 0:
            self._pidfd = -1
            if not self._loop.is_closed():
                self._loop._remove_reader(pidfd)
            os.close(pidfd)

    def _start_thread(self, *, report: bool) -> None:
        thread = threading.Thread(
            target=self._thread_main, args=(report,), name=f"waitpid-{self.pid}", daemon=True
        )
        thread.start()

    def _thread_main(self, report: bool) -> None:
        if _HAVE_WAITID:
            try:
                os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
            except ChildProcessError:
                pass  # reaped elsewhere; _reap() sorts it out
            returncode = self._reap()
        else:
            returncode = self._reap_when_exited()
        if not report or self._detached:
            return
        try:
            self._loop.call_soon_threadsafe(self._deliver, returncode)
        except RuntimeError:
            pass  # the loop closed meanwhile: the child is reaped all the same

    def _reap_when_exited(self) -> int:
        """Without waitid (PyPy): ask now and then whether the child exited.  A blocking
        waitpid would hold the lock until the exit, and send_signal, which takes it, could
        never send the signal that ends the child; outside the lock it could reap between
        send_signal's check and its kill, which then reaches whatever reused the pid."""
        delay = 0.0005
        while True:
            returncode = self._reap_if_exited(os.WNOHANG)
            if returncode is not None:
                return returncode
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _deliver(self, returncode: int) -> None:
        on_exit = self._on_exit
        if self._detached or on_exit is None:
            return
        self._detached = True
        self._on_exit = None
        on_exit(returncode)

    # -- queries and signals -------------------------------------------------

    @property
    def args(self) -> Any:
        """What the child was started with (``Popen.args``)."""
        return self._proc.args

    def has_exited(self) -> bool:
        """True once the child has exited, whether or not it was reaped yet."""
        if self._reaped or self._proc.returncode is not None:
            return True
        if not _HAVE_WAITID:
            # Not reaped (above), so the pid is still this child's.
            return is_zombie(self.pid)
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def send_signal(self, sig: int) -> None:
        """kill(pid, sig) unless the child has been reaped already."""
        with self._lock:
            if self._reaped or self._proc.returncode is not None:
                return
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    # -- the loop going away -----------------------------------------------

    def detach(self) -> None:
        """The loop is closing: reap the child later, in a thread, unreported."""
        if self._detached:
            return
        self._detached = True
        self._on_exit = None
        if self._pidfd < 0:
            return  # a thread already waits; it will not report
        self._close_pidfd()
        if self.has_exited():
            self._reap()
        else:
            self._start_thread(report=False)

    def forget(self) -> None:
        """In a forked child: the process is not ours; drop our pidfd copy."""
        self._detached = True
        self._on_exit = None
        pidfd = self._pidfd
        self._pidfd = -1
        if pidfd >= 0:
            # Closing this copy leaves the parent's pidfd and its epoll
            # registration untouched (see _process.forking).
            os.close(pidfd)


class ChildWatches:
    """One loop's exit watches, by pid, from a child's start until its exit is delivered.

    What the loop's ``close()`` detaches (the children are still reaped,
    unreported) and what a forked child forgets (they are the parent's).
    """

    __slots__ = ("_loop", "_by_pid")

    def __init__(self, loop: LoopContract) -> None:
        self._loop = loop
        self._by_pid: dict[int, ChildWatch] = {}

    def watch(self, proc: subprocess.Popen[Any], on_exit: Callable[[int], object]) -> ChildWatch:
        """Watch ``proc``; ``on_exit(returncode)`` runs on the loop when it has exited."""
        watch = ChildWatch(self._loop, proc, on_exit)
        self._by_pid[watch.pid] = watch
        return watch

    def __iter__(self) -> Iterator[ChildWatch]:
        """The watches of children whose exit has not been delivered yet."""
        return iter(list(self._by_pid.values()))

    def unwatch(self, pid: int) -> None:
        """The exit of ``pid`` was delivered: stop keeping its watch."""
        self._by_pid.pop(pid, None)

    def detach_all(self) -> None:
        """The loop is closing: see ``ChildWatch.detach``."""
        watches = list(self._by_pid.values())
        self._by_pid.clear()
        for watch in watches:
            watch.detach()

    def forget_all(self) -> None:
        """In a forked child: see ``ChildWatch.forget``."""
        watches = list(self._by_pid.values())
        self._by_pid.clear()
        for watch in watches:
            watch.forget()
