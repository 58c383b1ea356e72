"""Subprocesses: the loop's ``Children``, behind ``subprocess_exec`` and ``subprocess_shell``.

A child is started with ``subprocess.Popen`` (so every Popen keyword works:
``cwd``, ``env``, ``pass_fds``, ``start_new_session``, ``process_group``,
...) in a thread of its own, so the loop thread never waits for the fork
and exec (``_process.spawning``).  Its pipes become pipe transports of this
loop, and its exit is watched by a ``ChildWatch`` of its own: a pidfd on
Linux, else a thread (``_process.exitwatch``).  There is no global child
watcher and no SIGCHLD handler.  The transport is
``transports.subprocess.SubprocessTransport``.

OS facts this module relies on:

* ``Popen`` closes every fd but 0, 1, 2 and ``pass_fds`` in the child
  (``close_fds=True`` is the default), and the loop's own fds (epoll,
  eventfd, signal pipe, pidfds) are close-on-exec besides.
* A child being started, or still running, when the loop closes must still
  be reaped by someone, or it stays a zombie: its spawning thread, or a
  thread of its exit watch, does that.
* In a forked child, the parent's children are not children: they cannot be
  waited for, and must not be signalled or killed from there.

``Children.pending()`` lists the spawns under way and the children whose
exit has not reached the loop yet, for the loop's census of outside work
(``snakeloop.pending``): each can still wake the loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ._process.exitwatch import ChildWatch, ChildWatches
from ._process.spawning import Spawn
from .transports.subprocess import SubprocessTransport

if TYPE_CHECKING:
    from typing import IO

    from ._core.contract import LoopContract
    from .pending import Pending

    # What a child's stdin, stdout or stderr may be, as subprocess_exec takes it.
    _Pipe = int | IO[Any] | None

# SubprocessTransport is named here too, where it was defined before it
# moved to transports.subprocess.
__all__ = ["Children", "SubprocessTransport"]

logger = logging.getLogger("asyncio")

# How much of a command line a census label shows.
_COMMAND_TEXT_MAX = 80

_ProtocolT = TypeVar("_ProtocolT", bound=asyncio.BaseProtocol)


def _format_pipe(fd: object) -> str:
    if fd == subprocess.PIPE:
        return "<pipe>"
    if fd == subprocess.STDOUT:
        return "<stdout>"
    return repr(fd)


def command_text(args: Any) -> str:
    """A child's command line, shortened, for reports (``Popen.args``)."""
    if isinstance(args, (str, bytes, os.PathLike)):
        text = os.fsdecode(args)
    else:
        try:
            text = " ".join(
                os.fsdecode(arg) if isinstance(arg, (str, bytes, os.PathLike)) else str(arg)
                for arg in args
            )
        except TypeError:
            text = str(args)
    if len(text) > _COMMAND_TEXT_MAX:
        text = text[: _COMMAND_TEXT_MAX - 3] + "..."
    return text


def _log_start(msg: str, stdin: object, stdout: object, stderr: object) -> None:
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


class Children:
    """A loop's child processes: started in threads, watched for their exit.

    ``loop`` is used only through the loop contract (``_debug``, and what
    ``ChildWatch`` uses) and its public methods.  The loop's ``close()``
    lets the children go, to be reaped unreported; a forked child forgets
    them.
    """

    __slots__ = ("_loop", "_spawns", "_watches")

    def __init__(self, loop: LoopContract) -> None:
        self._loop = loop
        self._spawns: set[Spawn] = set()
        self._watches = ChildWatches(loop)

    async def start_shell(
        self,
        protocol_factory: Callable[[], _ProtocolT],
        cmd: str | bytes,
        *,
        stdin: _Pipe,
        stdout: _Pipe,
        stderr: _Pipe,
        universal_newlines: bool,
        shell: bool,
        bufsize: int,
        encoding: None,
        errors: None,
        text: bool | None,
        popen_kwargs: dict[str, Any],
    ) -> tuple[asyncio.SubprocessTransport, _ProtocolT]:
        """``loop.subprocess_shell``: the caller quotes ``cmd`` (``shlex.quote``)."""
        if not isinstance(cmd, (bytes, str)):
            raise ValueError("cmd must be a string")
        if universal_newlines:
            raise ValueError("universal_newlines must be False")
        if not shell:
            raise ValueError("shell must be True")
        return await self._start(
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
            popen_kwargs,
        )

    async def start_exec(
        self,
        protocol_factory: Callable[[], _ProtocolT],
        program: Any,
        args: tuple[Any, ...],
        *,
        stdin: _Pipe,
        stdout: _Pipe,
        stderr: _Pipe,
        universal_newlines: bool,
        shell: bool,
        bufsize: int,
        encoding: None,
        errors: None,
        text: bool | None,
        popen_kwargs: dict[str, Any],
    ) -> tuple[asyncio.SubprocessTransport, _ProtocolT]:
        """``loop.subprocess_exec``: ``program`` with ``args``, never through a shell."""
        if universal_newlines:
            raise ValueError("universal_newlines must be False")
        if shell:
            raise ValueError("shell must be False")
        return await self._start(
            protocol_factory,
            (program, *args),
            False,
            f"execute program {program!r}",
            stdin,
            stdout,
            stderr,
            bufsize,
            text,
            encoding,
            errors,
            popen_kwargs,
        )

    async def _start(
        self,
        protocol_factory: Callable[[], _ProtocolT],
        popen_args: Any,
        shell: bool,
        what: str,
        stdin: _Pipe,
        stdout: _Pipe,
        stderr: _Pipe,
        bufsize: int,
        text: bool | None,
        encoding: None,
        errors: None,
        popen_kwargs: dict[str, Any],
    ) -> tuple[asyncio.SubprocessTransport, _ProtocolT]:
        """The checks and the start that start_shell and start_exec share."""
        if bufsize != 0:
            raise ValueError("bufsize must be 0")
        if text:
            raise ValueError("text must be False")
        if encoding is not None:
            raise ValueError("encoding must be None")
        if errors is not None:
            raise ValueError("errors must be None")
        protocol = protocol_factory()
        loop = self._loop
        debug_log = None
        if loop._debug:
            # ``what`` names only the program or command: arguments may hold
            # secrets and be long.
            debug_log = what
            _log_start(debug_log, stdin, stdout, stderr)
        transport = await self._make_transport(
            protocol, popen_args, shell, stdin, stdout, stderr, bufsize, **popen_kwargs
        )
        if loop._debug and debug_log is not None:
            logger.info("%s: %r", debug_log, transport)
        return transport, protocol

    async def _make_transport(
        self,
        protocol: Any,
        args: Any,
        shell: bool,
        stdin: _Pipe,
        stdout: _Pipe,
        stderr: _Pipe,
        bufsize: int,
        extra: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> SubprocessTransport:
        loop = self._loop
        # Popen runs in a thread of its own (_process.spawning): the loop
        # thread never waits for the fork and exec.
        spawn = Spawn(
            loop,
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
            command_text(args),
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
        waiter = loop.create_future()
        transport = SubprocessTransport(
            loop, protocol, proc, program, waiter=waiter, extra=extra, watches=self._watches
        )
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

    def pending(self) -> list[Pending]:
        """Spawns under way and children whose exit has not reached the loop yet."""
        from .pending import Pending  # the census: loaded when asked for

        found = [
            Pending("spawn", f"starting child process ({spawn.command})", spawn.since)
            for spawn in sorted(self._spawns, key=_since)
        ]
        found += [
            Pending("child", f"child process {watch.pid} ({command_text(watch.args)})", watch.since)
            for watch in sorted(self._watches, key=_since)
        ]
        return found

    def close(self) -> None:
        """The loop is closing: let every child go, to be reaped unreported.

        Children still starting are killed and reaped by their spawning
        thread; children still running are reaped by a thread each, so
        none is left a zombie.
        """
        spawns = list(self._spawns)
        self._spawns.clear()
        for spawn in spawns:
            spawn.abandon()
        self._watches.detach_all()

    def disown_after_fork(self) -> None:
        """In a forked child: the children are the parent's; forget them.

        Nothing is killed or reaped from here: a spawn under way belongs to
        a thread that stayed in the parent, and the parent still reaps its
        children.
        """
        self._spawns.clear()
        self._watches.forget_all()


def _since(item: Spawn | ChildWatch) -> float:
    return item.since
