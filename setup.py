"""Build snakeloop: the same source as pure Python, with its hot modules compiled when possible.

pyproject.toml holds the metadata; this file only decides which modules Cython compiles.
The compiled modules are the ``.py`` files below, read by Cython in pure-Python mode with
the ``.pxd`` files beside them; the ``.py`` files ship in every wheel, so each wheel also
runs uncompiled.  Cython reads a copy of each module in build/cython/src whose class
statements give the classes the .pxd declares the .pxd's bases (see ``_cython_source``).

- ``pip install .`` (and a wheel built from the sdist) compiles them on CPython with the
  GIL.  A failed compile falls back to the pure build with a warning, unless
  ``SNAKELOOP_REQUIRE_EXTENSIONS=1`` is set, which makes it an error.
- ``SNAKELOOP_NO_EXTENSIONS=1`` builds the pure wheel (``py3-none-any``).
- PyPy and other implementations, and free-threaded CPython, get the pure build.
- ``SNAKELOOP_DEBUG_EXTENSIONS=1`` builds a debug build of the extensions: ``-O0 -g``,
  Cython's ``boundscheck`` and ``wraparound`` on everywhere, and AddressSanitizer when the
  compiler can build and link with it (see CONTRIBUTING.md for how to run it).
- An editable install (``pip install -e .``) is always pure, so that an extension left
  from an earlier build never hides an edit to the source.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import re
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
    "snakeloop._core.timerheap",
    "snakeloop._core.suspension",
    "snakeloop._core.runloop",
    "snakeloop._core.counters",
    "snakeloop.transports.socketbase",
    "snakeloop.transports.stream",
    "snakeloop.transports.datagram",
]
CYTHON_DIRECTIVES = {"language_level": 3}
# The debug build's directives, for the whole of each module (a function that turns them
# off in its decorator, such as runloop._first_deadline, keeps its own).
DEBUG_DIRECTIVES = {"boundscheck": True, "wraparound": True}


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


# Where the sources Cython reads are written (see _cython_source), and the C it writes.
CYTHON_DIR = os.path.join("build", "cython")
CYTHON_SOURCES = os.path.join(CYTHON_DIR, "src")

_PXD_CLASS = re.compile(r"^cdef class (\w+)(?:\((\w+)\))?:", re.MULTILINE)
_PY_CLASS = re.compile(r"^class (\w+)\(.*\):", re.MULTILINE)


def _cython_source(text: str, pxd: str) -> str:
    """The module as Cython reads it: each class the .pxd declares gets the .pxd's base.

    Interpreted, a compiled class keeps the bases that the interpreter and type
    checkers see: ``Handle(asyncio.Handle)``, ``Future(Generic[T])`` (which
    disappears at run time).  A ``cdef class`` takes no Python base, so Cython
    reads the class statement with the base its .pxd declares, or none; every
    other line is the same, so line numbers in tracebacks hold.
    """
    bases = dict(_PXD_CLASS.findall(pxd))

    def header(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in bases:
            return match.group(0)
        return f"class {name}({bases[name]}):" if bases[name] else f"class {name}:"

    return _PY_CLASS.sub(header, text)


def _write_if_changed(path: str, text: str) -> None:
    # An unchanged file keeps its time stamp, so Cython does not translate it again.
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _has_asan() -> bool:
    """Whether the C compiler builds and links a shared object with AddressSanitizer."""
    import shutil
    import subprocess
    import tempfile

    cc = (sysconfig.get_config_var("CC") or "cc").split()
    if not cc or shutil.which(cc[0]) is None:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "probe.c")
        with open(source, "w", encoding="utf-8") as f:
            f.write("int probe(void) { return 0; }\n")
        result = subprocess.run(
            [
                *cc,
                "-fsanitize=address",
                "-shared",
                "-fPIC",
                source,
                "-o",
                os.path.join(tmp, "p.so"),
            ],
            capture_output=True,
        )
    return result.returncode == 0


def _debug_flags() -> tuple[list[str], list[str]]:
    """Compile and link flags of the debug build (SNAKELOOP_DEBUG_EXTENSIONS)."""
    compile_args = ["-O0", "-g", "-fno-omit-frame-pointer"]
    link_args = ["-g"]
    if _has_asan():
        compile_args.append("-fsanitize=address")
        link_args.append("-fsanitize=address")
        print("snakeloop: debug build with AddressSanitizer", file=sys.stderr)
    else:
        print("snakeloop: debug build without AddressSanitizer", file=sys.stderr)
    return compile_args, link_args


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _extensions() -> list:
    from Cython.Build import cythonize
    from setuptools import Extension

    modules = []
    debug = _flag("SNAKELOOP_DEBUG_EXTENSIONS")
    compile_args, link_args = _debug_flags() if debug else ([], [])
    directives = dict(CYTHON_DIRECTIVES, **DEBUG_DIRECTIVES) if debug else CYTHON_DIRECTIVES
    packages = {name.rpartition(".")[0] for name in COMPILED_MODULES}
    for package in packages:
        # The package markers and every .pxd, so that cimports between the modules resolve.
        parts = package.split(".")
        for depth in range(1, len(parts) + 1):
            init = os.path.join(*parts[:depth], "__init__.py")
            _write_if_changed(os.path.join(CYTHON_SOURCES, init), "")
        package_dir = os.path.join("src", *parts)
        for entry in sorted(os.listdir(package_dir)):
            if entry.endswith(".pxd"):
                text = _read(os.path.join(package_dir, entry))
                _write_if_changed(os.path.join(CYTHON_SOURCES, *parts, entry), text)
    for name in COMPILED_MODULES:
        relative = os.path.join(*name.split("."))
        pxd_path = os.path.join("src", relative + ".pxd")
        pxd = _read(pxd_path) if os.path.exists(pxd_path) else ""
        source = os.path.join(CYTHON_SOURCES, relative + ".py")
        _write_if_changed(source, _cython_source(_read(os.path.join("src", relative + ".py")), pxd))
        # The later -O0 wins over the -O2 or -O3 in Python's own CFLAGS.
        modules.append(
            Extension(name, [source], extra_compile_args=compile_args, extra_link_args=link_args)
        )
    # cythonize's workers come from multiprocessing, whose default on Linux is forkserver
    # from 3.14: each worker imports the main script again, so `python setup.py
    # build_ext` (benchmarks/compiled.py) would run the whole build in every worker.
    # Forked workers start from this process as it is.
    if "fork" in multiprocessing.get_all_start_methods():
        multiprocessing.set_start_method("fork", force=True)
    return cythonize(
        modules,
        compiler_directives=directives,
        include_path=[CYTHON_SOURCES],
        # The generated C stays out of src/, and so out of the wheels.
        build_dir=CYTHON_DIR,
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
