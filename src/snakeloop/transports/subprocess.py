"""The subprocess transport: one child process and the transports of its pipes.

``loop.subprocess_exec``/``subprocess_shell`` (``snakeloop.subprocess``)
start the child and make this transport.  Its pipes are pipe transports of
the loop (``transports.pipes``), and its exit is reported by a ``ChildWatch``
that the loop's ``ChildWatches`` keeps until the exit is delivered.

Behaviour follows asyncio's ``base_subprocess``, with these choices:

* the pipes are connected as soon as the child is started, without a
  helper task, so ``get_pipe_transport()`` never sees a half-connected
  transport; the protocol still gets ``connection_made`` before any
  ``pipe_data_received``, ``pipe_connection_lost`` or ``process_exited``;
* ``_wait()`` (``Process.wait()``) returns once the child has exited, even
  if a grandchild keeps a pipe open (python/cpython#119710, the behaviour
  upstream asyncio adopted);
* ``close()`` never reaps the child behind the watcher's back, so the exit
  code reported is the real one, not 255.

OS facts this module relies on:

* A child's pipes and its exit are independent events: the pipes can reach
  EOF before the exit is seen, and a grandchild holding the child's stdout
  keeps the pipe open long after the child exited.
* Sending a signal to a child that has exited but is not reaped yet is
  harmless; to one that was reaped it could hit an unrelated process that
  reused the pid, so that is never done (see ``_process.exitwatch``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import warnings
from typing import TYPE_CHECKING, Any

from .._core.futures import _set_result_unless_cancelled
from .._process.exitwatch import ChildWatches
from .pipes import ReadPipeTransport, WritePipeTransport

if TYPE_CHECKING:
    from .._core.contract import LoopContract

__all__ = ["SubprocessTransport"]

logger = logging.getLogger("asyncio")


class _PipeLink(asyncio.BaseProtocol):
    """The protocol of one child pipe: forwards to the subprocess transport."""

    def __init__(self, owner: SubprocessTransport, fd: int) -> None:
        # None once the pipe is lost: nothing is forwarded after that.
        self.proc: Any = owner
        self.fd = fd
        self.pipe: Any = None
        self.disconnected = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.pipe = transport

    def __repr__(self) -> str:
        return f"<{self.__class__.__name__} fd={self.fd} pipe={self.pipe!r}>"

    def connection_lost(self, exc: Exception | None) -> None:
        self.disconnected = True
        self.proc._pipe_connection_lost(self.fd, exc)
        self.proc = None

    def pause_writing(self) -> None:
        self.proc._protocol.pause_writing()

    def resume_writing(self) -> None:
        self.proc._protocol.resume_writing()


class _ReadPipeLink(_PipeLink, asyncio.Protocol):
    def data_received(self, data: bytes) -> None:
        self.proc._pipe_data_received(self.fd, data)


class SubprocessTransport(asyncio.SubprocessTransport):
    """One child process and the transports of its pipes.

    ``watches`` is the loop's registry of exit watches: the child's watch
    is kept there from now until its exit is delivered.
    """

    _extra: dict[str, Any]

    def __init__(
        self,
        loop: LoopContract,
        protocol: asyncio.SubprocessProtocol,
        proc: subprocess.Popen[bytes],
        program: object,
        waiter: asyncio.Future[None] | None = None,
        extra: dict[str, Any] | None = None,
        *,
        watches: ChildWatches,
    ) -> None:
        super().__init__(extra)
        self._closed = False
        self._protocol: Any = protocol
        self._loop: LoopContract = loop
        self._proc: Any = proc
        self._pid = proc.pid
        self._returncode: int | None = None
        self._exit_waiters: list[asyncio.Future[int]] = []
        self._pipes: dict[int, _PipeLink | None] = {}
        self._finished = False
        self._watches = watches
        self._watch: Any = None

        for fd, pipe in ((0, proc.stdin), (1, proc.stdout), (2, proc.stderr)):
            if pipe is not None:
                self._pipes[fd] = None

        self._extra["subprocess"] = proc
        if loop.get_debug():
            logger.debug("process %r created: pid %s", program, self._pid)

        try:
            self._watch = watches.watch(proc, self._process_exited)
            self._connect_pipes()
        except BaseException:
            self._close_unconnected_pipes()
            self.close()
            raise

        # The pipe transports queued their connection_made() above, so the
        # protocol's comes after theirs, and before anything a pipe or the
        # exit watch can report (those need at least one more poll).
        loop.call_soon(self._protocol.connection_made, self)
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None)

    def _connect_pipes(self) -> None:
        proc = self._proc
        loop = self._loop
        if proc.stdin is not None:
            link = _PipeLink(self, 0)
            link.pipe = WritePipeTransport(loop, proc.stdin, link)
            self._pipes[0] = link
        for fd, pipe in ((1, proc.stdout), (2, proc.stderr)):
            if pipe is not None:
                link = _ReadPipeLink(self, fd)
                link.pipe = ReadPipeTransport(loop, pipe, link)
                self._pipes[fd] = link

    def _close_unconnected_pipes(self) -> None:
        proc = self._proc
        for fd, pipe in ((0, proc.stdin), (1, proc.stdout), (2, proc.stderr)):
            if pipe is not None and self._pipes.get(fd) is None:
                pipe.close()

    def __repr__(self) -> str:
        info = [self.__class__.__name__]
        if self._closed:
            info.append("closed")
        if self._pid is not None:
            info.append(f"pid={self._pid}")
        if self._returncode is not None:
            info.append(f"returncode={self._returncode}")
        elif self._pid is not None:
            info.append("running")
        else:
            info.append("not started")

        stdin = self._pipes.get(0)
        if stdin is not None:
            info.append(f"stdin={stdin.pipe}")
        stdout = self._pipes.get(1)
        stderr = self._pipes.get(2)
        if stdout is not None and stderr is stdout:
            info.append(f"stdout=stderr={stdout.pipe}")
        else:
            if stdout is not None:
                info.append(f"stdout={stdout.pipe}")
            if stderr is not None:
                info.append(f"stderr={stderr.pipe}")
        return "<{}>".format(" ".join(info))

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def is_closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        for link in self._pipes.values():
            if link is None:
                continue
            link.pipe.close()

        if self._proc is not None and self._returncode is None and self._child_running():
            if self._loop.get_debug():
                logger.warning("Close running child process: kill %r", self)
            try:
                if self._watch is not None:
                    # Not Popen.kill: it polls first, and a poll that finds the
                    # child just dead (a kill() right before, say) reaps it, so
                    # the watch reads no status and reports 255.
                    self._watch.send_signal(signal.SIGKILL)
                else:
                    self._proc.kill()
            except (ProcessLookupError, PermissionError):
                # Gone already, or setuid and out of our reach.
                pass
            # _proc stays: the exit watch still reports to this transport.

    def _child_running(self) -> bool:
        # Exited-but-not-yet-reported counts as finished: such a child must
        # not be killed.  Checked without reaping, so the watch still gets
        # the exit code.
        watch = self._watch
        if watch is not None:
            return not watch.has_exited()
        return self._proc.returncode is None

    def __del__(self, _warn: Any = warnings.warn) -> None:
        if not self._closed:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self.close()

    def get_pid(self) -> int:
        return self._pid

    def get_returncode(self) -> int | None:
        return self._returncode

    def get_pipe_transport(self, fd: int) -> asyncio.BaseTransport | None:
        link = self._pipes.get(fd)
        return None if link is None else link.pipe

    def _check_proc(self) -> None:
        if self._proc is None:
            raise ProcessLookupError()

    def send_signal(self, signal: int) -> None:
        self._check_proc()
        self._watch.send_signal(signal)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    # -- events from the pipes and the exit watch ----------------------------

    def _pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._loop.call_soon(self._protocol.pipe_connection_lost, fd, exc)
        self._try_finish()

    def _pipe_data_received(self, fd: int, data: bytes) -> None:
        self._loop.call_soon(self._protocol.pipe_data_received, fd, data)

    def _process_exited(self, returncode: int) -> None:
        loop = self._loop
        self._watches.unwatch(self._pid)
        if loop.get_debug():
            logger.info("%r exited with return code %r", self, returncode)
        self._returncode = returncode
        if self._proc.returncode is None:
            self._proc.returncode = returncode
        loop.call_soon(self._protocol.process_exited)
        self._try_finish()
        # Process.wait() is about the process, not its pipes: a grandchild
        # may hold them open for ever.
        waiters = self._exit_waiters
        self._exit_waiters = []
        for waiter in waiters:
            if not waiter.cancelled():
                waiter.set_result(returncode)

    async def _wait(self) -> int:
        """Wait for the child to exit; return its exit code."""
        if self._returncode is not None:
            return self._returncode
        waiter = self._loop.create_future()
        self._exit_waiters.append(waiter)
        return await waiter

    def _try_finish(self) -> None:
        if self._finished or self._returncode is None:
            return
        if all(link is not None and link.disconnected for link in self._pipes.values()):
            self._finished = True
            self._loop.call_soon(self._call_connection_lost, None)

    def _call_connection_lost(self, exc: Exception | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            # Done with the loop: the transport is finished and no longer uses it.
            self._loop = None  # type: ignore[assignment]
            self._proc = None
            self._protocol = None
