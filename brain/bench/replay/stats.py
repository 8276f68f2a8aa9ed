"""The figures of ``brain bench --replay``: its request rows reduced to depth buckets, points
and ratios (pure). What each figure means is in ``brain.bench.replay``'s docstring.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from brain.bench.replay_models import (
    DepthRow,
    ReplayEndpointReport,
    ReplayPoint,
    ReplayRatio,
    RequestRow,
)
from brain.bench.stats import dist_mean, distinct_errors, ratio, summarize_ms
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


def compare_points(a: ReplayEndpointReport, b: ReplayEndpointReport) -> list[ReplayRatio]:
    """First over second, per point and per depth row of each point."""
    rows: list[ReplayRatio] = []
    others = {p.label: p for p in b.points}
    for pa in a.points:
        pb = others.get(pa.label)
        if pb is None:
            continue
        rows.append(
            ReplayRatio(
                point=pa.label,
                ratios={
                    "run_wall": ratio(_mean_of(pa.run_wall_s), _mean_of(pb.run_wall_s)),
                    "ttft_mean": ratio(dist_mean(pa.ttft_ms), dist_mean(pb.ttft_ms)),
                    "e2el_mean": ratio(dist_mean(pa.e2el_ms), dist_mean(pb.e2el_ms)),
                    "decode_tps": ratio(pa.decode_tps, pb.decode_tps),
                    "hit_rate": ratio(pa.hit_rate, pb.hit_rate),
                    "computed_prefill": ratio(pa.computed_prefill, pb.computed_prefill),
                },
            )
        )
        depth_b = {d.label: d for d in pb.depths}
        for da in pa.depths:
            db = depth_b.get(da.label)
            if db is None:
                continue
            rows.append(
                ReplayRatio(
                    point=f"{pa.label} depth {da.label}",
                    ratios={
                        "ttft_mean": ratio(dist_mean(da.ttft_ms), dist_mean(db.ttft_ms)),
                        "e2el_mean": ratio(dist_mean(da.e2el_ms), dist_mean(db.e2el_ms)),
                        "decode_tps": ratio(da.decode_tps, db.decode_tps),
                        "hit_rate": ratio(da.hit_rate, db.hit_rate),
                    },
                )
            )
    return rows
