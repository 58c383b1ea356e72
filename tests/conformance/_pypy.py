"""Debian's PyPy and CPython's test package (imported by the suite's conftest and the workers)."""

import sys


def let_pypys_test_package_import() -> None:
    """Debian's PyPy ships CPython's test package, and a ``_testcapi`` that compiles a C file
    at import which the package does not ship: the import raises FileNotFoundError where
    test.support expects an ImportError (it goes on without ``_testcapi``, and the tests that
    need it skip).  None in ``sys.modules`` makes the import raise that ImportError."""
    if sys.implementation.name != "pypy" or "_testcapi" in sys.modules:
        return
    try:
        import _testcapi  # noqa: F401
    except ImportError:
        pass
    except OSError:
        sys.modules["_testcapi"] = None  # type: ignore[assignment]
