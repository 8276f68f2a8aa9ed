"""KV-aware admission: the decision from the server's figures, the learning of a run's peak
context, several servers as one, and the admission of real runs against the sim over loopback."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml
from pilot_harness import call, make_repo, write_script, write_workflow

from brain.metrics import MetricsSnapshot
from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.run.admission import (
    Admission,
    KvView,
    MetricsKvSource,
    combine,
    decide,
    kv_limit,
    peak_history,
)
from pilot.run.queue import load_many, run_many
from pilot.run.runner import Runner
from pilot.store.event_store import EventStore

KEY = "admission-flow"


def test_runs_are_admitted_while_their_contexts_fit_and_parallel_bounds_them() -> None:
    view = KvView(capacity_tokens=100_000, usage=0.1, preemptions=0, max_model_len=8192)
    assert kv_limit(96_000, 6000) == 16  # 6000 blocks of 16, 375 a run
    assert kv_limit(96_000, 6001) == 15  # a token more is a block more: 376 a run
    assert kv_limit(96_000, 6000, headroom=0.1) == 14
    assert decide(view, admitted=15, parallel=64, peak_tokens=6000).admit
    no = decide(view, admitted=16, parallel=64, peak_tokens=6000)
    assert not no.admit and no.kv_limit == 16
    assert "16 running runs of up to ~6,000 tokens each fill the 100,000-token" in no.reason
    bounded = decide(view, admitted=4, parallel=4, peak_tokens=6000)
    assert not bounded.admit and "--parallel 4" in bounded.reason
    # a first run always starts, even when one context is larger than the cache
    assert decide(view, admitted=0, parallel=4, peak_tokens=500_000).admit


def test_live_usage_and_a_preemption_hold_admission_back() -> None:
    busy = KvView(capacity_tokens=None, usage=0.97)
    held = decide(busy, admitted=2, parallel=64, peak_tokens=1000)
    assert not held.admit and "97% used" in held.reason
    # with a known size our own runs' peaks are the accounting: their usage is expected
    assert decide(KvView(capacity_tokens=100_000, usage=0.97), admitted=2, parallel=64,
                  peak_tokens=1000).admit  # fmt: skip
    calm = KvView(capacity_tokens=100_000, usage=0.2)
    after = decide(calm, admitted=7, parallel=64, peak_tokens=1000, backoff_cap=7)
    assert not after.admit and "preempted requests with 8 runs running" in after.reason
    assert decide(calm, admitted=6, parallel=64, peak_tokens=1000, backoff_cap=7).admit


def test_a_server_that_does_not_say_its_capacity_gets_parallel_as_is() -> None:
    unknown = KvView(capacity_tokens=None, usage=None)
    assert decide(unknown, admitted=31, parallel=32, peak_tokens=None).admit
    assert not decide(unknown, admitted=32, parallel=32, peak_tokens=None).admit


def test_several_servers_add_their_capacity_and_weigh_their_usage() -> None:
    both = combine(
        [
            KvView(capacity_tokens=100_000, usage=0.5, preemptions=3, max_model_len=8192),
            KvView(capacity_tokens=300_000, usage=0.1, preemptions=1, max_model_len=4096),
        ]
    )
    assert both.capacity_tokens == 400_000 and both.servers == 2
    assert both.usage == pytest.approx((50_000 + 30_000) / 400_000)
    assert (both.preemptions, both.max_model_len) == (4, 4096)
    # one server without a size: the total is unknown, not a wrong sum
    assert combine([KvView(capacity_tokens=100), KvView(usage=0.3)]).capacity_tokens is None


def _answer(prompt: int, completion: int) -> ev.AssistantMessage:
    return ev.AssistantMessage(
        step=1, usage=ev.Usage(prompt_tokens=prompt, completion_tokens=completion)
    )


def test_the_peak_starts_at_the_pilots_ceiling_then_learns_from_finished_runs() -> None:
    admission = Admission(None, parallel=64, learn_after=2, output_reserve=1000)
    admission.view = KvView(capacity_tokens=200_000, max_model_len=8000)
    assert admission.peak_estimate() == 0.75 * 8000 + 1000  # no answer seen yet
    for run, peak in (("a", 3000), ("b", 3500)):
        admission.observe(run, 1, _answer(peak - 100, 100))
        admission.observe(run, 2, _answer(peak - 300, 50))  # a compaction made it smaller
    assert admission.peak_estimate() == 6000 + 100  # the threshold and the longest answer
    admission.observe("a", 3, ev.RunFinished(status="succeeded"))
    assert admission.peak_estimate() == 6100  # one finished run is not yet enough here
    admission.observe("b", 3, ev.RunFinished(status="succeeded"))
    assert admission.peak_estimate() == 3500
    admission.observe("c", 1, _answer(5000, 200))  # a live run above the estimate raises it
    assert admission.peak_estimate() == 5200


def test_cold_start_one_run_sizes_the_others_with_its_first_answer() -> None:
    """No guess before anything is known: one run starts, the rest wait for its first answer
    (the 1024-token reserve alone fitted 11 of 16 runs in the bench); then the ceiling holds."""
    now = [0.0]
    admission = Admission(None, parallel=64, clock=lambda: now[0], first_answer_wait_s=60)
    admission.view = KvView(capacity_tokens=16 * 3056, max_model_len=4096)
    assert admission.decision().admit  # the first run
    admission.admit()
    waiting = admission.decision()
    assert not waiting.admit and "first answer sizes the runs" in waiting.reason
    admission.observe("a", 1, _answer(500, 21))
    assert admission.peak_estimate() == 3072 + 21
    assert decide(admission.view, admitted=14, parallel=64, peak_tokens=3093).admit
    assert admission.decision().admit
    # with no answer at all within the wait, the reserve stands in
    late = Admission(None, parallel=64, clock=lambda: now[0], first_answer_wait_s=60)
    late.view = admission.view
    late.admit()
    assert not late.decision().admit
    now[0] = 61.0
    assert late.decision().admit and late.peak_estimate() == 3072 + 1024


def test_earlier_runs_of_the_workflow_size_the_first_wave() -> None:
    """With the store's history the runs that fit start at once, no sizing wait: 16 of the
    bench's 3,056-token runs in a 16 x 3,056-token cache (the ceiling alone fits 15)."""
    admission = Admission(None, parallel=128, history=[3040, 3056])
    admission.view = KvView(capacity_tokens=16 * 3056, max_model_len=4096)
    assert admission.peak_estimate() == 3056
    admission.admit()
    assert not admission.sizing()
    limit = decide(admission.view, admitted=15, parallel=128, peak_tokens=3056)
    assert limit.admit and limit.kv_limit == 16
    assert not decide(admission.view, admitted=16, parallel=128, peak_tokens=3056).admit
    assert kv_limit(16 * 3056, 3072 + 21) == 15
    # a history from a larger window never exceeds this window's ceiling
    big = Admission(None, parallel=8, history=[30_000])
    big.view = admission.view
    assert big.peak_estimate() == 3072 + 1024
    big.observe("r", 1, _answer(400, 30))
    assert big.peak_estimate() == 3072 + 30


def test_a_preemption_holds_admission_one_run_below_for_the_backoff() -> None:
    now = [0.0]
    told: list[str] = []
    admission = Admission(
        None, parallel=64, backoff_s=30, clock=lambda: now[0], on_wait=told.append
    )
    admission.admitted = 8
    calm = KvView(capacity_tokens=10**6, usage=0.3, preemptions=5, max_model_len=4096)
    admission.take(calm)
    assert admission.decision().admit
    now[0] = 1.0
    admission.take(KvView(capacity_tokens=10**6, usage=0.3, preemptions=7, max_model_len=4096))
    assert admission.preemptions_seen == 2
    admission.admitted = 7  # a run ended: still at the cap of 8 - 1
    refused = admission.decision()
    assert not refused.admit and "preempted requests with 8 runs running" in refused.reason
    now[0] = 31.5
    admission.take(KvView(capacity_tokens=10**6, usage=0.3, preemptions=7, max_model_len=4096))
    assert admission.decision().admit
    # a server without a size is said once
    admission.take(KvView(usage=0.3))
    admission.take(KvView(usage=0.3))
    assert told == [
        "admission: the server does not report its KV cache size (vllm:cache_config_info); "
        "admitting up to --parallel runs"
    ]


def _matrix(tmp_path: Path, endpoint: str, rows: int) -> list:
    text = "".join(f"line {i} " + "lorem ipsum dolor sit amet " * 4 + "\n" for i in range(60))
    repos = [make_repo(tmp_path / f"repo{i}", {"big.txt": text}) for i in range(rows)]
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump([{"repo": str(r)} for r in repos]))
    workflow = write_workflow(
        tmp_path / "wf.yaml", key=KEY, endpoint=endpoint, phases=[{"name": "w", "prompt": "p"}],
        model={"max_tokens": 256},
    )  # fmt: skip
    return load_many(workflow, [], None, matrix)


def _spans(db: Path) -> list[tuple[datetime, datetime]]:
    store = EventStore(f"sqlite:///{db}")
    spans = []
    for record in store.list_runs():
        events = store.load_events(record.id)
        spans.append((events[0].at, events[-1].at))
    return sorted(spans)


def _sim(tmp_path: Path, kv_tokens: int):
    turns = [{"content": f"Step {i}.", "tool_calls": [call("read_file", path="big.txt")]}
             for i in range(3)]  # fmt: skip
    turns.append({"tool_calls": [call("finish", summary="done")]})
    script = write_script(tmp_path / "s.yaml", KEY, turns)
    config = SimConfig(
        model="m", max_model_len=4096, kv_cache_tokens=kv_tokens, policy=f"script:{script}"
    )
    return running_sim(config)


@pytest.mark.parametrize("admit", [True, False])
def test_runs_wait_for_kv_room_and_none_is_preempted(tmp_path: Path, admit: bool) -> None:
    told: list[str] = []
    with _sim(tmp_path, kv_tokens=6144) as sim:  # a 4096 window: the prior fits one run
        loaded = _matrix(tmp_path, sim.openai_base_url, 3)
        db = tmp_path / "m.db"
        runner = Runner(EventStore(f"sqlite:///{db}"))
        admission = None
        if admit:
            source = MetricsKvSource([sim.openai_base_url])
            admission = Admission(source, parallel=3, poll=0.05, on_wait=told.append)
            runner.observers.append(admission.observe)
        outcomes = asyncio.run(run_many(runner, loaded, parallel=3, admission=admission))
        preemptions = MetricsSnapshot.from_text(httpx.get(f"{sim.base_url}/metrics").text)
    assert [o.status for o in outcomes] == ["succeeded"] * 3, [o.reason for o in outcomes]
    first, second, third = _spans(db)
    if admit:
        # the second run started only once the first had finished and shown its peak
        assert second[0] > first[1] and third[0] > first[1]
        # nothing known of a run's size: the others wait for the first run's first answer
        assert told[0] == (
            "run 2 of 3 (and 1 more) waits for room: the first run's first answer sizes "
            "the runs: waiting for it"
        )
        # then the ceiling (0.75 x 4096 + the answer) fits one run in 6,144 tokens; runs 2 and 3
        # both wake on the first answer (and every poll), so either may be the one to say it
        assert re.match(r"run [23] of 3 \(and 1 more\) waits for room: 1 running runs", told[1])
        assert "of up to ~3,0" in told[1] and "6,144-token KV cache" in told[1]
        assert admission is not None and admission.peak_estimate() < 3072
        # the store now holds these runs' peaks: a next batch of the workflow starts from them
        store = EventStore(f"sqlite:///{db}")
        names = {r.workflow_name for r in store.list_runs()}
        history = peak_history(store, names)
        assert len(history) == 3 and max(history) == admission.peak_estimate()
        assert peak_history(store, {"another-workflow"}) == []
    else:
        assert second[0] < first[1] and third[0] < first[1]
    assert preemptions.preemptions == 0


def test_the_kv_source_reads_capacity_usage_and_window_from_the_sim(tmp_path: Path) -> None:
    with _sim(tmp_path, kv_tokens=8192) as one, _sim(tmp_path, kv_tokens=4096) as two:
        source = MetricsKvSource([one.openai_base_url, two.base_url, "http://127.0.0.1:9"])

        async def read() -> KvView:
            try:
                return await source.read()
            finally:
                await source.aclose()

        view = asyncio.run(read())
    # the third endpoint is down: left out of the reading, not an error
    assert (view.servers, view.capacity_tokens, view.block_size) == (2, 12288, 16)
    assert (view.usage, view.preemptions, view.max_model_len) == (0.0, 0.0, 4096)
