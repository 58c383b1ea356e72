"""Draw the benchmark ratios as a PNG: ``python3 -m benchmarks.chart``.

    python3 -m benchmarks --json micro.json
    python3 -m benchmarks.net --json net.json
    python3 -m benchmarks.chart --micro micro.json --net net.json -o docs/benchmarks.png
    python3 -m benchmarks.chart --micro 3.11=micro311.json --net 3.11=net311.json \
        --micro 3.14=micro314.json --net 3.14=net314.json -o docs/benchmarks.png
    python3 -m benchmarks.scale --json scale.json
    python3 -m benchmarks.chart --scale scale.json -o docs/scale.png

Each ``--micro``, ``--net`` and ``--scale`` may be given once per Python, as ``LABEL=FILE``; the
chart then has a pair of panels per Python, each from its own runs.

Every bar is a ratio to the stdlib loop measured in the same run (above 1:
faster than the stdlib loop).  Scheduling rows compare rates (median of the
rounds); network rows compare the server's CPU time per request, inverted so
that above 1 is better there too; the scale rows compare memory per idle
connection and latency among idle connections, inverted the same way, and the
accept rate as it is.  matplotlib is needed for this command only
(``pip install matplotlib``); nothing else in snakeloop or its benchmarks
imports it.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

# Bars drawn, in this order, when the run measured them ("baseline" only
# with --baseline-label: it is snakeloop at some other revision).
LOOPS = ("snakeloop", "compiled", "uvloop", "rloop", "baseline", "snake+C")
COLOURS = {
    "snakeloop": "#2e7d32",
    "compiled": "#f9a825",
    "uvloop": "#1565c0",
    "rloop": "#8e24aa",
    "baseline": "#9e9e9e",
    "snake+C": "#81c784",
}


def micro_ratios(document: dict) -> dict[str, dict[str, float]]:
    """workload -> loop -> median rate / stdlib's median rate."""
    ratios: dict[str, dict[str, float]] = {}
    for workload, per_loop in document["rates"].items():
        if not isinstance(per_loop.get("stdlib"), list):
            continue
        base = statistics.median(per_loop["stdlib"])
        ratios[workload] = {
            loop: statistics.median(rates) / base
            for loop, rates in per_loop.items()
            if loop != "stdlib" and isinstance(rates, list)
        }
    return ratios


def net_ratios(document: dict) -> dict[str, dict[str, float]]:
    """workload -> server -> stdlib's CPU per request / the server's (above 1: cheaper)."""
    ratios: dict[str, dict[str, float]] = {}
    for workload, per_server in document.items():
        cpu = {
            name: statistics.median(run["cpu_us"] for run in runs)
            for name, runs in per_server.items()
            if runs
        }
        if "stdlib" not in cpu:
            continue
        ratios[workload] = {
            name: cpu["stdlib"] / value for name, value in cpu.items() if name in LOOPS and value
        }
    return ratios


# benchmarks.scale's figures: (name, row label, whether less is better).
SCALE_FIGURES = (
    ("kib_per_connection", "memory", True),
    ("accepted_per_second", "accepts", False),
    ("latency_us", "latency", True),
)


def scale_ratios(document: dict) -> dict[str, dict[str, float]]:
    """row -> loop -> the loop's figure against stdlib's, above 1 better (less memory,
    faster accepts, lower latency)."""
    kinds = list(dict.fromkeys(key.partition("/")[0] for key in document))
    ratios: dict[str, dict[str, float]] = {}
    for figure, label, lower_is_better in SCALE_FIGURES:
        for kind in kinds:
            base = document.get(f"{kind}/stdlib", {}).get(figure)
            if not base:
                continue
            row = ratios[f"{kind} {label}"] = {}
            for key, figures in document.items():
                server, _, loop = key.partition("/")
                value = figures.get(figure)
                if server == kind and loop in LOOPS and value:
                    row[loop] = base / value if lower_is_better else value / base
    return ratios


def draw(
    panels: list[tuple[str, dict[str, dict[str, float]]]],
    title: str,
    out: Path,
    labels: dict[str, str],
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(panels), 1, figsize=(10, 3.2 * len(panels)), squeeze=False, constrained_layout=True
    )
    for axis, (name, ratios) in zip(axes[:, 0], panels, strict=True):
        rows = list(ratios)
        loops = [
            loop for loop in LOOPS if loop in labels and any(loop in ratios[row] for row in rows)
        ]
        width = 0.8 / max(1, len(loops))
        for i, loop in enumerate(loops):
            xs = [r + (i - (len(loops) - 1) / 2) * width for r in range(len(rows))]
            # A row a loop did not run (rloop has no Unix server) gets no bar, not a 0.
            heights = [ratios[row].get(loop, float("nan")) for row in rows]
            bars = axis.bar(xs, heights, width, label=labels[loop], color=COLOURS[loop])
            axis.bar_label(
                bars,
                labels=["" if h != h else f"{h:.2f}" for h in heights],
                fontsize=6,
                padding=1,
            )
        axis.axhline(1.0, color="black", linewidth=0.8)
        top = max((v for row in rows for v in ratios[row].values()), default=1.0)
        # Head room above the tallest bar for the legend, which runs along the top.
        axis.set_ylim(0, max(1.2, top * 1.3))
        axis.set_xticks(range(len(rows)), rows, fontsize=8)
        axis.set_ylabel("× stdlib loop")
        axis.set_title(name, fontsize=10)
        axis.legend(fontsize=7, loc="upper center", ncol=len(loops), frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--micro",
        metavar="[LABEL=]FILE",
        action="append",
        default=[],
        help="JSON from python3 -m benchmarks --json (once per Python, with a label)",
    )
    parser.add_argument(
        "--net",
        metavar="[LABEL=]FILE",
        action="append",
        default=[],
        help="JSON from python3 -m benchmarks.net --json (once per Python, with a label)",
    )
    parser.add_argument(
        "--scale",
        metavar="[LABEL=]FILE",
        action="append",
        default=[],
        help="JSON from python3 -m benchmarks.scale --json (once per Python, with a label)",
    )
    parser.add_argument("-o", "--output", default="benchmarks.png", help="the PNG to write")
    parser.add_argument("--title", help="the chart's title (default: the Python that ran it)")
    parser.add_argument(
        "--baseline-label",
        metavar="TEXT",
        help="also draw the runs' baseline column (snakeloop at --baseline REV), named TEXT",
    )
    args = parser.parse_args(argv)
    if not args.micro and not args.net and not args.scale:
        parser.error("give --micro FILE, --net FILE, --scale FILE or more than one")
    micro = [_labelled(parser, given) for given in args.micro]
    net = [_labelled(parser, given) for given in args.net]
    scale = [_labelled(parser, given) for given in args.scale]
    labels_seen = list(dict.fromkeys(label for label, _ in micro + net + scale))
    # Each kind of file: its panel's title (after the Python) and its ratios.
    kinds = (
        (micro, "scheduling, rate × stdlib (higher is faster)", micro_ratios),
        (
            net,
            "echo servers, stdlib's CPU per request ÷ the loop's (higher is cheaper)",
            net_ratios,
        ),
        (
            scale,
            "idle connections: stdlib's memory per connection and latency ÷ the loop's, "
            "accepts/s ÷ stdlib's (higher is better)",
            scale_ratios,
        ),
    )
    panels = []
    for label in labels_seen:
        python = f"CPython {label}: " if label else ""
        for files, panel_title, ratios_of in kinds:
            for kind, path in files:
                if kind == label:
                    panels.append((python + panel_title, ratios_of(_load(path))))
    if args.title:
        title = args.title
    elif any(labels_seen):
        title = (
            "snakeloop, pure and compiled builds, ratios to the stdlib loop measured in the "
            "same run, on each Python"
        )
    else:
        title = (
            f"snakeloop, pure and compiled builds, CPython {platform.python_version()}, "
            "ratios to the stdlib loop measured in the same run"
        )
    labels = {
        "snakeloop": "snakeloop (pure)",
        "compiled": "snakeloop (compiled)",
        "uvloop": "uvloop",
        "rloop": "rloop",
        "snake+C": "snake+C",
    }
    if args.baseline_label:
        labels["baseline"] = args.baseline_label
    draw(panels, title, Path(args.output), labels)
    print(f"wrote {args.output}")
    return 0


def _labelled(parser: argparse.ArgumentParser, given: str) -> tuple[str, str]:
    """``3.14=net.json`` -> ("3.14", "net.json"); a plain path has the empty label."""
    label, sep, path = given.partition("=")
    if not sep:
        return "", given
    if not path:
        parser.error(f"{given!r}: give LABEL=FILE, with the file after the '='")
    return label, path


def _load(path: str) -> dict:
    return json.loads(Path(path).read_text())


if __name__ == "__main__":
    sys.exit(main())
