"""The figures of ``brain bench``: the timings of each request reduced to percentiles,
throughputs and ratios. Pure functions; the one place that says what each figure means.

What the figures mean (all measured by the client, from the moment the request is sent):

* **TTFT**: time to the first streamed chunk that carries generated text (content, reasoning or
  tool-call arguments); vLLM's role-only opening chunk does not count.
* **E2E**: time to the end of the stream (``data: [DONE]``).
* **TPOT**: ``(E2E - TTFT) / (output_tokens - 1)``, output tokens from the usage chunk
  (``stream_options.include_usage``); one value per request.
* **ITL**: per-token inter-token latency. Each gap between two consecutive text-carrying chunks
  is divided by the number of tokens the later chunk carries and counted once per token, so
  with MTP (several tokens per chunk) ITL stays a per-token figure and its mean is close to
  TPOT. A stream does not say how many tokens a chunk holds, so the request's usage total is
  apportioned over its chunks in proportion to their UTF-8 bytes (at least one each).
  ``vllm bench serve`` instead reports the raw gap per chunk: that is our **chunk gap**
  (one per decode step when the server flushes every step).
* **Throughput**: completed requests, output tokens and input + output tokens divided by the
  point's wall time (first request sent to last stream ended).
* **Spec decode**: acceptance rate = delta accepted / delta draft tokens; mean acceptance
  length = 1 + delta accepted / delta drafts; per position = delta accepted[i] / delta drafts,
  from ``/metrics`` scraped before and after each point (server-wide counters: other traffic
  on the same server during a point is counted too).
* **Depth sweep**: one request at a time with ``depth`` tokens of fresh context (a previous
  user/assistant exchange) before a prompt of ``input_len`` tokens; prefill tok/s = prompt
  tokens (usage, context included) / TTFT; decode tok/s = (output_tokens - 1) / (E2E - TTFT).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from brain.bench.models import (
    DepthResult,
    EndpointReport,
    LoadPoint,
    Percentiles,
    PointResult,
    RatioRow,
)
from brain.bench.sender import RequestResult
from brain.metrics import SpecDecodeStats

_T = TypeVar("_T")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation, like numpy's default."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize_ms(values_s: Sequence[float]) -> Percentiles | None:
    """Seconds in, a millisecond distribution out; None for no values."""
    if not values_s:
        return None
    ms = sorted(v * 1000.0 for v in values_s)
    return Percentiles(
        n=len(ms),
        mean=sum(ms) / len(ms),
        min=ms[0],
        p50=percentile(ms, 50),
        p90=percentile(ms, 90),
        p99=percentile(ms, 99),
        max=ms[-1],
    )


def distinct_errors(errors: Iterable[str | None]) -> list[str]:
    """The first five distinct error messages, in order (a report lists, it does not flood)."""
    seen: list[str] = []
    for error in errors:
        if error and error not in seen:
            seen.append(error)
    return seen[:5]


def reduce_point(
    point: LoadPoint,
    results: Sequence[RequestResult],
    duration_s: float,
    spec: SpecDecodeStats | None = None,
    metrics_available: bool = False,
) -> PointResult:
    """The figures of one load point from its requests (pure)."""
    ok = [r for r in results if r.ok]
    in_tokens = sum(r.prompt_tokens for r in ok)
    out_tokens = sum(r.output_tokens for r in ok)
    chunks = sum(len(r.chunk_times) for r in ok)
    dur = max(duration_s, 1e-9)
    return PointResult(
        label=point.label,
        mode=point.mode,
        concurrency=point.concurrency,
        request_rate=point.request_rate,
        max_concurrency=point.max_concurrency,
        x=point.x,
        num_requests=len(results),
        completed=len(ok),
        failed=len(results) - len(ok),
        errors=distinct_errors(r.error for r in results),
        duration_s=duration_s,
        total_input_tokens=in_tokens,
        total_output_tokens=out_tokens,
        request_throughput=len(ok) / dur,
        output_throughput=out_tokens / dur,
        total_throughput=(in_tokens + out_tokens) / dur,
        ttft_ms=summarize_ms([r.ttft for r in ok if r.ttft is not None]),
        tpot_ms=summarize_ms([t for r in ok if (t := r.tpot) is not None]),
        itl_ms=summarize_ms([x for r in ok for x in r.itls()]),
        chunk_gap_ms=summarize_ms([x for r in ok for x in r.chunk_gaps()]),
        e2el_ms=summarize_ms([r.e2e for r in ok]),
        tokens_per_chunk=out_tokens / chunks if chunks else None,
        early_stops=sum(1 for r in ok if r.max_tokens and r.output_tokens < r.max_tokens),
        spec_decode=spec,
        metrics_available=metrics_available,
    )


def reduce_depth(
    depth: int, results: Sequence[RequestResult], spec: SpecDecodeStats | None = None
) -> DepthResult:
    ok = [r for r in results if r.ok and r.ttft is not None]
    prefill = [r.prompt_tokens / r.ttft for r in ok if r.ttft]
    decode = [(r.output_tokens - 1) / (r.e2e - r.ttft) for r in ok if r.tpot]  # type: ignore[operator]
    return DepthResult(
        depth=depth,
        runs=len(results),
        failed=len(results) - len(ok),
        errors=distinct_errors(r.error for r in results),
        prompt_tokens=sum(r.prompt_tokens for r in ok) / len(ok) if ok else None,
        output_tokens=sum(r.output_tokens for r in ok) / len(ok) if ok else None,
        ttft_ms=summarize_ms([r.ttft for r in ok if r.ttft is not None]),
        e2el_ms=summarize_ms([r.e2e for r in ok]),
        prefill_tps=sum(prefill) / len(prefill) if prefill else None,
        decode_tps=sum(decode) / len(decode) if decode else None,
        spec_decode=spec,
    )


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing or ``b`` is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def dist_mean(p: Percentiles | None) -> float | None:
    """A distribution's mean, or None for none."""
    return p.mean if p is not None else None


def matched(
    a: Iterable[_T], b: Iterable[_T], key: Callable[[_T], object]
) -> Iterator[tuple[_T, _T]]:
    """Each item of ``a`` with the item of ``b`` of the same key (points by label, depths by
    depth); items without a match are left out."""
    others = {key(item): item for item in b}
    for item in a:
        other = others.get(key(item))
        if other is not None:
            yield item, other


def ratios(
    a: _T, b: _T, figures: dict[str, Callable[[_T], float | None]]
) -> dict[str, float | None]:
    """Each figure of ``a`` over the same figure of ``b``."""
    return {name: ratio(figure(a), figure(b)) for name, figure in figures.items()}


def mean_of(name: str) -> Callable[[Any], float | None]:
    """The figure that reads the mean of the distribution ``name`` of a point or a depth."""
    return lambda item: dist_mean(getattr(item, name))


def compare_reports(a: EndpointReport, b: EndpointReport) -> list[RatioRow]:
    """Ratios first / second per load point and per depth (matched by label / depth)."""
    point_figures: dict[str, Callable[[PointResult], float | None]] = {
        "output_throughput": lambda p: p.output_throughput,
        "request_throughput": lambda p: p.request_throughput,
        "ttft_mean": mean_of("ttft_ms"),
        "tpot_mean": mean_of("tpot_ms"),
        "itl_mean": mean_of("itl_ms"),
        "e2el_mean": mean_of("e2el_ms"),
    }
    depth_figures: dict[str, Callable[[DepthResult], float | None]] = {
        "prefill_tps": lambda d: d.prefill_tps,
        "decode_tps": lambda d: d.decode_tps,
        "ttft_mean": mean_of("ttft_ms"),
        "e2el_mean": mean_of("e2el_ms"),
    }
    rows = [
        RatioRow(point=pa.label, ratios=ratios(pa, pb, point_figures))
        for pa, pb in matched(a.points, b.points, lambda p: p.label)
    ]
    rows += [
        RatioRow(point=f"depth={da.depth}", ratios=ratios(da, db, depth_figures))
        for da, db in matched(a.depths, b.depths, lambda d: d.depth)
    ]
    return rows
