"""Build snakeloop: the same source as pure Python, with its hot modules compiled when possible.

pyproject.toml holds the metadata; this file only decides which modules Cython compiles.
The compiled modules are the ``.py`` files below, read by Cython in pure-Python mode with
the ``.pxd`` files beside them; the ``.py`` files ship in every wheel, so each wheel also
runs uncompiled.

- ``pip install .`` (and a wheel built from the sdist) compiles them on CPython with the
  GIL.  A failed compile falls back to the pure build with a warning, unless
  ``SNAKELOOP_REQUIRE_EXTENSIONS=1`` is set, which makes it an error.
- ``SNAKELOOP_NO_EXTENSIONS=1`` builds the pure wheel (``py3-none-any``).
- PyPy and other implementations, and free-threaded CPython, get the pure build.
- An editable install (``pip install -e .``) is always pure, so that an extension left
  from an earlier build never hides an edit to the source.
"""

from __future__ import annotations

import os
import platform
import sys
import sysconfig

from setuptools import setup
from setuptools.command.build_ext import build_ext

# The modules that are compiled, in src/: the core, and the stream and datagram socket
# transports, whose reads and writes the core calls per request.  The async def modules
# (network, sockets, subprocess, dns, tls, pipes) stay interpreted: compiled coroutines behave
# differently in frames and tracebacks, and they are not on the hot path.
COMPILED_MODULES = [
    "snakeloop._core.handles",
    "snakeloop._core.futures",
    "snakeloop._core.runloop",
    "snakeloop._core.counters",
    "snakeloop.transports.socketbase",
    "snakeloop.transports.stream",
    "snakeloop.transports.datagram",
]


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _why_pure() -> str | None:
    """Why this build is pure, or None when it should compile."""
    if _flag("SNAKELOOP_NO_EXTENSIONS"):
        return "SNAKELOOP_NO_EXTENSIONS is set"
    if platform.python_implementation() != "CPython":
        return f"{platform.python_implementation()} runs the pure build"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "free-threaded CPython runs the pure build"
    return None


def _extensions() -> list:
    from Cython.Build import cythonize
    from setuptools import Extension

    modules = [
        Extension(name, [os.path.join("src", *name.split(".")) + ".py"])
        for name in COMPILED_MODULES
    ]
    return cythonize(
        modules,
        compiler_directives={"language_level": 3},
        # The generated C stays out of src/, and so out of the wheels.
        build_dir=os.path.join("build", "cython"),
        nthreads=os.cpu_count() or 1,
        quiet=True,
    )


class OptionalBuildExt(build_ext):
    """Compile every extension or none: on a failure fall back to pure, unless required.

    A half-compiled package would import, but its compiled modules expect the C types of
    the others, so the outputs already built are removed with the failure.
    """

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            if _flag("SNAKELOOP_REQUIRE_EXTENSIONS"):
                raise
            for output in self.get_outputs():
                if os.path.exists(output):
                    os.remove(output)
            print(
                f"snakeloop: compiling the extensions failed ({exc}); installing the pure "
                "build. Set SNAKELOOP_REQUIRE_EXTENSIONS=1 to make this an error.",
                file=sys.stderr,
            )


def _editable() -> bool:
    # setuptools' PEP 660 hook runs this file with the editable_wheel command.
    return "editable_wheel" in sys.argv


def _ext_modules() -> list:
    reason = _why_pure()
    if reason is None and _editable():
        reason = "an editable install is pure"
    if reason is not None:
        if _flag("SNAKELOOP_REQUIRE_EXTENSIONS"):
            raise SystemExit(f"snakeloop: SNAKELOOP_REQUIRE_EXTENSIONS is set, but {reason}")
        return []
    try:
        return _extensions()
    except Exception as exc:
        if _flag("SNAKELOOP_REQUIRE_EXTENSIONS"):
            raise
        print(
            f"snakeloop: Cython could not translate the extensions ({exc}); "
            "installing the pure build",
            file=sys.stderr,
        )
        return []


setup(ext_modules=_ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
