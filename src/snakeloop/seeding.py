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
    "Trace",
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


class Trace(list[Decision]):
    """The last decisions of a run, oldest first, and how many the run made in all.

    A loop keeps its last ``trace`` decisions: ``total`` can be more than
    ``len()``, and then the first decisions are not here.
    """

    __slots__ = ("total",)

    def __init__(self, decisions: Iterable[Decision] = (), total: int | None = None) -> None:
        super().__init__(decisions)
        #: How many decisions the run made, kept here or not.
        self.total: int = len(self) if total is None else total

    @property
    def first(self) -> int:
        """The number (from 1) of the first decision kept here."""
        return self.total - len(self) + 1

    @property
    def truncated(self) -> bool:
        """True when the run's first decisions were dropped."""
        return self.total > len(self)


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
    chosen: dict[str, object]
    if spec is None or spec == "default":
        chosen = {name: True for name in DEFAULT_DIMENSIONS if name in usable}
    elif spec == "none":
        chosen = {}
    elif spec == "all":
        chosen = {name: True for name in DIMENSIONS if name in usable}
    elif isinstance(spec, str):
        chosen = {name.strip(): True for name in spec.split(",") if name.strip()}
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
    """The seed, the dimensions' random streams and the record of what they chose.

    Given ``expected`` (a recorded run's decisions), it checks each decision
    against the recording as it is made, and warns ``ReplayDivergenceWarning``
    once, at the first difference.  A recording that kept only its last
    decisions (``expected_first`` > 1) is checked on what it kept; the
    decisions it dropped are checked through its fingerprint when the run
    ends (``finish``), and a divergence among them is reported as such,
    never as a decision it cannot name.
    """

    __slots__ = (
        "seed",
        "perturbation",
        "_streams",
        "_hash",
        "_trace",
        "_count",
        "_expected",
        "_expected_first",
        "_expected_count",
        "_expected_fingerprint",
        "divergence",
    )

    def __init__(
        self,
        seed: int,
        perturbation: Mapping[str, object],
        trace: int = 10_000,
        expected: Sequence[Decision] | None = None,
        *,
        expected_first: int = 1,
        expected_count: int | None = None,
        expected_fingerprint: str | None = None,
    ) -> None:
        """``expected``: a recorded run's decisions, to replay it decision by decision.

        ``expected_first``: the number (from 1) of ``expected[0]`` when the
        recording kept only its last decisions; ``expected_count``: how many
        decisions the recorded run made (``expected`` reaches its last one);
        ``expected_fingerprint``: the recorded run's fingerprint, compared when
        the run ends.
        """
        self.seed = seed
        self._expected = None if expected is None else [Decision(*d) for d in expected]
        self._expected_first = expected_first
        # The number of the recording's last decision (0 when nothing is replayed).
        self._expected_count = (
            0 if self._expected is None else len(self._expected) + expected_first - 1
        )
        if expected_count is not None and expected_count != self._expected_count:
            raise ValueError(
                f"a recording of {expected_count} decisions that keeps decisions "
                f"{expected_first} to {self._expected_count} is inconsistent"
            )
        self._expected_fingerprint = expected_fingerprint
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
            count = self._count
            if count > self._expected_count:
                self._diverged(
                    f"made more decisions than the {self._expected_count} the recorded run made"
                )
            elif count >= self._expected_first:
                recorded = expected[count - self._expected_first]
                if recorded != decision:
                    self._diverged(
                        self.mismatch(count, recorded, decision, kept_from=self._expected_first)
                    )

    @staticmethod
    def mismatch(number: int, recorded: Decision, observed: Decision, *, kept_from: int) -> str:
        """What differs at decision ``number``; ``kept_from``: the first one compared."""
        where = f"diverged at decision {number} (iteration {observed.iteration})"
        if kept_from > 1:
            # The recording dropped its first decisions: an earlier one may differ already.
            where = (
                f"diverged at decision {number} (iteration {observed.iteration}) or before it "
                f"(the recording kept decisions {kept_from} on only)"
            )
        return (
            f"{where}: recorded '{recorded.kind} {recorded.detail}' at iteration "
            f"{recorded.iteration}, observed '{observed.kind} {observed.detail}'"
        )

    @staticmethod
    def fingerprint_mismatch(first: int, last: int) -> str:
        """What a replay that made decisions ``first`` to ``last`` alike but ends unlike did."""
        if first > 1:
            return (
                f"made the same decisions {first} to {last} as the recording, but its "
                f"fingerprint differs: one of the first {first - 1} decisions, which the "
                "recording did not keep, differs"
            )
        return "made every recorded decision, but its fingerprint differs from the recorded one"

    def finish(self) -> None:
        """The run is over: compare how many decisions it made, and its fingerprint."""
        if self._expected is None or self.divergence is not None:
            return
        recorded = self._expected_count
        if self._count < recorded:
            self._diverged(f"ended after {self._count} decisions; the recorded run made {recorded}")
        elif (
            self._expected_fingerprint is not None
            and self._expected_fingerprint != self.fingerprint()
        ):
            self._diverged(self.fingerprint_mismatch(self._expected_first, recorded))

    def _diverged(self, what: str) -> None:
        self.divergence = self.divergence_text(self.seed, what)
        warnings.warn(self.divergence, ReplayDivergenceWarning, stacklevel=4)

    @staticmethod
    def divergence_text(seed: int, what: str) -> str:
        """The report of a replay of ``seed`` that ``what`` (it diverged)."""
        return (
            f"snakeloop: replay of seed {seed} {what}. The run depends on timing outside "
            "the loop (a peer, a thread or a process it does not control); results after this "
            "point are not a replay."
        )

    @property
    def decisions(self) -> int:
        """How many decisions were recorded."""
        return self._count

    def fingerprint(self) -> str:
        """A hex digest of every decision so far: equal runs have equal fingerprints."""
        return self._hash.hexdigest()

    def trace(self) -> Trace:
        """The last decisions, oldest first, with the count of all (``Trace.total``)."""
        return Trace(self._trace, self._count)
