"""From a policy's turn to the exact output tokens the server sends, as vLLM would shape them.

Applied in this order: the request's tool options (no tools offered or ``tool_choice: none``
drop calls; ``required`` and a named tool force calls to offered tools, as vLLM's constrained
decoding does: the turn's ``forced_calls`` when it has them, else its calls to the offered (or
named) tools, else a call whose arguments hold every required property; arguments are valid
JSON, re-serialized as the parser does; ``parallel_tool_calls: false`` keeps the first), then
the output format of an unforced answer (``response_format`` json_schema / json_object,
``structured_outputs`` json / json_object / choice: ``constrained_content``), then content
faults (malformed arguments, unknown tool, empty turn, forced ``length``), then the output
limit (the sampling ``max_tokens`` the server settled on, ``validation.output_limit``), which
cuts the token stream, tool-call arguments included, with finish_reason ``length``. A tool call
costs one token for its header (id, name) plus its argument pieces. The finish reason follows
``resolve_finish_reason`` (0.33 ``entrypoints/serve/utils/tool_calls_utils.py``): ``tool_calls``
when calls were made and the model stopped on its own, except for a named tool choice, which
is ``stop``; a cut answer says ``length``. ``message_fields`` reads a non-streamed answer back
as vLLM's parser does (a cut call is no call); ``streamed_finish_reason`` gives 0.26's stream
its own rule.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

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


STRUCTURAL_TAG_PARSERS = frozenset(
    {
        "deepseek_v3",
        "deepseek_v31",
        "deepseek_v32",
        "deepseek_v4",
        "deepseek_v41",
        "glm45",
        "glm47",
        "hermes",
        "hy_v4",
        "kimi_k2",
        "kimi_k3",
        "ling3",
        "llama3_json",
        "llama4_json",
        "longcat",
        "mimo",
        "minimax_m2",
        "openai",
        "plamo3",
        "qwen3_coder",
        "qwen3_json",
        "qwen3_xml",
        "step3p5",
        "step5",
    }
)
"""The ``--tool-call-parser`` names whose class sets ``structural_tag_model`` in vLLM 0.33
(``vllm/tool_parsers/__init__.py``'s registry, each class or its base). With
``VLLM_ENFORCE_STRICT_TOOL_CALLING`` on (the default) ``ToolParser.__init_subclass__``
(``tool_parsers/abstract_tool_parser.py``) sets their ``supports_required_and_named`` to False:
a forced choice is an xgrammar structural tag in the parser's own call format
(``parser/abstract_parser.py`` ``DelegatingParser._apply_structural_tag``), read back by the
parser's auto extraction (``_extract_tool_calls``). The other parsers get
``get_json_schema_from_tools``' JSON schema (``tool_parsers/utils.py``: the named tool's
parameters, or for ``required`` an array of ``{name, parameters}``) from
``ToolParser.adjust_request``, read back as JSON. 0.26 has the same split."""


def forced_choice(request: SimChatRequest) -> Literal["required", "named"] | None:
    """Whether the request forces a call: ``required``, a named tool, or neither."""
    if not request.tool_names():
        return None
    if request.tool_choice == "required":
        return "required"
    return "named" if isinstance(request.tool_choice, dict) else None


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _forced_arguments(request: SimChatRequest, name: str, arguments: str | None) -> str:
    """Arguments as a constrained decoder lets them out: the policy's when they are a JSON
    object (re-serialized as the parsers do, ``json.dumps(..., ensure_ascii=False)``), else
    every required property of the tool's schema."""
    value = _json_object(arguments) if arguments is not None else None
    if value is None:
        return schema_arguments(request.tool_parameters(name))
    return json.dumps(value, ensure_ascii=False)


def _apply_tool_options(
    turn: SimTurn, request: SimChatRequest
) -> tuple[str | None, list[tuple[str, str]]]:
    calls = list(turn.tool_calls)
    content = turn.content
    offered = request.tool_names()
    choice = request.tool_choice
    forced = forced_choice(request)
    if not offered or choice == "none":
        if calls and not content:
            names = ", ".join(name for name, _ in calls)
            content = f"(sim) I would call {names}, but no tool may be called here."
        calls = []
    elif forced is not None:
        function = (choice.get("function") if isinstance(choice, dict) else None) or {}
        wanted = offered if forced == "required" else [str(function.get("name"))]
        candidates = [c for c in (turn.forced_calls or calls) if c[0] in wanted]
        if forced == "named":
            candidates = candidates[:1]
        calls = [(name, _forced_arguments(request, name, args)) for name, args in candidates] or [
            (wanted[0], _forced_arguments(request, wanted[0], None))
        ]
        content = None  # the output is the calls, nothing else
    if request.parallel_tool_calls is False:
        calls = calls[:1]
    return content, calls


def output_constraint(request: SimChatRequest) -> tuple[str, Any] | None:
    """The output format an unforced answer is held to: ``("json", schema)``,
    ``("json_object", None)`` or ``("choice", [...])`` (from ``structured_outputs``, which
    ``response_format`` overrides: ``generate/base/protocol.py``
    ``structured_outputs_from_response_format``); None: free text (``regex`` and ``grammar``
    constraints are not modelled: the policy's text goes out as it is)."""
    rf = request.response_format if isinstance(request.response_format, dict) else None
    if rf is not None and rf.get("type") == "json_object":
        return "json_object", None
    if rf is not None and rf.get("type") == "json_schema":
        spec = rf.get("json_schema") if isinstance(rf.get("json_schema"), dict) else {}
        return "json", spec.get("schema")
    so = request.structured_outputs if isinstance(request.structured_outputs, dict) else None
    if so is None:
        return None
    if so.get("json") is not None:
        schema = so["json"]
        if isinstance(schema, str):
            schema = _json_object(schema)
        return "json", schema
    if so.get("json_object"):
        return "json_object", None
    if so.get("choice"):
        return "choice", list(so["choice"])
    return None


def constrained_content(content: str | None, constraint: tuple[str, Any]) -> str:
    """What a model held to ``constraint`` writes: the policy's text when it already fits
    (JSON for a schema, a JSON object for json_object, one of the choices), else the plainest
    text that does (every required property of the schema, ``{}``, the first choice)."""
    kind, spec = constraint
    text = content or ""
    if kind == "choice":
        return text if text in spec else str(spec[0])
    if kind == "json_object":
        return text if _json_object(text) is not None else "{}"
    try:
        json.loads(text)
        return text
    except ValueError:
        return schema_arguments(spec)


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
    constraint = output_constraint(request) if forced_choice(request) is None else None
    if constraint is not None and not calls:
        content = constrained_content(content, constraint)
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


def hermes_markup(name: str, arguments: str, *, whole: bool) -> str:
    """A call as the model writes it in the hermes format: the first of the two tag forms of
    0.33's ``tool_parsers/structural_tag_registry.py`` ``_hermes_tool_tags`` (Qwen's chat
    template writes it too); the sim writes every parser's calls so."""
    text = (
        f'<tool_call>\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {arguments}'
    )
    return text + "}\n</tool_call>" if whole else text


def message_fields(
    emission: Emission, request: SimChatRequest, *, tool_parser: str | None
) -> tuple[str | None, list[tuple[ToolCallOut, str]], str]:
    """(content, calls, finish_reason) of a non-streamed answer, as vLLM's parser reads the
    whole output.

    A call whose arguments are not a JSON object (cut at ``max_tokens``, or written broken) is
    no call: the hermes-style parsers (auto, and forced on a structural-tag parser) fail their
    ``json.loads`` and return the whole output as content (0.33 ``tool_parsers/
    hermes_tool_parser.py`` ``Hermes2ProToolParser.extract_tool_calls``;
    ``parser/abstract_parser.py`` ``DelegatingParser._extract_tool_calls`` passes it on); on the
    JSON-schema path ``required``'s ``TypeAdapter(list[FunctionDefinition])`` fails and gives no
    call, while a named tool's arguments are the output as it stands. The finish reason is then
    ``resolve_finish_reason``'s for a message without calls (the engine's ``stop`` or
    ``length``). A forced answer's content is ``""``, never null
    (``chat_completion/message_assembly.py`` ``assemble_chat_message_fields``)."""
    content = emission.text_of("content")
    calls = emission.emitted_calls()
    finish = emission.finish_reason
    forced = forced_choice(request)
    if any(_json_object(args) is None for _, args in calls):
        if forced is not None and tool_parser not in STRUCTURAL_TAG_PARSERS:
            if forced == "required":
                calls = []
        else:
            # the forced structural tag puts calls side by side (separator ""); unforced, the
            # model writes a newline between them
            marks = ("" if forced else "\n").join(
                hermes_markup(call.name, args, whole=_json_object(args) is not None)
                for call, args in calls
            )
            content = (content or "") + marks
            calls = []
        if not calls and finish == "tool_calls":
            finish = "stop"
    if forced is not None:
        content = content or ""
    return content, calls, finish


def streamed_finish_reason(
    emission: Emission, request: SimChatRequest, *, flavour: str, tool_parser: bool
) -> str:
    """The finish_reason of a streamed answer's last choice chunk.

    vLLM 0.26's chat stream (``entrypoints/openai/chat_completion/serving.py``
    ``chat_completion_stream_generator``) sends ``"tool_calls"`` whenever the parser streamed a
    call (``tools_streamed``) and the choice names no tool, whatever the engine said: a call cut
    at ``max_tokens`` under ``auto`` or ``required`` ends with ``tool_calls``, as on the H200
    this round; a named tool keeps the engine's reason. 0.33's ``ChatStreamProcessor.step``
    (``chat_completion/stream_processor.py``) maps it through ``resolve_finish_reason``, which
    keeps ``length`` "so clients can tell a truncated call from a complete one"."""
    auto = tool_parser and bool(request.tool_names()) and request.tool_choice in (None, "auto")
    called = any(t.header for t in emission.tokens)
    if flavour == "0.26" and called and (auto or forced_choice(request) == "required"):
        return "tool_calls"
    return emission.finish_reason
