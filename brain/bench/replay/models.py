"""The values of ``brain bench --replay``: what a replay is asked to do (``ReplayConfig``) and
what it reports (a row per request, per depth bucket, per point, per endpoint).

Plain pydantic models, no I/O: the CLI fills the config, ``brain.bench.replay.run`` the results,
``brain.bench.replay.report`` shows them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from brain.bench.models import EndpointConfig, Percentiles, RatioRow
from brain.metrics import SpecDecodeStats


class ReplayConfig(EndpointConfig):
    """One ``brain bench --replay`` invocation; the CLI fills it, tests build it."""

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
        """The counters' misses; with prefix caching off vLLM counts no queries at all, so
        zero queries for a point that sent prompts means everything was computed."""
        if self.counter_queries:
            return self.counter_queries - (self.counter_hits or 0.0)
        if self.cached_tokens is not None:
            return float(self.prompt_tokens - self.cached_tokens)
        if self.counter_queries is not None:
            return float(self.prompt_tokens)
        return None


class ReplayEndpointReport(BaseModel):
    label: str
    url: str
    model: str
    points: list[ReplayPoint] = Field(default_factory=list)
    requests: list[list[RequestRow]] = Field(default_factory=list)
    """Every request of every point, in the order of ``points``."""


class ReplayReport(BaseModel):
    started_at: str
    config: ReplayConfig
    recordings: list[dict[str, Any]]
    """Each replay file: name, path, requests, compactions, recorded model."""
    endpoints: list[ReplayEndpointReport]
    comparison: list[RatioRow] = Field(default_factory=list)
