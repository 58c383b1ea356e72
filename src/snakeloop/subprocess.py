"""Subprocesses: ``subprocess_exec``, ``subprocess_shell`` and their transport.

A child is started with ``subprocess.Popen`` (so every Popen keyword works:
``cwd``, ``env``, ``pass_fds``, ``start_new_session``, ``process_group``,
...) in a thread of its own, so the loop thread never waits for the fork
and exec (``_process.spawning``).  Its pipes become pipe transports of this
loop, and its exit is watched by a ``ChildWatch`` of its own: a pidfd on
Linux, else a thread.  There is no global child watcher and no SIGCHLD
handler.

OS facts this module relies on:

* ``Popen`` closes every fd but 0, 1, 2 and ``pass_fds`` in the child
  (``close_fds=True`` is the default), and the loop's own fds (epoll,
  eventfd, signal socket, pidfds) are close-on-exec besides.
* A child's pipes and its exit are independent events: the pipes can reach
  EOF before the exit is seen, and a grandchild holding the child's stdout
  keeps the pipe open long after the child exited.
* Sending a signal to a child that has exited but is not reaped yet is
  harmless; to one that was reaped it could hit an unrelated process that
  reused the pid, so that is never done (see ``_process.exitwatch``).

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
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import warnings
from collections.abc import Callable
from typing import Any

from ._core.futures import _set_result_unless_cancelled
from ._process import forking
from ._process.exitwatch import ChildWatch
from ._process.spawning import Spawn

__all__ = ["SubprocessMixin", "SubprocessTransport"]

logger = logging.getLogger("asyncio")


def _format_pipe(fd):
    if fd == subprocess.PIPE:
        return "<pipe>"
    if fd == subprocess.STDOUT:
        return "<stdout>"
    return repr(fd)


class _PipeLink(asyncio.BaseProtocol):
    """The protocol of one child pipe: forwards to the subprocess transport."""

    def __init__(self, owner: SubprocessTransport, fd: int) -> None:
        self.proc = owner
        self.fd = fd
        self.pipe = None
        self.disconnected = False

    def connection_made(self, transport):
        self.pipe = transport

    def __repr__(self) -> str:
        return f"<{self.__class__.__name__} fd={self.fd} pipe={self.pipe!r}>"

    def connection_lost(self, exc):
        self.disconnected = True
        self.proc._pipe_connection_lost(self.fd, exc)
        self.proc = None

    def pause_writing(self):
        self.proc._protocol.pause_writing()

    def resume_writing(self):
        self.proc._protocol.resume_writing()


class _ReadPipeLink(_PipeLink, asyncio.Protocol):
    def data_received(self, data):
        self.proc._pipe_data_received(self.fd, data)


class SubprocessTransport(asyncio.SubprocessTransport):
    """One child process and the transports of its pipes."""

    def __init__(self, loop, protocol, proc, program, waiter=None, extra=None) -> None:
        super().__init__(extra)
        self._closed = False
        self._protocol = protocol
        self._loop = loop
        self._proc = proc
        self._pid = proc.pid
        self._returncode = None
        self._exit_waiters = []
        self._pipes = {}
        self._finished = False
        self._watch = None

        for fd, pipe in ((0, proc.stdin), (1, proc.stdout), (2, proc.stderr)):
            if pipe is not None:
                self._pipes[fd] = None

        self._extra["subprocess"] = proc
        if loop.get_debug():
            logger.debug("process %r created: pid %s", program, self._pid)

        try:
            self._watch = ChildWatch(loop, self._proc, self._process_exited)
            loop._child_watches[self._pid] = self._watch
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

    def _connect_pipes(self):
        proc = self._proc
        loop = self._loop
        for fd, pipe, make, link_class in (
            (0, proc.stdin, loop._make_write_pipe_transport, _PipeLink),
            (1, proc.stdout, loop._make_read_pipe_transport, _ReadPipeLink),
            (2, proc.stderr, loop._make_read_pipe_transport, _ReadPipeLink),
        ):
            if pipe is None:
                continue
            link = link_class(self, fd)
            link.pipe = make(pipe, link)
            self._pipes[fd] = link

    def _close_unconnected_pipes(self):
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

    def __del__(self, _warn=warnings.warn):
        if not self._closed:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self.close()

    def get_pid(self) -> int | None:
        return self._pid

    def get_returncode(self) -> int | None:
        return self._returncode

    def get_pipe_transport(self, fd: int) -> asyncio.BaseTransport | None:
        if fd in self._pipes:
            return self._pipes[fd].pipe
        return None

    def _check_proc(self):
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

    def _pipe_connection_lost(self, fd, exc):
        self._loop.call_soon(self._protocol.pipe_connection_lost, fd, exc)
        self._try_finish()

    def _pipe_data_received(self, fd, data):
        self._loop.call_soon(self._protocol.pipe_data_received, fd, data)

    def _process_exited(self, returncode):
        loop = self._loop
        loop._child_watches.pop(self._pid, None)
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

    def _try_finish(self):
        if self._finished or self._returncode is None:
            return
        if all(link is not None and link.disconnected for link in self._pipes.values()):
            self._finished = True
            self._loop.call_soon(self._call_connection_lost, None)

    def _call_connection_lost(self, exc):
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._loop = None
            self._proc = None
            self._protocol = None


class SubprocessMixin:
    """``subprocess_exec``/``subprocess_shell`` and fork safety for the loop."""

    def _init_subprocess(self) -> None:
        self._child_watches = {}
        self._spawns = set()
        forking.track(self)

    def _close_subprocess(self) -> None:
        # Children still starting are killed and reaped by their spawning
        # thread; children still running are reaped by a thread each, so
        # none is left a zombie; nothing is reported any more.
        spawns = list(self._spawns)
        self._spawns.clear()
        for spawn in spawns:
            spawn.abandon()
        watches = list(self._child_watches.values())
        self._child_watches.clear()
        for watch in watches:
            watch.detach()

    def _log_subprocess(self, msg, stdin, stdout, stderr):
        info = [msg]
        if stdin is not None:
            info.append(f"stdin={_format_pipe(stdin)}")
        if stdout is not None and stderr == subprocess.STDOUT:
            info.append(f"stdout=stderr={_format_pipe(stdout)}")
        else:
            if stdout is not None:
                info.append(f"stdout={_format_pipe(stdout)}")
            if stderr is not None:
                info.append(f"stderr={_format_pipe(stderr)}")
        logger.debug(" ".join(info))

    async def _make_subprocess_transport(
        self, protocol, args, shell, stdin, stdout, stderr, bufsize, extra=None, **kwargs
    ):
        # Popen runs in a thread of its own (_process.spawning): the loop
        # thread never waits for the fork and exec.
        spawn = Spawn(
            self,
            (args,),
            dict(
                shell=shell,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                universal_newlines=False,
                bufsize=bufsize,
                **kwargs,
            ),
        )
        self._spawns.add(spawn)
        try:
            cancelled = await spawn.finish()
        except BaseException:
            # The coroutine is being closed: nobody will take the child.
            spawn.abandon()
            raise
        finally:
            self._spawns.discard(spawn)
        try:
            proc = spawn.take()
        except BaseException:
            if cancelled is not None:
                raise cancelled from None
            raise
        program = args if isinstance(args, (bytes, str)) else args[0]
        waiter = self.create_future()
        transport = SubprocessTransport(self, protocol, proc, program, waiter=waiter, extra=extra)
        try:
            if cancelled is not None:
                # Cancelled while the child was being started: the caller
                # never sees it, so it is killed and reaped here, as after a
                # cancel below (python/cpython#125502).
                raise cancelled
            await waiter
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:
            transport.close()
            await transport._wait()
            raise
        return transport

    async def subprocess_shell(
        self,
        protocol_factory: Callable[[], asyncio.SubprocessProtocol],
        cmd: str | bytes,
        *,
        stdin: Any = subprocess.PIPE,
        stdout: Any = subprocess.PIPE,
        stderr: Any = subprocess.PIPE,
        universal_newlines: bool = False,
        shell: bool = True,
        bufsize: int = 0,
        encoding: None = None,
        errors: None = None,
        text: None = None,
        **kwargs: Any,
    ) -> tuple[asyncio.SubprocessTransport, asyncio.SubprocessProtocol]:
        """Run ``cmd`` through the shell; the caller quotes it (``shlex.quote``)."""
        if not isinstance(cmd, (bytes, str)):
            raise ValueError("cmd must be a string")
        if universal_newlines:
            raise ValueError("universal_newlines must be False")
        if not shell:
            raise ValueError("shell must be True")
        return await self._start_subprocess(
            protocol_factory,
            cmd,
            True,
            f"run shell command {cmd!r}",
            stdin,
            stdout,
            stderr,
            bufsize,
            text,
            encoding,
            errors,
            kwargs,
        )

    async def subprocess_exec(
        self,
        protocol_factory: Callable[[], asyncio.SubprocessProtocol],
        program: Any,
        *args: Any,
        stdin: Any = subprocess.PIPE,
        stdout: Any = subprocess.PIPE,
        stderr: Any = subprocess.PIPE,
        universal_newlines: bool = False,
        shell: bool = False,
        bufsize: int = 0,
        encoding: None = None,
        errors: None = None,
        text: None = None,
        **kwargs: Any,
    ) -> tuple[asyncio.SubprocessTransport, asyncio.SubprocessProtocol]:
        """Run ``program`` with ``args``, never through a shell."""
        if universal_newlines:
            raise ValueError("universal_newlines must be False")
        if shell:
            raise ValueError("shell must be False")
        return await self._start_subprocess(
            protocol_factory,
            (program,) + args,
            False,
            f"execute program {program!r}",
            stdin,
            stdout,
            stderr,
            bufsize,
            text,
            encoding,
            errors,
            kwargs,
        )

    async def _start_subprocess(
        self,
        protocol_factory,
        popen_args,
        shell,
        what,
        stdin,
        stdout,
        stderr,
        bufsize,
        text,
        encoding,
        errors,
        kwargs,
    ):
        """The checks and the start that subprocess_shell and _exec share."""
        if bufsize != 0:
            raise ValueError("bufsize must be 0")
        if text:
            raise ValueError("text must be False")
        if encoding is not None:
            raise ValueError("encoding must be None")
        if errors is not None:
            raise ValueError("errors must be None")
        protocol = protocol_factory()
        debug_log = None
        if self._debug:
            # ``what`` names only the program or command: arguments may hold
            # secrets and be long.
            debug_log = what
            self._log_subprocess(debug_log, stdin, stdout, stderr)
        transport = await self._make_subprocess_transport(
            protocol, popen_args, shell, stdin, stdout, stderr, bufsize, **kwargs
        )
        if self._debug and debug_log is not None:
            logger.info("%s: %r", debug_log, transport)
        return transport, protocol
