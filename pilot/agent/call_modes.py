"""How a model's calls travel, chosen per model from what the run measures (``model.tool_calls``).

Three ways to ask for calls: ``native`` (tools sent with ``tool_choice: auto``, the server's
parser reads the calls), ``forced`` (the server constrains the answer to the phase's tools:
``required``, or the named form when one tool is allowed) and ``text`` (no tools sent; the pilot
states the call syntax in the system prompt and reads the calls from the text). And two ways
for code to travel: inside the JSON arguments (``json``) or as a fenced block of the answer's
text while the call names the target (``block``). On the GPU (vLLM 0.26, Qwen2.5-Coder) forced
calls were always schema-valid but 40% of the code written inside JSON strings did not parse
(1 in 465 as Python blocks): the way code travels matters more than how calls are parsed.

A workflow may pin the call mode; ``auto`` starts native and moves on measures (see
:func:`due_choices`). Every choice is a ``call_mode_chosen`` event and the counts behind it are
folded from the answers (``assistant_message.call_mode``), so a resume keeps both. The book is
plain JSON data in the state (``RunState.call_book``), changed only by :func:`fold`.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pilot import events as ev

CODE_ARGUMENTS: dict[str, str] = {
    "replace_definition": "code",
    "write_file": "content",
    "edit_file": "new",
}
"""The code-carrying tools and the argument that carries their code."""

NEEDED_WITH_CODE: dict[str, tuple[str, ...]] = {
    "write_file": ("path",),
    "edit_file": ("path", "old"),
}
"""The arguments a code-carrying call must name for a block to be taken as its code."""

PYTHON_CHECKED = ("replace_definition", "write_file")
"""Code-carrying tools whose code is checked as Python (``write_file`` for a ``.py`` path):
``edit_file``'s ``new`` is a fragment, which need not parse alone."""

TEXT_SWITCH_AFTER = 3
"""Answers (to a native request) whose calls came only as text, with no native call ever,
before ``auto`` moves the model to text mode."""

CODE_SWITCH_AFTER = 2
"""Code arguments inside JSON that did not parse before the model's code travels as blocks."""

MODES = ("native", "forced", "text")

FOLDED = frozenset(
    {"call_mode_chosen", "code_asked", "assistant_message", "phase_finished", "attempt_restarted"}
)
"""The event types :func:`fold` reads."""

_FENCE_RE = re.compile(r"^\s*```[\w+-]*[^\S\n]*\n(.*?)\n?\s*```\s*$", re.DOTALL)


@dataclass(frozen=True)
class Ask:
    """How one request asks for calls."""

    mode: str
    """``native``, ``forced``, ``text`` or ``code`` (the code a call lacks, as a block)."""
    tool_choice: str | dict[str, Any] | None
    send_tools: bool
    syntax: bool = False
    """The pilot states the call syntax in the system prompt (text mode)."""
    code_blocks: bool = False
    """The model's code travels as fenced blocks: the code arguments are optional in the
    schemas sent, and the system prompt says so."""
    text_history: bool = False
    """The history goes back as text, native calls too (the model is in text mode)."""


# -- the book (folded) --------------------------------------------------------------------


def new_book() -> dict[str, Any]:
    return {"models": {}, "code_asked": None}


def entry(book: dict[str, Any], model: str) -> dict[str, Any]:
    """The model's choices and counts (created on first use)."""
    models = book.setdefault("models", {})
    found = models.get(model)
    if found is None:
        found = models[model] = {
            "calls": None,
            "code": "json",
            "forcing": "on",
            "by": {},
            "counts": {},
            "last": None,
        }
    return found


def fold(book: dict[str, Any], event: ev.Event, model: str | None) -> None:
    """Fold one event into the book (called by ``RunState.apply`` for the events it cares
    about)."""
    match event:
        case ev.CallModeChosen():
            item = entry(book, event.model)
            item[event.kind] = event.mode
            item["by"][event.kind] = event.by
        case ev.PhaseFinished() | ev.AttemptRestarted():
            book["code_asked"] = None  # asked in a try or phase that is over
        case ev.CodeAsked():
            book["code_asked"] = {
                "call_id": event.call_id,
                "name": event.name,
                "arguments": event.arguments,
                "argument": event.argument,
            }
        case ev.AssistantMessage():
            book["code_asked"] = None
            if event.call_mode is None:
                return  # a cut answer, or one recorded before modes were kept
            item = entry(book, model or "?")
            counts = item["counts"]
            _add(counts, event.call_mode)
            _add(counts, "code_json", event.code_json)
            _add(counts, "code_json_unparsed", event.code_json_unparsed)
            _add(counts, "code_block", event.code_block)
            refused = sum(1 for call in event.tool_calls if call.error is not None)
            _add(counts, "refused", refused)
            if event.call_mode in ("native", "forced") and event.repairs:
                _add(counts, f"{event.call_mode}_repaired")  # the parser's calls needed repair
            if event.asked == "native" and event.call_mode == "text":
                _add(counts, "text_for_native")
            item["last"] = event.call_mode


def _add(counts: dict[str, int], key: str, value: int = 1) -> None:
    if value:
        counts[key] = counts.get(key, 0) + value


# -- the policy ---------------------------------------------------------------------------


def due_choices(book: dict[str, Any], model: str, setting: str) -> list[ev.CallModeChosen]:
    """The choices due before the next request of ``model``: the first (the workflow's pin, or
    native), and the switches ``auto`` makes on what it measured."""
    item = book.get("models", {}).get(model)
    if item is None or item.get("calls") is None:
        if setting in MODES:
            pinned = [
                ev.CallModeChosen(
                    model=model,
                    kind="calls",
                    mode=setting,
                    by="workflow",
                    reason=f"model.tool_calls: {setting}",
                )
            ]
            if setting == "text":
                pinned.append(_text_code(model, "workflow", {}))
            return pinned
        return [
            ev.CallModeChosen(
                model=model,
                kind="calls",
                mode="native",
                reason="start: tools sent with tool_choice auto, the server's parser reads "
                "the calls; the answer after one with no call is forced",
            )
        ]
    counts = dict(item.get("counts", {}))
    out: list[ev.CallModeChosen] = []
    if (
        setting == "auto"
        and item["calls"] == "native"
        and counts.get("text_for_native", 0) >= TEXT_SWITCH_AFTER
        and not counts.get("native")
    ):
        out.append(
            ev.CallModeChosen(
                model=model,
                kind="calls",
                mode="text",
                reason=f"{counts['text_for_native']} answers to native requests gave their "
                "calls only as text and none came through the server's parser: the pilot "
                "states the call syntax and reads the text",
                counts=counts,
            )
        )
        if item.get("code") == "json":
            out.append(_text_code(model, "pilot", counts))
    elif item.get("code") == "json" and counts.get("code_json_unparsed", 0) >= CODE_SWITCH_AFTER:
        out.append(
            ev.CallModeChosen(
                model=model,
                kind="code",
                mode="block",
                reason=f"{counts['code_json_unparsed']} code arguments written inside JSON "
                "did not parse as Python: the call names the target and the code comes as a "
                "fenced block",
                counts=counts,
            )
        )
    return out


def _text_code(
    model: str, by: Literal["workflow", "pilot"], counts: dict[str, int]
) -> ev.CallModeChosen:
    """In text mode code travels as blocks: the syntax the pilot states says so."""
    return ev.CallModeChosen(
        model=model,
        kind="code",
        mode="block",
        by=by,
        reason="text mode: the stated syntax gives code as a fenced block after the call",
        counts=counts,
    )


def forcing_refused(
    model: str, endpoint: str, error: str, book: dict[str, Any]
) -> ev.CallModeChosen:
    """The server answered a forced request with an error: forcing stops for this model."""
    return ev.CallModeChosen(
        model=model,
        kind="forcing",
        mode="off",
        reason=f"the server at {endpoint} refused a forced tool choice ({error}); the "
        "model's answers are no longer forced",
        counts=dict((book.get("models", {}).get(model) or {}).get("counts", {})),
    )


def server_without_tools(
    model: str, endpoint: str, error: str, book: dict[str, Any]
) -> list[ev.CallModeChosen]:
    """The server refused a request that lets the model choose tools (started without its
    tool-call flags): under ``auto`` the model moves to text mode, its code to blocks."""
    item = book.get("models", {}).get(model) or {}
    counts = dict(item.get("counts", {}))
    out = [
        ev.CallModeChosen(
            model=model,
            kind="calls",
            mode="text",
            reason=f"the server at {endpoint} refused tools chosen by the model ({error}): "
            "the pilot states the call syntax and reads the text; serve with the tool-call "
            "flags for native calls",
            counts=counts,
        )
    ]
    if item.get("code", "json") == "json":
        out.append(_text_code(model, "pilot", counts))
    return out


def ask(book: dict[str, Any], model: str, setting: str, tools: list[str]) -> Ask | None:
    """How the next request of ``model`` asks for calls (None: the phase has no tools)."""
    if not tools:
        return None
    item = book.get("models", {}).get(model) or {}
    mode = item.get("calls") or (setting if setting in MODES else "native")
    blocks = item.get("code") == "block"
    text = mode == "text"
    if book.get("code_asked"):
        # The answer's code, asked for after a call that came without it: unforced, as text.
        return Ask("code", None if text else "none", not text, text, blocks, text)
    once = setting == "auto" and item.get("last") == "none" and item.get("forcing") != "off"
    if mode == "forced" or once:
        # Under auto, only the answer after one with no call (in text mode too: its tools
        # are sent for that one request).
        return Ask("forced", forced_choice(tools), True, False, blocks, text)
    if text:
        return Ask("text", None, False, True, blocks, True)
    return Ask("native", "auto", True, False, blocks)


def forced_choice(tools: list[str]) -> str | dict[str, Any]:
    """``required``, or the named form when exactly one tool is allowed."""
    if len(tools) == 1:
        return {"type": "function", "function": {"name": tools[0]}}
    return "required"


def is_forced(choice: Any) -> bool:
    return choice == "required" or isinstance(choice, dict)


def optional_code(schemas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool schemas with each code argument optional (code travels as a block)."""
    out = []
    for tool in schemas:
        function = tool.get("function", {}) if isinstance(tool, dict) else {}
        argument = CODE_ARGUMENTS.get(function.get("name", ""))
        parameters = function.get("parameters") or {}
        if argument is None or argument not in (parameters.get("required") or []):
            out.append(tool)
            continue
        required = [r for r in parameters["required"] if r != argument]
        props = dict(parameters.get("properties") or {})
        if argument in props:
            props[argument] = {
                **props[argument],
                "description": f"Leave out: give the {argument} as one fenced block in the "
                "answer's text.",
            }
        parameters = {**parameters, "required": required, "properties": props}
        out.append({**tool, "function": {**function, "parameters": parameters}})
    return out


# -- measures -----------------------------------------------------------------------------


def code_of(call: ev.ToolCall) -> tuple[str, str | None, dict[str, Any]] | None:
    """(argument, its code or None, the arguments) of a code-carrying call; None for others."""
    argument = CODE_ARGUMENTS.get(call.name)
    if argument is None:
        return None
    try:
        arguments = json.loads(call.arguments) if call.arguments else {}
    except json.JSONDecodeError:
        arguments = {}
    if not isinstance(arguments, dict):
        arguments = {}
    value = arguments.get(argument)
    code = value if isinstance(value, str) and value.strip() else None
    return argument, code, arguments


def python_checked(name: str, arguments: dict[str, Any]) -> bool:
    """Whether this call's code is Python to be checked (a definition, a ``.py`` file)."""
    if name == "replace_definition":
        return True
    return name == "write_file" and str(arguments.get("path", "")).endswith(".py")


def parses(code: str) -> bool:
    """Whether ``code`` parses as Python (a fence around it and its indentation removed)."""
    fenced = _FENCE_RE.match(code)
    source = textwrap.dedent(fenced.group(1) if fenced else code)
    try:
        ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


def code_counts(calls: list[ev.ToolCall], from_blocks: set[str]) -> tuple[int, int, int]:
    """(in JSON and parses, in JSON and does not parse, from a block) over an answer's
    code-carrying calls."""
    good = bad = blocks = 0
    for call in calls:
        found = code_of(call)
        if found is None or found[1] is None:
            continue
        if call.id in from_blocks:
            blocks += 1
        elif python_checked(call.name, found[2]):
            if parses(found[1]):
                good += 1
            else:
                bad += 1
    return good, bad, blocks


def needs_code(call: ev.ToolCall, blocks: bool) -> str | None:
    """The argument to ask for as a block, when ``call`` came without its code (or, where
    the model's code travels as blocks, with code that does not parse); else None."""
    found = code_of(call)
    if found is None:
        return None
    argument, code, arguments = found
    if any(not arguments.get(key) for key in NEEDED_WITH_CODE.get(call.name, ())):
        return None  # the block would have no target: the call is refused as it is
    if code is None:
        return argument
    if blocks and python_checked(call.name, arguments) and not parses(code):
        return argument
    return None


def block_argument(name: str, block: str) -> str:
    """A fenced block's text as the code argument of ``name``: a whole file ends with a line
    break (the fence took it)."""
    if name == "write_file" and block and not block.endswith("\n"):
        return block + "\n"
    return block


def code_request(name: str, argument: str, arguments: dict[str, Any]) -> str:
    """What a call that came without its code is answered with."""
    others = {k: v for k, v in arguments.items() if k != argument}
    target = json.dumps(others, ensure_ascii=False) if others else "no other arguments"
    python = name == "replace_definition" or str(others.get("path", "")).endswith(".py")
    fence = "```python" if python else "a fenced block (```)"
    what = {
        "replace_definition": "the whole new function or class",
        "write_file": "the file's complete new content",
        "edit_file": "the replacement text",
    }.get(name, f"the {argument}")
    return (
        f"Not run yet: {name} ({target}) needs its `{argument}`. Answer with {what} as one "
        f"{fence} block and nothing else; it is taken as the `{argument}` of this call."
    )


def answer_fields(reading: Any, asking: Ask) -> dict[str, Any]:
    """The ``assistant_message`` fields saying how an answer's calls came (``reading``: the
    calls as read, ``pilot.agent.seams.Reading``) and how its code travelled."""
    calls = reading.calls
    if not calls:
        mode = "none"
    elif reading.from_text or asking.mode in ("code", "text"):
        mode = "text"
    else:
        mode = "forced" if asking.mode == "forced" else "native"
    good, bad, blocks = code_counts(calls, reading.code_blocks)
    return {
        "call_mode": mode,
        "asked": asking.mode,
        "code_json": good,
        "code_json_unparsed": bad,
        "code_block": blocks,
    }


@dataclass(frozen=True)
class Shaped:
    """A request's messages and tools as one ``Ask`` sends them."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    tool_choice: str | dict[str, Any] | None


def shape_request(
    history: list[dict[str, Any]],
    schemas: list[dict[str, Any]] | None,
    asking: Ask | None,
    tactics: Any,
    *,
    text_mode: bool,
    as_sent: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
) -> Shaped:
    """What a request sends under ``asking``: the tools or none (code arguments optional where
    code travels as blocks), the history as text where the model writes its calls so
    (``text_mode``) or the mode sends no tools, the syntax the mode needs added to the system
    prompt. The loop and ``pilot replay-export`` both build requests here. ``tactics``:
    ``pilot.agent.seams.Tactics``; ``as_sent``: the messages as the wire gets them (images)."""
    tools = schemas
    if asking is not None and not asking.send_tools:
        tools = None
    elif tools and asking is not None and asking.code_blocks:
        tools = optional_code(tools)
    if asking is not None and asking.text_history:
        history = tactics.as_text_turns(history, every=True)
    elif text_mode:
        history = tactics.as_text_turns(history)
    messages = as_sent(history) if as_sent is not None else history
    if asking is not None and schemas and (asking.syntax or asking.code_blocks):
        told = tactics.call_syntax(schemas, text=asking.syntax, code_blocks=asking.code_blocks)
        messages = with_system(messages, told)
    choice = asking.tool_choice if asking is not None and tools else None
    return Shaped(messages, tools, choice)


def with_system(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """``messages`` with ``text`` added to the system prompt (as sent only)."""
    if not text:
        return messages
    if (
        messages
        and messages[0].get("role") == "system"
        and isinstance(messages[0].get("content"), str)
    ):
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{text}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def book_of(events: list[ev.Event]) -> dict[str, Any]:
    """The book folded from a run's events (for views that do not fold the whole state)."""
    book, model = new_book(), None
    for event in events:
        if isinstance(event, ev.ModelResolved):
            model = event.model
        elif event.type in FOLDED:
            fold(book, event, model)
    return book


def summary_lines(book: dict[str, Any]) -> list[str]:
    """Per model, its choices and the answers by how their calls came (``pilot show``, the
    report)."""
    lines = []
    for model, item in (book.get("models") or {}).items():
        counts = item.get("counts", {})
        by = item.get("by", {})
        code = counts.get("code_json", 0), counts.get("code_json_unparsed", 0)
        lines.append(
            f"call mode: model {model}: calls {item.get('calls')} (by "
            f"{by.get('calls', 'pilot')}), code as {item.get('code')}, forcing "
            f"{item.get('forcing')}; answers: {answer_counts(counts) or 'none yet'}; code in "
            f"JSON {code[0] + code[1]} ({code[1]} did not parse), as blocks "
            f"{counts.get('code_block', 0)}, refused calls {counts.get('refused', 0)}"
        )
    return lines


def answer_counts(counts: dict[str, int]) -> str:
    """``native 3, forced 1, none 2``: the answers by how their calls came."""
    order = ("native", "forced", "text", "none")
    return ", ".join(f"{mode} {counts[mode]}" for mode in order if counts.get(mode))


def compact(book: dict[str, Any]) -> str:
    """The live view's cell: each model's call mode and its answers by mode, short."""
    cells = []
    for item in (book.get("models") or {}).values():
        counts = item.get("counts", {})
        tally = " ".join(
            f"{mode[0]}{counts[mode]}"
            for mode in ("native", "forced", "text", "none")
            if counts.get(mode)
        )
        code = "/block" if item.get("code") == "block" else ""
        cells.append(f"{item.get('calls') or '-'}{code} {tally}".strip())
    return "; ".join(cells) or "-"


def choice_line(event: ev.CallModeChosen) -> str:
    """One choice in words (the timeline, the report)."""
    what = {"calls": "calls", "code": "code as", "forcing": "forcing"}[event.kind]
    return f"{event.model}: {what} {event.mode} (by {event.by}): {event.reason}"
