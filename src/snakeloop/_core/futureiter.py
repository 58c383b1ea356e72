"""``iter(future)``: the generator of ``Future.__await__``, with asyncio's ``throw()``.

asyncio's C ``FutureIter`` deprecates ``throw()``'s old ``(type, value, traceback)`` form
from 3.12 on and words its refusal of a bad traceback its own way (CPython's
``test_future_iter_throw``).  The compiled ``__await__`` is a Cython generator, which does
neither; the pure build's is a Python generator, which warns but words the refusal as
generators do.  ``await`` reaches ``__await__`` through the type's slot and never comes
here, so that path keeps the generator's speed; ``iter(future)`` (``yield from future`` in
a generator-based coroutine) gets this wrapper.
"""

from __future__ import annotations

import sys
import warnings
from asyncio import futures
from collections.abc import Generator
from types import TracebackType
from typing import Any

_WARNS = sys.version_info >= (3, 12)
# Where asyncio's Future is the pure-Python one (PyPy), its iterator is a generator too.
_C_FUTURE_ITER = futures.Future is not getattr(futures, "_PyFuture", futures.Future)
_NOT_GIVEN: Any = object()


class FutureIterator:
    """A future's iterator: the generator of ``__await__``, with asyncio's ``throw()``."""

    __slots__ = ("_generator",)

    def __init__(self, generator: Generator[Any, None, Any]) -> None:
        self._generator = generator

    def __iter__(self) -> FutureIterator:
        return self

    def __next__(self) -> Any:
        return self._generator.send(None)

    def send(self, value: Any) -> Any:
        return self._generator.send(value)

    def throw(self, typ: Any, value: Any = _NOT_GIVEN, traceback: Any = _NOT_GIVEN) -> Any:
        if value is _NOT_GIVEN and traceback is _NOT_GIVEN:
            if _C_FUTURE_ITER:
                _check_exception(typ, None)
            return self._generator.throw(typ)
        if _WARNS:
            # asyncio's words, before any check of the arguments, as asyncio does; the
            # warning points at the caller of throw().
            warnings.warn(
                "the (type, exc, tb) signature of throw() is deprecated, "
                "use the single-arg signature instead.",
                DeprecationWarning,
                stacklevel=2,
            )
        value = None if value is _NOT_GIVEN else value
        traceback = None if traceback is _NOT_GIVEN else traceback
        if _C_FUTURE_ITER:
            if traceback is not None and not isinstance(traceback, TracebackType):
                raise TypeError("throw() third argument must be a traceback")
            _check_exception(typ, value)
        with warnings.catch_warnings():
            # The generator's own deprecation of the same form: given once, above.
            warnings.simplefilter("ignore", DeprecationWarning)
            return self._generator.throw(typ, value, traceback)

    def close(self) -> None:
        self._generator.close()


def _check_exception(typ: Any, value: Any) -> None:
    """Refuse what asyncio's C FutureIter refuses, in its words."""
    if isinstance(typ, BaseException):
        if value is not None:
            raise TypeError("instance exception may not have a separate value")
    elif not (isinstance(typ, type) and issubclass(typ, BaseException)):
        raise TypeError(
            "exceptions must be classes deriving BaseException or instances of such a class"
        )
