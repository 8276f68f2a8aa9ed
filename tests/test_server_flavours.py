"""The pilot against other servers' wire differences (brain/sim/flavours.py), over loopback:
llama-cpp-python (no usage in streams, no window anywhere, 500 on null assistant content, no
/health), llama.cpp's llama-server (a slot's window in /props, its chat count, its overflow
text, slots and metrics for brain status), Ollama (window in /api/ps), LM Studio (window in
/api/v0/models), SGLang (window in /v1/models); and a window too small for the workflow
refused at the start with the server's own fix."""

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
    {"tool_calls": [{"name": "finish", "arguments": {"summary": "read app.py"}}]},
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
    slots: int = 16,
    **model: Any,
) -> tuple[Any, list[ev.Event]]:
    script = write_script(tmp_path / "s.yaml", f"flavour-{flavour}", TURNS)
    config = SimConfig(
        model="qwen",
        max_model_len=max_model_len,
        policy=f"script:{script}",
        flavour=flavour,
        max_num_seqs=slots,
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


def test_llama_cpp_server_window_is_one_slots_and_usage_and_counts_are_its_own(
    tmp_path: Path, repo: Path
) -> None:
    outcome, events = run_against(tmp_path, repo, "llama.cpp", max_model_len=8192, slots=4)
    assert outcome.status == "succeeded", outcome.reason
    [first] = resolved(events)
    assert (first.max_model_len, first.window_source) == (
        8192,
        "llama.cpp /props n_ctx (one slot of 4)",
    )
    answers = [e for e in events if isinstance(e, ev.AssistantMessage)]
    assert answers and all(a.usage is not None and not a.usage.estimated for a in answers)


def test_llama_cpp_chat_count_is_asked_where_llama_server_counts() -> None:
    """Its /tokenize takes text ({"tokens": []} for a chat body): the client moves to
    /v1/chat/completions/input_tokens, whose count is the chat template's."""
    from pilot.model.client import OpenAIModelClient
    from pilot.model.settings import ClientSettings

    config = SimConfig(model="qwen", policy="demo", flavour="llama.cpp")
    messages = [{"role": "user", "content": "Count me, please."}]
    with running_sim(config) as sim:
        root = sim.openai_base_url.removesuffix("/v1")
        text = httpx.post(f"{root}/tokenize", json={"model": "qwen", "messages": messages})
        assert text.json() == {"tokens": []}
        plain = httpx.post(f"{root}/tokenize", json={"content": "Count me, please."}).json()
        assert len(plain["tokens"]) > 0

        async def count() -> int | None:
            async with OpenAIModelClient(sim.openai_base_url, ClientSettings()) as client:
                return await client.count_tokens("qwen", messages, None)

        counted = asyncio.run(count())
        direct = httpx.post(
            f"{root}/v1/chat/completions/input_tokens", json={"messages": messages}
        ).json()
    assert counted == direct["input_tokens"] > len(plain["tokens"])


def test_a_window_too_small_for_the_workflow_is_refused_at_start_with_llama_servers_fix(
    tmp_path: Path, repo: Path
) -> None:
    """-c 8192 --parallel 4 gives 2048 a slot; max_tokens 2048 plus the prompts need more."""
    outcome, events = run_against(
        tmp_path, repo, "llama.cpp", max_model_len=2048, slots=4, max_tokens=2048
    )
    assert outcome.status == "failed"
    reason = outcome.reason or ""
    assert "gives 2048 tokens per slot (4 slots)" in reason
    assert "restart llama-server with -c " in reason and "--parallel 4" in reason
    assert "--parallel 2" in reason or "--parallel 3" in reason or "--parallel 1" in reason
    assert "lower model.max_tokens to" in reason
    assert not [e for e in events if isinstance(e, ev.ModelRequest)], "refused before a request"


@pytest.mark.parametrize(
    ("flavour", "fix"),
    [
        ("vllm", "--max-model-len"),
        ("ollama", "num_ctx"),
        ("lmstudio", "lms load --context-length"),
        ("sglang", "--context-length"),
    ],
)
def test_each_server_s_too_small_window_names_its_own_fix(
    tmp_path: Path, repo: Path, flavour: str, fix: str
) -> None:
    outcome, events = run_against(tmp_path, repo, flavour, max_model_len=1024, max_tokens=2048)
    assert outcome.status == "failed" and fix in (outcome.reason or ""), outcome.reason
    assert not [e for e in events if isinstance(e, ev.ModelRequest)]


def test_a_window_set_by_hand_too_small_says_to_raise_the_setting(
    tmp_path: Path, repo: Path
) -> None:
    outcome, _ = run_against(
        tmp_path, repo, "llama-cpp-python", context_window=1024, max_tokens=2048
    )
    assert outcome.status == "failed"
    assert "raise model.context_window to at least" in (outcome.reason or "")


def test_lm_studio_window_from_api_v0_models(tmp_path: Path, repo: Path) -> None:
    outcome, events = run_against(tmp_path, repo, "lmstudio", max_model_len=4096)
    assert outcome.status == "succeeded", outcome.reason
    [first] = resolved(events)
    assert (first.max_model_len, first.window_source) == (
        4096,
        "LM Studio /api/v0/models loaded_context_length",
    )


def test_sglang_window_from_v1_models(tmp_path: Path, repo: Path) -> None:
    outcome, events = run_against(tmp_path, repo, "sglang", max_model_len=8192)
    assert outcome.status == "succeeded", outcome.reason
    [first] = resolved(events)
    assert (first.max_model_len, first.window_source) == (8192, None)


@pytest.mark.parametrize(("flavour", "words"), [
    ("llama.cpp", "exceeds the available context size (256 tokens)"),
    ("sglang", "maximum context length of 256 tokens"),
])  # fmt: skip
def test_each_server_s_overflow_text_is_a_context_overflow_naming_the_window(
    flavour: str, words: str
) -> None:
    from pilot.errors import ContextOverflow
    from pilot.model.client import OpenAIModelClient
    from pilot.model.settings import ClientSettings
    from pilot.model.types import ChatRequest

    config = SimConfig(model="qwen", policy="demo", flavour=flavour, max_model_len=256)
    long = [{"role": "user", "content": "The quick brown fox jumps. " * 80}]

    async def ask(url: str) -> BaseException:
        async with OpenAIModelClient(url, ClientSettings(server_wait=1)) as client:
            try:
                await client.complete(ChatRequest(model="qwen", messages=long, max_tokens=16))
            except ContextOverflow as exc:
                return exc
        raise AssertionError("no overflow")

    with running_sim(config) as sim:
        error = asyncio.run(ask(sim.openai_base_url))
    assert words in str(error)
    assert isinstance(error, ContextOverflow) and error.max_model_len == 256


def test_brain_status_shows_llama_server_slots_and_metrics() -> None:
    from brain.server_status import status_facts, status_rows

    config = SimConfig(model="qwen", policy="demo", flavour="llama.cpp", max_model_len=2048,
                       max_num_seqs=4)  # fmt: skip
    with running_sim(config) as sim:
        root = sim.openai_base_url.removesuffix("/v1")
        httpx.post(
            f"{sim.openai_base_url}/chat/completions",
            json={"model": "qwen", "messages": [{"role": "user", "content": "hi"}]},
        )
        facts = status_facts(root, None, 0.0)
    rows = dict(status_rows(facts))
    assert rows["slots"] == "4 x 2048 tokens (the window is one slot's), 0 busy"
    assert rows["model"] == "qwen  max_model_len 2048"
    assert rows["requests"] == "processing 0, deferred 0"
    assert rows["tokens"].startswith("prompt ") and not rows["tokens"].startswith("prompt 0,")


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


# Answers recorded from a LiteLLM 1.108.7 proxy here (trimmed to the fields read), and LM
# Studio's documented /api/v1/models (lmstudio-ai/docs 1_developer/2_rest/list.md).
LITELLM_CARD = {"id": "qwen", "object": "model", "created": 1677610602, "owned_by": "openai",
                "max_input_tokens": 8192}  # fmt: skip
LITELLM_INFO = {"data": [
    {"model_name": "qwen", "litellm_params": {"model": "openai/qwen"},
     "model_info": {"max_input_tokens": 8192, "max_tokens": None, "key": "openai/qwen"}},
    {"model_name": "qwen", "litellm_params": {"model": "openai/qwen"},
     "model_info": {"max_input_tokens": 4096}},
    {"model_name": "other", "model_info": {"max_input_tokens": 2048}},
]}  # fmt: skip
LM_STUDIO_V1 = {"models": [{"type": "llm", "key": "gemma-3-270m-it-qat", "max_context_length":
    32768, "loaded_instances": [{"id": "gemma-3-270m-it-qat", "config":
    {"context_length": 4096}}]}]}  # fmt: skip


def test_windows_read_from_litellm_and_lm_studio_answers() -> None:
    from pilot.model.servers import _litellm_model_info, _lm_studio_v1, card_window

    stated = card_window(LITELLM_CARD)
    assert stated is not None and (stated.tokens, stated.server) == (8192, "LiteLLM")
    # Several deployments of one name: a request may reach any, so the smallest window.
    assert _litellm_model_info(LITELLM_INFO, "qwen") == 4096
    assert _litellm_model_info(LITELLM_INFO, "missing") is None
    # The loaded instance's window, not the model's maximum.
    assert _lm_studio_v1(LM_STUDIO_V1, "gemma-3-270m-it-qat") == 4096
    assert card_window({"id": "x", "owned_by": "me"}) is None
