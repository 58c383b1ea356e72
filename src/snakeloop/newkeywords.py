"""Keyword arguments that asyncio's loop methods take only from some Python on.

``create_connection(all_errors=)`` came with 3.12, ``create_server(keep_alive=)``
and ``create_unix_server(cleanup_socket=)`` with 3.13.  Each such method is
written once, with the newest signature, and its new keyword's default is
``since(version, default)``: the default itself on a Python that has the
keyword, ``ABSENT`` on one that does not.  There the method rejects any other
value with the ``TypeError`` (and message) Python raises for an unknown
keyword, and ``@hide_absent`` takes the keyword out of ``inspect.signature``.
``ABSENT`` is false, as the defaults of these keywords are, so the method
body needs no second path.

One difference from asyncio remains: Python rejects an unknown keyword at the
call, before a coroutine exists; these methods reject it when the coroutine
starts.  Checking at the call would take a wrapper around each method: one
more call for every call, and the method would no longer be a coroutine
function.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ABSENT", "hide_absent", "since", "unexpected_keyword"]

_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., Any])


class _Absent:
    """The default of a keyword this Python's asyncio does not have."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "<absent>"


#: Typed ``Any`` so that it can be the default of a parameter of any type.
ABSENT: Any = _Absent()


def since(version: tuple[int, int], default: _T) -> _T:
    """``default`` if the running Python is ``version`` or newer, else ``ABSENT``."""
    return default if sys.version_info >= version else ABSENT


def unexpected_keyword(method: Callable[..., Any], name: str) -> TypeError:
    """The error Python raises when ``method`` is called with keyword ``name``."""
    return TypeError(f"{method.__qualname__}() got an unexpected keyword argument {name!r}")


def hide_absent(func: _F) -> _F:
    """Leave the parameters whose default is ``ABSENT`` out of ``func``'s signature."""
    signature = inspect.signature(func)
    kept = [p for p in signature.parameters.values() if p.default is not ABSENT]
    if len(kept) < len(signature.parameters):
        func.__signature__ = signature.replace(parameters=kept)  # type: ignore[attr-defined]
    return func
