"""The tune's result as people read it: a table per (concurrency, depth) with the winner and
each candidate's speed with its interval, the start costs, the notes; as Markdown and a PNG
(matplotlib, the ``bench`` extra); the evidence itself is the report's JSON."""

from __future__ import annotations

import math
from pathlib import Path

from brain.tune.models import Interval, TuneReport


def _iv(iv: Interval | None, fmt: str = "{:.0f}") -> str:
    if iv is None:
        return "-"
    if not math.isfinite(iv.low) or not math.isfinite(iv.high):
        return fmt.format(iv.mean)
    return f"{fmt.format(iv.mean)} [{fmt.format(iv.low)}, {fmt.format(iv.high)}]"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else fmt.format(x)


def markdown(report: TuneReport) -> str:
    """The whole result: what was tuned, the table, the notes."""
    lines = [
        f"# brain tune: {report.model} ({Path(report.profile_path).name})",
        "",
        f"vLLM {report.vllm_version or '?'}; candidates {', '.join(report.candidates)}; "
        f"{report.rounds} round(s) in {report.measure_s:.0f} s of measuring; "
        f"{report.started_at} to {report.ended_at}",
        "",
        "| candidate | server | start |",
        "|---|---|---|",
    ]
    for s in report.starts:
        start = "reused" if s.reused else _num(s.start_s, "{:.1f} s")
        lines.append(f"| {s.candidate} | {s.server}:{s.port} | {start} |")
    lines += [
        "",
        "| c | depth | winner | candidate | decode tok/s [95%] | x off [95%] | TPOT ms | "
        "TTFT ms | E2E s/turn | acceptance (whole replay) | per position |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in report.points:
        for r in p.results:
            mark = "**" if r.candidate == p.winner else ""
            lines.append(
                f"| {p.concurrency} | {p.depth} | {p.winner if r.candidate == p.winner else ''}"
                f"{'' if p.settled or r.candidate != p.winner else ' (not settled)'} | "
                f"{mark}{r.candidate}{mark} | {_iv(r.decode_tps)} | "
                f"{_iv(r.ratio_to_off, '{:.2f}')} | {_num(r.tpot_ms, '{:.1f}')} | "
                f"{_num(r.ttft_ms, '{:.0f}')} | {_num(r.e2e_s, '{:.2f}')} | "
                f"{_num(r.acceptance, '{:.0%}')} | "
                f"{' '.join(f'{x:.2f}' for x in r.per_position) or '-'} |"
            )
    lines += ["", f"**Choice: {report.choice}** ({report.choice_point})", ""]
    if report.depth_note:
        lines.append(f"- depth: {report.depth_note}")
    if report.hit_rate is not None:
        lines.append(f"- prefix-cache hit rate on the replay: {report.hit_rate:.1%}")
    lines += [f"- {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


def write_plot(report: TuneReport, path: Path) -> None:
    """Decode tok/s (with the 95% interval) per candidate against depth, one panel per
    concurrency."""
    from brain.bench.plot import pyplot

    plt = pyplot()
    concs = sorted({p.concurrency for p in report.points})
    fig, axes = plt.subplots(1, len(concs), figsize=(4.5 * len(concs), 3.6), squeeze=False)
    for ax, c in zip(axes[0], concs, strict=True):
        points = [p for p in report.points if p.concurrency == c]
        depths = [p.depth for p in points]
        for cand in report.candidates:
            xs, ys, lo, hi = [], [], [], []
            for x, p in enumerate(points):
                r = next((r for r in p.results if r.candidate == cand), None)
                if r is None or r.decode_tps is None:
                    continue
                iv = r.decode_tps
                xs.append(x)
                ys.append(iv.mean)
                lo.append(iv.mean - iv.low if math.isfinite(iv.low) else 0.0)
                hi.append(iv.high - iv.mean if math.isfinite(iv.high) else 0.0)
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=cand)
        ax.set_xticks(range(len(depths)), depths)
        ax.set_title(f"c={c}: winner " + ", ".join(p.winner for p in points))
        ax.set_xlabel("context depth (prompt tokens)")
        ax.set_ylabel("decode tok/s per request")
        ax.legend(fontsize=7)
    fig.suptitle(f"brain tune: {report.model}, choice {report.choice}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
