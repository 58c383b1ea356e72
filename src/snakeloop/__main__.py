"""``python -m snakeloop script.py [args]``: run a script on snakeloop.

The script runs unmodified, as ``__main__``, with its own ``sys.argv``;
snakeloop's policy is installed first, so its ``asyncio.run``,
``asyncio.new_event_loop`` and ``asyncio.Runner`` get snakeloop loops.
``python -m snakeloop -m package.module [args]`` runs a module the same way.
``--seed N`` draws the scheduling choices asyncio leaves open from N (see
``snakeloop.seeding``); if the program dies of an exception, the seed, the
schedule's fingerprint, its number of decisions and a replay command are
printed.  ``--trace FILE`` writes the trace file of the last loop the
program made when the program ends (``snakeloop.tracefile``), and
``--replay FILE`` runs the program's loops under that file's seed and
perturbation, checking each choice against it: the first that differs, or
a different ``PYTHONHASHSEED``, is warned of.  A program that makes several
loops is replayed on each of them against the one file.
``--virtual-time`` gives every loop the program makes a ``VirtualClock``:
its sleeps and timeouts take no real time, and a deadlock raises
``DeadlockError`` with the report of what each task waits on.
``--insight`` calls ``snakeloop.insight.enable()`` first: SIGUSR1 then
makes the program write a snapshot of its loops, which ``python -m
snakeloop ps|pstree|top PID`` ask for and show.  These subcommands win over
scripts of the same name (``./ps`` runs a script called ps).
"""

from __future__ import annotations

import os
import platform
import runpy
import shlex
import sys
from typing import Any

from .loop import Loop
from .runner import EventLoopPolicy, install_policy, set_policy

USAGE = (
    "usage: python -m snakeloop [options] SCRIPT [ARGS...]\n"
    "       python -m snakeloop [options] -m MODULE [ARGS...]\n"
    "       python -m snakeloop ps|pstree|top PID [--json]\n"
    "       python -m snakeloop --version\n"
    "Runs an asyncio program with snakeloop as its event loop.\n"
    "  --insight       SIGUSR1 makes the program write a snapshot of its loops, for\n"
    "                  python -m snakeloop ps|pstree|top PID\n"
    "  --virtual-time  loop time jumps to the next timer whenever the program is idle\n"
    "  --seed N|random  scheduling choices asyncio leaves open are drawn from seed N\n"
    "                  (also SNAKELOOP_SEED); a crash prints the seed and how to replay it\n"
    "  --perturb LIST  which choices: none, default, all, or names separated by commas\n"
    "                  (default: default, that is io_order,io_delay,timer_ties,chunking,\n"
    "                  threadsafe)\n"
    "  --trace FILE    with a seed: write the run's decisions to FILE when the program\n"
    "                  ends (also SNAKELOOP_TRACE); a crash's replay command then uses it\n"
    "  --replay FILE   run under the seed and perturbation FILE recorded, and warn at the\n"
    "                  first choice that differs from it"
)

_VALUED = ("--seed", "--perturb", "--trace", "--replay")
# Subcommands; a script of the same name runs as ./ps.
_COMMANDS = ("ps", "pstree", "top")


def _parse_options(args: list[str]) -> tuple[dict[str, Any], list[str]] | str:
    """The loop options the leading flags ask for, and the rest; or what is wrong."""
    options: dict[str, Any] = {}
    while args and args[0].startswith("--"):
        flag, _, value = args[0].partition("=")
        if flag == "--virtual-time" and not value:
            from .virtualclock import VirtualClock

            options["clock_factory"] = VirtualClock
            args = args[1:]
            continue
        if flag == "--insight" and not value:
            options["insight"] = True
            args = args[1:]
            continue
        if flag in _VALUED:
            if not value:
                if len(args) < 2:
                    return f"{flag} needs a value"
                value, args = args[1], args[2:]
            else:
                args = args[1:]
            options[flag[2:]] = value
            continue
        return f"unknown option {args[0]}"
    if "seed" not in options and os.environ.get("SNAKELOOP_SEED"):
        options["seed"] = os.environ["SNAKELOOP_SEED"]
    if "trace" not in options and os.environ.get("SNAKELOOP_TRACE"):
        options["trace"] = os.environ["SNAKELOOP_TRACE"]
    seeded = "seed" in options or "replay" in options
    if "perturb" in options and not seeded:
        return "--perturb needs --seed (or SNAKELOOP_SEED)"
    if "trace" in options and not seeded:
        return "--trace needs --seed (or SNAKELOOP_SEED) or --replay: an unseeded run has no trace"
    if not args:
        return "a script or -m MODULE is needed"
    return options, args


def version_text() -> str:
    """``snakeloop 0.1.0, compiled build, CPython 3.11.7``: what ``--version`` prints."""
    from . import COMPILED, __version__

    build = "compiled build" if COMPILED else "pure-Python build"
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"snakeloop {__version__}, {build}, {python}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    if args[0] == "--version":
        print(version_text())
        return 0
    if args[0] in _COMMANDS:
        from ._insight.commands import main as command_main

        return command_main(args[0], list(args[1:]))
    parsed = _parse_options(list(args))
    if isinstance(parsed, str):
        print(f"snakeloop: {parsed}\n{USAGE}", file=sys.stderr)
        return 2
    options, args = parsed
    if options.pop("insight", False):
        from .insight import enable

        enable()
    trace_path = options.pop("trace", None)
    replay_path = options.pop("replay", None)
    recording = None
    try:
        if "seed" in options:
            from .seeding import parse_seed

            options["seed"] = parse_seed(options["seed"])
        if replay_path is not None:
            recording = _recording_to_replay(replay_path, options)
    except (OSError, TypeError, ValueError) as exc:
        print(f"snakeloop: {exc}", file=sys.stderr)
        return 2
    if trace_path is None and recording is None:
        policy: EventLoopPolicy = install_policy(**options)
    else:
        policy = _RecordingPolicy(recording=recording, **options)
        set_policy(policy)
    try:
        _run(args)
    except BaseException:
        written = _write_trace(policy, trace_path, args)
        if "seed" in options or recording is not None:
            _print_replay(policy, options, args, written or replay_path)
        raise
    _write_trace(policy, trace_path, args)
    return 0


class _RecordingPolicy(EventLoopPolicy):
    """The policy of ``--trace`` and ``--replay``: it holds on to the loops it makes.

    Their traces are written after they are closed (and would otherwise be
    collected); under ``--replay``, each new loop replays the recording.
    """

    def __init__(
        self,
        *,
        recording: Any = None,
        clock_factory: Any = None,
        seed: int | None = None,
        perturb: str | None = None,
    ) -> None:
        super().__init__(clock_factory=clock_factory, seed=seed, perturb=perturb)
        self._recording = recording
        self._make_clock = clock_factory
        self.loops: list[Loop] = []

    def new_event_loop(self) -> Loop:
        if self._recording is None:
            loop = super().new_event_loop()
        else:
            options: dict[str, Any] = {"replay": self._recording}
            if self._make_clock is not None:
                options["clock"] = self._make_clock()
            loop = Loop(**options)
        self.loops.append(loop)
        return loop

    def last_loop(self) -> Loop | None:
        return self.loops[-1] if self.loops else None


def _recording_to_replay(path: str, options: dict[str, Any]) -> Any:
    """The recording at ``path``, checked against a ``--seed`` and ``--perturb`` given too."""
    from .perturbation import IMPLEMENTED
    from .seeding import parse_perturb
    from .tracefile import load

    recording = load(path)
    perturb = options.get("perturb")
    recording.check_options(
        options.get("seed"),
        None if perturb is None else parse_perturb(perturb, available=IMPLEMENTED),
    )
    options.pop("perturb", None)
    options["seed"] = recording.seed
    return recording


def _write_trace(policy: EventLoopPolicy, path: str | None, args: list[str]) -> str | None:
    """Write the trace file of the policy's last loop to ``path``: the path, or None."""
    if path is None:
        return None
    loop = policy.last_loop()
    if loop is None or loop.seed is None:
        print(f"snakeloop: no seeded loop was made; {path} not written", file=sys.stderr)
        return None
    from .tracefile import save

    try:
        save(loop, path, origin=shlex.join(["python", "-m", "snakeloop", *args]))
    except OSError as exc:
        print(f"snakeloop: the trace was not written: {exc}", file=sys.stderr)
        return None
    return path


def _run(args: list[str]) -> None:
    if args[0] == "-m":
        if len(args) < 2:
            raise SystemExit("snakeloop: -m needs a module name\n" + USAGE)
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return
    sys.argv = list(args)
    sys.path.insert(0, _script_dir(args[0]))
    runpy.run_path(args[0], run_name="__main__")


def _print_replay(
    policy: EventLoopPolicy, options: dict[str, Any], args: list[str], trace: str | None
) -> None:
    loop = policy.last_loop()
    seed = options["seed"]
    if loop is not None and loop.seed is not None:
        from .tracefile import record

        run = record(loop)
        perturb = ",".join(run.perturbation)
        fingerprint = run.fingerprint
        decisions = str(run.count)  # all it made, not only those its trace kept
    else:
        perturb = options.get("perturb") or "default"
        fingerprint = "none (no loop was made)"
        decisions = "0"
    if trace is not None:
        replay = f"python -m snakeloop --replay {shlex.quote(trace)} "
    else:
        replay = f"SNAKELOOP_SEED={seed} python -m snakeloop "
        if options.get("perturb") is not None:
            replay += f"--perturb {shlex.quote(options['perturb'])} "
    if "clock_factory" in options:
        replay += "--virtual-time "
    replay += " ".join(shlex.quote(arg) for arg in args)
    print(
        f"snakeloop: this run used seed={seed} perturb={perturb} fingerprint={fingerprint}; "
        f"decisions={decisions}; replay: {replay} "
        f"(PYTHONHASHSEED={os.environ.get('PYTHONHASHSEED') or 'random'})",
        file=sys.stderr,
    )


def _script_dir(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


if __name__ == "__main__":
    sys.exit(main())
