"""Fixtures of the compatibility tests.

``anyio_run`` runs an async function with ``anyio.run()`` (asyncio backend) on
the loop of the suite's ``any_loop`` fixture, so every anyio test runs on
snakeloop and on the stdlib loop.  It is parametrised a second time: once
plainly and once under blockbuster, which raises ``BlockingError`` for a
blocking call (``os.read`` of a blocking fd, ``time.sleep``, ``Thread.join``...)
made in the loop's thread while anyio code is on the stack.  That is how
anyio's own test-suite runs; blockbuster exempts asyncio's own modules, where
the stdlib loop makes a few such calls on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
import pytest
from blockbuster import blockbuster_ctx

T = TypeVar("T")

TIMEOUT = 10.0  # a guard against hangs, never reached when things work


@contextlib.contextmanager
def blocking_calls_forbidden() -> Iterator[None]:
    """blockbuster, configured as anyio's test-suite configures it."""
    with blockbuster_ctx("anyio", excluded_modules=["anyio._backends._asyncio"]) as bb:
        # anyio stats and unlinks a stale socket file before binding a Unix socket.
        for name in ("os.stat", "os.unlink"):
            bb.functions[name].can_block_in("anyio/_core/_sockets.py", {"setup_unix_local_socket"})
        yield


def run_anyio(loop: asyncio.AbstractEventLoop, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``anyio.run(fn, *args)`` on ``loop``, which is closed afterwards."""

    async def guarded() -> T:
        with anyio.fail_after(TIMEOUT):
            return await fn(*args)

    return anyio.run(guarded, backend="asyncio", backend_options={"loop_factory": lambda: loop})


def _anyio_runner(request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop):
    guard = blocking_calls_forbidden if request.param == "blockbuster" else contextlib.nullcontext

    def run(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        with guard():
            return run_anyio(loop, fn, *args)

    return run


@pytest.fixture(params=["plain", "blockbuster"])
def anyio_run(request: pytest.FixtureRequest, any_loop: asyncio.AbstractEventLoop):
    """``anyio_run(fn, *args)``: :func:`run_anyio` on ``any_loop``, maybe under blockbuster."""
    return _anyio_runner(request, any_loop)


@pytest.fixture(params=["plain", "blockbuster"])
def anyio_run_vt(request: pytest.FixtureRequest, any_loop_vt: asyncio.AbstractEventLoop):
    """:func:`anyio_run` on ``any_loop_vt``: snakeloop's loop has virtual time."""
    return _anyio_runner(request, any_loop_vt)
