"""``brain tune``: candidates checked against the profile, decisions from paired intervals,
the sim's speculation model (acceptance falling with depth, the cost of verified tokens under
load), and a whole tune on sims over loopback, through to the tuned profile ``brain up`` reads."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from brain.cli import app
from brain.launchers.ports import free_port
from brain.profiles import load_profile, load_spec_text
from brain.sim.config import SimConfig, Speculative, Timing
from brain.sim.engine import SimEngine
from brain.tune.candidates import Candidate, TuneError, candidate_spec, parse_candidates
from brain.tune.decide import decide_point, ratio_interval
from brain.tune.measure import depth_label, thin
from brain.tune.models import DepthSample, Sample, TuneConfig
from brain.tune.run import winner_gap

ROOT = Path(__file__).resolve().parents[1]
REPLAY = ROOT / "bench" / "replays" / "refactor-demo-14.jsonl.gz"
SIM_PROFILE = ROOT / "bench" / "tune" / "sim-tune.yaml"
QWEN_PROFILE = ROOT / "bench" / "gpu" / "profiles" / "qwen2.5-coder-0.5b-tune.yaml"


def _spec(extra: str = "") -> object:
    return load_spec_text(f"name: t\nbackend: sim\nmodel: m\n{extra}")


def test_candidates_parse_ranges_and_always_measure_off() -> None:
    got = parse_candidates("ngram:2|4,ngram:1-2", _spec())
    assert [c.label for c in got] == ["off", "ngram:2", "ngram:4", "ngram:1"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mtp:2", "no MTP layers"),
        ("draft:2", "names no draft model"),
        ("ngram:9", "between 1 and 8"),
        ("ngram:x", "k must be a number"),
        ("eagle:2", "unknown method"),
        ("off", "at least one candidate"),
    ],
)
def test_bad_candidates_say_why(text: str, message: str) -> None:
    with pytest.raises(TuneError, match=message):
        parse_candidates(text, _spec())


def test_mtp_allowed_where_the_profile_has_mtp_and_shares_the_gpu() -> None:
    spec = load_profile(SIM_PROFILE)
    cands = parse_candidates("mtp:3,ngram:2", spec)
    mtp = candidate_spec(spec, cands[1], port=9001, share=3)
    assert mtp.speculative is not None and mtp.speculative.method == "mtp"
    assert mtp.speculative.num_speculative_tokens == 3
    assert mtp.name == "sim-tune-tune-mtp3" and mtp.port == 9001
    assert mtp.gpu_memory_utilization == pytest.approx(spec.gpu_memory_utilization / 3, abs=1e-3)
    assert candidate_spec(spec, Candidate("off"), port=9000, share=3).speculative is None


def _sample(cand: str, rnd: int, tps: float, depth: str = "<2k") -> Sample:
    return Sample(
        candidate=cand,
        concurrency=1,
        round=rnd,
        wall_s=1.0,
        requests=4,
        failed=0,
        depths={depth: DepthSample(requests=4, decode_tps=tps, busy_s=1.0)},
    )


def test_a_clear_gain_wins_and_a_drifting_tie_stays_off() -> None:
    # The server drifts 580 -> 410 tok/s over the rounds; ngram:4 is 1.4x in every round,
    # ngram:2 is within a few percent of off either way.
    base = [580.0, 414.0, 500.0, 450.0]
    wobble = [1.04, 0.97, 1.02, 0.98]
    samples = [_sample("off", r, b) for r, b in enumerate(base)]
    samples += [_sample("ngram:4", r, b * 1.4) for r, b in enumerate(base)]
    samples += [
        _sample("ngram:2", r, b * w) for r, (b, w) in enumerate(zip(base, wobble, strict=True))
    ]
    point = decide_point(samples, ["off", "ngram:2", "ngram:4"], 1, "<2k", 0.03)
    assert point.winner == "ngram:4" and point.settled
    tie = decide_point(samples, ["off", "ngram:2"], 1, "<2k", 0.03)
    assert tie.winner == "off"
    ratio = next(r for r in tie.results if r.candidate == "ngram:2").ratio_to_off
    assert ratio is not None and ratio.low < 1.0 < ratio.high
    # what preferring off cost at that point: ngram:2's mean is 0.6% above off's
    assert winner_gap([point]) == "every point's winner is the fastest candidate measured there"
    assert winner_gap([tie]).endswith("0.6% at c=1 <2k (ngram:2 489 tok/s vs off)")


def test_one_round_decides_nothing() -> None:
    iv = ratio_interval({0: 600.0}, {0: 400.0})
    assert iv is not None and iv.n == 1 and math.isinf(iv.high)
    samples = [_sample("off", 0, 400.0), _sample("ngram:2", 0, 600.0)]
    assert decide_point(samples, ["off", "ngram:2"], 1, "<2k", 0.03).winner == "off"


def test_depth_buckets_and_thinning_keep_the_deepest_request() -> None:
    assert [depth_label(n, [2048, 8192]) for n in (10, 2048, 9000)] == ["<2k", "2k-8k", ">=8k"]
    from brain.bench.replay.files import load_replay

    run = load_replay(REPLAY)
    thinned = thin(run, 3)
    assert thinned.requests[0].n == run.requests[0].n
    assert thinned.requests[-1].n == run.requests[-1].n
    assert len(thinned.requests) == 3


def test_sim_acceptance_falls_with_depth_and_speculation_costs_more_under_load() -> None:
    spec = Speculative(
        num_tokens=4, method="ngram", acceptance=0.9, acceptance_half_depth=4000, draft_cost=0.0
    )
    assert spec.acceptance_at(0) == pytest.approx(0.9)
    assert spec.acceptance_at(4000) == pytest.approx(0.45)

    async def step_times(k: int) -> tuple[float, float]:
        config = SimConfig(
            timing=Timing(itl=0.004, itl_per_token=0.0004),
            speculative=Speculative(num_tokens=k, method="ngram"),
        )
        engine = SimEngine(config)
        alone = engine.step_time()
        for i in range(8):
            engine.admit(i, 100, (), max_tokens=10, n=1)
        return alone, engine.step_time()

    off_alone, off_loaded = asyncio.run(step_times(0))
    k4_alone, k4_loaded = asyncio.run(step_times(4))
    # one request: 1 vs 5 verified tokens; eight: 8 vs 40 (vLLM budgets 1 + k per request)
    assert k4_alone - off_alone == pytest.approx(4 * 0.0004)
    assert k4_loaded - off_loaded == pytest.approx(8 * 4 * 0.0004)


def _sim_profile(tmp_path: Path) -> Path:
    """The rehearsal profile with the sim engine's file by absolute path."""
    data = yaml.safe_load(SIM_PROFILE.read_text())
    data["env"]["BRAIN_SIM_CONFIG"] = str(ROOT / "bench" / "tune" / "sim-engine.yaml")
    path = tmp_path / "sim-tune.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.usefixtures("marathon_home")
def test_tune_on_the_sim_chooses_ngram_shallow_and_writes_a_tuned_profile(tmp_path: Path) -> None:
    profile = _sim_profile(tmp_path)
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "tune", str(profile), "--replay", str(REPLAY), "-c", "1", "-C", "off,ngram:4",
            "--requests-per-run", "3", "--max-tokens", "48", "--max-rounds", "5",
            "--depths", "4096", "--base-port", "0", "--budget-s", "60",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "Choice: ngram:4" in result.output, result.output
    tuned = load_profile(tmp_path / "sim-tune.tuned.yaml")
    assert tuned.tuned is not None and tuned.tuned.choice == "ngram:4"
    assert tuned.speculative is not None and tuned.speculative.method == "ngram"
    assert tuned.speculative.num_speculative_tokens == 4
    evidence = tmp_path / "sim-tune.tune" / "evidence.json"
    assert Path(tuned.tuned.evidence or "") == evidence and evidence.exists()
    assert (tmp_path / "sim-tune.tune" / "table.md").read_text().count("| 1 | <4k |") == 2
    # the servers are gone afterwards
    assert "sim-tune-tune" not in runner.invoke(app, ["ps"]).output
    # brain up says which tuned setting it starts and when it was measured
    port = str(free_port())
    up = runner.invoke(app, ["up", str(tmp_path / "sim-tune.tuned.yaml"), "--port", port])
    try:
        assert up.exit_code == 0, up.output
        assert f"tuned: speculative ngram:4 (brain tune, measured {tuned.tuned.measured_at}" in (
            up.output
        )
    finally:
        runner.invoke(app, ["down", "sim-tune"])


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["tune", str(SIM_PROFILE), "-c", "1"])
    assert missing.exit_code == 2 and "--replay" in missing.output
    bad_c = runner.invoke(app, ["tune", str(SIM_PROFILE), "--replay", str(REPLAY), "-c", "x"])
    assert bad_c.exit_code == 2 and "Traceback" not in bad_c.output
    budget = runner.invoke(
        app, ["tune", str(SIM_PROFILE), "--replay", str(REPLAY), "--budget-s", "-1"]
    )
    assert budget.exit_code == 2 and "budget_s" in budget.output
    cand = runner.invoke(app, ["tune", str(SIM_PROFILE), "--replay", str(REPLAY), "-C", "eagle:2"])
    assert cand.exit_code == 2 and "unknown method" in cand.output
    nofile = runner.invoke(
        app, ["tune", str(SIM_PROFILE), "--replay", str(tmp_path / "none"), "-C", "ngram:2"]
    )
    assert nofile.exit_code == 2 and "Traceback" not in nofile.output


def test_the_gpu_profile_loads() -> None:
    spec = load_profile(QWEN_PROFILE)
    assert [c.label for c in parse_candidates("off,ngram:2,ngram:3,ngram:4", spec)] == [
        "off", "ngram:2", "ngram:3", "ngram:4",
    ]  # fmt: skip
    with pytest.raises(TuneError, match="no MTP layers"):
        parse_candidates("mtp:2", spec)


@pytest.mark.usefixtures("marathon_home")
def test_start_only_leaves_the_servers_up_and_the_next_tune_reuses_them(tmp_path: Path) -> None:
    profile = _sim_profile(tmp_path)
    runner = CliRunner()
    port = str(free_port())
    args = ["tune", str(profile), "-C", "off,ngram:2", "--base-port", port]
    started = runner.invoke(app, [*args, "--start-only"])
    try:
        assert started.exit_code == 0, started.output
        assert "off: sim-tune-tune-off on port" in started.output
        assert "sim-tune-tune-ngram2" in runner.invoke(app, ["ps"]).output
        tuned = runner.invoke(
            app,
            [
                *args, "--replay", str(REPLAY), "--requests-per-run", "2", "--max-tokens", "8",
                "--max-rounds", "2", "--out", str(tmp_path / "ev"),
            ],
        )  # fmt: skip
        assert tuned.exit_code == 0, tuned.output
        assert "reusing sim-tune-tune-off" in tuned.output
        assert "| off | sim-tune-tune-off:" in tuned.output and "| reused |" in tuned.output
        assert "(all reused, already running)" in tuned.output
    finally:
        for name in ("sim-tune-tune-off", "sim-tune-tune-ngram2"):
            runner.invoke(app, ["down", name])
    assert "sim-tune-tune" not in runner.invoke(app, ["ps"]).output


@pytest.mark.usefixtures("marathon_home")
def test_a_wall_spent_on_starting_is_said_and_the_servers_are_stopped(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "tune", str(_sim_profile(tmp_path)), "--replay", str(REPLAY), "-C", "ngram:2",
            "--base-port", "0", "--wall-s", "1",
        ],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "left no time to measure" in result.output and "Traceback" not in result.output
    assert "sim-tune-tune" not in runner.invoke(app, ["ps"]).output


def test_apply_writes_the_choice_into_the_profile_and_keeps_the_original(tmp_path: Path) -> None:
    from brain.tune.models import TuneReport
    from brain.tune.profile_out import write_tuned

    profile = tmp_path / "p.yaml"
    original = "# my comments\nname: p\nbackend: sim\nmodel: m\nport: 8123\n"
    profile.write_text(original)
    report = TuneReport(
        started_at="2026-12-06T19:00:00+00:00",
        ended_at="2026-12-06T19:08:00+00:00",
        config=TuneConfig(profile=str(profile), replay=[REPLAY]),
        profile_path=str(profile),
        model="m",
        candidates=["off", "ngram:3"],
        choice="ngram:3",
        choice_point="c=4, depth 2k-8k",
    )
    target = write_tuned(profile, report, tmp_path / "ev.json", apply=True)
    assert target == profile
    assert (tmp_path / "p.yaml.orig").read_text() == original
    spec = load_profile(profile)
    assert spec.port == 8123 and spec.speculative is not None
    assert (spec.speculative.method, spec.speculative.num_speculative_tokens) == ("ngram", 3)
    assert spec.tuned is not None and (spec.tuned.concurrency, spec.tuned.depth) == (4, "2k-8k")
    assert "measured 2026-12-06T19:08:00+00:00 for c=4, depth 2k-8k" in spec.tuned.line()
    dry = CliRunner().invoke(app, ["up", str(profile), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "# tuned: speculative ngram:3 (brain tune, measured 2026-12-06T19:08:00" in dry.output
    assert '"method":"ngram"' in dry.output
