"""``brain bench --replay``: recorded agent runs replayed against an endpoint.

A synthetic prompt is fresh every time; an agent's is not: each step re-sends the whole
conversation with a little more at its end, so what a server costs an agent is mostly decided
by its prefix cache (how much of that prompt it must prefill again) and, with many runs at once,
by whether their contexts fit its KV cache. This replays the requests of recorded runs (replay
files written by ``pilot replay-export``: the prompts as the pilot sent them, in order, with
their growing shared prefixes, tool results and summaries) and measures, per request depth
(the request's position in its run):

* **TTFT** and **E2E** (client-side, as ``brain bench``), **decode tok/s** =
  (output tokens - 1) / (E2E - TTFT);
* **computed prefill**: the prompt tokens the server really prefilled = prompt tokens - cached
  tokens, with cached tokens from ``usage.prompt_tokens_details.cached_tokens`` where the server
  sends it (vLLM with ``--enable-prompt-tokens-details``), else from the deltas of
  ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` around the request, which are the
  request's own only while nothing else is in flight (one run at a time);
* the **prefix-cache hit rate** = cached / prompt tokens, per depth and per point (the point's
  from the counters: every request, preempted ones' recomputation included);
* per run the **wall** from its first request sent to its last answer, think times included
  when asked (``--think``: the recorded time between an answer and the next request).

Runs are replayed ``concurrency`` at a time (a sweep), each request of a run after the previous
one answered. Each replayed run gets a short tag in front of its first user message, so two
replays of one recording (or one replayed on two points) never share more than the system
prompt and tools, as two real runs of one workflow do not; ``--no-salt`` sends them as recorded.
The answer length is the recorded one (``max_tokens`` = the recorded output tokens, with
``ignore_eos``) unless ``--replay-max-tokens`` says otherwise. ``--compare URL2`` replays the
same runs against a second endpoint, point by point, alternating.

This module drives the replay; the files are read by ``brain.bench.replay.files``, the timings
reduced by ``brain.bench.replay.stats``, shown by ``brain.bench.replay.report``. It never
imports ``pilot``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from brain.bench.endpoint import Endpoint, bench_client, open_endpoints, snapshot
from brain.bench.models import BenchError, Progress
from brain.bench.replay.files import ReplayRequest, ReplayRun, load_replay, pick_runs, replay_files
from brain.bench.replay.models import (
    ReplayConfig,
    ReplayEndpointReport,
    ReplayPoint,
    ReplayReport,
    RequestRow,
)
from brain.bench.replay.stats import compare_points, reduce_point
from brain.bench.sender import RequestResult, send_chat
from brain.metrics import MetricsSnapshot


def validate_replay_config(config: ReplayConfig) -> None:
    if not config.concurrency or any(c < 1 for c in config.concurrency):
        raise BenchError("--concurrency values must be >= 1 (runs replayed at once)")
    if config.runs is not None and config.runs < 1:
        raise BenchError("--replay-runs must be >= 1")
    if config.max_tokens is not None and config.max_tokens < 1:
        raise BenchError("--replay-max-tokens must be >= 1")
    if not config.paths:
        raise BenchError("--replay needs at least one replay file or directory")


def salted(messages: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    """The messages with ``tag`` in front of the first user message: what comes before it (the
    system prompt; the tools, which chat templates render ahead) is shared with other runs, the
    rest is this run's own."""
    out = list(messages)
    for i, message in enumerate(out):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            out[i] = {**message, "content": f"[{tag}] {content}"}
        elif isinstance(content, list):
            out[i] = {**message, "content": [{"type": "text", "text": f"[{tag}]"}, *content]}
        else:
            continue
        return out
    return out


def request_body(
    model: str, request: ReplayRequest, config: ReplayConfig, tag: str | None
) -> dict[str, Any]:
    """The chat request as the pilot sent it (streamed, with usage), answer length fixed."""
    messages = salted(request.messages, tag) if tag else request.messages
    max_tokens = config.max_tokens or request.out or request.max_tokens or 1
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": max(1, int(max_tokens)),
        "temperature": config.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = request.tools
        body["tool_choice"] = request.tool_choice
    if config.ignore_eos:
        body["ignore_eos"] = True
    return body


@dataclass
class _Instance:
    index: int
    run: ReplayRun
    tag: str | None
    rows: list[RequestRow] = field(default_factory=list)
    wall: float = 0.0


def _row(instance: _Instance, request: ReplayRequest, result: RequestResult) -> RequestRow:
    return RequestRow(
        run=instance.index,
        n=request.n,
        kind=request.kind,
        ok=result.ok,
        error=result.error,
        prompt_tokens=result.prompt_tokens,
        output_tokens=result.output_tokens,
        cached_tokens=result.cached_tokens,
        cache_source="usage" if result.cached_tokens is not None else None,
        ttft=result.ttft,
        e2e=result.e2e,
    )


async def replay_point(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    runs: Sequence[ReplayRun],
    config: ReplayConfig,
    concurrency: int,
    point_index: int,
) -> tuple[ReplayPoint, list[RequestRow]]:
    """Replay ``runs`` against one endpoint, ``concurrency`` at a time."""
    instances = [
        _Instance(
            i, run, f"replay {config.seed}.{point_index}.{i} {run.name}" if config.salt else None
        )
        for i, run in enumerate(runs)
    ]
    queue = list(reversed(instances))
    exclusive = concurrency == 1
    before = await snapshot(client, endpoint.root)

    async def drive(instance: _Instance) -> None:
        scrape_time = 0.0
        start = time.perf_counter()
        previous = before if exclusive else None
        for request in instance.run.requests:
            if config.think and request.think > 0 and instance.rows:
                await asyncio.sleep(request.think)
            body = request_body(endpoint.model, request, config, instance.tag)
            result = await send_chat(client, endpoint.chat_url, body)
            row = _row(instance, request, result)
            if exclusive:
                t0 = time.perf_counter()
                now = await snapshot(client, endpoint.root)
                scrape_time += time.perf_counter() - t0
                if row.cached_tokens is None and row.ok and _counts(previous, now):
                    assert previous is not None and now is not None
                    hits = (now.prefix_cache_hits or 0.0) - (previous.prefix_cache_hits or 0.0)
                    row.cached_tokens = int(max(0.0, min(hits, row.prompt_tokens)))
                    row.cache_source = "counters"
                previous = now
            instance.rows.append(row)
        instance.wall = time.perf_counter() - start - scrape_time

    async def worker() -> None:
        while queue:
            await drive(queue.pop())

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(instances))))))
    wall = time.perf_counter() - t0
    after = await snapshot(client, endpoint.root)
    rows = [row for inst in instances for row in inst.rows]
    point = reduce_point(
        concurrency, rows, [i.wall for i in instances], wall, before, after, config.buckets
    )
    return point, rows


def _counts(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> bool:
    return (
        before is not None
        and after is not None
        and before.prefix_cache_queries is not None
        and after.prefix_cache_hits is not None
    )


async def run_replay(config: ReplayConfig, progress: Progress | None = None) -> ReplayReport:
    """Replay the recordings at every concurrency against the endpoint(s)."""
    validate_replay_config(config)
    say = progress or (lambda _msg: None)
    recordings = [load_replay(p) for p in replay_files(config.paths)]
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    async with bench_client(config) as client:
        endpoints = await open_endpoints(client, config)
        reports = [
            ReplayEndpointReport(label=ep.label, url=ep.root, model=ep.model) for ep in endpoints
        ]
        runs = pick_runs(recordings, config.runs)
        total = sum(len(r.requests) for r in runs)
        for index, concurrency in enumerate(config.concurrency):
            for ep, report in zip(endpoints, reports, strict=True):
                say(f"{ep.label}: c={concurrency}, {len(runs)} run(s), {total} requests")
                point, rows = await replay_point(client, ep, runs, config, concurrency, index)
                report.points.append(point)
                report.requests.append(rows)
    return ReplayReport(
        started_at=started_at,
        config=config,
        recordings=[
            {
                "name": r.name,
                "path": r.path,
                "requests": len(r.requests),
                "compactions": r.compactions,
                "model": r.model,
                "max_model_len": r.max_model_len,
            }
            for r in recordings
        ],
        endpoints=reports,
        comparison=compare_points(reports[0], reports[1]) if len(reports) == 2 else [],
    )
