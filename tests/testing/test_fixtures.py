"""The snakeloop_clock and loop_time fixtures, and async fixtures on the test's loop."""

from __future__ import annotations

import pytest

from ._pluginkit import RUNNERS, run

FIXTURES = """
import asyncio
import math
import numbers

import pytest

import snakeloop
from snakeloop.testing import VirtualClock


@pytest.mark.snakeloop(start=10)
async def test_the_clock_is_the_loops(snakeloop_clock):
    loop = asyncio.get_running_loop()
    assert isinstance(snakeloop_clock, VirtualClock)
    assert snakeloop_clock is loop.get_clock()
    snakeloop_clock.jump(5)
    assert loop.time() == 15


@pytest.mark.snakeloop
async def test_loop_time_reads_the_time_of_the_moment(loop_time):
    assert loop_time == 0 and loop_time == 0.0
    await asyncio.sleep(2.5)
    assert loop_time == 2.5
    assert 2 < loop_time < 3 and loop_time <= 2.5 <= loop_time and loop_time != 3
    assert float(loop_time) == 2.5 and int(loop_time) == 2 and round(loop_time) == 2
    assert loop_time + 1 == 3.5 and 1 + loop_time == 3.5
    assert loop_time - 0.5 == 2.0 and 3 - loop_time == 0.5
    assert loop_time * 2 == 5 and loop_time / 2 == 1.25
    assert not loop_time == 2 and not loop_time != 2.5 and not loop_time < 2.5
    assert isinstance(loop_time, numbers.Real)
    assert loop_time == pytest.approx(2.5000001) and math.isclose(loop_time, 2.5)
    assert f"{loop_time:.1f}" == "2.5"
    await asyncio.sleep(0.5)
    assert loop_time == 3


@pytest.mark.snakeloop
async def test_looptime_is_loop_time(looptime, loop_time):
    await asyncio.sleep(7)
    assert looptime == 7 == loop_time


@pytest.mark.snakeloop(virtual_time=False)
async def test_loop_time_on_real_time(loop_time):
    loop = asyncio.get_running_loop()
    before = loop.time()
    now = float(loop_time)
    assert before <= now <= loop.time()


@pytest.mark.snakeloop
async def test_each_test_has_a_fresh_loop_from_zero(loop_time):
    assert loop_time == 0
"""


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_clock_and_loop_time_fixtures(pytester, runner):
    run(pytester, FIXTURES, runner=runner).assert_outcomes(passed=5)


ASYNC_FIXTURES = """
import asyncio

import pytest


@pytest.fixture
async def slept_ten():
    await asyncio.sleep(10)
    yield asyncio.get_running_loop()
    await asyncio.sleep(5)


@pytest.mark.snakeloop
async def test_async_fixtures_run_on_the_tests_loop(slept_ten, loop_time, snakeloop_clock):
    assert slept_ten is asyncio.get_running_loop()
    assert snakeloop_clock is slept_ten.get_clock()
    assert loop_time == 10
"""


@pytest.mark.parametrize("runner", ["pytest-asyncio", "anyio"])
def test_async_fixtures_share_the_tests_clock(pytester, runner):
    run(pytester, ASYNC_FIXTURES, runner=runner).assert_outcomes(passed=1)


SHARED_LOOP_ASYNCIO = """
import asyncio

import pytest

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.snakeloop]


async def test_first(loop_time):
    await asyncio.sleep(100)
    assert loop_time == 100


async def test_second_goes_on_from_there(loop_time):
    assert loop_time == 100
    await asyncio.sleep(5)


@pytest.mark.snakeloop(start=200)
async def test_start_may_move_time_forward(loop_time):
    assert loop_time == 200


@pytest.mark.snakeloop(start=0)
async def test_start_may_not_move_it_back():
    pass


@pytest.mark.snakeloop(virtual_time=False)
async def test_real_time_on_a_virtual_loop():
    pass
"""

# anyio keeps one runner (and loop) while an async fixture holds it.
SHARED_LOOP_ANYIO = """
import asyncio

import pytest

pytestmark = [pytest.mark.snakeloop, pytest.mark.usefixtures("held")]


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
async def held():
    yield


""" + SHARED_LOOP_ASYNCIO.partition("pytest.mark.snakeloop]\n")[2]

SHARED_ERRORS = [
    "*snakeloop: start=0.0 would move loop time backwards from 200.0 on a loop shared with "
    "other tests; omit start or use a function-scoped loop*",
    "*snakeloop: test_inner.py::test_real_time_on_a_virtual_loop asks for real time but runs "
    "on a loop shared with other tests that runs on virtual time; give the tests that share a "
    "loop the same virtual_time=, or use a function-scoped loop*",
]


@pytest.mark.parametrize(
    ("runner", "source"),
    [("pytest-asyncio", SHARED_LOOP_ASYNCIO), ("anyio", SHARED_LOOP_ANYIO)],
)
def test_a_shared_loop_keeps_time_going_forward(pytester, runner, source):
    result = run(pytester, source, runner=runner)
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines(SHARED_ERRORS, consecutive=False)


MISUSED = """
import pytest


async def test_not_on_snakeloop(snakeloop_clock):
    pass


@pytest.mark.snakeloop
def test_not_async(loop_time):
    pass
"""


def test_the_fixtures_say_when_a_test_cannot_have_them(pytester):
    result = run(pytester, MISUSED, runner="pytest-asyncio")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*snakeloop: test_inner.py::test_not_on_snakeloop uses the snakeloop_clock fixture "
            "but does not run on snakeloop; mark it @pytest.mark.snakeloop or run pytest with "
            "--snakeloop*",
            "*snakeloop: the loop_time fixture needs an async test, and "
            "test_inner.py::test_not_async is not one*",
        ],
        consecutive=False,
    )
