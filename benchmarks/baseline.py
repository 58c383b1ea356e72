"""snakeloop as it is at another git revision, beside this tree's, for before/after figures.

The package imports itself only relatively, so a copy of ``src/snakeloop`` under another
name (``snakeloop_baseline``) is a second, independent snakeloop in the same process: both
are measured interleaved, on the same Python and at the same moment, which a before/after
pair of runs on a machine whose speed drifts is not.
"""

import atexit
import importlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "snakeloop_baseline"
# The same revision compiled (``build_compiled``), under a name of its own so that it
# imports beside this checkout's compiled copy (``benchmarks.compiled``).
COMPILED_PACKAGE = "snakeloop_baseline_compiled"
# Where the copies lie, for the benchmark's server processes (benchmarks.net).
DIRECTORY_ENV = "SNAKELOOP_BENCH_BASELINE_DIR"
COMPILED_DIRECTORY_ENV = "SNAKELOOP_BENCH_BASELINE_COMPILED_DIR"


def extract(revision):
    """Write ``src/snakeloop`` at ``revision`` into a new directory as ``snakeloop_baseline``,
    with that revision's setup.py beside it (for ``build_compiled``)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", revision, "src/snakeloop", "setup.py"],
        check=True,
        capture_output=True,
    ).stdout
    directory = Path(tempfile.mkdtemp(prefix="snakeloop-baseline-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(directory, filter="data")
    (directory / "src" / "snakeloop").rename(directory / PACKAGE)
    os.environ[DIRECTORY_ENV] = str(directory)
    return directory


def load(directory=None):
    """The copy as a module; ``directory`` defaults to the one ``extract`` made."""
    directory = directory or os.environ[DIRECTORY_ENV]
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    return importlib.import_module(PACKAGE)


def build_compiled(directory=None):
    """The revision that ``extract`` wrote, compiled by its own setup.py as
    ``snakeloop_baseline_compiled``: the directory that holds it (RuntimeError when it cannot
    be built, as ``benchmarks.compiled.build``)."""
    from . import compiled

    directory = Path(directory or os.environ[DIRECTORY_ENV])
    built = compiled.build(
        directory / PACKAGE, package=COMPILED_PACKAGE, setup=directory / "setup.py"
    )
    os.environ[COMPILED_DIRECTORY_ENV] = str(built)
    return built


def load_compiled(directory=None):
    """The compiled copy of the revision as a module (``build_compiled`` made it)."""
    from . import compiled

    return compiled.load(directory or os.environ[COMPILED_DIRECTORY_ENV], COMPILED_PACKAGE)
