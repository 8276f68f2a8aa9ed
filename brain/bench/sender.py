"""One streamed chat request, sent and timed: the body, the POST, the time of every chunk that
carries generated text, the usage, and an error text from vLLM's error body.

What the timings mean (TTFT, TPOT, ITL, chunk gap) is in ``brain.bench.stats``.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from brain.bench.models import BenchConfig, BenchPrompt
from brain.sse import SSEDecoder


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
        """Per-token inter-token latencies (ITL, as ``brain.bench.stats`` defines it)."""
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


def error_text(status: int, body: bytes) -> str:
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


async def _events(resp: httpx.Response) -> AsyncIterator[bytes]:
    """The ``data`` of each event of the stream, as it completes (``brain.sse``: the pilot's
    reader too; an event the stream did not close is never read)."""
    decoder = SSEDecoder()
    async for chunk in resp.aiter_bytes():
        for data in decoder.feed(chunk):
            yield data


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
                result.error = error_text(resp.status_code, await resp.aread())
                return result
            async for data in _events(resp):
                if data.strip() == b"[DONE]":
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
