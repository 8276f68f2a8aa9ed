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

This module loads replay files, drives them and reduces the timings; tables and plots live in
``brain.bench.replay_report``. It never imports ``pilot``.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, Field

from brain.bench.endpoint import Endpoint, discover_model, server_root, snapshot
from brain.bench.models import BenchError, Percentiles, Progress
from brain.bench.sender import RequestResult, send_chat
from brain.bench.stats import summarize_ms
from brain.metrics import MetricsSnapshot, SpecDecodeStats, spec_decode_delta

REPLAY_SUFFIXES = (".jsonl", ".jsonl.gz")

# --------------------------------------------------------------------------- replay files


class ReplayRequest(BaseModel):
    """One request of a recorded run, messages resolved."""

    n: int
    kind: str = "step"
    step: int = 0
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    out: int | None = None
    """The recorded answer's tokens (None when the server sent no usage)."""
    prompt: int | None = None
    """The recorded prompt tokens (what the server counted then)."""
    think: float = 0.0


class ReplayRun(BaseModel):
    name: str
    path: str
    model: str | None = None
    max_model_len: int | None = None
    compactions: int = 0
    requests: list[ReplayRequest]


def _open_text(path: Path) -> list[str]:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                return handle.read().splitlines()
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise BenchError(f"cannot read replay file {path}: {exc}") from exc


def load_replay(path: Path) -> ReplayRun:
    """One replay file (``pilot replay-export``'s format, see ``pilot/replay_export.py``)."""
    head: dict[str, Any] | None = None
    messages: dict[int, dict[str, Any]] = {}
    tools: dict[int, list[dict[str, Any]]] = {}
    requests: list[ReplayRequest] = []
    for number, raw in enumerate(_open_text(path), 1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            line = json.loads(raw)
        except ValueError as exc:
            raise BenchError(f"{where}: not JSON: {exc}") from exc
        kind = line.get("type") if isinstance(line, dict) else None
        if head is None:
            if kind != "replay":
                raise BenchError(
                    f"{where}: not a replay file (its first line must be the "
                    '{"type": "replay", ...} header); write one with `pilot replay-export`'
                )
            if line.get("version") != 1:
                raise BenchError(f"{where}: replay version {line.get('version')!r}, expected 1")
            head = line
            continue
        try:
            if kind == "msg":
                messages[int(line["id"])] = dict(line["m"])
            elif kind == "tools":
                tools[int(line["id"])] = list(line["tools"])
            elif kind == "req":
                resolved: list[dict[str, Any]] = []
                for lo, hi in line["spans"]:
                    resolved += [messages[i] for i in range(int(lo), int(hi))]
                tool_id = line.get("tools")
                requests.append(
                    ReplayRequest(
                        n=len(requests),
                        kind=str(line.get("kind") or "step"),
                        step=int(line.get("step") or 0),
                        messages=resolved,
                        tools=tools[int(tool_id)] if tool_id is not None else None,
                        max_tokens=line.get("max_tokens"),
                        out=line.get("out"),
                        prompt=line.get("prompt"),
                        think=float(line.get("think") or 0.0),
                    )
                )
            else:
                raise BenchError(f"{where}: unknown line type {kind!r} (msg, tools or req)")
        except (KeyError, TypeError, ValueError) as exc:
            raise BenchError(
                f"{where}: malformed {kind} line ({type(exc).__name__}: {exc}); a req "
                "may only name messages and tools defined above it"
            ) from exc
    if head is None:
        raise BenchError(f"{path}: empty replay file")
    if not requests:
        raise BenchError(f"{path}: the replay holds no request")
    return ReplayRun(
        name=str(head.get("run") or path.name.split(".")[0]),
        path=str(path),
        model=head.get("model"),
        max_model_len=head.get("max_model_len"),
        compactions=int(head.get("compactions") or 0),
        requests=requests,
    )


def replay_files(paths: Sequence[Path]) -> list[Path]:
    """The files named, and the replay files in the directories named (sorted)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.name.endswith(REPLAY_SUFFIXES))
            if not inside:
                raise BenchError(f"{path}: no replay files (*.jsonl, *.jsonl.gz) in it")
            found += inside
        elif path.exists():
            found.append(path)
        else:
            raise BenchError(f"{path}: no such replay file or directory")
    return found


# --------------------------------------------------------------------------- configuration


class ReplayConfig(BaseModel):
    """One ``brain bench --replay`` invocation; the CLI fills it, tests build it."""

    url: str
    compare_url: str | None = None
    labels: tuple[str, str] = ("A", "B")
    model: str | None = None
    compare_model: str | None = None
    api_key: str | None = Field(None, exclude=True, repr=False)
    paths: list[Path]
    concurrency: list[int] = Field(default_factory=lambda: [1])
    """Runs replayed at once, one point each."""
    runs: int | None = None
    """Runs replayed per point (the recordings cycled); None = one per recording."""
    think: bool = False
    max_tokens: int | None = None
    """Answer length of every request; None = the recorded one."""
    salt: bool = True
    buckets: int = Field(8, ge=1)
    """Depth rows of the report (requests grouped by position in their run)."""
    temperature: float = 0.0
    ignore_eos: bool = True
    timeout: float = Field(600.0, gt=0)
    seed: int = 0


def validate_replay_config(config: ReplayConfig) -> None:
    if not config.concurrency or any(c < 1 for c in config.concurrency):
        raise BenchError("--concurrency values must be >= 1 (runs replayed at once)")
    if config.runs is not None and config.runs < 1:
        raise BenchError("--replay-runs must be >= 1")
    if config.max_tokens is not None and config.max_tokens < 1:
        raise BenchError("--replay-max-tokens must be >= 1")
    if not config.paths:
        raise BenchError("--replay needs at least one replay file or directory")


# --------------------------------------------------------------------------- results


class RequestRow(BaseModel):
    """One replayed request as measured (times in seconds)."""

    run: int
    n: int
    kind: str
    ok: bool
    error: str | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int | None = None
    cache_source: str | None = None
    """Where cached_tokens came from: "usage" or "counters"; None when unknown."""
    ttft: float | None = None
    e2e: float = 0.0

    @property
    def computed(self) -> int | None:
        return None if self.cached_tokens is None else self.prompt_tokens - self.cached_tokens

    @property
    def decode_tps(self) -> float | None:
        if self.ttft is None or self.output_tokens < 2 or self.e2e <= self.ttft:
            return None
        return (self.output_tokens - 1) / (self.e2e - self.ttft)


class DepthRow(BaseModel):
    """The requests at one range of positions in their runs."""

    label: str
    first: int
    last: int
    requests: int
    failed: int
    prompt_tokens: float | None = None
    computed_prefill: float | None = None
    """Mean prompt tokens the server really computed (None when it did not say)."""
    hit_rate: float | None = None
    ttft_ms: Percentiles | None = None
    e2el_ms: Percentiles | None = None
    decode_tps: float | None = None
    """Sum of (output tokens - 1) over sum of (E2E - TTFT): token-weighted."""


class ReplayPoint(BaseModel):
    concurrency: int
    label: str
    runs: int
    requests: int
    completed: int
    failed: int
    errors: list[str] = Field(default_factory=list)
    wall_s: float
    """The point: first request sent to last answer."""
    run_wall_s: list[float] = Field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int | None = None
    """From the requests' own figures, when every request had one."""
    counter_queries: float | None = None
    counter_hits: float | None = None
    preemptions: float | None = None
    ttft_ms: Percentiles | None = None
    e2el_ms: Percentiles | None = None
    decode_tps: float | None = None
    depths: list[DepthRow] = Field(default_factory=list)
    spec_decode: SpecDecodeStats | None = None

    @property
    def hit_rate(self) -> float | None:
        """The counters' hit rate (every request, recomputation included), else the requests'."""
        if self.counter_queries:
            return (self.counter_hits or 0.0) / self.counter_queries
        if self.cached_tokens is not None and self.prompt_tokens:
            return self.cached_tokens / self.prompt_tokens
        return None

    @property
    def computed_prefill(self) -> float | None:
        if self.counter_queries is not None:
            return self.counter_queries - (self.counter_hits or 0.0)
        if self.cached_tokens is not None:
            return float(self.prompt_tokens - self.cached_tokens)
        return None


class ReplayEndpointReport(BaseModel):
    label: str
    url: str
    model: str
    points: list[ReplayPoint] = Field(default_factory=list)
    requests: list[list[RequestRow]] = Field(default_factory=list)
    """Every request of every point, in the order of ``points``."""


class ReplayRatio(BaseModel):
    point: str
    ratios: dict[str, float | None]


class ReplayReport(BaseModel):
    started_at: str
    config: ReplayConfig
    recordings: list[dict[str, Any]]
    """Each replay file: name, path, requests, compactions, recorded model."""
    endpoints: list[ReplayEndpointReport]
    comparison: list[ReplayRatio] = Field(default_factory=list)


# --------------------------------------------------------------------------- reduction


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


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


def _errors(rows: Sequence[RequestRow]) -> list[str]:
    seen: list[str] = []
    for r in rows:
        if r.error and r.error not in seen:
            seen.append(r.error)
    return seen[:5]


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
        errors=_errors(rows),
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


def _mean(p: Percentiles | None) -> float | None:
    return p.mean if p is not None else None


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
                    "run_wall": _ratio(_mean_of(pa.run_wall_s), _mean_of(pb.run_wall_s)),
                    "ttft_mean": _ratio(_mean(pa.ttft_ms), _mean(pb.ttft_ms)),
                    "e2el_mean": _ratio(_mean(pa.e2el_ms), _mean(pb.e2el_ms)),
                    "decode_tps": _ratio(pa.decode_tps, pb.decode_tps),
                    "hit_rate": _ratio(pa.hit_rate, pb.hit_rate),
                    "computed_prefill": _ratio(pa.computed_prefill, pb.computed_prefill),
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
                        "ttft_mean": _ratio(_mean(da.ttft_ms), _mean(db.ttft_ms)),
                        "e2el_mean": _ratio(_mean(da.e2el_ms), _mean(db.e2el_ms)),
                        "decode_tps": _ratio(da.decode_tps, db.decode_tps),
                        "hit_rate": _ratio(da.hit_rate, db.hit_rate),
                    },
                )
            )
    return rows


# --------------------------------------------------------------------------- the drive


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
        body["tool_choice"] = "auto"
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


def pick_runs(recordings: Sequence[ReplayRun], count: int | None) -> list[ReplayRun]:
    """``count`` runs from the recordings, cycled; all of them once when None."""
    n = len(recordings) if count is None else count
    return [recordings[i % len(recordings)] for i in range(n)]


async def run_replay(config: ReplayConfig, progress: Progress | None = None) -> ReplayReport:
    """Replay the recordings at every concurrency against the endpoint(s)."""
    validate_replay_config(config)
    say = progress or (lambda _msg: None)
    recordings = [load_replay(p) for p in replay_files(config.paths)]
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    timeout = httpx.Timeout(config.timeout, connect=min(30.0, config.timeout))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    async with httpx.AsyncClient(headers=headers, timeout=timeout, limits=limits) as client:
        endpoints = [Endpoint(config.labels[0], server_root(config.url))]
        if config.compare_url:
            endpoints.append(Endpoint(config.labels[1], server_root(config.compare_url)))
        for ep, model in zip(
            endpoints, (config.model, config.compare_model or config.model), strict=False
        ):
            ep.model = model or await discover_model(client, ep.root)
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
