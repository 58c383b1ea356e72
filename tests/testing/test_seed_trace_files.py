"""Trace files in the plugin: --snakeloop-trace=DIR writes them, --snakeloop-replay-trace replays.

A seeded test that fails writes its trace file; the failure section names it
and its replay command, run as printed, replays the test against it and says
the replay was exact; a test changed since says where it first chose
otherwise.
"""

from __future__ import annotations

import dataclasses
import re
import shlex

import _race
import pytest

import snakeloop
from snakeloop import tracefile
from snakeloop.testing._pytest_traces import trace_file_name
from snakeloop.testing._seed_report import seed_section

from ._pluginkit import RACE_NODEID, RACE_TEST, run, section_field, snakeloop_section

pytestmark = pytest.mark.timeout(120)

RACE = RACE_TEST

# The same test with two fds held open first: the race's sockets get other
# numbers, so its choices differ from the first one on.
CHANGED = RACE.replace(
    "async def test_bank():\n    assert await bank() == 40\n",
    """async def test_bank():
    held = socket.socketpair()
    try:
        assert await bank() == 40
    finally:
        for sock in held:
            sock.close()
""",
)

NODEID = RACE_NODEID


def _failing_run_with_trace(pytester: pytest.Pytester) -> tuple[str, str, int]:
    """A failing seeded run of the race that wrote its trace: the first failed run's
    section and file, and how many of the runs failed."""
    for root in range(5):
        result = run(
            pytester,
            RACE,
            f"--snakeloop-seed={root}",
            "--snakeloop-seeds=20",
            "--snakeloop-trace=traces",
        )
        if result.parseoutcomes().get("failed"):
            section = snakeloop_section(result)
            match = re.search(r"^trace:  (\S+)$", section, re.MULTILINE)
            assert match, section
            return section, match.group(1), result.parseoutcomes()["failed"]
    pytest.fail("20 seeds under 5 roots never reordered the two connections")


def _replay_command(section: str) -> list[str]:
    """The replay line's arguments after ``pytest`` (an environment prefix dropped)."""
    match = re.search(r"^replay:  (.*)$", section, re.MULTILINE)
    assert match, section
    words = shlex.split(match.group(1))
    while "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)  # PYTHONHASHSEED=..., which this process has already
    assert words[0] == "pytest", words
    return words[1:]


def test_a_failing_seeded_test_writes_its_trace_and_its_command_replays_it(pytester):
    section, shown, failed = _failing_run_with_trace(pytester)
    seed = int(section_field(section, "seed"))
    path = pytester.path / shown
    assert path.parent == pytester.path / "traces"
    assert path.name == trace_file_name(NODEID, seed)
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", path.name)
    written = sorted(p.name for p in path.parent.iterdir())
    assert path.name in written
    assert len(written) == failed  # one file for each failed run, none for the others
    recording = tracefile.load(path)
    assert (recording.seed, recording.origin) == (seed, NODEID)
    assert recording.fingerprint == section_field(section, "fingerprint")
    assert recording.count == int(section_field(section, "decisions"))
    args = _replay_command(section)
    assert args == [
        NODEID,
        f"--snakeloop-replay={NODEID}@{seed}",
        f"--snakeloop-replay-trace={shown}",
    ]
    again = run(pytester, RACE, *args)
    again.assert_outcomes(failed=1)
    replayed = snakeloop_section(again)
    assert section_field(replayed, "fingerprint") == recording.fingerprint
    assert (
        f"replayed against {shown}: exact (the recorded fingerprint, {recording.count} decisions)"
    ) in replayed
    assert "the replay may diverge" not in replayed  # this process hashes strings alike
    assert "assert -20 == 40" in again.stdout.str()


def test_a_replay_of_a_changed_test_says_where_it_diverged(pytester):
    assert CHANGED != RACE
    section, shown, _ = _failing_run_with_trace(pytester)
    seed = int(section_field(section, "seed"))
    # The trace alone names the test and the seed; -rP shows the section of a pass too.
    again = run(pytester, CHANGED, f"--snakeloop-replay-trace={shown}", "-rP")
    replayed = snakeloop_section(again)
    assert f"replayed against {shown}: diverged\n" in replayed
    assert re.search(
        rf"snakeloop: replay of seed {seed} diverged at decision 1 \(iteration \d+\): recorded '",
        replayed,
    ), replayed
    assert "exact" not in replayed


def test_trace_options_name_the_mistake(pytester, monkeypatch):
    section, shown, _ = _failing_run_with_trace(pytester)
    seed = int(section_field(section, "seed"))
    other = seed + 1 if seed < 2**64 - 1 else seed - 1
    for args, message in [
        (
            (f"--snakeloop-replay={other}", f"--snakeloop-replay-trace={shown}"),
            f"snakeloop: --snakeloop-replay-trace: seed={other} was given with a recording of "
            f"seed {seed}",
        ),
        (
            ("--snakeloop-perturb=io_order", f"--snakeloop-replay-trace={shown}"),
            "perturb=io_order was given with a recording made with perturb=",
        ),
        (
            ("--snakeloop-replay-trace=missing.json",),
            "snakeloop: --snakeloop-replay-trace: cannot read missing.json",
        ),
    ]:
        result = run(pytester, RACE, *args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, (args, result.stderr.str())
        assert message in result.stderr.str(), (args, result.stderr.str())
    # A recording that does not say which test it is of needs NODEID@SEED.
    recorded = tracefile.load(pytester.path / shown)
    tracefile.save(dataclasses.replace(recorded, origin=None), pytester.path / "anonymous.json")
    result = run(pytester, RACE, "--snakeloop-replay-trace=anonymous.json")
    assert f"give it with --snakeloop-replay=NODEID@{seed}" in result.stderr.str()
    ok = run(
        pytester,
        RACE,
        f"--snakeloop-replay={NODEID}@{seed}",
        "--snakeloop-replay-trace=anonymous.json",
    )
    ok.assert_outcomes(failed=1)
    assert "replayed against anonymous.json: exact" in snakeloop_section(ok)
    # The environment variables do what the options do.
    monkeypatch.setenv("SNAKELOOP_TRACE_DIR", "from_env")
    monkeypatch.setenv("SNAKELOOP_REPLAY_TRACE", shown)
    by_env = run(pytester, RACE)
    by_env.assert_outcomes(failed=1)
    assert "exact" in snakeloop_section(by_env)
    assert (pytester.path / "from_env" / trace_file_name(NODEID, seed)).exists()


def test_the_section_counts_every_decision_when_the_trace_kept_the_last_only():
    loop = snakeloop.new_event_loop(seed=7, trace=2)
    try:
        loop.run_until_complete(_race.bank())
    finally:
        loop.close()
    total = loop.schedule_trace().total
    assert total > 2, "the race makes more decisions than the trace keeps"
    section = seed_section(loop, NODEID)
    assert f"  decisions={total}\n" in section
    assert section.count("\n  it=") == 2


def test_other_seeded_tests_of_a_replay_session_name_the_recorded_perturbation(pytester):
    _, shown, _ = _failing_run_with_trace(pytester)
    recorded = tracefile.load(pytester.path / shown)
    other = RACE + (
        "\n\nimport pytest\n\n"
        "@pytest.mark.snakeloop(seed=3, virtual_time=False)\n"
        "async def test_other():\n"
        "    assert False\n"
    )
    result = run(pytester, other, f"--snakeloop-replay-trace={shown}", "-p", "no:asyncio")
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    line = next(
        line
        for line in text.splitlines()
        if line.startswith("replay:  pytest 'test_inner.py::test_other'")
    )
    assert line.endswith(f"--snakeloop-perturb={','.join(recorded.perturbation)}"), line
