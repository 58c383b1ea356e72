"""``python -m snakeloop ps|pstree|top PID``: a running program's loops, seen from outside."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from .client import NoSnapshot, request_snapshot
from .tables import CycleError, format_ps, format_pstree
from .top import render

COMMANDS = ("ps", "pstree", "top")

_CLEAR = "\x1b[H\x1b[2J"


def _parser(command: str) -> argparse.ArgumentParser:
    about = {
        "ps": "list the pending tasks of a snakeloop program, as python -m asyncio ps does",
        "pstree": "draw the await tree of a snakeloop program, as python -m asyncio pstree does",
        "top": "watch the loops of a snakeloop program: metrics and tasks, every second",
    }
    parser = argparse.ArgumentParser(
        prog=f"python -m snakeloop {command}", description=about[command]
    )
    parser.add_argument("pid", type=int, help="the process, started with --insight")
    parser.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for an answer (default 5)"
    )
    if command == "top":
        parser.add_argument("--once", action="store_true", help="print one screen and exit")
        parser.add_argument(
            "--interval", type=float, default=1.0, help="seconds between screens (default 1)"
        )
    return parser


def _top(options: argparse.Namespace) -> int:
    previous: dict[str, Any] | None = None
    try:
        while True:
            current = request_snapshot(options.pid, timeout=options.timeout)
            if options.json:
                sys.stdout.write(json.dumps(current) + "\n")
            else:
                screen = render(current, previous)
                sys.stdout.write(screen if options.once else _CLEAR + screen)
            sys.stdout.flush()
            if options.once:
                return 0
            previous = current
            time.sleep(options.interval)
    except KeyboardInterrupt:
        return 0


def main(command: str, args: list[str]) -> int:
    options = _parser(command).parse_args(args)
    try:
        if command == "top":
            return _top(options)
        current = request_snapshot(options.pid, timeout=options.timeout)
    except NoSnapshot as exc:
        print(f"snakeloop {command}: {exc}", file=sys.stderr)
        return 1
    if options.json:
        sys.stdout.write(json.dumps(current, indent=2) + "\n")
        return 0
    if command == "ps":
        sys.stdout.write(format_ps(current))
        return 0
    try:
        sys.stdout.write(format_pstree(current))
    except CycleError as exc:
        print("\n".join(exc.lines()), file=sys.stderr)
        return 1
    return 0
