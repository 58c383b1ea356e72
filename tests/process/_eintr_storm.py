"""Child process of R-SIG-2: a SIGALRM storm during a TCP echo, on one loop kind.

Started by test_signals.py as ``python _eintr_storm.py KIND CONNECTIONS SIZE`` with the
tests directory and snakeloop's source on PYTHONPATH; prints one JSON object on stdout:
``mismatched`` (echoes whose digest differs), ``signals`` (handler calls), ``loop_errors``
(messages passed to the loop's exception handler), ``fds_leaked`` and ``unraisable`` (the
"Exception ignored" reports of a full wakeup fd).

It runs in a process of its own for two reasons:

* ``setitimer(ITIMER_REAL)`` and SIGALRM exist once per process, and the test run's per-test
  time limit (tests/_time_limits.py) uses them.
* The storm can deadlock the stdlib loop's process inside CPython (see
  ``STDLIB_WAKEUP_DEADLOCK`` in test_signals.py): its main thread then never runs Python code
  again, and only a watchdog outside it can end that.  Here faulthandler's watchdog thread,
  which needs no GIL, prints the stacks and exits with status 1 once the loop has not run its
  timers for ``HANG_LIMIT`` seconds.  A loop that runs but makes no progress is stopped by
  ``wait_for`` and fails with a traceback instead.
"""

from __future__ import annotations

import asyncio
import faulthandler
import hashlib
import json
import os
import random
import signal
import sys

from _loopkit import close_loop, echo_back, new_loop

STALL_LIMIT = 20.0  # the echo takes under a second on an idle machine
HANG_LIMIT = 10.0  # seconds without a heartbeat, a loop timer every HEARTBEAT seconds
HEARTBEAT = 0.25


def heartbeat(loop: asyncio.AbstractEventLoop) -> None:
    """Push faulthandler's deadline back; again in ``HEARTBEAT`` seconds."""
    faulthandler.dump_traceback_later(HANG_LIMIT, exit=True)
    loop.call_later(HEARTBEAT, heartbeat, loop)


async def echo_digests(connections: int, size: int) -> list[tuple[str, str]]:
    """``connections`` clients each send ``size`` random bytes through an echo server."""

    server = await asyncio.start_server(echo_back, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    rng = random.Random(1234)

    async def client():
        payload = rng.randbytes(size)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def send():
            view = memoryview(payload)
            while view:
                n = rng.randint(1, 256 * 1024)
                writer.write(view[:n])
                view = view[n:]
                await writer.drain()
            writer.write_eof()

        sender = asyncio.ensure_future(send())
        received = await reader.read()
        await sender
        writer.close()
        await writer.wait_closed()
        return hashlib.sha256(payload).hexdigest(), hashlib.sha256(received).hexdigest()

    try:
        return await asyncio.gather(*(client() for _ in range(connections)))
    finally:
        server.close()
        # From 3.12.1, wait_closed() also waits for the connections: after a
        # stall, that would hang instead of failing.
        await asyncio.wait_for(server.wait_closed(), 10)


def storm(kind: str, connections: int, size: int) -> dict[str, object]:
    """SIGALRM every 200 us while the echo runs on a new loop of ``kind``."""
    calls: list[None] = []
    unraisable: list[str] = []
    loop_errors: list[str] = []
    # 5,000 SIGALRM a second can fill a wakeup fd: for a signal that is already
    # pending that loses nothing (signals coalesce), so the "Exception ignored"
    # reports are counted, not failed on.
    sys.unraisablehook = lambda report: unraisable.append(str(report.exc_value))
    fds_before = len(os.listdir("/proc/self/fd"))
    loop = new_loop(kind)
    loop.set_exception_handler(lambda _loop, context: loop_errors.append(context["message"]))
    try:
        heartbeat(loop)
        loop.add_signal_handler(signal.SIGALRM, calls.append, None)
        signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
        try:
            digests = loop.run_until_complete(
                asyncio.wait_for(echo_digests(connections, size), STALL_LIMIT)
            )
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
            loop.remove_signal_handler(signal.SIGALRM)
    finally:
        close_loop(loop)
    return {
        "mismatched": sum(sent != got for sent, got in digests),
        "signals": len(calls),
        "loop_errors": loop_errors,
        "fds_leaked": len(os.listdir("/proc/self/fd")) - fds_before,
        "unraisable": len(unraisable),
    }


def main(argv: list[str]) -> None:
    kind, connections, size = argv[0], int(argv[1]), int(argv[2])
    faulthandler.dump_traceback_later(HANG_LIMIT, exit=True)
    result = storm(kind, connections, size)
    faulthandler.cancel_dump_traceback_later()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
