"""Trace files: a seeded run's decisions, saved as JSON, loaded, and replayed against.

A seeded loop (``snakeloop.seeding``) names its run by seed and perturbation
and checks it by fingerprint; a trace file adds what a replay needs to say
where a later run first chose differently: every decision the loop kept,
how many it made in all, and what the run depended on outside the loop
(the Python, snakeloop's version, the string-hash seed).

::

    tracefile.save(loop, "run.json")  # after the run (the loop may be closed)
    loop = snakeloop.new_event_loop(replay=tracefile.load("run.json"))

A loop keeps its last ``trace`` decisions (10 000 by default).  A file made
from a loop that dropped earlier ones says it is truncated: a replay
compares the decisions it kept by their numbers, and the dropped ones only
through the fingerprint when the run ends, so a difference among them is
reported as a difference, never located, and never taken for an exact
replay.

``PYTHONHASHSEED`` fixes the order of sets of strings; when it is unset,
each process draws its own.  The file records the variable and a hash of a
fixed string, and a replay in a process whose strings hash differently
warns ``ReplayEnvironmentWarning``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import sys
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .seeding import Decision, ReplayDivergenceWarning, Schedule

__all__ = [
    "FORMAT",
    "Recording",
    "ReplayDivergenceWarning",
    "ReplayEnvironmentWarning",
    "compare",
    "load",
    "record",
    "save",
]

#: The ``format`` field of a trace file, and its version.
FORMAT = "snakeloop-trace"
VERSION = 1

# Hashed to tell whether two processes hash strings alike (the same PYTHONHASHSEED).
_HASH_PROBE = "snakeloop: does this process hash strings as the recorded one did?"


class ReplayEnvironmentWarning(RuntimeWarning):
    """A replay runs where the recorded run's choices may not come out the same.

    A different string-hash seed (``PYTHONHASHSEED``), Python or snakeloop
    version; the replay goes on, and a divergence, if any, is reported.
    """


@dataclasses.dataclass(frozen=True)
class Recording:
    """A seeded run as a trace file holds it.

    Iterating it gives the decisions it kept, so that it goes wherever a
    decision list does (``replay=``); a loop given a ``Recording`` also
    takes its seed and perturbation, and checks its count and fingerprint.
    """

    seed: int
    perturbation: dict[str, object]
    fingerprint: str
    #: How many decisions the run made.
    count: int
    #: The decisions kept: the last ones, numbered from ``first``.
    decisions: tuple[Decision, ...]
    #: The number (from 1) of ``decisions[0]``; 1 when every decision was kept.
    first: int = 1
    #: ``PYTHONHASHSEED`` in the recording process, ``"random"`` when unset.
    hash_seed: str = "random"
    #: ``hash()`` of a fixed string there: equal where strings hash alike.
    hash_probe: int | None = None
    python: str = ""
    implementation: str = ""
    snakeloop: str = ""
    #: What ran: a test's node id, a script's command line; None if unknown.
    origin: str | None = None

    def __post_init__(self) -> None:
        if self.first < 1 or self.first + len(self.decisions) - 1 != self.count:
            raise ValueError(
                f"a recording of {self.count} decisions cannot keep {len(self.decisions)} "
                f"from decision {self.first} on"
            )

    @property
    def truncated(self) -> bool:
        """True when the loop dropped the run's first decisions before it was saved."""
        return self.first > 1

    def __iter__(self) -> Iterator[Decision]:
        return iter(self.decisions)

    def schedule(self, trace: int = 10_000) -> Schedule:
        """A ``Schedule`` with this run's seed and perturbation that replays it."""
        return Schedule(
            self.seed,
            self.perturbation,
            trace,
            self.decisions,
            expected_first=self.first,
            expected_count=self.count,
            expected_fingerprint=self.fingerprint,
        )

    def check_options(self, seed: int | None, perturbation: Mapping[str, object] | None) -> None:
        """Raise ``ValueError`` when a seed or perturbation given with this recording differ."""
        if seed is not None and seed != self.seed:
            raise ValueError(
                f"seed={seed} was given with a recording of seed {self.seed}: a replay runs "
                "under the recorded seed; give that one, or none"
            )
        if perturbation is not None and dict(perturbation) != self.perturbation:
            raise ValueError(
                f"perturb={_names(perturbation)} was given with a recording made with "
                f"perturb={_names(self.perturbation)}: a replay runs with the recorded "
                "perturbation; give that one, or none"
            )

    def environment_differences(self) -> list[str]:
        """What differs, in this process, from where the run was recorded, and how to fix it."""
        differences = []
        here = os.environ.get("PYTHONHASHSEED") or "random"
        if self.hash_probe is not None and hash(_HASH_PROBE) != self.hash_probe:
            if self.hash_seed == "random":
                differences.append(
                    "the recorded run had PYTHONHASHSEED unset, so its string hashes (and the "
                    "order of sets of strings) were its own and cannot be had again; record "
                    "with PYTHONHASHSEED set to a number to replay them"
                )
            else:
                differences.append(
                    f"the recorded run had PYTHONHASHSEED={self.hash_seed} and this process "
                    f"has {here}: set PYTHONHASHSEED={self.hash_seed} before Python starts"
                )
        python, implementation = platform.python_version(), sys.implementation.name
        if self.python and (
            _minor(self.python) != _minor(python) or self.implementation != implementation
        ):
            differences.append(
                f"the run was recorded on {self.implementation} {self.python}, this is "
                f"{implementation} {python}"
            )
        if self.snakeloop and self.snakeloop != _snakeloop_version():
            differences.append(
                f"the run was recorded with snakeloop {self.snakeloop}, this is "
                f"{_snakeloop_version()}"
            )
        return differences

    def warn_if_environment_differs(self) -> None:
        """Warn ``ReplayEnvironmentWarning`` when ``environment_differences()`` finds any,
        naming the first line outside snakeloop (the user's ``Loop(replay=...)`` or
        ``new_event_loop(replay=...)``, whichever way the loop was made)."""
        differences = self.environment_differences()
        if differences:
            warnings.warn(
                f"snakeloop: replay of seed {self.seed} may diverge: " + "; ".join(differences),
                ReplayEnvironmentWarning,
                stacklevel=_level_outside_package(),
            )

    def to_json(self) -> dict[str, Any]:
        """The file's content."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "seed": str(self.seed),  # decimal text: a 64-bit seed, whatever reads the file
            "perturbation": self.perturbation,
            "fingerprint": self.fingerprint,
            "decisions": self.count,
            "first": self.first,
            "truncated": self.truncated,
            "pythonhashseed": self.hash_seed,
            "hash_probe": self.hash_probe,
            "python": self.python,
            "implementation": self.implementation,
            "snakeloop": self.snakeloop,
            "origin": self.origin,
            "trace": [list(decision) for decision in self.decisions],
        }

    @classmethod
    def from_json(cls, data: Any) -> Recording:
        """A recording from a file's content; ``ValueError`` says what is wrong with it."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a snakeloop trace (its 'format' is not {FORMAT!r})")
        if data.get("version") != VERSION:
            raise ValueError(
                f"a snakeloop trace of version {data.get('version')!r}; this snakeloop reads "
                f"version {VERSION}"
            )
        try:
            decisions = tuple(
                Decision(_int(iteration), _str(kind), _str(detail))
                for iteration, kind, detail in data["trace"]
            )
            perturbation = data["perturbation"]
            if not isinstance(perturbation, dict):
                raise TypeError("perturbation is not an object")
            probe = data.get("hash_probe")
            recording = cls(
                seed=int(_str(data["seed"])),
                # JSON has no tuples: an option given as a tuple comes back as a list.
                perturbation={
                    _str(name): tuple(option) if isinstance(option, list) else option
                    for name, option in perturbation.items()
                },
                fingerprint=_str(data["fingerprint"]),
                count=_int(data["decisions"]),
                decisions=decisions,
                first=_int(data["first"]),
                hash_seed=_str(data.get("pythonhashseed", "random")),
                hash_probe=None if probe is None else _int(probe),
                python=_str(data.get("python", "")),
                implementation=_str(data.get("implementation", "")),
                snakeloop=_str(data.get("snakeloop", "")),
                origin=None if data.get("origin") is None else _str(data["origin"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a malformed snakeloop trace: {exc!r}") from None
        if bool(data.get("truncated")) != recording.truncated:
            raise ValueError("a malformed snakeloop trace: 'truncated' contradicts 'first'")
        return recording


def record(loop: Any, *, origin: str | None = None) -> Recording:
    """The recording of a seeded ``loop``'s run so far (open or closed)."""
    if loop.seed is None:
        raise ValueError(f"{loop!r} is not seeded: it has no schedule to record")
    trace = loop.schedule_trace()
    return Recording(
        seed=loop.seed,
        perturbation=loop.perturbation,
        fingerprint=loop.schedule_fingerprint(),
        count=trace.total,
        decisions=tuple(trace),
        first=trace.first,
        hash_seed=os.environ.get("PYTHONHASHSEED") or "random",
        hash_probe=hash(_HASH_PROBE),
        python=platform.python_version(),
        implementation=sys.implementation.name,
        snakeloop=_snakeloop_version(),
        origin=origin,
    )


def save(run: Any, path: str | os.PathLike[str], *, origin: str | None = None) -> Recording:
    """Write the trace file of ``run`` (a seeded loop or a ``Recording``) to ``path``.

    The file is written whole or not at all (a sibling file renamed over
    ``path``).  Returns the recording written.
    """
    recording = run if isinstance(run, Recording) else record(run, origin=origin)
    target = Path(path)
    text = _dumps(recording.to_json())
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        partial.write_text(text + "\n", encoding="utf-8")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return recording


def load(path: str | os.PathLike[str]) -> Recording:
    """The recording in the trace file at ``path``; ``ValueError`` when it is not one."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        return Recording.from_json(json.loads(text))
    except ValueError as exc:
        raise ValueError(f"{os.fspath(path)}: {exc}") from None


def compare(recorded: Recording, observed: Recording) -> str | None:
    """None when ``observed`` replayed ``recorded`` exactly, else the first difference found.

    Exact means equal fingerprints: every decision, kept or not, was the
    same.  A difference is located at the first decision both kept that
    differs; when the recordings kept only their last decisions, an earlier
    one may differ already, and the text says so.
    """
    kept_from = max(recorded.first, observed.first)
    last = min(recorded.count, observed.count)
    for number in range(kept_from, last + 1):
        was = recorded.decisions[number - recorded.first]
        now = observed.decisions[number - observed.first]
        if was != now:
            return Schedule.divergence_text(
                recorded.seed, Schedule.mismatch(number, was, now, kept_from=kept_from)
            )
    if observed.count != recorded.count:
        return Schedule.divergence_text(
            recorded.seed,
            f"made {observed.count} decisions; the recorded run made {recorded.count}",
        )
    if observed.fingerprint != recorded.fingerprint:
        return Schedule.divergence_text(
            recorded.seed, Schedule.fingerprint_mismatch(kept_from, recorded.count)
        )
    return None


def _dumps(data: dict[str, Any]) -> str:
    """JSON with one decision a line: a file a person can read and diff."""
    head = dict(data)
    trace = head.pop("trace")
    text = json.dumps(head, indent=1)[:-2]  # without the closing "\n}"
    lines = ",\n".join(f"  {json.dumps(decision)}" for decision in trace)
    return f'{text},\n "trace": [\n{lines}\n ]\n}}' if trace else f'{text},\n "trace": []\n}}'


def _snakeloop_version() -> str:
    from . import __version__

    return __version__


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _names(perturbation: Mapping[str, object]) -> str:
    return (
        ",".join(
            name if option is True else f"{name}={option!r}"
            for name, option in perturbation.items()
        )
        or "none"
    )


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not a whole number")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not text")
    return value


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _level_outside_package() -> int:
    """The ``stacklevel`` that makes a warning raised by this function's caller name the
    first frame whose code is not snakeloop's."""
    level = 1
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level
