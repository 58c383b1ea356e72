"""Hypothesis's hook into snakeloop (the ``hypothesis`` entry point).

Hypothesis calls ``_hypothesis_setup_hook`` when it starts; registering
``seeding.ROOT_RANDOM`` makes Hypothesis seed it for each example, so loops
made with ``seed="draw"`` inside ``@given`` get seeds that Hypothesis can
reproduce when it replays a failing example from its database.
"""

from __future__ import annotations

from ..seeding import ROOT_RANDOM

__all__ = ["_hypothesis_setup_hook"]


def _hypothesis_setup_hook() -> None:
    import hypothesis  # only when Hypothesis itself calls this

    hypothesis.register_random(ROOT_RANDOM)
