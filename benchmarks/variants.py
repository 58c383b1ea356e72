"""snakeloop variants for ``python3 -m benchmarks --snakeloop benchmarks.variants:NAME``.

Run one with ``--baseline HEAD`` to compare it with the same tree's default
loop in one run (the baseline column is then the default loop):

- ``metrics_off``: ``metrics=False``, what the always-on metrics cost;
- ``metrics_exact``: ``metrics="exact"``, every callback timed.
"""

from __future__ import annotations

import snakeloop


def metrics_off() -> snakeloop.Loop:
    return snakeloop.new_event_loop(metrics=False)


def metrics_exact() -> snakeloop.Loop:
    return snakeloop.new_event_loop(metrics="exact")
