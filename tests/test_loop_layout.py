"""A loop keeps its attributes in slots and never makes its ``__dict__`` (see ``Loop.__slots__``).

On 3.13, CPython specializes a method call on an instance only while the
instance's dict is unmade; one stray attribute, or one read of
``self.__dict__``, and every ``loop.call_soon()`` from Python code takes the
generic lookup.  Nothing fails then, it only gets slower, so these tests
say so.  From 3.14 a loop keeps its instance attributes inline (its type has
inline values) and its method calls specialize on those, dict or no dict.
"""

from __future__ import annotations

import asyncio
import dis
import socket
import sys

import pytest

import snakeloop


async def _a_bit_of_everything(loop: asyncio.AbstractEventLoop) -> None:
    async def child() -> int:
        await asyncio.sleep(0)
        return 1

    assert await asyncio.gather(*(child() for _ in range(3))) == [1, 1, 1]
    fired = loop.create_future()
    loop.call_later(0, fired.set_result, None).cancel()
    loop.call_later(0, fired.set_result, None)
    await fired
    assert await loop.run_in_executor(None, int, "7") == 7
    left, right = socket.socketpair()
    with left:
        reader, writer = await asyncio.open_connection(sock=right)
        left.sendall(b"ping\n")
        assert await reader.readline() == b"ping\n"
        writer.close()
        await writer.wait_closed()


def _run_a_bit_of_everything() -> snakeloop.Loop:
    loop = snakeloop.Loop()
    try:
        loop.run_until_complete(_a_bit_of_everything(loop))
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
    return loop


def test_a_loop_puts_nothing_in_its_dict() -> None:
    loop = _run_a_bit_of_everything()
    # vars() makes the dict here, at the end: it must have stayed empty.
    assert vars(loop) == {}


@pytest.mark.skipif(
    sys.implementation.name != "cpython" or sys.version_info < (3, 13),
    reason="CPython specializes method calls on a loop (without a dict on 3.13) from 3.13 on",
)
def test_method_calls_on_a_loop_that_ran_are_specialized() -> None:
    loop = _run_a_bit_of_everything()

    def call_many(loop: snakeloop.Loop) -> None:
        for _ in range(100):
            loop.is_closed()

    call_many(loop)
    names = [i.opname for i in dis.get_instructions(call_many, adaptive=True)]
    if sys.version_info >= (3, 14):
        assert "LOAD_ATTR_METHOD_WITH_VALUES" in names, names
    else:
        assert "LOAD_ATTR_METHOD_LAZY_DICT" in names, names
