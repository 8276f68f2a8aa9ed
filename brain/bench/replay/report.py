"""Showing a ``brain bench --replay`` report: rich tables, Markdown and the PNG plot.

Pure formatting of a ``ReplayReport`` (the plot needs matplotlib, imported through
``brain.bench.plot.pyplot`` only when a plot is asked for).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from brain.bench.models import BenchError
from brain.bench.replay.models import ReplayEndpointReport, ReplayPoint, ReplayReport
from brain.bench.report import (
    comparison_headers,
    comparison_markdown,
    comparison_rows,
    fmt_num,
    markdown_table,
)

RATIO_NAMES = {
    "run_wall": "run wall",
    "ttft_mean": "TTFT",
    "e2el_mean": "E2E",
    "decode_tps": "decode tok/s",
    "hit_rate": "hit rate",
    "computed_prefill": "computed prefill",
}

POINT_HEADERS = [
    "point",
    "runs",
    "ok",
    "wall s",
    "run wall s mean/max",
    "prompt tok",
    "computed prefill",
    "hit rate",
    "preempt",
    "TTFT ms mean/p50",
    "E2E ms mean",
    "decode tok/s",
    "acc len",
]
DEPTH_HEADERS = ["depth", "ok", "prompt tok", "computed", "hit rate", "TTFT ms mean/p50"]
DEPTH_HEADERS += ["E2E ms mean", "decode tok/s"]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def point_cells(p: ReplayPoint) -> list[str]:
    walls = p.run_wall_s
    spec = p.spec_decode
    return [
        p.label,
        str(p.runs),
        f"{p.completed}/{p.requests}",
        fmt_num(p.wall_s, 2),
        f"{fmt_num(sum(walls) / len(walls), 2)} / {fmt_num(max(walls), 2)}" if walls else "-",
        fmt_num(float(p.prompt_tokens), 0),
        fmt_num(p.computed_prefill, 0),
        _pct(p.hit_rate),
        fmt_num(p.preemptions, 0),
        f"{fmt_num(p.ttft_ms.mean)} / {fmt_num(p.ttft_ms.p50)}" if p.ttft_ms else "-",
        fmt_num(p.e2el_ms.mean if p.e2el_ms else None),
        fmt_num(p.decode_tps),
        f"{spec.mean_acceptance_length:.2f}" if spec else "-",
    ]


def depth_cells(p: ReplayPoint) -> Iterator[list[str]]:
    for d in p.depths:
        yield [
            d.label,
            f"{d.requests - d.failed}/{d.requests}",
            fmt_num(d.prompt_tokens, 0),
            fmt_num(d.computed_prefill, 0),
            _pct(d.hit_rate),
            f"{fmt_num(d.ttft_ms.mean)} / {fmt_num(d.ttft_ms.p50)}" if d.ttft_ms else "-",
            fmt_num(d.e2el_ms.mean if d.e2el_ms else None),
            fmt_num(d.decode_tps),
        ]


def _notes(ep: ReplayEndpointReport) -> list[str]:
    notes = []
    for p in ep.points:
        if p.failed:
            notes.append(f"{ep.label} {p.label}: {p.failed} failed: {'; '.join(p.errors)}")
        if p.hit_rate is None:
            notes.append(
                f"{ep.label} {p.label}: the server reported no prefix-cache figures "
                "(no vllm:prefix_cache_* counters, no usage.prompt_tokens_details)"
            )
    return notes


def _table(title: str, headers: list[str], rows: Iterator[list[str]]) -> Table | None:
    body = list(rows)
    if not body:
        return None
    table = Table(title=title, title_justify="left", header_style="bold")
    for i, h in enumerate(headers):
        table.add_column(h, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for row in body:
        table.add_row(*row)
    return table


def _recordings(report: ReplayReport) -> str:
    rec = report.recordings
    steps = sum(r["requests"] for r in rec)
    runs = report.config.runs or len(rec)
    think = "on" if report.config.think else "off"
    return f"{len(rec)} recording(s) of {steps} requests, {runs} run(s) a point, think {think}"


def render_rich(report: ReplayReport) -> Group:
    parts: list[Table | Text] = [Text(_recordings(report), style="bold")]
    for ep in report.endpoints:
        head = f"{ep.label}: {ep.url} ({ep.model})"
        t = _table(f"{head}: replay", POINT_HEADERS, (point_cells(p) for p in ep.points))
        if t:
            parts.append(t)
        for p in ep.points:
            t = _table(f"{ep.label} {p.label}: per request depth", DEPTH_HEADERS, depth_cells(p))
            if t:
                parts.append(t)
        parts += [Text(n, style="yellow") for n in _notes(ep)]
    if report.comparison:
        a, b = report.endpoints[0].label, report.endpoints[1].label
        keys = comparison_headers(report)
        headers = [f"{a}/{b}"] + [RATIO_NAMES.get(k, k) for k in keys]
        t = _table(f"ratios {a}/{b}", headers, comparison_rows(report, keys))
        if t:
            parts.append(t)
    return Group(*parts)


def print_report(report: ReplayReport, console: Console | None = None) -> None:
    (console or Console()).print(render_rich(report))


def render_markdown(report: ReplayReport) -> str:
    out = [_recordings(report), ""]
    for ep in report.endpoints:
        out += [f"**{ep.label}** `{ep.url}` ({ep.model})", ""]
        out += [markdown_table(POINT_HEADERS, (point_cells(p) for p in ep.points)), ""]
        for p in ep.points:
            out += [f"{ep.label} {p.label}, per request depth:", ""]
            out += [markdown_table(DEPTH_HEADERS, depth_cells(p)), ""]
        out += [f"- {n}" for n in _notes(ep)]
    if report.comparison:
        out += [comparison_markdown(report, RATIO_NAMES), ""]
    return "\n".join(out).strip() + "\n"


def write_plot(report: ReplayReport, path: Path) -> None:
    """TTFT, computed prefill, hit rate and decode speed against request depth (one line per
    endpoint and concurrency), and each point's mean run wall against concurrency."""
    from brain.bench.plot import pyplot

    plt = pyplot()
    if not any(p.depths for ep in report.endpoints for p in ep.points):
        raise BenchError("nothing to plot: the replay measured no request")
    fig, grid = plt.subplots(2, 3, figsize=(16, 8.5), squeeze=False)
    ttft, computed, hits, decode, wall, spare = (ax for row in grid for ax in row)
    spare.axis("off")
    styles = ["-", "--", ":", "-."]
    for i, ep in enumerate(report.endpoints):
        color = f"C{i}"
        for j, p in enumerate(ep.points):
            xs = [(d.first + d.last) / 2 for d in p.depths]
            style = {"color": color, "linestyle": styles[j % len(styles)], "marker": "o"}
            name = f"{ep.label} {p.label}"
            for ax, ys in (
                (ttft, [d.ttft_ms.mean if d.ttft_ms else None for d in p.depths]),
                (computed, [d.computed_prefill for d in p.depths]),
                (hits, [d.hit_rate * 100 if d.hit_rate is not None else None for d in p.depths]),
                (decode, [d.decode_tps for d in p.depths]),
            ):
                pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], label=name, **style)
        walls = [
            (p.concurrency, sum(p.run_wall_s) / len(p.run_wall_s))
            for p in ep.points
            if p.run_wall_s
        ]
        if walls:
            wall.plot(
                [c for c, _ in walls],
                [w for _, w in walls],
                color=color,
                marker="o",
                label=ep.label,
            )
    for ax, title, ylabel in (
        (ttft, "time to first token", "ms"),
        (computed, "prefill the server computed", "tokens per request"),
        (hits, "prefix-cache hit rate", "% of prompt tokens"),
        (decode, "decode speed", "tokens/s"),
    ):
        ax.set_title(title)
        ax.set_xlabel("request depth (position in its run)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "not reported by the server", ha="center", transform=ax.transAxes)
    wall.set_title("mean run wall")
    wall.set_xlabel("runs at once")
    wall.set_ylabel("s")
    wall.grid(True, alpha=0.3)
    if wall.lines:
        wall.legend(fontsize="small")
    fig.suptitle(_recordings(report))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
