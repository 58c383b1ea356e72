"""--snakeloop-seeds for loops a test makes itself (the snakeloop_seed fixture), and the summary."""

from __future__ import annotations

import dataclasses
import re

import pytest

import snakeloop
from snakeloop.perturbation import IMPLEMENTED
from snakeloop.seeding import DEFAULT_DIMENSIONS, derive_seed
from snakeloop.testing import SeedRun

from ._pluginkit import run

DEFAULT_PERTURB = ",".join(name for name in DEFAULT_DIMENSIONS if name in IMPLEMENTED)

pytestmark = pytest.mark.timeout(120)


def test_a_seed_run_gives_new_event_loop_its_seed():
    seed_run = SeedRun(seed=42, perturb="io_order", index=1, runs=3)
    assert seed_run.loop_options() == {"seed": 42, "perturb": "io_order"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        seed_run.seed = 43  # type: ignore[misc]
    assert seed_run.loop is None
    loop = seed_run.new_event_loop()
    try:
        assert (loop.seed, tuple(loop.perturbation)) == (42, ("io_order",))
        assert seed_run.loop is loop
    finally:
        loop.close()
    other = snakeloop.new_event_loop(**SeedRun(seed=42).loop_options())
    try:
        assert (other.seed, ",".join(other.perturbation)) == (42, DEFAULT_PERTURB)
    finally:
        other.close()
    assert SeedRun(seed=42, perturb="io_order", index=1, runs=3) == seed_run


FIXTURE_SEEN = """
import pytest

import snakeloop


def test_sync(snakeloop_seed):
    if snakeloop_seed is None:
        print("RUN sync none - - - -")
        return
    loop = snakeloop.new_event_loop(**snakeloop_seed.loop_options())
    loop.close()
    s = snakeloop_seed
    print(f"RUN sync {s.seed} {s.index} {s.runs} {loop.seed} {','.join(loop.perturbation)}")


@pytest.fixture
def own_loop(snakeloop_seed):
    loop = snakeloop_seed.new_event_loop()
    yield loop
    loop.close()


def test_factory(own_loop):
    print(f"RUN factory {own_loop.seed} - - - -")


@pytest.mark.snakeloop(seed=1234, perturb="io_delay")
def test_marked(snakeloop_seed):
    s = snakeloop_seed
    print(f"RUN marked {s.seed} {s.index} {s.runs} - {s.perturb}")


def test_untouched():
    print("RUN untouched - - - - -")
"""


def _runs(result: pytest.RunResult) -> dict[str, list[tuple[str, ...]]]:
    seen: dict[str, list[tuple[str, ...]]] = {}
    for name, *fields in re.findall(
        r"RUN (\S+) (\S+) (\S+) (\S+) (\S+) (\S+)$", result.stdout.str(), re.MULTILINE
    ):
        seen.setdefault(name, []).append(tuple(fields))
    return seen


def test_the_fixture_is_none_for_a_test_that_is_not_seeded(pytester):
    for args in [(), ("--snakeloop",)]:
        result = run(pytester, FIXTURE_SEEN, "-s", "-k", "sync", *args, runner="plain")
        result.assert_outcomes(passed=1)
        assert _runs(result)["sync"] == [("none", "-", "-", "-", "-")]


def test_the_fixture_gives_the_seed_of_the_test(pytester):
    result = run(pytester, FIXTURE_SEEN, "-s", "--snakeloop-seed=6", runner="plain")
    result.assert_outcomes(passed=4)
    seen = _runs(result)
    seed = str(derive_seed(6, "test_inner.py::test_sync"))
    assert seen["sync"] == [(seed, "0", "1", seed, DEFAULT_PERTURB)]
    assert seen["factory"] == [(str(derive_seed(6, "test_inner.py::test_factory")),) + ("-",) * 4]
    # A marker's seed and perturb, as given.
    assert seen["marked"] == [("1234", "0", "1", "-", "io_delay")]
    perturbed = run(
        pytester, FIXTURE_SEEN, "-s", "--snakeloop-seed=6", "--snakeloop-perturb=io_order"
    )
    assert _runs(perturbed)["sync"] == [(seed, "0", "1", seed, "io_order")]


def test_seeds_repeats_the_tests_that_use_the_fixture(pytester):
    result = run(
        pytester, FIXTURE_SEEN, "-s", "--snakeloop-seed=6", "--snakeloop-seeds=3", runner="plain"
    )
    # test_sync and test_factory (through own_loop) 3 times; the marked and the untouched once.
    result.assert_outcomes(passed=8)
    seen = _runs(result)
    seeds = [str(derive_seed(6, "test_inner.py::test_sync", i)) for i in range(3)]
    assert seen["sync"] == [(s, str(i), "3", s, DEFAULT_PERTURB) for i, s in enumerate(seeds)]
    assert [fields[0] for fields in seen["factory"]] == [
        str(derive_seed(6, "test_inner.py::test_factory", i)) for i in range(3)
    ]
    assert seen["marked"] == [("1234", "0", "1", "-", "io_delay")]
    assert len(seen["untouched"]) == 1


SYNC_FAILS = """
import asyncio

import snakeloop


def test_own(snakeloop_seed):
    loop = snakeloop.new_event_loop(**snakeloop_seed.loop_options())
    loop.close()
    assert loop.seed % 2 == 1, "an even seed"


def test_reached(snakeloop_seed):
    loop = snakeloop_seed.new_event_loop()
    try:
        loop.run_until_complete(asyncio.sleep(0))
        print(f"FP {loop.seed} {loop.schedule_fingerprint()}")
    finally:
        loop.close()
    assert loop.seed % 2 == 1, "an even seed"


def test_passes(snakeloop_seed):
    pass
"""

RUNS = 8


def _even(root: int, name: str) -> list[int]:
    seeds = [derive_seed(root, f"test_inner.py::{name}", i) for i in range(RUNS)]
    return [seed for seed in seeds if seed % 2 == 0]


def _root() -> int:
    """A root under which both failing tests fail under some seeds and pass under others."""
    for root in range(100):
        if all(0 < len(_even(root, name)) < RUNS for name in ("test_own", "test_reached")):
            return root
    raise AssertionError("no root in 100 gives both tests even and odd seeds")


def _sections(result: pytest.RunResult) -> dict[str, str]:
    """The snakeloop section of each failed item, by the item's name."""
    text = result.stdout.str()
    found = {}
    for match in re.finditer(r"_+ (test_\S+) _+\n", text):
        rest = text[match.end() :]
        end = re.search(r"\n_+ test_|\n=+ ", rest)
        body = rest[: end.start() if end else None]
        if " snakeloop " in body:
            found[match.group(1)] = body[body.index(" snakeloop ") :]
    return found


def test_a_sync_test_that_fails_gets_the_seed_section_and_the_summary(pytester):
    root = _root()
    result = run(
        pytester, SYNC_FAILS, "-s", f"--snakeloop-seed={root}", f"--snakeloop-seeds={RUNS}"
    )
    own, reached = _even(root, "test_own"), _even(root, "test_reached")
    result.assert_outcomes(
        failed=len(own) + len(reached), passed=3 * RUNS - len(own) - len(reached)
    )
    sections = _sections(result)
    for name, failing in [("test_own", own), ("test_reached", reached)]:
        base = f"test_inner.py::{name}"
        for seed in failing:
            index = [derive_seed(root, base, i) for i in range(RUNS)].index(seed)
            lines = sections[f"{name}[seed{index}]"].splitlines()[1:]
            assert lines[0] == f"seed={seed}  perturb={DEFAULT_PERTURB}"
            assert f"failed on run {index + 1} of {RUNS}" in lines
            replay = f"replay:  pytest '{base}' --snakeloop-replay='{base}@{seed}'"
            assert replay in lines
            if name == "test_own":
                # The plugin never saw that loop: it says so and shows no fingerprint.
                assert lines[2].startswith("fingerprint and last decisions unknown: ")
                assert not any(line.startswith("fingerprint=") for line in lines)
            else:
                printed = re.search(rf"FP {seed} (\S+)", result.stdout.str(), re.MULTILINE)
                assert lines[1].startswith(f"fingerprint={printed.group(1)}  decisions=")
    summary = result.stdout.str().split("= snakeloop =", 1)[1].splitlines()[1:5]
    assert summary == [
        f"test_inner.py::test_own failed under {len(own)} of {RUNS} seeds: "
        + ", ".join(map(str, own))
        + " (first shown)",
        f"  replay:  pytest 'test_inner.py::test_own' "
        f"--snakeloop-replay='test_inner.py::test_own@{own[0]}'",
        f"test_inner.py::test_reached failed under {len(reached)} of {RUNS} seeds: "
        + ", ".join(map(str, reached))
        + " (first shown)",
        f"  replay:  pytest 'test_inner.py::test_reached' "
        f"--snakeloop-replay='test_inner.py::test_reached@{reached[0]}'",
    ]
    # The replay command runs that test once, under that seed, and it fails the same way.
    again = run(
        pytester,
        SYNC_FAILS,
        "test_inner.py::test_own",
        f"--snakeloop-replay=test_inner.py::test_own@{own[0]}",
    )
    again.assert_outcomes(failed=1)
    lines = _sections(again)["test_own"].splitlines()[1:]
    assert lines[0] == f"seed={own[0]}  perturb={DEFAULT_PERTURB}"
    assert not any(line.startswith("failed on run") for line in lines)
    assert "= snakeloop =" not in again.stdout.str()  # a replay is no run of --snakeloop-seeds


def test_no_summary_when_every_run_passes(pytester):
    result = run(
        pytester,
        SYNC_FAILS,
        "-k",
        "passes",
        "--snakeloop-seed=1",
        f"--snakeloop-seeds={RUNS}",
    )
    result.assert_outcomes(passed=RUNS)
    assert "= snakeloop =" not in result.stdout.str()
