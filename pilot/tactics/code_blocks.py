"""Code that travels as code: a fenced block of the answer's text as a call's code argument, and
the call syntax the pilot states when it reads calls from text.

A small model writes Python far better as a fenced block than inside a JSON string (on the GPU,
40% of the code written in JSON strings did not parse, 1 in 465 written as blocks), so a
code-carrying call (``pilot.agent.call_modes.CODE_ARGUMENTS``) may name its target and leave
its code to a block of the same answer, and a call forced without text gets its code asked for
as a block on the next turn. Pure functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pilot.agent.call_modes import CODE_ARGUMENTS, optional_code
from pilot.tactics.dialects import FENCE_RE


def _is_json_call(language: str, body: str) -> bool:
    if language.lower() == "json":
        return True
    text = body.strip()
    if not text.startswith(("{", "[")):
        return False
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def code_block(content: str) -> tuple[str, str] | None:
    """The one fenced block of ``content`` that is not a JSON call, and the text without it;
    None when there is none or more than one."""
    blocks = [
        m for m in FENCE_RE.finditer(content or "") if not _is_json_call(m.group(1), m.group(2))
    ]
    if len(blocks) != 1:
        return None
    m = blocks[0]
    remaining = re.sub(r"\n{3,}", "\n\n", content[: m.start()] + content[m.end() :]).strip()
    return m.group(2), remaining


def relaxed(schemas: Mapping[str, dict[str, Any] | None]) -> dict[str, dict[str, Any] | None]:
    """The phase's schemas with each code argument optional: a call may leave its code to a
    block (or have it asked for)."""
    out: dict[str, dict[str, Any] | None] = dict(schemas)
    for name, argument in CODE_ARGUMENTS.items():
        schema = out.get(name)
        if schema and argument in (schema.get("required") or []):
            required = [r for r in schema["required"] if r != argument]
            out[name] = {**schema, "required": required}
    return out


def lacks_code(name: str, arguments: Any) -> str | None:
    """The code argument a code-carrying call's arguments lack (None: not one, or it has it)."""
    argument = CODE_ARGUMENTS.get(name)
    if argument is None or not isinstance(arguments, dict):
        return None
    value = arguments.get(argument)
    return argument if not (isinstance(value, str) and value.strip()) else None


_EXAMPLES = (("run", {"command": "git status"}), ("list_dir", {"path": "."}))
"""Calls safe to show as the example (harmless if copied as they are): no placeholder a small
model would copy (``"..."``, ``<file>``)."""


def call_syntax(schemas: list[dict[str, Any]], *, text: bool, code_blocks: bool) -> str:
    """What the system prompt adds: in text mode the tools and how to write a call; where code
    travels as blocks, how to give it."""
    if text or code_blocks:
        schemas = optional_code(schemas)  # the code comes as a block, never in the JSON
    named = {_function(tool).get("name", ""): tool for tool in schemas}
    code_tools = [f"{name}'s `{CODE_ARGUMENTS[name]}`" for name in named if name in CODE_ARGUMENTS]
    parts = []
    if text:
        lines = [
            "You call a tool by writing, in your answer, a fenced JSON block holding an object "
            'with "name" (the tool) and "arguments" (an object of its arguments), one call per '
            "block."
        ]
        example = next(((n, a) for n, a in _EXAMPLES if n in named), None)
        if example is not None:
            call = json.dumps({"name": example[0], "arguments": example[1]})
            lines += ["For example:", "", "```json", call, "```"]
        lines += ["", "The tools (`?`: may be left out):"]
        for tool in schemas:
            function = _function(tool)
            params = function.get("parameters") or {}
            props = params.get("properties") or {}
            required = set(params.get("required") or [])
            args = ", ".join(
                f"{key}{'' if key in required else '?'}: {(spec or {}).get('type', 'any')}"
                for key, spec in props.items()
            )
            description = str(function.get("description", "")).split("\n")[0]
            lines.append(f"- {function.get('name')}({args}): {description}")
        parts.append("\n".join(lines))
    if code_tools and (text or code_blocks):
        parts.append(
            f"Code ({', '.join(code_tools)}) goes in a fenced block (```python for Python) "
            "in the same answer, after the call, and the call leaves that argument out."
        )
    return "\n\n".join(parts)


def _function(tool: Any) -> dict[str, Any]:
    return tool.get("function", {}) if isinstance(tool, dict) else {}
