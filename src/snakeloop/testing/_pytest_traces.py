"""Trace files in the pytest plugin: written for failed seeded tests, replayed against.

``--snakeloop-trace=DIR`` [``SNAKELOOP_TRACE_DIR``] writes the trace file
(``snakeloop.tracefile``) of each seeded test run that fails into DIR, one
file per run, named from the node id and the seed.  The failure section
names the file, and its replay command adds
``--snakeloop-replay-trace=FILE`` [``SNAKELOOP_REPLAY_TRACE``], which runs
the test under the file's seed and perturbation and, when the test's call
is over, compares its choices with the recording: the section then says
whether the replay was exact (the recorded fingerprint) or where it first
diverged, and what differs from the recording process (``PYTHONHASHSEED``,
the Python).

The comparison is made on the loop's record after the call, not while it
runs, so it works whichever plugin made the loop; it reads what the loop
kept (its last 10 000 decisions by default) and, beyond that, the
fingerprint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from pathlib import Path
from typing import Any

import pytest

from ..perturbation import IMPLEMENTED
from ..seeding import parse_perturb
from ..tracefile import Recording, compare, load, record, save

__all__ = ["TRACES", "SessionTraces", "session_traces", "trace_file_name"]


@dataclasses.dataclass(frozen=True)
class SessionTraces:
    """The session's trace options."""

    # Where failed seeded runs' trace files go, and the path as the user gave it.
    directory: Path | None = None
    shown_directory: str | None = None
    # The recording --snakeloop-replay-trace replays, its path, and the test it is of.
    recording: Recording | None = None
    recording_path: str | None = None
    target: str | None = None

    def write(self, loop: Any, nodeid: str) -> str | None:
        """Write the trace file of ``loop``'s run of ``nodeid``: its path as shown, or None."""
        if self.directory is None or self.shown_directory is None:
            return None
        name = trace_file_name(nodeid, loop.seed)
        self.directory.mkdir(parents=True, exist_ok=True)
        save(loop, self.directory / name, origin=nodeid)
        return os.path.join(self.shown_directory, name)

    def verdict(self, loop: Any, nodeid: str) -> list[str]:
        """Lines saying how ``loop``'s run of ``nodeid`` compares with the recording."""
        recording = self.recording
        if recording is None or nodeid != self.target:
            return []
        observed = record(loop)
        if observed.seed != recording.seed:
            return [
                f"not replayed against {self.recording_path}: this test ran on a loop of seed "
                f"{observed.seed} (shared with other tests), the recording is of seed "
                f"{recording.seed}"
            ]
        divergence = compare(recording, observed)
        if divergence is None:
            lines = [
                f"replayed against {self.recording_path}: exact (the recorded fingerprint, "
                f"{recording.count} decisions)"
            ]
        else:
            lines = [f"replayed against {self.recording_path}: diverged", divergence]
        differences = recording.environment_differences()
        if differences:
            lines.append("the replay may diverge: " + "; ".join(differences))
        return lines


TRACES = pytest.StashKey[SessionTraces]()


def session_traces(
    here: Path, directory: str | None, replay_trace: str | None, found: dict[str, Any]
) -> SessionTraces:
    """The trace options; a recording to replay sets ``found``'s replay and perturb.

    ``here``: the directory pytest was started in, which relative paths are
    relative to.  ``ValueError`` says what is wrong.
    """
    traces = SessionTraces()
    if directory is not None:
        traces = dataclasses.replace(traces, directory=here / directory, shown_directory=directory)
    if replay_trace is None:
        return traces
    try:
        recording = load(here / replay_trace)
    except OSError as exc:
        raise ValueError(f"cannot read {replay_trace}: {exc.strerror or exc}") from None
    nodeid, seed = found.get("replay") or (None, None)
    perturb = found.get("perturb")
    recording.check_options(
        seed, None if perturb is None else parse_perturb(perturb, available=IMPLEMENTED)
    )
    target = nodeid or recording.origin
    if target is None:
        raise ValueError(
            f"{replay_trace} does not say which test it recorded; give it with "
            f"--snakeloop-replay=NODEID@{recording.seed}"
        )
    found["replay"] = (target, recording.seed)
    found["perturb"] = recording.perturbation
    return dataclasses.replace(
        traces, recording=recording, recording_path=replay_trace, target=target
    )


def trace_file_name(nodeid: str, seed: int) -> str:
    """A file name for the run of ``nodeid`` under ``seed``, safe on any filesystem.

    The node id's letters and digits, shortened, and a digest of the whole
    node id, so that ids that differ only in what is dropped stay apart.
    """
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_.")[:100]
    digest = hashlib.blake2b(nodeid.encode(), digest_size=4).hexdigest()
    return f"{readable}-{digest}-{seed}.json"
