"""brain bench, the pure parts: statistics, ITL per token, prompts, datasets, ratios, output."""

from __future__ import annotations

import builtins
import math
import random

import pytest
from rich.console import Console

from brain.bench.drivers import poisson_gaps
from brain.bench.endpoint import server_root
from brain.bench.models import BenchConfig, BenchError, BenchReport, EndpointReport, LoadPoint
from brain.bench.prompts import (
    Calibration,
    depth_prompt,
    load_dataset,
    random_text,
    synthetic_prompts,
)
from brain.bench.report import render_markdown, render_rich
from brain.bench.sender import RequestResult, apportion_tokens
from brain.bench.stats import compare_reports, percentile, reduce_depth, reduce_point, summarize_ms
from brain.metrics import SpecDecodeStats
from brain.sim.tokenizer import count_chat

SIM_CALIBRATION = Calibration("tokenize", chars_per_token=4.0, overhead=13.0)


def _result(times: list[float], nbytes: list[int], tokens: int, **kw) -> RequestResult:
    r = RequestResult(ok=True, sent_at=0.0, chunk_times=times, chunk_bytes=nbytes, **kw)
    r.output_tokens = tokens
    r.ended_at = kw.get("ended_at", times[-1] if times else 0.0)
    return r


def test_percentile_interpolates_linearly_like_numpy():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == pytest.approx(3.97)
    assert percentile([5.0], 90) == 5.0
    dist = summarize_ms([0.1, 0.2, 0.3])
    assert dist is not None
    assert (dist.n, dist.mean, dist.p50, dist.max) == (3, pytest.approx(200.0), 200.0, 300.0)
    assert summarize_ms([]) is None


def test_apportion_tokens_follows_bytes_gives_each_chunk_one_and_keeps_the_total():
    assert apportion_tokens(7, [4, 12, 12]) == [1, 3, 3]
    assert apportion_tokens(3, [4, 4, 4]) == [1, 1, 1]
    assert apportion_tokens(2, [4, 4, 4]) == [1, 1, 1]  # fewer tokens than chunks: one each
    assert apportion_tokens(5, []) == []
    rng = random.Random(1)
    for _ in range(200):
        weights = [rng.randint(0, 40) for _ in range(rng.randint(1, 12))]
        total = rng.randint(len(weights), 200)
        parts = apportion_tokens(total, weights)
        assert sum(parts) == total
        assert min(parts) >= 1


def test_itl_divides_a_multi_token_chunk_gap_per_token_and_tpot_spans_the_stream():
    # first token at 100 ms, then two MTP steps of 30 ms carrying 3 tokens (12 bytes) each
    r = _result([0.100, 0.130, 0.160], [4, 12, 12], tokens=7, ended_at=0.161)
    assert r.ttft == pytest.approx(0.100)
    assert r.chunk_gaps() == pytest.approx([0.030, 0.030])
    assert r.itls() == pytest.approx([0.010] * 6)
    assert r.tpot == pytest.approx((0.161 - 0.100) / 6)


def test_reduce_point_counts_throughput_failures_and_early_stops():
    good = [
        _result([0.2, 0.22, 0.24], [4, 4, 4], tokens=3, prompt_tokens=100, max_tokens=3),
        _result([0.3, 0.32], [4, 4], tokens=2, prompt_tokens=100, max_tokens=3),
    ]
    bad = RequestResult(ok=False, error="HTTP 503: busy")
    point = reduce_point(LoadPoint(concurrency=2), [*good, bad, bad], duration_s=2.0)
    assert (point.completed, point.failed, point.errors) == (2, 2, ["HTTP 503: busy"])
    assert point.request_throughput == 1.0
    assert point.output_throughput == 2.5
    assert point.total_throughput == 102.5
    assert point.early_stops == 1
    assert point.ttft_ms is not None and point.ttft_ms.mean == pytest.approx(250.0)
    assert point.itl_ms is not None and point.itl_ms.n == 3
    assert point.tokens_per_chunk == 1.0
    assert point.label == "c=2"


def test_synthetic_prompts_hit_the_target_token_count_and_never_repeat():
    for target in (20, 100, 512, 3000):
        prompts = synthetic_prompts(3, target, 16, SIM_CALIBRATION, "s")
        assert [count_chat(p.messages) for p in prompts] == [target] * 3
        assert len({p.messages[0]["content"] for p in prompts}) == 3
        assert all(p.max_tokens == 16 for p in prompts)
    assert synthetic_prompts(2, 50, 8, SIM_CALIBRATION, "x") == synthetic_prompts(
        2, 50, 8, SIM_CALIBRATION, "x"
    )
    assert len(random_text(777, random.Random(0))) == 777


def test_depth_prompt_puts_the_context_before_the_measured_prompt():
    shallow = depth_prompt(0, 100, 8, SIM_CALIBRATION, "d")
    deep = depth_prompt(2000, 100, 8, SIM_CALIBRATION, "d")
    assert len(shallow.messages) == 1
    assert [m["role"] for m in deep.messages] == ["user", "assistant", "user"]
    assert count_chat(shallow.messages) == 100
    assert 2000 + 100 <= count_chat(deep.messages) <= 2000 + 100 + 20


def test_load_dataset_reads_prompts_and_messages_and_names_bad_lines(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        '{"prompt": "hello"}\n\n# a comment\n'
        '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}\n'
    )
    prompts = load_dataset(path, output_len=32)
    assert [p.max_tokens for p in prompts] == [32, 5]
    assert prompts[0].messages == [{"role": "user", "content": "hello"}]
    path.write_text('{"prompt": "ok"}\n{"text": "no"}\n')
    with pytest.raises(BenchError, match=r"prompts.jsonl:2: needs a 'prompt'"):
        load_dataset(path, 8)
    path.write_text("not json\n")
    with pytest.raises(BenchError, match=r":1: not JSON"):
        load_dataset(path, 8)


def test_poisson_gaps_are_seeded_and_average_one_over_the_rate():
    gaps = poisson_gaps(4000, 10.0, "seed")
    assert gaps == poisson_gaps(4000, 10.0, "seed")
    assert gaps[0] == 0.0
    assert sum(gaps) / len(gaps) == pytest.approx(0.1, rel=0.08)
    assert poisson_gaps(3, math.inf, "s") == [0.0, 0.0, 0.0]


def test_server_root_accepts_the_root_or_the_v1_url():
    assert server_root("http://h:8000/v1/") == "http://h:8000"
    assert server_root("http://h:8000") == "http://h:8000"
    with pytest.raises(BenchError, match="http"):
        server_root("h:8000")


def test_load_points_default_to_concurrency_one_unless_only_depth_is_asked():
    assert [p.label for p in BenchConfig(url="http://x").load_points()] == ["c=1"]
    assert BenchConfig(url="http://x", depths=[0, 4096]).load_points() == []
    rates = BenchConfig(url="http://x", request_rates=[2.0, math.inf], max_concurrency=8)
    assert [p.label for p in rates.load_points()] == ["rate=2/s (max 8)", "rate=inf/s (max 8)"]
    assert BenchConfig(url="http://x").prompts_for(LoadPoint(concurrency=16)) == 64


def _report() -> BenchReport:
    fast = [_result([0.1, 0.11, 0.12], [4, 8, 8], tokens=5, prompt_tokens=50, max_tokens=5)]
    slow = [_result([0.1, 0.13, 0.16, 0.19, 0.22], [4] * 5, tokens=5, prompt_tokens=50)]
    spec = SpecDecodeStats(
        drafts=2,
        draft_tokens=4,
        accepted_tokens=2,
        acceptance_rate=0.5,
        mean_acceptance_length=2.0,
        per_position=[0.75, 0.25],
    )
    a = EndpointReport(label="mtp", url="http://a", model="m")
    b = EndpointReport(label="base", url="http://b", model="m")
    a.points.append(reduce_point(LoadPoint(concurrency=1), fast, 1.0, spec, True))
    b.points.append(reduce_point(LoadPoint(concurrency=1), slow, 2.0, None, True))
    a.depths.append(reduce_depth(1000, fast))
    b.depths.append(reduce_depth(1000, slow))
    return BenchReport(
        started_at="now",
        config=BenchConfig(url="http://a", compare_url="http://b", labels=("mtp", "base")),
        calibration="tokenize",
        endpoints=[a, b],
        comparison=compare_reports(a, b),
    )


def test_compare_reports_divides_first_by_second_per_point_and_depth():
    report = _report()
    by_point = {row.point: row.ratios for row in report.comparison}
    assert by_point["c=1"]["output_throughput"] == pytest.approx(2.0)
    assert by_point["c=1"]["tpot_mean"] == pytest.approx((0.02 / 4) / (0.12 / 4))
    assert by_point["depth=1000"]["decode_tps"] == pytest.approx(0.12 / 0.02)


def test_rich_and_markdown_output_show_every_section():
    report = _report()
    console = Console(record=True, width=80)
    console.print(render_rich(report))
    text = console.export_text()
    for needle in ("mtp: http://a", "latency", "speculative decoding", "75% 25%", "depth=1000"):
        assert needle in text
    md = render_markdown(report)
    assert "| mtp/base |" in md and "| c=1 | 1/1 |" in md and "50.0%" in md


def test_plot_without_matplotlib_says_what_to_install(monkeypatch, tmp_path):
    from brain.bench import plot as bench_plot

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(BenchError, match=r"matplotlib>=3\.8"):
        bench_plot.write_plot(_report(), tmp_path / "x.png")


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from brain.bench.plot import write_plot

    path = tmp_path / "bench.png"
    write_plot(_report(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
