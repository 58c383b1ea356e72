"""The shape of snakeloop: its import graph, and the contract between the loop and its parts.

The import graph runs one way: ``_core`` and ``_io`` are the bottom layers
and import nothing else from snakeloop; feature modules never import
``loop``; only the entry points import ``runner``; there are no import
cycles; and the package imports nothing but the standard library.
``snakeloop.testing`` uses the loop as its users do, through the facade
and the public modules of virtual time and reports; its pytest plugin
modules alone import pytest.

The loop's parts (transports, helpers, the loop's own mixins) use a loop
through asyncio's public methods and the private members of
``snakeloop._core.contract.LoopContract``.  Outside ``_core/`` and
``loop.py``, ``loop._name`` and ``self._loop._name`` must name a contract
member, and so must ``self._name`` in a mixin class of ``Loop`` when the
mixin's module does not define ``_name`` itself.

The public API is annotated: every public function and method (outside
private modules and classes) has a return annotation and annotations on its
parameters, so ``py.typed`` is honest; mypy checks that they are right.

These rules keep the hot path compilable on its own and stop the loop from
turning into one big base class again.  Each rule is a function over source
text or over the graph, so the tests at the end can show it catching a
planted violation.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from snakeloop import Loop
from snakeloop._core.contract import CONTRACT_NAMES

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "src" / "snakeloop"

# ------------------------------------------------------------------ the import graph


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    base = PACKAGE_DIR / rel
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _imported_modules(tree: ast.AST, package: str) -> Iterator[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``tree``.

    ``package`` resolves relative imports; ``from x import y`` also yields
    ``x.y`` when that is a snakeloop module.
    """
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[: -(node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target
            if target.startswith("snakeloop"):
                for alias in node.names:
                    candidate = f"{target}.{alias.name}"
                    if _exists(candidate):
                        yield node.lineno, candidate


def _imports(path: Path) -> set[str]:
    """The snakeloop modules that ``path`` imports (absolute names)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    return {name for _, name in _imported_modules(tree, package) if _in(name, "snakeloop")}


GRAPH = {_module_name(p): _imports(p) for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def bottom_layer_violations(graph: dict[str, set[str]], bottom: str) -> list[str]:
    """Modules of ``bottom`` that import snakeloop modules outside it."""
    found = []
    for module, deps in graph.items():
        if _in(module, bottom):
            outside = {d for d in deps if not _in(d, bottom)}
            if outside:
                found.append(f"{module} imports {sorted(outside)}")
    return found


ENTRY_POINT_IMPORTERS = {
    "snakeloop.loop": {"snakeloop.runner", "snakeloop", "snakeloop.__main__"},
    "snakeloop.runner": {"snakeloop", "snakeloop.__main__"},
}


def entry_point_violations(graph: dict[str, set[str]]) -> list[str]:
    """Modules that import ``loop`` or ``runner`` without being an entry point."""
    return [
        f"{module} imports {target}"
        for target, importers in ENTRY_POINT_IMPORTERS.items()
        for module, deps in graph.items()
        if target in deps and module not in importers
    ]


def import_cycles(graph: dict[str, set[str]]) -> list[str]:
    """One cycle per strongly connected knot, as ``a -> b -> a``."""
    # Package __init__ modules re-export and are imported implicitly by their
    # submodules; count only module-to-module edges.
    edges = {
        m: {d for d in deps if d in graph and d != m and not m.startswith(d + ".")}
        for m, deps in graph.items()
    }
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(edges[node]):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(path[path.index(dep) :] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    return cycles


# Modules the package may import besides the standard library and itself.
# ``_typeshed`` exists only for the type checker (under TYPE_CHECKING).
_TYPE_CHECKING_ONLY = frozenset({"_typeshed"})


def non_stdlib_imports(source: str, path: str, package: str) -> list[str]:
    """``path:line: name`` for each import of something outside the stdlib and snakeloop.

    snakeloop runs on the standard library alone; a test helper, pytest,
    hypothesis or any other distribution imported from the package would
    make it depend on the test extras.
    """
    found = []
    for line, name in _imported_modules(ast.parse(source, path), package):
        top = name.partition(".")[0]
        if top == "snakeloop" or top in sys.stdlib_module_names or top in _TYPE_CHECKING_ONLY:
            continue
        found.append(f"{path}:{line}: {name}")
    return found


# snakeloop.testing: what it may import of snakeloop besides itself.
TESTING = "snakeloop.testing"
TESTING_MAY_IMPORT = frozenset(
    {
        "snakeloop",
        "snakeloop.virtualclock",
        "snakeloop.virtualtime",
        "snakeloop.exceptions",
        "snakeloop.insight",
        "snakeloop.seeding",
        "snakeloop.perturbation",
        "snakeloop.tracefile",
    }
)


def _is_pytest_plugin_module(module: str) -> bool:
    """pytest loads these (the entry point and its helpers): they may import it."""
    name = module.rpartition(".")[2]
    return _in(module, TESTING) and (name == "pytest_plugin" or name.startswith("_pytest_"))


def violations_of_the_testing_rule(source: str, path: str, module: str) -> list[str]:
    """``path:line: name`` for each import a module of ``snakeloop.testing`` may not make.

    The testing package builds loops as its users do, through the facade
    and the public modules of virtual time and reports, so that it tests
    what they get; only its pytest plugin modules import pytest, and only
    its Hypothesis hook imports hypothesis, so that ``import snakeloop.testing``
    works without the test extras.
    """
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = []
    for line, name in _imported_modules(ast.parse(source, path), package):
        top = name.partition(".")[0]
        if top == "snakeloop":
            allowed = _in(name, TESTING) or name in TESTING_MAY_IMPORT
        elif top == "pytest":
            allowed = _is_pytest_plugin_module(module)
        elif top == "hypothesis":
            # Its entry point's hook, called by Hypothesis itself.
            allowed = module == "snakeloop.testing._hypothesis"
        else:
            allowed = top in sys.stdlib_module_names or top in _TYPE_CHECKING_ONLY
        if not allowed:
            found.append(f"{path}:{line}: {name}")
    return found


def test_graph_was_read():
    assert "snakeloop._core.runloop" in GRAPH
    assert "snakeloop._core.handles" in GRAPH["snakeloop._core.runloop"]


@pytest.mark.parametrize("bottom", ["snakeloop._core", "snakeloop._io"])
def test_bottom_layers_import_only_themselves(bottom):
    assert bottom_layer_violations(GRAPH, bottom) == []


def test_only_entry_points_import_the_loop_and_runner():
    assert entry_point_violations(GRAPH) == []


def test_no_import_cycles():
    assert import_cycles(GRAPH) == []


# Optional integrations: the module may import this library, inside the
# function its user calls, never when the module itself is imported.
OPTIONAL_INTEGRATIONS = {"metrics/otel.py": "opentelemetry"}


def _module_level_imports(source: str) -> set[str]:
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def _compile_time_cython_lines(source: str) -> set[int]:
    """Lines of ``import cython`` under ``if False:``: Cython reads them, Python never runs them.

    The hot modules import ``cythonshim`` in the ``else`` branch (setup.py compiles them).
    """
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Constant)):
            continue
        if node.test.value is not False or not node.orelse:
            continue
        for inner in node.body:
            if isinstance(inner, ast.Import) and [a.name for a in inner.names] == ["cython"]:
                lines.add(inner.lineno)
    return lines


def test_the_package_imports_only_the_standard_library():
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        module = _module_name(path)
        if _in(module, TESTING):
            continue  # its own rule, below, which also admits pytest in the plugin
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        rel = _relative(path)
        source = path.read_text()
        optional = OPTIONAL_INTEGRATIONS.get(rel)
        compile_time = _compile_time_cython_lines(source)
        for line in non_stdlib_imports(source, rel, package):
            imported = line.rsplit(": ", 1)[1]
            if imported == "cython" and int(line.split(":")[1]) in compile_time:
                continue
            if optional and (imported == optional or imported.startswith(optional + ".")):
                continue
            found.append(line)
        if optional:
            at_import = _module_level_imports(source)
            assert not [m for m in at_import if m.split(".")[0] == optional], rel
    assert found == []


def test_the_testing_package_uses_the_public_api_and_pytest_only_in_the_plugin():
    found = []
    for path in sorted((PACKAGE_DIR / "testing").rglob("*.py")):
        source = path.read_text()
        found += violations_of_the_testing_rule(source, _relative(path), _module_name(path))
    assert "snakeloop.testing.pytest_plugin" in GRAPH
    assert found == []


# ------------------------------------------------------------------ the loop contract

# Names an expression holding a loop goes by in the package.
_LOOP_NAMES = frozenset({"loop", "_loop"})
_ATTRIBUTE_BUILTINS = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE_DIR).as_posix()


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_loop(node: ast.expr) -> bool:
    """``loop``, ``_loop``, ``x.loop`` or ``x._loop`` (``self._loop``, ``transport._loop``)."""
    if isinstance(node, ast.Name):
        return node.id in _LOOP_NAMES
    return isinstance(node, ast.Attribute) and node.attr in _LOOP_NAMES


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _attribute_uses(tree: ast.AST) -> Iterator[tuple[ast.expr, str, int]]:
    """``(object, name, line)`` for ``obj.name`` and ``getattr(obj, "name")`` & co."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            yield node.value, node.attr, node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _ATTRIBUTE_BUILTINS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            yield node.args[0], node.args[1].value, node.lineno


def _defined_names(tree: ast.AST) -> set[str]:
    """What a module defines for ``self``: methods, class attributes, ``self.x = ...``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    targets = []
                    if isinstance(stmt, ast.Assign):
                        targets = stmt.targets
                    elif isinstance(stmt, ast.AnnAssign):
                        targets = [stmt.target]
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and _is_self(node.value)
        ):
            names.add(node.attr)
    return names


def contract_violations(
    source: str, path: str, mixin_classes: frozenset[str], contract: frozenset[str]
) -> list[str]:
    """``path:line: ...`` for each private loop name used outside ``contract``."""
    tree = ast.parse(source, path)
    found = set()
    for obj, name, line in _attribute_uses(tree):
        if _is_private(name) and name not in contract and _is_loop(obj):
            found.add((line, f"{ast.unparse(obj)}.{name}"))
    defined = _defined_names(tree)
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and cls.name in mixin_classes:
            for obj, name, line in _attribute_uses(cls):
                if (
                    _is_self(obj)
                    and _is_private(name)
                    and name not in contract
                    and name not in defined
                ):
                    found.add((line, f"self.{name} (in mixin {cls.name})"))
    return [f"{path}:{line}: {what} is not in the loop contract" for line, what in sorted(found)]


def loop_mixins(loop_source: str) -> dict[str, frozenset[str]]:
    """``{module path: mixin class names}`` for the bases of ``class Loop`` in loop.py."""
    tree = ast.parse(loop_source)
    origin = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                origin[alias.asname or alias.name] = (node.module, alias.name)
    mixins: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Loop":
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in origin:
                    module, name = origin[base.id]
                    mixins.setdefault(module.replace(".", "/") + ".py", set()).add(name)
    return {path: frozenset(names) for path, names in mixins.items()}


def _held_to_the_contract(rel: str) -> bool:
    return not (rel == "loop.py" or rel.startswith("_core/"))


def test_the_loop_mixins_were_found():
    mixins = loop_mixins((PACKAGE_DIR / "loop.py").read_text())
    assert mixins["sockets.py"] == {"SocketMixin"}
    assert mixins["pipes.py"] == {"PipesMixin"}
    assert all((PACKAGE_DIR / path).exists() for path in mixins)


def test_parts_use_only_the_loop_contract():
    mixins = loop_mixins((PACKAGE_DIR / "loop.py").read_text())
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = _relative(path)
        if not _held_to_the_contract(rel):
            continue
        found += contract_violations(
            path.read_text(), rel, mixins.get(rel, frozenset()), CONTRACT_NAMES
        )
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", sorted(CONTRACT_NAMES))
def test_the_loop_provides_every_contract_member(name):
    assert hasattr(Loop, name), f"snakeloop.Loop has no {name}"


# ------------------------------------------------------------------ the public API is annotated


def _is_private_module(rel: str) -> bool:
    """``_io/epoll.py`` is public by this rule, ``_io/_events.py`` is not (packages don't count)."""
    return _is_private(Path(rel).stem)


def _unannotated_parts(node: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> list[str]:
    args = node.args
    positional = args.posonlyargs + args.args
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    if method and not static and positional:
        positional = positional[1:]  # self or cls
    params = positional + args.kwonlyargs
    params += [p for p in (args.vararg, args.kwarg) if p is not None]
    missing = [p.arg for p in params if p.annotation is None]
    if node.returns is None:
        missing.append("return")
    return missing


def unannotated_public_functions(source: str, path: str) -> list[str]:
    """``path:line: name (what is missing)`` for each public function lacking an annotation.

    Public: a function or method whose name does not start with ``_``, at
    module level or in a class whose name does not start with ``_`` (also
    under ``if``/``try``, as version-dependent definitions are).  The
    first parameter of a method (``self``/``cls``) needs none.  Functions
    nested in functions are not API.
    """
    found = []

    def visit(body: list[ast.stmt], prefix: str, in_class: bool) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                if not node.name.startswith("_"):
                    visit(node.body, f"{prefix}{node.name}.", True)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name.startswith("_"):
                    continue
                missing = _unannotated_parts(node, in_class)
                if missing:
                    what = ", ".join(missing)
                    found.append(f"{path}:{node.lineno}: {prefix}{node.name} ({what})")
            elif isinstance(node, ast.If):
                visit(node.body, prefix, in_class)
                visit(node.orelse, prefix, in_class)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody):
                    visit(block, prefix, in_class)
                for handler in node.handlers:
                    visit(handler.body, prefix, in_class)

    visit(ast.parse(source, path).body, "", False)
    return found


def test_public_functions_are_annotated():
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = _relative(path)
        if _is_private_module(rel):
            continue
        found += unannotated_public_functions(path.read_text(), rel)
    assert not found, f"{len(found)} public functions lack annotations:\n" + "\n".join(found)


# ------------------------------------------------------------------ the rules catch violations

_PLANTED_TRANSPORT = """\
class Transport:
    def start(self, loop):
        self._loop = loop
        loop._attach_transport(3, self)
        loop._transports[3] = self
        if 3 in self._loop._readers:
            self._loop._add_reader(3, print)
        view = getattr(loop, "_shared_recv_view", None)
        self._private = self._loop.call_soon(print)
"""

_PLANTED_MIXIN = """\
class FooMixin:
    _flag = False

    def _init_foo(self):
        self._state = 0

    def run(self):
        self._state += 1
        self._debug
        self._helper()
        self._io.close()
        return self._flag, self._add_writer

    def _helper(self):
        self._waker.wake()


class NotAMixin:
    def run(self):
        return self._anything
"""


def test_contract_rule_reports_every_planted_reach_in_with_its_line():
    found = contract_violations(_PLANTED_TRANSPORT, "planted.py", frozenset(), CONTRACT_NAMES)
    assert found == [
        "planted.py:5: loop._transports is not in the loop contract",
        "planted.py:6: self._loop._readers is not in the loop contract",
        "planted.py:8: loop._shared_recv_view is not in the loop contract",
    ]


def test_contract_rule_holds_mixins_to_their_own_names_and_the_contract():
    found = contract_violations(
        _PLANTED_MIXIN, "planted.py", frozenset({"FooMixin"}), CONTRACT_NAMES
    )
    assert found == [
        "planted.py:11: self._io (in mixin FooMixin) is not in the loop contract",
        "planted.py:15: self._waker (in mixin FooMixin) is not in the loop contract",
    ]


def test_loop_mixins_are_read_from_the_bases_of_loop():
    source = (
        "from .a import AMixin\nfrom .b.c import CMixin as Renamed\nfrom x import Other\n"
        "class Loop(AMixin, Renamed, Other, object):\n    pass\n"
    )
    assert loop_mixins(source) == {"a.py": {"AMixin"}, "b/c.py": {"CMixin"}}


def test_import_rule_reports_test_only_and_third_party_modules():
    source = (
        "import asyncio, pytest\n"
        "from hypothesis import given\n"
        "from . import sockets\n"
        "import tests._loopkit\n"
        "from collections.abc import Callable\n"
        "import aiohttp.web\n"
    )
    assert non_stdlib_imports(source, "planted.py", "snakeloop") == [
        "planted.py:1: pytest",
        "planted.py:2: hypothesis",
        "planted.py:4: tests._loopkit",
        "planted.py:6: aiohttp.web",
    ]


_PLANTED_TESTING = """\
import asyncio, pytest
import snakeloop
from snakeloop import loop, new_event_loop
from snakeloop.virtualclock import VirtualClock
from .. import runner
from .._core import futures
from . import _settings
from ..exceptions import DeadlockError
import anyio
"""


def test_testing_rule_reports_private_modules_third_parties_and_pytest_outside_the_plugin():
    assert violations_of_the_testing_rule(
        _PLANTED_TESTING, "testing/_helper.py", "snakeloop.testing._helper"
    ) == [
        "testing/_helper.py:1: pytest",
        "testing/_helper.py:3: snakeloop.loop",
        "testing/_helper.py:5: snakeloop.runner",
        "testing/_helper.py:6: snakeloop._core",
        "testing/_helper.py:6: snakeloop._core.futures",
        "testing/_helper.py:9: anyio",
    ]
    for plugin in ("pytest_plugin", "_pytest_loops"):
        found = violations_of_the_testing_rule(
            _PLANTED_TESTING, f"testing/{plugin}.py", f"snakeloop.testing.{plugin}"
        )
        assert not any(hit.endswith(": pytest") for hit in found)
        assert len(found) == 5


def test_graph_rules_report_planted_edges():
    planted = {m: set(deps) for m, deps in GRAPH.items()}
    planted["snakeloop._core.handles"].add("snakeloop.sockets")
    planted["snakeloop.sockets"].add("snakeloop.loop")
    planted["snakeloop.dns"].add("snakeloop.sockets")
    planted["snakeloop.sockets"].add("snakeloop.dns")
    assert bottom_layer_violations(planted, "snakeloop._core") == [
        "snakeloop._core.handles imports ['snakeloop.sockets']"
    ]
    assert entry_point_violations(planted) == ["snakeloop.sockets imports snakeloop.loop"]
    knots = [set(cycle.split(" -> ")) for cycle in import_cycles(planted)]
    assert {"snakeloop.dns", "snakeloop.sockets"} in knots


_PLANTED_API = """\
def typed(a: int, *rest: str, flag: bool = False, **more: object) -> None: ...
def untyped(a, b: int): ...
async def no_return(a: int): ...
def bare_star(*args, **kwargs) -> None: ...
def _private(a): ...

class Public:
    def method(self, a: int) -> int: ...
    def bad(self, a) -> None: ...
    @staticmethod
    def static(a) -> None: ...
    @classmethod
    def make(cls) -> "Public": ...
    def __init__(self, a): ...
    def _helper(self, a): ...
    if VERSION >= (3, 13):
        def newer(self, a: int): ...
    class Inner:
        def deep(self, a): ...

class _Private:
    def method(self, a): ...

def outer() -> None:
    def nested(a): ...
"""


def test_annotation_rule_reports_every_planted_gap():
    assert unannotated_public_functions(_PLANTED_API, "planted.py") == [
        "planted.py:2: untyped (a, return)",
        "planted.py:3: no_return (return)",
        "planted.py:4: bare_star (args, kwargs)",
        "planted.py:9: Public.bad (a)",
        "planted.py:11: Public.static (a)",
        "planted.py:17: Public.newer (return)",
        "planted.py:19: Public.Inner.deep (a, return)",
    ]


def test_annotation_rule_skips_private_modules_only():
    assert _is_private_module("_io/_events.py")
    assert not _is_private_module("_io/epoll.py")
    assert not _is_private_module("_core/futures.py")
    assert not _is_private_module("__init__.py")
    assert not _is_private_module("transports/__init__.py")


# ------------------------------------------------------------------ sizes (issue 35)

# A module has one job, which fits in this many lines; the run loop's iteration and a
# task's step fit one screen each, so that they read as the steps they are made of.
MAX_MODULE_LINES = 1000
MAX_SCREEN_LINES = 100
# (module path under src/snakeloop, dotted name of the function)
ONE_SCREEN_FUNCTIONS = [
    ("_core/runloop.py", "CoreLoop._run_iterations"),
    ("_core/futures.py", "Task._step_now"),
    ("_core/handles.py", "Handle._run"),
]
# Still too long, each a strict xfail until it is split (issue 35): one that shrinks
# under its limit fails here until it leaves this list.
TOO_LONG_STILL = {
    "_core/runloop.py": "the run loop, the timer tables and the timed ready loop in one module",
    "loop.py": "the public loop: running, closing, fork safety, futures, tasks and fds",
    "_core/futures.py": "Future and Task, with the views and helpers they share",
}


def module_lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def function_lines(source: str, dotted: str) -> int | None:
    """Lines of the function ``dotted`` (``Class.method``) in ``source``, from ``def``
    (decorators left out) to its last line; None when it is not there."""
    *owners, name = dotted.split(".")
    body: list[ast.stmt] = ast.parse(source).body
    for owner in owners:
        found = [n for n in _walk_class_level(body) if isinstance(n, ast.ClassDef)]
        match = next((n for n in found if n.name == owner), None)
        if match is None:
            return None
        body = match.body
    for node in _walk_class_level(body):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            assert node.end_lineno is not None
            return node.end_lineno - node.lineno + 1
    return None


def _walk_class_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of ``body``, and those under its ``if``/``else`` (a definition
    made per build sits there)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _walk_class_level(node.body)
            yield from _walk_class_level(node.orelse)


def _limit_marks(key: str) -> Any:
    if key in TOO_LONG_STILL:
        return pytest.mark.xfail(strict=True, reason=TOO_LONG_STILL[key])
    return ()


@pytest.mark.parametrize(
    "module",
    [
        pytest.param(key, marks=_limit_marks(key))
        for key in (str(p.relative_to(PACKAGE_DIR)) for p in sorted(PACKAGE_DIR.rglob("*.py")))
    ],
)
def test_no_module_is_over_the_line_limit(module):
    assert module_lines(PACKAGE_DIR / module) <= MAX_MODULE_LINES


@pytest.mark.parametrize(
    ("module", "function"),
    [pytest.param(m, f, marks=_limit_marks(f)) for m, f in ONE_SCREEN_FUNCTIONS],
)
def test_the_hot_functions_fit_one_screen(module, function):
    lines = function_lines((PACKAGE_DIR / module).read_text(), function)
    assert lines is not None, f"{function} is not in {module}"
    assert lines <= MAX_SCREEN_LINES, f"{function} is {lines} lines"


def test_size_rules_measure_what_they_say():
    planted = (
        "class A:\n    if X:\n\n        def f(self):\n            pass\n\n            return 1\n"
    )
    assert function_lines(planted, "A.f") == 4
    assert function_lines(planted, "A.g") is None
    assert function_lines(planted, "B.f") is None
    assert function_lines("def g():\n    return 2\n", "g") == 2
