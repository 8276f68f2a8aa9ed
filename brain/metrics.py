"""vLLM's /metrics (Prometheus text format) -> a typed snapshot, and spec-decode deltas.

Names are vLLM's own (vllm/v1/metrics/loggers.py, vllm/v1/spec_decode/metrics.py). Counters
only mean something as differences, so acceptance is computed from two snapshots, the way
``vllm bench serve`` does. Parsing is pure; only ``fetch_metrics`` does I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from brain.urls import server_root

if TYPE_CHECKING:
    import httpx

Labels = frozenset[tuple[str, str]]
Samples = dict[tuple[str, Labels], float]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^(?P<name>{_NAME})(?P<labels>\{{.*\}})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


class MetricsParseError(ValueError):
    """A /metrics line that is not valid Prometheus text."""


def _unescape(v: str) -> str:
    if "\\" not in v:  # nearly every label value; this check took 40% off the parse
        return v
    out, i = [], 0
    while i < len(v):
        c = v[i]
        if c == "\\" and i + 1 < len(v):
            nxt = v[i + 1]
            out.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _parse_labels(body: str, line: str) -> Labels:
    inner = body[1:-1].strip()
    labels: list[tuple[str, str]] = []
    pos = 0
    while pos < len(inner):
        m = _LABEL.match(inner, pos)
        if not m:
            raise MetricsParseError(f"bad labels in {line!r}")
        labels.append((m.group(1), _unescape(m.group(2))))
        pos = m.end()
    return frozenset(labels)


def _parse_value(s: str, line: str) -> float:
    low = s.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    try:
        return float(s)
    except ValueError:
        raise MetricsParseError(f"bad value {s!r} in {line!r}") from None


# Ours, not prometheus_client's parser (which the sim's tests read with, and which
# tests/test_brain_metrics.py holds this one to, sample for sample, on a real vLLM page): the
# pilot parses every server's page on its event loop at each admission and routing poll, and
# on vLLM 0.26's real pages (59 KB, 520 samples) this takes 3.4 ms of CPU against 18.0 for
# ``text_string_to_metric_families``, 5.4x (`python -m bench.libraries metrics`,
# bench/README.md "Our code beside a library").
def parse_prometheus_text(text: str) -> Samples:
    """Every sample as ``{(name, frozenset(labels)): value}``.

    Handles comments (# HELP / # TYPE), quoted label values with \\\\ \\" \\n escapes (commas
    and braces inside them), +Inf/-Inf/NaN, optional timestamps, and histogram/summary series
    (``_bucket{le=...}``, ``_sum``, ``_count``) as plain samples.
    """
    samples: Samples = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise MetricsParseError(f"not a sample line: {line!r}")
        labels = _parse_labels(m["labels"], line) if m["labels"] else frozenset()
        samples[(m["name"], labels)] = _parse_value(m["value"], line)
    return samples


def _sum(samples: Mapping[tuple[str, Labels], float], name: str) -> float | None:
    """Sum a metric over all label sets (engines, models); None if absent."""
    vals = [v for (n, _), v in samples.items() if n == name]
    return sum(vals) if vals else None


class Histogram(BaseModel):
    sum: float = 0.0
    count: float = 0.0

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None


class MetricsSnapshot(BaseModel):
    """The numbers the brain watches, summed over engines. None = the server did not export it."""

    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage: float | None = None
    """0-1 (``vllm:kv_cache_usage_perc`` is a fraction despite its name)."""
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    preemptions: float | None = None
    prefix_cache_queries: float | None = None
    """Prompt tokens looked up in the prefix cache (``vllm:prefix_cache_queries``)."""
    prefix_cache_hits: float | None = None
    """Of those, tokens found there: their prefill was not computed again."""
    cache_config: dict[str, str] | None = None
    """The labels of ``vllm:cache_config_info`` (block_size, num_gpu_blocks, ...), engine 0."""
    spec_drafts: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None
    spec_accepted_per_position: list[float] = Field(default_factory=list)
    ttft: Histogram | None = None
    itl: Histogram | None = None
    e2e: Histogram | None = None

    @classmethod
    def from_samples(cls, s: Samples) -> MetricsSnapshot:
        def counter(base: str) -> float | None:
            v = _sum(s, base + "_total")
            return v if v is not None else _sum(s, base)

        def hist(base: str) -> Histogram | None:
            total, count = _sum(s, base + "_sum"), _sum(s, base + "_count")
            if total is None and count is None:
                return None
            return Histogram(sum=total or 0.0, count=count or 0.0)

        per_pos: dict[int, float] = {}
        for (name, labels), v in s.items():
            if name in (
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                "vllm:spec_decode_num_accepted_tokens_per_pos",
            ):
                pos = dict(labels).get("position")
                if pos is not None and pos.isdigit():
                    per_pos[int(pos)] = per_pos.get(int(pos), 0.0) + v
        cache_config = next(
            (dict(labels) for (name, labels) in s if name == "vllm:cache_config_info"), None
        )
        kv = _sum(s, "vllm:kv_cache_usage_perc")
        n_kv = sum(1 for (n, _) in s if n == "vllm:kv_cache_usage_perc")
        return cls(
            requests_running=_sum(s, "vllm:num_requests_running"),
            requests_waiting=_sum(s, "vllm:num_requests_waiting"),
            kv_cache_usage=kv / n_kv if kv is not None and n_kv else None,
            prompt_tokens=counter("vllm:prompt_tokens"),
            generation_tokens=counter("vllm:generation_tokens"),
            preemptions=counter("vllm:num_preemptions"),
            prefix_cache_queries=counter("vllm:prefix_cache_queries"),
            prefix_cache_hits=counter("vllm:prefix_cache_hits"),
            cache_config=cache_config,
            spec_drafts=counter("vllm:spec_decode_num_drafts"),
            spec_draft_tokens=counter("vllm:spec_decode_num_draft_tokens"),
            spec_accepted_tokens=counter("vllm:spec_decode_num_accepted_tokens"),
            spec_accepted_per_position=[per_pos[i] for i in sorted(per_pos)],
            ttft=hist("vllm:time_to_first_token_seconds"),
            itl=hist("vllm:inter_token_latency_seconds"),
            e2e=hist("vllm:e2e_request_latency_seconds"),
        )

    @classmethod
    def from_text(cls, text: str) -> MetricsSnapshot:
        return cls.from_samples(parse_prometheus_text(text))

    @property
    def kv_capacity_tokens(self) -> int | None:
        """The KV cache's size in tokens from ``vllm:cache_config_info``: its
        ``kv_cache_size_tokens`` label where the server has it, else num_gpu_blocks x
        block_size; None when the server does not say (not vLLM, or an older one)."""
        labels = self.cache_config or {}

        def number(key: str) -> int | None:
            try:
                value = int(float(labels[key]))
            except (KeyError, ValueError):
                return None
            return value if value > 0 else None

        tokens = number("kv_cache_size_tokens")
        if tokens is not None:
            return tokens
        blocks, size = number("num_gpu_blocks"), number("block_size")
        return blocks * size if blocks is not None and size is not None else None


class SpecDecodeStats(BaseModel):
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    acceptance_rate: float
    """accepted / draft tokens, 0-1."""
    mean_acceptance_length: float
    """1 + accepted / drafts: tokens emitted per target forward pass."""
    per_position: list[float]
    """Acceptance rate at each draft position (position i accepted / drafts)."""


def spec_decode_delta(before: MetricsSnapshot, after: MetricsSnapshot) -> SpecDecodeStats | None:
    """Speculative-decoding quality between two snapshots; None when speculation is off or no
    drafts happened in between (nothing to divide by)."""
    if after.spec_drafts is None or after.spec_draft_tokens is None:
        return None
    d_drafts = after.spec_drafts - (before.spec_drafts or 0.0)
    d_tokens = after.spec_draft_tokens - (before.spec_draft_tokens or 0.0)
    d_acc = (after.spec_accepted_tokens or 0.0) - (before.spec_accepted_tokens or 0.0)
    if d_drafts <= 0 or d_tokens <= 0:
        return None
    b = before.spec_accepted_per_position
    per_pos = [
        (v - (b[i] if i < len(b) else 0.0)) / d_drafts
        for i, v in enumerate(after.spec_accepted_per_position)
    ]
    return SpecDecodeStats(
        drafts=d_drafts,
        draft_tokens=d_tokens,
        accepted_tokens=d_acc,
        acceptance_rate=d_acc / d_tokens,
        mean_acceptance_length=1.0 + d_acc / d_drafts,
        per_position=per_pos,
    )


async def fetch_metrics(
    base_url: str, client: httpx.AsyncClient | None = None, *, timeout: float = 10.0
) -> MetricsSnapshot:
    """GET {base_url}/metrics (no API key needed: vLLM leaves /metrics open) and parse it.

    ``base_url`` may end in /v1; the metrics endpoint sits at the server root.
    """
    import httpx

    root = server_root(base_url)
    own = client is None
    c = client or httpx.AsyncClient(timeout=timeout)
    try:
        resp = await c.get(f"{root}/metrics")
        resp.raise_for_status()
        return MetricsSnapshot.from_text(resp.text)
    finally:
        if own:
            await c.aclose()
