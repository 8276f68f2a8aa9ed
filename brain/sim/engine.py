"""The engine's time and capacity: batch slots, the waiting queue, prefill, decode steps, MTP.

What it models, all with asyncio sleeps so the event loop never blocks:

* capacity: at most ``max_num_seqs`` requests run at once; the rest wait in FIFO order
  (``vllm:num_requests_waiting``); with ``max_queue`` set, a request that would make the queue
  longer than that is refused with vLLM's 503;
* time to first token = ``ttft + ttft_per_token * prompt_tokens`` after admission;
* decoding in steps of ``itl`` seconds; each step emits one token, plus, with speculative
  decoding on, the accepted prefix of ``k`` drafted tokens (each position accepted with
  probability ``acceptance`` while all before it were). So MTP shows as more tokens per second
  and in the ``vllm:spec_decode_*`` counters, like the real thing;
* the metrics vLLM exposes for all of this (see ``metrics_text``).

It knows nothing of HTTP, chat or policies.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from dataclasses import dataclass

from brain.sim.config import SimConfig
from brain.sim.errors import queue_full
from brain.sim.metrics_text import MetricsRegistry

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
FINISH_REASONS = ("stop", "length", "abort", "error")


@dataclass
class RequestClock:
    """Timestamps of one request, for the latency histograms."""

    arrival: float
    first_token: float | None = None
    last_token: float | None = None


class SimEngine:
    """One engine core: scheduler state, timing, speculative decoding and metrics."""

    def __init__(self, config: SimConfig):
        self.config = config
        self.dead = False
        self._running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._kv_tokens: dict[int, int] = {}
        self.metrics = self._declare_metrics()

    # ----------------------------------------------------------------- metrics

    def _declare_metrics(self) -> MetricsRegistry:
        reg = MetricsRegistry({"model_name": self.config.primary_name, "engine": "0"})
        reg.declare(
            "vllm:num_requests_running", "Number of requests in model execution batches.", "gauge"
        )
        reg.declare(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge"
        )
        reg.declare(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge"
        )
        reg.declare(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", "counter"
        )
        reg.declare("vllm:prompt_tokens", "Number of prefill tokens processed.", "counter")
        reg.declare("vllm:generation_tokens", "Number of generation tokens processed.", "counter")
        reg.declare("vllm:request_success", "Count of successfully processed requests.", "counter")
        reg.declare(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            "histogram",
            TTFT_BUCKETS,
        )
        reg.declare(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            "histogram",
            ITL_BUCKETS,
        )
        reg.declare(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            "histogram",
            E2E_BUCKETS,
        )
        for name in (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
        ):
            reg.ensure(name)
        for name in ("vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens"):
            reg.ensure(name)
        for reason in FINISH_REASONS:
            reg.ensure("vllm:request_success", {"finished_reason": reason})
        for name in (
            "vllm:time_to_first_token_seconds",
            "vllm:inter_token_latency_seconds",
            "vllm:e2e_request_latency_seconds",
        ):
            reg.ensure(name)
        spec = self.config.speculative
        if spec.enabled:
            reg.declare("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", "counter")
            reg.declare("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", "counter")
            reg.declare(
                "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", "counter"
            )
            reg.declare(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                "counter",
            )
            for name in (
                "vllm:spec_decode_num_drafts",
                "vllm:spec_decode_num_draft_tokens",
                "vllm:spec_decode_num_accepted_tokens",
            ):
                reg.ensure(name)
            for pos in range(spec.num_tokens):
                reg.ensure("vllm:spec_decode_num_accepted_tokens_per_pos", {"position": str(pos)})
        return reg

    def render_metrics(self) -> str:
        self._refresh_gauges()
        return self.metrics.render()

    def _refresh_gauges(self) -> None:
        self.metrics.set("vllm:num_requests_running", self._running)
        self.metrics.set("vllm:num_requests_waiting", len(self._waiters))
        used = sum(self._kv_tokens.values())
        self.metrics.set("vllm:kv_cache_usage_perc", min(1.0, used / self.config.kv_cache_tokens))

    @property
    def num_running(self) -> int:
        return self._running

    @property
    def num_waiting(self) -> int:
        return len(self._waiters)

    # --------------------------------------------------------------- scheduler

    def admit(self, request_id: int, prompt_tokens: int) -> Ticket:
        """Take a batch slot now, or a place in the FIFO queue; 503 when the queue is full.

        Synchronous on purpose: the 503 must be decided before a streamed response starts.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        if self._running < self.config.max_num_seqs and not self._waiters:
            self._running += 1
            future.set_result(None)
        else:
            limit = self.config.max_queue
            if limit is not None and len(self._waiters) >= limit:
                raise queue_full()
            self._waiters.append(future)
        return Ticket(self, request_id, prompt_tokens, future)

    def _release_slot(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes straight to the next in line
                return
        self._running -= 1

    # ------------------------------------------------------------------ timing

    async def prefill(self, prompt_tokens: int) -> None:
        timing = self.config.timing
        self.metrics.inc("vllm:prompt_tokens", prompt_tokens)
        await asyncio.sleep(timing.ttft + timing.ttft_per_token * prompt_tokens)

    def decoder(self, request_number: int) -> Decoder:
        rng = random.Random(f"{self.config.seed}:spec:{request_number}")
        return Decoder(self, rng)

    def token_emitted(self, request_id: int, count: int) -> None:
        self.metrics.inc("vllm:generation_tokens", count)
        if request_id in self._kv_tokens:
            self._kv_tokens[request_id] += count

    def finished(self, clock: RequestClock, reason: str) -> None:
        now = time.monotonic()
        self.metrics.inc("vllm:request_success", 1, {"finished_reason": reason})
        self.metrics.observe("vllm:e2e_request_latency_seconds", now - clock.arrival)


class Decoder:
    """Decode steps for one request: how many tokens each step yields, after sleeping for it."""

    def __init__(self, engine: SimEngine, rng: random.Random):
        self._engine = engine
        self._rng = rng
        self._next_step: float | None = None

    def _accepted(self) -> int:
        spec = self._engine.config.speculative
        accepted = 0
        while accepted < spec.num_tokens and self._rng.random() < spec.acceptance:
            accepted += 1
        return accepted

    async def step(self, remaining: int, clock: RequestClock) -> int:
        """Sleep one decode step and return how many tokens it produced (<= remaining)."""
        engine = self._engine
        spec = engine.config.speculative
        await self._sleep_until_next_step(engine.config.timing.itl)
        produced = 1
        if spec.enabled:
            accepted = self._accepted()
            reg = engine.metrics
            reg.inc("vllm:spec_decode_num_drafts")
            reg.inc("vllm:spec_decode_num_draft_tokens", spec.num_tokens)
            reg.inc("vllm:spec_decode_num_accepted_tokens", accepted)
            for pos in range(accepted):
                reg.inc("vllm:spec_decode_num_accepted_tokens_per_pos", 1, {"position": str(pos)})
            produced += accepted
        now = time.monotonic()
        if clock.last_token is not None:
            engine.metrics.observe("vllm:inter_token_latency_seconds", now - clock.last_token)
        clock.last_token = now
        return min(produced, remaining)

    async def _sleep_until_next_step(self, itl: float) -> None:
        """Keep steps on an absolute schedule: small sleep overshoots are caught up, long
        pauses (a stall fault) are not turned into a burst."""
        now = time.monotonic()
        if self._next_step is None or now - self._next_step > 0.05:
            self._next_step = now
        self._next_step += itl
        await asyncio.sleep(max(0.0, self._next_step - now))

    def first_token(self, clock: RequestClock) -> None:
        now = time.monotonic()
        clock.first_token = clock.last_token = now
        self._engine.metrics.observe("vllm:time_to_first_token_seconds", now - clock.arrival)


class Ticket:
    """One request's claim on the scheduler: wait for the slot, then release it exactly once."""

    def __init__(
        self, engine: SimEngine, request_id: int, prompt_tokens: int, future: asyncio.Future[None]
    ):
        self._engine = engine
        self._request_id = request_id
        self._prompt_tokens = prompt_tokens
        self._future = future
        self._released = False

    async def admitted(self) -> None:
        await asyncio.shield(self._future)
        self._engine._kv_tokens[self._request_id] = self._prompt_tokens

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        engine = self._engine
        engine._kv_tokens.pop(self._request_id, None)
        if self._future.done():
            engine._release_slot()
        else:
            self._future.cancel()
            if self._future in engine._waiters:
                engine._waiters.remove(self._future)
