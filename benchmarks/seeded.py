"""A seeded snakeloop loop for ``--snakeloop benchmarks.seeded:new_seeded_loop``.

Measures what seeded scheduling (issue 12) costs when it is on: run it with
``--baseline HEAD`` to see the same tree unseeded in the same run.
"""

from __future__ import annotations

import snakeloop


def new_seeded_loop() -> snakeloop.Loop:
    """A loop with a fixed seed and the default perturbation."""
    return snakeloop.new_event_loop(seed=1)
