"""The sim speaks vLLM's chat wire format to the official openai client, streamed and not."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from brain.sim.config import SimConfig
from brain.sim.script_policy import ScriptPolicy
from brain.sim.server import running_sim

TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("read_file", "write_file", "run", "finish")
]
SCRIPT = {
    "conversations": [
        {
            "key": "chat-test",
            "turns": [
                {
                    "content": "Let me look at both files.",
                    "reasoning": "Two reads are needed.",
                    "tool_calls": [
                        {"name": "read_file", "arguments": {"path": "README.md"}},
                        {
                            "name": "read_file",
                            "arguments": {"path": "src/app/main.py", "limit": 400},
                        },
                    ],
                },
                {"content": "All done here, nothing else to change."},
            ],
        }
    ]
}
MESSAGES = [{"role": "system", "content": "chat-test"}, {"role": "user", "content": "Go."}]


@pytest.fixture(scope="module")
def sim():
    with running_sim(
        SimConfig(model="m", max_model_len=4096), policy=ScriptPolicy.from_dict(SCRIPT)
    ) as s:
        yield s


@pytest.fixture
def client(sim):
    return openai.OpenAI(base_url=sim.openai_base_url, api_key="unused", max_retries=0)


def test_plain_chat_returns_tool_calls_reasoning_and_usage(client):
    response = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)
    choice = response.choices[0]
    assert response.id.startswith("chatcmpl-")
    assert response.object == "chat.completion"
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look at both files."
    assert choice.message.model_extra["reasoning"] == "Two reads are needed."
    calls = choice.message.tool_calls
    assert [c.function.name for c in calls] == ["read_file", "read_file"]
    assert json.loads(calls[1].function.arguments) == {"path": "src/app/main.py", "limit": 400}
    assert all(c.id.startswith("chatcmpl-tool-") for c in calls)
    usage = response.usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.completion_tokens > 10


def test_streamed_tool_calls_reassemble_by_index_with_id_only_first(client):
    stream = client.chat.completions.create(
        model="m",
        messages=MESSAGES,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    calls: dict[int, dict[str, str]] = {}
    fragments: dict[int, int] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                if delta.id:
                    assert entry["id"] == "", "id repeated after the first delta"
                    entry["id"] = delta.id
                    entry["name"] = delta.function.name
                if delta.function and delta.function.arguments:
                    entry["arguments"] += delta.function.arguments
                    fragments[delta.index] = fragments.get(delta.index, 0) + 1
    assert sorted(calls) == [0, 1]
    assert json.loads(calls[0]["arguments"]) == {"path": "README.md"}
    assert all(n > 1 for n in fragments.values()), "arguments must come in several fragments"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals[-1].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "Let me look at both files."


def test_stream_and_plain_answers_agree_on_usage(client):
    plain = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)
    streamed = list(
        client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            tools=TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert streamed[-1].usage.model_dump() == {
        "prompt_tokens": plain.usage.prompt_tokens,
        "completion_tokens": plain.usage.completion_tokens,
        "total_tokens": plain.usage.total_tokens,
        "completion_tokens_details": None,
        "prompt_tokens_details": None,
    }


def test_tokenize_agrees_with_usage_and_detokenize_inverts(sim, client):
    usage = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS).usage
    counted = httpx.post(
        sim.base_url + "/tokenize", json={"model": "m", "messages": MESSAGES, "tools": TOOLS}
    )
    assert counted.status_code == 200
    assert counted.json()["count"] == usage.prompt_tokens
    assert counted.json()["max_model_len"] == 4096
    text = "héllo, wörld — ünïcode ✓"
    tokens = httpx.post(sim.base_url + "/tokenize", json={"prompt": text}).json()["tokens"]
    assert httpx.post(sim.base_url + "/detokenize", json={"tokens": tokens}).json() == {
        "prompt": text
    }


def test_tool_choice_none_required_named_and_parallel_false(client):
    none = client.chat.completions.create(
        model="m", messages=MESSAGES, tools=TOOLS, tool_choice="none"
    )
    assert not none.choices[0].message.tool_calls and none.choices[0].finish_reason == "stop"
    later = [*MESSAGES, {"role": "assistant", "content": "x"}]  # turn 2 has no calls
    required = client.chat.completions.create(
        model="m", messages=later, tools=TOOLS, tool_choice="required"
    )
    assert len(required.choices[0].message.tool_calls) == 1
    named = client.chat.completions.create(
        model="m",
        messages=later,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "run"}},
    )
    assert [c.function.name for c in named.choices[0].message.tool_calls] == ["run"]
    single = client.chat.completions.create(
        model="m", messages=MESSAGES, tools=TOOLS, parallel_tool_calls=False
    )
    assert len(single.choices[0].message.tool_calls) == 1


def test_max_tokens_truncates_mid_tool_call_with_length(client):
    """Not streamed, a call cut at max_tokens is no call: the hermes parser's json.loads fails
    on it and vLLM returns the whole output, the first (whole) call included, as content."""
    full = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)
    limit = full.usage.completion_tokens - 3
    cut = client.chat.completions.create(
        model="m", messages=MESSAGES, tools=TOOLS, max_completion_tokens=limit
    )
    assert cut.choices[0].finish_reason == "length"
    assert cut.usage.completion_tokens == limit
    message = cut.choices[0].message
    assert message.tool_calls is None
    assert message.content.startswith("Let me look at both files.<tool_call>\n")
    assert message.content.count("<tool_call>") == 2
    assert message.content.count("</tool_call>") == 1
    last = message.content.rsplit('"arguments": ', 1)[1]
    with pytest.raises(json.JSONDecodeError):
        json.loads(last)


def test_models_version_health_and_unknown_route(sim):
    models = httpx.get(sim.base_url + "/v1/models").json()
    card = models["data"][0]
    assert models["object"] == "list"
    assert card["id"] == "m" and card["owned_by"] == "vllm" and card["max_model_len"] == 4096
    assert card["object"] == "model" and card["parent"] is None and card["permission"]
    assert httpx.get(sim.base_url + "/version").json()["version"].endswith("-sim")
    health = httpx.get(sim.base_url + "/health")
    assert health.status_code == 200 and health.content == b""
    missing = httpx.get(sim.base_url + "/v1/nothing-here")
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}


def test_async_client_concurrent_streams(sim):
    async def one(client: openai.AsyncOpenAI) -> str:
        stream = await client.chat.completions.create(
            model="m", messages=MESSAGES, tools=TOOLS, stream=True
        )
        reasons = [c.choices[0].finish_reason async for c in stream if c.choices]
        return reasons[-1]

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(
            base_url=sim.openai_base_url, api_key="x", max_retries=0
        ) as client:
            return await asyncio.gather(*(one(client) for _ in range(5)))

    assert asyncio.run(main()) == ["tool_calls"] * 5


def _content_chunks(client: openai.OpenAI, **extra) -> tuple[list[str], int]:
    """The content pieces of the script's second turn (no calls), and the usage's count."""
    stream = client.chat.completions.create(
        model="m",
        messages=[
            *MESSAGES,
            {"role": "assistant", "content": "x"},
            {"role": "tool", "content": "y", "tool_call_id": "c"},
        ],
        stream=True,
        stream_options={"include_usage": True},
        extra_body=extra,
    )
    chunks = list(stream)
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    return pieces, chunks[-1].usage.completion_tokens


def test_stream_interval_batches_tokens_per_chunk_first_and_last_at_once(client):
    # vLLM's per-request stream_interval (clamped up to the server's --stream-interval):
    # the first step's token goes alone, then `interval` tokens a chunk, the rest with the end.
    one, tokens = _content_chunks(client)
    four, same_tokens = _content_chunks(client, stream_interval=4)
    assert "".join(four) == "".join(one) and same_tokens == tokens
    assert len(one) == tokens
    assert len(four) == 1 + -(-(tokens - 1) // 4)


def test_server_stream_interval_is_a_floor_for_requests():
    with running_sim(
        SimConfig(model="m", max_model_len=4096, stream_interval=3),
        policy=ScriptPolicy.from_dict(SCRIPT),
    ) as s:
        client = openai.OpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0)
        pieces, tokens = _content_chunks(client, stream_interval=1)
    assert len(pieces) == 1 + -(-(tokens - 1) // 3)


@pytest.mark.parametrize(
    ("delta", "finish"),
    [
        ({"role": "assistant", "content": ""}, None),
        ({"content": 'naïve “quotes” \\ and "escapes"\n'}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": '{"path": "a.py"}'}}]}, None),
        ({}, "tool_calls"),
        ({}, "length"),
    ],
)
def test_a_chunk_is_the_json_of_the_whole_chunk(delta, finish):
    """The chunk is written around a cached head; it must be exactly what serializing the
    whole chunk in vLLM's field order gives (``model_dump_json(exclude_unset=True)`` of the
    chunk as 0.33's ``serving.py`` builds it), so clients parse the same thing."""
    from brain.sim.app import _chunk, _ResponseMeta

    meta = _ResponseMeta(
        id="chatcmpl-ü1", created=1764460000, model="sim/ü", prompt_tokens=7, fingerprint="fp"
    )
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    if finish is not None:
        choice |= {"stop_reason": None, "token_ids": None, "weight_versions": None}
    else:
        choice["token_ids"] = None
    whole = {
        "id": meta.id,
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
        "choices": [choice],
    }
    if finish is not None:
        whole["system_fingerprint"] = "fp"
    whole["kv_transfer_params"] = None
    expected = f"data: {json.dumps(whole, ensure_ascii=False)}\n\n"
    assert _chunk(meta, delta, finish) == expected  # the head built
    assert _chunk(meta, delta, finish) == expected  # the head from the cache


def test_the_sim_serves_on_vllms_stack_uvloop_and_httptools():
    """vLLM's API server runs under ``uvloop.run`` with uvicorn's httptools parser (both come
    with ``fastapi[standard]``); the sim runs the same stack, and a client sees it answer."""
    import uvloop

    captured: dict[str, object] = {}
    with running_sim(SimConfig()) as sim:

        async def look() -> None:
            captured["loop"] = type(asyncio.get_running_loop())

        future = asyncio.run_coroutine_threadsafe(look(), sim.server._loop)
        future.result(timeout=5)
        protocol = sim.server._uv.config.http_protocol_class
        assert httpx.get(sim.base_url + "/health", timeout=5).status_code == 200
    assert captured["loop"] is uvloop.Loop
    assert protocol.__name__ == "HttpToolsProtocol"
