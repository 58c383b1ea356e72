"""What snakeloop's Future and Task (src/snakeloop/_core/futures.py) promise about themselves.

Their behaviour is tested against asyncio's in tests/test_differential_future.py,
tests/test_differential_task.py and the conformance suite; this file checks the
module's own claims.
"""

from __future__ import annotations

import ast
import asyncio
import gc
import re
import types
from pathlib import Path

import pytest

import snakeloop
from snakeloop._core import futures
from snakeloop._core.futures import Future, Task


def loop_expression(node: ast.expr) -> bool:
    """``loop`` or ``<anything>._loop``: an expression that holds a loop."""
    if isinstance(node, ast.Name):
        return node.id == "loop"
    return isinstance(node, ast.Attribute) and node.attr == "_loop"


def loop_attributes_used(tree: ast.AST) -> set[str]:
    """Every attribute the module reads or calls on a loop, getattr() included."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and loop_expression(node.value):
            used.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            # _plain_ready_attr is getattr, read in C when compiled.
            and node.func.id in ("getattr", "hasattr", "setattr", "_plain_ready_attr")
            and node.args
            and loop_expression(node.args[0])
        ):
            name = node.args[1]
            assert isinstance(name, ast.Constant), "a computed attribute name hides a reach-in"
            used.add(name.value)
    return used


def test_the_docstring_names_everything_the_module_uses_of_a_loop():
    # The .py file itself: in the compiled build the module is an extension,
    # which inspect.getsource() cannot read, built from this same file.
    source = (Path(futures.__file__).parent / "futures.py").read_text()
    # The paragraph that says which loop API the classes use.
    (paragraph,) = [p for p in futures.__doc__.split("\n\n") if "``call_soon``" in p]
    named = set(re.findall(r"``(\w+)``", paragraph))
    used = loop_attributes_used(ast.parse(source))
    private = {name for name in used if name.startswith("_")}
    public = used - private
    assert private == {name for name in named if name.startswith("_")}
    assert public <= named
    # The public ones are asyncio's loop API, which any loop has.
    assert all(hasattr(asyncio.AbstractEventLoop, name) for name in public)


@pytest.mark.parametrize(
    ("ours", "theirs"), [(Future, asyncio.Future), (Task, asyncio.Task)], ids=["Future", "Task"]
)
def test_subscripting_gives_what_asyncio_gives(ours, theirs):
    alias = ours[int]
    assert type(alias) is type(theirs[int]) is types.GenericAlias
    assert alias.__origin__ is ours
    assert alias.__args__ == (int,)


def test_the_generic_base_is_for_type_checkers_only():
    # Nothing between the classes and object: attribute lookups stay as short
    # as they were, and Future[int] stays asyncio's kind of alias.
    assert Future.__mro__ == (Future, object)
    assert Task.__mro__ == (Task, Future, object)


def test_a_new_future_or_task_has_no_dict_until_an_attribute_is_set():
    # Compiled, Cython's tp_new would give each one an empty __dict__, and
    # CPython specializes method calls only on instances without one.
    async def nothing():
        return None

    loop = snakeloop.Loop(stdlib_futures=False)
    try:
        fut = loop.create_future()
        task = loop.create_task(nothing())
        for obj in (fut, task):
            assert not [r for r in gc.get_referents(obj) if type(r) is dict], obj
        fut.tag = 1
        assert fut.tag == 1
        assert vars(fut) == {"tag": 1}
        fut.cancel()
        loop.run_until_complete(task)
    finally:
        loop.close()


def _throw_outcomes(future_class, loop) -> list[tuple[str, str, list[str]]]:
    """What each form of throw() on ``iter(future)`` raises and warns (CPython's
    test_future_iter_throw, as data)."""
    import warnings

    forms = [
        (Exception, Exception("zebra"), None),
        (Exception, Exception("elephant"), 32),
        (Exception("elephant"), Exception("elephant")),
        (ValueError, None, None),
        (list,),
        (KeyError("one"),),
    ]
    outcomes = []
    for args in forms:
        iterator = iter(future_class(loop=loop))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                iterator.throw(*args)
            except BaseException as exc:  # noqa: BLE001 - the outcome is the point
                raised = (type(exc).__name__, str(exc))
            else:
                raised = ("nothing", "")
        outcomes.append((*raised, [f"{w.category.__name__}: {w.message}" for w in caught]))
    return outcomes


def test_throw_into_a_futures_iterator_raises_and_warns_as_on_asyncio():
    """The compiled __iter__ is a Cython generator, whose throw() did not deprecate the
    (type, value, traceback) form as asyncio's C FutureIter does from 3.12 on."""
    ours = snakeloop.new_event_loop(stdlib_futures=False)
    theirs = asyncio.new_event_loop()
    try:
        assert _throw_outcomes(Future, ours) == _throw_outcomes(asyncio.Future, theirs)
    finally:
        ours.close()
        theirs.close()
