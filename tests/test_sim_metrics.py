"""/metrics speaks vLLM's Prometheus names, and the numbers follow what was served."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import openai

from brain.sim.config import SimConfig, Speculative, Timing
from brain.sim.metrics_text import metric_value, parse_metrics
from brain.sim.script_policy import ScriptPolicy
from brain.sim.server import running_sim

LONG = "word " * 40  # 200 bytes, 50 output tokens
POLICY = ScriptPolicy.from_dict({"conversations": [], "default": {"content": LONG}})
MESSAGES = [{"role": "user", "content": "talk"}]


def scrape(sim) -> list:
    response = httpx.get(sim.base_url + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return parse_metrics(response.text)


def test_counters_and_histograms_follow_served_requests():
    with running_sim(SimConfig(model="m"), policy=POLICY) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        usage = [
            client.chat.completions.create(model="m", messages=MESSAGES).usage for _ in range(3)
        ]
        cut = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=5)
        samples = scrape(sim)
    labels = {"model_name": "m", "engine": "0"}
    assert metric_value(samples, "vllm:prompt_tokens_total", **labels) == sum(
        u.prompt_tokens for u in usage
    ) + (cut.usage.prompt_tokens)
    assert (
        metric_value(samples, "vllm:generation_tokens_total")
        == sum(u.completion_tokens for u in usage) + 5
    )
    assert metric_value(samples, "vllm:request_success_total", finished_reason="stop") == 3
    assert metric_value(samples, "vllm:request_success_total", finished_reason="length") == 1
    assert metric_value(samples, "vllm:e2e_request_latency_seconds_count") == 4
    assert metric_value(samples, "vllm:time_to_first_token_seconds_count") == 4
    assert metric_value(samples, "vllm:time_to_first_token_seconds_bucket", le="+Inf") == 4
    assert metric_value(samples, "vllm:inter_token_latency_seconds_count") > 100
    assert metric_value(samples, "vllm:num_requests_running") == 0
    assert metric_value(samples, "vllm:num_preemptions_total") == 0
    assert 0 <= metric_value(samples, "vllm:kv_cache_usage_perc") <= 1
    assert not [s for s in samples if s.name.startswith("vllm:spec_decode")]


def test_spec_decode_counters_are_consistent_and_mtp_is_faster():
    def run(spec: Speculative) -> tuple[float, list]:
        config = SimConfig(model="m", seed=3, speculative=spec, timing=Timing(ttft=0.0, itl=0.002))
        with running_sim(config, policy=POLICY) as sim:
            client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
            started = time.monotonic()
            tokens = sum(
                client.chat.completions.create(model="m", messages=MESSAGES).usage.completion_tokens
                for _ in range(2)
            )
            return tokens / (time.monotonic() - started), scrape(sim)

    off_rate, off_samples = run(Speculative())
    on_rate, samples = run(Speculative(num_tokens=3, acceptance=0.8))
    assert on_rate > 1.5 * off_rate
    drafts = metric_value(samples, "vllm:spec_decode_num_drafts_total")
    draft_tokens = metric_value(samples, "vllm:spec_decode_num_draft_tokens_total")
    accepted = metric_value(samples, "vllm:spec_decode_num_accepted_tokens_total")
    per_pos = [
        metric_value(samples, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(i))
        for i in range(3)
    ]
    assert drafts > 0 and draft_tokens == 3 * drafts
    assert 0 < accepted <= draft_tokens
    assert sum(per_pos) == accepted
    assert per_pos[0] >= per_pos[1] >= per_pos[2]  # a position is accepted only after all before it
    generated = metric_value(samples, "vllm:generation_tokens_total")
    assert generated <= 2 + drafts + accepted  # each request's first token comes from prefill
    assert not [s for s in off_samples if s.name.startswith("vllm:spec_decode")]


def test_waiting_gauge_counts_requests_beyond_batch_capacity():
    config = SimConfig(model="m", max_num_seqs=1, timing=Timing(ttft=0.5, itl=0.0))

    async def main(sim) -> list:
        async with openai.AsyncOpenAI(
            base_url=sim.openai_base_url, api_key="x", max_retries=0
        ) as client:
            tasks = [
                asyncio.create_task(client.chat.completions.create(model="m", messages=MESSAGES))
                for _ in range(3)
            ]
            # Poll until all three arrived (a loaded machine may take a while to send them).
            async with httpx.AsyncClient() as http:
                for _ in range(200):
                    samples = parse_metrics((await http.get(sim.base_url + "/metrics")).text)
                    running = metric_value(samples, "vllm:num_requests_running")
                    if running + metric_value(samples, "vllm:num_requests_waiting") == 3:
                        break
                    await asyncio.sleep(0.005)
            await asyncio.gather(*tasks)
            return samples

    with running_sim(config, policy=POLICY) as sim:
        during = asyncio.run(main(sim))
        after = scrape(sim)
    assert metric_value(during, "vllm:num_requests_running") == 1
    assert metric_value(during, "vllm:num_requests_waiting") == 2
    assert metric_value(after, "vllm:num_requests_waiting") == 0
    assert metric_value(after, "vllm:request_success_total", finished_reason="stop") == 3


RECORDED = Path(__file__).parent / "fixtures" / "vllm-0.26" / "http" / "metrics_after.txt"
_SERIES = ("_bucket", "_count", "_sum", "_created", "_total")


def _vllm_lines(text: str) -> dict[str, list[tuple[str, ...]]]:
    """Each ``vllm:`` sample name -> the label names of its lines, in the order written."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for line in text.splitlines():
        if line.startswith("vllm:"):
            name, _, rest = line.partition("{")
            keys = tuple(part.split("=", 1)[0] for part in rest.rsplit("}", 1)[0].split('",'))
            out.setdefault(name, []).append(keys)
    return out


def _family(sample_name: str) -> str:
    for suffix in _SERIES:
        sample_name = sample_name.removesuffix(suffix)
    return sample_name


def test_the_text_is_written_as_vllms_own_prometheus_client_writes_it():
    config = SimConfig(model="smol", max_model_len=4096, speculative=Speculative(num_tokens=2))
    with running_sim(config, policy=POLICY) as sim:
        openai.OpenAI(
            base_url=sim.openai_base_url, api_key="x", max_retries=0
        ).chat.completions.create(model="smol", messages=MESSAGES)
        plain = httpx.get(sim.base_url + "/metrics", headers={"Accept-Encoding": "identity"})
        zipped = httpx.get(sim.base_url + "/metrics", headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in plain.headers
    assert plain.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert zipped.headers["content-encoding"] == "gzip"
    sim_lines, real_lines = _vllm_lines(plain.text), _vllm_lines(RECORDED.read_text())
    served = {_family(name) for name in sim_lines}
    # every series real vLLM writes for a family the sim serves, the sim writes too: the
    # counters' and histograms' _created gauges included
    missing = {n for n in real_lines if _family(n) in served} - set(sim_lines)
    assert not missing
    assert "vllm:prompt_tokens_created" in sim_lines
    # labels in sorted order on every line, as prometheus_client writes them (engine, le,
    # model_name), and the same label names as the recording's wherever both write a series
    for name, label_sets in sim_lines.items():
        assert all(list(keys) == sorted(keys) for keys in label_sets), name
        if name in real_lines and not name.startswith("vllm:cache_config_info"):
            assert set(label_sets) == set(real_lines[name]), name
