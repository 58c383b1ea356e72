"""The ``snakeloop`` report section of a seeded test that failed: its seed and how to replay it.

Kept free of pytest: it reads a seeded loop (open or closed) and the
test's node id, and returns text.
"""

from __future__ import annotations

import shlex
from typing import Any

__all__ = ["LAST_DECISIONS", "replay_command", "seed_section", "unreached_seed_section"]

#: How many of the loop's last decisions the section lists.
LAST_DECISIONS = 10
#: How many decisions a loop's trace keeps by default.
TRACE_LENGTH = 10_000


def seed_section(
    loop: Any,
    nodeid: str,
    *,
    extra_args: tuple[str, ...] = (),
    run: tuple[int, int] | None = None,
    shared_with: str | None = None,
) -> str:
    """What a seeded ``loop`` chose, for the failed test ``nodeid``.

    ``extra_args``: session options the replay needs besides the seed.
    ``run``: (index, runs) when the test is one of the runs of ``--snakeloop-seeds``,
    whose ``nodeid`` is then the one of the test it repeats.
    ``shared_with``: the test the loop was made for, when it is another one.
    """
    seed = loop.seed
    perturbation = ",".join(loop.perturbation) or "none"
    trace = loop.schedule_trace()
    # The loop says only its last decisions (the trace's length, TRACE_LENGTH by
    # default): a full trace means at least that many.
    count = f">={len(trace)}" if len(trace) >= TRACE_LENGTH else f"={len(trace)}"
    lines = [
        f"seed={seed}  perturb={perturbation}",
        f"fingerprint={loop.schedule_fingerprint()}  decisions{count}",
    ]
    if run is not None and run[1] > 1:
        lines.append(f"failed on run {run[0] + 1} of {run[1]}")
    if shared_with is not None:
        lines.append(f"this loop was made for {shared_with}, which other tests share")
        # The seed is that test's: replaying it replays the loop, not this run.
        nodeid, run = shared_with, None
    lines.append("replay:  " + replay_command(nodeid, seed, extra_args, run=run))
    if trace:
        lines.append("last decisions:")
        lines.extend(f"  it={d.iteration} {d.kind} {d.detail}" for d in trace[-LAST_DECISIONS:])
    return "\n".join(lines)


def replay_command(
    nodeid: str, seed: int, extra_args: tuple[str, ...] = (), *, run: tuple[int, int] | None
) -> str:
    """The pytest command that runs ``nodeid`` under exactly ``seed``.

    A run of ``--snakeloop-seeds`` names its test in the option too, so that the
    command replays that test alone whatever else the session selects.
    """
    if run is not None and run[1] > 1:
        option = "--snakeloop-replay=" + _quote(f"{nodeid}@{seed}")
    else:
        option = f"--snakeloop-replay={seed}"
    return " ".join(["pytest", _quote(nodeid), option, *(_quote(a) for a in extra_args)])


def unreached_seed_section(
    seed: int,
    perturbation: str,
    nodeid: str,
    *,
    extra_args: tuple[str, ...] = (),
    run: tuple[int, int] | None = None,
) -> str:
    """The section of a failed test that made its seeded loop where the plugin cannot see it."""
    lines = [f"seed={seed}  perturb={perturbation}"]
    if run is not None and run[1] > 1:
        lines.append(f"failed on run {run[0] + 1} of {run[1]}")
    lines.append(
        "fingerprint and last decisions unknown: the test made its loop itself "
        "(snakeloop_seed.new_event_loop() makes one the report can read)"
    )
    lines.append("replay:  " + replay_command(nodeid, seed, extra_args, run=run))
    return "\n".join(lines)


def _quote(part: str) -> str:
    # Node ids always quoted (their brackets and colons), as the copy-paste line shows.
    if "::" in part or "[" in part:
        return "'" + part.replace("'", "'\\''") + "'"
    return shlex.quote(part)
