"""The model client against answers a real vLLM 0.26 gave on the H200 (tests/fixtures/vllm-0.26):
a deterministic 500 to forced tool choice, the auto-tool-choice refusal, a release that drops a
request's stream_interval. Servers are written by hand over loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pilot.errors import BadRequest, ConfigurationError, ForcedCallsRefused
from pilot.model.client import OpenAIModelClient
from pilot.model.errors import SAME_500_LIMIT, map_vllm_error
from pilot.model.settings import ClientSettings
from pilot.model.types import ChatRequest, RetryPolicy

pytestmark = pytest.mark.anyio

FIX = Path(__file__).parent / "fixtures" / "vllm-0.26" / "http"
FAST = RetryPolicy(initial_backoff=0.05, max_backoff=0.25, jitter=0.02)
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
]


def recorded(name: str) -> tuple[int, bytes]:
    """(status, body) of a recorded exchange."""
    text = (FIX / name).read_text()
    status = int(text.split("HTTP/1.1 ", 1)[1].split()[0])
    body = text.split("\n\n", 1)[1].split("\n### curl", 1)[0].strip()
    return status, body.encode()


def stream(content: str) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "smol",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": content},
                          "finish_reason": "stop"}]}  # fmt: skip
    return f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()


@contextlib.asynccontextmanager
async def server(routes: dict[str, Any], seen: list[tuple[str, dict[str, Any]]]
                 ) -> AsyncIterator[OpenAIModelClient]:  # fmt: skip
    """routes: path -> (status, body, content type); the requests seen are appended."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ")[1]
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                raw = await reader.readexactly(length) if length else b""
                seen.append((path.decode(), json.loads(raw) if raw else {}))
                status, body, ctype = routes[path.decode()]
                writer.write(
                    f"HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\n"
                    f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()

    srv = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    settings = ClientSettings(request_timeout=10.0, idle_timeout=5.0, server_wait=1800.0)
    client = OpenAIModelClient(f"http://127.0.0.1:{port}/v1", settings, retry=FAST)
    try:
        yield client
    finally:
        await client.aclose()
        srv.close()
        await srv.wait_closed()


async def test_a_deterministic_500_to_forced_tool_choice_is_not_retried_for_the_server_wait():
    status, body = recorded("tools_required.txt")
    assert status == 500 and b'"message":""' in body
    seen: list[tuple[str, dict[str, Any]]] = []
    routes = {"/v1/chat/completions": (500, body, "application/json"),
              "/health": (200, b"", "text/plain")}  # fmt: skip
    async with server(routes, seen) as client:
        req = ChatRequest(model="smol", messages=[{"role": "user", "content": "Weather?"}],
                          tools=TOOLS, tool_choice="required")  # fmt: skip
        with pytest.raises(ForcedCallsRefused) as err:
            await client.complete(req)
    assert isinstance(err.value, ConfigurationError), "the run stops when forcing is pinned"
    assert "tool_choice" in str(err.value) and "/health is ok" in str(err.value)
    # the cause is the server's install, not vLLM: what to install, and how to go on meanwhile
    text = str(err.value)
    assert "lm-format-enforcer" in text and "outlines_core" in text and "interegular" in text
    assert "model.tool_calls" in text and "cannot force" not in text
    assert [p for p, _ in seen].count("/v1/chat/completions") == SAME_500_LIMIT


async def test_a_repeated_500_from_a_server_without_health_is_the_answer_too():
    """llama-cpp-python has no /health (404) and answers HTTP 500 to a request it cannot take:
    the same 500 three times from a live server is not waited out for server_wait."""
    body = b'{"error": {"message": "content: Input should be a valid string"}}'
    seen: list[tuple[str, dict[str, Any]]] = []
    routes = {"/v1/chat/completions": (500, body, "application/json"),
              "/health": (404, b"Not Found", "text/plain")}  # fmt: skip
    async with server(routes, seen) as client:
        req = ChatRequest(model="smol", messages=[{"role": "user", "content": "hi"}])
        async with asyncio.timeout(30):  # server_wait is 1800 s: waiting it out fails here
            with pytest.raises(BadRequest, match="valid string"):
                await client.complete(req)
    assert [p for p, _ in seen].count("/v1/chat/completions") == SAME_500_LIMIT


def test_the_auto_tool_choice_refusal_names_the_spec_fields_and_both_flags():
    status, body = recorded("tools_auto_no_flags.txt")
    message = json.loads(body)["error"]["message"]
    err = map_vllm_error(status, message)
    assert isinstance(err, ConfigurationError)
    text = str(err)
    assert "--enable-auto-tool-choice" in text and "--tool-call-parser" in text
    assert "enable_auto_tool_choice" in text and "tool_call_parser" in text
    assert "not extra_args" in text


@pytest.mark.parametrize(("version", "sent"), [("0.26.0", False), ("0.33.0", True)])
async def test_a_release_that_ignores_stream_interval_is_not_sent_it(version, sent, caplog):
    _, version_body = recorded("version.txt")
    version_body = version_body.replace(b"0.26.0", version.encode())
    seen: list[tuple[str, dict[str, Any]]] = []
    routes = {"/version": (200, version_body, "application/json"),
              "/v1/chat/completions": (200, stream("hi"), "text/event-stream")}  # fmt: skip
    async with server(routes, seen) as client:
        req = ChatRequest(model="smol", messages=[{"role": "user", "content": "hi"}],
                          extra_body={"stream_interval": 8})  # fmt: skip
        with caplog.at_level(logging.WARNING, logger="pilot.model.client"):
            for _ in range(2):
                assert (await client.complete(req)).content == "hi"
    bodies = [b for p, b in seen if p == "/v1/chat/completions"]
    assert all(("stream_interval" in b) is sent for b in bodies) and len(bodies) == 2
    assert [p for p, _ in seen].count("/version") == 1
    warned = [r for r in caplog.records if "ignores a request's stream_interval" in r.message]
    assert len(warned) == (0 if sent else 1)
