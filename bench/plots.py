"""PNG plots of the pilot benches: ``vs_langgraph`` and ``parallel`` figures, seen at a glance.

Each bench takes ``--plot PATH.png``; a saved ``--json`` can be plotted later without running
the bench again::

    .venv/bin/python -m bench.plots langgraph out.json vs-langgraph.png
    .venv/bin/python -m bench.plots parallel out.json parallel.png
    .venv/bin/python -m bench.plots tasks bench-tasks.jsonl tasks.png   # the task suite

matplotlib comes with the ``bench`` extra; it is imported only when a plot is drawn.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

INSTALL_HINT = "pip install -e '.[bench]' (or: pip install 'matplotlib>=3.8')"

_STYLE = {
    "marathon": ("C0", "-"),
    "marathon-full": ("C0", "--"),
    "marathon-off": ("C0", ":"),
    "lg-delta-sync": ("C1", "-"),
    "lg-delta-off": ("C1", ":"),
    "lg-default-sync": ("C3", "-"),
    "lg-default-off": ("C3", ":"),
}
"""One colour per framework, one line style per durability: sync solid, off dotted."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        sys.exit(f"plotting needs matplotlib, which is not installed: {INSTALL_HINT}")
    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def plot_vs_langgraph(rows: Sequence[dict[str, Any]], raw: dict[Any, float], path: Path) -> None:
    """Four panels against N, one line per config (the summary rows of ``vs_langgraph``):
    CPU per step, the database against the raw payload, the state load and the resume
    process's wall time; the targets are drawn where they are fixed numbers."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    Panel = tuple[Any, str, Callable[[dict[str, Any]], float], float | None, bool]
    panels: list[Panel] = [
        (axes[0][0], "CPU ms per step", lambda r: r["cpu_ms_per_step"], None, True),
        (
            axes[0][1],
            "database / raw payload",
            lambda r: r["db_bytes_per_step"] / raw[_key(raw, r["n"])],
            1.5,
            True,
        ),
        (axes[1][0], "load the latest state, ms", lambda r: r["load_state_ms"], 20.0, True),
        (axes[1][1], "resume process wall, s", lambda r: r["resume_proc_wall_s"], None, False),
    ]
    configs = list(dict.fromkeys(r["config"] for r in rows))
    for ax, title, value, target, logarithmic in panels:
        for config in configs:
            mine = sorted((r for r in rows if r["config"] == config), key=lambda r: r["n"])
            color, line = _STYLE.get(config, ("C7", "-"))
            ax.plot(
                [r["n"] for r in mine],
                [value(r) for r in mine],
                color=color,
                linestyle=line,
                marker="o",
                label=config,
            )
        if target is not None:
            ax.axhline(target, color="grey", linewidth=0.8, linestyle="-.", label="target")
        ax.set_xscale("log")
        if logarithmic:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel("steps in the run (N)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Marathon's pilot and LangGraph on the durable-loop workload (one sitting)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _key(raw: dict[Any, float], n: int) -> Any:
    """``raw`` as the bench returns it (int keys) or as JSON gives it back (str keys)."""
    return n if n in raw else str(n)


def plot_parallel(results: Sequence[dict[str, Any]], path: Path) -> None:
    """Wall time against one run, and the pilot's CPU per step, against the runs at once
    (medians over the sweeps, each sweep's points faint; the 1.25x target at 128 drawn)."""
    plt = _pyplot()
    fig, (wall, cpu) = plt.subplots(1, 2, figsize=(11, 4.2))
    ks = sorted({r["runs"] for r in results})
    for ax, key in ((wall, "wall_vs_one"), (cpu, "cpu_ms_per_step")):
        points = [(r["runs"], r[key]) for r in results]
        ax.scatter([k for k, _ in points], [v for _, v in points], color="C0", alpha=0.25, s=14)
        medians = [statistics.median(r[key] for r in results if r["runs"] == k) for k in ks]
        ax.plot(ks, medians, color="C0", marker="o", label="median over sweeps")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("runs at once in one pilot process")
        ax.grid(True, which="both", alpha=0.3)
    wall.axhline(1.25, color="grey", linewidth=0.8, linestyle="-.", label="target at 128: 1.25")
    wall.set_title("wall time / one run's")
    wall.legend(fontsize=8)
    cpu.set_title("pilot CPU ms per step")
    cpu.set_ylim(bottom=0)
    fig.suptitle("Many runs against brain sim (fixed per-token latency, no queueing)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_trace_export(rows: Sequence[dict[str, Any]], stages: Sequence[str], path: Path) -> None:
    """``pilot trace``'s milliseconds per 1000 stored events, one stacked bar per run size."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    labels = [f"{r['events']:,} events" for r in rows]
    bottom = [0.0] * len(rows)
    for index, stage in enumerate(stages):
        values = [r[f"{stage}_ms_per_1k"] for r in rows]
        ax.bar(labels, values, bottom=bottom, color=f"C{index}", label=stage)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for x, total in enumerate(bottom):
        ax.annotate(f"{total:.0f}", (x, total), ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("ms per 1000 events")
    ax.set_title("pilot trace: the cost of an export (one process, median of repeats)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_tasks(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """The task suite: each task's passing share of its tries, one bar per agent (and model
    and call mode, where they differ), each one's overall count in the legend."""
    from bench.tasks.report import group_of, label

    plt = _pyplot()
    tasks = sorted({r["task"] for r in rows})
    groups = sorted({group_of(r) for r in rows})
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(tasks) * max(1, len(groups) / 2) + 1.6))
    height = 0.8 / max(1, len(groups))
    for i, group in enumerate(groups):
        mine = [r for r in rows if group_of(r) == group]
        rates = []
        for task in tasks:
            tries = [r for r in mine if r["task"] == task]
            rates.append(sum(r["success"] for r in tries) / len(tries) if tries else 0.0)
        overall = sum(r["success"] for r in mine)
        name = f"{label(group, groups)}: {overall}/{len(mine)}"
        ys = [t + (i - (len(groups) - 1) / 2) * height for t in range(len(tasks))]
        ax.barh(ys, rates, height=height, color=f"C{i}", label=name)
    ax.set_yticks(range(len(tasks)), tasks, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of tries that passed the hidden check")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Task suite: the same server, tasks and step budget for every agent")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    import json

    parser = argparse.ArgumentParser(description="plot a bench's saved --json")
    parser.add_argument("bench", choices=("langgraph", "parallel", "tasks"))
    parser.add_argument("json", type=Path)
    parser.add_argument("png", type=Path)
    args = parser.parse_args(argv)
    if args.bench == "tasks":  # the suite's results file: JSON lines
        from bench.tasks.report import load_rows

        plot_tasks(load_rows([args.json]), args.png)
        print(f"wrote {args.png}")
        return
    data = json.loads(args.json.read_text())
    if args.bench == "langgraph":
        plot_vs_langgraph(data["summary"], data["raw"], args.png)
    else:
        plot_parallel(data, args.png)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
