"""The history as a model that writes its calls as text should see it again.

A call recovered from an answer's text (``pilot.tactics.dialects``) is stored like a native call:
an assistant message with ``tool_calls`` and a ``tool`` result. Sent back so, a server's chat
template shows the model its own turns as JSON tool calls it never wrote, and a small model
imitates what it reads: shown a Python block it wrote as ``{"name": "replace_definition",
"arguments": {"code": "..."}}``, it answers next with JSON-escaped code and runs out of
tokens. So, in the request only, such a turn is written back as text in the one format the
model should keep using (a Python block for a definition, a fenced JSON call otherwise), and
its results as user messages. The stored events and the state are unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from pilot.agent.call_modes import CODE_ARGUMENTS
from pilot.tactics.dialects import DEFINITION_TOOL

TEXT_CALL_PREFIX = "text-"
"""The id prefix of calls recovered from an answer's text."""


def text_call_id(step: int, position: int) -> str:
    """The id of the ``position``-th call recovered from the text of step ``step``'s answer."""
    return f"{TEXT_CALL_PREFIX}{step}-{position}"


def has_text_calls(messages: list[dict[str, Any]]) -> bool:
    """Whether any assistant message of ``messages`` holds a call recovered from text."""
    return any(is_text_turn(m) for m in messages if m.get("role") == "assistant")


def is_text_turn(message: dict[str, Any]) -> bool:
    calls = message.get("tool_calls") or []
    return bool(calls) and all(str(c.get("id", "")).startswith(TEXT_CALL_PREFIX) for c in calls)


def as_text_turns(messages: list[dict[str, Any]], *, every: bool = False) -> list[dict[str, Any]]:
    """``messages`` with each turn of text-recovered calls written as text (see the module);
    ``every``: each turn with calls, native ones too (a request that sends no tools, text mode,
    must not show calls in a form it does not read)."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for message in messages:
        role = message.get("role")
        text_turn = is_text_turn(message) or (every and bool(message.get("tool_calls")))
        if role == "assistant" and text_turn:
            parts = [message["content"]] if message.get("content") else []
            for call in message["tool_calls"]:
                function = call.get("function", {})
                names[call["id"]] = function.get("name", "")
                parts.append(_as_text(function.get("name", ""), function.get("arguments", "")))
            out.append({"role": "assistant", "content": "\n\n".join(parts)})
        elif role == "tool" and message.get("tool_call_id") in names:
            name = names[message["tool_call_id"]]
            out.append({"role": "user", "content": f"Result of {name}:\n{message['content']}"})
        else:
            out.append(message)
    return out


def _as_text(name: str, arguments: str) -> str:
    try:
        parsed = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        parsed = arguments
    if name == DEFINITION_TOOL and isinstance(parsed, dict) and set(parsed) == {"code"}:
        return f"```python\n{str(parsed['code']).strip()}\n```"
    argument = CODE_ARGUMENTS.get(name)
    if argument and isinstance(parsed, dict) and isinstance(parsed.get(argument), str):
        # Code travels as code: the call names the target, the code follows as a block.
        others = {k: v for k, v in parsed.items() if k != argument}
        python = name == DEFINITION_TOOL or str(others.get("path", "")).endswith(".py")
        call = json.dumps({"name": name, "arguments": others}, ensure_ascii=False)
        fence = "```python" if python else "```"
        return f"```json\n{call}\n```\n\n{fence}\n{parsed[argument].rstrip()}\n```"
    call = json.dumps({"name": name, "arguments": parsed}, ensure_ascii=False)
    return f"```json\n{call}\n```"
