"""Where a task's last step began, read from its code after the step.

A slow stretch of callbacks is seen only after it ended, when the task that
blocked waits at its next ``await``; where it stood before the step was not
read, since reading it would cost every step a walk of its frames.  But a step
runs from one suspension to the next, so its start is one of the points from
which the code reaches the ``await`` where it waits without passing another:
the ``await`` before a blocking call in straight-line code, or the start of
the coroutine.  ``step_start`` finds those points in the bytecode, and names
one only when all of them are on one line.  Two guesses make that one point
most of the time, and can make it the wrong one: each ``await`` on the way is
taken to have suspended (not to have returned at once), and a yield is taken
over the coroutine's start (a step is seldom the first).  A record read this
way is a stretch's, seen after the fact; a timing window reads the start
before each step and needs no guess.

Bytecode facts relied on (CPython 3.11 to 3.15): a coroutine suspends at a
``YIELD_VALUE`` (an ``await`` is a ``SEND``/``YIELD_VALUE`` loop, the
``YIELD_VALUE`` being where a suspended frame's ``f_lasti`` points, or
next to it: 3.13 points at the ``RESUME`` after it); its first step resumes just after
``RETURN_GENERATOR``; ``dis`` gives each jump's target as ``argval`` and the
exception table as ``Bytecode.exception_entries``.  PyPy 3.11's bytecode has
an ``await`` as one ``YIELD_FROM``, where ``f_lasti`` stays, and no
``RETURN_GENERATOR``: its first step begins at offset 0.  Where the code is of
neither shape, nothing is named.
"""

from __future__ import annotations

import dis
import inspect
from functools import lru_cache
from typing import Any

__all__ = ["step_start"]

# Entries of _starts: the offset of the yield a step resumed after, or this for
# "the coroutine's first step".
_ENTRY = -1
_NO_FALLTHROUGH = frozenset(
    {
        "JUMP_FORWARD",
        "JUMP_BACKWARD",
        "JUMP_BACKWARD_NO_INTERRUPT",
        "JUMP",
        "JUMP_NO_INTERRUPT",
        "RETURN_VALUE",
        "RETURN_CONST",
        "RAISE_VARARGS",
        "RERAISE",
    }
)
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
# Where a frame suspends: CPython's await is a SEND loop around a YIELD_VALUE, PyPy's
# (as CPython's before 3.11) one YIELD_FROM that stays put while the awaited code runs.
_YIELDS = frozenset({"YIELD_VALUE", "YIELD_FROM"})
_SUSPENDS = inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


def step_start(suspension: list[Any] | None, line_at: Any) -> tuple[Any, int] | None:
    """``(code, line)`` where the step that left the task at ``suspension`` (a
    ``suspension_of`` reading taken after it) began, or None when the code
    does not tell one line.

    The innermost frame is read first; when its only start is its own first
    step, the step began in the frame that awaited it, which is read the same
    way.  ``line_at(code, offset)`` gives an offset's line.
    """
    if not suspension:
        return None
    for index in range(len(suspension) - 2, -1, -2):
        where = suspension[index]
        code = getattr(where, "f_code", None)
        lasti = suspension[index + 1]
        if code is None or lasti < 0:
            return None
        try:
            starts = _starts(code, lasti)
        except Exception:  # bytecode of a shape this does not know
            return None
        if starts is None:
            return None
        if starts == (_ENTRY,) and index:
            continue  # the frame was entered in this step: look at its caller
        lines = {
            code.co_firstlineno if start == _ENTRY else line_at(code, start) for start in starts
        }
        if len(lines) != 1:
            return None
        return code, lines.pop()
    return None


@lru_cache(maxsize=512)
def _starts(code: Any, lasti: int) -> tuple[int, ...] | None:
    """The yields (offsets, or _ENTRY) after which a step of ``code`` can
    reach the yield at ``lasti`` without passing another, or None."""
    instructions = list(dis.get_instructions(code))
    at = {ins.offset: i for i, ins in enumerate(instructions)}
    end = _yield_at(instructions, at, lasti)
    if end is None:
        return None
    preds: dict[int, list[int]] = {i: [] for i in range(len(instructions))}
    for i, ins in enumerate(instructions):
        if ins.opname not in _NO_FALLTHROUGH and i + 1 < len(instructions):
            preds[i + 1].append(i)
        if ins.opcode in _JUMPS and isinstance(ins.argval, int) and ins.argval in at:
            preds[at[ins.argval]].append(i)
    # Read by name: typeshed lacks it, and a bytecode without a table (PyPy's) has none.
    table = getattr(dis.Bytecode(code), "exception_entries", None)
    if table is None:
        return None
    for entry in table:
        target = at.get(entry.target)
        if target is None:
            continue
        for i, ins in enumerate(instructions):
            if entry.start <= ins.offset < entry.end:
                preds[target].append(i)
    # An await is a loop: SEND, YIELD_VALUE, RESUME, then a jump back to SEND.
    # Going back from the await where the frame waits, its own loop leads to the
    # same yield: a step that starts there is the awaited code's, not a run of
    # this frame's lines, so the walk enters that await from the code before it.
    # Any await met on the way (that one too, in a loop) is taken to have
    # suspended the frame, the step coming out of its loop, not to have
    # finished at once: that is what an await in front of a blocking call
    # usually did, and without it every await would let the step start anywhere
    # before it.
    send = end - 1 if end and instructions[end - 1].opname == "SEND" else None
    starts: set[int] = set()
    seen: set[int] = set()
    todo: list[int] = []

    def reach(p: int) -> None:
        ins = instructions[p]
        if ins.opname in _YIELDS:
            starts.add(ins.offset)
        elif ins.opname == "RETURN_GENERATOR":
            starts.add(_ENTRY)
        elif p not in seen:
            seen.add(p)
            todo.append(p)

    if send is None:
        for p in preds[end]:
            reach(p)
    else:
        # Into the await where it waits, from the code before it (its loop is
        # the one way out that is not this frame's).
        for p in preds[send]:
            if p < send:
                reach(p)
    while todo:
        i = todo.pop()
        is_send = instructions[i].opname == "SEND"
        for p in preds[i]:
            if is_send and p < i:
                continue  # an await on the way suspended: out of its loop only
            reach(p)
    if 0 in seen:
        if instructions[0].opname == "RETURN_GENERATOR" or not code.co_flags & _SUSPENDS:
            return None  # reached without a yield or the generator's start: not the shape known
        # No RETURN_GENERATOR (PyPy): the first instruction is where a first step begins.
        starts.add(_ENTRY)
    if not starts:
        return None
    if len(starts) > 1:
        # The coroutine's first step is one of many, and the way from its start
        # often runs only through an exception no line raised (any instruction
        # in a try may): a yield that leads here is the likelier start.
        starts.discard(_ENTRY)
    return tuple(sorted(starts))


def _yield_at(instructions: list[Any], at: dict[int, int], lasti: int) -> int | None:
    """The index of the YIELD_VALUE a suspended frame with ``f_lasti`` stands at."""
    i = at.get(lasti)
    if i is None:
        return None
    # At the yield itself, or (3.13+) at the RESUME after it, or one before it.
    for j in (i, i - 1, i + 1):
        if 0 <= j < len(instructions) and instructions[j].opname in _YIELDS:
            return j
    return None
