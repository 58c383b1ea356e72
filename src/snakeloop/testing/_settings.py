"""What loop a test runs on: its markers and the session's options, resolved to ``Settings``.

Kept free of pytest so that the rules can be read (and tested) on their
own: a marker is ``(name, args, kwargs)``, closest first, as pytest's
``item.iter_markers()`` yields them; the session's options arrive as
``SessionDefaults``.  Wrong markers raise ``SettingsError``, a
``ValueError`` whose text names the mistake and the fix; the plugin turns
it into pytest's usage error.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import snakeloop

from ..perturbation import IMPLEMENTED
from ..seeding import derive_seed, parse_perturb, parse_seed
from ..virtualclock import VirtualClock

__all__ = [
    "MARKER_NAMES",
    "SessionDefaults",
    "Settings",
    "SettingsError",
    "apply_to_shared_loop",
    "make_loop",
    "resolve",
    "run_settings",
]

Marker = tuple[str, tuple[Any, ...], Mapping[str, Any]]

MARKER_NAMES = ("snakeloop", "looptime")

DEADLOCK_MODES = ("raise", "log", "ignore")
EXTERNAL_TIME_MODES = ("frozen", "real")

# Keys of mark.snakeloop that belong to features still to come: accepted at
# their defaults so that a marker written for them parses, refused otherwise.
_LATER = {
    "seeds": ("runs under several derived seeds", "issue 12"),
    "metrics": ("loop metrics", "issue 13"),
}

_SNAKELOOP_KEYS = (
    "virtual_time",
    "start",
    "end",
    "autojump_threshold",
    "external_time",
    "stall_timeout",
    "deadlock",
    "seed",
    "perturb",
    *_LATER,
)

# looptime's marker keys, as snakeloop's.  idle_step and noop_cycles tune
# looptime's guess of when the loop is idle; snakeloop knows, so they have
# no effect.
_LOOPTIME_KEYS = {
    "start": "start",
    "end": "end",
    "idle_timeout": "stall_timeout",
    "resolution": "resolution",
    "idle_step": None,
    "noop_cycles": None,
}


class SettingsError(ValueError):
    """A marker or option that cannot be honoured; the text says why and what to do."""


@dataclasses.dataclass(frozen=True)
class SessionDefaults:
    """What the command line and the environment ask of every asyncio test."""

    # --snakeloop: asyncio tests run on snakeloop even when not marked.
    snakeloop: bool = False
    # --snakeloop-virtual-time / SNAKELOOP_VIRTUAL_TIME=1 (and looptime's --looptime).
    virtual_time: bool = False
    # --snakeloop-deadlock / SNAKELOOP_DEADLOCK.
    deadlock: str = "raise"
    # --snakeloop-seed / SNAKELOOP_SEED: the root every test's seed is derived from.
    root_seed: int | None = None
    # --snakeloop-perturb / SNAKELOOP_PERTURB: what a seeded loop perturbs.
    perturb: str | None = None
    # --snakeloop-replay / SNAKELOOP_REPLAY: (node id or None for every test, seed).
    replay: tuple[str | None, int] | None = None
    # --snakeloop-seeds / SNAKELOOP_SEEDS: runs of each test under a derived seed.
    seeds: int = 1


@dataclasses.dataclass(frozen=True)
class Settings:
    """The loop one test runs on."""

    enabled: bool = False
    virtual_time: bool = False
    start: float | None = None
    end: float | None = None
    autojump_threshold: float = 0.0
    external_time: str = "frozen"
    stall_timeout: float | None = 30.0
    deadlock: str = "raise"
    resolution: float = 1e-6
    # The seed of the first run (None: not seeded), and what its loop perturbs.
    seed: int | None = None
    perturb: Any = None
    # The root the runs' seeds derive from (None when the seed is given as is) and how
    # many runs there are: run i uses derive_seed(seed_root, node id without the run, i).
    seed_root: int | None = None
    seeds: int = 1

    @property
    def seed_runs(self) -> int:
        """How many runs ``--snakeloop-seeds`` makes of the test: 1 for a seed given as is."""
        return self.seeds if self.seed_root is not None else 1


def _number(where: str, key: str, value: Any, *, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        expected = "a number of seconds or None" if allow_none else "a number of seconds"
        raise SettingsError(f"snakeloop: {where}: {key}= must be {expected}, not {value!r}")
    return float(value)


def _choice(where: str, key: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        names = ", ".join(repr(c) for c in choices)
        raise SettingsError(f"snakeloop: {where}: {key}= must be one of {names}, not {value!r}")
    return str(value)


def _snakeloop_marker(where: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict:
    if args:
        raise SettingsError(
            f"snakeloop: {where}: mark.snakeloop takes keyword arguments only, got {args!r}; "
            "write, for example, @pytest.mark.snakeloop(virtual_time=False)"
        )
    for key, value in kwargs.items():
        if key not in _SNAKELOOP_KEYS:
            known = ", ".join(_SNAKELOOP_KEYS)
            raise SettingsError(
                f"snakeloop: {where}: mark.snakeloop got an unknown option {key!r}; "
                f"the options are {known}"
            )
        if key in _LATER and value is not None:
            feature, issue = _LATER[key]
            raise SettingsError(
                f"snakeloop: {where}: mark.snakeloop({key}={value!r}) asks for {feature}, "
                f"which snakeloop does not have yet ({issue}); remove {key}= from the marker"
            )
    return {k: v for k, v in kwargs.items() if k not in _LATER}


def _looptime_marker(where: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict:
    found: dict[str, Any] = {}
    if len(args) > 1 or (args and not isinstance(args[0], bool)):
        raise SettingsError(
            f"snakeloop: {where}: mark.looptime takes one optional True/False and keyword "
            f"arguments, got {args!r}"
        )
    if args:
        found["virtual_time"] = args[0]
    for key, value in kwargs.items():
        if key not in _LOOPTIME_KEYS:
            known = ", ".join(_LOOPTIME_KEYS)
            raise SettingsError(
                f"snakeloop: {where}: mark.looptime got an unknown option {key!r}; "
                f"the options snakeloop maps are {known}"
            )
        ours = _LOOPTIME_KEYS[key]
        if ours is not None:
            found[ours] = value
    return found


def resolve(markers: Iterable[Marker], defaults: SessionDefaults, where: str) -> Settings:
    """The settings of the test at ``where`` (its node id, for messages).

    ``markers`` come closest first; for each key the closest marker that
    sets it wins, then the session's defaults.  A test with a snakeloop or
    looptime marker runs on snakeloop with virtual time unless a marker
    says ``virtual_time=False``; an unmarked test does when the session
    asks for it.
    """
    chosen: dict[str, Any] = {}
    marked = False
    for name, args, kwargs in markers:
        if name == "snakeloop":
            found = _snakeloop_marker(where, args, kwargs)
        elif name == "looptime":
            found = _looptime_marker(where, args, kwargs)
        else:
            continue
        marked = True
        for key, value in found.items():
            chosen.setdefault(key, value)
    if not (marked or defaults.snakeloop or defaults.virtual_time):
        return Settings()
    seeding = _seeding(where, chosen, defaults)
    virtual = chosen.get("virtual_time", True if marked else defaults.virtual_time)
    if not isinstance(virtual, bool):
        raise SettingsError(
            f"snakeloop: {where}: virtual_time= must be True or False, not {virtual!r}"
        )
    threshold = _number(
        where, "autojump_threshold", chosen.get("autojump_threshold", 0.0), allow_none=False
    )
    resolution = _number(where, "resolution", chosen.get("resolution", 1e-6), allow_none=False)
    assert threshold is not None and resolution is not None
    return Settings(
        enabled=True,
        virtual_time=virtual,
        start=_number(where, "start", chosen.get("start"), allow_none=True),
        end=_number(where, "end", chosen.get("end"), allow_none=True),
        autojump_threshold=threshold,
        external_time=_choice(
            where, "external_time", chosen.get("external_time", "frozen"), EXTERNAL_TIME_MODES
        ),
        stall_timeout=_number(
            where, "stall_timeout", chosen.get("stall_timeout", 30.0), allow_none=True
        ),
        deadlock=_choice(
            where, "deadlock", chosen.get("deadlock", defaults.deadlock), DEADLOCK_MODES
        ),
        resolution=resolution,
        **seeding,
    )


def _seeding(where: str, chosen: Mapping[str, Any], defaults: SessionDefaults) -> dict:
    """The seed fields of a test's settings: replay beats the marker's seed= beats the root."""
    perturb = chosen.get("perturb", defaults.perturb)
    try:
        if perturb is not None:
            parse_perturb(perturb, available=IMPLEMENTED)
        marked_seed = chosen.get("seed")
        if marked_seed is not None:
            marked_seed = parse_seed(marked_seed)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"snakeloop: {where}: {exc}") from None
    replay = defaults.replay
    if replay is not None and replay[0] in (None, where):
        return {"seed": replay[1], "perturb": perturb}
    if marked_seed is not None:
        return {"seed": marked_seed, "perturb": perturb}
    root = defaults.root_seed
    if root is not None:
        return {
            "seed": derive_seed(root, where),
            "perturb": perturb,
            "seed_root": root,
            "seeds": defaults.seeds,
        }
    if "perturb" in chosen and perturb is not None:
        # The session's --snakeloop-perturb is for the tests it seeds; a marker's is a mistake.
        raise SettingsError(
            f"snakeloop: {where}: perturb={perturb!r} needs a seed; add seed= to the marker "
            "or run pytest with --snakeloop-seed=N (or random)"
        )
    return {}


def _clock(settings: Settings, start: float | str) -> VirtualClock:
    try:
        return VirtualClock(
            start,  # type: ignore[arg-type]
            autojump_threshold=settings.autojump_threshold,
            external_time=settings.external_time,  # type: ignore[arg-type]
            stall_timeout=settings.stall_timeout,
            resolution=settings.resolution,
            end=settings.end,
        )
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"snakeloop: {exc}") from None


def make_loop(settings: Settings) -> snakeloop.Loop:
    """A new snakeloop loop for a test with these settings (a fresh loop starts at 0.0)."""
    options: dict[str, Any] = {"on_deadlock": settings.deadlock}
    if settings.seed is not None:
        options.update(seed=settings.seed, perturb=settings.perturb)
    if settings.virtual_time:
        options["clock"] = _clock(settings, 0.0 if settings.start is None else settings.start)
    return snakeloop.new_event_loop(**options)


def run_settings(settings: Settings, where: str, index: int) -> Settings:
    """The settings of run ``index`` of a test repeated under ``--snakeloop-seeds``."""
    if settings.seed_root is None or index == 0:
        return settings
    return dataclasses.replace(settings, seed=derive_seed(settings.seed_root, where, index))


def apply_to_shared_loop(loop: Any, settings: Settings, where: str) -> None:
    """Set up a loop that earlier tests used (and later ones will) for the test at ``where``.

    Time on a shared loop only goes forward: ``start`` may move it ahead,
    never back.  The clock's limits (``end``, ``stall_timeout``, ...) are
    this test's from now on.
    """
    get_clock = getattr(loop, "get_clock", None)
    if get_clock is None:
        return
    clock = get_clock()
    virtual = bool(getattr(clock, "is_virtual", False))
    if virtual != settings.virtual_time:
        kinds = {True: "virtual time", False: "real time"}
        raise SettingsError(
            f"snakeloop: {where} asks for {kinds[settings.virtual_time]} but runs on a loop "
            f"shared with other tests that runs on {kinds[virtual]}; give the tests that share "
            "a loop the same virtual_time=, or use a function-scoped loop"
        )
    if not virtual:
        return
    now = loop.time()
    if settings.start is not None:
        if settings.start < now:
            raise SettingsError(
                f"snakeloop: start={settings.start!r} would move loop time backwards from "
                f"{now!r} on a loop shared with other tests; omit start or use a "
                "function-scoped loop"
            )
        clock.jump(settings.start - now)
    clock.end = settings.end
    clock.stall_timeout = settings.stall_timeout
    clock.autojump_threshold = settings.autojump_threshold
    clock.external_time = settings.external_time
