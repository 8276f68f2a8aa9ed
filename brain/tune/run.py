"""The tune itself: the servers up, interleaved rounds until the decisions settle or the
budget is spent, the decisions, the choice for the profile."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from brain.bench.endpoint import Endpoint, bench_client, discover_model
from brain.bench.models import BenchError
from brain.bench.replay.files import ReplayRun, load_replay, pick_runs, replay_files
from brain.bench.replay.models import ReplayConfig
from brain.profiles import apply_overrides, load_profile, profile_path
from brain.spec import ServerSpec
from brain.state import Registry
from brain.tune.candidates import TuneError, parse_candidates
from brain.tune.decide import decide_point, depth_crossing
from brain.tune.measure import depth_order, measure, thin
from brain.tune.models import PointDecision, Sample, TuneConfig, TuneReport
from brain.tune.servers import Served, start_all, stop_all

Say = Callable[[str], None]
RETENTION_FLAG = "--prefix-cache-retention-interval"
RETENTION_ENV = "VLLM_PREFIX_CACHE_RETENTION_INTERVAL"
STOP_RESERVE_S = 45.0
"""Of ``--wall-s``, kept for the last round's overrun, stopping the servers, writing."""


def load_traffic(config: TuneConfig) -> list[ReplayRun]:
    """The recorded runs, thinned to ``requests_per_run`` each."""
    try:
        recordings = [load_replay(p) for p in replay_files(config.replay)]
    except BenchError as exc:
        raise TuneError(str(exc)) from None
    if not recordings:
        raise TuneError("no replay file found: give --replay FILE|DIR (pilot replay-export)")
    return [thin(r, config.requests_per_run) for r in recordings]


def retention_setting(spec: ServerSpec) -> str | None:
    """The prefix-cache retention the profile sets for hybrid-attention models, if any."""
    args = spec.extra_args
    for i, a in enumerate(args):
        if a == RETENTION_FLAG and i + 1 < len(args):
            return f"{RETENTION_FLAG} {args[i + 1]}"
        if a.startswith(RETENTION_FLAG + "="):
            return a
    if RETENTION_ENV in spec.env:
        return f"{RETENTION_ENV}={spec.env[RETENTION_ENV]}"
    return None


async def rounds(
    config: TuneConfig, served: Sequence[Served], traffic: Sequence[ReplayRun], say: Say
) -> tuple[list[Sample], int, float]:
    """Replay rounds, candidates in a rotating order at each concurrency, until every point is
    settled (after ``min_rounds``), ``max_rounds`` ran or the next round would pass the budget."""
    replay = ReplayConfig(
        url=served[0].root,
        paths=config.replay,
        max_tokens=config.max_tokens,
        seed=config.seed,
        timeout=config.timeout,
        api_key=served[0].spec.api_key,
    )
    labels = [s.candidate.label for s in served]
    samples: list[Sample] = []
    started = time.monotonic()
    done = 0
    async with bench_client(replay) as client:
        endpoints = []
        for s in served:
            model = s.spec.served_model_name or await discover_model(client, s.root)
            endpoints.append(Endpoint(s.candidate.label, s.root, model))
        while done < config.max_rounds:
            t_round = time.monotonic()
            for ci, c in enumerate(config.concurrency):
                runs = pick_runs(traffic, config.runs or max(c, len(traffic)))
                order = [(i + done + ci) % len(served) for i in range(len(served))]
                for i in order:
                    sample = await measure(
                        client,
                        endpoints[i],
                        runs,
                        replay,
                        candidate=labels[i],
                        concurrency=c,
                        round_index=done * len(config.concurrency) + ci,
                        edges=config.depth_edges,
                    )
                    sample.round = done
                    samples.append(sample)
            done += 1
            took = time.monotonic() - t_round
            elapsed = time.monotonic() - started
            points = decide_all(config, labels, samples)
            open_ = [p for p in points if not p.settled]
            say(
                f"round {done}: {took:.1f} s; "
                + ("all points settled" if not open_ else f"{len(open_)} point(s) not settled")
            )
            if done >= config.min_rounds and not open_:
                break
            if elapsed + took > config.budget_s:
                say(f"budget {config.budget_s:g} s: stopping after {done} round(s)")
                break
    return samples, done, time.monotonic() - started


def depths_of(config: TuneConfig, samples: Sequence[Sample]) -> list[str]:
    found = {d for s in samples for d in s.depths}
    return depth_order(sorted(found), config.depth_edges)


def decide_all(
    config: TuneConfig, labels: Sequence[str], samples: Sequence[Sample]
) -> list[PointDecision]:
    return [
        decide_point(samples, labels, c, depth, config.margin)
        for c in config.concurrency
        for depth in depths_of(config, samples)
    ]


def winner_gap(points: Sequence[PointDecision]) -> str:
    """How far each point's winner is below the fastest candidate measured there (means): the
    price of preferring off when a faster candidate's gain is inside the noise."""
    worst: tuple[float, str] | None = None
    for p in points:
        speeds = {r.candidate: r.decode_tps.mean for r in p.results if r.decode_tps is not None}
        if not speeds or p.winner not in speeds:
            continue
        best = max(speeds, key=lambda c: speeds[c])
        gap = 1.0 - speeds[p.winner] / speeds[best] if speeds[best] > 0 else 0.0
        where = f"c={p.concurrency} {p.depth} ({best} {speeds[best]:.0f} tok/s vs {p.winner})"
        if worst is None or gap > worst[0]:
            worst = (gap, where)
    if worst is None:
        return ""
    if worst[0] <= 0:
        return "every point's winner is the fastest candidate measured there"
    return (
        f"largest gap between a point's winner and its fastest candidate: {worst[0]:.1%} "
        f"at {worst[1]}"
    )


def choose(config: TuneConfig, report: TuneReport) -> None:
    """The profile's one setting: the winner at the chosen concurrency and the depth the runs
    spend most time at there; where speculation turns into a loss deeper, say so."""
    c = config.choose_at or max(config.concurrency)
    here = [p for p in report.points if p.concurrency == c]
    if not here:
        report.notes.append(f"nothing was measured at c={c}: the profile keeps off")
        return
    point = max(here, key=lambda p: p.busy_s)
    report.choice = point.winner
    report.choice_point = f"c={c}, depth {point.depth}"
    total = sum(p.busy_s for p in here) or 1.0
    report.notes.append(
        f"chosen for c={c} at depth {point.depth}, where the replayed runs spend "
        f"{point.busy_s / total:.0%} of their time: {point.winner} ({point.why})"
    )
    order = depths_of(config, report.samples)
    crossings = [x for x in (depth_crossing(report.points, cc, order) for cc in config.concurrency)]
    report.depth_note = "; ".join(x for x in crossings if x)


def tune(
    config: TuneConfig, say: Say, *, start_only: bool = False, keep: bool = False
) -> TuneReport:
    """The whole tune (or, with ``start_only``, the servers up and their start costs)."""
    began = time.monotonic()
    path = profile_path(config.profile)
    spec = load_profile(path)
    if config.sets:
        spec = apply_overrides(spec, config.sets)
    candidates = parse_candidates(config.candidates, spec)
    if any(c < 1 for c in config.concurrency) or not config.concurrency:
        raise TuneError("-c values must be >= 1 (runs replayed at once)")
    traffic = [] if start_only else load_traffic(config)
    report = TuneReport(
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        config=config,
        profile_path=str(path),
        model=spec.model,
        candidates=[c.label for c in candidates],
    )
    registry = Registry()
    served = start_all(
        spec,
        candidates,
        base_port=config.base_port,
        share_gpu=config.share_gpu,
        registry=registry,
        say=say,
    )
    report.starts = [s.cost for s in served]
    fresh = [s.cost.start_s for s in served if s.cost.start_s is not None]
    report.notes.append(
        f"{len(served)} servers side by side"
        + (f", {1 / len(served):.2f} of the profile's GPU memory each" if config.share_gpu else "")
        + ": the rounds switch candidates without a restart"
        + (
            f" (a restart per switch would cost {sum(fresh) / len(fresh):.0f} s, the mean start)"
            if fresh
            else " (all reused, already running)"
        )
    )
    report.vllm_version = next((s.version for s in served if s.version), None)
    try:
        if start_only:
            return report
        if config.wall_s is not None:
            left = config.wall_s - (time.monotonic() - began) - STOP_RESERVE_S
            if left <= 0:
                raise TuneError(
                    f"--wall-s {config.wall_s:g}: the servers' start left no time to measure"
                )
            if left < config.budget_s:
                say(f"--wall-s {config.wall_s:g}: measuring budget {left:.0f} s")
                config = config.model_copy(update={"budget_s": left})
        samples, done, spent = asyncio.run(rounds(config, served, traffic, say))
    finally:
        if not (keep or start_only):
            stop_all(served, registry)
    report.samples, report.rounds, report.measure_s = samples, done, spent
    report.points = decide_all(config, report.candidates, samples)
    failed = sum(s.failed for s in samples)
    if failed:
        first = next((e for s in samples for e in s.errors), "")
        report.notes.append(
            f"{failed} of {sum(s.requests for s in samples)} replayed requests failed and are "
            f"left out of the speeds (first: {first})"
        )
    hits = [s.hit_rate for s in samples if s.hit_rate is not None]
    report.hit_rate = sum(hits) / len(hits) if hits else None
    retention = retention_setting(spec)
    if retention:
        report.notes.append(
            f"hybrid attention: the profile sets {retention}; prefix-cache hit rate on the "
            f"replay {report.hit_rate:.1%}"
            if report.hit_rate is not None
            else f"hybrid attention: the profile sets {retention}; the server reported no hit rate"
        )
    gap = winner_gap(report.points)
    if gap:
        report.notes.append(gap)
    choose(config, report)
    report.ended_at = datetime.now(UTC).isoformat(timespec="seconds")
    return report


def evidence_dir(profile: Path) -> Path:
    """Where a tune of ``profile`` keeps its evidence: beside it."""
    return profile.with_name(profile.name.rsplit(".", 1)[0] + ".tune")
