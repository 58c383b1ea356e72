"""Seeded tests in the plugin (issue 12): per-test seeds, runs, replay, the failure section."""

from __future__ import annotations

import re

import _race
import pytest

from snakeloop.perturbation import IMPLEMENTED
from snakeloop.seeding import DEFAULT_DIMENSIONS, derive_seed
from snakeloop.testing import replay

from ._pluginkit import RACE_NODEID, RACE_TEST, RUNNERS, run, section_field, snakeloop_section

# What a seed turns on by default: the design's default dimensions this build has.
DEFAULT_PERTURB = ",".join(name for name in DEFAULT_DIMENSIONS if name in IMPLEMENTED)

pytestmark = pytest.mark.timeout(120)

RACE = RACE_TEST

NODEID = RACE_NODEID


def test_the_race_passes_unseeded(pytester):
    run(pytester, RACE, "--snakeloop", runner="plain").assert_outcomes(passed=1)


def test_seeds_option_finds_the_race_and_replay_reproduces_it(pytester):
    failed = None
    for root in range(5):
        result = run(pytester, RACE, f"--snakeloop-seed={root}", "--snakeloop-seeds=20")
        outcomes = result.parseoutcomes()
        if outcomes.get("failed"):
            failed = root, result
            break
    assert failed is not None, "20 seeds under 5 roots never reordered the two connections"
    root, result = failed
    section = snakeloop_section(result)
    seed = int(section_field(section, "seed"))
    fingerprint = section_field(section, "fingerprint")
    index = int(re.search(r"failed on run (\d+) of 20", section).group(1)) - 1
    assert seed == derive_seed(root, NODEID, index)
    assert f"replay:  pytest '{NODEID}' --snakeloop-replay='{NODEID}@{seed}'\n" in section
    # The terminal summary: every failing run's seed, and the first one's replay.
    text = result.stdout.str()
    failing = [int(i) for i in re.findall(r"FAILED test_inner.py::test_bank\[seed(\d+)\]", text)]
    assert failing[0] == index and len(failing) == result.parseoutcomes()["failed"]
    seeds = ", ".join(str(derive_seed(root, NODEID, i)) for i in failing)
    assert (
        f"{NODEID} failed under {len(failing)} of 20 seeds: {seeds} (first shown)\n"
        f"  replay:  pytest '{NODEID}' --snakeloop-replay='{NODEID}@{seed}'\n"
    ) in text
    for _ in range(3):
        again = run(pytester, RACE, f"--snakeloop-replay={NODEID}@{seed}")
        again.assert_outcomes(failed=1)
        replayed = snakeloop_section(again)
        assert section_field(replayed, "fingerprint") == fingerprint
        assert "failed on run" not in replayed  # a replay runs once
    assert "assert -20 == 40" in result.stdout.str()


def test_a_root_seed_alone_finds_the_race_under_some_roots(pytester):
    outcomes = set()
    for root in range(12):
        result = run(pytester, RACE, f"--snakeloop-seed={root}")
        outcomes.add("failed" if result.parseoutcomes().get("failed") else "passed")
        if outcomes == {"failed", "passed"}:
            break
    assert outcomes == {"failed", "passed"}


def test_the_failure_section(pytester):
    seed = _failing_seed()
    result = run(pytester, RACE, f"--snakeloop-replay={seed}", "--snakeloop-perturb=io_order")
    result.assert_outcomes(failed=1)
    section = snakeloop_section(result)
    lines = section.splitlines()[1:]
    assert lines[0] == f"seed={seed}  perturb=io_order"
    assert re.fullmatch(r"fingerprint=[0-9a-f]{32}  decisions=[1-9]\d*", lines[1]), lines[1]
    assert lines[2] == (
        f"replay:  pytest '{NODEID}' --snakeloop-replay={seed} --snakeloop-perturb=io_order"
    )
    assert lines[3] == "last decisions:"
    decisions = []
    for line in lines[4:]:
        if not line.startswith("  it="):
            break
        decisions.append(line)
    assert 1 <= len(decisions) <= 10
    assert all(re.fullmatch(r"  it=\d+ io_order \S.*", line) for line in decisions), decisions
    count = int(section_field(section, "decisions"))
    assert len(decisions) == min(count, 10)


def _failing_seed() -> int:
    """A seed under which the race fails with io_order alone, found on the loop itself."""
    for seed in range(100):
        if replay(_race.bank, seed, perturb="io_order")[0] != 40:
            return seed
    raise AssertionError("no seed in 100 reordered the two connections")


SEEDS_SEEN = """
import asyncio

import pytest


def _say(name):
    loop = asyncio.get_running_loop()
    print(f"SEED {name} {loop.seed} {','.join(loop.perturbation)}")


async def test_one():
    _say("one")


@pytest.mark.snakeloop(virtual_time=False, seed=1234, perturb="io_delay")
async def test_marked():
    _say("marked")


async def test_unseeded_elsewhere():
    pass
"""


def _seeds(result: pytest.RunResult) -> dict[str, list[tuple[int, str]]]:
    seen: dict[str, list[tuple[int, str]]] = {}
    for name, seed, perturb in re.findall(r"SEED (\S+) (\d+) (\S*)", result.stdout.str()):
        seen.setdefault(name, []).append((int(seed), perturb))
    return seen


def test_seeds_are_derived_from_the_root_and_the_node_id_only(pytester):
    first = _seeds(run(pytester, SEEDS_SEEN, "-s", "--snakeloop-seed=77", runner="plain"))
    assert first["one"] == [(derive_seed(77, "test_inner.py::test_one"), DEFAULT_PERTURB)]
    # The marker's seed is used as it is, with its perturb.
    assert first["marked"] == [(1234, "io_delay")]
    # Another test before it, and another run: test_one's seed stays.
    added = "async def test_zero():\n    _say('zero')\n" + SEEDS_SEEN
    second = _seeds(run(pytester, added, "-s", "--snakeloop-seed=77", runner="plain"))
    assert second["one"] == first["one"]
    assert second["zero"][0][0] not in (first["one"][0][0], 1234)
    other = _seeds(run(pytester, SEEDS_SEEN, "-s", "--snakeloop-seed=78", runner="plain"))
    assert other["one"] != first["one"]


def test_seeds_runs_each_test_under_k_derived_seeds(pytester):
    result = run(
        pytester,
        SEEDS_SEEN,
        "-v",
        "-s",
        "--snakeloop-seed=5",
        "--snakeloop-seeds=3",
        runner="plain",
    )
    # Each seeded test is 3 items; the one with a seed of its own is run once.
    result.assert_outcomes(passed=7)
    text = result.stdout.str()
    for i in range(3):
        assert f"test_inner.py::test_one[seed{i}] " in text
        assert f"test_inner.py::test_unseeded_elsewhere[seed{i}] " in text
    assert "test_inner.py::test_marked " in text
    assert "test_marked[" not in text
    seen = _seeds(result)
    assert [seed for seed, _ in seen["one"]] == [
        derive_seed(5, "test_inner.py::test_one", i) for i in range(3)
    ]
    assert seen["marked"] == [(1234, "io_delay")]
    # Run 0 is the test under --snakeloop-seed alone.
    alone = _seeds(run(pytester, SEEDS_SEEN, "-s", "--snakeloop-seed=5", runner="plain"))
    assert alone["one"] == seen["one"][:1]


def test_one_seed_makes_no_runs(pytester):
    result = run(
        pytester, SEEDS_SEEN, "-v", "--snakeloop-seed=5", "--snakeloop-seeds=1", runner="plain"
    )
    result.assert_outcomes(passed=3)
    assert "test_inner.py::test_one PASSED" in result.stdout.str()
    assert "[seed" not in result.stdout.str()


def test_replay_of_one_node_id_leaves_the_others(pytester):
    result = run(
        pytester,
        SEEDS_SEEN,
        "-s",
        "--snakeloop-seed=9",
        "--snakeloop-replay=test_inner.py::test_marked@42",
        runner="plain",
    )
    seen = _seeds(result)
    assert seen["marked"] == [(42, "io_delay")]  # the replay beats the marker's seed
    assert seen["one"] == [(derive_seed(9, "test_inner.py::test_one"), DEFAULT_PERTURB)]


def test_environment_variables(pytester, monkeypatch):
    monkeypatch.setenv("SNAKELOOP_SEED", "11")
    monkeypatch.setenv("SNAKELOOP_PERTURB", "io_order")
    monkeypatch.setenv("SNAKELOOP_SEEDS", "2")
    seen = _seeds(run(pytester, SEEDS_SEEN, "-s", runner="plain"))
    assert seen["one"] == [
        (derive_seed(11, "test_inner.py::test_one", i), "io_order") for i in range(2)
    ]
    monkeypatch.setenv("SNAKELOOP_REPLAY", "99")
    seen = _seeds(run(pytester, SEEDS_SEEN, "-s", runner="plain"))
    assert seen["one"] == [(99, "io_order")]
    assert seen["marked"] == [(99, "io_delay")]
    # The option beats the environment.
    seen = _seeds(run(pytester, SEEDS_SEEN, "-s", "--snakeloop-replay=3", runner="plain"))
    assert seen["one"] == [(3, "io_order")]


def test_a_random_root_is_shown_in_the_header(pytester):
    result = run(pytester, SEEDS_SEEN, "-s", "--snakeloop-seed=random", runner="plain")
    root = int(
        re.search(
            r"snakeloop: root seed (\d+) \(run this session again with "
            r"--snakeloop-seed=\1\)",
            result.stdout.str(),
        ).group(1)
    )
    assert _seeds(result)["one"][0][0] == derive_seed(root, "test_inner.py::test_one")


@pytest.mark.parametrize(
    ("args", "marker", "message"),
    [
        (("--snakeloop-seed=-3",), "", "snakeloop: --snakeloop-seed: a seed is a whole number"),
        (("--snakeloop-seeds=0",), "", "snakeloop: --snakeloop-seeds='0' must be a whole number"),
        (
            ("--snakeloop-replay=x@y",),
            "",
            "snakeloop: --snakeloop-replay='x@y' is [NODEID@]SEED: a seed is a whole number",
        ),
        (
            ("--snakeloop-seed=1", "--snakeloop-perturb=io_shuffle"),
            "",
            "snakeloop: --snakeloop-perturb: unknown perturbation 'io_shuffle'",
        ),
        (
            (),
            "perturb='io_order'",
            "snakeloop: test_inner.py::test_it: perturb='io_order' needs a seed; add seed= to "
            "the marker or run pytest with --snakeloop-seed=N (or random)",
        ),
        (
            (),
            "seed='x'",
            "snakeloop: test_inner.py::test_it: a seed is a whole number from 0 to 2**64-1",
        ),
    ],
)
def test_wrong_seed_options_are_usage_errors(pytester, args, marker, message):
    source = f"""
import pytest

@pytest.mark.snakeloop({marker})
async def test_it():
    pass
"""
    result = run(pytester, source, *args, runner="plain")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert message in result.stderr.str()


LOOP_FIXTURES = """
import asyncio


async def test_it(snakeloop_clock, loop_time):
    loop = asyncio.get_running_loop()
    # The fixtures hold this run's loop, not an earlier run's.
    assert snakeloop_clock is loop.get_clock()
    assert loop_time == loop.time()
    print(f"SEED it {loop.seed} {id(loop)}")
"""


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_each_run_gets_fresh_loop_fixtures(pytester, runner):
    result = run(
        pytester,
        LOOP_FIXTURES,
        "-s",
        "--snakeloop-seed=4",
        "--snakeloop-seeds=3",
        "--snakeloop-virtual-time",
        runner=runner,
    )
    result.assert_outcomes(passed=3)
    seeds = [seed for seed, _ in _seeds(result)["it"]]
    assert seeds == [derive_seed(4, "test_inner.py::test_it", i) for i in range(3)]


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_replay_under_every_runner(pytester, runner):
    seed = _failing_seed()
    args = (f"--snakeloop-replay={seed}", "--snakeloop-perturb=io_order")
    result = run(pytester, RACE, *args, runner=runner)
    result.assert_outcomes(failed=1)
    assert snakeloop_section(result).splitlines()[1] == f"seed={seed}  perturb=io_order"


RUNS_SEEN = """
import asyncio

import pytest


async def test_plain():
    print(f"SEED plain {asyncio.get_running_loop().seed} -")


@pytest.mark.parametrize("name", ["a", "b"])
async def test_named(name):
    print(f"SEED {name} {asyncio.get_running_loop().seed} -")
"""


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_every_runner_runs_each_run_on_a_loop_under_its_derived_seed(pytester, runner):
    result = run(
        pytester, RUNS_SEEN, "-v", "-s", "--snakeloop-seed=8", "--snakeloop-seeds=4", runner=runner
    )
    result.assert_outcomes(passed=12)
    seen = _seeds(result)
    for name, base in [
        ("plain", "test_inner.py::test_plain"),
        ("a", "test_inner.py::test_named[a]"),
        ("b", "test_inner.py::test_named[b]"),
    ]:
        assert [seed for seed, _ in seen[name]] == [derive_seed(8, base, i) for i in range(4)]
    text = result.stdout.str()
    assert "test_inner.py::test_plain[seed3] " in text
    assert "test_inner.py::test_named[a-seed0] " in text
    assert "test_inner.py::test_named[b-seed3] " in text


MANY_DECISIONS = """
import asyncio
import socket

import pytest


@pytest.mark.snakeloop(virtual_time=False, seed=7)
async def test_busy():
    loop = asyncio.get_running_loop()
    pairs = [socket.socketpair() for _ in range(4)]
    try:
        for a, b in pairs:
            a.setblocking(False)
            b.setblocking(False)
        for _ in range(20):
            # Every reader waits first, so that the four readinesses come through one poll.
            reads = [asyncio.ensure_future(loop.sock_recv(a, 10)) for a, _ in pairs]
            await asyncio.sleep(0)
            for _, b in pairs:
                b.send(b"x")
            await asyncio.gather(*reads)
    finally:
        for a, b in pairs:
            a.close()
            b.close()
    trace = loop.schedule_trace()
    print("LAST", len(trace), repr(f"it={trace[-1].iteration} {trace[-1].kind} {trace[-1].detail}"))
    raise AssertionError("after the I/O")
"""


def test_the_section_lists_the_last_ten_decisions(pytester):
    result = run(pytester, MANY_DECISIONS, "-s", runner="plain")
    result.assert_outcomes(failed=1)
    count, last = re.search(r"LAST (\d+) '(.*)'", result.stdout.str()).groups()
    assert int(count) > 10
    section = snakeloop_section(result)
    assert section_field(section, "decisions") == count
    listed = [line for line in section.splitlines() if line.startswith("  it=")]
    assert len(listed) == 10
    assert listed[-1] == "  " + last
