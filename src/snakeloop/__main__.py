"""``python -m snakeloop script.py [args]``: run a script on snakeloop.

The script runs unmodified, as ``__main__``, with its own ``sys.argv``;
snakeloop's policy is installed first, so its ``asyncio.run``,
``asyncio.new_event_loop`` and ``asyncio.Runner`` get snakeloop loops.
``python -m snakeloop -m package.module [args]`` runs a module the same way.
``--seed N`` draws the scheduling choices asyncio leaves open from N (see
``snakeloop.seeding``); if the program dies of an exception, the seed, the
schedule's fingerprint and a replay command are printed.
``--virtual-time`` gives every loop the program makes a ``VirtualClock``:
its sleeps and timeouts take no real time, and a deadlock raises
``DeadlockError`` with the report of what each task waits on.
"""

from __future__ import annotations

import os
import runpy
import shlex
import sys
from typing import Any

from .runner import install

USAGE = (
    "usage: python -m snakeloop [options] SCRIPT [ARGS...]\n"
    "       python -m snakeloop [options] -m MODULE [ARGS...]\n"
    "Runs an asyncio program with snakeloop as its event loop.\n"
    "  --virtual-time  loop time jumps to the next timer whenever the program is idle\n"
    "  --seed N|random  scheduling choices asyncio leaves open are drawn from seed N\n"
    "                  (also SNAKELOOP_SEED); a crash prints the seed and how to replay it\n"
    "  --perturb LIST  which choices (default: io_order,io_delay,timer_ties)"
)


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
        if flag in ("--seed", "--perturb"):
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
    if "perturb" in options and "seed" not in options:
        return "--perturb needs --seed (or SNAKELOOP_SEED)"
    if not args:
        return "a script or -m MODULE is needed"
    return options, args


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    parsed = _parse_options(list(args))
    if isinstance(parsed, str):
        print(f"snakeloop: {parsed}\n{USAGE}", file=sys.stderr)
        return 2
    options, args = parsed
    if "seed" in options:
        from .seeding import parse_seed

        try:
            options["seed"] = parse_seed(options["seed"])
        except (TypeError, ValueError) as exc:
            print(f"snakeloop: {exc}", file=sys.stderr)
            return 2
    policy = install(**options)
    try:
        _run(args)
    except BaseException:
        if "seed" in options:
            _print_replay(policy, options, args)
        raise
    return 0


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


def _print_replay(policy: Any, options: dict[str, Any], args: list[str]) -> None:
    loop = policy.last_loop()
    seed = options["seed"]
    perturb = ",".join(loop.perturbation) if loop is not None else options.get("perturb", "")
    fingerprint = loop.schedule_fingerprint() if loop is not None else "none (no loop was made)"
    replay = f"SNAKELOOP_SEED={seed} python -m snakeloop "
    if "perturb" in options:
        replay += f"--perturb {shlex.quote(options['perturb'])} "
    if "clock_factory" in options:
        replay += "--virtual-time "
    replay += " ".join(shlex.quote(arg) for arg in args)
    print(
        f"snakeloop: this run used seed={seed} perturb={perturb} fingerprint={fingerprint}; "
        f"replay: {replay} (PYTHONHASHSEED={os.environ.get('PYTHONHASHSEED', 'random')})",
        file=sys.stderr,
    )


def _script_dir(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


if __name__ == "__main__":
    sys.exit(main())
