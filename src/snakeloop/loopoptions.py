"""``Loop(...)``'s keywords, checked and resolved before the loop opens anything.

``LoopOptions`` reads every keyword that can be refused, with the environment
variables that stand in for the ones not given, and raises the error a bad one
deserves.  ``Loop.__init__`` builds one first, so a refused loop leaves no epoll
fd, waker or thread behind for the collector to close (PyPy's runs late, and the
next fds opened would get other numbers, which a replay's recorded choices name).

The checks run in the order the keywords used to be read in, so a call with two
bad options gets the same error as before: metrics, slow-callback logging,
``on_deadlock``, the clock, then the seed, its perturbation and replay.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .clock import Clock
    from .seeding import Schedule

__all__ = [
    "DEADLOCK_MODES",
    "EPOCH_NEEDS_VIRTUAL_TIME",
    "IO_LATENCY_NEEDS_VIRTUAL_TIME",
    "STDLIB_FUTURES_BY_DEFAULT",
    "LoopOptions",
]

# What Loop(on_deadlock=...) takes (see snakeloop.deadlock).
DEADLOCK_MODES = ("raise", "log", "ignore")

# Which Future and Task a loop makes when ``stdlib_futures`` is not given.  From 3.14
# asyncio's own tools read tasks that only its C Task can be: ``python -m asyncio ps`` and
# ``pstree`` walk the C tasks of a live process's memory, and gather, shield and TaskGroup
# record who awaits whom (``future_add_to_awaited_by``) on C futures alone.  So from
# 3.14 a loop makes asyncio's C Future and Task by default, and snakeloop's own with
# ``stdlib_futures=False`` (docs/design.md, "Which tasks a loop makes").
STDLIB_FUTURES_BY_DEFAULT = sys.version_info >= (3, 14)

IO_LATENCY_NEEDS_VIRTUAL_TIME = (
    "perturb 'io_latency' delays readiness by virtual seconds: give the loop a VirtualClock, "
    "or leave 'io_latency' out"
)
EPOCH_NEEDS_VIRTUAL_TIME = (
    "perturb 'epoch' draws where virtual time starts: give the loop a VirtualClock, "
    "or leave 'epoch' out"
)


class LoopOptions:
    """The options of one ``Loop``, each checked, with the defaults filled in.

    ``schedule`` is the seeded schedule (``seeding.Schedule``) when ``seed=`` or a
    trace file's recording was given, else None; ``metrics`` is the metrics mode
    (False, True, ``"sampled"`` or ``"exact"``).
    """

    __slots__ = ("on_deadlock", "schedule", "metrics", "log_slow_callbacks", "stdlib_futures")

    def __init__(
        self,
        loop: object,
        *,
        clock: Clock | None,
        stdlib_futures: bool | None,
        on_deadlock: str | None,
        seed: int | str | None,
        perturb: str | Iterable[str] | Mapping[str, object] | None,
        trace: int,
        replay: Iterable[Any] | None,
        metrics: object,
        log_slow_callbacks: bool | None,
    ) -> None:
        from .metrics import metrics_mode, slow_callback_logging

        self.metrics: bool | str = metrics_mode(metrics)
        self.log_slow_callbacks: bool = slow_callback_logging(log_slow_callbacks)
        self.on_deadlock = _deadlock_mode(on_deadlock)
        if clock is not None:
            check = getattr(clock, "_check_attachable", None)
            if check is not None:
                check(loop)
        self.schedule = _schedule(seed, perturb, trace, replay)
        if self.schedule is not None and not getattr(clock, "is_virtual", False):
            if "epoch" in self.schedule.perturbation:
                raise ValueError(EPOCH_NEEDS_VIRTUAL_TIME)
            if "io_latency" in self.schedule.perturbation:
                raise ValueError(IO_LATENCY_NEEDS_VIRTUAL_TIME)
        self.stdlib_futures: bool = (
            STDLIB_FUTURES_BY_DEFAULT if stdlib_futures is None else bool(stdlib_futures)
        )


def _deadlock_mode(option: str | None) -> str | None:
    """``on_deadlock``, or ``SNAKELOOP_DEADLOCK`` when not given; None: the default."""
    if option is None:
        option = os.environ.get("SNAKELOOP_DEADLOCK") or None
    if option is not None and option not in DEADLOCK_MODES:
        raise ValueError(
            f"on_deadlock must be 'raise', 'log' or 'ignore' (or the environment "
            f"variable SNAKELOOP_DEADLOCK unset), got {option!r}"
        )
    return option


def _schedule(
    seed: int | str | None,
    perturb: str | Iterable[str] | Mapping[str, object] | None,
    trace: int,
    replay: Iterable[Any] | None,
) -> Schedule | None:
    """The seeded schedule the options ask for, or None for an unseeded loop."""
    recording = None
    if replay is not None:
        from .tracefile import Recording

        if isinstance(replay, Recording):
            recording = replay
    if recording is not None:
        # A trace file's recording: the seed and perturbation are the recording's.
        from .perturbation import IMPLEMENTED
        from .seeding import parse_perturb, parse_seed

        recording.check_options(
            None if seed is None else parse_seed(seed),
            None if perturb is None else parse_perturb(perturb, available=IMPLEMENTED),
        )
        schedule: Schedule = recording.schedule(trace)
        recording.warn_if_environment_differs()
        return schedule
    if seed is not None:
        from .perturbation import IMPLEMENTED
        from .seeding import Schedule, parse_perturb, parse_seed

        return Schedule(
            parse_seed(seed),
            parse_perturb(perturb, available=IMPLEMENTED),
            trace,
            None if replay is None else list(replay),
        )
    if replay is not None:
        raise ValueError("replay= needs seed=: give the seed of the run that was recorded")
    if perturb is not None:
        raise ValueError("perturb= needs seed=: the seed is what makes a perturbed run replayable")
    return None
