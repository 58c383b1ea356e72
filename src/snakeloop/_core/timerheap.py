"""The run loop's timer heap, as a binary heap in a list.

Interpreted, the heap holds deadlines (floats; see ``_core.runloop``'s
docstring), and heapq's own functions (C) keep it: ``heappush``, ``heappop``
and ``heapify`` here are heapq's.  Compiled, it holds the TimerHandles
themselves, ordered by two C fields that the loop sets when it schedules a
timer: ``_deadline``, the deadline as a double (``deadline_of``), then
``_seq``, the order in which timers of one deadline fire.  A comparison is
then two loads, with no float object to hash and no table beside the heap.
Every timer in a compiled heap knows its place (``_heap_index``), so that
cancel() takes it out at once (``heap_remove``).

The functions marked "compiled only" are called by the compiled paths alone.
"""

from __future__ import annotations

import heapq
from typing import Any

if False:  # Cython reads this import when it compiles the module (setup.py)
    import cython
else:
    from . import cythonshim as cython

__all__ = [
    "deadline_of",
    "earlier",
    "heap_remove",
    "heapify",
    "heappop",
    "heappush",
    "index_heap",
]

_INF = float("inf")
_NAN = float("nan")


def deadline_of(when: Any) -> Any:
    """``when`` as a double that orders as ``when`` does (compiled only).

    Rounding to the nearest double never inverts two numbers, so deadlines
    whose doubles differ are ordered by them; those whose doubles are equal
    are ordered by ``earlier``.  An int beyond the doubles' range is an
    infinity of its sign; what is not a number is NaN, which no deadline is
    before or after, so ``earlier`` compares the objects themselves and
    raises asyncio's TypeError.
    """
    try:
        deadline = when
    except OverflowError:
        deadline = _INF if when > 0 else -_INF
    except TypeError:
        deadline = _NAN
    return deadline


def earlier(a: Any, b: Any) -> Any:
    """Whether timer ``a`` fires before timer ``b`` (compiled only)."""
    x = a._deadline
    y = b._deadline
    if x < y:
        return True
    if y < x:
        return False
    a_when = a._when
    b_when = b._when
    if type(a_when) is not float or type(b_when) is not float:
        # Equal doubles, or NaN: ints or Fractions may still differ.  The
        # locals hold the numbers while their comparison runs (it may be
        # Python code that changes the timers).
        if a_when < b_when:
            return True
        if b_when < a_when:
            return False
    return a._seq < b._seq


def heappush(heap: Any, item: Any) -> Any:
    """``heapq.heappush``, for timers: ``item`` goes up from the end to its place."""
    heap.append(item)
    _sift_up(heap, len(heap) - 1, item)


# Each function below that moves a timer writes its new place (``_heap_index``).
def _sift_up(heap, pos, item):
    """Put ``item`` at ``pos`` or above it."""
    while pos > 0:
        parent_pos = (pos - 1) >> 1
        parent = heap[parent_pos]
        if not earlier(item, parent):
            break
        heap[pos] = parent
        parent._heap_index = pos
        pos = parent_pos
    heap[pos] = item
    item._heap_index = pos


def _sift_down(heap, pos, n, item):
    """Put ``item`` at ``pos`` or below it, among the first ``n`` entries."""
    child = 2 * pos + 1
    while child < n:
        right = child + 1
        smaller = heap[child]
        if right < n:
            other = heap[right]
            if earlier(other, smaller):
                child = right
                smaller = other
        if not earlier(smaller, item):
            break
        heap[pos] = smaller
        smaller._heap_index = pos
        pos = child
        child = 2 * pos + 1
    heap[pos] = item
    item._heap_index = pos


def heappop(heap: Any) -> Any:
    """``heapq.heappop``, for timers: the last item goes down from the top to its place."""
    last = heap.pop()
    n = len(heap)
    if not n:
        return last
    first = heap[0]
    _sift_down(heap, 0, n, last)
    return first


def index_heap(heap: Any) -> Any:
    """Tell every timer of a rebuilt heap its place (compiled only)."""
    n = len(heap)
    pos = 0
    while pos < n:
        timer = heap[pos]
        timer._heap_index = pos
        pos += 1


def heapify(heap: Any) -> Any:
    """``heapq.heapify``, for timers."""
    index_heap(heap)
    n = len(heap)
    pos = n // 2 - 1
    while pos >= 0:
        _sift_down(heap, pos, n, heap[pos])
        pos -= 1


def heap_remove(heap: Any, timer: Any) -> Any:
    """Take ``timer`` out of the heap, wherever it is: the last entry fills its place.

    Compiled only.
    """
    pos = timer._heap_index
    if pos >= len(heap) or heap[pos] is not timer:
        raise RuntimeError(
            f"snakeloop internal error: {timer!r} is not at its place in the timer heap"
        )
    last = heap.pop()
    if last is timer:
        return
    if pos > 0 and earlier(last, heap[(pos - 1) >> 1]):
        _sift_up(heap, pos, last)
    else:
        _sift_down(heap, pos, len(heap), last)


if not cython.compiled:
    heappush = heapq.heappush  # type: ignore[assignment]  # noqa: F811
    heappop = heapq.heappop  # type: ignore[assignment]  # noqa: F811
    heapify = heapq.heapify  # type: ignore[assignment]  # noqa: F811
