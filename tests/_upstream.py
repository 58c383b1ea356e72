"""Which of asyncio's bugs that snakeloop fixes the running Python's asyncio has fixed too.

Tests of such bugs run on both loops and hold the stdlib loop under a strict xfail.  The
fixes reach CPython in bugfix releases, and Linux distributions carry some of them in
builds of older versions, so the version number says little: each check reads the stdlib
source for the fix itself.  A strict xfail whose check is wrong fails either way (XPASS,
or a failure on snakeloop's side of the comparison), so a check that goes stale shows.
"""

from __future__ import annotations

import asyncio.base_events
import asyncio.base_subprocess
import asyncio.selector_events
import inspect
import re

_SOCKET_TRANSPORT = asyncio.selector_events._SelectorSocketTransport


def _source(func: object) -> str:
    return inspect.getsource(func)  # type: ignore[arg-type]


def connection_lost_once_after_flush() -> bool:
    """python/cpython#156512: the write path that ends a flushing close() counts the
    connection as lost, so a close() or abort() from resume_writing() cannot make it call
    connection_lost a second time, and a write() after it is dropped instead of reaching
    the released socket (AttributeError)."""
    return "self._closing and not self._conn_lost" in _source(_SOCKET_TRANSPORT)


def writelines_skips_empty_items() -> bool:
    """python/cpython#155888: writelines() never buffers an empty item (one that could
    never drain, so that close() never finished)."""
    writelines = _SOCKET_TRANSPORT.writelines
    if writelines.__qualname__.startswith("WriteTransport"):
        return True  # 3.11: the base class joins the items and calls write()
    return re.search(r"\bif (not )?data\b", _source(writelines)) is not None


def create_task_drops_task() -> bool:
    """python/cpython#128552: BaseEventLoop.create_task() deletes its `task` local, so an
    eager task's exception traceback (which holds that frame) does not hold the task."""
    source = _source(asyncio.base_events.BaseEventLoop.create_task)
    return re.search(r"^\s*del task$", source, re.MULTILINE) is not None


def transport_drops_read_callback() -> bool:
    """The socket transport forgets its bound read callback (and the write one) when the
    connection is lost, not only in close(): before that, a transport lost to an error or
    to the peer kept a cycle through its own bound method."""
    return "_read_ready_cb = None" in _source(_SOCKET_TRANSPORT._call_connection_lost)


def create_connection_drops_waiter() -> bool:
    """_create_connection_transport() drops its `waiter` once awaited, so a failed
    handshake's error (held by the waiter, whose traceback holds the frame) leaves no
    cycle."""
    return "waiter = None" in _source(
        asyncio.base_events.BaseEventLoop._create_connection_transport
    )


def start_tls_drops_waiter() -> bool:
    """python/cpython#159049: start_tls() drops its `waiter` when the handshake fails, as
    _create_connection_transport() does from then on (the same cycle, through start_tls's
    frame)."""
    return "waiter = None" in _source(asyncio.base_events.BaseEventLoop.start_tls)


def subprocess_wait_ends_at_exit() -> bool:
    """python/cpython#119710: Process.wait() returns when the process exits, not when its
    pipes close too (which a grandchild holding stdout can delay for ever)."""
    process_exited = asyncio.base_subprocess.BaseSubprocessTransport._process_exited
    return "_exit_waiters" in _source(process_exited)


def start_tls_takes_reader_buffer() -> bool:
    """python/cpython#142352: a server's start_tls() over a StreamReaderProtocol hands the
    bytes its StreamReader had buffered (a ClientHello that came with the STARTTLS line)
    to the TLS protocol, instead of leaving the handshake waiting for them."""
    return "_stream_reader" in _source(asyncio.base_events.BaseEventLoop.start_tls)


def refused_run_forever_keeps_running_loop() -> bool:
    """A run_forever() refused because another loop runs in the thread leaves that loop
    the running one.  3.13.0's runs its cleanup (which unsets the running loop) after the
    setup that refused: ``_run_forever_setup()`` sits inside its ``try``."""
    source = _source(asyncio.base_events.BaseEventLoop.run_forever)
    body = source[source.index('"""', source.index('"""') + 3) + 3 :]
    return body.find("_run_forever_setup()") < body.find("try:")
