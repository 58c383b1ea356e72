"""How snakeloop's Future and Task look to ``isinstance`` and to type checkers.

Kept apart from ``futures.py``, which holds what runs: nothing here is on a
hot path.  ``isinstance_view`` makes the class that a snakeloop future's
``__class__`` returns, so ``isinstance(fut, asyncio.Future)`` is true while
``type(fut)`` stays snakeloop's (docs/design.md, "Futures and tasks that pass
asyncio's class checks").  ``TypingOnlyGeneric`` makes ``Future[T]`` generic
to a type checker without a base class at run time.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TypingOnlyGeneric", "isinstance_view"]


class _GenericForTypeCheckers:
    """``Generic`` to type checkers; at run time a base that disappears.

    ``class Future(_TypingOnlyGeneric[_T])`` is a generic class to mypy,
    and a class with no base but ``object`` when it runs: ``Generic`` in
    the MRO would make ``Future[int]`` a ``typing`` alias where asyncio
    gives a ``types.GenericAlias``, and a compiled class cannot have a
    Python base.  ``Future[int]`` comes from ``__class_getitem__``.
    """

    __slots__ = ()

    def __getitem__(self, params):
        return self

    def __mro_entries__(self, bases):
        return ()


TypingOnlyGeneric = _GenericForTypeCheckers()


def _new_real(view: Any, *args: Any, **kwargs: Any) -> Any:
    # fut.__class__(...) builds a real snakeloop object.  type.__call__ does
    # not run __init__ again on it, since it is not an instance of the view.
    return view._real_class(*args, **kwargs)


def isinstance_view(cls: type, asyncio_class: type) -> type:
    """A never-instantiated subclass of ``asyncio_class`` that stands for ``cls``.

    ``fut.__class__`` returns it, so ``isinstance(fut, asyncio_class)`` is
    true; it has ``cls``'s name, so reprs and messages read as before.
    """
    return type(
        cls.__name__,
        (asyncio_class,),
        {
            "__slots__": (),
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
            "__new__": _new_real,
            "_real_class": cls,
        },
    )
