"""``LoopTime``: a number that always reads a loop's current ``loop.time()``.

The ``loop_time`` fixture hands a test one of these, so that
``assert loop_time == 3600`` after ``await asyncio.sleep(3600)`` reads the
time of that moment, as looptime's fixture does.  It is registered as a
``numbers.Real`` so that ``pytest.approx`` and friends take it for one.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

__all__ = ["LoopTime"]


class LoopTime:
    """The current time of one loop, read afresh by every operation."""

    __slots__ = ("_read",)

    def __init__(self, read: Callable[[], float]) -> None:
        self._read = read

    def __float__(self) -> float:
        return float(self._read())

    def __int__(self) -> int:
        return int(self._read())

    def __round__(self, ndigits: int | None = None) -> Any:
        return round(self._read(), ndigits)

    def __repr__(self) -> str:
        return f"<loop time {self._read()!r}>"

    def __str__(self) -> str:
        return str(self._read())

    def __format__(self, spec: str) -> str:
        return format(self._read(), spec)

    def __bool__(self) -> bool:
        return bool(self._read())

    # A value that changes cannot be a dict key.
    __hash__ = None  # type: ignore[assignment]

    @staticmethod
    def _other(other: object) -> float | None:
        if isinstance(other, LoopTime):
            return other._read()
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return other
        if isinstance(other, numbers.Real):
            return float(other)
        return None

    def __eq__(self, other: object) -> bool:
        value = self._other(other)
        return NotImplemented if value is None else self._read() == value

    def __ne__(self, other: object) -> bool:
        value = self._other(other)
        return NotImplemented if value is None else self._read() != value

    def __lt__(self, other: object) -> bool:
        value = self._other(other)
        return NotImplemented if value is None else self._read() < value

    def __le__(self, other: object) -> bool:
        value = self._other(other)
        return NotImplemented if value is None else self._read() <= value

    def __gt__(self, other: object) -> bool:
        value = self._other(other)
        return NotImplemented if value is None else self._read() > value

    def __ge__(self, other: object) -> bool:
        value = self._other(other)
        return NotImplemented if value is None else self._read() >= value

    def __add__(self, other: object) -> float:
        value = self._other(other)
        return NotImplemented if value is None else self._read() + value

    __radd__ = __add__

    def __sub__(self, other: object) -> float:
        value = self._other(other)
        return NotImplemented if value is None else self._read() - value

    def __rsub__(self, other: object) -> float:
        value = self._other(other)
        return NotImplemented if value is None else value - self._read()

    def __mul__(self, other: object) -> float:
        value = self._other(other)
        return NotImplemented if value is None else self._read() * value

    __rmul__ = __mul__

    def __truediv__(self, other: object) -> float:
        value = self._other(other)
        return NotImplemented if value is None else self._read() / value

    def __rtruediv__(self, other: object) -> float:
        value = self._other(other)
        return NotImplemented if value is None else value / self._read()

    def __neg__(self) -> float:
        return -self._read()

    def __pos__(self) -> float:
        return +self._read()

    def __abs__(self) -> float:
        return abs(self._read())


numbers.Real.register(LoopTime)
