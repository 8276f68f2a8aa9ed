"""The values of ``brain bench``: what a run is asked to do (``BenchConfig``, ``LoadPoint``), a
prompt, and what it reports (``PointResult``, ``DepthResult``, ``BenchReport``).

Plain pydantic models and one dataclass, no I/O: the CLI fills the config, the drivers fill the
results, ``brain.bench.report`` prints them and writes them as JSON.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from brain.errors import BrainError
from brain.metrics import SpecDecodeStats

Progress = Callable[[str], None]


class BenchError(BrainError):
    """The benchmark cannot run as asked: bad options, unreachable endpoint, unreadable file."""


class EndpointConfig(BaseModel):
    """Where a bench sends and how it samples: what ``brain bench`` and ``--replay`` share."""

    url: str
    compare_url: str | None = None
    labels: tuple[str, str] = ("A", "B")
    model: str | None = None
    compare_model: str | None = None
    api_key: str | None = Field(None, exclude=True, repr=False)
    temperature: float = 0.0
    ignore_eos: bool = True
    seed: int = 0
    timeout: float = Field(600.0, gt=0)


class BenchConfig(EndpointConfig):
    """Everything one ``brain bench`` invocation does; the CLI fills it, tests build it."""

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
    use_tokenize: bool = True

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


@dataclass
class BenchPrompt:
    messages: list[dict[str, Any]]
    max_tokens: int
