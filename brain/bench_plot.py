"""The ``brain bench --plot`` PNG: throughput and latency against load, speed against depth.

matplotlib is optional (the ``bench`` extra); it is imported only here and only when a plot is
asked for, and its absence is a BenchError saying what to install.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from brain.bench import BenchError, BenchReport

INSTALL_HINT = "pip install 'marathon[bench]' (or: pip install 'matplotlib>=3.8')"


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise BenchError(
            f"--plot needs matplotlib, which is not installed: {INSTALL_HINT}"
        ) from exc
    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def write_plot(report: BenchReport, path: Path) -> None:
    """One PNG: output throughput, TTFT and TPOT against the sweep, and prefill/decode speed
    against context depth, for every endpoint; panels only for what was measured."""
    plt = _pyplot()
    sweep = any(ep.points for ep in report.endpoints)
    depth = any(ep.depths for ep in report.endpoints)
    panels = (3 if sweep else 0) + (1 if depth else 0)
    if panels == 0:
        raise BenchError("nothing to plot: the report has no load points and no depths")
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4), squeeze=False)
    axes = list(axes[0])
    xname = "request rate (req/s)" if report.config.request_rates else "concurrency"
    if sweep:
        tput, ttft, tpot = axes[:3]
        for ep in report.endpoints:
            xs = [p.x for p in ep.points]
            tput.plot(xs, [p.output_throughput for p in ep.points], marker="o", label=ep.label)
            ttft.plot(xs, [p.ttft_ms.p50 if p.ttft_ms else None for p in ep.points], marker="o",
                      label=f"{ep.label} p50")  # fmt: skip
            ttft.plot(xs, [p.ttft_ms.p99 if p.ttft_ms else None for p in ep.points], marker="x",
                      linestyle="--", label=f"{ep.label} p99")  # fmt: skip
            tpot.plot(xs, [p.tpot_ms.p50 if p.tpot_ms else None for p in ep.points], marker="o",
                      label=f"{ep.label} TPOT p50")  # fmt: skip
            tpot.plot(xs, [p.tpot_ms.p99 if p.tpot_ms else None for p in ep.points], marker="x",
                      linestyle="--", label=f"{ep.label} TPOT p99")  # fmt: skip
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
            if (
                not report.config.request_rates
                and len({p.x for p in report.endpoints[0].points}) > 2
            ):
                ax.set_xscale("log", base=2)
    if depth:
        ax = axes[-1]
        for ep in report.endpoints:
            xs = [d.depth for d in ep.depths]
            ax.plot(xs, [d.prefill_tps for d in ep.depths], marker="o", label=f"{ep.label} prefill")
            ax.plot(xs, [d.decode_tps for d in ep.depths], marker="s", linestyle="--",
                    label=f"{ep.label} decode")  # fmt: skip
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
