"""From a policy's turn to the exact output tokens the server sends, as vLLM would shape them.

Applied in this order: the request's tool options (no tools offered or ``tool_choice: none``
drop calls; ``required`` and a named tool force calls to offered tools, as vLLM's structured
output over the tools' schemas does, with arguments that hold every required property when
the policy gave none; ``parallel_tool_calls: false`` keeps the first), then content faults
(malformed arguments, unknown tool, empty turn, forced ``length``), then the output limit
(the sampling ``max_tokens`` the server settled on, ``validation.output_limit``), which cuts
the token stream, tool-call arguments included, with finish_reason ``length``. A tool call
costs one token for its header (id, name) plus its argument pieces. The finish reason follows
``resolve_finish_reason`` (``serve/utils/tool_calls_utils.py``): ``tool_calls`` when calls were
made and the model stopped on its own, except for a named tool choice, which is ``stop``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from brain.sim.policy import SimChatRequest, SimTurn
from brain.sim.tokenizer import split_pieces

TokenKind = Literal["reasoning", "content", "tool"]
UNKNOWN_TOOL_NAME = "nonexistent_tool"
CONTENT_FAULTS = frozenset({"malformed_arguments", "unknown_tool", "empty_turn", "length"})


@dataclass(frozen=True)
class OutputToken:
    """One generated token: its kind, text, and for tool tokens the call index / header flag."""

    kind: TokenKind
    text: str
    call: int | None = None
    header: bool = False


@dataclass(frozen=True)
class ToolCallOut:
    index: int
    id: str
    name: str


@dataclass
class Emission:
    """What one response carries: the token stream, call identities and the finish reason."""

    tokens: list[OutputToken]
    calls: list[ToolCallOut]
    finish_reason: str
    faults: set[str] = field(default_factory=set)
    stream_finish_reason: str | None = None
    """What a stream's last choice chunk says where the release's stream differs from its
    non-streamed answer (``streamed_finish_reason``); None: ``finish_reason``."""

    def text_of(self, kind: TokenKind) -> str | None:
        parts = [t.text for t in self.tokens if t.kind == kind]
        return "".join(parts) if parts else None

    def emitted_calls(self) -> list[tuple[ToolCallOut, str]]:
        """Calls whose header was emitted, with their (possibly truncated) arguments."""
        out = []
        for call in self.calls:
            if any(t.call == call.index and t.header for t in self.tokens):
                args = "".join(t.text for t in self.tokens if t.call == call.index and not t.header)
                out.append((call, args))
        return out


_PLACEHOLDERS: dict[str, object] = {
    "string": "",
    "integer": 0,
    "number": 0,
    "boolean": False,
    "array": [],
    "object": {},
    "null": None,
}


def schema_arguments(schema: object) -> str:
    """Arguments JSON holding every required property of ``schema`` (a JSON schema object),
    each with the plainest value of its type (its ``enum``'s first, its ``default``)."""
    if not isinstance(schema, dict):
        return "{}"
    properties = schema.get("properties") or {}
    out: dict[str, object] = {}
    for name in schema.get("required") or []:
        prop = properties.get(name) if isinstance(properties, dict) else None
        prop = prop if isinstance(prop, dict) else {}
        if "default" in prop:
            out[name] = prop["default"]
        elif prop.get("enum"):
            out[name] = prop["enum"][0]
        elif prop.get("type") == "object":
            out[name] = json.loads(schema_arguments(prop))
        else:
            kind = prop.get("type")
            kind = kind[0] if isinstance(kind, list) and kind else kind
            out[name] = _PLACEHOLDERS.get(str(kind), "")
    return json.dumps(out, ensure_ascii=False)


def _forced_call(request: SimChatRequest, name: str) -> tuple[str, str]:
    return name, schema_arguments(request.tool_parameters(name))


def _apply_tool_options(
    turn: SimTurn, request: SimChatRequest
) -> tuple[str | None, list[tuple[str, str]]]:
    calls = list(turn.tool_calls)
    content = turn.content
    offered = request.tool_names()
    choice = request.tool_choice
    if not offered or choice == "none":
        if calls and not content:
            names = ", ".join(name for name, _ in calls)
            content = f"(sim) I would call {names}, but no tool may be called here."
        calls = []
    elif choice == "required":
        calls = [c for c in calls if c[0] in offered] or [_forced_call(request, offered[0])]
        content = None  # the output is the calls' JSON, nothing else
    elif isinstance(choice, dict):
        forced = str((choice.get("function") or {}).get("name", ""))
        calls = [c for c in calls if c[0] == forced][:1] or [_forced_call(request, forced)]
        content = None
    if request.parallel_tool_calls is False:
        calls = calls[:1]
    return content, calls


def _apply_content_faults(
    faults: set[str], content: str | None, reasoning: str | None, calls: list[tuple[str, str]]
) -> tuple[str | None, str | None, list[tuple[str, str]]]:
    if "empty_turn" in faults:
        return None, None, []
    if "unknown_tool" in faults:
        calls = [(UNKNOWN_TOOL_NAME, calls[0][1] if calls else "{}"), *calls[1:]]
    if "malformed_arguments" in faults:
        name, args = calls[0] if calls else (UNKNOWN_TOOL_NAME, '{"path": "README.md"}')
        broken = args[: max(1, len(args) // 2)] if len(args) > 2 else '{"'
        calls = [(name, broken), *calls[1:]]
    return content, reasoning, calls


def _call_id(seed: str, index: int) -> str:
    return "chatcmpl-tool-" + hashlib.sha256(f"{seed}:{index}".encode()).hexdigest()[:32]


def shape_turn(
    turn: SimTurn,
    request: SimChatRequest,
    *,
    max_tokens: int,
    faults: Iterable[str] = (),
    id_seed: str = "",
) -> Emission:
    """The tokens to send for ``turn`` under ``request``'s options, the sampling
    ``max_tokens`` and ``faults``."""
    active = {f for f in faults if f in CONTENT_FAULTS}
    if turn.fault in CONTENT_FAULTS:
        active.add(turn.fault)
    content, calls = _apply_tool_options(turn, request)
    content, reasoning, calls = _apply_content_faults(active, content, turn.reasoning, calls)

    tokens: list[OutputToken] = []
    tokens += [OutputToken("reasoning", p) for p in split_pieces(reasoning or "")]
    tokens += [OutputToken("content", p) for p in split_pieces(content or "")]
    outs: list[ToolCallOut] = []
    for index, (name, args) in enumerate(calls):
        outs.append(ToolCallOut(index, _call_id(id_seed, index), name))
        tokens.append(OutputToken("tool", "", index, header=True))
        tokens += [OutputToken("tool", p, index) for p in split_pieces(args)]

    finish = turn.finish_reason or "stop"
    if "length" in active:
        cut = len(tokens) // 2
        if calls:
            header = next(i for i, t in enumerate(tokens) if t.header)
            arg_count = sum(1 for t in tokens if t.call == 0 and not t.header)
            cut = header + 1 + max(1, arg_count // 2) if arg_count > 1 else header + 1
        tokens, finish = tokens[: max(1, cut)], "length"

    if len(tokens) > max_tokens:
        tokens, finish = tokens[: max(0, max_tokens)], "length"
    named = isinstance(request.tool_choice, dict)
    if finish == "stop" and any(t.header for t in tokens) and not named:
        finish = "tool_calls"
    return Emission(tokens=tokens, calls=outs, finish_reason=finish, faults=active)


def streamed_finish_reason(
    emission: Emission, request: SimChatRequest, *, flavour: str, tool_parser: bool
) -> str:
    """The finish_reason of a streamed answer's last choice chunk.

    vLLM 0.26's chat stream (``entrypoints/openai/serving_chat.py``) sends
    ``output.finish_reason if not auto_tools_called else "tool_calls"``, where
    ``auto_tools_called`` is whether the auto tool parser streamed any call: a call cut at
    ``max_tokens`` ends with ``tool_calls``, as on the H200 this round. 0.33 maps the engine's
    reason through ``serve/utils/tool_calls_utils.py`` ``resolve_finish_reason``, which keeps
    ``length`` "so clients can tell a truncated call from a complete one"."""
    auto = tool_parser and bool(request.tool_names()) and request.tool_choice in (None, "auto")
    called = any(t.header for t in emission.tokens)
    if flavour == "0.26" and auto and called:
        return "tool_calls"
    return emission.finish_reason
