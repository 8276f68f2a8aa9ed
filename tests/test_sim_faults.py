"""Each injected fault is observable the way a client of a real vLLM would observe it."""

from __future__ import annotations

import itertools
import json
import time

import httpx
import openai
import pytest

from brain.sim.config import FaultRule, SimConfig
from brain.sim.faults import FaultPlan, parse_fault_spec
from brain.sim.script_policy import ScriptPolicy
from brain.sim.server import running_sim

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
POLICY = ScriptPolicy.from_dict(
    {
        "conversations": [
            {
                "key": "fault-test",
                "turns": [
                    {
                        "content": "Reading the whole project description now, please hold on.",
                        "tool_calls": [
                            {"name": "read_file", "arguments": {"path": "docs/README.md"}}
                        ],
                    }
                ],
            }
        ]
    }
)
MESSAGES = [{"role": "user", "content": "fault-test"}]


def sim_with(*specs: str, **extra):
    config = SimConfig(model="m", faults=[parse_fault_spec(s) for s in specs], **extra)
    return running_sim(config, policy=POLICY)


def client_for(sim) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0, timeout=10)


def ask(client: openai.OpenAI, **kwargs):
    return client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, **kwargs)


def test_fault_spec_parsing_and_plan():
    rule = parse_fault_spec("stream-cut@2+5,after_chunks=4")
    assert rule == FaultRule(kind="stream_cut", at=[2, 5], after_chunks=4)
    assert parse_fault_spec("503%3").kind == "http_503"
    assert parse_fault_spec("exit@4,exit_code=137").exit_code == 137
    with pytest.raises(ValueError, match="bad fault"):
        parse_fault_spec("teleport@1")
    plan = FaultPlan(
        [parse_fault_spec("http_500%2,times=2"), parse_fault_spec("stall~0.5")], seed=7
    )
    picks = [[r.kind for r in plan.select(n)] for n in range(1, 9)]
    assert [("http_500" in p) for p in picks] == [
        False,
        True,
        False,
        True,
        False,
        False,
        False,
        False,
    ]
    again = FaultPlan(
        [parse_fault_spec("http_500%2,times=2"), parse_fault_spec("stall~0.5")], seed=7
    )
    assert [[r.kind for r in again.select(n)] for n in range(1, 9)] == picks  # repeatable
    assert 0 < sum("stall" in p for p in picks) < 8


def test_http_503_and_500_map_to_openai_errors():
    with sim_with("http_503@1", "http_500@2") as sim:
        client = client_for(sim)
        with pytest.raises(openai.APIStatusError) as busy:
            ask(client)
        assert busy.value.status_code == 503 and "currently busy" in busy.value.body["message"]
        with pytest.raises(openai.InternalServerError) as broken:
            ask(client)
        assert (
            broken.value.status_code == 500 and broken.value.body["type"] == "InternalServerError"
        )
        assert ask(client).choices[0].finish_reason == "tool_calls"


def test_refuse_drops_the_request_and_refuses_new_connections_then_recovers():
    with sim_with("refuse@1,seconds=0.6") as sim:
        client = client_for(sim)
        with pytest.raises(openai.APIConnectionError):
            ask(client)
        with pytest.raises(httpx.ConnectError):
            httpx.get(sim.base_url + "/health")
        deadline = time.monotonic() + 5
        while True:
            try:
                assert httpx.get(sim.base_url + "/health").status_code == 200
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "never came back"
                time.sleep(0.05)
        assert ask(client).choices[0].finish_reason == "tool_calls"


def test_stream_cut_ends_the_stream_early_without_done():
    with sim_with("stream_cut@1,after_chunks=3") as sim:
        client = client_for(sim)
        seen = []
        with pytest.raises((httpx.RemoteProtocolError, openai.APIConnectionError)):
            for chunk in ask(client, stream=True):
                seen.append(chunk)
        assert len(seen) == 3
        assert all(c.choices[0].finish_reason is None for c in seen)
        assert ask(client).choices[0].finish_reason == "tool_calls"


def test_stall_pauses_mid_stream_then_finishes():
    with sim_with("stall@1,seconds=0.5,after_chunks=2") as sim:
        client = client_for(sim)
        stamps = []
        for chunk in ask(client, stream=True):
            stamps.append((time.monotonic(), chunk))
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(stamps)]
        assert max(gaps) >= 0.4
        assert gaps.index(max(gaps)) == 1  # right after the second chunk
        assert stamps[-1][1].choices[0].finish_reason == "tool_calls"


def test_stall_before_headers_trips_a_client_timeout():
    with sim_with("stall_headers@1,seconds=1.5") as sim:
        impatient = openai.OpenAI(
            base_url=sim.openai_base_url, api_key="x", max_retries=0, timeout=0.3
        )
        with pytest.raises(openai.APITimeoutError):
            ask(impatient)


@pytest.mark.parametrize("stream", [False, True])
def test_content_faults_malformed_unknown_empty_length(stream):
    with sim_with("malformed_arguments@1", "unknown_tool@2", "empty_turn@3", "length@4") as sim:
        client = client_for(sim)

        def answer():
            if not stream:
                choice = ask(client).choices[0]
                calls = [
                    (c.function.name, c.function.arguments) for c in choice.message.tool_calls or []
                ]
                return choice.message.content, calls, choice.finish_reason
            content, calls, finish = "", {}, None
            for chunk in ask(client, stream=True):
                for choice in chunk.choices:
                    content += choice.delta.content or ""
                    finish = choice.finish_reason or finish
                    for d in choice.delta.tool_calls or []:
                        name, args = calls.get(d.index, ("", ""))
                        calls[d.index] = (
                            name or d.function.name or "",
                            args + (d.function.arguments or ""),
                        )
            return content or None, list(calls.values()), finish

        # Streamed, the parser streams what it sees; whole, a call that is not JSON is no
        # call: vLLM returns the output as content (hermes' json.loads fails), no tool_calls.
        content, calls, finish = answer()
        if stream:
            with pytest.raises(json.JSONDecodeError):
                json.loads(calls[0][1])
        else:
            assert calls == [] and "<tool_call>" in content and finish == "stop"
        _, calls, finish = answer()
        assert calls[0][0] == "nonexistent_tool" and finish == "tool_calls"
        content, calls, finish = answer()
        assert not content and calls == [] and finish == "stop"
        content, calls, finish = answer()
        assert finish == "length"
        if stream:
            with pytest.raises(json.JSONDecodeError):
                json.loads(calls[0][1])
        else:
            assert calls == [] and "<tool_call>" in content


def test_engine_dead_makes_health_503_and_requests_500():
    with sim_with("engine_dead@2") as sim:
        client = client_for(sim)
        ask(client)
        with pytest.raises(openai.InternalServerError) as caught:
            ask(client)
        assert "EngineCore encountered an issue" in caught.value.body["message"]
        assert httpx.get(sim.base_url + "/health").status_code == 503
        with pytest.raises(openai.InternalServerError):
            ask(client)


def test_exit_stops_the_in_thread_server():
    with sim_with("exit@2") as sim:
        client = client_for(sim)
        ask(client)
        with pytest.raises(openai.APIConnectionError):
            ask(client)
        deadline = time.monotonic() + 5
        while sim.alive and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not sim.alive and sim.exit_code == 1
        with pytest.raises(httpx.ConnectError):
            httpx.get(sim.base_url + "/health")


def test_per_turn_fault_from_a_script():
    policy = ScriptPolicy.from_dict(
        {
            "conversations": [
                {"key": "k", "turns": [{"content": "Hello there, friend.", "fault": "http_500"}]}
            ]
        }
    )
    with (
        running_sim(SimConfig(model="m"), policy=policy) as sim,
        pytest.raises(openai.InternalServerError),
    ):
        client_for(sim).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "k"}]
        )
