"""How the plugin runs a test: the report of a stuck test, cleanup, real I/O beside virtual time."""

from __future__ import annotations

import pytest

from ._pluginkit import RUNNERS, run

STUCK = """
import asyncio

import pytest


async def waits_forever(event):
    await event.wait()


@pytest.mark.snakeloop
async def test_stuck():
    event = asyncio.Event()
    await asyncio.gather(waits_forever(event), asyncio.sleep(60))
"""


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_a_deadlock_fails_the_test_with_the_report_in_its_own_section(pytester, runner):
    result = run(pytester, STUCK, runner=runner)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "DeadlockError" in out
    section = out.partition(" snakeloop ")[2]
    assert section, out
    # The report names the stuck coroutine, and the section comes before the next one.
    assert "waits_forever" in section.partition("short test summary")[0]


OUT_OF_TIME = """
import asyncio

import pytest


async def sleeper():
    await asyncio.sleep(3600)


@pytest.mark.snakeloop(end=60)
async def test_too_long(loop_time):
    await sleeper()
"""


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_end_fails_the_test_with_the_report(pytester, runner):
    result = run(pytester, OUT_OF_TIME, runner=runner)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "VirtualTimeoutError" in out
    assert "virtual time reached end=60.0" in out
    assert "sleeper" in out.partition(" snakeloop ")[2]


def test_a_test_that_fails_otherwise_has_no_snakeloop_section(pytester):
    source = """
import pytest

@pytest.mark.snakeloop
async def test_fails():
    assert 1 == 2
"""
    result = run(pytester, source, runner="plain")
    result.assert_outcomes(failed=1)
    assert " snakeloop " not in result.stdout.str()


LEFTOVERS = """
import asyncio
import gc

import pytest

import snakeloop

seen = {}


async def forever():
    try:
        await asyncio.sleep(10**6)
    except asyncio.CancelledError:
        seen["cancelled at"] = asyncio.get_running_loop().time()
        raise


@pytest.mark.snakeloop
async def test_leaves_a_task():
    seen["loop"] = asyncio.get_running_loop()
    seen["task"] = asyncio.get_running_loop().create_task(forever())
    await asyncio.sleep(1)


def test_it_was_cancelled_and_the_loop_closed():
    assert seen["task"].cancelled()
    assert seen["cancelled at"] == 1
    assert seen["loop"].is_closed()
"""


def test_the_plugin_cancels_leftover_tasks_and_closes_the_loop(pytester):
    run(pytester, LEFTOVERS, runner="plain").assert_outcomes(passed=2)


ECHO = """
import asyncio
import time

import pytest


handled = []


async def echo(reader, writer):
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()
    await writer.wait_closed()
    handled.append(True)


@pytest.mark.snakeloop
async def test_an_hour_beside_a_loopback_echo(loop_time):
    started = time.perf_counter()
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def chat():
        for i in range(20):
            writer.write(b"ping %d" % i)
            assert await reader.read(100) == b"ping %d" % i
            await asyncio.sleep(180)

    await asyncio.gather(chat(), asyncio.sleep(3600))
    assert loop_time == 3600
    writer.close()
    await writer.wait_closed()
    while not handled:
        await asyncio.sleep(0)
    server.close()
    await server.wait_closed()
    assert time.perf_counter() - started < 0.9
"""


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_an_hour_beside_real_loopback_io_takes_well_under_a_second(pytester, runner):
    run(pytester, ECHO, runner=runner).assert_outcomes(passed=1)


RAISED = """
import asyncio

import pytest

from snakeloop.testing import StallError


async def stalls():
    raise StallError("snakeloop: virtual time has been frozen", "REPORT: what every task waits on")


@pytest.mark.snakeloop
async def test_stall_in_a_task_group():
    async with asyncio.TaskGroup() as group:
        group.create_task(stalls())


@pytest.mark.snakeloop
async def test_stall_behind_another_error():
    try:
        await stalls()
    except StallError as exc:
        raise RuntimeError("while cleaning up") from exc
"""


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_the_report_is_found_in_exception_groups_and_chains(pytester, runner):
    result = run(pytester, RAISED, runner=runner)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["*- snakeloop -*", "REPORT: what every task waits on"] * 2, consecutive=False
    )
