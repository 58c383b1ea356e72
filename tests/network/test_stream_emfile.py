"""Accepting under fd exhaustion (R-FI-1), snakeloop and stdlib.

A child process lowers ``RLIMIT_NOFILE`` to 64 and serves connections it
never closes; the parent opens 200 connections at once, so ``accept()``
fails with ``EMFILE`` while connections keep waiting in the backlog.

* no busy loop: the child's CPU time over the saturated window stays under
  5% of it;
* no log flood: the exception handler hears of the shortage a few times at
  most.  snakeloop's documented choice (``listeners.py``): stop watching the
  listener for ``ACCEPT_RETRY_DELAY`` (1 s) and retry, pending connections
  wait in the kernel backlog, and the handler is called once per episode.
  The stdlib loop reports every failed ``accept()`` and schedules duplicate
  retries (python/cpython#151615): its flood is an expected failure;
* recovery: once the parent's clients are gone, a fresh connection is
  accepted and served.

Both children run at once, so the test costs one saturated window of real
time (it is a ``slow`` test: the retry delay is wall-clock time by design).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from _loopkit import stdlib_xfail

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

LIMIT = 64
CLIENTS = 200
WINDOW = 2.0  # seconds of saturation measured

CHILD = r"""
import asyncio, errno, json, resource, sys, time

kind, limit, window = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
if kind == "snakeloop":
    import snakeloop
    loop = snakeloop.new_event_loop()
else:
    loop = asyncio.SelectorEventLoop()
reports = []
loop.set_exception_handler(lambda lp, ctx: reports.append(
    (ctx.get("message"), type(ctx.get("exception")).__name__)))
accepted = []
fresh = loop.create_future()


class Holder(asyncio.Protocol):
    def connection_made(self, transport):
        accepted.append(transport)

    def data_received(self, data):
        if data == b"fresh" and not fresh.done():
            fresh.set_result(loop.time())


def say(**kw):
    print(json.dumps(kw), flush=True)


async def main():
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    server = await loop.create_server(Holder, "127.0.0.1", 0, backlog=512)
    port = server.sockets[0].getsockname()[1]
    say(port=port)
    sys.stdin.readline()  # the parent's clients are queued in the backlog
    cpu0 = time.process_time()
    await asyncio.sleep(window)
    say(cpu=time.process_time() - cpu0, reports=len(reports), accepted=len(accepted),
        messages=reports[:3])
    sys.stdin.readline()  # the parent closed its clients
    t0 = loop.time()
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            break
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            await asyncio.sleep(0.05)
    writer.write(b"fresh")
    t1 = await asyncio.wait_for(fresh, 30)
    say(recovery=t1 - t0, reports_total=len(reports), accepted_total=len(accepted))
    writer.close()
    server.close()


loop.run_until_complete(main())
loop.close()
"""


def _start(kind):
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env["PYTHONPATH"] = os.path.abspath(src) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, kind, str(LIMIT), str(WINDOW)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _read(proc):
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"the probe child died: {proc.stderr.read()}")
    return json.loads(line)


@pytest.fixture(scope="module")
def emfile_probe():
    """Run both children at once; their three reports, by loop kind."""
    kinds = ("snakeloop", "stdlib")
    procs = {kind: _start(kind) for kind in kinds}
    results = {kind: {} for kind in kinds}
    clients = []
    try:
        for proc in procs.values():
            port = _read(proc)["port"]
            for _ in range(CLIENTS):
                clients.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        for proc in procs.values():
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for kind, proc in procs.items():
            results[kind].update(_read(proc))
        for sock in clients:
            sock.close()
        clients = []
        for proc in procs.values():
            proc.stdin.write("closed\n")
            proc.stdin.flush()
        for kind, proc in procs.items():
            results[kind].update(_read(proc))
        for kind, proc in procs.items():
            _, err = proc.communicate(timeout=30)
            results[kind]["returncode"] = proc.returncode
            results[kind]["stderr"] = err
    finally:
        for sock in clients:
            sock.close()
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return results


def test_r_fi_1_accept_hits_emfile(emfile_probe, loop_kind):
    result = emfile_probe[loop_kind]
    assert result["returncode"] == 0, result["stderr"]
    # The shortage really happened: far fewer accepted than queued, and
    # the handler heard of EMFILE.
    assert result["accepted"] < CLIENTS
    assert result["reports"] >= 1
    message, exc_type = result["messages"][0]
    assert exc_type == "OSError"
    assert "socket.accept() out of system resource" in message


def test_r_fi_1_no_busy_loop(emfile_probe, loop_kind):
    result = emfile_probe[loop_kind]
    assert result["cpu"] <= 0.05 * WINDOW, f"{result['cpu']:.3f} s CPU in {WINDOW} s"


@stdlib_xfail(
    strict=True,
    reason="python/cpython#151615: the accept loop keeps going after EMFILE, "
    "so reports (and retries) are duplicated",
)
def test_r_fi_1_no_log_flood(emfile_probe, loop_kind):
    result = emfile_probe[loop_kind]
    # The plan's budget: at most one report per retry interval (4 in 3 s),
    # in the saturated window and over the whole run.
    assert result["reports"] <= WINDOW + 1, result["reports"]
    assert result["reports_total"] <= WINDOW + result["recovery"] + 2, result["reports_total"]


def test_r_fi_1_snakeloop_reports_once_per_episode(emfile_probe):
    assert emfile_probe["snakeloop"]["reports"] == 1


def test_r_fi_1_recovers_once_fds_are_free(emfile_probe, loop_kind):
    result = emfile_probe[loop_kind]
    assert result["accepted_total"] == CLIENTS + 1  # every queued one, then the fresh one
    # The parent's closed connections still sit in the backlog ahead of the
    # fresh one; each retry (1 s apart) accepts as many as there are free fds
    # and closes them on EOF.  Recovery takes one retry per such batch, plus
    # a second of slack for a loaded machine (the plan: 1.5 s for one batch).
    batches = -(-(CLIENTS - result["accepted"]) // result["accepted"])
    assert result["recovery"] <= batches + 1.0, result
