"""Calls fitted to the tools' schemas: a name or an argument name close to a real one.

Pure functions: copied JSON-Schema words dropped, near-miss names renamed (never a guess
between two), and otherwise an error naming the exact shape the tool expects.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

# --------------------------------------------------------------------------------------------
# Public: calls fitted to the tools' schemas (names and argument names close to real ones)
# --------------------------------------------------------------------------------------------

SCHEMA_KEYWORDS = frozenset(
    {
        "$schema",
        "additionalProperties",
        "required",
        "properties",
        "type",
        "title",
        "description",
        "items",
        "enum",
        "default",
    }
)
"""JSON-Schema words small models copy from the tool's definition into their arguments."""

ARGUMENT_ALIASES = {
    "file": "path",
    "filename": "path",
    "file_name": "path",
    "filepath": "path",
    "file_path": "path",
    "dir": "path",
    "directory": "path",
    "folder": "path",
    "cmd": "command",
    "shell": "command",
    "query": "pattern",
    "regex": "pattern",
    "search": "pattern",
    "text": "content",
    "contents": "content",
    "msg": "message",
    "old": "old_text",
    "new": "new_text",
}
"""Names models use for an argument of another name; taken only when the target exists and
the model did not also give it (never a guess between two)."""

_NAME_CUTOFF = 0.8


@dataclass(frozen=True)
class FitResult:
    """Arguments fitted to a tool's parameters: dropped schema words, renamed near-misses."""

    arguments: dict[str, Any] | None
    repairs: list[str] = field(default_factory=list)
    error: str | None = None


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def resolve_tool_name(name: str, known: Collection[str]) -> tuple[str | None, str | None]:
    """The known tool ``name`` means, and the repair that says so; (None, None) if none.

    Exact names pass untouched. Otherwise a name equal but for case and separators
    (``Read-File``, ``readFile``) or one unique close spelling (``read_fiel``) is taken; two
    candidates are ambiguous and refused, since a guessed call may write files.
    """
    if name in known:
        return name, None
    if not isinstance(name, str) or not name.strip():
        return None, None
    by_norm = [k for k in known if _norm(k) == _norm(name)]
    if len(by_norm) == 1:
        return by_norm[0], f"tool name {name!r} taken as {by_norm[0]!r}"
    if by_norm:
        return None, None
    close = difflib.get_close_matches(name.lower(), [k.lower() for k in known], n=2, cutoff=0.85)
    if len(close) == 1:
        target = next(k for k in known if k.lower() == close[0])
        return target, f"tool name {name!r} taken as {target!r} (closest spelling)"
    return None, None


DESCRIBED = {
    "path": "a file path from the repository",
    "old": "the exact lines to replace, copied from the file",
    "new": "the lines that replace them",
    "summary": "what was done, naming the files read or changed",
    "command": "python -m pytest -q",
    "content": "the whole new content of the file",
    "code": "the whole corrected function",
    "message": "what changed and why",
    "pattern": "def name_to_find",
}
"""What a string argument of an example call says when the workspace gives no real value:
words a model can act on. ``"..."`` was copied as is (67 of 136 edit_file calls this round)."""


def _placeholder(key: str, prop: dict[str, Any]) -> str:
    kind = prop.get("type", "any")
    if isinstance(kind, list):
        kind = "|".join(str(k) for k in kind)
    if str(kind) == "string":
        return json.dumps(DESCRIBED.get(key, f"the {key.replace('_', ' ')}"))
    return {"integer": "1", "number": "1", "boolean": "true"}.get(str(kind), "null")


def call_shape(
    name: str,
    schema: dict[str, Any] | None,
    *,
    path: str | None = None,
    values: Mapping[str, str] | None = None,
) -> str:
    """The exact JSON a model should write to call ``name``, optional arguments marked. Its
    values are the workspace's own where known (``path``; ``values``: a real line of a real
    file as ``old``), else words saying what goes there: a small model copies an example as
    it is, so an example must never hold ``"..."`` or ``<file>``."""
    props = (schema or {}).get("properties", {}) or {}
    required = set((schema or {}).get("required", []) or [])
    known = {**({"path": path} if path else {}), **(values or {})}
    parts = [
        f'"{k}": {json.dumps(known[k]) if known.get(k) else _placeholder(k, v)}'
        for k, v in props.items()
        if k in required
    ]
    optional = [k for k in props if k not in required]
    args = "{" + ", ".join(parts) + "}"
    shape = f'{{"name": "{name}", "arguments": {args}}}'
    if optional:
        shape += f" (optional: {', '.join(optional)})"
    return shape


def _rename_target(key: str, props: Collection[str], given: Collection[str]) -> str | None:
    alias = ARGUMENT_ALIASES.get(key.lower()) or ARGUMENT_ALIASES.get(_norm(key))
    candidates: list[str] = []
    if alias in props:
        candidates = [alias]
    if not candidates:
        candidates = [p for p in props if _norm(p) == _norm(key)]
    if not candidates:
        candidates = difflib.get_close_matches(key, list(props), n=2, cutoff=_NAME_CUTOFF)
    if len(candidates) != 1 or candidates[0] in given:
        return None
    return candidates[0]


def fit_arguments(name: str, arguments: dict[str, Any], schema: dict[str, Any] | None) -> FitResult:
    """Fit a call's arguments to the tool's parameters, or say exactly what is wrong.

    JSON-Schema keywords that are not parameters are dropped (a copied ``"required": []``);
    real arguments nested under a copied ``"properties"`` object are lifted out; an argument
    named close to exactly one parameter (``file_path`` for ``path``, ``comand``) is renamed.
    Anything else unknown, or a required parameter missing, is an error naming the argument
    and the exact shape expected. Without a schema the arguments pass as they are.
    """
    if schema is None:
        return FitResult(dict(arguments))
    props: dict[str, Any] = schema.get("properties", {}) or {}
    required = [r for r in schema.get("required", []) or [] if isinstance(r, str)]
    out = dict(arguments)
    repairs: list[str] = []
    nested = out.get("properties")
    if (
        "properties" not in props
        and isinstance(nested, dict)
        and nested
        and all(isinstance(k, str) and k in props for k in nested)
        and not any(_placeholder_like(v) for v in nested.values())
    ):
        del out["properties"]
        for k, v in nested.items():
            out.setdefault(k, v)
        repairs.append(f"{name}: arguments lifted out of a copied 'properties' object")
    dropped = [k for k in out if k in SCHEMA_KEYWORDS and k not in props]
    for k in dropped:
        del out[k]
    if dropped:
        repairs.append(f"{name}: JSON-Schema keywords dropped from arguments: {', '.join(dropped)}")
    unknown: list[str] = []
    for key in [k for k in out if k not in props]:
        target = _rename_target(key, props, out)
        if target is None:
            unknown.append(key)
            continue
        out[target] = out.pop(key)
        repairs.append(f"{name}: argument {key!r} taken as {target!r}")
    shape = call_shape(name, schema)
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        valid = ", ".join(props) or "none"
        return FitResult(
            None,
            repairs,
            f"Error: {name} has no argument {names} (its arguments: {valid}). "
            f"Call it exactly like this: {shape}",
        )
    missing = [r for r in required if r not in out]
    if missing:
        return FitResult(
            None,
            repairs,
            f"Error: {name} needs the argument {', '.join(repr(m) for m in missing)}. "
            f"Call it exactly like this: {shape}",
        )
    return FitResult(out, repairs)


def _placeholder_like(value: Any) -> bool:
    """True for a value that is a schema fragment (``{"type": "string"}``), not an argument."""
    return isinstance(value, dict) and "type" in value and set(value) <= SCHEMA_KEYWORDS
