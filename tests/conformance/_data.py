"""Readers for the conformance runner's data files.

Shared by the parent (``run.py``) and the worker (``_worker.py``); stdlib only, so the worker
can import it as a plain module from its own directory.

Test ids are CPython test ids without the ``test.test_asyncio.`` prefix, e.g.
``test_events.TargetEventLoopTests.test_call_soon``.

List files (``exclusions.txt``, ``network.txt``, ``expected_failures.txt``) hold one entry a
line::

    [TAGS] PATTERN  # reason

* ``PATTERN`` is a test id, a class id (``module.Class``: every test of the class), a module
  name, or an ``fnmatch`` glob (``test_events.TargetEventLoopTests.test_create_*``).
* ``[TAGS]`` is optional and limits the entry to some Python versions: ``[3.12]`` (only 3.12),
  ``[3.12+]`` (3.12 and later), ``[-3.12]`` (3.12 and earlier), or a comma-separated list of
  these (``[3.11, 3.13]``).  A tag ``compiled`` or ``pure`` limits it to one build of
  snakeloop as well (``[3.12+, compiled]``); the version tags, if any, still have to match.
* Everything after ``#`` is the reason. Blank lines and lines starting with ``#`` are ignored.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
import tomllib
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ID_PREFIX = "test.test_asyncio."

SELECTION_FILE = os.path.join(HERE, "selection.toml")
EXCLUSIONS_FILE = os.path.join(HERE, "exclusions.txt")
NETWORK_FILE = os.path.join(HERE, "network.txt")
EXPECTED_FAILURES_FILE = os.path.join(HERE, "expected_failures.txt")

_TAG_RE = re.compile(r"^(-)?(\d+)\.(\d+)(\+)?$")


def short_id(test_id: str) -> str:
    """Strip the ``test.test_asyncio.`` package prefix from a unittest id."""
    return test_id[len(ID_PREFIX) :] if test_id.startswith(ID_PREFIX) else test_id


def _version_matches(tag: str, version: tuple[int, int]) -> bool:
    m = _TAG_RE.match(tag.strip())
    if not m:
        raise ValueError(f"bad version tag {tag!r} (use 3.12, 3.12+ or -3.12)")
    at_most, major, minor, at_least = m.groups()
    v = (int(major), int(minor))
    if at_most and at_least:
        raise ValueError(f"bad version tag {tag!r}")
    if at_most:
        return version <= v
    if at_least:
        return version >= v
    return version == v


BUILD_TAGS = ("compiled", "pure")


def _tags_apply(tags: str, version: tuple[int, int], build: str | None) -> bool:
    names = [t.strip() for t in tags.split(",")]
    builds = [t for t in names if t in BUILD_TAGS]
    versions = [t for t in names if t not in BUILD_TAGS]
    if builds and build is None:
        raise ValueError(f"a build tag ({', '.join(builds)}) where the build is not known")
    version_ok = not versions or any(_version_matches(t, version) for t in versions)
    return version_ok and (not builds or build in builds)


@dataclass
class Entry:
    pattern: str
    reason: str
    source: str  # "file:line", for messages

    def matches(self, test_id: str) -> bool:
        p = self.pattern
        if any(c in p for c in "*?["):
            return fnmatch.fnmatchcase(test_id, p)
        return test_id == p or test_id.startswith(p + ".")


class PatternList:
    """Entries of one list file that apply to the running Python version."""

    def __init__(self, entries: list[Entry]):
        self.entries = entries

    @classmethod
    def load(
        cls, path: str, version: tuple[int, int] | None = None, build: str | None = None
    ) -> PatternList:
        """The entries that apply to ``version`` and, for build-tagged ones, to ``build``."""
        version = version or sys.version_info[:2]
        entries = []
        if not os.path.exists(path):
            return cls(entries)
        name = os.path.basename(path)
        with open(path, encoding="utf-8") as f:
            for lineno, raw in enumerate(f, 1):
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                body, _, reason = line.partition("#")
                body = body.strip()
                if body.startswith("["):
                    tags, sep, body = body[1:].partition("]")
                    if not sep:
                        raise ValueError(f"{name}:{lineno}: unclosed version tag")
                    try:
                        applies = _tags_apply(tags, version, build)
                    except ValueError as e:
                        raise ValueError(f"{name}:{lineno}: {e}") from None
                    if not applies:
                        continue
                    body = body.strip()
                if not body or len(body.split()) != 1:
                    raise ValueError(f"{name}:{lineno}: expected one test id or pattern")
                entries.append(Entry(body, reason.strip(), f"{name}:{lineno}"))
        return cls(entries)

    def match(self, test_id: str) -> Entry | None:
        for e in self.entries:
            if e.matches(test_id):
                return e
        return None

    def __contains__(self, test_id: str) -> bool:
        return self.match(test_id) is not None


def load_selection(path: str = SELECTION_FILE) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def module_names(selection: dict) -> list[str]:
    return sorted(k for k, v in selection.items() if isinstance(v, dict))


def modes_of(selection: dict, module: str) -> list[str]:
    """The modes ("loop", "task") that the selection defines for a module."""
    spec = selection[module]
    return [m for m in ("loop", "task") if m in spec]


def module_runs_on(selection: dict, module: str, version: tuple[int, int] | None = None) -> bool:
    """Whether the module's ``python`` key (a version tag as in the list files) admits
    ``version`` (default: the running Python).  A module without the key runs everywhere."""
    tags = selection[module].get("python")
    if tags is None:
        return True
    version = version or sys.version_info[:2]
    return any(_version_matches(t, version) for t in tags.split(","))


def module_is_network(selection: dict, module: str) -> bool:
    return bool(selection[module].get("network", False))


def network_default(selection: dict) -> bool:
    return bool(selection.get("network", False))
