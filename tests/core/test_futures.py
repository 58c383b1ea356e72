"""What snakeloop's Future and Task (src/snakeloop/_core/futures.py) promise about themselves.

Their behaviour is tested against asyncio's in tests/test_differential_future.py,
tests/test_differential_task.py and the conformance suite; this file checks the
module's own claims.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re

from snakeloop._core import futures


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
            and node.func.id in ("getattr", "hasattr", "setattr")
            and node.args
            and loop_expression(node.args[0])
        ):
            name = node.args[1]
            assert isinstance(name, ast.Constant), "a computed attribute name hides a reach-in"
            used.add(name.value)
    return used


def test_the_docstring_names_everything_the_module_uses_of_a_loop():
    source = inspect.getsource(futures)
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
