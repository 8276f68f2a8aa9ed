"""What each OpenAI-compatible local server tells about itself, beyond the OpenAI API.

vLLM and SGLang put the served window in ``GET /v1/models`` (``max_model_len``) and send usage
in the stream when ``stream_options.include_usage`` asks for it. The others do not, each in
its own way (checked in their sources):

- llama.cpp's ``llama-server``: the window is ``default_generation_settings.n_ctx`` of
  ``GET /props``; ``/v1/models`` only has the training length in ``meta``.
- llama-cpp-python's ``llama_cpp.server``: no window anywhere (a context error names it), no
  ``/health``, no usage in streamed answers, HTTP 500 on an assistant message whose
  ``content`` is null (it validates against a string).
- Ollama: the loaded runner's window is ``context_length`` in ``GET /api/ps``; else a
  ``num_ctx`` in ``POST /api/show``'s ``parameters``. Its ``model_info`` context length is the
  model's training length, not what the runner truncates at, so it is not taken.

Nothing here raises on an answer it does not understand: a probe that fails says "unknown".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from brain.urls import server_root

if TYPE_CHECKING:  # the loop imports the estimates; only a probe needs the HTTP stack
    import httpx

__all__ = [
    "ContextWindow",
    "estimate_completion_tokens",
    "estimate_prompt_tokens",
    "probe_context_window",
    "server_root",
    "server_up",
]

PROBE_TIMEOUT_S = 5.0
"""Seconds a probe (``/health``, ``/version``, ``/metrics``, a window probe) may take."""
BYTES_PER_TOKEN = 3.0
"""Estimates divide UTF-8 bytes by this: above the true count for code and English text
(about 3.5-4.5 bytes a token for BPE tokenizers), so token limits fire early, never late."""
MESSAGE_OVERHEAD = 8
"""Tokens the chat template adds around each message, in estimates."""


async def server_up(client: Any, base_url: str) -> bool:
    """Whether the server is up: its ``/health`` answers 200, or 404 where it has none
    (llama-cpp-python, Ollama: an HTTP answer at all is a live server). Never raises: a probe
    that fails, however, says "down". ``client`` is an httpx or httpx2 ``AsyncClient``."""
    try:
        response = await client.get(f"{server_root(base_url)}/health", timeout=PROBE_TIMEOUT_S)
    except Exception:
        return False
    return response.status_code in (200, 404)


@dataclass(frozen=True)
class ContextWindow:
    """A served context window and where it was read (for the run's record)."""

    tokens: int | None
    source: str


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, str) and value.isdigit() and int(value) > 0:
        return int(value)
    return None


async def _get_json(
    client: httpx.AsyncClient, method: str, url: str, headers: dict[str, str], body: Any = None
) -> Any:
    import httpx

    try:
        response = await client.request(
            method, url, json=body, headers=headers, timeout=PROBE_TIMEOUT_S
        )
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _llama_cpp_props(body: Any) -> int | None:
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    if isinstance(settings, dict):
        found = _positive_int(settings.get("n_ctx"))
        if found:
            return found
    return _positive_int(body.get("n_ctx"))


def _ollama_ps(body: Any, model: str) -> int | None:
    if not isinstance(body, dict) or not isinstance(body.get("models"), list):
        return None
    for item in body["models"]:
        if isinstance(item, dict) and model in (item.get("name"), item.get("model")):
            return _positive_int(item.get("context_length"))
    return None


_NUM_CTX_RE = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def _ollama_show(body: Any) -> int | None:
    if not isinstance(body, dict) or not isinstance(body.get("parameters"), str):
        return None
    m = _NUM_CTX_RE.search(body["parameters"])
    return int(m.group(1)) if m else None


async def probe_context_window(
    client: httpx.AsyncClient, root: str, model: str, api_key: str | None = None
) -> ContextWindow:
    """Ask a server that did not say in ``/v1/models`` for its window, the ways each knows.

    ``root`` is the server's root URL (without ``/v1``). Tried in order: llama.cpp's
    ``/props``, Ollama's ``/api/ps`` then ``/api/show``. ``tokens`` is None when none answers.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    found = _llama_cpp_props(await _get_json(client, "GET", f"{root}/props", headers))
    if found:
        return ContextWindow(found, "llama.cpp /props n_ctx")
    found = _ollama_ps(await _get_json(client, "GET", f"{root}/api/ps", headers), model)
    if found:
        return ContextWindow(found, "Ollama /api/ps context_length")
    show = await _get_json(client, "POST", f"{root}/api/show", headers, {"model": model})
    found = _ollama_show(show)
    if found:
        return ContextWindow(found, "Ollama /api/show num_ctx")
    return ContextWindow(None, "not reported by the server")


def _text_bytes(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "replace"))
    if isinstance(value, list):
        return sum(_text_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_text_bytes(v) for k, v in value.items() if k != "image_url")
    return 0


def estimate_prompt_tokens(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> int:
    """A generous estimate of a prompt's tokens, for servers that send no usage."""
    total = _text_bytes(messages) + _text_bytes(tools or [])
    return math.ceil(total / BYTES_PER_TOKEN) + MESSAGE_OVERHEAD * len(messages)


def estimate_completion_tokens(content: str | None, calls: list[tuple[str, str]]) -> int:
    """A generous estimate of an answer's tokens (its text and its calls' names and
    arguments), for servers that send no usage; at least 1."""
    total = _text_bytes(content or "") + sum(_text_bytes(n) + _text_bytes(a) for n, a in calls)
    return max(1, math.ceil(total / BYTES_PER_TOKEN))
