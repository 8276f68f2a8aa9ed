"""Showing a ``brain bench`` report: rich tables for the terminal, Markdown, the plot's entry.

Pure formatting of a ``BenchReport`` (the JSON is the model's own dump, written by
``brain.bench.output``), and the table helpers the replay's report shares.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from brain.bench.models import BenchReport, EndpointReport, Percentiles, PointResult

RATIO_NAMES = {
    "output_throughput": "out tok/s",
    "request_throughput": "req/s",
    "ttft_mean": "TTFT",
    "tpot_mean": "TPOT",
    "itl_mean": "ITL",
    "e2el_mean": "E2E",
    "prefill_tps": "prefill tok/s",
    "decode_tps": "decode tok/s",
}


def fmt_num(value: float | None, digits: int = 1) -> str:
    """A figure for a table cell: ``-`` for none, no decimals from 1000 up, thousands commas."""
    if value is None:
        return "-"
    return f"{value:,.{0 if abs(value) >= 1000 else digits}f}"


def _dist(p: Percentiles | None, keys: tuple[str, ...] = ("mean", "p50", "p99")) -> str:
    if p is None:
        return "-"
    return " / ".join(fmt_num(getattr(p, k)) for k in keys)


def _spec_cell(point: PointResult) -> tuple[str, str]:
    spec = point.spec_decode
    if spec is None:
        return ("-", "-") if point.metrics_available else ("n/a", "n/a")
    return f"{spec.acceptance_rate * 100:.1f}%", f"{spec.mean_acceptance_length:.2f}"


def _x_name(report: BenchReport) -> str:
    return "request rate" if report.config.request_rates else "concurrency"


def _rate_cells(p: PointResult) -> list[str]:
    """The first columns of every per-point table: the point, how many ended, the rates."""
    return [
        p.label,
        f"{p.completed}/{p.num_requests}",
        fmt_num(p.request_throughput, 2),
        fmt_num(p.output_throughput),
        fmt_num(p.total_throughput),
    ]


def sweep_rows(ep: EndpointReport) -> Iterator[list[str]]:
    for p in ep.points:
        rate, length = _spec_cell(p)
        yield [
            *_rate_cells(p),
            _dist(p.ttft_ms),
            _dist(p.tpot_ms),
            _dist(p.itl_ms),
            _dist(p.e2el_ms, ("mean", "p99")),
            rate,
            length,
        ]


SWEEP_HEADERS = [
    "point",
    "ok",
    "req/s",
    "out tok/s",
    "total tok/s",
    "TTFT ms mean/p50/p99",
    "TPOT ms mean/p50/p99",
    "ITL ms mean/p50/p99",
    "E2E ms mean/p99",
    "accept",
    "acc len",
]
DEPTH_HEADERS = ["depth", "ok", "prompt tok", "TTFT ms mean", "prefill tok/s", "decode tok/s"]
DEPTH_HEADERS += ["E2E ms mean", "acc len"]


def depth_rows(ep: EndpointReport) -> Iterator[list[str]]:
    for d in ep.depths:
        spec = d.spec_decode
        yield [
            str(d.depth),
            f"{d.runs - d.failed}/{d.runs}",
            fmt_num(d.prompt_tokens, 0),
            fmt_num(d.ttft_ms.mean if d.ttft_ms else None),
            fmt_num(d.prefill_tps),
            fmt_num(d.decode_tps),
            fmt_num(d.e2el_ms.mean if d.e2el_ms else None),
            f"{spec.mean_acceptance_length:.2f}" if spec else "-",
        ]


def spec_rows(ep: EndpointReport) -> Iterator[list[str]]:
    for p in ep.points:
        s = p.spec_decode
        if s is None:
            continue
        yield [
            p.label,
            fmt_num(s.drafts, 0),
            fmt_num(s.draft_tokens, 0),
            fmt_num(s.accepted_tokens, 0),
            f"{s.acceptance_rate * 100:.1f}%",
            f"{s.mean_acceptance_length:.2f}",
            " ".join(f"{r * 100:.0f}%" for r in s.per_position) or "-",
        ]


SPEC_HEADERS = ["point", "drafts", "draft tok", "accepted", "rate", "mean len", "per position"]


class _Compared(Protocol):
    """A report with point-by-point ratios: the synthetic bench's and the replay's."""

    @property
    def comparison(self) -> Sequence[Any]: ...
    @property
    def endpoints(self) -> Sequence[Any]: ...


def comparison_headers(report: _Compared) -> list[str]:
    """Every ratio name of the comparison, in first-seen order."""
    keys: list[str] = []
    for row in report.comparison:
        keys += [k for k in row.ratios if k not in keys]
    return keys


def comparison_rows(report: _Compared, keys: list[str]) -> Iterator[list[str]]:
    """One row a point: its label, then each ratio as ``1.23x`` (blank where absent)."""
    for row in report.comparison:
        yield [row.point] + [
            f"{row.ratios[k]:.2f}x" if row.ratios.get(k) is not None else "" for k in keys
        ]


def _notes(ep: EndpointReport) -> list[str]:
    notes = []
    for p in ep.points:
        if p.failed:
            notes.append(f"{ep.label} {p.label}: {p.failed} failed: {'; '.join(p.errors)}")
        if p.early_stops:
            notes.append(
                f"{ep.label} {p.label}: {p.early_stops} of {p.completed} requests stopped before "
                "max_tokens (the server ignored ignore_eos); TPOT/ITL still hold, token counts "
                "are lower"
            )
    for d in ep.depths:
        if d.failed:
            notes.append(f"{ep.label} depth={d.depth}: {d.failed} failed: {'; '.join(d.errors)}")
    return notes


def _table(title: str, headers: list[str], rows: Iterator[list[str]]) -> Table | None:
    body = list(rows)
    if not body:
        return None
    table = Table(title=title, title_justify="left", header_style="bold")
    first = max(len(h) for h in [headers[0], *(r[0] for r in body)])
    for i, h in enumerate(headers):
        if i == 0:
            table.add_column(h, justify="left", no_wrap=True, min_width=first)
        else:
            table.add_column(h, justify="right")
    for row in body:
        table.add_row(*row)
    return table


THROUGHPUT_HEADERS = ["point", "ok", "req/s", "out tok/s", "total tok/s"]
THROUGHPUT_HEADERS += ["tok/chunk", "accept", "acc len"]
LATENCY_HEADERS = ["point", "ms", "mean", "min", "p50", "p90", "p99", "max"]


def throughput_rows(ep: EndpointReport) -> Iterator[list[str]]:
    for p in ep.points:
        rate, length = _spec_cell(p)
        yield [
            *_rate_cells(p),
            fmt_num(p.tokens_per_chunk, 2),
            rate,
            length,
        ]


def latency_rows(ep: EndpointReport) -> Iterator[list[str]]:
    for p in ep.points:
        metrics = (
            ("TTFT", p.ttft_ms),
            ("TPOT", p.tpot_ms),
            ("ITL", p.itl_ms),
            ("chunk gap", p.chunk_gap_ms),
            ("E2E", p.e2el_ms),
        )
        for i, (name, dist) in enumerate(metrics):
            if dist is None:
                continue
            keys = ("mean", "min", "p50", "p90", "p99", "max")
            yield [p.label if i == 0 else "", name, *(fmt_num(getattr(dist, k)) for k in keys)]


def render_rich(report: BenchReport) -> Group:
    """Every table of the report, for ``Console.print`` (narrow enough for 80 columns)."""
    parts: list[Table | Text] = []
    cfg = report.config
    for ep in report.endpoints:
        head = f"{ep.label}: {ep.url} ({ep.model})"
        tables: list[tuple[str, list[str], Iterator[list[str]]]] = []
        if ep.points:
            sub = f"input ~{cfg.input_len} tok, output {cfg.output_len} tok"
            if cfg.dataset:
                sub = f"dataset {cfg.dataset}"
            tables += [
                (
                    f"{head}: {_x_name(report)} sweep, {sub}",
                    THROUGHPUT_HEADERS,
                    throughput_rows(ep),
                ),
                (f"{ep.label}: latency", LATENCY_HEADERS, latency_rows(ep)),
                (
                    f"{ep.label}: speculative decoding (/metrics deltas)",
                    SPEC_HEADERS,
                    spec_rows(ep),
                ),
            ]
        if ep.depths:
            title = f"{head}: context depth, prompt ~{cfg.input_len} tok, {cfg.depth_runs} run(s)"
            tables.append((title, DEPTH_HEADERS, depth_rows(ep)))
        parts += [t for t in (_table(*args) for args in tables) if t is not None]
        parts += [Text(n, style="yellow") for n in _notes(ep)]
    if report.comparison:
        a, b = report.endpoints[0].label, report.endpoints[1].label
        keys = comparison_headers(report)
        title = f"ratios {a}/{b} (throughput > 1 or latency < 1: {a} is faster)"
        headers = ["point"] + [RATIO_NAMES.get(k, k) for k in keys]
        t = _table(title, headers, comparison_rows(report, keys))
        if t:
            parts.append(t)
    return Group(*parts)


def print_report(report: BenchReport, console: Console | None = None) -> None:
    (console or Console()).print(render_rich(report))


def markdown_table(headers: list[str], rows: Iterator[list[str]]) -> str:
    """A GitHub Markdown table of ``headers`` and ``rows`` (cells already formatted)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def comparison_markdown(report: _Compared, names: dict[str, str]) -> str:
    """The comparison as a Markdown table, its ratios under ``names`` (the key where none)."""
    a, b = report.endpoints[0].label, report.endpoints[1].label
    keys = comparison_headers(report)
    headers = [f"{a}/{b}"] + [names.get(k, k) for k in keys]
    return markdown_table(headers, comparison_rows(report, keys))


def render_markdown(report: BenchReport) -> str:
    """The same tables as Markdown (for bench/README.md and issue comments)."""
    out: list[str] = []
    for ep in report.endpoints:
        if ep.points:
            out += [
                f"**{ep.label}** `{ep.url}` ({ep.model})",
                "",
                markdown_table(SWEEP_HEADERS, sweep_rows(ep)),
                "",
            ]
            spec = list(spec_rows(ep))
            if spec:
                out += [markdown_table(SPEC_HEADERS, iter(spec)), ""]
        if ep.depths:
            out += [
                f"**{ep.label}** context depth",
                "",
                markdown_table(DEPTH_HEADERS, depth_rows(ep)),
                "",
            ]
        out += [f"- {n}" for n in _notes(ep)]
    if report.comparison:
        out += [comparison_markdown(report, RATIO_NAMES), ""]
    return "\n".join(out).strip() + "\n"


def write_plot(report: BenchReport, path: Path) -> None:
    """The bench's figure (matplotlib, from the ``bench`` extra, imported only here)."""
    from brain.bench.plot import write_plot as plot

    plot(report, path)
