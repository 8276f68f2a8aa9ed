"""Decisions that survive noise: paired intervals per (concurrency, depth) and the winner.

The unit of evidence is a round: every candidate replayed once at a concurrency, back to back,
in an order that rotates each round. The same server can decode identical requests 30% apart
a minute apart, so a candidate is compared with another only through the ratio of their speeds
in the same round (a drift moves both), and the interval of the mean log-ratio over the rounds
(Student's t, 95%) decides: a candidate beats off only when its whole interval is above 1, and
a point is settled when nothing else can beat its winner by more than the margin. Pure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from brain.tune.models import CandidateResult, Interval, PointDecision, Sample

_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
_T95 |= {10: 2.23, 12: 2.18, 15: 2.13, 20: 2.09, 30: 2.04}


def t95(df: int) -> float:
    """Two-sided 95% Student t quantile (a conservative table lookup)."""
    if df <= 0:
        return math.inf
    for d in sorted(_T95):
        if df <= d:
            return _T95[d]
    return 1.96


def interval(values: Sequence[float]) -> Interval | None:
    """Mean with its 95% interval; an infinite one from a single value."""
    if not values:
        return None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean=mean, low=-math.inf, high=math.inf, n=1)
    half = t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean=mean, low=mean - half, high=mean + half, n=len(values))


def ratio_interval(a: dict[int, float], b: dict[int, float]) -> Interval | None:
    """a/b paired by round: the geometric mean ratio and its interval (from the log-ratios)."""
    logs = [math.log(a[r] / b[r]) for r in a if r in b and a[r] > 0 and b[r] > 0]
    inner = interval(logs)
    if inner is None:
        return None

    def exp(x: float) -> float:
        return math.exp(x) if math.isfinite(x) else (math.inf if x > 0 else 0.0)

    return Interval(mean=exp(inner.mean), low=exp(inner.low), high=exp(inner.high), n=inner.n)


def _speeds(samples: Sequence[Sample], cand: str, c: int, depth: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for s in samples:
        if s.candidate == cand and s.concurrency == c and depth in s.depths:
            tps = s.depths[depth].decode_tps
            if tps is not None:
                out[s.round] = tps
    return out


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def decide_point(
    samples: Sequence[Sample], candidates: Sequence[str], c: int, depth: str, margin: float
) -> PointDecision:
    """The winner at one (concurrency, depth): the fastest candidate whose speed ratio to off
    is above 1 over its whole interval, else off; settled when no other candidate's ratio to
    the winner can exceed 1 + margin."""
    speeds = {cand: _speeds(samples, cand, c, depth) for cand in candidates}
    off = speeds["off"]
    mine = [s for s in samples if s.concurrency == c and depth in s.depths]
    results: list[CandidateResult] = []
    for cand in candidates:
        rows = [s for s in mine if s.candidate == cand]
        d = [s.depths[depth] for s in rows]
        positions = [s.per_position for s in rows if s.per_position]
        width = max((len(p) for p in positions), default=0)
        results.append(
            CandidateResult(
                candidate=cand,
                decode_tps=interval(list(speeds[cand].values())),
                ratio_to_off=None if cand == "off" else ratio_interval(speeds[cand], off),
                tpot_ms=_mean([x.tpot_ms for x in d]),
                ttft_ms=_mean([x.ttft_ms for x in d]),
                e2e_s=_mean([x.e2e_s for x in d]),
                acceptance=_mean([s.acceptance for s in rows]),
                per_position=[
                    statistics.fmean(p[i] for p in positions if i < len(p)) for i in range(width)
                ],
            )
        )
    clear = [r for r in results if r.ratio_to_off is not None and r.ratio_to_off.low > 1.0]
    winner = (
        max(clear, key=lambda r: r.decode_tps.mean if r.decode_tps else 0.0).candidate
        if clear
        else "off"
    )
    rivals = {
        cand: ratio_interval(speeds[cand], speeds[winner]) for cand in candidates if cand != winner
    }
    open_ = [cand for cand, iv in rivals.items() if iv is None or iv.high > 1.0 + margin]
    busy = sum(s.depths[depth].busy_s for s in mine if s.candidate == "off")
    win = next(r for r in results if r.candidate == winner)
    if winner == "off":
        why = "no candidate beats off over its whole interval"
    else:
        iv = win.ratio_to_off
        assert iv is not None
        why = f"{iv.mean:.2f}x off [{iv.low:.2f}, {iv.high:.2f}]"
    if open_:
        why += f"; not settled: {', '.join(open_)} could still beat it by >{margin:.0%}"
    return PointDecision(
        concurrency=c,
        depth=depth,
        busy_s=busy,
        winner=winner,
        settled=not open_,
        why=why,
        results=results,
    )


def depth_crossing(points: Sequence[PointDecision], c: int, order: Sequence[str]) -> str:
    """Where speculation stops paying at concurrency ``c``: the first depth (in ``order``) past
    a depth some candidate won at, where that candidate is slower than off over its whole
    interval; "" when it never turns."""
    at = {p.depth: p for p in points if p.concurrency == c}
    seen: set[str] = set()
    for depth in order:
        point = at.get(depth)
        if point is None:
            continue
        for r in point.results:
            iv = r.ratio_to_off
            if r.candidate in seen and iv is not None and iv.high < 1.0:
                return f"at c={c}, {r.candidate} wins shallower but loses to off from {depth} on"
        if point.winner != "off":
            seen.add(point.winner)
    return ""
