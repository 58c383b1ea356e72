"""Running an inner pytest session with snakeloop's plugin, in this process (pytester)."""

from __future__ import annotations

import inspect
import re
import textwrap
from importlib.metadata import entry_points

import _race
import pytest

# Imported here so that every inner session reuses the module instead of importing it anew.
import snakeloop.testing.pytest_plugin  # noqa: F401

PLUGIN = "snakeloop.testing.pytest_plugin"

_INI = """\
[pytest]
filterwarnings = error
{extra}
"""
# pytest-asyncio warns without it, and pytest warns of it without pytest-asyncio.
_ASYNCIO_INI = "asyncio_default_fixture_loop_scope = function\n"

ANYIO_CONFTEST = """\
import pytest

@pytest.fixture
def anyio_backend():
    return "asyncio"
"""

# How the async tests of an inner session are run: (options, conftest).
RUNNERS = {
    "plain": (("-p", "no:asyncio", "-p", "no:anyio"), None),
    "pytest-asyncio": (("-p", "no:anyio", "-o", "asyncio_mode=auto"), None),
    "anyio": (("-p", "no:asyncio", "-o", "anyio_mode=auto"), ANYIO_CONFTEST),
}


def _installed() -> bool:
    """The entry point loads the plugin in every session already."""
    return any(
        ep.name == "snakeloop" and ep.value == PLUGIN for ep in entry_points(group="pytest11")
    )


def plugin_args() -> tuple[str, ...]:
    return () if _installed() else ("-p", PLUGIN)


def run(
    pytester: pytest.Pytester,
    source: str,
    *args: str,
    runner: str | None = None,
    conftest: str | None = None,
    ini: str = "",
) -> pytest.RunResult:
    """Run the tests in ``source`` (one module) and return pytest's result."""
    options: tuple[str, ...] = ()
    if runner is not None:
        options, runner_conftest = RUNNERS[runner]
        conftest = conftest or runner_conftest
    every = (*options, *args)
    if "no:asyncio" not in every:
        ini = _ASYNCIO_INI + ini
    pytester.makeini(_INI.format(extra=ini))
    if conftest is not None:
        pytester.makeconftest(textwrap.dedent(conftest))
    pytester.makepyfile(test_inner=textwrap.dedent(source))
    # Hypothesis's plugin imports hypothesis anew in every inner session (a second each).
    return pytester.runpytest_inprocess(
        *plugin_args(), "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *options, *args
    )


# The race of tests/_race.py as a test file: it passes when the two connections are
# handled in the kernel's order and fails (-20) when a seed handles the trigger first.
RACE_TEST = (
    inspect.getsource(_race)
    + """

async def test_bank():
    assert await bank() == 40
"""
)
RACE_NODEID = "test_inner.py::test_bank"


def snakeloop_section(result: pytest.RunResult) -> str:
    """The output from the first ``snakeloop`` report section on."""
    text = result.stdout.str()
    return text[text.index(" snakeloop ") :]


def section_field(section: str, name: str) -> str:
    """The value of ``name=`` in a snakeloop section."""
    match = re.search(rf"\b{name}=(\S+)", section)
    assert match, section
    return match.group(1)
