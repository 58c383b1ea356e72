"""This checkout's snakeloop compiled, beside the pure one, so both are measured in one run.

setup.py compiles the modules it lists in ``COMPILED_MODULES`` when snakeloop is installed.
To put that build in a column beside the pure one, measured interleaved with it, this
module copies ``src/snakeloop`` to a package named ``snakeloop_compiled`` (the package
imports itself only relatively, as ``baseline`` relies on too) and has setup.py compile the
same modules of the copy (``build_ext``, with the module names renamed), so the column is
what ``pip install .`` builds.  The copy is kept under ``build/bench-compiled/``, keyed by
the source, setup.py, the Python and the Cython version, so a second run of an unchanged
tree compiles nothing.

Compiling needs Cython and setuptools (the ``bench`` extra) and a C compiler.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "snakeloop_compiled"
# Where the compiled copy lies, for the benchmark's server processes (benchmarks.net).
DIRECTORY_ENV = "SNAKELOOP_BENCH_COMPILED_DIR"
_SOURCE_SUFFIXES = (".py", ".pxd")


def _source_files(source: Path) -> list[Path]:
    return sorted(
        path
        for path in source.rglob("*")
        if path.suffix in _SOURCE_SUFFIXES and "__pycache__" not in path.parts
    )


def _key(source: Path, cython_version: str, package: str, setup: Path) -> str:
    digest = hashlib.sha256()
    digest.update(f"{sys.version}\0{cython_version}\0{package}\0".encode())
    digest.update(setup.read_bytes() + b"\0")
    for path in _source_files(source):
        digest.update(str(path.relative_to(source)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build(source: Path | None = None, *, package: str = PACKAGE, setup: Path | None = None) -> Path:
    """The directory holding ``package`` (``snakeloop_compiled``), compiled from ``source``
    (this checkout's ``src/snakeloop``) by ``setup`` (this checkout's setup.py): a baseline
    revision's copy is compiled by its own setup.py, under a name of its own, so that it
    can be imported beside this checkout's.

    Raises RuntimeError, with what is missing, when it cannot be built.
    """
    source = source or REPO / "src" / "snakeloop"
    setup = setup or REPO / "setup.py"
    try:
        import Cython
    except ImportError:
        raise RuntimeError("Cython is not installed (python3 -m pip install '.[bench]')") from None
    directory = REPO / "build" / "bench-compiled" / _key(source, Cython.__version__, package, setup)
    done = directory / "compiled"
    if not done.exists():
        shutil.rmtree(directory, ignore_errors=True)
        copy = directory / "src" / package
        for path in _source_files(source):
            target = copy / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            text = path.read_text()
            if path.suffix == ".pxd":  # an absolute cimport must name the copy
                text = text.replace("snakeloop.", package + ".")
            target.write_text(text)
        # setup.py reads a module's source from src/ by its name: renamed, the copy's.
        script = setup.read_text().replace('"snakeloop.', f'"{package}.')
        (directory / "setup.py").write_text(script)
        result = subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", "lib"],
            cwd=directory,
            env={**os.environ, "SNAKELOOP_REQUIRE_EXTENSIONS": "1"},
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"compiling failed:\n{result.stdout}{result.stderr}")
        # The extensions are in lib/; the rest of the package joins them there.
        shutil.copytree(copy, directory / "lib" / package, dirs_exist_ok=True)
        done.write_text("")
    if package == PACKAGE:
        os.environ[DIRECTORY_ENV] = str(directory / "lib")
    return directory / "lib"


def load(directory: Path | str | None = None, package: str = PACKAGE):
    """The compiled copy as a module; ``directory`` defaults to the one ``build`` made."""
    directory = str(directory or os.environ[DIRECTORY_ENV])
    if directory not in sys.path:
        sys.path.insert(0, directory)
    module = importlib.import_module(package)
    if not module.COMPILED:
        raise RuntimeError(f"{package} in {directory} imported uncompiled")
    return module
