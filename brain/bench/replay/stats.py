"""The figures of ``brain bench --replay``: its request rows reduced to depth buckets, points
and ratios (pure). What each figure means is in ``brain.bench.replay.run``'s docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from brain.bench.models import RatioRow
from brain.bench.replay.models import (
    DepthRow,
    ReplayEndpointReport,
    ReplayPoint,
    RequestRow,
)
from brain.bench.stats import distinct_errors, matched, mean_of, ratios, summarize_ms
from brain.metrics import MetricsSnapshot, spec_decode_delta


def _decode_rate(rows: Sequence[RequestRow]) -> float | None:
    tokens = seconds = 0.0
    for r in rows:
        if r.ok and r.decode_tps is not None and r.ttft is not None:
            tokens += r.output_tokens - 1
            seconds += r.e2e - r.ttft
    return tokens / seconds if seconds > 0 else None


def bucket_bounds(longest: int, buckets: int) -> list[tuple[int, int]]:
    """Positions 0..longest-1 in at most ``buckets`` equal ranges (inclusive bounds)."""
    width = max(1, math.ceil(longest / max(1, buckets)))
    return [(lo, min(lo + width, longest) - 1) for lo in range(0, longest, width)]


def reduce_depths(rows: Sequence[RequestRow], buckets: int) -> list[DepthRow]:
    """Rows grouped by position in their run (pure)."""
    if not rows:
        return []
    out: list[DepthRow] = []
    for lo, hi in bucket_bounds(max(r.n for r in rows) + 1, buckets):
        group = [r for r in rows if lo <= r.n <= hi]
        ok = [r for r in group if r.ok]
        known = [r for r in ok if r.cached_tokens is not None]
        prompt = sum(r.prompt_tokens for r in known)
        out.append(
            DepthRow(
                label=f"{lo + 1}" if lo == hi else f"{lo + 1}-{hi + 1}",
                first=lo + 1,
                last=hi + 1,
                requests=len(group),
                failed=len(group) - len(ok),
                prompt_tokens=sum(r.prompt_tokens for r in ok) / len(ok) if ok else None,
                computed_prefill=(
                    sum(r.computed or 0 for r in known) / len(known) if known else None
                ),
                hit_rate=(
                    sum(r.cached_tokens or 0 for r in known) / prompt if known and prompt else None
                ),
                ttft_ms=summarize_ms([r.ttft for r in ok if r.ttft is not None]),
                e2el_ms=summarize_ms([r.e2e for r in ok]),
                decode_tps=_decode_rate(ok),
            )
        )
    return out


def reduce_point(
    concurrency: int,
    rows: Sequence[RequestRow],
    run_walls: Sequence[float],
    wall: float,
    before: MetricsSnapshot | None,
    after: MetricsSnapshot | None,
    buckets: int,
) -> ReplayPoint:
    """The figures of one point from its requests and the counters around it (pure)."""
    ok = [r for r in rows if r.ok]

    def delta(name: str) -> float | None:
        if before is None or after is None:
            return None
        a, b = getattr(after, name), getattr(before, name)
        return None if a is None else a - (b or 0.0)

    cached = [r.cached_tokens for r in ok]
    return ReplayPoint(
        concurrency=concurrency,
        label=f"c={concurrency}",
        runs=len(run_walls),
        requests=len(rows),
        completed=len(ok),
        failed=len(rows) - len(ok),
        errors=distinct_errors(r.error for r in rows),
        wall_s=wall,
        run_wall_s=list(run_walls),
        prompt_tokens=sum(r.prompt_tokens for r in ok),
        output_tokens=sum(r.output_tokens for r in ok),
        cached_tokens=sum(c for c in cached if c is not None)
        if ok and all(c is not None for c in cached)
        else None,
        counter_queries=delta("prefix_cache_queries"),
        counter_hits=delta("prefix_cache_hits"),
        preemptions=delta("preemptions"),
        ttft_ms=summarize_ms([r.ttft for r in ok if r.ttft is not None]),
        e2el_ms=summarize_ms([r.e2e for r in ok]),
        decode_tps=_decode_rate(ok),
        depths=reduce_depths(rows, buckets),
        spec_decode=spec_decode_delta(before, after) if before and after else None,
    )


def _mean_of(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def compare_points(a: ReplayEndpointReport, b: ReplayEndpointReport) -> list[RatioRow]:
    """First over second, per point and per depth row of each point."""
    point_figures: dict[str, Callable[[ReplayPoint], float | None]] = {
        "run_wall": lambda p: _mean_of(p.run_wall_s),
        "ttft_mean": mean_of("ttft_ms"),
        "e2el_mean": mean_of("e2el_ms"),
        "decode_tps": lambda p: p.decode_tps,
        "hit_rate": lambda p: p.hit_rate,
        "computed_prefill": lambda p: p.computed_prefill,
    }
    depth_figures: dict[str, Callable[[DepthRow], float | None]] = {
        "ttft_mean": mean_of("ttft_ms"),
        "e2el_mean": mean_of("e2el_ms"),
        "decode_tps": lambda d: d.decode_tps,
        "hit_rate": lambda d: d.hit_rate,
    }
    rows: list[RatioRow] = []
    for pa, pb in matched(a.points, b.points, lambda p: p.label):
        rows.append(RatioRow(point=pa.label, ratios=ratios(pa, pb, point_figures)))
        rows += [
            RatioRow(point=f"{pa.label} depth {da.label}", ratios=ratios(da, db, depth_figures))
            for da, db in matched(pa.depths, pb.depths, lambda d: d.label)
        ]
    return rows
