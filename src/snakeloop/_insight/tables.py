"""``ps`` and ``pstree`` of a snapshot, in the layout of Python 3.14's ``python -m asyncio``.

The facts of that layout: ``ps`` prints a header of seven left-aligned
columns (widths 10, 20, 20, 50, 50, 15, 15), a rule of 180 dashes, then one
row per task and awaiting task (one row with empty awaiter columns and
awaiter id ``0x0`` for a task nobody awaits).  Stacks list function names
innermost first, joined by `` -> ``; the awaiter chain is the awaiting
task's stack.  ``pstree`` draws one tree per task nobody awaits: ``(T)
name`` for tasks, `` function file:line`` for coroutine frames (outermost
first down to the awaited task), frames shared by several awaited tasks
drawn once, and a task that awaits no task followed by its own stack.  An
await cycle is an error: ``ERROR: await-graph contains cycles - cannot
print a tree!``, a blank line and ``cycle: a → b → a`` lines on stderr.

File names are as snakeloop's reports give them: relative to the
program's working directory, or to the standard library.
"""

from __future__ import annotations

from typing import Any

PS_WIDTHS = (10, 20, 20, 50, 50, 15, 15)
PS_HEADER = (
    "tid",
    "task id",
    "task name",
    "coroutine stack",
    "awaiter chain",
    "awaiter name",
    "awaiter id",
)


class CycleError(Exception):
    def __init__(self, cycles: list[list[str]], names: dict[str, str]) -> None:
        super().__init__(cycles)
        self.cycles = cycles
        self.names = names

    def lines(self) -> list[str]:
        found = ["ERROR: await-graph contains cycles - cannot print a tree!", ""]
        for cycle in self.cycles:
            found.append("cycle: " + " → ".join(self.names.get(i, i) for i in cycle))
        return found


def _tid(loop: dict[str, Any]) -> int:
    thread = loop.get("thread") or {}
    return int(thread.get("native_id") or thread.get("ident") or 0)


def _tasks(snapshot: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    found = []
    for loop in snapshot.get("loops", []):
        graph = loop.get("graph") or {}
        found += [(_tid(loop), task) for task in graph.get("tasks", [])]
    return found


def _functions(task: dict[str, Any]) -> list[str]:
    """The task's stack, innermost first."""
    return [frame["function"] for frame in reversed(task["frames"])]


def _entries(task: dict[str, Any]) -> list[str]:
    return [f"{f['function']} {f['file']}:{f['line']}" for f in reversed(task["frames"])]


def ps_rows(snapshot: dict[str, Any]) -> list[list[Any]]:
    tasks = _tasks(snapshot)
    by_id = {task["id"]: task for _, task in tasks}
    rows: list[list[Any]] = []
    for tid, task in tasks:
        stack = " -> ".join(_functions(task))
        if not task["awaited_by"]:
            rows.append([tid, task["id"], task["name"], stack, "", "", "0x0"])
            continue
        for edge in task["awaited_by"]:
            awaiter = by_id.get(edge["task"])
            chain = " -> ".join(_functions(awaiter)) if awaiter else ""
            rows.append([tid, task["id"], task["name"], stack, chain, edge["name"], edge["task"]])
    return rows


def _ps_line(values: list[Any] | tuple[Any, ...]) -> str:
    return " ".join(f"{value:<{width}}" for value, width in zip(values, PS_WIDTHS, strict=True))


def format_ps(snapshot: dict[str, Any]) -> str:
    lines = [_ps_line(PS_HEADER), "-" * 180]
    lines += [_ps_line(row) for row in ps_rows(snapshot)]
    return "\n".join(lines) + "\n"


def _cycles(order: list[str], awaits: dict[str, list[str]]) -> list[list[str]]:
    """Every back edge of a depth-first walk, as the path it closes."""
    colour: dict[str, int] = {}
    path: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        colour[node] = 1
        path.append(node)
        for child in awaits.get(node, []):
            if colour.get(child, 0) == 0:
                visit(child)
            elif colour[child] == 1:
                cycles.append(path[path.index(child) :] + [child])
        colour[node] = 2
        path.pop()

    for node in order:
        if node in awaits and colour.get(node, 0) == 0:
            visit(node)
    return cycles


def pstree_lines(snapshot: dict[str, Any]) -> list[list[str]]:
    """One list of lines per tree; ``CycleError`` when tasks await each other in a cycle."""
    tasks = [task for _, task in _tasks(snapshot)]
    by_id = {task["id"]: task for task in tasks}
    names = {task["id"]: task["name"] for task in tasks}
    awaits: dict[str, list[str]] = {}
    links: list[tuple[str, list[str], str]] = []  # (awaiter, its stack innermost first, task)
    for task in tasks:
        for edge in task["awaited_by"]:
            waiting = by_id.get(edge["task"])
            links.append((edge["task"], _entries(waiting) if waiting else [], task["id"]))
            targets = awaits.setdefault(edge["task"], [])
            if task["id"] not in targets:
                targets.append(task["id"])
    cycles = _cycles(list(awaits), awaits)
    if cycles:
        raise CycleError(cycles, names)

    labels: dict[tuple[str, str], str] = {("T", i): f"(T) {name}" for i, name in names.items()}
    children: dict[tuple[str, str], list[tuple[str, str]]] = {}
    frame_nodes: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}

    def frame_node(parent: tuple[str, str], entry: str) -> tuple[str, str]:
        known = frame_nodes.setdefault(parent, {})
        if entry not in known:
            node = ("C", str(len(labels)))
            labels[node] = f" {entry}"
            children.setdefault(parent, []).append(node)
            known[entry] = node
        return known[entry]

    node: tuple[str, str]
    for awaiter_id, stack, awaited in links:
        node = ("T", awaiter_id)
        for entry in reversed(stack):
            node = frame_node(node, entry)
        kids = children.setdefault(node, [])
        if ("T", awaited) not in kids:
            kids.append(("T", awaited))
    awaiting = {link[0] for link in links}
    for task in tasks:
        if task["id"] not in awaiting and task["frames"]:
            node = ("T", task["id"])
            for entry in reversed(_entries(task)):
                node = frame_node(node, entry)

    def draw(node: tuple[str, str], prefix: str, last: bool, out: list[str]) -> None:
        out.append(f"{prefix}{'└── ' if last else '├── '}{labels[node]}")
        inner = prefix + ("    " if last else "│   ")
        kids = children.get(node, [])
        for i, kid in enumerate(kids):
            draw(kid, inner, i == len(kids) - 1, out)

    awaited_somewhere = {kid for kids in children.values() for kid in kids}
    trees = []
    for root in labels:
        if root not in awaited_somewhere:
            lines: list[str] = []
            draw(root, "", True, lines)
            trees.append(lines)
    return trees


def format_pstree(snapshot: dict[str, Any]) -> str:
    return "".join("\n".join(tree) + "\n" for tree in pstree_lines(snapshot))
