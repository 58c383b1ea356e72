"""The snakeloop marker: where it goes, which value wins, and what it refuses."""

from __future__ import annotations

import pytest

from ._pluginkit import RUNNERS, run

CLOSEST_WINS = """
import asyncio

import pytest

import snakeloop

pytestmark = pytest.mark.snakeloop(start=100)


async def test_the_module_marker(snakeloop_clock, loop_time):
    assert isinstance(asyncio.get_running_loop(), snakeloop.Loop)
    assert snakeloop_clock.is_virtual
    assert loop_time == 100


@pytest.mark.snakeloop(start=200)
async def test_the_function_marker_beats_the_module_one(loop_time):
    assert loop_time == 200


@pytest.mark.snakeloop(start=300, stall_timeout=5)
class TestClass:
    async def test_the_class_marker(self, loop_time, snakeloop_clock):
        assert loop_time == 300
        assert snakeloop_clock.stall_timeout == 5

    @pytest.mark.snakeloop(start=400, end=1000)
    async def test_each_key_from_the_closest_marker_that_sets_it(self, loop_time, snakeloop_clock):
        assert loop_time == 400
        assert snakeloop_clock.end == 1000
        assert snakeloop_clock.stall_timeout == 5


@pytest.mark.snakeloop(virtual_time=False)
async def test_virtual_time_false_opts_out(snakeloop_clock):
    assert isinstance(asyncio.get_running_loop(), snakeloop.Loop)
    assert not snakeloop_clock.is_virtual
"""


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_the_closest_marker_wins(pytester, runner):
    result = run(pytester, CLOSEST_WINS, runner=runner)
    result.assert_outcomes(passed=5)


AN_HOUR = """
import asyncio
import time

import pytest


@pytest.mark.snakeloop
async def test_an_hour(loop_time):
    started = time.perf_counter()
    await asyncio.sleep(3600)
    assert loop_time == 3600
    assert time.perf_counter() - started < 0.5
"""


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_an_hour_of_sleep_takes_no_real_time(pytester, runner):
    result = run(pytester, AN_HOUR, runner=runner)
    result.assert_outcomes(passed=1)


def _usage_error(pytester, source: str, *args: str) -> str:
    result = run(pytester, source, *args, runner="plain")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    return result.stderr.str()


@pytest.mark.parametrize(
    ("marker", "issue", "feature"),
    [
        ("seeds=8", "issue 12", "runs under several derived seeds"),
        ("metrics=True", "issue 13", "loop metrics"),
    ],
)
def test_features_to_come_are_refused_with_their_issue(pytester, marker, issue, feature):
    source = f"""
import pytest

@pytest.mark.snakeloop({marker})
async def test_it():
    pass
"""
    key = marker.partition("=")[0]
    err = _usage_error(pytester, source)
    assert (
        f"snakeloop: test_inner.py::test_it: mark.snakeloop({marker.replace(chr(39), chr(39))}) "
        in err.replace('"', "'")
    )
    assert f"asks for {feature}, which snakeloop does not have yet ({issue}); " in err
    assert f"remove {key}= from the marker" in err


def test_features_to_come_at_their_defaults_are_accepted(pytester):
    source = """
import pytest

@pytest.mark.snakeloop(seed=None, perturb=None, seeds=None, metrics=None)
async def test_it(snakeloop_clock):
    assert snakeloop_clock.is_virtual
"""
    run(pytester, source, runner="plain").assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        (
            "virtual_tme=True",
            "snakeloop: test_inner.py::test_it: mark.snakeloop got an unknown option "
            "'virtual_tme'; the options are virtual_time, start, end,",
        ),
        (
            "False",
            "snakeloop: test_inner.py::test_it: mark.snakeloop takes keyword arguments only, "
            "got (False,); write, for example, @pytest.mark.snakeloop(virtual_time=False)",
        ),
        (
            "external_time='wall'",
            "snakeloop: test_inner.py::test_it: external_time= must be one of 'frozen', "
            "'real', not 'wall'",
        ),
        (
            "deadlock='hang'",
            "snakeloop: test_inner.py::test_it: deadlock= must be one of 'raise', 'log', "
            "'ignore', not 'hang'",
        ),
        (
            "start='soon'",
            "snakeloop: test_inner.py::test_it: start= must be a number of seconds or None, "
            "not 'soon'",
        ),
        (
            "virtual_time=1",
            "snakeloop: test_inner.py::test_it: virtual_time= must be True or False, not 1",
        ),
    ],
)
def test_a_wrong_marker_stops_the_session_saying_what_to_fix(pytester, marker, message):
    source = f"""
import pytest

async def test_other():
    pass

@pytest.mark.snakeloop({marker})
async def test_it():
    pass
"""
    assert message in _usage_error(pytester, source)


LOOPTIME = """
import asyncio

import pytest

import snakeloop


@pytest.mark.looptime(start=50, end=500, idle_timeout=7, idle_step=0.01, noop_cycles=10)
async def test_looptime_marker(looptime, snakeloop_clock):
    assert isinstance(asyncio.get_running_loop(), snakeloop.Loop)
    assert looptime == 50
    assert snakeloop_clock.end == 500
    assert snakeloop_clock.stall_timeout == 7
    await asyncio.sleep(100)
    assert looptime == 150


@pytest.mark.looptime
async def test_bare_looptime_marker(looptime):
    await asyncio.sleep(3600)
    assert looptime == 3600


@pytest.mark.looptime(False)
async def test_looptime_false(snakeloop_clock):
    assert not snakeloop_clock.is_virtual
"""


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_looptime_marker_maps_to_snakeloop(pytester, runner):
    run(pytester, LOOPTIME, runner=runner).assert_outcomes(passed=3)


def test_a_looptime_option_snakeloop_does_not_know_is_refused(pytester):
    source = """
import pytest

@pytest.mark.looptime(idle_timout=3)
async def test_it():
    pass
"""
    assert (
        "snakeloop: test_inner.py::test_it: mark.looptime got an unknown option 'idle_timout'"
        in _usage_error(pytester, source)
    )
