"""The model client against the simulated vLLM, over real loopback HTTP with the openai SDK.

Every test starts its own sim on a free port (parallel-safe) and shrinks the client's waits
(server_wait, idle_timeout, backoff) so that no test waits more than a couple of seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from pilot_harness import read_request

from brain.sim.config import FaultRule, SimConfig, Speculative
from brain.sim.script_policy import ScriptPolicy
from brain.sim.server import RunningSim, running_sim
from brain.sim.tokenizer import count_chat
from pilot.errors import (
    BadRequest,
    ConfigurationError,
    ContextOverflow,
    ModelNotFound,
    ServerUnavailable,
)
from pilot.model import client as pilot_model
from pilot.model.client import OpenAIModelClient
from pilot.model.settings import ClientSettings
from pilot.model.types import ChatRequest, RetryPolicy, WaitEvent, resolve_model_name

pytestmark = pytest.mark.anyio

MODEL = "sim/test-model"
FAST = RetryPolicy(initial_backoff=0.05, max_backoff=0.25, jitter=0.02)

WRITE_ARGS = {
    "path": "src/marathon/long_module_name.py",
    "content": 'def main() -> None:\n    print("hello, world")\n',
}
SCRIPT = {
    "conversations": [
        {"key": "plain-answer", "turns": [{"content": "The answer is 42, as computed."}]},
        {
            "key": "two-calls",
            "turns": [
                {
                    "content": "Reading both.",
                    "tool_calls": [
                        {"name": "read_file", "arguments": {"path": "README.md"}},
                        {"name": "write_file", "arguments": WRITE_ARGS},
                    ],
                }
            ],
        },
        {
            "key": "thinking",
            "turns": [
                {
                    "reasoning": "The user wants a file listing; ls is the tool for that.",
                    "tool_calls": [{"name": "run", "arguments": {"command": "ls -la"}}],
                }
            ],
        },
        {
            "key": "long-answer",
            "turns": [
                {"content": "A long and careful answer, streamed in many small pieces. " * 8}
            ],
        },
    ]
}
POLICY = ScriptPolicy.from_dict(SCRIPT)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    for name in ("read_file", "write_file", "run")
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def request(key: str, **kwargs: Any) -> ChatRequest:
    fields: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"{key}: please help"}],
        "tools": TOOLS,
        "tool_choice": "auto",
    }
    fields.update(kwargs)
    return ChatRequest(**fields)


@contextmanager
def sim(*faults: FaultRule, **config: Any) -> Iterator[RunningSim]:
    settings: dict[str, Any] = {"model": MODEL, "faults": list(faults)}
    settings.update(config)
    with running_sim(SimConfig(**settings), policy=POLICY) as running:
        yield running


def client_for(
    running: RunningSim,
    *,
    server_wait: float = 5.0,
    idle_timeout: float = 2.0,
    api_key: str | None = None,
    base_url: str | None = None,
) -> OpenAIModelClient:
    return OpenAIModelClient(
        base_url or running.openai_base_url,
        ClientSettings(
            api_key=api_key, request_timeout=5.0, idle_timeout=idle_timeout, server_wait=server_wait
        ),
        retry=FAST,
    )


class Waits:
    """Collects on_wait events; an async callback, as the runner's is."""

    def __init__(self) -> None:
        self.events: list[WaitEvent] = []

    async def __call__(self, event: WaitEvent) -> None:
        self.events.append(event)

    @property
    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


async def complete(running: RunningSim, req: ChatRequest, **client_kwargs: Any):
    client = client_for(running, **client_kwargs)
    waits = Waits()
    try:
        return await client.complete(req, on_wait=waits), waits
    finally:
        await client.aclose()


# -- answers ----------------------------------------------------------------------------------


async def test_plain_answer_with_usage_and_timings():
    with sim() as running:
        response, waits = await complete(running, request("plain-answer"))
    assert response.content == "The answer is 42, as computed."
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert response.usage is not None
    assert response.usage.prompt_tokens > 0
    assert response.usage.completion_tokens == len(response.content.encode()) // 4 + 1
    assert response.ttft_s is not None and 0 < response.ttft_s <= response.duration_s
    assert response.attempts == 1 and waits.events == []


async def test_tool_calls_reassembled_from_deltas_by_index():
    # MTP-style multi-token steps make fragments of varying size, as with Gemma 4 + MTP.
    spec = Speculative(num_tokens=3, acceptance=0.6)
    with sim(speculative=spec) as running:
        response, _ = await complete(running, request("two-calls"))
    assert response.finish_reason == "tool_calls"
    assert response.content == "Reading both."
    assert [c.name for c in response.tool_calls] == ["read_file", "write_file"]
    assert json.loads(response.tool_calls[0].arguments) == {"path": "README.md"}
    assert json.loads(response.tool_calls[1].arguments) == WRITE_ARGS
    ids = [c.id for c in response.tool_calls]
    assert all(ids) and len(set(ids)) == 2


async def test_reasoning_captured_apart_from_content():
    with sim() as running:
        response, _ = await complete(running, request("thinking"))
    assert response.reasoning == "The user wants a file listing; ls is the tool for that."
    assert response.content is None
    assert [(c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("run", {"command": "ls -la"})
    ]


async def test_extra_body_reaches_the_server():
    with sim() as running:
        response, _ = await complete(
            running, request("plain-answer", extra_body={"top_k": 20}, max_tokens=64)
        )
    assert response.content


# -- deterministic errors: typed, never retried ----------------------------------------------


async def test_unknown_model_is_model_not_found_listing_served_names():
    with sim(served_model_names=["gemma-4-e4b", "gemma-4-e4b-alias"]) as running:
        client = client_for(running)
        with pytest.raises(ModelNotFound) as info:
            await client.complete(request("plain-answer", model="gemma-3"))
        await client.aclose()
    assert info.value.model == "gemma-3"
    assert info.value.served == ["gemma-4-e4b", "gemma-4-e4b-alias"]
    assert "model.name" in str(info.value) and "auto" in str(info.value)


async def test_context_overflow_is_typed_with_the_limit():
    with sim(max_model_len=256) as running:
        big = request("plain-answer", max_tokens=200)
        big.messages.append({"role": "user", "content": "x" * 2000})
        waits = Waits()
        client = client_for(running)
        with pytest.raises(ContextOverflow) as info:
            await client.complete(big, on_wait=waits)
        await client.aclose()
    # vLLM 0.33 refuses only a prompt over the window by itself (it clamps max_tokens
    # otherwise), reporting the prompt as "at least" the window + 1 and no output tokens
    assert info.value.max_model_len == 256
    assert info.value.max_tokens is None
    assert info.value.prompt_tokens == 257
    assert waits.events == []


async def test_a_request_over_the_window_is_clamped_by_vllm_033_and_cut_by_length():
    """vLLM 0.33 serves prompt + max_tokens over the window with max_tokens clamped to the
    room left: the pilot gets an answer cut with finish_reason "length" and the usage 0.33
    sends (no 400), which its loop treats as any cut answer."""
    asked = request("plain-answer", tools=None, tool_choice=None)
    window = count_chat(asked.messages) + 3  # room for 3 of the answer's 8 tokens
    with sim(max_model_len=max(window, 16)) as running:
        client = client_for(running)
        answer = await client.complete(asked.model_copy(update={"max_tokens": window}))
        await client.aclose()
    assert answer.finish_reason == "length"
    assert answer.usage is not None
    assert answer.usage.prompt_tokens + answer.usage.completion_tokens == window


async def test_the_026_flavour_refuses_it_and_the_pilot_gets_its_typed_overflow():
    with sim(max_model_len=64, vllm_version="0.26") as running:
        client = client_for(running)
        with pytest.raises(ContextOverflow) as info:
            await client.complete(
                request("plain-answer", tools=None, tool_choice=None, max_tokens=60)
            )
        await client.aclose()
    assert (info.value.max_model_len, info.value.max_tokens) == (64, 60)


async def test_missing_api_key_is_a_configuration_error_naming_the_setting():
    with sim(api_keys=["sekrit"]) as running:
        client = client_for(running)
        with pytest.raises(ConfigurationError) as info:
            await client.complete(request("plain-answer"))
        await client.aclose()
        ok, _ = await complete(running, request("plain-answer"), api_key="sekrit")
    assert "API key" in str(info.value) and "model.api_key_env" in str(info.value)
    assert ok.content


async def test_deterministic_400_is_not_retried():
    with sim() as running:
        waits = Waits()
        client = client_for(running, server_wait=30)
        started = time.monotonic()
        with pytest.raises(BadRequest) as info:
            await client.complete(
                request("plain-answer", extra_body={"temperature": -1}), on_wait=waits
            )
        await client.aclose()
        served = running.state.next_request_number()  # the sim's own count, +1
    assert time.monotonic() - started < 2
    assert info.value.status == 400 and "temperature must be non-negative" in str(info.value)
    assert waits.events == []
    assert served == 2  # exactly one chat request reached the server


async def test_wrong_endpoint_path_is_a_configuration_error():
    with sim() as running:
        client = client_for(running, base_url=running.base_url + "/nope/v1")
        with pytest.raises(ConfigurationError, match="endpoint"):
            await client.complete(request("plain-answer"))
        await client.aclose()


# -- transient failures: waited out --------------------------------------------------------------


async def test_503_burst_then_success_reports_unavailable_then_back():
    with sim(FaultRule(kind="http_503", at=[1, 2, 3])) as running:
        response, waits = await complete(running, request("plain-answer"))
    assert response.content == "The answer is 42, as computed."
    assert response.attempts == 4
    assert waits.kinds == ["unavailable", "back"]
    down, back = waits.events
    assert down.attempt == 1 and "503" in (down.error or "") and "busy" in (down.error or "")
    assert back.attempts == 4 and back.waited_s > 0


async def test_sync_on_wait_callbacks_work_too():
    seen: list[str] = []
    with sim(FaultRule(kind="http_500", at=[1])) as running:
        client = client_for(running)
        response = await client.complete(
            request("plain-answer"), on_wait=lambda e: seen.append(e.kind)
        )
        await client.aclose()
    assert response.attempts == 2 and seen == ["unavailable", "back"]


async def test_refused_connections_for_a_while_then_success():
    with sim(FaultRule(kind="refuse", at=[1], seconds=1.0)) as running:
        started = time.monotonic()
        response, waits = await complete(running, request("plain-answer"))
    assert response.content == "The answer is 42, as computed."
    assert time.monotonic() - started >= 0.9
    assert response.attempts >= 2
    assert waits.kinds == ["unavailable", "back"]
    assert "connection" in (waits.events[0].error or "").lower()


async def test_stream_cut_midway_is_retried():
    with sim(FaultRule(kind="stream_cut", at=[1], after_chunks=3)) as running:
        response, waits = await complete(running, request("long-answer"))
    assert response.content == "A long and careful answer, streamed in many small pieces. " * 8
    assert response.finish_reason == "stop"
    assert response.attempts == 2
    assert waits.kinds == ["unavailable", "back"]


async def test_error_event_inside_the_stream_is_retried():
    """vLLM reports a generation that fails after the headers as ``data: {"error": ...}``
    followed by ``[DONE]``; with code 500 that is a server fault: waited out and retried."""
    with sim(FaultRule(kind="stream_error", at=[1], after_chunks=2)) as running:
        response, waits = await complete(running, request("long-answer"))
    assert response.content == "A long and careful answer, streamed in many small pieces. " * 8
    assert response.attempts == 2
    assert waits.kinds == ["unavailable", "back"]
    note = waits.events[0].error or ""
    assert "error inside the stream" in note and "simulated failure during generation" in note


async def test_streams_reuse_one_connection():
    """Sequential streams to the sim ride one keep-alive connection."""
    with sim() as running:
        client = client_for(running)
        seen: set[tuple[str, int]] = set()
        for _ in range(4):
            await client.complete(request("long-answer"))
            seen.update(running.server.open_clients())
        open_now = running.server.open_clients()
        await client.aclose()
    assert len(seen) == 1 and len(open_now) == 1, seen


async def test_stall_past_idle_timeout_is_cut_and_retried():
    stall = FaultRule(kind="stall", at=[1], after_chunks=2, seconds=3.0)
    with sim(stall) as running:
        started = time.monotonic()
        response, waits = await complete(running, request("long-answer"), idle_timeout=0.3)
    assert time.monotonic() - started < 2.5  # did not sit through the 3 s stall
    assert response.content == "A long and careful answer, streamed in many small pieces. " * 8
    assert response.attempts == 2
    assert "idle_timeout" in (waits.events[0].error or "")


async def test_silent_server_before_headers_is_cut_and_retried():
    with sim(FaultRule(kind="stall_headers", at=[1], seconds=3.0)) as running:
        started = time.monotonic()
        response, _ = await complete(running, request("plain-answer"), idle_timeout=0.3)
    assert time.monotonic() - started < 2.5
    assert response.attempts == 2


async def test_server_that_never_comes_back_raises_server_unavailable():
    with sim(FaultRule(kind="engine_dead")) as running:
        waits = Waits()
        client = client_for(running, server_wait=1.0)
        started = time.monotonic()
        with pytest.raises(ServerUnavailable) as info:
            await client.complete(request("plain-answer"), on_wait=waits)
        await client.aclose()
    elapsed = time.monotonic() - started
    assert 0.5 < elapsed < 2.5
    assert waits.kinds == ["unavailable"]
    message = str(info.value)
    assert "attempts" in message and "500" in message and "EngineCore" in message
    assert info.value.waited is not None and info.value.waited <= 1.0 + 0.3


async def test_nothing_listening_raises_server_unavailable_quickly():
    with sim() as running:
        url = running.openai_base_url
    client = OpenAIModelClient(
        url, ClientSettings(request_timeout=1.0, idle_timeout=1.0, server_wait=0.5), retry=FAST
    )
    with pytest.raises(ServerUnavailable, match="connection failed"):
        await client.complete(request("plain-answer"))
    await client.aclose()


# -- models and tokens -----------------------------------------------------------------------


async def test_list_models_returns_max_model_len():
    with sim(served_model_names=["a", "b"], max_model_len=4096) as running:
        client = client_for(running)
        models = await client.list_models()
        first = await resolve_model_name(client, "auto")
        named = await resolve_model_name(client, "b")
        with pytest.raises(ModelNotFound) as info:
            await resolve_model_name(client, "c")
        await client.aclose()
    assert [(m.id, m.max_model_len) for m in models] == [("a", 4096), ("b", 4096)]
    assert first.id == "a" and named.id == "b"
    assert info.value.served == ["a", "b"]


async def test_runs_starting_together_share_one_model_list_request(monkeypatch):
    with sim(served_model_names=["a"], max_model_len=4096) as running:
        client = client_for(running)
        asked = []
        once = client._list_models_once

        async def counted() -> list:
            asked.append(1)
            return await once()

        monkeypatch.setattr(client, "_list_models_once", counted)
        lists = await asyncio.gather(*(client.list_models() for _ in range(20)))
        again = await client.list_models()  # fresh: reused
        monkeypatch.setattr(pilot_model, "MODELS_FRESH_S", 0.0)
        stale = await client.list_models()  # not fresh any more: asked again
        await client.aclose()
    assert len(asked) == 2
    assert all([m.id for m in served] == ["a"] for served in [*lists, again, stale])


async def test_when_the_shared_model_list_request_fails_each_caller_asks_on_its_own(
    monkeypatch,
):
    with sim(served_model_names=["a"]) as running:
        client = client_for(running)
        calls = []
        once = client._list_models_once

        async def first_fails() -> list:
            calls.append(1)
            if len(calls) == 1:
                raise httpx.ConnectError("connection refused")
            return await once()

        monkeypatch.setattr(client, "_list_models_once", first_fails)
        lists = await asyncio.gather(*(client.list_models() for _ in range(3)))
        await client.aclose()
    assert [[m.id for m in served] for served in lists] == [["a"]] * 3
    assert len(calls) == 1 + 3  # the shared one, then one each (none shared a failure)


async def test_count_tokens_matches_the_sims_tokenize():
    messages = [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "Count me, please: héllo wörld"},
    ]
    with sim() as running:
        client = client_for(running)
        counted = await client.count_tokens(MODEL, messages, TOOLS)
        without_tools = await client.count_tokens(MODEL, messages, None)
        await client.aclose()
        direct = httpx.post(
            running.base_url + "/tokenize",
            json={"model": MODEL, "messages": messages, "tools": TOOLS},
        ).json()["count"]
        usage, _ = await complete(running, ChatRequest(model=MODEL, messages=messages, tools=TOOLS))
    assert counted == direct
    assert without_tools is not None and without_tools < counted
    assert usage.usage is not None and usage.usage.prompt_tokens == counted


async def test_count_tokens_is_none_when_tokenize_is_missing():
    calls = 0

    def handler(req: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(404, json={"detail": "Not Found"})

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    client = OpenAIModelClient(
        "http://model.invalid/v1",
        ClientSettings(request_timeout=1, idle_timeout=1, server_wait=1),
        http_client=http,
    )
    assert await client.count_tokens(MODEL, [{"role": "user", "content": "hi"}], None) is None
    assert await client.count_tokens(MODEL, [{"role": "user", "content": "hi"}], None) is None
    assert calls == 1  # the "unsupported" answer is remembered
    await client.aclose()
    assert not http.is_closed  # a client passed in belongs to the caller
    await http.aclose()


async def test_count_tokens_for_an_unknown_model_is_model_not_found():
    with sim(served_model_names=["served"]) as running:
        client = client_for(running)
        with pytest.raises(ModelNotFound) as info:
            await client.count_tokens("other", [{"role": "user", "content": "hi"}], None)
        await client.aclose()
    assert info.value.served == ["served"]


@pytest.mark.parametrize("fault", ["malformed_arguments", "length", "empty_turn", "unknown_tool"])
async def test_bad_turns_come_back_as_sent_for_the_loop_to_handle(fault):
    # Not errors of the transport: the client returns them raw, once, without retrying.
    with sim(FaultRule(kind=fault, at=[1])) as running:
        response, waits = await complete(running, request("two-calls"))
    assert response.attempts == 1 and waits.events == []
    if fault == "malformed_arguments":
        with pytest.raises(json.JSONDecodeError):
            json.loads(response.tool_calls[0].arguments)
    elif fault == "length":
        assert response.finish_reason == "length"
    elif fault == "empty_turn":
        assert (response.content, response.tool_calls, response.finish_reason) == (None, [], "stop")
    else:
        assert response.tool_calls[0].name == "nonexistent_tool"


async def test_concurrent_requests_share_one_client():
    with sim() as running:
        client = client_for(running)
        results = await asyncio.gather(
            *(client.complete(request(k)) for k in ("plain-answer", "two-calls", "thinking"))
        )
        await client.aclose()
    assert results[0].content and len(results[1].tool_calls) == 2 and results[2].reasoning


async def test_an_httpx_client_passed_in_carries_every_request_and_stays_open():
    with sim(FaultRule(kind="http_503", at=[1])) as running:
        async with httpx.AsyncClient() as http:
            client = OpenAIModelClient(
                running.openai_base_url,
                ClientSettings(request_timeout=5, idle_timeout=2, server_wait=5),
                http_client=http,
                retry=FAST,
            )
            response = await client.complete(request("two-calls"))
            models = await client.list_models()
            count = await client.count_tokens(MODEL, request("two-calls").messages, None)
            await client.aclose()
            assert not http.is_closed
    assert response.attempts == 2 and len(response.tool_calls) == 2
    assert models[0].id == MODEL and count


async def test_request_past_request_timeout_is_abandoned_and_retried():
    # The stream keeps trickling (no idle stall) but the whole attempt is too slow.
    slow = FaultRule(kind="stall", at=[1], after_chunks=2, seconds=3.0)
    with sim(slow) as running:
        client = OpenAIModelClient(
            running.openai_base_url,
            ClientSettings(request_timeout=0.6, idle_timeout=5.0, server_wait=5.0),
            retry=FAST,
        )
        waits = Waits()
        started = time.monotonic()
        response = await client.complete(request("plain-answer"), on_wait=waits)
        await client.aclose()
    assert time.monotonic() - started < 2.5
    assert response.attempts == 2 and response.content
    assert "request_timeout" in (waits.events[0].error or "")


def stream_body(*deltas: dict[str, Any], finish: str = "stop") -> str:
    """A chat completion stream as vLLM writes it, for servers written by hand."""
    choices = [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None} for d in deltas]
    choices.append({"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish})
    events = [
        {"id": "chatcmpl-h", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
         "choices": [choice]}
        for choice in choices
    ]  # fmt: skip
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


@contextlib.asynccontextmanager
async def hand_server(*answers: tuple[bytes, bytes]) -> AsyncIterator[OpenAIModelClient]:
    """A bare HTTP server giving each request the next (extra headers, body); a client for it."""
    pending = list(answers)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        headers, body = pending.pop(0)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            + headers
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = OpenAIModelClient(
        f"http://127.0.0.1:{port}/v1",
        ClientSettings(request_timeout=5.0, idle_timeout=2.0, server_wait=2.0),
        retry=FAST,
    )
    try:
        yield client
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()


async def test_a_gzip_coded_stream_is_decoded():
    """A proxy may compress the event stream; the body is then read through the content
    decoder (the aiohttp transport leaves decompression to httpx2)."""
    body = stream_body({"role": "assistant", "content": ""}, {"content": "Compressed "},
                       {"content": "but whole."})  # fmt: skip
    async with hand_server((b"content-encoding: gzip\r\n", gzip.compress(body.encode()))) as c:
        response = await c.complete(request("gzip"))
    assert response.content == "Compressed but whole."
    assert response.finish_reason == "stop"


async def test_an_event_that_is_not_json_is_retried_like_a_cut():
    good = stream_body({"content": "Second time lucky."}).encode()
    bad = b'data: {"id": "chatcmpl-h", "choices": [{"index": 0, "delta": {"cont\n\n'
    waits = Waits()
    async with hand_server((b"", bad), (b"", good)) as client:
        response = await client.complete(request("not-json"), on_wait=waits)
    assert response.content == "Second time lucky." and response.attempts == 2
    assert "not JSON" in (waits.events[0].error or ""), waits.events


async def test_the_body_after_done_is_read_so_the_connection_is_kept():
    """A server may end the chunked body a moment after ``[DONE]``. The client reads on for
    that moment (briefly), so the connection goes back to the pool instead of being closed
    with the body unfinished: both requests come on one connection."""
    body = stream_body({"content": "Kept alive."}).encode()
    connections = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                await read_request(reader)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                    + f"{len(body):x}\r\n".encode() + body + b"\r\n"
                )  # fmt: skip
                await writer.drain()
                await asyncio.sleep(pilot_model.DRAIN_AFTER_DONE_S / 4)
                writer.write(b"0\r\n\r\n")  # the end of the body, after [DONE]
                await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    settings = ClientSettings(request_timeout=5.0, idle_timeout=2.0, server_wait=1.0)
    client = OpenAIModelClient(f"http://127.0.0.1:{port}/v1", settings, retry=FAST)
    try:
        answers = [await client.complete(request("keep-alive")) for _ in range(2)]
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()
    assert [a.content for a in answers] == ["Kept alive."] * 2
    assert len(connections) == 1
