"""The import graph of snakeloop runs one way.

``_core`` and ``_io`` are the bottom layers and import nothing else from
snakeloop; feature modules never import ``loop``; only the entry points
import ``runner``; and there are no import cycles.  These rules keep the hot
path compilable on its own and stop the loop from turning into one big base
class again.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "src" / "snakeloop"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The snakeloop modules that ``path`` imports (absolute names)."""
    module = _module_name(path)
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("snakeloop"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[: -(node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("snakeloop"):
                continue
            found.add(target)
            # "from . import x" may name submodules.
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if _exists(candidate):
                    found.add(candidate)
    return found


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    base = PACKAGE_DIR / rel
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


GRAPH = {_module_name(p): _imports(p) for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_graph_was_read():
    assert "snakeloop._core.runloop" in GRAPH
    assert "snakeloop._core.handles" in GRAPH["snakeloop._core.runloop"]


@pytest.mark.parametrize("bottom", ["snakeloop._core", "snakeloop._io"])
def test_bottom_layers_import_only_themselves(bottom):
    for module, deps in GRAPH.items():
        if _in(module, bottom):
            outside = {d for d in deps if not _in(d, bottom)}
            assert not outside, f"{module} imports {sorted(outside)}"


def test_only_entry_points_import_the_loop_and_runner():
    allowed = {
        "snakeloop.loop": {"snakeloop.runner", "snakeloop", "snakeloop.__main__"},
        "snakeloop.runner": {"snakeloop", "snakeloop.__main__"},
    }
    for target, importers in allowed.items():
        for module, deps in GRAPH.items():
            if target in deps:
                assert module in importers, f"{module} imports {target}"


def test_nothing_in_the_package_imports_testing():
    for module, deps in GRAPH.items():
        if _in(module, "snakeloop.testing"):
            continue
        assert not any(_in(d, "snakeloop.testing") for d in deps), module


def test_no_import_cycles():
    # Package __init__ modules re-export and are imported implicitly by their
    # submodules; count only module-to-module edges.
    edges = {
        m: {d for d in deps if d in GRAPH and d != m and not m.startswith(d + ".")}
        for m, deps in GRAPH.items()
    }
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for dep in edges[node]:
            if state.get(dep) == 1:
                cycle = path[path.index(dep) :] + [dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for module in edges:
        if module not in state:
            visit(module, [module])
