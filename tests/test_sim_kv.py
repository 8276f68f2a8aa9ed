"""The sim's KV cache as vLLM's V1 engine keeps it: blocks, a prefix cache, admission that waits
for blocks, preemption with recompute, and the metrics that show them."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from brain.sim.config import SimConfig, Timing
from brain.sim.kv import BLOCK_SIZE, KVCache, prompt_block_hashes
from brain.sim.metrics_text import metric_value, parse_metrics
from brain.sim.policy import SimChatRequest, SimTurn
from brain.sim.server import running_sim

# ------------------------------------------------------------------------------ the books


def test_a_prompt_is_hashed_by_full_blocks_of_16_tokens_chained():
    text = "x" * (4 * BLOCK_SIZE * 3 + 10)  # three full blocks and a partial one
    hashes = prompt_block_hashes(text)
    assert len(hashes) == 3
    assert prompt_block_hashes(text + "more") == hashes  # the partial block has no hash
    changed = "y" + text[1:]  # the first block differs, so every later hash does (chained)
    assert all(a != b for a, b in zip(prompt_block_hashes(changed), hashes, strict=True))


def test_a_second_request_with_the_same_prefix_hits_all_but_the_last_token():
    kv = KVCache(num_blocks=64)
    prompt = "p" * (4 * BLOCK_SIZE * 4)  # exactly four blocks: 64 tokens
    hashes = prompt_block_hashes(prompt)
    first = kv.allocate(hashes, 64, 64)
    assert first is not None and first.hit_tokens == 0
    kv.free(first)
    assert kv.used_blocks == 0 and kv.cached_blocks == 4  # freed, still cached
    second = kv.allocate(hashes, 64, 64)
    assert second is not None
    assert second.hit_tokens == 48  # (64 - 1) // 16 blocks: the last token is computed again


def test_freed_blocks_are_evicted_oldest_first_when_space_is_needed():
    kv = KVCache(num_blocks=4)
    a = kv.allocate(prompt_block_hashes("a" * 128), 32, 32)  # 2 blocks
    assert a is not None
    kv.free(a)
    b = kv.allocate(prompt_block_hashes("b" * 256), 64, 64)  # 4 blocks: evicts a's
    assert b is not None and kv.usage == 1.0
    kv.free(b)
    again = kv.allocate(prompt_block_hashes("a" * 128), 32, 32)
    assert again is not None and again.hit_tokens == 0


def test_allocation_fails_when_no_block_is_free_and_growth_needs_a_block():
    kv = KVCache(num_blocks=2)
    held = kv.allocate((), 32, 32)
    assert held is not None and kv.free_blocks == 0
    assert kv.allocate((), 1, 1) is None
    assert not kv.grow(held, 1)
    kv.free(held)
    assert kv.free_blocks == 2


# ---------------------------------------------------------------------- over HTTP


def _metrics(sim) -> list:
    return parse_metrics(httpx.get(sim.base_url + "/metrics").text)


def test_agent_traffic_hits_the_prefix_cache_and_the_counters_count_it():
    """Each step re-sends the conversation: from the second step on, all of the earlier
    prompt's full blocks are hits (vllm:prefix_cache_queries / _hits)."""
    with running_sim(SimConfig(model="m", max_model_len=8192)) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        messages = [{"role": "system", "content": "You are an agent. " * 40}]
        prompts = []
        for step in range(5):
            messages.append({"role": "user", "content": f"step {step}: " + "data " * 60})
            answer = client.chat.completions.create(model="m", messages=messages, max_tokens=16)
            prompts.append(answer.usage.prompt_tokens)
            messages.append({"role": "assistant", "content": answer.choices[0].message.content})
        samples = _metrics(sim)
    queries = metric_value(samples, "vllm:prefix_cache_queries_total")
    hits = metric_value(samples, "vllm:prefix_cache_hits_total")
    assert queries == sum(prompts)
    # every step after the first finds the previous prompt's full blocks cached
    assert hits >= sum((p // BLOCK_SIZE - 1) * BLOCK_SIZE for p in prompts[:-1])
    assert hits / queries > 0.6
    by_source = metric_value(
        samples, "vllm:prompt_tokens_by_source_total", source="local_cache_hit"
    )
    assert by_source == hits


def test_prefix_caching_off_finds_nothing():
    config = SimConfig(model="m", enable_prefix_caching=False)
    with running_sim(config) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        for _ in range(3):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "same " * 100}], max_tokens=4
            )
        samples = _metrics(sim)
    assert metric_value(samples, "vllm:prefix_cache_hits_total") == 0
    # vLLM 0.26 with --no-enable-prefix-caching: queries 0 after 5.35 M prompt tokens (H200 run)
    assert metric_value(samples, "vllm:prefix_cache_queries_total") == 0
    assert metric_value(samples, "vllm:prompt_tokens_total") > 0


class _Long:
    """Always a long answer, so running requests keep needing new blocks."""

    def respond(self, request: SimChatRequest) -> SimTurn:
        return SimTurn(content="word " * 200)


@pytest.mark.anyio
async def test_a_full_kv_cache_preempts_and_recomputes_and_every_answer_completes():
    """16 blocks for 4 requests that each grow past 4: vLLM's scheduler preempts the newest
    running request, which recomputes later; every answer still arrives whole."""
    config = SimConfig(
        model="m",
        max_model_len=512,
        kv_cache_tokens=256,
        max_num_seqs=4,
        timing=Timing(ttft=0.001, itl=0.001),
    )
    with running_sim(config, policy=_Long()) as sim:
        client = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        answers = await asyncio.gather(
            *(
                client.chat.completions.create(
                    model="m",
                    messages=[{"role": "user", "content": f"task {i} " * 8}],
                    max_tokens=150,
                )
                for i in range(4)
            )
        )
        await client.close()
        samples = _metrics(sim)
    assert all(a.usage.completion_tokens == 150 for a in answers)
    assert all(a.choices[0].message.content == ("word " * 200)[: len(a.choices[0].message.content)]
               for a in answers)  # fmt: skip
    assert metric_value(samples, "vllm:num_preemptions_total") >= 1
    assert metric_value(samples, "vllm:kv_cache_usage_perc") == 0.0  # all blocks back
    assert metric_value(samples, "vllm:request_num_preemptions_count") == 4


@pytest.mark.anyio
async def test_a_request_waits_for_blocks_and_the_gauges_show_it():
    """Two slots but blocks for one prompt: the second waits (capacity), then runs."""
    config = SimConfig(
        model="m",
        max_model_len=512,
        kv_cache_tokens=512,
        max_num_seqs=2,
        timing=Timing(ttft=2.0, itl=0.001),
    )

    def prompt(char: str) -> list[dict[str, str]]:  # ~400 tokens of 512, no shared prefix
        return [{"role": "user", "content": char * (4 * 400)}]

    def both_in(samples: list) -> bool:
        running = metric_value(samples, "vllm:num_requests_running")
        waiting = metric_value(samples, "vllm:num_requests_waiting")
        return running + waiting == 2

    with running_sim(config) as sim:
        client = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        first = asyncio.ensure_future(
            client.chat.completions.create(model="m", messages=prompt("x"), max_tokens=4)
        )
        second = asyncio.ensure_future(
            client.chat.completions.create(model="m", messages=prompt("y"), max_tokens=4)
        )
        # Both requests in the engine (a loaded machine may take a while to send the second),
        # well before the first one's 2 s to its first token ends.
        during = await asyncio.to_thread(_metrics, sim)
        for _ in range(30):
            if both_in(during):
                break
            await asyncio.sleep(0.05)
            during = await asyncio.to_thread(_metrics, sim)
        await asyncio.gather(first, second)
        await client.close()
    assert metric_value(during, "vllm:num_requests_running") == 1
    assert metric_value(during, "vllm:num_requests_waiting_by_reason", reason="capacity") == 1
    assert metric_value(during, "vllm:kv_cache_usage_perc") > 0.7
