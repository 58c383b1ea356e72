"""What ``import cython`` gives the hot modules when Cython is not installed.

The modules of ``_core`` are compiled by Cython from this same source (see
setup.py).  Cython reads their literal ``import cython`` statement at compile
time, and a compiled module never imports anything for it.  Run as plain
Python they import the real ``cython`` package if it happens to be installed
(its pure-Python mode has ``compiled = False``), and this module otherwise, so
the pure build needs nothing beyond the standard library.  Only the names the
modules use are here.
"""

from typing import TypeVar

_C = TypeVar("_C", bound=type)
_V = TypeVar("_V")

compiled = False
# The C type names that @cython.locals gives in the modules themselves.
double = float


def locals(**types: object) -> object:  # noqa: A001  # Cython's name
    """``@cython.locals(name=type)``: compiled, those locals are typed; here, nothing."""
    return _unchanged


def _unchanged(function: object) -> object:
    return function


def freelist(size: int) -> object:
    """``@cython.freelist(size)`` on a class: compiled, freed instances are kept; here, nothing."""
    return _unchanged


def boundscheck(check: bool) -> object:
    """``@cython.boundscheck(False)``: compiled, indexing skips its range check; here, nothing."""
    return _unchanged


def wraparound(wrap: bool) -> object:
    """``@cython.wraparound(False)``: compiled, no negative indexes; here, nothing."""
    return _unchanged


def cast(type_: object, value: _V, typecheck: bool = True) -> _V:
    """``cython.cast(Type, value)``: compiled, a C cast; here, the value itself."""
    return value


def cclass(cls: _C) -> _C:
    """``@cython.cclass``: compiled, the class is a C type; here, the class itself."""
    return cls


def _compiled_only(*args: object) -> object:
    raise NotImplementedError("a C API function of the compiled build")


# C API functions that the compiled modules' .pxd files declare, for the
# linters: interpreted, the code that calls them never runs.
PyContext_CheckExact = PyContext_CopyCurrent = PyContext_Enter = PyContext_Exit = _compiled_only
monotonic_seconds = coarse_seconds = coarse_step = _compiled_only
drop_empty_dict = coro_send = is_native_coroutine = address = generic_delattr = _compiled_only
epoll_wait_list = learn_deque = queue_append = queue_popleft = _compiled_only
# Whether runloop.pxd's C clock reads what time.monotonic reads: never, here.
C_MONOTONIC = False
