"""The pilot against other servers' wire differences (brain/sim/flavours.py), over loopback:
llama-cpp-python (no usage in streams, no window anywhere, 500 on null assistant content, no
/health), llama.cpp's llama-server (window in /props), Ollama (window in /api/ps)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from pilot_harness import make_repo, run_in_process, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.store.event_store import EventStore

TURNS = [
    {"tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]},
    {"tool_calls": [{"name": "finish", "arguments": {"summary": "read it"}}]},
]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def run_against(
    tmp_path: Path,
    repo: Path,
    flavour: str,
    *,
    max_model_len: int = 32768,
    prompt: str = "Read app.py.",
    **model: Any,
) -> tuple[Any, list[ev.Event]]:
    script = write_script(tmp_path / "s.yaml", f"flavour-{flavour}", TURNS)
    config = SimConfig(
        model="qwen", max_model_len=max_model_len, policy=f"script:{script}", flavour=flavour
    )
    with running_sim(config) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key=f"flavour-{flavour}",
            endpoint=sim.openai_base_url,
            tools=["read_file", "finish"],
            phases=[{"name": "read", "prompt": prompt}],
            model=model or None,
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    return outcome, EventStore(f"sqlite:///{tmp_path / 'm.db'}").load_events(outcome.run_id)


def resolved(events: list[ev.Event]) -> list[ev.ModelResolved]:
    return [e for e in events if isinstance(e, ev.ModelResolved)]


def test_llama_cpp_python_usage_is_estimated_and_limits_still_count(
    tmp_path: Path, repo: Path
) -> None:
    outcome, events = run_against(tmp_path, repo, "llama-cpp-python")
    assert outcome.status == "succeeded", outcome.reason
    answers = [e for e in events if isinstance(e, ev.AssistantMessage)]
    assert all(a.usage is not None and a.usage.estimated for a in answers)
    assert all(a.usage.prompt_tokens > 0 and a.usage.completion_tokens > 0 for a in answers)
    assert outcome.state.total_tokens > 0 and outcome.state.usage_estimated
    # No window anywhere: said so at the start, not "None tokens".
    [first] = resolved(events)
    assert first.max_model_len is None and first.window_source == "not reported by the server"


def test_vllm_usage_is_the_servers(tmp_path: Path, repo: Path) -> None:
    _, events = run_against(tmp_path, repo, "vllm")
    answers = [e for e in events if isinstance(e, ev.AssistantMessage)]
    assert all(a.usage is not None and not a.usage.estimated for a in answers)
    assert resolved(events)[0].max_model_len == 32768


def test_context_window_setting_overrides(tmp_path: Path, repo: Path) -> None:
    _, events = run_against(tmp_path, repo, "llama-cpp-python", context_window=8192)
    [first] = resolved(events)
    assert (first.max_model_len, first.window_source) == (8192, "setting model.context_window")


def test_window_learnt_from_the_first_context_error(tmp_path: Path, repo: Path) -> None:
    """The server names its window only when a prompt does not fit: the run records it and
    budgets with it (here the prompt alone is too long, so it then ends saying so)."""
    outcome, events = run_against(
        tmp_path,
        repo,
        "llama-cpp-python",
        max_model_len=512,
        prompt="Read app.py. " + "The quick brown fox jumps. " * 300,
    )
    learnt = resolved(events)[-1]
    assert (learnt.max_model_len, learnt.window_source) == (
        512,
        "the server's context-length error",
    )
    assert outcome.status == "failed"
    assert "context window (512 tokens) is exhausted" in (outcome.reason or "")


def test_llama_cpp_server_window_from_props(tmp_path: Path, repo: Path) -> None:
    _, events = run_against(tmp_path, repo, "llama.cpp", max_model_len=8192)
    [first] = resolved(events)
    assert (first.max_model_len, first.window_source) == (8192, "llama.cpp /props n_ctx")


def test_ollama_window_from_api_ps(tmp_path: Path, repo: Path) -> None:
    _, events = run_against(tmp_path, repo, "ollama", max_model_len=4096)
    [first] = resolved(events)
    assert (first.max_model_len, first.window_source) == (4096, "Ollama /api/ps context_length")


def test_llama_cpp_python_flavour_refuses_null_content_as_the_real_server_does() -> None:
    """The quirk the pilot must avoid (it sends "" with tool calls; the runs above pass)."""
    config = SimConfig(model="qwen", policy="demo", flavour="llama-cpp-python")
    with running_sim(config) as sim:
        base = sim.openai_base_url
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        messages = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]
        refused = httpx.post(
            f"{base}/chat/completions", json={"model": "qwen", "messages": messages}
        )
        assert refused.status_code == 500
        root = base.removesuffix("/v1")
        assert httpx.get(f"{root}/health").status_code == 404
        count = httpx.post(f"{root}/extras/tokenize/count", json={"input": "hello world"})
        assert count.status_code == 200 and count.json()["count"] > 0


def test_servers_without_health_are_healthy_to_the_router() -> None:
    from pilot.model.router import Router

    async def main(urls: list[str]) -> list[bool]:
        router = Router(urls, model="qwen", refresh_interval=0.1)
        try:
            states = router.endpoints
            return [await router._health_ok(ep) for ep in states]
        finally:
            await router.aclose()

    a = SimConfig(model="qwen", policy="demo", flavour="llama-cpp-python")
    b = SimConfig(model="qwen", policy="demo", flavour="ollama")
    with running_sim(a) as one, running_sim(b) as two:
        assert asyncio.run(main([one.openai_base_url, two.openai_base_url])) == [True, True]
    assert asyncio.run(main(["http://127.0.0.1:9/v1"])) == [False], "nothing listening"


def test_llama_cpp_python_flavour_cuts_a_streamed_prompt_over_the_window() -> None:
    """As llama-cpp-python 0.3: the prompt is checked once the stream has begun, so a streamed
    answer is cut after its first chunk; the same request unstreamed gets the 400 that names
    the window (the pilot asks that way to learn why its streams are cut)."""
    config = SimConfig(model="qwen", policy="demo", flavour="llama-cpp-python", max_model_len=64)
    long = [{"role": "user", "content": "The quick brown fox jumps. " * 40}]
    with running_sim(config) as sim:
        url = f"{sim.openai_base_url}/chat/completions"
        with (
            pytest.raises(httpx.RemoteProtocolError),
            httpx.stream(
                "POST", url, json={"model": "qwen", "messages": long, "stream": True}
            ) as r,
        ):
            assert r.status_code == 200
            for _ in r.iter_bytes():
                pass
        plain = httpx.post(url, json={"model": "qwen", "messages": long, "max_tokens": 1})
        assert plain.status_code == 400
        error = plain.json()["error"]
        assert error["code"] == "context_length_exceeded"
        assert error["message"].startswith("This model's maximum context length is 64 tokens.")
