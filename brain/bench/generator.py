"""``brain bench``: a load generator and meter for any OpenAI-compatible chat endpoint.

In the spirit of ``vllm bench serve`` (fixed-concurrency and Poisson request-rate sweeps,
percentiles of TTFT / TPOT / ITL / E2E, request and token throughput, speculative-decoding
acceptance from ``/metrics`` counter deltas) and llama-benchy (prefill and decode speed of a
single request against context depth). ``--compare`` runs the same prompts against a second
endpoint, point by point, alternating, so the ratios come from one sitting on a noisy machine.

This module generates prompts, sends streamed requests, times them and reduces the timings to
numbers (pure functions where it can). Printing and JSON live in ``bench_report``, the PNG in
``bench_plot``, the command in ``bench_cli``. It never imports ``pilot``.

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

import asyncio
import itertools
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field

from brain.errors import BrainError
from brain.metrics import MetricsParseError, MetricsSnapshot, SpecDecodeStats, spec_decode_delta

BYTES_PER_TOKEN_GUESS = 4
"""Characters per token when the server has no ``/tokenize`` (ceil(bytes/4)-ish)."""

Progress = Callable[[str], None]


class BenchError(BrainError):
    """The benchmark cannot run as asked: bad options, unreachable endpoint, unreadable file."""


# --------------------------------------------------------------------------- configuration


class BenchConfig(BaseModel):
    """Everything one ``brain bench`` invocation does; the CLI fills it, tests build it."""

    url: str
    compare_url: str | None = None
    labels: tuple[str, str] = ("A", "B")
    model: str | None = None
    compare_model: str | None = None
    api_key: str | None = Field(None, exclude=True, repr=False)
    concurrency: list[int] = Field(default_factory=list)
    request_rates: list[float] = Field(default_factory=list)
    max_concurrency: int | None = None
    num_prompts: int | None = None
    """Requests per load point; None = max(16, 4 x concurrency), 64 in request-rate mode."""
    input_len: int = Field(512, ge=1)
    output_len: int = Field(128, ge=1)
    dataset: Path | None = None
    depths: list[int] = Field(default_factory=list)
    depth_runs: int = Field(3, ge=1)
    warmup: int = Field(1, ge=0)
    temperature: float = 0.0
    ignore_eos: bool = True
    use_tokenize: bool = True
    seed: int = 0
    timeout: float = Field(600.0, gt=0)

    def load_points(self) -> list[LoadPoint]:
        if self.request_rates:
            return [
                LoadPoint(request_rate=r, max_concurrency=self.max_concurrency)
                for r in self.request_rates
            ]
        levels = self.concurrency or ([] if self.depths else [1])
        return [LoadPoint(concurrency=c) for c in levels]

    def prompts_for(self, point: LoadPoint) -> int:
        if self.num_prompts is not None:
            return self.num_prompts
        if point.concurrency is not None:
            return max(16, 4 * point.concurrency)
        return 64


class LoadPoint(BaseModel):
    """One point of a sweep: a fixed number of requests in flight, or a Poisson arrival rate."""

    concurrency: int | None = None
    request_rate: float | None = None
    max_concurrency: int | None = None

    @property
    def mode(self) -> Literal["concurrency", "rate"]:
        return "rate" if self.request_rate is not None else "concurrency"

    @property
    def x(self) -> float:
        """The sweep's x value (for plots): concurrency or request rate."""
        return float(self.request_rate if self.request_rate is not None else self.concurrency or 0)

    @property
    def label(self) -> str:
        if self.request_rate is not None:
            rate = "inf" if math.isinf(self.request_rate) else f"{self.request_rate:g}"
            cap = f" (max {self.max_concurrency})" if self.max_concurrency else ""
            return f"rate={rate}/s{cap}"
        return f"c={self.concurrency}"


# --------------------------------------------------------------------------- results


class Percentiles(BaseModel):
    """A distribution in milliseconds."""

    n: int
    mean: float
    min: float
    p50: float
    p90: float
    p99: float
    max: float


class PointResult(BaseModel):
    label: str
    mode: Literal["concurrency", "rate"]
    concurrency: int | None = None
    request_rate: float | None = None
    max_concurrency: int | None = None
    x: float
    num_requests: int
    completed: int
    failed: int
    errors: list[str] = Field(default_factory=list)
    """Distinct error messages (at most five)."""
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_throughput: float
    ttft_ms: Percentiles | None = None
    tpot_ms: Percentiles | None = None
    itl_ms: Percentiles | None = None
    chunk_gap_ms: Percentiles | None = None
    e2el_ms: Percentiles | None = None
    tokens_per_chunk: float | None = None
    early_stops: int = 0
    """Requests that produced fewer tokens than max_tokens (the server ignored ignore_eos)."""
    spec_decode: SpecDecodeStats | None = None
    metrics_available: bool = False


class DepthResult(BaseModel):
    depth: int
    runs: int
    failed: int
    errors: list[str] = Field(default_factory=list)
    prompt_tokens: float | None = None
    output_tokens: float | None = None
    ttft_ms: Percentiles | None = None
    e2el_ms: Percentiles | None = None
    prefill_tps: float | None = None
    """Mean over runs of prompt tokens / TTFT."""
    decode_tps: float | None = None
    """Mean over runs of (output tokens - 1) / (E2E - TTFT)."""
    spec_decode: SpecDecodeStats | None = None


class EndpointReport(BaseModel):
    label: str
    url: str
    model: str
    points: list[PointResult] = Field(default_factory=list)
    depths: list[DepthResult] = Field(default_factory=list)


class RatioRow(BaseModel):
    """First endpoint's figure divided by the second's, for one point or depth."""

    point: str
    ratios: dict[str, float | None]


class BenchReport(BaseModel):
    started_at: str
    config: BenchConfig
    calibration: str
    """How prompt lengths were set: "tokenize" (server's /tokenize) or "heuristic"."""
    endpoints: list[EndpointReport]
    comparison: list[RatioRow] = Field(default_factory=list)


# --------------------------------------------------------------------------- statistics


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


def apportion_tokens(total: int, weights: Sequence[int]) -> list[int]:
    """Split ``total`` tokens over chunks in proportion to ``weights`` (bytes), at least one each.

    Largest-remainder rounding, so the parts add up to ``total`` exactly (when total >= chunks;
    with fewer tokens than chunks every chunk counts as one).
    """
    n = len(weights)
    if n == 0:
        return []
    if total <= n:
        return [1] * n
    wsum = sum(weights)
    shares = [total * w / wsum for w in weights] if wsum > 0 else [total / n] * n
    extra_want = [max(0.0, s - 1.0) for s in shares]
    extra = total - n
    esum = sum(extra_want)
    if esum <= 0:
        extra_want, esum = [1.0] * n, float(n)
    exact = [extra * e / esum for e in extra_want]
    parts = [1 + math.floor(x) for x in exact]
    left = total - sum(parts)
    order = sorted(range(n), key=lambda i: exact[i] - math.floor(exact[i]), reverse=True)
    for i in order[:left]:
        parts[i] += 1
    return parts


# --------------------------------------------------------------------------- one request


@dataclass
class BenchPrompt:
    messages: list[dict[str, Any]]
    max_tokens: int


@dataclass
class RequestResult:
    """What the client saw of one streamed request. Times in seconds from the send."""

    ok: bool = False
    error: str | None = None
    sent_at: float = 0.0
    ended_at: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0
    usage_reported: bool = False
    cached_tokens: int | None = None
    """``usage.prompt_tokens_details.cached_tokens`` (vLLM with --enable-prompt-tokens-details)."""
    max_tokens: int = 0
    finish_reason: str | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_bytes: list[int] = field(default_factory=list)

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] if self.chunk_times else None

    @property
    def e2e(self) -> float:
        return self.ended_at - self.sent_at

    @property
    def tpot(self) -> float | None:
        if self.ttft is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    def chunk_tokens(self) -> list[int]:
        return apportion_tokens(self.output_tokens, self.chunk_bytes)

    def chunk_gaps(self) -> list[float]:
        t = self.chunk_times
        return [b - a for a, b in itertools.pairwise(t)]

    def itls(self) -> list[float]:
        """Per-token inter-token latencies (see the module docstring)."""
        out: list[float] = []
        tokens = self.chunk_tokens()
        for gap, n in zip(self.chunk_gaps(), tokens[1:], strict=True):
            out.extend([gap / n] * n)
        return out


def _delta_text(delta: dict[str, Any]) -> str:
    parts = [delta.get("content"), delta.get("reasoning_content"), delta.get("reasoning")]
    text = "".join(p for p in parts if isinstance(p, str))
    for call in delta.get("tool_calls") or []:
        function = call.get("function") or {}
        if isinstance(function.get("arguments"), str):
            text += function["arguments"]
    return text


def _error_text(status: int, body: bytes) -> str:
    """``HTTP 503: <message>`` from vLLM's error body (or whatever the server sent)."""
    text = body.decode(errors="replace")
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            text = str(error["message"])
        elif isinstance(error, str):
            text = error
        elif data.get("detail"):
            text = str(data["detail"])
    return f"HTTP {status}: {text[:200]}"


def chat_body(model: str, prompt: BenchPrompt, config: BenchConfig) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": prompt.messages,
        "max_tokens": prompt.max_tokens,
        "temperature": config.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if config.ignore_eos:
        body["ignore_eos"] = True  # vLLM's extra sampling parameter (what extra_body carries)
    return body


async def send_chat(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> RequestResult:
    """POST one streamed chat completion and time every text-carrying chunk."""
    result = RequestResult(max_tokens=int(body.get("max_tokens") or 0))
    start = time.perf_counter()
    result.sent_at = start
    chunks = 0
    done = False
    try:
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                result.error = _error_text(resp.status_code, await resp.aread())
                return result
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                now = time.perf_counter()
                event = json.loads(data)
                if "error" in event and not event.get("choices"):
                    error = event["error"]
                    message = error.get("message") if isinstance(error, dict) else error
                    result.error = f"error in stream: {message}"
                    return result
                if usage := event.get("usage"):
                    result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                    result.output_tokens = int(usage.get("completion_tokens") or 0)
                    result.usage_reported = True
                    details = usage.get("prompt_tokens_details")
                    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                        result.cached_tokens = details["cached_tokens"]
                for choice in event.get("choices") or []:
                    text = _delta_text(choice.get("delta") or {})
                    if text:
                        chunks += 1
                        result.chunk_times.append(now - start)
                        result.chunk_bytes.append(len(text.encode("utf-8")))
                    if choice.get("finish_reason"):
                        result.finish_reason = choice["finish_reason"]
    except httpx.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"[:200]
        return result
    except json.JSONDecodeError as exc:
        result.error = f"bad JSON in stream: {exc}"
        return result
    finally:
        result.ended_at = time.perf_counter()
    if not done:
        result.error = "stream ended without [DONE]"
        return result
    if not result.usage_reported:
        result.output_tokens = chunks  # best guess: one token per chunk
    result.ok = True
    return result


# --------------------------------------------------------------------------- prompts

_WORD_TEXT = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there one all we can their has been if more when will "
    "would who so no time people into year only some could them see other than then now look "
    "come its over think also back after use two how our work first well way even new want "
    "because any these give day most us river stone paper engine garden signal orbit lantern "
    "harbor ledger meadow copper thunder violet winter marble falcon cipher quartz rhythm "
    "saddle timber velvet whistle anchor beacon canyon dynamo ember fathom glacier hollow "
    "island jasper kernel lattice mosaic nectar oracle prism quiver raven summit tundra "
    "umbra vertex willow yonder zephyr"
)
WORDS = _WORD_TEXT.split()


def random_text(chars: int, rng: random.Random) -> str:
    """Pseudo-English ASCII of exactly ``chars`` characters (never compresses or repeats)."""
    if chars <= 0:
        return ""
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


@dataclass(frozen=True)
class Calibration:
    """Prompt tokens of a one-message chat = overhead + characters / chars_per_token."""

    source: Literal["tokenize", "heuristic"]
    chars_per_token: float = BYTES_PER_TOKEN_GUESS
    overhead: float = 0.0

    def chars_for(self, tokens: int, with_overhead: bool = True) -> int:
        body = tokens - (self.overhead if with_overhead else 0.0)
        return max(1, round(body * self.chars_per_token))


async def _count_tokens(
    client: httpx.AsyncClient, root: str, model: str, messages: list[dict[str, Any]]
) -> int | None:
    try:
        resp = await client.post(f"{root}/tokenize", json={"model": model, "messages": messages})
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    try:
        count = resp.json().get("count")
    except ValueError:
        return None
    return int(count) if isinstance(count, int) else None


async def calibrate(client: httpx.AsyncClient, root: str, model: str, seed: int) -> Calibration:
    """Fit prompt tokens against characters with two ``/tokenize`` calls; guess if there is none.

    A server without ``/tokenize`` (not vLLM) gets ceil(bytes/4)-ish prompts and the report shows
    the prompt tokens the server really counted (usage).
    """
    rng = random.Random(f"{seed}:calibrate")
    short, long = 400, 4000
    counts = []
    for n in (short, long):
        text = random_text(n, rng)
        count = await _count_tokens(client, root, model, [{"role": "user", "content": text}])
        if count is None:
            return Calibration("heuristic")
        counts.append(count)
    if counts[1] <= counts[0]:
        return Calibration("heuristic")
    cpt = (long - short) / (counts[1] - counts[0])
    return Calibration("tokenize", chars_per_token=cpt, overhead=max(0.0, counts[0] - short / cpt))


def synthetic_prompts(
    n: int, input_len: int, output_len: int, calibration: Calibration, seed: str
) -> list[BenchPrompt]:
    """``n`` distinct single-message prompts of about ``input_len`` prompt tokens each."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        tag = f"[{seed} #{i}] "
        chars = calibration.chars_for(input_len)
        text = (tag + random_text(chars, rng))[:chars] if chars > len(tag) else tag[:chars]
        out.append(BenchPrompt([{"role": "user", "content": text}], output_len))
    return out


def depth_prompt(
    depth: int, input_len: int, output_len: int, calibration: Calibration, seed: str
) -> BenchPrompt:
    """``depth`` tokens of fresh context as an earlier exchange, then the measured prompt."""
    rng = random.Random(seed)
    prompt = f"[{seed}] " + random_text(calibration.chars_for(input_len), rng)
    messages: list[dict[str, Any]] = []
    if depth > 0:
        context = random_text(calibration.chars_for(depth, with_overhead=False), rng)
        messages += [
            {"role": "user", "content": context},
            {"role": "assistant", "content": "Noted."},
        ]
    messages.append({"role": "user", "content": prompt[: calibration.chars_for(input_len)]})
    return BenchPrompt(messages, output_len)


def load_dataset(path: Path, output_len: int) -> list[BenchPrompt]:
    """JSONL: one object a line, ``{"prompt": str}`` or ``{"messages": [...]}``, optionally with
    ``"max_tokens"`` (else ``output_len``). Blank lines and lines starting with # are skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise BenchError(f"cannot read dataset {path}: {exc}") from exc
    prompts: list[BenchPrompt] = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise BenchError(f"{path}:{number}: not JSON: {exc}") from exc
        if not isinstance(item, dict):
            raise BenchError(f"{path}:{number}: expected an object with 'prompt' or 'messages'")
        if isinstance(item.get("messages"), list) and item["messages"]:
            messages = item["messages"]
        elif isinstance(item.get("prompt"), str):
            messages = [{"role": "user", "content": item["prompt"]}]
        else:
            raise BenchError(f"{path}:{number}: needs a 'prompt' string or a 'messages' list")
        max_tokens = item.get("max_tokens", item.get("output_len", output_len))
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise BenchError(f"{path}:{number}: max_tokens must be a positive integer")
        prompts.append(BenchPrompt(messages, max_tokens))
    if not prompts:
        raise BenchError(f"{path}: no prompts in the file")
    return prompts


def take_cycled(prompts: Sequence[BenchPrompt], n: int, offset: int = 0) -> list[BenchPrompt]:
    return [prompts[(offset + i) % len(prompts)] for i in range(n)]


# --------------------------------------------------------------------------- load shapes


async def drive_concurrency(
    send: Callable[[BenchPrompt], Any], prompts: Sequence[BenchPrompt], concurrency: int
) -> list[RequestResult]:
    """Keep ``concurrency`` requests in flight until every prompt has been sent."""
    queue = list(reversed(prompts))
    results: list[RequestResult] = []

    async def worker() -> None:
        while queue:
            results.append(await send(queue.pop()))

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(prompts))))))
    return results


def poisson_gaps(n: int, rate: float, seed: str) -> list[float]:
    """Seconds to wait before each of ``n`` arrivals at ``rate`` per second (0 for inf)."""
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(seed)
    return [0.0] + [rng.expovariate(rate) for _ in range(n - 1)]


async def drive_rate(
    send: Callable[[BenchPrompt], Any],
    prompts: Sequence[BenchPrompt],
    rate: float,
    max_concurrency: int | None,
    seed: str,
) -> list[RequestResult]:
    """Start requests at Poisson arrival times, optionally at most ``max_concurrency`` at once."""
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def one(prompt: BenchPrompt) -> RequestResult:
        if gate is None:
            return await send(prompt)
        async with gate:
            return await send(prompt)

    tasks = []
    for gap, prompt in zip(poisson_gaps(len(prompts), rate, seed), prompts, strict=True):
        if gap:
            await asyncio.sleep(gap)
        tasks.append(asyncio.create_task(one(prompt)))
    return list(await asyncio.gather(*tasks))


# --------------------------------------------------------------------------- reduction


def _distinct_errors(results: Sequence[RequestResult]) -> list[str]:
    seen: list[str] = []
    for r in results:
        if r.error and r.error not in seen:
            seen.append(r.error)
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
        errors=_distinct_errors(results),
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
        errors=_distinct_errors(results),
        prompt_tokens=sum(r.prompt_tokens for r in ok) / len(ok) if ok else None,
        output_tokens=sum(r.output_tokens for r in ok) / len(ok) if ok else None,
        ttft_ms=summarize_ms([r.ttft for r in ok if r.ttft is not None]),
        e2el_ms=summarize_ms([r.e2e for r in ok]),
        prefill_tps=sum(prefill) / len(prefill) if prefill else None,
        decode_tps=sum(decode) / len(decode) if decode else None,
        spec_decode=spec,
    )


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _mean(p: Percentiles | None) -> float | None:
    return p.mean if p is not None else None


def compare_reports(a: EndpointReport, b: EndpointReport) -> list[RatioRow]:
    """Ratios first / second per load point and per depth (matched by label / depth)."""
    rows: list[RatioRow] = []
    b_points = {p.label: p for p in b.points}
    for pa in a.points:
        pb = b_points.get(pa.label)
        if pb is None:
            continue
        rows.append(
            RatioRow(
                point=pa.label,
                ratios={
                    "output_throughput": _ratio(pa.output_throughput, pb.output_throughput),
                    "request_throughput": _ratio(pa.request_throughput, pb.request_throughput),
                    "ttft_mean": _ratio(_mean(pa.ttft_ms), _mean(pb.ttft_ms)),
                    "tpot_mean": _ratio(_mean(pa.tpot_ms), _mean(pb.tpot_ms)),
                    "itl_mean": _ratio(_mean(pa.itl_ms), _mean(pb.itl_ms)),
                    "e2el_mean": _ratio(_mean(pa.e2el_ms), _mean(pb.e2el_ms)),
                },
            )
        )
    b_depths = {d.depth: d for d in b.depths}
    for da in a.depths:
        db = b_depths.get(da.depth)
        if db is None:
            continue
        rows.append(
            RatioRow(
                point=f"depth={da.depth}",
                ratios={
                    "prefill_tps": _ratio(da.prefill_tps, db.prefill_tps),
                    "decode_tps": _ratio(da.decode_tps, db.decode_tps),
                    "ttft_mean": _ratio(_mean(da.ttft_ms), _mean(db.ttft_ms)),
                    "e2el_mean": _ratio(_mean(da.e2el_ms), _mean(db.e2el_ms)),
                },
            )
        )
    return rows


# --------------------------------------------------------------------------- endpoints


def server_root(url: str) -> str:
    """``http://host:8000/v1/`` -> ``http://host:8000`` (vLLM's /metrics and /tokenize sit at
    the root; the OpenAI routes under /v1)."""
    root = url.strip().rstrip("/")
    if not root.startswith(("http://", "https://")):
        raise BenchError(f"endpoint {url!r}: expected an http:// or https:// URL")
    return root.removesuffix("/v1")


@dataclass
class Endpoint:
    label: str
    root: str
    model: str = ""

    @property
    def chat_url(self) -> str:
        return f"{self.root}/v1/chat/completions"


async def discover_model(client: httpx.AsyncClient, root: str) -> str:
    """The first served model name from ``/v1/models``."""
    try:
        resp = await client.get(f"{root}/v1/models")
    except httpx.HTTPError as exc:
        raise BenchError(f"cannot reach {root}: {type(exc).__name__}: {exc}") from exc
    if resp.status_code != 200:
        raise BenchError(
            f"{root}/v1/models answered {_error_text(resp.status_code, resp.content)}; "
            "pass --model if the server does not list its models"
        )
    try:
        data = resp.json()["data"]
        return str(data[0]["id"])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise BenchError(f"{root}/v1/models lists no model; pass --model") from exc


async def snapshot(client: httpx.AsyncClient, root: str) -> MetricsSnapshot | None:
    """The server's /metrics, or None when it has none (not vLLM, or unreachable)."""
    try:
        resp = await client.get(f"{root}/metrics")
        if resp.status_code != 200:
            return None
        return MetricsSnapshot.from_text(resp.text)
    except (httpx.HTTPError, MetricsParseError):
        return None


def _spec(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> SpecDecodeStats | None:
    if before is None or after is None:
        return None
    return spec_decode_delta(before, after)


# --------------------------------------------------------------------------- the run


def validate_config(config: BenchConfig) -> None:
    if any(c < 1 for c in config.concurrency):
        raise BenchError("--concurrency values must be >= 1")
    if any(not r > 0 for r in config.request_rates):
        raise BenchError("--request-rate values must be > 0 (inf sends all at once)")
    if config.request_rates and config.concurrency:
        raise BenchError("give --concurrency or --request-rate, not both (use --max-concurrency)")
    if any(d < 0 for d in config.depths):
        raise BenchError("--depth values must be >= 0")
    if config.num_prompts is not None and config.num_prompts < 1:
        raise BenchError("--num-prompts must be >= 1")


async def run_bench(config: BenchConfig, progress: Progress | None = None) -> BenchReport:
    """Run every load point (and depth) against the endpoint(s) and return the report."""
    validate_config(config)
    say = progress or (lambda _msg: None)
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
        calibration = (
            await calibrate(client, endpoints[0].root, endpoints[0].model, config.seed)
            if config.use_tokenize
            else Calibration("heuristic")
        )
        dataset = load_dataset(config.dataset, config.output_len) if config.dataset else None
        reports = [EndpointReport(label=ep.label, url=ep.root, model=ep.model) for ep in endpoints]

        async def send_to(ep: Endpoint, prompt: BenchPrompt) -> RequestResult:
            return await send_chat(client, ep.chat_url, chat_body(ep.model, prompt, config))

        if config.warmup:
            warm = synthetic_prompts(
                config.warmup, config.input_len, config.output_len, calibration, "warmup"
            )
            for ep in endpoints:
                say(f"{ep.label}: {config.warmup} warm-up request(s)")
                for prompt in warm:
                    await send_to(ep, prompt)

        for index, point in enumerate(config.load_points()):
            n = config.prompts_for(point)
            if dataset is not None:
                prompts = take_cycled(dataset, n)
            else:
                prompts = synthetic_prompts(
                    n, config.input_len, config.output_len, calibration, f"{config.seed}:p{index}"
                )
            for ep, report in zip(endpoints, reports, strict=True):
                say(f"{ep.label}: {point.label}, {n} requests")
                before = await snapshot(client, ep.root)
                t0 = time.perf_counter()
                if point.request_rate is not None:
                    results = await drive_rate(
                        lambda p, ep=ep: send_to(ep, p),
                        prompts,
                        point.request_rate,
                        point.max_concurrency,
                        f"{config.seed}:rate:{index}",
                    )
                else:
                    results = await drive_concurrency(
                        lambda p, ep=ep: send_to(ep, p), prompts, point.concurrency or 1
                    )
                end = max((r.ended_at for r in results), default=t0)
                after = await snapshot(client, ep.root)
                report.points.append(
                    reduce_point(
                        point,
                        results,
                        end - t0,
                        _spec(before, after),
                        metrics_available=before is not None and after is not None,
                    )
                )

        for depth in config.depths:
            for ep, report in zip(endpoints, reports, strict=True):
                say(f"{ep.label}: depth {depth}, {config.depth_runs} run(s)")
                before = await snapshot(client, ep.root)
                results = []
                for run in range(config.depth_runs):
                    prompt = depth_prompt(
                        depth,
                        config.input_len,
                        config.output_len,
                        calibration,
                        f"{config.seed}:d{depth}:{run}",
                    )
                    results.append(await send_to(ep, prompt))
                after = await snapshot(client, ep.root)
                report.depths.append(reduce_depth(depth, results, _spec(before, after)))

    comparison = compare_reports(reports[0], reports[1]) if len(reports) == 2 else []
    return BenchReport(
        started_at=started_at,
        config=config,
        calibration=calibration.source,
        endpoints=reports,
        comparison=comparison,
    )
