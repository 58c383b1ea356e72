"""``--snakeloop-seeds=K``: each seeded test becomes K items, one per seed, at collection.

Run i of a test is the item ``BASE[...-seed{i}]``, where BASE is the test's
node id without the run, and runs under ``derive_seed(root, BASE, i)``: run
0 has the seed ``--snakeloop-seed`` alone gives the test, and adding a test
moves no other test's seed.  Being separate items, the runs get fresh
fixtures and a fresh loop each, whichever plugin runs them; a failing run is
replayed by ``--snakeloop-replay=BASE@SEED``.  The runs are a direct
parametrization of a name no test function takes, so pytest passes it to
no function; the name is added to the test's fixture closure, as pytest
requires of a parametrized name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

__all__ = ["SEED_RUN_ARG", "SeedFailures", "parametrize_runs", "run_id", "seed_run_of"]

SEED_RUN_ARG = "_snakeloop_seed_run"


def run_id(index: int) -> str:
    """The part of a node id that names run ``index``."""
    return f"seed{index}"


def parametrize_runs(metafunc: pytest.Metafunc, runs: int) -> None:
    """Make ``runs`` items of the test, after its other parametrizations (their ids first)."""
    if SEED_RUN_ARG not in metafunc.fixturenames:
        metafunc.fixturenames.append(SEED_RUN_ARG)
    metafunc.parametrize(SEED_RUN_ARG, range(runs), ids=[run_id(i) for i in range(runs)])


def seed_run_of(node: Any) -> tuple[str, int] | None:
    """(BASE node id, run index) of an item made by ``parametrize_runs``; else None."""
    callspec = getattr(node, "callspec", None)
    if callspec is None or SEED_RUN_ARG not in callspec.params:
        return None
    index = callspec.params[SEED_RUN_ARG]
    nodeid = node.nodeid
    own = run_id(index)
    if nodeid.endswith(f"[{own}]"):
        return nodeid[: -len(own) - 2], index
    if nodeid.endswith(f"-{own}]"):
        return nodeid[: -len(own) - 2] + "]", index
    # Another plugin parametrized the test after this one, or pytest renamed a duplicate id:
    # the base cannot be told apart, and a seed derived from a guess would not replay.
    raise pytest.UsageError(
        f"snakeloop: --snakeloop-seeds cannot tell which run {nodeid} is (its id does not end "
        f"with {own!r}); run it without --snakeloop-seeds"
    )


@dataclasses.dataclass
class SeedFailures:
    """The failing runs of one test under ``--snakeloop-seeds``, for the terminal summary."""

    runs: int
    # (run index, seed) of each failing run, in the order they failed.
    failed: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    replay: str = ""

    def line(self, base: str) -> str:
        seeds = ", ".join(str(seed) for _, seed in self.failed)
        return f"{base} failed under {len(self.failed)} of {self.runs} seeds: {seeds} (first shown)"
