"""The load ``brain bench`` puts on an endpoint: fixed-concurrency and Poisson request-rate
points, then the depth sweep (one request at a time), and ``run_bench``, which runs them all
against one endpoint or two (``--compare``: point by point, alternating, so the ratios come
from one sitting on a noisy machine).

Never imports ``pilot`` and never starts a server: it measures whatever answers at the URL.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from brain.bench.endpoint import Endpoint, bench_client, open_endpoints, snapshot, spec_delta
from brain.bench.models import (
    BenchConfig,
    BenchError,
    BenchPrompt,
    BenchReport,
    EndpointReport,
    Progress,
)
from brain.bench.prompts import (
    Calibration,
    calibrate,
    depth_prompt,
    load_dataset,
    synthetic_prompts,
    take_cycled,
)
from brain.bench.sender import RequestResult, chat_body, send_chat
from brain.bench.stats import compare_reports, reduce_depth, reduce_point


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
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    async with bench_client(config) as client:
        endpoints = await open_endpoints(client, config)
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
                        spec_delta(before, after),
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
                report.depths.append(reduce_depth(depth, results, spec_delta(before, after)))

    comparison = compare_reports(reports[0], reports[1]) if len(reports) == 2 else []
    return BenchReport(
        started_at=started_at,
        config=config,
        calibration=calibration.source,
        endpoints=reports,
        comparison=comparison,
    )
