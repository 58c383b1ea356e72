"""Cycles in the awaits graph: tasks that wait for each other, so none can finish.

One cycle is reported per strongly connected component (Tarjan's algorithm,
iterative so that a long chain of tasks cannot exhaust the recursion limit),
the shortest one through the component's first task in report order.
"""

from __future__ import annotations

from collections import deque


def _components(order: list[str], edges: dict[str, list[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in order:
        if root in index:
            continue
        work = [(root, iter(edges.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(edges.get(nxt, ()))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(component)
    return found


def _shortest_cycle(start: str, members: set[str], edges: dict[str, list[str]]) -> list[str]:
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in edges.get(node, ()):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                path.reverse()
                return [*path, start]
            if nxt in members and nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    return []


def find_cycles(order: list[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """Cycles as lists of node ids, each closed by its first node repeated."""
    rank = {node: i for i, node in enumerate(order)}
    cycles = []
    for component in _components(order, edges):
        members = set(component)
        start = min(component, key=lambda node: rank.get(node, len(rank)))
        if len(component) == 1 and start not in edges.get(start, ()):
            continue
        cycle = _shortest_cycle(start, members, edges)
        if cycle:
            cycles.append(cycle)
    cycles.sort(key=lambda cycle: rank.get(cycle[0], len(rank)))
    return cycles
