"""/metrics text -> samples -> MetricsSnapshot -> spec-decode deltas."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import httpx
import openai
import pytest

from brain.metrics import (
    MetricsParseError,
    MetricsSnapshot,
    fetch_metrics,
    parse_prometheus_text,
    spec_decode_delta,
)
from brain.sim.config import SimConfig, Speculative
from brain.sim.script_policy import ScriptPolicy
from brain.sim.server import running_sim

L = 'engine="0",model_name="gemma4-e4b"'


def metrics_text(drafts, draft_tokens, accepted, pos, running=1, kv=0.25) -> str:
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{L}}} {running}",
        f"vllm:num_requests_waiting{{{L}}} 0.0",
        f"vllm:kv_cache_usage_perc{{{L}}} {kv}",
        "# TYPE vllm:prompt_tokens counter",
        f"vllm:prompt_tokens_total{{{L}}} 1200.0",
        f"vllm:generation_tokens_total{{{L}}} 340.0",
        f"vllm:num_preemptions_total{{{L}}} 2.0",
        f"vllm:spec_decode_num_drafts_total{{{L}}} {drafts}",
        f"vllm:spec_decode_num_draft_tokens_total{{{L}}} {draft_tokens}",
        f"vllm:spec_decode_num_accepted_tokens_total{{{L}}} {accepted}",
    ]
    for i, v in enumerate(pos):
        lines.append(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{L},position="{i}"}} {v}'
        )
    lines += [
        "# TYPE vllm:time_to_first_token_seconds histogram",
        f'vllm:time_to_first_token_seconds_bucket{{{L},le="0.1"}} 3.0',
        f'vllm:time_to_first_token_seconds_bucket{{{L},le="+Inf"}} 4.0',
        f"vllm:time_to_first_token_seconds_count{{{L}}} 4.0",
        f"vllm:time_to_first_token_seconds_sum{{{L}}} 0.8",
        f"vllm:inter_token_latency_seconds_count{{{L}}} 100.0",
        f"vllm:inter_token_latency_seconds_sum{{{L}}} 2.5",
    ]
    return "\n".join(lines) + "\n"


def test_parser_handles_escapes_inf_timestamps_and_histograms():
    text = (
        "# HELP x A help line, with {braces}\n"
        'x{a="q\\"uote",b="back\\\\slash",c="new\\nline",d="com,ma}"} 1.5 1700000000000\n'
        'h_bucket{le="+Inf"} +Inf\n'
        "nolabels -Inf\n"
        "nanval NaN\n"
        "\n"
    )
    s = parse_prometheus_text(text)
    labels = frozenset(
        {("a", 'q"uote'), ("b", "back\\slash"), ("c", "new\nline"), ("d", "com,ma}")}
    )
    assert s[("x", labels)] == 1.5
    assert s[("h_bucket", frozenset({("le", "+Inf")}))] == math.inf
    assert s[("nolabels", frozenset())] == -math.inf
    assert math.isnan(s[("nanval", frozenset())])


@pytest.mark.parametrize("bad", ["x{a=unquoted} 1", "x 1 2 3", 'x{a="1"} notanumber'])
def test_parser_rejects_malformed_lines(bad):
    with pytest.raises(MetricsParseError):
        parse_prometheus_text(bad)


def test_snapshot_reads_vllm_names():
    snap = MetricsSnapshot.from_text(metrics_text(10, 20, 15, [9, 6]))
    assert (snap.requests_running, snap.requests_waiting, snap.kv_cache_usage) == (1, 0, 0.25)
    assert (snap.prompt_tokens, snap.generation_tokens, snap.preemptions) == (1200, 340, 2)
    assert (snap.spec_drafts, snap.spec_draft_tokens, snap.spec_accepted_tokens) == (10, 20, 15)
    assert snap.spec_accepted_per_position == [9, 6]
    assert snap.ttft.count == 4 and snap.ttft.mean == pytest.approx(0.2)
    assert snap.itl.mean == pytest.approx(0.025)


def test_spec_decode_delta_from_two_snapshots():
    before = MetricsSnapshot.from_text(metrics_text(10, 20, 15, [9, 6]))
    after = MetricsSnapshot.from_text(metrics_text(110, 220, 175, [89, 86]))
    st = spec_decode_delta(before, after)
    assert st.acceptance_rate == pytest.approx(160 / 200)
    assert st.mean_acceptance_length == pytest.approx(1 + 160 / 100)
    assert st.per_position == pytest.approx([0.8, 0.8])


def test_spec_decode_delta_is_none_without_speculation_or_drafts():
    plain = MetricsSnapshot.from_text("vllm:num_requests_running 0\n")
    assert spec_decode_delta(plain, plain) is None
    same = MetricsSnapshot.from_text(metrics_text(10, 20, 15, [9, 6]))
    assert spec_decode_delta(same, same) is None


def test_fetch_metrics_over_a_transport():
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/metrics"
        return httpx.Response(200, text=metrics_text(1, 2, 1, [1, 0]))

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as c:
            return await fetch_metrics("http://127.0.0.1:8000/v1", c)

    assert asyncio.run(go()).spec_drafts == 1


def _library_samples(text: str) -> dict:
    """The same text read by prometheus_client's parser, in our parser's shape."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _same(ours: dict, theirs: dict) -> bool:
    both = set(ours) | set(theirs)
    return set(ours) == set(theirs) and all(
        ours[k] == theirs[k] or (math.isnan(ours[k]) and math.isnan(theirs[k])) for k in both
    )


RECORDED = Path(__file__).parent / "fixtures" / "vllm-0.26" / "http" / "metrics_after.txt"


def test_our_reader_reads_real_vllm_pages_as_prometheus_client_does():
    """The brain keeps its own reader for speed (brain/metrics.py says by how much); the
    library is the oracle: a real vLLM 0.26 page, and the sim's page after traffic with its
    escapes, _created gauges and every histogram, read the same sample for sample."""
    real = RECORDED.read_text()
    ours = parse_prometheus_text(real)
    assert len(ours) > 500 and _same(ours, _library_samples(real))
    config = SimConfig(model='we"ird\\name', speculative=Speculative(num_tokens=2))
    policy = ScriptPolicy.from_dict({"conversations": [], "default": {"content": "word " * 30}})
    with running_sim(config, policy=policy) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        client.chat.completions.create(
            model='we"ird\\name', messages=[{"role": "user", "content": "hi"}]
        )
        text = httpx.get(sim.base_url + "/metrics").text
    assert 'model_name="we\\"ird\\\\name"' in text
    ours = parse_prometheus_text(text)
    assert _same(ours, _library_samples(text))
    assert MetricsSnapshot.from_samples(ours).spec_drafts > 0
