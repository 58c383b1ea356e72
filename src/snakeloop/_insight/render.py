"""The task graph as report text and as JSON-ready data."""

from __future__ import annotations

from typing import Any

from .model import Edge, FrameLine, Graph, LoopState, TaskNode, Waiting


def _site(line: FrameLine) -> str:
    return f"{line.file}:{line.line}"


def _frame(line: FrameLine) -> str:
    text = f"{_site(line)} in {line.function}"
    return f"{text}: {line.source}" if line.source else text


def _via(edge: Edge) -> str:
    return f" (via {edge.via})" if edge.via else ""


def _header(node: TaskNode) -> str:
    details = [f"id {node.id}"]
    if node.created_at is not None:
        details.append(f"created at {_site(node.created_at)}")
    state = "" if node.state == "waiting" else f" {node.state}"
    return f"Task {node.name!r} ({', '.join(details)}){state}"


def _task_lines(node: TaskNode, names: dict[str, str]) -> list[str]:
    lines = [_header(node)]
    lines += [f"  awaits Task {names[e.awaited]!r}{_via(e)}" for e in node.awaits]
    for i, frame in enumerate(node.frames):
        branch = "└" if i == len(node.frames) - 1 else "├"
        lines.append(f"  {branch} {_frame(frame)}")
    if node.waits_on is not None:
        waits = node.waits_on
        lines.append(f"  waits on {waits.kind} ({waits.text}, id {waits.id})")
    lines += [f"  awaited by Task {names[e.awaiter]!r}{_via(e)}" for e in node.awaited_by]
    lines += [f"  awaited by loop.{caller}()" for caller in node.external_awaiters]
    return lines


def _loop_line(state: LoopState) -> str:
    clock = " (virtual)" if state.virtual else ""
    timers = "?" if state.timers is None else str(state.timers)
    fds = []
    for fd in state.fds:
        modes = ", ".join(m for m, on in (("read", fd.reading), ("write", fd.writing)) if on)
        fds.append(f"{fd.description} ({modes})" if modes else fd.description)
    return (
        f"Loop: loop.time()={state.time:.3f}{clock}, {state.ready} ready, "
        f"{timers} timers, fds: {', '.join(fds) or 'none'}"
    )


def format_text(graph: Graph) -> str:
    names = {node.id: node.name for node in graph.tasks}
    lines: list[str] = []
    for node in graph.tasks:
        lines += _task_lines(node, names)
    if not graph.tasks:
        lines.append("No pending tasks.")
    if graph.cycles:
        lines.append("Cycles:")
        for cycle in graph.cycles:
            lines.append("  " + " -> ".join(f"Task {names[i]!r}" for i in cycle))
    else:
        lines.append("Cycles: none")
    lines.append(_loop_line(graph.loop))
    return "\n".join(lines) + "\n"


def _frame_dict(line: FrameLine | None) -> dict[str, Any] | None:
    if line is None:
        return None
    return {"file": line.file, "line": line.line, "function": line.function, "source": line.source}


def _waiting_dict(waits: Waiting | None) -> dict[str, Any] | None:
    if waits is None:
        return None
    return {
        "kind": waits.kind,
        "id": waits.id,
        "owner": waits.owner,
        "state": dict(waits.state),
        "text": waits.text,
    }


def format_json(graph: Graph) -> dict[str, Any]:
    names = {node.id: node.name for node in graph.tasks}
    return {
        "tasks": [
            {
                "id": node.id,
                "name": node.name,
                "kind": node.kind,
                "state": node.state,
                "created_at": _frame_dict(node.created_at),
                "frames": [_frame_dict(frame) for frame in node.frames],
                "waits_on": _waiting_dict(node.waits_on),
                "awaits": [
                    {"task": e.awaited, "name": names[e.awaited], "via": e.via} for e in node.awaits
                ],
                "awaited_by": [
                    {"task": e.awaiter, "name": names[e.awaiter], "via": e.via}
                    for e in node.awaited_by
                ],
                "external_awaiters": list(node.external_awaiters),
            }
            for node in graph.tasks
        ],
        "cycles": [list(cycle) for cycle in graph.cycles],
        "loop": {
            "time": graph.loop.time,
            "virtual": graph.loop.virtual,
            "ready": graph.loop.ready,
            "timers": graph.loop.timers,
            "fds": [
                {
                    "fd": fd.fd,
                    "description": fd.description,
                    "reading": fd.reading,
                    "writing": fd.writing,
                }
                for fd in graph.loop.fds
            ],
        },
    }


def deadlock_text(graph: Graph, *, virtual: bool, fds_note: str | None) -> str:
    count = len(graph.tasks)
    tasks = "1 task is" if count == 1 else f"{count} tasks are"
    reasons = ", ".join(
        [
            "no ready callbacks",
            "no timers",
            fds_note or "no watched file descriptors",
            "no executor jobs",
            "no other threads",
        ]
    )
    after = "" if virtual else " The loop keeps waiting."
    return (
        f"snakeloop: deadlock: no task can make progress ({reasons}). "
        f"{tasks} blocked forever.{after}\n\n" + format_text(graph)
    )
