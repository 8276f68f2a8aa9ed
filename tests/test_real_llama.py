"""Against a real llama-cpp-python server with a real model (optional: skipped, with the
reason, when none answers). Start one as ../shared/realmodel/README.md says, then:

    MARATHON_REAL_LLAMA_URL=http://127.0.0.1:8091/v1 \
        .venv/bin/pytest -m slow tests/test_real_llama.py

Checks what the loopback flavour stands in for: the window is reported nowhere, streams carry
no usage, and the pilot's estimate of a prompt is never below the server's own count (which
it gives in a non-streamed answer), and within 3x of it for plain messages.
"""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest

from pilot.model.client import OpenAIModelClient
from pilot.model.servers import estimate_prompt_tokens
from pilot.model.settings import ClientSettings
from pilot.model.types import ChatRequest
from tools.registry import default_registry

URL = os.environ.get("MARATHON_REAL_LLAMA_URL", "http://127.0.0.1:8091/v1")

pytestmark = pytest.mark.slow


def _server_or_skip() -> str:
    try:
        models = httpx.get(f"{URL}/models", timeout=httpx.Timeout(600, connect=3)).json()
    except (httpx.HTTPError, ValueError) as exc:
        pytest.skip(
            f"no llama-cpp-python server at {URL} ({type(exc).__name__}); see the docstring"
        )
    return models["data"][0]["id"]


MESSAGES = [
    {"role": "system", "content": "You are a careful engineer. Call tools with JSON."},
    {"role": "user", "content": "List the files of the repository, then read setup.py."},
]


def test_window_unknown_and_stream_usage_missing_and_estimate_bounds_the_real_count() -> None:
    model = _server_or_skip()
    tools = default_registry().openai_tools(["read_file", "list_dir", "finish"])

    async def go() -> tuple[list, object]:
        client = OpenAIModelClient(
            URL, ClientSettings(request_timeout=600, idle_timeout=600, server_wait=5)
        )
        try:
            served = await client.list_models()
            response = await client.complete(
                ChatRequest(model=model, messages=MESSAGES, tools=tools, max_tokens=8)
            )
        finally:
            await client.aclose()
        return served, response

    served, response = asyncio.run(go())
    assert served[0].max_model_len is None
    assert served[0].window_source == "not reported by the server"
    assert response.usage is None, "llama-cpp-python streams no usage"
    real = _server_prompt_tokens(model, tools)
    estimate = estimate_prompt_tokens(MESSAGES, tools)
    # Generous by design (limits fire early, never late): never below the server's count,
    # even where the chat template drops the tools (SmolLM2's has no tool section).
    assert real <= estimate, (real, estimate)
    bare = _server_prompt_tokens(model, None)
    assert bare <= estimate_prompt_tokens(MESSAGES, None) <= 3 * bare


def _server_prompt_tokens(model: str, tools: list | None) -> int:
    body: dict = {"model": model, "messages": MESSAGES, "max_tokens": 1}
    if tools:
        body["tools"] = tools
    answer = httpx.post(f"{URL}/chat/completions", json=body, timeout=600).json()
    return int(answer["usage"]["prompt_tokens"])
