"""Finding a seed under which an async function fails, and running it again under one.

Each run is on a fresh seeded loop, closed after it, so that runs do not
share state through the loop.  ``snakeloop.Loop(...)`` is what
``snakeloop.new_event_loop(...)`` makes.  No pytest here: usable from scripts and any
test runner.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

import snakeloop
from snakeloop.tracefile import Recording, load

__all__ = ["find_seed", "replay"]

T = TypeVar("T")


def replay(
    async_fn: Callable[[], Coroutine[Any, Any, T]],
    seed: int | str | None = None,
    trace: Recording | str | os.PathLike[str] | None = None,
    **loop_options: Any,
) -> tuple[T, str]:
    """Run ``async_fn()`` on a loop seeded with ``seed``: its result and the fingerprint.

    ``trace``: a recorded run (``snakeloop.tracefile.load()``) or its file's
    path; the loop takes the recording's seed and perturbation (a ``seed``
    given too must be the same), and checks each choice against it: the
    first that differs, or a run that ends with another fingerprint, warns
    ``ReplayDivergenceWarning`` once.  Without a warning, the fingerprint
    returned is the recording's: the replay was exact.

    When it raises, the exception carries a note with the seed and the fingerprint, so
    that two failures can be told to be the same schedule.
    """
    if trace is None:
        if seed is None:
            raise TypeError("replay() needs seed= or trace= (a recording or its path)")
        loop = snakeloop.Loop(seed=seed, **loop_options)
    else:
        if isinstance(trace, int):
            raise TypeError(
                "replay(trace=) is a recording or the path of its trace file, not "
                f"{type(trace).__name__}"
            )
        recording = trace if isinstance(trace, Recording) else load(trace)
        loop = snakeloop.Loop(seed=seed, replay=recording, **loop_options)
    try:
        try:
            result = loop.run_until_complete(async_fn())
        except BaseException as exc:
            exc.add_note(f"snakeloop: seed={loop.seed} fingerprint={loop.schedule_fingerprint()}")
            raise
        fingerprint = loop.schedule_fingerprint()
        assert fingerprint is not None
        return result, fingerprint
    finally:
        loop.close()


def find_seed(
    async_fn: Callable[[], Coroutine[Any, Any, Any]],
    seeds: Iterable[int] = range(200),
    **loop_options: Any,
) -> int | None:
    """The first of ``seeds`` under which ``async_fn()`` raises an ``Exception``, or None."""
    for seed in seeds:
        loop = snakeloop.Loop(seed=seed, **loop_options)
        try:
            loop.run_until_complete(async_fn())
        except Exception:
            return seed
        finally:
            loop.close()
    return None
