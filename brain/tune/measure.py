"""One measurement: the recorded traffic replayed against one candidate's server at one
concurrency (``brain bench --replay``'s replay, so the requests are the pilot's own), reduced
per context-depth bucket, with acceptance per draft position and the prefix-cache hit rate from
the server's /metrics around it."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import httpx

from brain.bench.endpoint import Endpoint
from brain.bench.replay.files import ReplayRun
from brain.bench.replay.models import ReplayConfig, RequestRow
from brain.bench.replay.run import replay_point
from brain.tune.models import DepthSample, Sample


def thin(run: ReplayRun, count: int | None) -> ReplayRun:
    """``count`` requests of ``run``, evenly spaced from its first to its last, so a short tune
    still reaches every depth the run reached (each request carries its whole context)."""
    reqs = run.requests
    if count is None or count >= len(reqs):
        return run
    if count == 1:
        picked = [reqs[-1]]
    else:
        step = (len(reqs) - 1) / (count - 1)
        picked = [reqs[round(i * step)] for i in range(count)]
    return run.model_copy(update={"requests": picked})


def depth_label(prompt_tokens: int, edges: Sequence[int]) -> str:
    """The bucket of a prompt: ``<2k``, ``2k-8k`` ..., ``>=32k``."""

    def k(n: int) -> str:
        return f"{n // 1024}k" if n % 1024 == 0 else str(n)

    for i, edge in enumerate(edges):
        if prompt_tokens < edge:
            return f"<{k(edge)}" if i == 0 else f"{k(edges[i - 1])}-{k(edge)}"
    return f">={k(edges[-1])}"


def depth_order(labels: Sequence[str], edges: Sequence[int]) -> list[str]:
    """Labels in depth order."""
    ordered = [depth_label(0, edges)]
    ordered += [depth_label(e, edges) for e in edges]
    return [label for label in ordered if label in labels]


def reduce_rows(rows: Sequence[RequestRow]) -> DepthSample:
    """Decode speed (token-weighted), median TPOT and TTFT, mean E2E of the answered rows."""
    ok = [r for r in rows if r.ok]
    decoding = [r for r in ok if r.ttft is not None and r.output_tokens >= 2 and r.e2e > r.ttft]
    out = sum(r.output_tokens - 1 for r in decoding)
    span = sum(r.e2e - (r.ttft or 0.0) for r in decoding)
    tpots = [(r.e2e - (r.ttft or 0.0)) / (r.output_tokens - 1) for r in decoding]
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    return DepthSample(
        requests=len(rows),
        decode_tps=out / span if span > 0 else None,
        tpot_ms=statistics.median(tpots) * 1000 if tpots else None,
        ttft_ms=statistics.median(ttfts) * 1000 if ttfts else None,
        e2e_s=statistics.fmean(r.e2e for r in ok) if ok else None,
        busy_s=sum(r.e2e for r in ok),
    )


async def measure(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    runs: Sequence[ReplayRun],
    replay: ReplayConfig,
    *,
    candidate: str,
    concurrency: int,
    round_index: int,
    edges: Sequence[int],
) -> Sample:
    """Replay ``runs`` against ``endpoint`` ``concurrency`` at a time and reduce it."""
    point, rows = await replay_point(client, endpoint, runs, replay, concurrency, round_index)
    by_depth: dict[str, list[RequestRow]] = {}
    for row in rows:
        by_depth.setdefault(depth_label(row.prompt_tokens, edges), []).append(row)
    spec = point.spec_decode
    return Sample(
        candidate=candidate,
        concurrency=concurrency,
        round=round_index,
        wall_s=point.wall_s,
        requests=point.requests,
        failed=point.failed,
        errors=point.errors[:3],
        decode_tps=reduce_rows(rows).decode_tps,
        depths={label: reduce_rows(group) for label, group in by_depth.items()},
        acceptance=spec.acceptance_rate if spec else None,
        per_position=list(spec.per_position) if spec else [],
        hit_rate=point.hit_rate,
    )
