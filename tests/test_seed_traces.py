"""Trace files (issue 12, replay): a seeded run saved, loaded and replayed against.

From Python (``snakeloop.tracefile``, ``new_event_loop(replay=load(path))``,
``snakeloop.testing.replay(trace=)``) and from ``python -m snakeloop
--trace FILE`` / ``--replay FILE``.  A replay with every peer inside the
loop has the recorded fingerprint and says nothing; a run that chooses
differently warns once, at its first divergence; a trace that kept only
its last decisions never passes for an exact replay it cannot check.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import snakeloop
from snakeloop import tracefile
from snakeloop.seeding import ReplayDivergenceWarning
from snakeloop.testing import replay
from snakeloop.tracefile import Recording, ReplayEnvironmentWarning

pytestmark = pytest.mark.timeout(120)

RACE_SOURCE = (Path(__file__).parent / "_race.py").read_text()


async def echo(messages=(b"hello", b"world", b"x" * 3000)):
    """A client and a server in this loop, over TCP: every peer is inside the loop."""
    served = asyncio.Event()

    async def handle(reader, writer):
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()
        await writer.wait_closed()
        served.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    received = bytearray()
    for message in messages:
        writer.write(message)
        await writer.drain()
        received += await reader.readexactly(len(message))
    writer.close()
    await writer.wait_closed()
    await served.wait()
    server.close()
    await server.wait_closed()
    return bytes(received)


async def echo_changed():
    return await echo((b"hello!", b"world", b"x" * 3000))


def run(main, **options):
    """Run ``main()`` on a new loop with ``options``; the closed loop and the result."""
    loop = snakeloop.new_event_loop(**options)
    try:
        result = loop.run_until_complete(main())
    finally:
        loop.close()
    return loop, result


def quiet_run(main, **options):
    """``run``, failing if anything is warned (the suite's filter would too, less clearly)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop, result = run(main, **options)
    assert [str(w.message) for w in caught] == []
    return loop, result


# -- the file ------------------------------------------------------------------------------


def test_a_trace_file_round_trips(tmp_path):
    perturb = {"io_order": "full", "io_delay": True, "chunking": True}
    loop, result = run(echo, seed=11, perturb=perturb)
    assert result == b"helloworld" + b"x" * 3000
    path = tmp_path / "run.json"
    saved = tracefile.save(loop, path, origin="echo")
    loaded = tracefile.load(path)
    assert loaded == saved
    trace = loop.schedule_trace()
    assert trace.total == len(trace) > 0
    assert (loaded.seed, loaded.perturbation, loaded.origin) == (11, perturb, "echo")
    assert loaded.fingerprint == loop.schedule_fingerprint()
    assert (loaded.count, loaded.first, loaded.truncated) == (len(trace), 1, False)
    assert list(loaded) == trace
    assert loaded.hash_seed == (os.environ.get("PYTHONHASHSEED") or "random")
    assert loaded.python == ".".join(map(str, sys.version_info[:3]))
    assert loaded.snakeloop == snakeloop.__version__
    data = json.loads(path.read_text())
    assert data["format"] == "snakeloop-trace"
    assert data["seed"] == "11"  # decimal text: a 64-bit seed survives any JSON reader
    assert data["decisions"] == len(data["trace"]) == len(trace)
    assert data["truncated"] is False
    # An option given as a tuple comes back as one.
    latency = dataclasses.replace(loaded, perturbation={"io_latency": (0.001, 0.01)})
    tracefile.save(latency, path)
    assert tracefile.load(path).perturbation == {"io_latency": (0.001, 0.01)}


def test_a_file_that_is_not_a_trace_is_refused_by_name(tmp_path):
    path = tmp_path / "other.json"
    path.write_text('{"seed": 1}')
    with pytest.raises(ValueError, match=r"other\.json: not a snakeloop trace"):
        tracefile.load(path)
    loop, _ = run(echo, seed=2)
    data = tracefile.record(loop).to_json()
    data["first"] = 5  # contradicts its own count and decisions
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="malformed snakeloop trace"):
        tracefile.load(path)
    plain = snakeloop.new_event_loop()
    try:
        with pytest.raises(ValueError, match="is not seeded"):
            tracefile.record(plain)
    finally:
        plain.close()


# -- replay from a file --------------------------------------------------------------------


def test_replaying_a_client_server_run_from_its_file_is_exact(tmp_path):
    recorded, result = run(echo, seed=7)
    path = tmp_path / "echo.json"
    tracefile.save(recorded, path)
    again, result_again = quiet_run(echo, replay=tracefile.load(path))
    assert result_again == result
    assert again.seed == 7 and again.perturbation == recorded.perturbation
    assert again.schedule_fingerprint() == recorded.schedule_fingerprint()
    assert again.schedule_divergence() is None
    assert tracefile.compare(tracefile.load(path), tracefile.record(again)) is None
    # snakeloop.testing.replay takes the file, or its recording.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert replay(echo, trace=path) == (result, recorded.schedule_fingerprint())
        assert replay(echo, seed=7, trace=tracefile.load(path))[1] == (
            recorded.schedule_fingerprint()
        )


def test_a_run_that_chooses_differently_warns_once_at_its_first_divergence(tmp_path):
    recorded, _ = run(echo, seed=7)
    changed, _ = run(echo_changed, seed=7)  # one byte more in the first message
    was, now = recorded.schedule_trace(), changed.schedule_trace()
    first = next(n for n, (a, b) in enumerate(zip(was, now, strict=False), 1) if a != b)
    path = tmp_path / "echo.json"
    tracefile.save(recorded, path)
    with pytest.warns(ReplayDivergenceWarning) as caught:
        loop, _ = run(echo_changed, replay=tracefile.load(path))
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith(
        f"snakeloop: replay of seed 7 diverged at decision {first} "
        f"(iteration {now[first - 1].iteration}): recorded "
        f"'{was[first - 1].kind} {was[first - 1].detail}'"
    ), message
    assert message.endswith("results after this point are not a replay.")
    assert loop.schedule_divergence() == message
    offline = tracefile.compare(tracefile.load(path), tracefile.record(loop))
    assert offline is not None and f"diverged at decision {first} " in offline
    with pytest.warns(ReplayDivergenceWarning, match=f"diverged at decision {first} "):
        replay(echo_changed, trace=path)


def test_a_truncated_trace_never_claims_an_exact_replay(tmp_path):
    recorded, _ = run(echo, seed=7, trace=3)
    recording = tracefile.save(recorded, tmp_path / "tail.json")
    assert recording.count > 3, "the run makes more decisions than the trace keeps"
    assert recording.truncated and recording.first == recording.count - 2
    assert len(recording.decisions) == 3
    assert json.loads((tmp_path / "tail.json").read_text())["truncated"] is True
    loaded = tracefile.load(tmp_path / "tail.json")
    # The same run: the kept tail matches and the fingerprint of every decision too.
    again, _ = quiet_run(echo, replay=loaded)
    assert again.schedule_fingerprint() == recording.fingerprint
    assert tracefile.compare(loaded, tracefile.record(again)) is None
    # A difference among the dropped decisions (here, a fingerprint that cannot be the
    # run's) is found when the run ends, and said to be among them, not located.
    elsewhere = dataclasses.replace(loaded, fingerprint="0" * 32)
    with pytest.warns(ReplayDivergenceWarning) as caught:
        loop, _ = run(echo, replay=elsewhere)
    (warning,) = caught
    dropped = recording.first - 1
    assert (
        f"one of the first {dropped} decisions, which the recording did not keep, differs"
        in str(warning.message)
    )
    assert "diverged at decision" not in str(warning.message)
    assert tracefile.compare(elsewhere, tracefile.record(loop)) == str(warning.message)
    # A changed run against the tail: wherever the difference shows, it is not
    # named as the first one when earlier decisions were not kept.
    with pytest.warns(ReplayDivergenceWarning) as caught:
        run(echo_changed, replay=loaded)
    (warning,) = caught
    text = str(warning.message)
    located = re.search(r"diverged at decision (\d+) \(iteration \d+\)(.*?):", text)
    assert located is not None or re.search(r"ended after|more decisions", text), text
    if located is not None:
        assert located.group(2) == (
            f" or before it (the recording kept decisions {recording.first} on only)"
        ), text


def test_a_replay_runs_under_the_recorded_seed_and_perturbation(tmp_path):
    recorded, _ = run(echo, seed=7, perturb="io_order,chunking")
    recording = tracefile.record(recorded)
    with pytest.raises(ValueError, match=r"seed=8 was given with a recording of seed 7"):
        snakeloop.new_event_loop(seed=8, replay=recording)
    with pytest.raises(
        ValueError, match=r"perturb=io_order was given with .* perturb=io_order,chunking"
    ):
        snakeloop.new_event_loop(perturb="io_order", replay=recording)
    loop, _ = quiet_run(echo, seed="7", perturb="chunking,io_order", replay=recording)
    assert loop.schedule_fingerprint() == recording.fingerprint


def test_a_replay_where_strings_hash_otherwise_warns(tmp_path):
    recorded, _ = run(echo, seed=7)
    recording = tracefile.record(recorded)
    assert recording.hash_probe is not None
    other = dataclasses.replace(recording, hash_probe=recording.hash_probe ^ 1, hash_seed="12")
    with pytest.warns(
        ReplayEnvironmentWarning,
        match=r"replay of seed 7 may diverge: the recorded run had PYTHONHASHSEED=12 and this "
        r"process has \S+: set PYTHONHASHSEED=12 before Python starts",
    ):
        run(echo, replay=other)
    unset = dataclasses.replace(recording, hash_probe=recording.hash_probe ^ 1, hash_seed="random")
    with pytest.warns(ReplayEnvironmentWarning, match="had PYTHONHASHSEED unset"):
        run(echo, replay=unset)
    older = dataclasses.replace(recording, python="3.9.1")
    recorded_on = rf"recorded on {sys.implementation.name} 3\.9\.1, this is"
    with pytest.warns(ReplayEnvironmentWarning, match=recorded_on):
        run(echo, replay=older)
    # The same process hashes alike whatever the variable says: nothing to warn of.
    quiet_run(echo, replay=recording)


def test_a_replay_warning_names_the_line_that_made_the_loop():
    recorded, _ = run(echo, seed=7)
    other = dataclasses.replace(tracefile.record(recorded), python="3.9.1")
    for make in (snakeloop.Loop, snakeloop.new_event_loop):
        with pytest.warns(ReplayEnvironmentWarning) as caught:
            line = sys._getframe().f_lineno + 1
            loop = make(replay=other)
        try:
            loop.run_until_complete(echo())
        finally:
            loop.close()
        assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)], make


# -- python -m snakeloop --trace / --replay ------------------------------------------------


def _script(tmp_path: Path, *, changed: bool = False) -> Path:
    script = tmp_path / ("changed.py" if changed else "racy.py")
    # Two fds held open first: the race's sockets get other numbers, and every
    # choice names them otherwise.
    extra = "    held = socket.socketpair()\n" if changed else ""
    script.write_text(
        RACE_SOURCE + "\n\nasync def main():\n" + extra + "    balance = await bank()\n"
        "    assert balance == 40, f'overdrawn: {balance}'\n\n"
        "asyncio.run(main())\n"
    )
    return script


def _cli(*args: str, hash_seed: str | None = "0", cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ}
    env.pop("SNAKELOOP_SEED", None)
    env.pop("SNAKELOOP_TRACE", None)
    env.pop("PYTHONHASHSEED", None)
    if hash_seed is not None:
        env["PYTHONHASHSEED"] = hash_seed
    return subprocess.run(
        [sys.executable, "-m", "snakeloop", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=cwd,
    )


_LINE = re.compile(
    r"snakeloop: this run used seed=(\d+) perturb=\S+ fingerprint=(\w+); decisions=(\d+); "
    r"replay: (.*) \(PYTHONHASHSEED=(\S+)\)\n"
)


def _failing_seed_with_trace(tmp_path: Path, script: Path) -> tuple[int, Path, re.Match]:
    trace = tmp_path / "crash.json"
    for seed in range(40):
        first = _cli("--seed", str(seed), "--trace", str(trace), script.name, cwd=tmp_path)
        if first.returncode:
            line = _LINE.search(first.stderr)
            assert line is not None, first.stderr
            assert "AssertionError: overdrawn: -20" in first.stderr
            return seed, trace, line
    pytest.fail("no seed in 40 made the script fail")


def test_the_cli_writes_a_trace_and_its_crash_line_replays_it(tmp_path):
    script = _script(tmp_path)
    seed, trace, line = _failing_seed_with_trace(tmp_path, script)
    assert int(line.group(1)) == seed
    recording = tracefile.load(trace)
    assert (recording.seed, recording.fingerprint) == (seed, line.group(2))
    assert recording.count == int(line.group(3)) > 0
    assert recording.hash_seed == line.group(5) == "0"
    assert line.group(4) == f"python -m snakeloop --replay {trace} {script.name}"
    again = _cli("--replay", str(trace), script.name, cwd=tmp_path)
    assert again.returncode == 1
    assert "Warning" not in again.stderr, again.stderr
    replayed = _LINE.search(again.stderr)
    assert replayed is not None, again.stderr
    assert replayed.group(2) == line.group(2)  # the recorded fingerprint
    assert "AssertionError: overdrawn: -20" in again.stderr
    # The variable writes it too, for a run that passes as well.
    passing = tmp_path / "passing.json"
    env_run = subprocess.run(
        [sys.executable, "-m", "snakeloop", "--perturb", "none", script.name],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "SNAKELOOP_SEED": "5", "SNAKELOOP_TRACE": str(passing)},
    )
    assert env_run.returncode == 0, env_run.stderr
    assert tracefile.load(passing).seed == 5
    assert tracefile.load(passing).perturbation == {}


def test_a_cli_replay_says_what_differs(tmp_path):
    script = _script(tmp_path)
    seed, trace, line = _failing_seed_with_trace(tmp_path, script)
    other_hash = _cli("--replay", str(trace), script.name, hash_seed="1", cwd=tmp_path)
    assert (
        "ReplayEnvironmentWarning: snakeloop: replay of seed "
        f"{seed} may diverge: the recorded run had PYTHONHASHSEED=0 and this process has 1: "
        "set PYTHONHASHSEED=0 before Python starts"
    ) in other_hash.stderr
    unset = tmp_path / "unset.json"
    _cli("--seed", str(seed), "--trace", str(unset), script.name, hash_seed=None, cwd=tmp_path)
    assert tracefile.load(unset).hash_seed == "random"
    later = _cli("--replay", str(unset), script.name, hash_seed=None, cwd=tmp_path)
    assert "the recorded run had PYTHONHASHSEED unset" in later.stderr
    changed = _script(tmp_path, changed=True)
    diverged = _cli("--replay", str(trace), changed.name, cwd=tmp_path)
    assert re.search(
        rf"ReplayDivergenceWarning: snakeloop: replay of seed {seed} diverged at decision 1 "
        r"\(iteration \d+\): recorded '",
        diverged.stderr,
    ), diverged.stderr


def test_cli_trace_options_name_the_mistake(tmp_path):
    recorded, _ = run(echo, seed=3)
    trace = tmp_path / "three.json"
    tracefile.save(recorded, trace)
    (tmp_path / "bad.json").write_text("[]")
    for args, message in [
        (["--trace", "t.json", "s.py"], "--trace needs --seed"),
        (["--replay", "missing.json", "s.py"], "No such file"),
        (["--replay", "bad.json", "s.py"], "bad.json: not a snakeloop trace"),
        (["--seed", "4", "--replay", str(trace), "s.py"], "seed=4 was given with a recording of"),
        (["--replay"], "--replay needs a value"),
    ]:
        proc = _cli(*args, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)


def test_help_names_the_trace_options():
    proc = subprocess.run(
        [sys.executable, "-m", "snakeloop", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "--trace FILE" in proc.stdout and "--replay FILE" in proc.stdout
    assert "SNAKELOOP_TRACE" in proc.stdout


def test_recording_is_a_decision_list(tmp_path):
    recorded, _ = run(echo, seed=7)
    recording = tracefile.record(recorded)
    assert isinstance(recording, Recording)
    assert list(recording) == recorded.schedule_trace()


def test_a_recording_that_needs_virtual_time_is_refused_without_it():
    loop = snakeloop.new_event_loop(seed=1, perturb="io_latency", clock=snakeloop.VirtualClock())
    loop.close()
    recording = tracefile.record(loop)
    with pytest.raises(ValueError, match="^perturb 'io_latency' delays readiness"):
        snakeloop.new_event_loop(replay=recording)
