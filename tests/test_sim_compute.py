"""The sim's engine shares one GPU's compute as vLLM's scheduler does: prefill tokens of all
requests queue on one lane, and decode steps carry the prefill chunk computed with them."""

from __future__ import annotations

import asyncio
import time

import pytest

from brain.sim.config import SimConfig, Timing
from brain.sim.engine import RequestClock, SimEngine

PER_TOKEN = 0.0001  # seconds a prefilled token: 2,000 tokens take 0.2 s


def _engine(**fields: object) -> SimEngine:
    timing = Timing(ttft=0.0, ttft_per_token=PER_TOKEN, itl=0.001)
    return SimEngine(SimConfig(model="m", max_model_len=4096, timing=timing, **fields))


async def _prefill(engine: SimEngine, request_id: int, tokens: int) -> float:
    """Admit, wait to be scheduled, prefill; the seconds the prefill took."""
    ticket = engine.admit(request_id, tokens)
    await ticket.admitted()
    start = time.monotonic()
    await engine.prefill(ticket.request, RequestClock(arrival=start))
    return time.monotonic() - start


@pytest.mark.anyio
async def test_two_long_prefills_at_once_take_twice_as_long_as_one():
    engine = _engine()
    alone = await _prefill(engine, 1, 2000)
    start = time.monotonic()
    await asyncio.gather(_prefill(engine, 2, 2000), _prefill(engine, 3, 2000))
    both = time.monotonic() - start
    assert alone >= 2000 * PER_TOKEN
    assert both >= 2 * 2000 * PER_TOKEN  # one compute budget: the second waits for the first


@pytest.mark.anyio
async def test_a_decode_step_carries_the_prefill_chunk_computed_with_it():
    engine = _engine(max_num_batched_tokens=512)
    assert engine.step_time() == pytest.approx(0.001)  # nothing to prefill: itl
    task = asyncio.ensure_future(_prefill(engine, 1, 2000))
    await asyncio.sleep(0)  # the prefill has queued its tokens
    assert engine.step_time() == pytest.approx(0.001 + 512 * PER_TOKEN, rel=0.05)
    await task
    assert engine.step_time() == pytest.approx(0.001)


@pytest.mark.anyio
async def test_a_prefix_recomputed_after_preemption_costs_the_other_requests_time_too():
    """A and B fill the KV cache; A's growth preempts B; when A ends, B recomputes its 500
    tokens, and a request arriving then prefills behind that recompute."""
    engine = _engine(kv_cache_tokens=64 * 16, max_num_seqs=8)
    a, b = engine.admit(1, 500), engine.admit(2, 500)  # 32 blocks each: full
    clock = RequestClock(arrival=time.monotonic())
    await asyncio.gather(engine.prefill(a.request, clock), engine.prefill(b.request, clock))
    assert engine.grow(a.request, 16)  # no block free: B, the newest, is preempted
    assert b.preemptions == 1 and engine.num_waiting == 1
    a.release()  # B is scheduled again and recomputes its prompt
    await b.admitted()
    recompute = asyncio.ensure_future(engine.prefill(b.request, clock))
    await asyncio.sleep(0)
    newcomer = await _prefill(engine, 3, 100)
    await recompute
    assert newcomer >= (500 + 100) * PER_TOKEN  # behind B's recompute, not 100 tokens' time


@pytest.mark.anyio
async def test_an_aborted_prefill_gives_its_queued_tokens_back():
    engine = _engine()
    task = asyncio.ensure_future(_prefill(engine, 1, 20000))  # 2 s of prefill
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.step_time() == pytest.approx(0.001)  # the lane is not held by it
