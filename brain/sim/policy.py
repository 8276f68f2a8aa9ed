"""Where the sim's answers come from: a Policy maps a chat request to one assistant turn.

A policy must be deterministic: the same messages give the same turn in any process, so a
resumed run gets the answers it would have got. Policies see only the request; the server
then applies tool_choice, token limits, faults and timing to the turn (``shaping.py``).

Built-in policies (``brain.sim.policies.load_policy``):

* ``demo``: the rule-based agent that refactors the shipped sample repository
  (``brain.sim.demo``);
* ``script:PATH``: a YAML script of turns keyed on the conversation (``script_policy``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, model_validator

from brain.sim.tokenizer import content_text


class SimMessage(BaseModel):
    """One chat message as the OpenAI API sends it (unknown fields kept, like vLLM)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[Any] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning: str | None = None

    @property
    def text(self) -> str:
        return content_text(self.content)


class SimChatRequest(BaseModel):
    """The fields of /v1/chat/completions the sim honours; the rest are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[SimMessage]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = True
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    n: int | None = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = None
    stream_interval: int | None = None
    """Tokens per streamed chunk for this request (vLLM >= 0.33; clamped up to the server's)."""
    response_format: dict[str, Any] | None = None
    """``text``, ``json_object`` or ``json_schema`` (``{"json_schema": {"name", "schema"}}``)."""
    structured_outputs: dict[str, Any] | None = None
    """vLLM's own constraint field (``json``, ``json_object``, ``choice``, ``regex``, ...)."""

    @model_validator(mode="before")
    @classmethod
    def _vllm_before_validators(cls, data: Any) -> Any:
        """vLLM's own before-validators of the chat request (``validation.check_raw_chat``)."""
        from brain.sim.validation import check_raw_chat

        return check_raw_chat(data) if isinstance(data, dict) else data

    @property
    def output_limit(self) -> int | None:
        """What the request asks for (``max_completion_tokens`` wins, as in vLLM)."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens

    def message_dicts(self) -> list[dict[str, Any]]:
        return [m.model_dump(exclude_none=True) for m in self.messages]

    def tool_parameters(self, name: str) -> object:
        """The JSON schema of the offered tool called ``name`` (None when there is none)."""
        for tool in self.tools or []:
            function = tool.get("function") or {}
            if isinstance(function, dict) and function.get("name") == name:
                return function.get("parameters")
        return None

    def tool_names(self) -> list[str]:
        names = []
        for tool in self.tools or []:
            function = tool.get("function") or {}
            if isinstance(function, dict) and function.get("name"):
                names.append(str(function["name"]))
        return names


@dataclass(frozen=True)
class SimTurn:
    """One assistant turn as a policy decides it, before limits and faults are applied.

    ``tool_calls`` holds (name, arguments JSON text) pairs; the text is sent verbatim, so a
    policy can send broken JSON on purpose. ``forced_calls`` are what the model writes when the
    request forces a call (``tool_choice`` required or named), where it would answer otherwise
    unforced (e.g. text without a call); empty: ``tool_calls`` serve both. ``finish_reason``
    None means "derive it" ("tool_calls" when there are calls, else "stop"). ``fault`` names a
    per-turn fault kind (see ``config.FaultKind``), applied as if a fault rule had fired for
    this request.
    """

    content: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    forced_calls: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    finish_reason: str | None = None
    fault: str | None = None


@runtime_checkable
class Policy(Protocol):
    """Anything with ``respond(request) -> SimTurn`` can answer for the sim."""

    def respond(self, request: SimChatRequest) -> SimTurn: ...


def assistant_count(messages: Sequence[SimMessage]) -> int:
    """How many assistant messages the conversation already holds (the turn number)."""
    return sum(1 for m in messages if m.role == "assistant")


def last_input_text(messages: Sequence[SimMessage]) -> str:
    """Text of the last user or tool message (what the model is answering)."""
    for message in reversed(messages):
        if message.role in ("user", "tool"):
            return message.text
    return ""


_PHASE = re.compile(r"^\s*Phase\s+(\d+)\s*/\s*(\d+)\s*:\s*(\S+)", re.IGNORECASE)


def parse_phase_line(text: str) -> tuple[int, int, str] | None:
    """(index, total, name) from a pilot phase prompt that starts ``Phase <i>/<n>: <name>``."""
    match = _PHASE.match(text)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), match.group(3).strip().lower()
