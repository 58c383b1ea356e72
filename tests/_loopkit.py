"""Shared helpers for the snakeloop test-suite (not a test module).

Everything here works with both snakeloop and the standard library loop so
that behaviour tests can be run differentially: the same scenario runs on a
stdlib loop and on a snakeloop loop and the observable results are compared.
"""

from __future__ import annotations

import asyncio
import asyncio.futures
import asyncio.tasks
import contextlib
import functools
import gc
import importlib
import itertools
import json
import logging
import os
import re
import socket
import stat
import subprocess
import sys
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

LOOP_KINDS = ("snakeloop", "stdlib")

PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)

PyFuture = asyncio.futures._PyFuture

if sys.version_info >= (3, 14):

    class PyTask(asyncio.tasks._PyTask):  # type: ignore[name-defined,misc]
        """asyncio's pure-Python Task, whose steps ``asyncio.current_task()`` sees.

        From 3.14 ``_PyTask`` sets the current task only where the pure-Python
        ``current_task()`` reads it, while ``asyncio.current_task()`` (and with it
        ``asyncio.timeout()``, ``TaskGroup``...) is the C one.  As a reference for
        snakeloop's Task, each step is current to the C one as well.
        """

        def _Task__step(self, exc=None):
            loop = self._loop
            asyncio.tasks._c_enter_task(loop, self)
            try:
                super()._Task__step(exc)
            finally:
                asyncio.tasks._c_leave_task(loop, self)

        def _Task__eager_start(self):
            loop = self._loop
            previous = asyncio.tasks._c_swap_current_task(loop, self)
            try:
                super()._Task__eager_start()
            finally:
                asyncio.tasks._c_swap_current_task(loop, previous)

else:
    PyTask = asyncio.tasks._PyTask


def snakeloop_module():
    """Import snakeloop lazily so stdlib-only tests run even without it."""
    return importlib.import_module("snakeloop")


class FakeClock:
    """A clock advanced by hand.

    ``loop.time()`` of a loop built with it returns ``monotonic()``.  Nothing
    moves unless the test calls :meth:`advance` or :meth:`set`.
    """

    def __init__(self, start: float = 1000.0, resolution: float = 1e-9) -> None:
        self.now = float(start)
        self.resolution = resolution
        self.calls = 0

    def monotonic(self) -> float:
        self.calls += 1
        return self.now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go back")
        self.now += seconds
        return self.now

    def set(self, when: float) -> float:
        if when < self.now:
            raise ValueError("a monotonic clock cannot go back")
        self.now = float(when)
        return self.now


class PyRefLoop(asyncio.SelectorEventLoop):
    """Stdlib selector loop whose futures and tasks are the pure-Python ones.

    snakeloop promises the semantics of ``asyncio.futures._PyFuture`` and
    ``asyncio.tasks._PyTask``, so differential state machines use this loop as
    the reference rather than the C-accelerated classes.
    """

    def __init__(self) -> None:
        super().__init__()
        self.set_task_factory(py_task_factory)

    def create_future(self):
        return PyFuture(loop=self)


def py_task_factory(loop, coro, **kwargs):
    """A task factory that makes asyncio's pure-Python ``_PyTask``."""
    return PyTask(coro, loop=loop, **kwargs)


class MixedTaskFactory:
    """A task factory that makes tasks of the given classes in turn."""

    def __init__(self, *classes: Any) -> None:
        self.kinds = itertools.cycle(classes)

    def __call__(self, loop: Any, coro: Any, **kwargs: Any) -> Any:
        # Every keyword as given: 3.14's create_task hands the factory name=, context=,
        # eager_start= and the rest (gh-128307), where 3.13 passed only context=.
        return next(self.kinds)(coro, loop=loop, **kwargs)


# The seed of the running test's run under --snakeloop-seed/--snakeloop-seeds (the plugin's
# snakeloop.testing.SeedRun), set by conftest.py for tests not marked unseeded: every
# snakeloop loop new_loop makes meanwhile takes it.
SEED_RUN: Any = None


def new_loop(
    kind: str,
    *,
    clock: Any = None,
    stdlib_futures: bool | None = None,
    on_deadlock: str | None = None,
) -> asyncio.AbstractEventLoop:
    """Create a loop of the given kind ("snakeloop", "stdlib" or "stdlib-py").

    ``clock``: a :class:`FakeClock` (any kind), or a ``snakeloop.VirtualClock`` (snakeloop only).
    ``on_deadlock`` is snakeloop's: "raise" is test mode, which also keeps the
    census of outside work (``snakeloop.pending``).
    """
    if kind == "snakeloop":
        kwargs: dict[str, Any] = {}
        if clock is not None:
            kwargs["clock"] = clock
        if stdlib_futures is not None:
            # None: the loop's default, which is asyncio's C Task from 3.14 on.
            kwargs["stdlib_futures"] = stdlib_futures
        if on_deadlock is not None:
            kwargs["on_deadlock"] = on_deadlock
        if SEED_RUN is not None:
            # Through the run, so that a failure's report shows this loop's decisions.
            return SEED_RUN.new_event_loop(**kwargs)  # type: ignore[no-any-return]
        return snakeloop_module().new_event_loop(**kwargs)
    if kind == "stdlib":
        loop = asyncio.SelectorEventLoop()
    elif kind == "stdlib-py":
        loop = PyRefLoop()
    else:
        raise ValueError(f"unknown loop kind {kind!r}")
    if clock is not None:
        # BaseEventLoop always goes through self.time(), so an instance
        # attribute is enough to put the stdlib loop on the fake clock.
        loop.time = clock.monotonic  # type: ignore[method-assign]
        loop._clock_resolution = clock.resolution
    return loop


def is_virtual(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` runs on virtual time (a snakeloop loop with a ``VirtualClock``)."""
    get_clock = getattr(loop, "get_clock", None)
    return get_clock is not None and getattr(get_clock(), "is_virtual", False)


def future_class(kind: str):
    if kind == "snakeloop":
        return snakeloop_module().Future
    if kind == "stdlib-py":
        return PyFuture
    return asyncio.Future


def task_class(kind: str):
    if kind == "snakeloop":
        return snakeloop_module().Task
    if kind == "stdlib-py":
        return PyTask
    return asyncio.Task


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Close a loop the way asyncio.run does (idempotent)."""
    if loop.is_closed():
        return
    if loop.is_running():
        raise RuntimeError("close_loop() called on a running loop")
    try:
        _cancel_all_tasks(loop)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


def _cancel_all_tasks(loop: asyncio.AbstractEventLoop) -> None:
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not pending:
        return
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


@contextlib.contextmanager
def loop_ctx(kind: str, **kwargs: Any) -> Iterator[asyncio.AbstractEventLoop]:
    loop = new_loop(kind, **kwargs)
    try:
        yield loop
    finally:
        close_loop(loop)


def run(loop: asyncio.AbstractEventLoop, coro: Awaitable[Any], timeout: float) -> Any:
    """``loop.run_until_complete(coro)`` with a watchdog.

    A hang ends in ``TimeoutError`` raised where the coroutine waits, well before the test's
    time limit; ``timeout`` is never reached when things work.
    """
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def run_within(timeout: float) -> Callable[..., Any]:
    """:func:`run` with ``timeout`` as its default: ``run = run_within(GUARD)`` in a module.

    The module's calls may still pass another ``timeout=``.
    """
    return functools.partial(run, timeout=timeout)


def run_once(loop: asyncio.AbstractEventLoop) -> None:
    """Run exactly one loop iteration (the documented stop-then-run idiom)."""
    loop.call_soon(loop.stop)
    loop.run_forever()


def run_iterations(loop: asyncio.AbstractEventLoop, n: int) -> None:
    for _ in range(n):
        run_once(loop)


def drive(
    loop: asyncio.AbstractEventLoop,
    clock: FakeClock,
    until: Callable[[], bool],
    *,
    step: float,
    settle: int = 10,
    max_steps: int = 100_000,
) -> int:
    """Alternate ``settle`` loop iterations with moving the fake clock by ``step``.

    Every iteration has a ready callback (``loop.stop``), so the loop never
    blocks and the test is as fast as its callbacks.  The clock stands still
    for ``settle`` iterations, long enough for a timer's effects to travel
    through futures and task wakeups before time moves on, so code that
    reads ``loop.time()`` after waking sees its exact deadline.  Returns the
    number of clock steps taken.
    """
    for steps in range(max_steps):
        for _ in range(settle):
            if until():
                return steps
            run_once(loop)
        if until():
            return steps
        clock.advance(step)
    raise AssertionError(f"condition not reached after {max_steps} clock steps")


def run_fake(
    loop: asyncio.AbstractEventLoop,
    clock: FakeClock,
    coro,
    *,
    step: float = 0.001,
    settle: int = 10,
    max_steps: int = 100_000,
):
    """run_until_complete() on fake time: see :func:`drive`."""
    task = loop.create_task(coro)
    drive(loop, clock, task.done, step=step, settle=settle, max_steps=max_steps)
    return task.result()


class Raised:
    """The normalised outcome of a call that raised."""

    __slots__ = ("type", "message")

    def __init__(self, exc: BaseException) -> None:
        self.type = type(exc)
        self.message = mask_addresses(str(exc))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Raised) and self.type is other.type and self.message == other.message
        )

    def __hash__(self) -> int:
        return hash((self.type, self.message))

    def __repr__(self) -> str:
        return f"Raised({self.type.__name__}, {self.message!r})"


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Return ``("ok", value)`` or a :class:`Raised` for ``fn(*args, **kwargs)``."""
    try:
        return ("ok", fn(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001 - normalised for comparison
        if isinstance(exc, (KeyboardInterrupt,)):
            raise
        return Raised(exc)


def differential(
    scenario: Callable[[asyncio.AbstractEventLoop], Any],
    *,
    kinds: tuple[str, str] = ("stdlib", "snakeloop"),
    **loop_kwargs: Any,
) -> tuple[Any, Any]:
    """Run ``scenario(loop)`` on a fresh loop of each kind; return both results.

    Exceptions escaping the scenario are normalised with :func:`outcome`.
    """
    results = []
    for kind in kinds:
        with loop_ctx(kind, **loop_kwargs) as loop:
            results.append(outcome(scenario, loop))
    return results[0], results[1]


def assert_same(scenario: Callable[[asyncio.AbstractEventLoop], Any], **kw: Any) -> Any:
    """Run a scenario differentially and assert both loops behave alike."""
    ref, got = differential(scenario, **kw)
    assert got == ref, (
        f"snakeloop diverges from stdlib:\n  stdlib:    {ref!r}\n  snakeloop: {got!r}"
    )
    return ref


def children(*, zombie: bool) -> list[int]:
    """This process's children that have exited but were not reaped (``zombie``), or the others."""
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if (fields[0] == "Z") is zombie and int(fields[1]) == me:
            found.append(int(name))
    return found


def zombies() -> list[int]:
    """This process's children that have exited but were not reaped."""
    return children(zombie=True)


def fd_is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def fd_set() -> set[int]:
    """The numbers of this process's open fds (see :func:`open_fds` for what they are)."""
    # The fd listdir reads the directory through is closed by the time it returns.
    return {fd for fd in map(int, os.listdir("/proc/self/fd")) if fd_is_open(fd)}


def fd_count() -> int:
    return len(fd_set())


def rss() -> int:
    """This process's resident set size in bytes.

    Linux fact relied on: the second field of /proc/self/statm is the resident set, in pages.
    """
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


FdIdentity = tuple[int, int, int, str]


def open_fds() -> dict[int, tuple[FdIdentity, str]]:
    """This process's open fds: number -> (identity, the name /proc/self/fd gives it).

    Linux facts relied on: /proc/self/fd lists every open fd (and, for a moment, the one
    listdir reads it through, closed by the time we look at it); its links name a path, or
    ``socket:[inode]``, ``pipe:[inode]``, ``anon_inode:[kind]``.

    The identity is what the fd refers to: (st_dev, st_ino, file type) and, for a link that is
    no path, its name, because every anonymous inode (epoll, eventfd, signalfd...) shares one
    inode number.  Two anonymous inodes of one kind still look alike.  A path is left out: a
    file renamed or deleted while open is the same file.
    """
    fds: dict[int, tuple[FdIdentity, str]] = {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            st = os.fstat(fd)
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the directory handle used by listdir itself
        kind = "" if target.startswith("/") else target
        fds[fd] = ((st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode), kind), target)
    return fds


def new_fds(
    before: dict[int, tuple[FdIdentity, str]], after: dict[int, tuple[FdIdentity, str]]
) -> dict[int, str]:
    """The fds of ``after`` that ``before`` did not have open on the same file, by name.

    Compares which fds and what they are, not how many: closing an fd that was open before
    and leaking another one on its number (or on another) shows here.
    """
    return {
        fd: target
        for fd, (identity, target) in after.items()
        if fd not in before or before[fd][0] != identity
    }


def socket_pair(kind: str = "unix-stream") -> tuple[socket.socket, socket.socket]:
    """Two connected non-blocking sockets; the caller closes them.

    ``kind`` is "unix-stream", "unix-dgram" or "tcp" (client and server over
    127.0.0.1).
    """
    if kind == "tcp":
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            a = socket.create_connection(listener.getsockname())
            b, _ = listener.accept()
    elif kind == "unix-stream":
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    elif kind == "unix-dgram":
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    else:
        raise ValueError(f"unknown socket pair kind {kind!r}")
    a.setblocking(False)
    b.setblocking(False)
    return a, b


@contextlib.contextmanager
def closing_socket_pair(
    kind: str = "unix-stream",
) -> Iterator[tuple[socket.socket, socket.socket]]:
    """:func:`socket_pair`, closed on leaving the block."""
    a, b = socket_pair(kind)
    with a, b:
        yield a, b


_dgram_names = itertools.count()


def unix_dgram_pair(tmp_path: Any) -> tuple[socket.socket, socket.socket, str]:
    """(sock, peer, peer_path): ``sock`` connected to ``peer`` (non-blocking), a bound Unix
    datagram socket in ``tmp_path`` that nobody reads; the caller closes both."""
    path = str(tmp_path / f"peer{next(_dgram_names)}")
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    peer.bind(path)
    peer.setblocking(False)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.connect(path)
    return sock, peer, path


async def connect_idle(
    loop: asyncio.AbstractEventLoop, addr: Any, count: int
) -> list[socket.socket]:
    """``count`` TCP connections to ``addr`` that never send a byte; the caller closes them."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            socks.append(sock)
            sock.setblocking(False)
            await loop.sock_connect(sock, addr)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


async def echo_back(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A ``start_server`` handler that sends everything back, then closes at EOF."""
    while data := await reader.read(1 << 16):
        writer.write(data)
        await writer.drain()
    writer.close()


# A child's script that prints the sorted list of its open fds.
LIST_FDS_SCRIPT = (
    "import os\n"
    "fds = []\n"
    "for name in os.listdir('/proc/self/fd'):\n"
    "    try:\n"
    "        os.fstat(int(name))\n"
    "    except OSError:\n"
    "        continue\n"
    "    fds.append(int(name))\n"
    "print(sorted(fds))\n"
)


def run_under_snakeloop(
    script: Any, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m snakeloop [args] script`` in a child, with ``env`` added to ours."""
    return subprocess.run(
        [sys.executable, "-m", "snakeloop", *args, str(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@contextlib.contextmanager
def quiet_fork() -> Iterator[None]:
    """Around ``os.fork()``: 3.12+ warns (DeprecationWarning) about fork() with threads alive,
    and the run's warning filter would raise it in the parent after the child exists."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def fork_call(child_main: Callable[[], Any]) -> tuple[int, int]:
    """Fork; the child runs ``child_main()`` and writes its result as JSON to a pipe.

    Returns (pid, the pipe's read end).  The child exits 0 after a result, 1 after an
    exception, which it reports as ``{"error": "Type: message"}``.
    """
    r, w = os.pipe()
    with quiet_fork():
        pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.close(r)
            result = child_main()
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            result = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            try:
                os.write(w, json.dumps(result).encode())
            finally:
                os._exit(code)
    os.close(w)
    return pid, r


# What asyncio.get_event_loop() gives a forked child whose parent had set a loop (asyncio's
# fork handler forgets it in the child): up to 3.13 a fresh loop, made on the spot; from
# 3.14, which makes none, asyncio's error.
CHILD_GET_EVENT_LOOP = (
    "RuntimeError: There is no current event loop in thread 'MainThread'."
    if sys.version_info >= (3, 14)
    else "fresh"
)


def child_get_event_loop(parent_loop: asyncio.AbstractEventLoop) -> str:
    """In a forked child: what ``asyncio.get_event_loop()`` gives, as CHILD_GET_EVENT_LOOP
    says it ("the parent's" if it is ``parent_loop``)."""
    try:
        with warnings.catch_warnings():
            # 3.12 and 3.13 warn where they make the loop.
            warnings.simplefilter("ignore", DeprecationWarning)
            child_loop = asyncio.get_event_loop()
    except RuntimeError as exc:
        return f"RuntimeError: {exc}"
    child_loop.close()
    return "the parent's" if child_loop is parent_loop else "fresh"


def reap(pid: int) -> int:
    """Wait for the child ``pid``; its exit code (minus the signal that ended it)."""
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def stdlib_xfail(*args: Any, **kwargs: Any) -> Any:
    """Run a test on both loops, the stdlib one under ``xfail(*args, **kwargs)``.

    For asyncio bugs that snakeloop fixes: the test parametrizes
    ``loop_kind`` and expects the stdlib loop to fail it.
    """
    import pytest

    return pytest.mark.parametrize(
        "loop_kind",
        ["snakeloop", pytest.param("stdlib", marks=pytest.mark.xfail(*args, **kwargs))],
    )


def full_gc(passes: int = 3) -> None:
    for _ in range(passes):
        gc.collect()


class ExceptionRecorder:
    """An exception handler that records loop error contexts."""

    def __init__(self) -> None:
        self.contexts: list[dict[str, Any]] = []

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.contexts.append(context)

    def messages(self) -> list[str]:
        return [c.get("message", "") for c in self.contexts]

    def summary(self) -> list[tuple[str, Any]]:
        out = []
        for ctx in self.contexts:
            exc = ctx.get("exception")
            out.append((ctx.get("message"), None if exc is None else (type(exc), str(exc))))
        return out


class LogCapture:
    """Collect records of the asyncio and snakeloop loggers."""

    def __init__(self) -> None:
        self.records: list = []

    def texts(self, level: int = 0) -> list[tuple[str, str]]:
        return [
            (r.levelname, mask_addresses(r.getMessage()))
            for r in self.records
            if r.levelno >= level
        ]


@contextlib.contextmanager
def capture_logs(level: int = logging.WARNING) -> Iterator[LogCapture]:
    capture = LogCapture()

    class _Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            capture.records.append(record)

    handler = _Handler(level=level)
    loggers = [logging.getLogger(name) for name in ("asyncio", "snakeloop")]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        yield capture
    finally:
        for lg in loggers:
            lg.removeHandler(handler)


def mask_addresses(text: str) -> str:
    """Hide what legitimately differs between implementations in a repr.

    Object addresses, the source location of the loop's own internal
    callbacks (``cb=[_run_until_complete_cb() at <file>:<line>]``) and the
    defining class in Python's own argument errors
    (``BaseEventLoop.f() got an unexpected keyword argument ...``).
    """
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", text)
    text = re.sub(r"\(\) at [^\s\]>]+:\d+", "() at ?", text)
    return re.sub(r"\b[A-Za-z_]\w*\.(\w+\(\) (?:got|takes|missing) )", r"?.\1", text)


# CPython frees an object the moment its last reference goes; PyPy frees it when its
# collector runs.  A test of what is freed "at once" or "without gc" asserts the first, which
# holds on the stdlib loop only where there is reference counting.
REFCOUNTED = sys.implementation.name == "cpython"
NO_REFCOUNTING = (
    "no reference counting here (PyPy): an object is freed when the collector runs, on "
    "the stdlib loop as on snakeloop, never at the moment its last reference goes"
)


def collect_unless_refcounted() -> None:
    """Free what is unreachable, where only a collection frees it (PyPy).

    A test that an object is no longer held ("released", "freed after close") checks that
    nothing keeps a reference; without reference counting an unheld object lives on until
    the collector runs, so such a test collects first there.  On CPython it does nothing:
    there the same test also checks that no reference cycle is left to the collector.
    """
    if not REFCOUNTED:
        for _ in range(3):  # a finalizer may free more on the next pass
            gc.collect()


# gc.freeze() and gc.unfreeze() are CPython's alone; PyPy's collector has no permanent
# generation, and there they do nothing.
_freeze = getattr(gc, "freeze", lambda: None)
_unfreeze = getattr(gc, "unfreeze", lambda: None)


def machine_examples(count: int) -> int:
    """How many examples a default run of a machine whose rules call gc.collect() takes.

    ``count`` where gc.freeze() keeps each collection to the example's own objects; a
    third of it elsewhere (PyPy), where each collection walks the whole heap of the
    suite and the machine took most of its 3-minute limit in a full run.
    """
    return count if hasattr(gc, "freeze") else max(1, count // 3)


def run_machine(machine: type, settings: Any) -> None:
    """run_state_machine_as_test(), keeping the per-example gc passes cheap.

    The machines call gc.collect() to make finalizers ("exception was never
    retrieved") run at a known point.  Hypothesis's own bookkeeping grows to
    millions of objects on long runs, so each example starts by freezing
    everything alive (:meth:`FrozenHeapMixin.__init__`); the collections then
    only scan the objects of the example itself.  Everything is unfrozen at
    the end so that nothing stays uncollectable.
    """
    from hypothesis.stateful import run_state_machine_as_test

    # Hypothesis registers its per-thread Random on its first example and checks with
    # gc.get_referrers() that something holds it; from 3.14 that finds no frozen
    # referrer, so the holder must not be frozen yet when that happens.
    _unfreeze()
    try:
        run_state_machine_as_test(machine, settings=settings)
    finally:
        _unfreeze()
        gc.collect()
        _freeze()


class FrozenHeapMixin:
    """Mix into a RuleBasedStateMachine run with :func:`run_machine`."""

    def __init__(self) -> None:
        gc.collect(0)
        _freeze()
        super().__init__()


def tls_contexts() -> tuple[Any, Any]:
    """(server, client) TLS contexts on CPython's test certificates: a certificate signed
    by its test CA, and a client that verifies it (host name "localhost")."""
    import ssl

    import pytest

    certs = pytest.importorskip("test.test_asyncio.utils")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(certs.SIGNED_CERTFILE)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(certs.SIGNING_CA)
    return server, client
