"""The values of a tune: what it is asked (``TuneConfig``), what one replay measured
(``Sample``), the intervals and winner per point (``PointDecision``) and the whole evidence
(``TuneReport``). Plain pydantic models, no I/O."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class TuneConfig(BaseModel):
    """One ``brain tune`` invocation; the CLI fills it, tests build it."""

    profile: str
    replay: list[Path]
    concurrency: list[int] = Field(default_factory=lambda: [1])
    candidates: str = "off,ngram:2,ngram:4"
    depth_edges: list[int] = Field(default_factory=lambda: [2048, 8192, 16384, 32768])
    """Context-depth buckets (prompt tokens): below the first edge, between edges, above."""
    budget_s: float = Field(480.0, gt=0)
    """Seconds of measuring (rounds after the servers are up); the rounds stop when it is spent."""
    wall_s: float | None = Field(None, gt=0)
    """The whole tune's seconds, server starts included: the measuring budget shrinks to fit
    (what a time-limited call needs when the servers may have to start first)."""
    min_rounds: int = Field(2, ge=2)
    max_rounds: int = Field(12, ge=2)
    requests_per_run: int | None = Field(None, ge=1)
    """Requests replayed per run, evenly spaced through it (None: all)."""
    runs: int | None = Field(None, ge=1)
    """Runs per point (None: max(concurrency, recordings))."""
    max_tokens: int | None = Field(None, ge=1)
    margin: float = Field(0.03, ge=0)
    """A point is settled when no candidate's speed ratio to the winner can exceed 1 + margin."""
    choose_at: int | None = None
    """The concurrency the tuned profile is chosen for (None: the highest measured)."""
    base_port: int = Field(8100, ge=0, le=65500)
    """Candidate i serves on base_port + i; 0: the OS picks free ports."""
    sets: list[str] = Field(default_factory=list)
    """``key=value`` overrides of the profile for the measured servers (``--set``)."""
    share_gpu: bool = True
    seed: int = 0
    timeout: float = Field(600.0, gt=0)


class DepthSample(BaseModel):
    """One candidate's requests in one depth bucket, one round."""

    requests: int
    decode_tps: float | None = None
    """Token-weighted: sum(output - 1) / sum(E2E - TTFT)."""
    tpot_ms: float | None = None
    ttft_ms: float | None = None
    e2e_s: float | None = None
    """Mean end-to-end seconds per turn."""
    busy_s: float = 0.0
    """Sum of the requests' E2E: where the runs spend their time."""


class Sample(BaseModel):
    """One replay of the traffic against one candidate at one concurrency."""

    candidate: str
    concurrency: int
    round: int
    wall_s: float
    requests: int
    failed: int
    errors: list[str] = Field(default_factory=list)
    decode_tps: float | None = None
    depths: dict[str, DepthSample] = Field(default_factory=dict)
    acceptance: float | None = None
    per_position: list[float] = Field(default_factory=list)
    hit_rate: float | None = None


class Interval(BaseModel):
    mean: float
    low: float
    high: float
    n: int


class CandidateResult(BaseModel):
    candidate: str
    decode_tps: Interval | None = None
    ratio_to_off: Interval | None = None
    """Paired per round (the rounds interleave candidates, so a drift hits both)."""
    tpot_ms: float | None = None
    ttft_ms: float | None = None
    e2e_s: float | None = None
    acceptance: float | None = None
    per_position: list[float] = Field(default_factory=list)


class PointDecision(BaseModel):
    concurrency: int
    depth: str
    busy_s: float = 0.0
    winner: str = "off"
    settled: bool = False
    why: str = ""
    results: list[CandidateResult] = Field(default_factory=list)


class StartCost(BaseModel):
    candidate: str
    server: str
    port: int
    start_s: float | None = None
    """Spawn to ready; None when a running server was reused."""
    reused: bool = False


class TuneReport(BaseModel):
    started_at: str
    ended_at: str = ""
    config: TuneConfig
    profile_path: str
    model: str
    vllm_version: str | None = None
    candidates: list[str]
    starts: list[StartCost] = Field(default_factory=list)
    rounds: int = 0
    measure_s: float = 0.0
    samples: list[Sample] = Field(default_factory=list)
    points: list[PointDecision] = Field(default_factory=list)
    choice: str = "off"
    choice_point: str = ""
    depth_note: str = ""
    hit_rate: float | None = None
    notes: list[str] = Field(default_factory=list)
