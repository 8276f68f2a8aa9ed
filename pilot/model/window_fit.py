"""Whether the served window holds what the workflow asks of every request, before its first.

A window too small for the system prompt, the tool schemas, a phase's prompt and the output the
workflow wants (``model.max_tokens``) cannot be helped by compaction: those parts are never
compacted. Found mid-run, it ends a run hours in; found here it is refused at the start with
the fix for the server that gave the window (llama-server's ``-c``/``--parallel``, vLLM's
``--max-model-len``, Ollama's ``num_ctx``...).

The prompt is the server's own count where it counts (vLLM's ``/tokenize``, llama-server's
``input_tokens``); elsewhere a low estimate (UTF-8 bytes / 4.5), so a refusal is never
an overestimate's mistake.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pilot.errors import ConfigurationError
from pilot.model.servers import MESSAGE_OVERHEAD
from pilot.model.types import ModelClient, ServedModel

__all__ = ["Schemas", "WindowNeed", "check_window_fits", "window_need"]

LOW_BYTES_PER_TOKEN = 4.5
"""Without the server's count a prompt is estimated low (BPE tokenizers run 3-4.5 bytes a
token on code and English), so only a window surely too small is refused."""
LLAMA_CPP_CTX_STEP = 256
"""llama-server rounds a slot's window (``-c / --parallel``) up to a multiple of this."""
MIN_OUTPUT = 256
"""The least ``model.max_tokens`` the fix suggests lowering to (a file edit needs a few hundred)."""

Schemas = Callable[[list[str]], list[dict[str, Any]]]


@dataclass(frozen=True)
class WindowNeed:
    """The largest fixed prompt of the workflow's phases, the output it wants and the margin."""

    prompt: int
    output: int
    margin: int
    phase: str
    counted: bool
    """The prompt is the server's count (else a low estimate)."""

    @property
    def total(self) -> int:
        return self.prompt + self.output + self.margin


def _bytes(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "replace"))
    if isinstance(value, list):
        return sum(_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_bytes(v) for v in value.values())
    return 0


def _low_estimate(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    total = _bytes(messages) + _bytes(tools or [])
    return math.floor(total / LOW_BYTES_PER_TOKEN) + MESSAGE_OVERHEAD * len(messages)


async def window_need(
    client: ModelClient,
    model: str,
    system: str,
    phases: Sequence[tuple[str, str, list[str]]],
    schemas: Schemas,
    max_tokens: int,
    margin: int,
) -> WindowNeed:
    """What the window must hold: for each phase (name, prompt, tool names) its first request
    (the system prompt, its prompt, its tools' schemas) counted, the largest kept, plus
    ``max_tokens`` and ``margin``."""
    best: WindowNeed | None = None
    for name, prompt, tool_names in phases:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        tools = schemas(tool_names) or None
        try:
            count = await client.count_tokens(model, messages, tools)
        except Exception:  # a server that cannot count this is estimated, never refused for it
            count = None
        need = WindowNeed(
            prompt=count if count is not None else _low_estimate(messages, tools),
            output=max_tokens,
            margin=margin,
            phase=name,
            counted=count is not None,
        )
        if best is None or need.total > best.total:
            best = need
    return best or WindowNeed(0, max_tokens, margin, "", counted=False)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def _server_fix(served: ServedModel, window: int, need: int) -> str:
    """How to give the server a larger window, in its own flags."""
    if served.window_source == "setting model.context_window":
        return f"raise model.context_window to at least {need} (and the server's window with it)"
    server = served.server
    if server == "llama.cpp":
        slots = served.slots or 1
        per_slot = _round_up(need, LLAMA_CPP_CTX_STEP)
        if slots == 1:
            return f"restart llama-server with -c {per_slot}"
        fix = (
            f"restart llama-server with -c {per_slot * slots} --parallel {slots} (each slot "
            "gets -c / --parallel, unless --kv-unified)"
        )
        fewer = (window * slots) // per_slot
        if 1 <= fewer < slots:
            fix += f", or keep -c {window * slots} with --parallel {fewer}"
        return fix
    if server == "vLLM":
        return f"serve it with --max-model-len {need} or more (brain spec max_model_len)"
    if server == "SGLang":
        return f"serve it with --context-length {need} or more"
    if server == "Ollama":
        return (
            f"give the model num_ctx {need} or more (OLLAMA_CONTEXT_LENGTH={need} for the "
            f"server, or PARAMETER num_ctx {need} in its Modelfile)"
        )
    if server == "LM Studio":
        return f"load the model with a context length of {need} or more (lms load --context-length)"
    if server == "LiteLLM":
        return (
            f"give the model a window of {need} or more behind the proxy and set its "
            f"model_info.max_input_tokens to it"
        )
    return f"give the server a context window of {need} or more"


def check_window_fits(served: ServedModel, window: int, need: WindowNeed, endpoint: str) -> None:
    """Raise :class:`ConfigurationError` naming the fix when ``window`` cannot hold ``need``."""
    if need.total <= window:
        return
    how = "counted by the server" if need.counted else "at least, estimated"
    source = served.window_source or "/v1/models max_model_len"
    slot = f" per slot ({served.slots} slots)" if served.server == "llama.cpp" else ""
    fixes = [_server_fix(served, window, need.total)]
    room = window - need.prompt - need.margin
    if room >= MIN_OUTPUT:
        fixes.append(f"lower model.max_tokens to {room}")
    raise ConfigurationError(
        f"the model server at {endpoint} gives {window} tokens{slot} (from {source}), and "
        f"this workflow needs {need.total}: {need.prompt} for the system prompt, the tools and "
        f"the prompt of phase '{need.phase}' ({how}), {need.output} for model.max_tokens and "
        f"{need.margin} of margin. Fix: {'; or '.join(fixes)}."
    )
