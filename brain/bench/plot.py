"""The ``brain bench --plot`` PNG: throughput and latency against load, speed against depth.

matplotlib is optional (the ``bench`` extra); it is imported only here and only when a plot is
asked for, and its absence is a BenchError saying what to install.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from brain.bench.models import BenchError, BenchReport

INSTALL_HINT = "pip install 'marathon[bench]' (or: pip install 'matplotlib>=3.8')"


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend; a BenchError naming the extra to
    install when matplotlib is missing (so ``--plot`` can fail before the run, not after)."""
    try:
        import matplotlib
    except ImportError as exc:
        raise BenchError(
            f"--plot needs matplotlib, which is not installed: {INSTALL_HINT}"
        ) from exc
    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def _series(ax: Any, xs: list[float], ys: list[float | None], color: str, **style: Any) -> None:
    points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None and math.isfinite(x)]
    if points:
        ax.plot([x for x, _ in points], [y for _, y in points], color=color, **style)


def write_plot(report: BenchReport, path: Path) -> None:
    """One PNG: output throughput, TTFT and TPOT against the sweep, and prefill/decode speed
    against context depth; one colour per endpoint, solid p50 and dashed p99; panels only for
    what was measured."""
    plt = pyplot()
    from matplotlib.ticker import ScalarFormatter

    sweep = any(ep.points for ep in report.endpoints)
    depth = any(ep.depths for ep in report.endpoints)
    panels = (3 if sweep else 0) + (1 if depth else 0)
    if panels == 0:
        raise BenchError("nothing to plot: the report has no load points and no depths")
    cols = 2 if panels == 4 else panels
    rows = 2 if panels == 4 else 1
    fig, grid = plt.subplots(rows, cols, figsize=(5.5 * cols, 4 * rows), squeeze=False)
    axes = [ax for row in grid for ax in row]
    xname = "request rate (req/s)" if report.config.request_rates else "concurrency"
    solid = {"marker": "o"}
    dashed = {"marker": "x", "linestyle": "--"}
    if sweep:
        tput, ttft, tpot = axes[:3]
        for i, ep in enumerate(report.endpoints):
            c, xs = f"C{i}", [p.x for p in ep.points]
            _series(tput, xs, [p.output_throughput for p in ep.points], c, label=ep.label, **solid)
            for ax, attr in ((ttft, "ttft_ms"), (tpot, "tpot_ms")):
                dists = [getattr(p, attr) for p in ep.points]
                p50 = [d.p50 if d else None for d in dists]
                p99 = [d.p99 if d else None for d in dists]
                _series(ax, xs, p50, c, label=f"{ep.label} p50", **solid)
                _series(ax, xs, p99, c, label=f"{ep.label} p99", **dashed)
        xs_all = sorted({p.x for ep in report.endpoints for p in ep.points if math.isfinite(p.x)})
        for ax, title, ylabel in (
            (tput, "output throughput", "tokens/s"),
            (ttft, "time to first token", "ms"),
            (tpot, "time per output token", "ms"),
        ):
            ax.set_title(title)
            ax.set_xlabel(xname)
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small")
            if len(xs_all) > 2 and xs_all[0] > 0 and xs_all[-1] / xs_all[0] >= 8:
                ax.set_xscale("log", base=2)
                ax.set_xticks(xs_all)
                ax.xaxis.set_major_formatter(ScalarFormatter())
    if depth:
        ax = axes[3 if sweep else 0]
        for i, ep in enumerate(report.endpoints):
            c, xs = f"C{i}", [float(d.depth) for d in ep.depths]
            prefill = [d.prefill_tps for d in ep.depths]
            decode = [d.decode_tps for d in ep.depths]
            _series(ax, xs, prefill, c, label=f"{ep.label} prefill", **solid)
            _series(ax, xs, decode, c, label=f"{ep.label} decode", marker="s", linestyle="--")
        ax.set_title("speed against context depth")
        ax.set_xlabel("context depth (tokens)")
        ax.set_ylabel("tokens/s")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
