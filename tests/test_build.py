"""Which build runs: ``snakeloop.COMPILED``, ``--version``, and setup.py's choice of build.

CI installs each build in its own venv and sets ``SNAKELOOP_EXPECT_BUILD`` (``compiled`` or
``pure``), so a compile that silently fell back to the pure build fails there.
"""

from __future__ import annotations

import asyncio
import collections
import importlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import snakeloop

ROOT = Path(__file__).resolve().parent.parent
# The core, and the socket transports it calls on every read.
COMPILED_MODULES = [
    "snakeloop._core.handles",
    "snakeloop._core.futures",
    "snakeloop._core.timerheap",
    "snakeloop._core.suspension",
    "snakeloop._core.runloop",
    "snakeloop._core.counters",
    "snakeloop.transports.socketbase",
    "snakeloop.transports.stream",
    "snakeloop.transports.datagram",
]


def _is_extension(module_name: str) -> bool:
    path = importlib.import_module(module_name).__file__ or ""
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def test_compiled_says_whether_the_compiled_modules_are_extensions():
    kinds = {name: _is_extension(name) for name in COMPILED_MODULES}
    # setup.py compiles all of them or none.
    assert set(kinds.values()) == {snakeloop.COMPILED}, kinds


def test_the_build_is_the_one_ci_installed():
    expected = os.environ.get("SNAKELOOP_EXPECT_BUILD")
    if expected is None:
        pytest.skip("SNAKELOOP_EXPECT_BUILD is not set (CI sets it to compiled or pure)")
    assert expected in ("compiled", "pure"), expected
    assert snakeloop.COMPILED is (expected == "compiled")


def test_version_names_the_build():
    result = subprocess.run(
        [sys.executable, "-m", "snakeloop", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    build = "compiled build" if snakeloop.COMPILED else "pure-Python build"
    implementation = {"cpython": "CPython", "pypy": "PyPy"}[sys.implementation.name]
    python = f"{implementation} {'.'.join(map(str, sys.version_info[:3]))}"
    assert result.stdout == f"snakeloop {snakeloop.__version__}, {build}, {python}\n"
    assert result.stderr == ""


def test_the_compiled_list_in_setup_py_is_the_one_checked_here(setup_module):
    assert setup_module.COMPILED_MODULES == COMPILED_MODULES
    for name in COMPILED_MODULES:
        assert (ROOT / "src" / Path(*name.split("."))).with_suffix(".py").is_file()


@pytest.fixture
def setup_module(monkeypatch):
    """setup.py loaded as a module, with setuptools stood in for (3.12's venvs lack it).

    It sees a CPython with the GIL, whatever runs the test (PyPy, in CI, builds pure for
    that reason alone): each test changes only what it is about.
    """
    import platform
    import sysconfig

    real_config_var = sysconfig.get_config_var
    monkeypatch.setattr(platform, "python_implementation", lambda: "CPython")
    monkeypatch.setattr(
        sysconfig,
        "get_config_var",
        lambda name: None if name == "Py_GIL_DISABLED" else real_config_var(name),
    )
    setuptools = types.ModuleType("setuptools")
    setuptools.setup = lambda **kwargs: None  # type: ignore[attr-defined]
    command = types.ModuleType("setuptools.command")
    build_ext = types.ModuleType("setuptools.command.build_ext")
    build_ext.build_ext = type("build_ext", (), {})  # type: ignore[attr-defined]
    for name, module in [
        ("setuptools", setuptools),
        ("setuptools.command", command),
        ("setuptools.command.build_ext", build_ext),
    ]:
        monkeypatch.setitem(sys.modules, name, module)
    for name in ("SNAKELOOP_NO_EXTENSIONS", "SNAKELOOP_REQUIRE_EXTENSIONS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "argv", ["setup.py", "bdist_wheel"])
    spec = importlib.util.spec_from_file_location("snakeloop_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("value", ["1", "yes", "true"])
def test_no_extensions_builds_pure(setup_module, monkeypatch, value):
    monkeypatch.setenv("SNAKELOOP_NO_EXTENSIONS", value)
    assert setup_module._ext_modules() == []


@pytest.mark.parametrize("value", ["", "0", "false"])
def test_no_extensions_off(setup_module, monkeypatch, value):
    monkeypatch.setenv("SNAKELOOP_NO_EXTENSIONS", value)
    assert setup_module._why_pure() is None


def test_an_editable_install_is_pure(setup_module, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["setup.py", "editable_wheel", "--dist-dir", "x"])
    assert setup_module._ext_modules() == []


def test_require_extensions_refuses_a_pure_build(setup_module, monkeypatch):
    monkeypatch.setenv("SNAKELOOP_NO_EXTENSIONS", "1")
    monkeypatch.setenv("SNAKELOOP_REQUIRE_EXTENSIONS", "1")
    with pytest.raises(
        SystemExit, match="SNAKELOOP_REQUIRE_EXTENSIONS is set, but SNAKELOOP_NO_EXTENSIONS is set"
    ):
        setup_module._ext_modules()


def test_free_threaded_and_other_pythons_build_pure(setup_module, monkeypatch):
    import platform
    import sysconfig

    real = sysconfig.get_config_var
    monkeypatch.setattr(
        sysconfig, "get_config_var", lambda name: 1 if name == "Py_GIL_DISABLED" else real(name)
    )
    assert setup_module._why_pure() == "free-threaded CPython runs the pure build"
    monkeypatch.setattr(platform, "python_implementation", lambda: "PyPy")
    assert setup_module._why_pure() == "PyPy runs the pure build"


def _snakeloop_frames_while(run) -> collections.Counter[str]:
    """The Python functions of snakeloop's package entered while ``run()`` runs."""
    package = str(Path(snakeloop.__file__).parent)
    entered: collections.Counter[str] = collections.Counter()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(package):
            entered[frame.f_code.co_qualname] += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return entered


@pytest.mark.skipif(not snakeloop.COMPILED, reason="interpreted, every method is a Python frame")
def test_asyncios_c_tasks_run_on_the_compiled_build_without_a_python_frame_of_its_own():
    # asyncio's C Future and Task (the default task kind on 3.14+) call the loop by name as
    # each one is made and stepped: get_debug, call_soon, create_task.  A Python method
    # among them costs a frame per task; get_debug in the debug mixin once cost async_tree
    # 2% of its instructions on 3.14.
    async def leaf():
        await asyncio.sleep(0)

    async def tree():
        await asyncio.gather(*[leaf() for _ in range(50)])

    loop = snakeloop.new_event_loop(stdlib_futures=True)
    try:
        loop.run_until_complete(tree())  # warm: first calls may import or cache
        entered = _snakeloop_frames_while(lambda: loop.run_until_complete(tree()))
    finally:
        loop.close()
    per_task = {name: count for name, count in entered.items() if count >= 50}
    assert per_task == {}, entered
