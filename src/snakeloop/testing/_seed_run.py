"""``SeedRun``: the seed of one run of a test, for a loop the test makes itself.

The pytest plugin's ``snakeloop_seed`` fixture gives one to a seeded test
(None to a test that is not seeded).  A sync test, or a loop factory of
its own, makes its loop with ``seed_run.loop_options()`` (or
``seed_run.new_event_loop()``, which also lets the plugin's failure
section show that loop's fingerprint and last decisions).  No pytest here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import snakeloop

__all__ = ["SeedRun"]


@dataclasses.dataclass(frozen=True)
class SeedRun:
    """Run ``index`` (from 0) of ``runs`` of a seeded test, under ``seed``."""

    seed: int
    # What the run's loop perturbs, as new_event_loop(perturb=) takes it (None: the default).
    perturb: Any = None
    index: int = 0
    runs: int = 1
    # The last loop new_event_loop() made, for the failure report: a one-slot box, since
    # the object itself is frozen.
    _made: list[Any] = dataclasses.field(
        default_factory=list, init=False, repr=False, compare=False
    )

    def loop_options(self) -> dict[str, Any]:
        """The keyword options of ``snakeloop.new_event_loop`` that give this run's schedule."""
        return {"seed": self.seed, "perturb": self.perturb}

    def new_event_loop(self, **options: Any) -> snakeloop.Loop:
        """A new snakeloop loop under this run's seed; ``options`` are new_event_loop's others."""
        loop = snakeloop.new_event_loop(**self.loop_options(), **options)
        self._made[:] = [loop]
        return loop

    @property
    def loop(self) -> snakeloop.Loop | None:
        """The last loop ``new_event_loop()`` made for this run (open or closed), if any."""
        return self._made[0] if self._made else None
