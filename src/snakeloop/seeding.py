"""Seeds, perturbation choices and the schedule record of a seeded loop.

A seeded loop (issue 12, ``../shared/determinism.md`` section 3) makes its
scheduling choices, where asyncio leaves the order open, from random streams
drawn from one seed, and records each choice, so that a run can be named by
its seed and checked by its fingerprint.  This module holds what every
dimension shares; the dimensions themselves live where they act.

- A seed is an unsigned 64-bit integer, written in decimal.  A test's seed is
  derived from the root seed and the test's node id (BLAKE2b), so adding a
  test moves no other test's seed.
- Each dimension draws from its own ``random.Random(f"{seed}:{dimension}")``:
  turning one dimension on or off leaves the others' choices as they were.
- The fingerprint is a running BLAKE2b over every recorded decision; the
  trace keeps the last ``trace`` decisions.  Decisions are recorded as text
  without addresses, so two processes that made the same choices agree.
"""

from __future__ import annotations

import collections
import hashlib
import random
import secrets
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = [
    "DEFAULT_DIMENSIONS",
    "DIMENSIONS",
    "Decision",
    "ReplayDivergenceWarning",
    "Schedule",
    "derive_seed",
    "parse_perturb",
    "parse_seed",
]

SEED_LIMIT = 2**64

#: Every dimension of the design, in the order the fingerprint lists them.
DIMENSIONS = (
    "io_order",
    "io_delay",
    "timer_ties",
    "chunking",
    "threadsafe",
    "io_latency",
    "timer_delay",
    "chunking_writes",
    "signals",
    "epoch",
)
#: What ``perturb="default"`` (and a bare ``seed=``) turns on.
DEFAULT_DIMENSIONS = ("io_order", "io_delay", "timer_ties", "chunking", "threadsafe")


class Decision(NamedTuple):
    """One scheduling choice: the loop iteration, the dimension and what was chosen."""

    iteration: int
    kind: str
    detail: str


class ReplayDivergenceWarning(RuntimeWarning):
    """A replay made a choice the recorded run did not: what follows is not a replay."""


#: Where ``seed="draw"`` takes its seeds from.  snakeloop's Hypothesis hook
#: registers it (``hypothesis.register_random``), so that inside ``@given``
#: Hypothesis seeds it for each example and replays a failing one's seeds.
ROOT_RANDOM = random.Random()


def parse_seed(value: object) -> int:
    """A seed from an int, a decimal string, ``"random"`` (a fresh one) or ``"draw"``.

    ``"draw"`` takes the next seed from ``ROOT_RANDOM``: under Hypothesis,
    the same example draws the same seeds.
    """
    if isinstance(value, str):
        text = value.strip()
        if text == "random":
            return secrets.randbits(64)
        if text == "draw":
            return ROOT_RANDOM.getrandbits(64)
        if not text.isdecimal():
            raise ValueError(
                f"a seed is a whole number from 0 to 2**64-1, 'random' or 'draw', got {value!r}"
            )
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a seed is a whole number, 'random' or 'draw', not {type(value).__name__}")
    if not 0 <= value < SEED_LIMIT:
        raise ValueError(f"a seed is a whole number from 0 to 2**64-1, got {value}")
    return value


def derive_seed(root: int, name: str, index: int = 0) -> int:
    """The seed of ``name`` (a test's node id) under ``root``; ``index`` numbers repeats."""
    digest = hashlib.blake2b(f"{root}\0{name}\0{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def parse_perturb(
    spec: str | Iterable[str] | Mapping[str, object] | None, *, available: Iterable[str]
) -> dict[str, object]:
    """The dimensions ``spec`` turns on, each with its option (True when it has none).

    ``spec`` is ``"none"``, ``"default"``, ``"all"``, names separated by
    commas, an iterable of names, or a mapping of name to option.  Only
    dimensions in ``available`` (the ones this build implements) may be
    named; ``"default"`` and ``"all"`` take what is available of theirs.
    """
    usable = tuple(available)
    if spec is None or spec == "default":
        return {name: True for name in DEFAULT_DIMENSIONS if name in usable}
    if spec == "none":
        return {}
    if spec == "all":
        return {name: True for name in DIMENSIONS if name in usable}
    if isinstance(spec, str):
        chosen: dict[str, object] = {name.strip(): True for name in spec.split(",") if name.strip()}
    elif isinstance(spec, Mapping):
        chosen = dict(spec)
    else:
        chosen = dict.fromkeys(spec, True)
    for name in chosen:
        if name not in DIMENSIONS:
            raise ValueError(
                f"unknown perturbation {name!r}: choose from {', '.join(DIMENSIONS)}, "
                "or 'none', 'default', 'all'"
            )
        if name not in usable:
            raise ValueError(
                f"perturbation {name!r} is not available yet; this build has "
                f"{', '.join(usable) or 'none'}"
            )
    if "io_latency" in chosen:
        chosen["io_latency"] = _latency_range(chosen["io_latency"])
    return {name: chosen[name] for name in DIMENSIONS if name in chosen}


#: The virtual seconds ``io_latency`` draws from when no range is given.
DEFAULT_IO_LATENCY = (0.0, 0.05)


def _latency_range(option: object) -> tuple[float, float]:
    """``io_latency``'s option: ``(lo, hi)`` virtual seconds, or True for the default."""
    if option is True:
        return DEFAULT_IO_LATENCY
    try:
        pair: Any = option
        low, high = pair
        lo, hi = float(low), float(high)
    except (TypeError, ValueError):
        raise ValueError(
            f"io_latency takes (lo, hi), the least and most virtual seconds, got {option!r}"
        ) from None
    if not 0 <= lo <= hi < float("inf"):
        raise ValueError(f"io_latency needs 0 <= lo <= hi (finite seconds), got ({lo}, {hi})")
    return lo, hi


class Schedule:
    """The seed, the dimensions' random streams and the record of what they chose."""

    __slots__ = (
        "seed",
        "perturbation",
        "_streams",
        "_hash",
        "_trace",
        "_count",
        "_expected",
        "divergence",
    )

    def __init__(
        self,
        seed: int,
        perturbation: Mapping[str, object],
        trace: int = 10_000,
        expected: Sequence[Decision] | None = None,
    ) -> None:
        """``expected``: the whole trace of a recorded run, to replay it decision by decision."""
        self.seed = seed
        self._expected = None if expected is None else [Decision(*d) for d in expected]
        #: The first difference from the recorded run, once there is one.
        self.divergence: str | None = None
        self.perturbation = dict(perturbation)
        self._streams: dict[str, random.Random] = {}
        self._hash = hashlib.blake2b(digest_size=16)
        self._hash.update(f"seed={seed} perturb={','.join(self.perturbation)}".encode())
        self._trace: collections.deque[Decision] = collections.deque(maxlen=trace)
        self._count = 0

    def stream(self, dimension: str) -> random.Random:
        """The random stream of ``dimension``: its own, so the others' choices do not move."""
        stream = self._streams.get(dimension)
        if stream is None:
            stream = self._streams[dimension] = random.Random(f"{self.seed}:{dimension}")
        return stream

    def record(self, iteration: int, kind: str, detail: str) -> None:
        """Add a decision to the fingerprint and the trace."""
        self._count += 1
        self._hash.update(f"\n{iteration} {kind} {detail}".encode())
        decision = Decision(iteration, kind, detail)
        self._trace.append(decision)
        expected = self._expected
        if expected is not None and self.divergence is None:
            index = self._count - 1
            if index >= len(expected):
                self._diverged(f"the recorded run made {len(expected)} decisions, this one more")
            elif expected[index] != decision:
                recorded = expected[index]
                self._diverged(
                    f"diverged at decision {self._count} (iteration {iteration}): recorded "
                    f"'{recorded.kind} {recorded.detail}' at iteration {recorded.iteration}, "
                    f"observed '{kind} {detail}'"
                )

    def finish(self) -> None:
        """The run is over: a replay that made fewer decisions than the recording diverged."""
        expected = self._expected
        if expected is not None and self.divergence is None and self._count < len(expected):
            self._diverged(
                f"ended after {self._count} decisions; the recorded run made {len(expected)}"
            )

    def _diverged(self, what: str) -> None:
        self.divergence = (
            f"snakeloop: replay of seed {self.seed} {what}. The run depends on timing outside "
            "the loop (a peer, a thread or a process it does not control); results after this "
            "point are not a replay."
        )
        warnings.warn(self.divergence, ReplayDivergenceWarning, stacklevel=4)

    @property
    def decisions(self) -> int:
        """How many decisions were recorded."""
        return self._count

    def fingerprint(self) -> str:
        """A hex digest of every decision so far: equal runs have equal fingerprints."""
        return self._hash.hexdigest()

    def trace(self) -> list[Decision]:
        """The last decisions, oldest first."""
        return list(self._trace)
