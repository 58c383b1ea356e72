"""``python -m snakeloop script.py [args]``: run a script on snakeloop.

The script runs unmodified, as ``__main__``, with its own ``sys.argv``;
snakeloop's policy is installed first, so its ``asyncio.run``,
``asyncio.new_event_loop`` and ``asyncio.Runner`` get snakeloop loops.
``python -m snakeloop -m package.module [args]`` runs a module the same way.
``--virtual-time`` gives every loop the program makes a ``VirtualClock``:
its sleeps and timeouts take no real time, and a deadlock raises
``DeadlockError`` with the report of what each task waits on.
"""

from __future__ import annotations

import runpy
import sys

from .runner import install

USAGE = (
    "usage: python -m snakeloop [--virtual-time] SCRIPT [ARGS...]\n"
    "       python -m snakeloop [--virtual-time] -m MODULE [ARGS...]\n"
    "Runs an asyncio program with snakeloop as its event loop.\n"
    "  --virtual-time  loop time jumps to the next timer whenever the program is idle"
)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    clock_factory = None
    if args[0] == "--virtual-time":
        from .virtualclock import VirtualClock

        clock_factory = VirtualClock
        args = args[1:]
        if not args:
            print(
                "snakeloop: --virtual-time needs a script or -m MODULE\n" + USAGE, file=sys.stderr
            )
            return 2
    install(clock_factory=clock_factory)
    if args[0] == "-m":
        if len(args) < 2:
            print("snakeloop: -m needs a module name\n" + USAGE, file=sys.stderr)
            return 2
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return 0
    sys.argv = list(args)
    sys.path.insert(0, _script_dir(args[0]))
    runpy.run_path(args[0], run_name="__main__")
    return 0


def _script_dir(path: str) -> str:
    import os

    return os.path.dirname(os.path.abspath(path))


if __name__ == "__main__":
    sys.exit(main())
