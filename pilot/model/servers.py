"""What each OpenAI-compatible local server tells about itself, beyond the OpenAI API.

vLLM and SGLang put the served window in ``GET /v1/models`` (``max_model_len``) and send usage
in the stream when ``stream_options.include_usage`` asks for it. The others do not, each in
its own way (checked in their sources or, for LM Studio, its documentation):

- llama.cpp's ``llama-server`` (``tools/server``): the window is one slot's,
  ``default_generation_settings.n_ctx`` of ``GET /props`` (``n_ctx / --parallel`` rounded
  to 256 without ``--kv-unified``), beside ``total_slots``; current builds put the same in
  ``/v1/models``' ``meta.n_ctx``, older ones only the training length there. It counts a chat
  request's prompt at ``POST /v1/chat/completions/input_tokens``; its ``/tokenize`` takes
  text, not messages.
- llama-cpp-python's ``llama_cpp.server``: no window anywhere (a context error names it), no
  ``/health``, no usage in streamed answers, HTTP 500 on an assistant message whose
  ``content`` is null (it validates against a string).
- Ollama: the loaded runner's window is ``context_length`` in ``GET /api/ps``; else a
  ``num_ctx`` in ``POST /api/show``'s ``parameters``. Its ``model_info`` context length is the
  model's training length, not what the runner truncates at, so it is not taken.
- LM Studio: the loaded instance's window is ``loaded_context_length`` in ``GET
  /api/v0/models`` (0.3.6+), or ``loaded_instances[].config.context_length`` in ``GET
  /api/v1/models`` (0.4+); ``max_context_length`` is the model's own maximum, not taken.
- A LiteLLM proxy: ``max_input_tokens`` in its ``/v1/models`` cards (1.108.7, seen here),
  else ``model_info.max_input_tokens`` of the model's deployments in ``GET /v1/model/info``
  (its own configuration or cost map), the smallest when several.

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
    "LLAMA_CPP_COUNT_PATH",
    "ContextWindow",
    "card_window",
    "counts_text_only",
    "estimate_completion_tokens",
    "estimate_prompt_tokens",
    "probe_context_window",
    "server_root",
    "server_up",
    "token_count",
]

PROBE_TIMEOUT_S = 5.0
"""Seconds a probe (``/health``, ``/version``, ``/metrics``, a window probe) may take."""
BYTES_PER_TOKEN = 3.0
"""Estimates divide UTF-8 bytes by this: above the true count for code and English text
(about 3.5-4.5 bytes a token for BPE tokenizers), so token limits fire early, never late."""
MESSAGE_OVERHEAD = 8
"""Tokens the chat template adds around each message, in estimates."""
LLAMA_CPP_COUNT_PATH = "/v1/chat/completions/input_tokens"
"""Where llama-server counts a chat request's prompt, template and tools included (builds
from mid-2026; an older one answers 404 and its prompts are estimated)."""


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
    """A served context window, where it was read (for the run's record), which server said
    so (for the fix a too-small window's refusal names) and, for llama-server, its slots:
    the window is one slot's, the server's ``-c`` split ``slots`` ways."""

    tokens: int | None
    source: str
    server: str | None = None
    slots: int | None = None


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


def _llama_cpp_props(body: Any) -> tuple[int, int | None] | None:
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    found = _positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    found = found or _positive_int(body.get("n_ctx"))
    return (found, _positive_int(body.get("total_slots"))) if found else None


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


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _lm_studio_v0(body: Any, model: str) -> int | None:
    if not isinstance(body, dict):
        return None
    for item in _dicts(body.get("data")):
        if item.get("id") == model and item.get("state", "loaded") == "loaded":
            return _positive_int(item.get("loaded_context_length"))
    return None


def _lm_studio_v1(body: Any, model: str) -> int | None:
    if not isinstance(body, dict):
        return None
    for item in _dicts(body.get("models")):
        for instance in _dicts(item.get("loaded_instances")):
            if model in (item.get("key"), instance.get("id")):
                config = instance.get("config")
                if isinstance(config, dict):
                    return _positive_int(config.get("context_length"))
    return None


def _litellm_model_info(body: Any, model: str) -> int | None:
    if not isinstance(body, dict):
        return None
    found = [
        _positive_int(info.get("max_input_tokens"))
        for item in _dicts(body.get("data"))
        if item.get("model_name") == model and isinstance(info := item.get("model_info"), dict)
    ]
    windows = [w for w in found if w]
    return min(windows) if windows else None  # a request may reach any deployment


async def probe_context_window(
    client: httpx.AsyncClient, root: str, model: str, api_key: str | None = None
) -> ContextWindow:
    """Ask a server that did not say in ``/v1/models`` for its window, the ways each knows.

    ``root`` is the server's root URL (without ``/v1``). Tried in order: llama.cpp's
    ``/props``, Ollama's ``/api/ps`` then ``/api/show``, LM Studio's ``/api/v0/models`` then
    ``/api/v1/models``, LiteLLM's ``/v1/model/info``. ``tokens`` is None when none answers.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def get(path: str) -> Any:
        return await _get_json(client, "GET", f"{root}{path}", headers)

    props = _llama_cpp_props(await get("/props"))
    if props:
        window, slots = props
        where = (
            f"llama.cpp /props n_ctx (one slot of {slots})" if slots else "llama.cpp /props n_ctx"
        )
        return ContextWindow(window, where, "llama.cpp", slots)
    found = _ollama_ps(await get("/api/ps"), model)
    if found:
        return ContextWindow(found, "Ollama /api/ps context_length", "Ollama")
    show = await _get_json(client, "POST", f"{root}/api/show", headers, {"model": model})
    found = _ollama_show(show)
    if found:
        return ContextWindow(found, "Ollama /api/show num_ctx", "Ollama")
    found = _lm_studio_v0(await get("/api/v0/models"), model)
    if found:
        return ContextWindow(found, "LM Studio /api/v0/models loaded_context_length", "LM Studio")
    found = _lm_studio_v1(await get("/api/v1/models"), model)
    if found:
        return ContextWindow(found, "LM Studio /api/v1/models context_length", "LM Studio")
    found = _litellm_model_info(await get("/v1/model/info"), model)
    if found:
        return ContextWindow(found, "LiteLLM /v1/model/info max_input_tokens", "LiteLLM")
    return ContextWindow(None, "not reported by the server")


def card_window(card: dict[str, Any]) -> ContextWindow | None:
    """The window a ``/v1/models`` card states: vLLM's and SGLang's ``max_model_len`` (their
    ``owned_by`` says which), a LiteLLM proxy's ``max_input_tokens``; None when it states
    none (then :func:`probe_context_window` asks the server's own routes)."""
    limit = _positive_int(card.get("max_model_len"))
    if limit:
        server = {"vllm": "vLLM", "sglang": "SGLang"}.get(card.get("owned_by"))  # type: ignore[arg-type]
        return ContextWindow(limit, "", server)
    limit = _positive_int(card.get("max_input_tokens"))
    if limit:
        return ContextWindow(limit, "LiteLLM /v1/models max_input_tokens", "LiteLLM")
    return None


def token_count(body: Any) -> int | None:
    """A prompt's token count from a counting route's answer: vLLM's ``/tokenize``
    (``count``) or llama-server's ``input_tokens``; None for any other answer."""
    if not isinstance(body, dict):
        return None
    for key in ("count", "input_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def counts_text_only(body: Any) -> bool:
    """llama-server's ``/tokenize`` answer to a chat body: ``{"tokens": []}`` (it tokenizes
    a ``content`` text, never messages), so its chat count is asked elsewhere."""
    return isinstance(body, dict) and body.get("tokens") == [] and "count" not in body


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
