"""The engine's time and capacity: batch slots, KV blocks, the waiting queue, prefill, decode, MTP.

What it models, all with asyncio sleeps so the event loop never blocks:

* the scheduler of vLLM's V1 engine (``vllm/v1/core/sched/scheduler.py``), first come first
  served: a waiting request is admitted when a batch slot is free (``max_num_seqs``) and the
  KV cache has the blocks its prompt needs after prefix-cache hits (``kv.py``); the queue is
  served in order, so a head that does not fit holds the rest back. With ``max_queue`` set, a
  request that would make the queue longer than that is refused with vLLM's 503;
* preemption with recompute: a running request that needs a new block when none is free
  preempts the most recently admitted running request (itself when it is that one), whose
  blocks go back to the pool (still cached) and which rejoins the queue's front; readmitted,
  it prefills its prompt and its output so far again, minus what the prefix cache still holds
  (``vllm:num_preemptions``);
* one GPU's compute, shared as vLLM's scheduler shares it: each engine step computes up to
  ``max_num_batched_tokens`` tokens, the decode tokens of every running request batched
  together plus chunks of the waiting prefills, first come first served, and a step takes
  ``itl`` for its decodes plus ``ttft_per_token`` for each prefill token it computes. The sim
  keeps one prefill lane for that: a prefill (or a recompute after preemption) queues its
  computed tokens behind the others' (cached prefix tokens cost nothing), and while the lane
  is busy every decode step is longer by the chunk it carries. So two long prefills at once
  take twice as long as one, a prefix recomputed for one request slows all of them (an
  aborted request's chunks not yet computed are dropped); a request alone keeps
  ``ttft + ttft_per_token * computed tokens`` to its first token and ``itl`` a step;
* decoding in steps of ``itl`` seconds; each step emits one token, plus, with speculative
  decoding on, the accepted prefix of ``k`` drafted tokens (each position accepted with
  probability ``acceptance`` while all before it were). So MTP shows as more tokens per second
  and in the ``vllm:spec_decode_*`` counters, like the real thing;
* the metric families vLLM 0.33 exposes by default (``vllm/v1/metrics/loggers.py``), with its
  names, help texts, labels and buckets (``metrics_text`` writes them).

It knows nothing of HTTP, chat or policies.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from brain.sim.config import SimConfig
from brain.sim.errors import queue_full
from brain.sim.kv import Allocation, KVCache
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
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
"""``FinishReason`` in ``vllm/v1/engine/__init__.py``, in its order."""
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")


def build_1_2_5_buckets(max_value: int) -> tuple[int, ...]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50, ... up to ``max_value``."""
    out: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_value:
                return tuple(out)
            out.append(mantissa * scale)
        scale *= 10


@dataclass
class RequestClock:
    """Timestamps of one request, for the latency histograms."""

    arrival: float
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None


@dataclass
class _Request:
    """One request's scheduler state."""

    request_id: int
    prompt_tokens: int
    hashes: tuple[int, ...]
    future: asyncio.Future[None]
    generated: int = 0
    alloc: Allocation | None = None
    preemptions: int = 0
    preempted: bool = False
    hit_tokens: int = 0
    first_schedule: bool = True
    done: bool = False
    computed: list[int] = field(default_factory=list)


class SimEngine:
    """One engine core: scheduler, KV cache, timing, speculative decoding and metrics."""

    def __init__(self, config: SimConfig):
        self.config = config
        self.dead = False
        self.kv = KVCache(config.num_kv_blocks, config.block_size, config.enable_prefix_caching)
        self._running: list[_Request] = []
        self._waiting: list[_Request] = []
        self._lane_until = 0.0
        """When the prefill lane has computed every prefill token queued on it (monotonic)."""
        self.metrics = self._declare_metrics()

    # ----------------------------------------------------------------- metrics

    def _declare_metrics(self) -> MetricsRegistry:
        config = self.config
        reg = MetricsRegistry({"model_name": config.primary_name, "engine": "0"})
        tokens = build_1_2_5_buckets(config.max_model_len)
        gauges = (
            ("vllm:num_requests_running", "Number of requests in model execution batches."),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
        )
        for name, text in gauges:
            reg.declare(name, text, "gauge")
            reg.ensure(name)
        reg.declare(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
            "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            "gauge",
            labels=("reason",),
        )
        for reason in ("capacity", "deferred"):
            reg.ensure("vllm:num_requests_waiting_by_reason", {"reason": reason})
        reg.declare(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
            "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep "
            "level 2.",
            "gauge",
            labels=("sleep_state",),
        )
        for state in ("awake", "weights_offloaded", "discard_all"):
            reg.set(
                "vllm:engine_sleep_state", 1.0 if state == "awake" else 0.0, {"sleep_state": state}
            )
        reg.declare(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge"
        )
        reg.ensure("vllm:kv_cache_usage_perc")
        counters = (
            (
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
            ),
            ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."),
            (
                "vllm:external_prefix_cache_queries",
                "External prefix cache queries from KV connector cross-instance cache sharing, "
                "in terms of number of queried tokens.",
            ),
            (
                "vllm:external_prefix_cache_hits",
                "External prefix cache hits from KV connector cross-instance cache sharing, in "
                "terms of number of cached tokens.",
            ),
            (
                "vllm:mm_cache_queries",
                "Multi-modal cache queries, in terms of number of queried items.",
            ),
            ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items."),
            ("vllm:num_preemptions", "Cumulative number of preemption from the engine."),
            ("vllm:prompt_tokens", "Number of prefill tokens processed."),
        )
        for name, text in counters:
            reg.declare(name, text, "counter")
            reg.ensure(name)
        reg.declare(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            "counter",
            labels=("source",),
        )
        for source in PROMPT_SOURCES:
            reg.ensure("vllm:prompt_tokens_by_source", {"source": source})
        reg.declare(
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local + external).",
            "counter",
        )
        reg.ensure("vllm:prompt_tokens_cached")
        reg.declare(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
            "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.",
            "counter",
            labels=("source",),
        )
        for source in CACHE_HIT_SOURCES:
            reg.ensure("vllm:prompt_tokens_cached_by_source", {"source": source})
        reg.declare("vllm:generation_tokens", "Number of generation tokens processed.", "counter")
        reg.ensure("vllm:generation_tokens")
        reg.declare(
            "vllm:request_success",
            "Count of successfully processed requests.",
            "counter",
            labels=("finished_reason",),
        )
        for reason in FINISH_REASONS:
            reg.ensure("vllm:request_success", {"finished_reason": reason})
        reg.declare(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            "counter",
            labels=("model_name", "reason"),
            base=False,
        )
        for reason in ADMISSION_REASONS:
            reg.ensure(
                "vllm:admission_rejections", {"model_name": config.primary_name, "reason": reason}
            )
        histograms = (
            ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens),
            ("vllm:request_generation_tokens", "Number of generation tokens processed.", tokens),
            (
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                ITERATION_TOKENS_BUCKETS,
            ),
            (
                "vllm:request_max_num_generation_tokens",
                "Histogram of maximum number of requested generation tokens.",
                tokens,
            ),
            ("vllm:request_params_n", "Histogram of the n request parameter.", PARAMS_N_BUCKETS),
            (
                "vllm:request_params_max_tokens",
                "Histogram of the max_tokens request parameter.",
                tokens,
            ),
            (
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                TTFT_BUCKETS,
            ),
            (
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                ITL_BUCKETS,
            ),
            (
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                ITL_BUCKETS,
            ),
            (
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                E2E_BUCKETS,
            ),
            (
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                E2E_BUCKETS,
            ),
            (
                "vllm:request_inference_time_seconds",
                "Histogram of time spent in RUNNING phase for request.",
                E2E_BUCKETS,
            ),
            (
                "vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.",
                E2E_BUCKETS,
            ),
            (
                "vllm:request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.",
                E2E_BUCKETS,
            ),
            (
                "vllm:request_num_preemptions",
                "Histogram of the number of times a request was preempted.",
                PREEMPTIONS_BUCKETS,
            ),
            (
                "vllm:request_prefill_kv_computed_tokens",
                "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
                tokens,
            ),
        )
        for name, text, buckets in histograms:
            reg.declare(name, text, "histogram", buckets)
            reg.ensure(name)
        cache_info = {
            "block_size": str(config.block_size),
            "enable_prefix_caching": str(config.enable_prefix_caching),
            "num_gpu_blocks": str(config.num_kv_blocks),
            "engine": "0",
        }
        reg.declare(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            "gauge",
            labels=tuple(cache_info),
            base=False,
        )
        reg.set("vllm:cache_config_info", 1.0, cache_info)
        spec = config.speculative
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
                labels=("position",),
            )
            for name in (
                "vllm:spec_decode_num_drafts",
                "vllm:spec_decode_num_draft_tokens",
                "vllm:spec_decode_num_accepted_tokens",
            ):
                reg.ensure(name)
            for pos in range(spec.num_tokens):
                reg.ensure("vllm:spec_decode_num_accepted_tokens_per_pos", {"position": str(pos)})
        self._track_gauges(reg)
        return reg

    def _track_gauges(self, reg: MetricsRegistry) -> None:
        """The scheduler's gauges, read from its queues at each scrape."""
        reg.track("vllm:num_requests_running", lambda: len(self._running))
        reg.track("vllm:num_requests_waiting", lambda: len(self._waiting))
        reg.track(
            "vllm:num_requests_waiting_by_reason",
            lambda: len(self._waiting),
            {"reason": "capacity"},
        )
        reg.track("vllm:kv_cache_usage_perc", lambda: self.kv.usage)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    # --------------------------------------------------------------- scheduler

    def admit(
        self,
        request_id: int,
        prompt_tokens: int,
        hashes: tuple[int, ...] = (),
        *,
        max_tokens: int | None = None,
        n: int = 1,
    ) -> Ticket:
        """Schedule now, or take a place in the FIFO queue; 503 when the queue is full.

        Synchronous on purpose: the 503 must be decided before a streamed response starts.
        """
        loop = asyncio.get_running_loop()
        request = _Request(request_id, prompt_tokens, hashes, loop.create_future())
        limit = self.config.max_queue
        if self._waiting or not self._try_schedule(request):
            if limit is not None and len(self._waiting) >= limit:
                self.metrics.inc(
                    "vllm:admission_rejections",
                    1,
                    {"model_name": self.config.primary_name, "reason": "max_num_queued_reqs"},
                )
                raise queue_full()
            self._waiting.append(request)
        reg = self.metrics
        reg.observe("vllm:request_params_n", n)
        if max_tokens is not None:
            reg.observe("vllm:request_params_max_tokens", max_tokens)
            reg.observe("vllm:request_max_num_generation_tokens", max_tokens)
        return Ticket(self, request)

    def _try_schedule(self, request: _Request, *, force: bool = False) -> bool:
        """Give ``request`` a batch slot and its blocks if both are free."""
        if len(self._running) >= self.config.max_num_seqs:
            return False
        tokens = request.prompt_tokens + request.generated
        alloc = self.kv.allocate(
            request.hashes, max(1, tokens), request.prompt_tokens, force=force or not self._running
        )
        if alloc is None:
            return False
        request.alloc = alloc
        request.hit_tokens = alloc.hit_tokens
        request.preempted = False
        self._running.append(request)
        if request.first_schedule:
            request.first_schedule = False
            reg = self.metrics
            if self.kv.prefix_caching:  # vLLM looks nothing up, so counts nothing, when off
                reg.inc("vllm:prefix_cache_queries", request.prompt_tokens)
                reg.inc("vllm:prefix_cache_hits", alloc.hit_tokens)
            reg.inc("vllm:prompt_tokens", request.prompt_tokens)
            reg.inc("vllm:prompt_tokens_cached", alloc.hit_tokens)
            reg.inc("vllm:prompt_tokens_cached_by_source", alloc.hit_tokens, {"source": "device"})
            computed = request.prompt_tokens - alloc.hit_tokens
            reg.inc("vllm:prompt_tokens_by_source", computed, {"source": "local_compute"})
            reg.inc("vllm:prompt_tokens_by_source", alloc.hit_tokens, {"source": "local_cache_hit"})
            reg.observe("vllm:request_prompt_tokens", request.prompt_tokens)
            reg.observe("vllm:request_prefill_kv_computed_tokens", computed)
        if not request.future.done():
            request.future.set_result(None)
        return True

    def _schedule_waiting(self) -> None:
        while self._waiting:
            head = self._waiting[0]
            if head.done:
                self._waiting.pop(0)
                continue
            if not self._try_schedule(head):
                return
            self._waiting.pop(0)

    def _preempt(self, victim: _Request) -> None:
        """Take a running request's blocks back; it waits at the queue's front to recompute."""
        self._running.remove(victim)
        if victim.alloc is not None:
            self.kv.free(victim.alloc)
            victim.alloc = None
        victim.preempted = True
        victim.preemptions += 1
        victim.future = asyncio.get_running_loop().create_future()
        self._waiting.insert(0, victim)
        self.metrics.inc("vllm:num_preemptions")

    def grow(self, request: _Request, count: int) -> bool:
        """Room for ``count`` new tokens of a running request; preempts others (newest first)
        while none is free. False when the request itself had to be preempted."""
        while True:
            if request.preempted or request.alloc is None:
                return False
            if self.kv.grow(request.alloc, count, force=len(self._running) == 1):
                request.generated += count
                return True
            victim = self._running[-1]
            self._preempt(victim)
            if victim is request:
                return False

    def release(self, request: _Request) -> None:
        request.done = True
        if request in self._running:
            self._running.remove(request)
        if request.alloc is not None:
            self.kv.free(request.alloc)
            request.alloc = None
        if request in self._waiting:
            self._waiting.remove(request)
        if not request.future.done():
            request.future.cancel()
        self._schedule_waiting()

    # ------------------------------------------------------------------ timing

    async def prefill(self, request: _Request, clock: RequestClock) -> None:
        """The prefill: ``ttft``, then the computed tokens (cached prefix blocks cost nothing)
        on the shared lane, behind the prefill tokens queued before them."""
        timing = self.config.timing
        computed = max(0, request.prompt_tokens + request.generated - request.hit_tokens)
        now = time.monotonic()
        if clock.scheduled is None:
            clock.scheduled = now
        self.metrics.observe("vllm:iteration_tokens_total", max(1, computed))
        done = start = now
        if timing.ttft_per_token > 0 and computed:
            start = max(now, self._lane_until)
            done = start + timing.ttft_per_token * computed
            self._lane_until = done
        try:
            await asyncio.sleep(timing.ttft + (done - now))
        except asyncio.CancelledError:  # aborted: its chunks not yet computed never will be
            self._lane_until -= max(0.0, done - max(time.monotonic(), start))
            raise

    def step_time(self) -> float:
        """One decode step: ``itl``; plus what it verifies (1 + k tokens for each running
        request, at ``itl_per_token``) and drafts (k x the method's draft cost), so that
        speculation's extra tokens cost more the fuller the batch, as in vLLM; plus the prefill
        chunk batched into it while the lane has prefill tokens queued (at most
        ``max_num_batched_tokens`` of them)."""
        timing = self.config.timing
        spec = self.config.speculative
        base = timing.itl
        if timing.itl_per_token or spec.enabled:
            k = spec.num_tokens
            base += timing.itl_per_token * max(1, len(self._running)) * (1 + k)
            base += k * spec.model_for().draft_cost if spec.enabled else 0.0
        queued = self._lane_until - time.monotonic()
        if queued <= 0:
            return base
        return base + min(queued, timing.ttft_per_token * self.config.batched_tokens)

    def decoder(self, request_number: int, request: _Request | None = None) -> Decoder:
        """The decode steps of one request (``request`` gives its context depth, which the
        acceptance falls with)."""
        rng = random.Random(f"{self.config.seed}:spec:{request_number}")
        return Decoder(self, rng, request)

    def token_emitted(self, count: int) -> None:
        self.metrics.inc("vllm:generation_tokens", count)

    def finished(
        self, clock: RequestClock, reason: str, generated: int = 0, preemptions: int = 0
    ) -> None:
        now = time.monotonic()
        reg = self.metrics
        reg.inc("vllm:request_success", 1, {"finished_reason": reason})
        reg.observe("vllm:e2e_request_latency_seconds", now - clock.arrival)
        if clock.scheduled is None:
            return
        reg.observe("vllm:request_queue_time_seconds", clock.scheduled - clock.arrival)
        reg.observe("vllm:request_inference_time_seconds", now - clock.scheduled)
        reg.observe("vllm:request_generation_tokens", generated)
        reg.observe("vllm:request_num_preemptions", preemptions)
        if clock.first_token is not None:
            reg.observe("vllm:request_prefill_time_seconds", clock.first_token - clock.scheduled)
            last = clock.last_token or clock.first_token
            reg.observe("vllm:request_decode_time_seconds", last - clock.first_token)
            if generated > 1:
                reg.observe(
                    "vllm:request_time_per_output_token_seconds",
                    (last - clock.first_token) / (generated - 1),
                )


class Decoder:
    """Decode steps for one request: how many tokens each step yields, after sleeping for it."""

    def __init__(self, engine: SimEngine, rng: random.Random, request: _Request | None = None):
        self._engine = engine
        self._rng = rng
        self._request = request
        self._next_step: float | None = None

    def _accepted(self) -> int:
        spec = self._engine.config.speculative
        request = self._request
        depth = request.prompt_tokens + request.generated if request is not None else 0
        acceptance = spec.acceptance_at(depth)
        accepted = 0
        while accepted < spec.num_tokens and self._rng.random() < acceptance:
            accepted += 1
        return accepted

    async def step(self, remaining: int, clock: RequestClock) -> int:
        """Sleep one decode step and return how many tokens it produced (<= remaining)."""
        engine = self._engine
        spec = engine.config.speculative
        await self._sleep_until_next_step(engine.step_time())
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
    """One request's claim on the scheduler: wait to be scheduled, grow, release exactly once."""

    def __init__(self, engine: SimEngine, request: _Request):
        self._engine = engine
        self.request = request
        self._released = False

    async def admitted(self) -> None:
        """Wait until the scheduler runs this request (again, after a preemption)."""
        await asyncio.shield(self.request.future)

    @property
    def preemptions(self) -> int:
        return self.request.preemptions

    async def grow(self, count: int, clock: RequestClock) -> None:
        """Blocks for ``count`` new tokens; if preempted meanwhile (by another request or for
        these), wait to be rescheduled and recompute before they are emitted."""
        engine = self._engine
        while not engine.grow(self.request, count):
            await self.admitted()
            await engine.prefill(self.request, clock)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._engine.release(self.request)
