"""Deterministic repair of tool calls written imperfectly by local models.

Small models served by vLLM or llama.cpp often emit almost-right tool calls: arguments with a
trailing comma or single quotes, a JSON object wrapped in a code fence, Gemma 4's ``<|"|>``
string delimiters leaking through the parser, or the whole call left as text in ``content``
because the server's tool parser did not recognise it. Re-prompting costs a turn; these cheap,
deterministic repairs come first, and every repair applied is named so the run's events say
exactly what was changed (a repaired call is recorded next to what the server really sent).

Pure functions only: no I/O, no logging, no model calls. Nothing here ever raises on bad input;
what cannot be repaired is reported as an error the model can read.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
import textwrap
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tools.definitions import ReplaceDefinition, is_test_path

__all__ = [
    "GEMMA_STRING_DELIM",
    "FitResult",
    "RepairResult",
    "TextCallsResult",
    "call_shape",
    "extract_text_tool_calls",
    "fit_arguments",
    "parse_gemma4_arguments",
    "repair_arguments",
    "resolve_tool_name",
]

GEMMA_STRING_DELIM = '<|"|>'
"""Gemma 4's string delimiter token; vLLM's gemma4 parser sometimes lets it leak (#39468)."""


@dataclass(frozen=True)
class RepairResult:
    """The outcome of :func:`repair_arguments`.

    ``arguments`` is the parsed object when it could be had (possibly after repairs), else None
    and ``error`` says what was wrong in words the model can act on.
    """

    arguments: dict[str, Any] | None
    repairs: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when ``arguments`` holds a usable object."""
        return self.arguments is not None


@dataclass(frozen=True)
class TextCallsResult:
    """Tool calls found written as text in an assistant message's ``content``."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    remaining_content: str = ""
    repairs: list[str] = field(default_factory=list)
    unknown_tools: list[str] = field(default_factory=list)
    """Names of call-shaped text that name no tool (a phase's title, say)."""
    errors: list[str] = field(default_factory=list)
    """Why call-shaped text for a known tool could not be taken (argument by argument)."""


# --------------------------------------------------------------------------------------------
# A string-aware view of JSON-ish text
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Segment:
    kind: str  # "code", "dq" (double-quoted string), "sq" (single-quoted string)
    text: str  # for strings: including the quotes present in the source
    closed: bool = True  # False for a string that runs to the end of the text


_STRING_RE = re.compile(r"""\"(?:[^"\\]+|\\.)*(")?|'(?:[^'\\]+|\\.)*(')?""", re.DOTALL)


def _segments(text: str) -> list[_Segment]:
    """Split text into code and quoted-string segments, honouring backslash escapes.

    Every transform below works on code segments only, so that a comma, a quote or the word
    ``True`` inside a string value is never touched. A string left open runs to the end.
    """
    out: list[_Segment] = []
    pos = 0
    for m in _STRING_RE.finditer(text):
        if m.start() > pos:
            out.append(_Segment("code", text[pos : m.start()]))
        kind = "dq" if text[m.start()] == '"' else "sq"
        if m.group(1) is None and m.group(2) is None:
            out.append(_Segment(kind, text[m.start() :], closed=False))
            return out
        out.append(_Segment(kind, m.group(0)))
        pos = m.end()
    if pos < len(text):
        out.append(_Segment("code", text[pos:]))
    return out


def _join(segments: list[_Segment]) -> str:
    return "".join(s.text for s in segments)


def _map_code(text: str, fn: Callable[[str], str]) -> str:
    """Apply ``fn`` to the code (non-string) parts of ``text`` only."""
    return _join([_Segment("code", fn(s.text)) if s.kind == "code" else s for s in _segments(text)])


# --------------------------------------------------------------------------------------------
# The individual repairs, each text -> text; a repair is recorded only if it changed the text
# --------------------------------------------------------------------------------------------

_FENCE_RE = re.compile(r"^\s*```[\w+-]*[^\S\n]*\n?(.*?)\n?[^\S\n]*```\s*$", re.DOTALL)
_OPEN_FENCE_RE = re.compile(r"^\s*```[\w+-]*[^\S\n]*\n")


def _strip_fences(text: str) -> str:
    m = _FENCE_RE.match(text)
    if m:
        return m.group(1).strip()
    m = _OPEN_FENCE_RE.match(text)  # a fence opened and never closed (truncated output)
    if m:
        return text[m.end() :].strip()
    return text


_GEMMA_PAIR_RE = re.compile(r'"?<\|"\|>(.*?)<\|"\|>"?', re.DOTALL)


def _strip_gemma_delimiters(text: str) -> str:
    if GEMMA_STRING_DELIM not in text:
        return text
    # A delimited pair is one string; re-encode its content so inner quotes/newlines are legal.
    # Surrounding JSON quotes, if the model wrote both, are absorbed.
    text = _GEMMA_PAIR_RE.sub(lambda m: json.dumps(m.group(1), ensure_ascii=False), text)
    return text.replace(GEMMA_STRING_DELIM, '"')


def _strip_trailing_commas(text: str) -> str:
    segs = _segments(text)
    out: list[_Segment] = []
    for idx, s in enumerate(segs):
        if s.kind != "code":
            out.append(s)
            continue
        t = s.text
        # A comma at the end of a code segment is trailing only if the next segment is code
        # starting with a closer (segments alternate, so the end of the text is the other case).
        is_last = idx == len(segs) - 1
        t = re.sub(r",(\s*)(?=[}\]])", r"\1", t)
        if is_last:
            t = re.sub(r",(\s*)$", r"\1", t)
        out.append(_Segment("code", t))
    return _join(out)


def _single_to_double_quotes(text: str) -> str:
    segs = _segments(text)
    if not any(s.kind == "sq" for s in segs):
        return text
    out: list[_Segment] = []
    for s in segs:
        if s.kind != "sq":
            out.append(s)
            continue
        body = s.text[1:-1] if s.closed else s.text[1:]
        converted: list[str] = []
        i = 0
        while i < len(body):
            c = body[i]
            if c == "\\" and i + 1 < len(body):
                nxt = body[i + 1]
                converted.append("'" if nxt == "'" else c + nxt)
                i += 2
                continue
            converted.append('\\"' if c == '"' else c)
            i += 1
        quoted = '"' + "".join(converted) + ('"' if s.closed else "")
        out.append(_Segment("dq", quoted, s.closed))
    return _join(out)


_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_PY_LITERAL_RE = re.compile(r"\b(True|False|None)\b")


def _python_literals(text: str) -> str:
    return _map_code(text, lambda t: _PY_LITERAL_RE.sub(lambda m: _PY_LITERALS[m.group(1)], t))


_BARE_KEY_RE = re.compile(r"([{,]\s*)([A-Za-z_$][\w$\-.]*)(\s*:)")


def _quote_bare_keys(text: str) -> str:
    return _map_code(text, lambda t: _BARE_KEY_RE.sub(r'\1"\2"\3', t))


_CLOSERS = {"{": "}", "[": "]"}


def _balance(text: str) -> str:
    """Close unclosed brackets and drop closers with no opener (a parser that lost the final
    ``}`` is a known vLLM bug). A closer that skips over an open bracket (``[1, 2}``) closes the
    skipped one first.

    An unterminated *string* is left alone: it means the output was cut, and closing it would
    run the call with a truncated value (half a file, half a command: a partial side effect).
    Such arguments stay invalid and the model is asked to send the call again.
    """
    segs = _segments(text)
    if any(s.kind != "code" and not s.closed for s in segs):
        return text
    stack: list[str] = []
    out: list[str] = []
    for s in segs:
        if s.kind != "code":
            out.append(s.text)
            continue
        buf: list[str] = []
        for c in s.text:
            if c in _CLOSERS:
                stack.append(c)
                buf.append(c)
            elif c in "}]":
                opener = "{" if c == "}" else "["
                if opener not in stack:
                    continue  # a closer with nothing to close: drop it
                while stack and stack[-1] != opener:
                    buf.append(_CLOSERS[stack.pop()])
                stack.pop()
                buf.append(c)
            else:
                buf.append(c)
        out.append("".join(buf))
    result = "".join(out).rstrip()
    if stack:
        result = re.sub(r",\s*$", "", result)
        result += "".join(_CLOSERS[o] for o in reversed(stack))
    return result


_REPAIRS: list[tuple[str, Callable[[str], str]]] = [
    ("code fence removed", _strip_fences),
    ('Gemma <|"|> string delimiters replaced by quotes', _strip_gemma_delimiters),
    ("trailing commas removed", _strip_trailing_commas),
    ("single quotes replaced by double quotes", _single_to_double_quotes),
    ("Python literals (True/False/None) converted to JSON", _python_literals),
    ("unquoted keys quoted", _quote_bare_keys),
    ("unbalanced brackets or braces closed", _balance),
]


# --------------------------------------------------------------------------------------------
# Public: arguments
# --------------------------------------------------------------------------------------------


def _type_name(value: object) -> str:
    return {
        list: "an array",
        str: "a string",
        int: "a number",
        float: "a number",
        bool: "a boolean",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _clean_gemma_values(value: Any) -> tuple[Any, bool]:
    """Remove ``<|"|>`` delimiters that leaked into string values of a parsed object."""
    if isinstance(value, str):
        if GEMMA_STRING_DELIM not in value:
            return value, False
        d = GEMMA_STRING_DELIM
        if value.startswith(d) and value.endswith(d) and len(value) >= 2 * len(d):
            value = value[len(d) : -len(d)]
        return value.replace(d, '"'), True
    if isinstance(value, dict):
        changed = False
        out: dict[str, Any] = {}
        for k, v in value.items():
            nk, ck = _clean_gemma_values(k)
            nv, cv = _clean_gemma_values(v)
            out[nk] = nv
            changed = changed or ck or cv
        return out, changed
    if isinstance(value, list):
        items = [_clean_gemma_values(v) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    return value, False


def _loads(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except (ValueError, RecursionError) as exc:
        return None, str(exc)


def _parse_json_value(text: str) -> tuple[Any, list[str], str | None]:
    """Parse JSON-ish text into any JSON value, applying the repairs in order until it parses."""
    value, err = _loads(text)
    if err is None:
        return value, [], None
    repairs: list[str] = []
    first_error = err
    current = text
    for name, fn in _REPAIRS:
        try:
            changed = fn(current)
        except RecursionError:  # pragma: no cover - pathological nesting
            continue
        if changed == current:
            continue
        current = changed
        repairs.append(name)
        value, err = _loads(current)
        if err is None:
            return value, repairs, None
    return None, repairs, first_error


def repair_arguments(raw: str | dict[str, Any]) -> RepairResult:
    """Turn a tool call's raw ``arguments`` into an object, repairing what is cheap to repair.

    Strict JSON is tried first; only when it fails are the repairs applied, in a fixed order,
    each recorded by name. The result must be a JSON object: anything else is an error that
    says what was received, so the model can be told and re-issue the call.
    """
    if isinstance(raw, dict):
        return RepairResult(dict(raw), ["arguments given as an object"])
    if not isinstance(raw, str):
        return RepairResult(None, [], f"arguments must be a JSON object, got {_type_name(raw)}")
    text = raw.strip()
    if not text:
        return RepairResult({}, ["empty arguments taken as {}"])

    repairs: list[str] = []
    value, step_repairs, err = _parse_json_value(text)
    repairs.extend(step_repairs)
    # Arguments double-encoded as a JSON string of JSON (some templates serialise twice).
    for _ in range(3):
        if not isinstance(value, str):
            break
        inner = value.strip()
        if not inner.startswith(("{", "[", "```")):
            break
        value, inner_repairs, err = _parse_json_value(inner)
        repairs.append("arguments were double-encoded as a JSON string")
        repairs.extend(inner_repairs)
    if err is not None:
        snippet = text if len(text) <= 200 else text[:200] + "..."
        return RepairResult(None, repairs, f"arguments are not valid JSON ({err}): {snippet}")
    if not isinstance(value, dict):
        return RepairResult(
            None, repairs, f"arguments must be a JSON object, got {_type_name(value)}"
        )
    value, cleaned = _clean_gemma_values(value)
    if cleaned:
        repairs.append('Gemma <|"|> string delimiters removed from values')
    return RepairResult(value, repairs)


# --------------------------------------------------------------------------------------------
# Gemma 4's native call syntax
# --------------------------------------------------------------------------------------------

_WS = " \n\t\r"


def _gemma_skip_string(s: str, i: int) -> int:
    """``i`` is just past an opening ``<|"|>``; return the index just past its closing one."""
    end = s.find(GEMMA_STRING_DELIM, i)
    return len(s) if end == -1 else end + len(GEMMA_STRING_DELIM)


def _gemma_match(s: str, i: int, open_c: str, close_c: str) -> tuple[int, bool]:
    """``s[i]`` is ``open_c``; return (index just past its matching closer, closed?)."""
    depth = 0
    n = len(s)
    while i < n:
        if s.startswith(GEMMA_STRING_DELIM, i):
            i = _gemma_skip_string(s, i + len(GEMMA_STRING_DELIM))
            continue
        if s[i] == open_c:
            depth += 1
        elif s[i] == close_c:
            depth -= 1
            if depth == 0:
                return i + 1, True
        i += 1
    return n, False


def _gemma_scalar(text: str) -> Any:
    t = text.strip()
    if t == "true":
        return True
    if t == "false":
        return False
    if t.lower() in ("null", "none", "nil"):
        return None
    try:
        return float(t) if any(c in t for c in ".eE") else int(t)
    except ValueError:
        return t


def _gemma_value(s: str, i: int, stops: str) -> tuple[Any, int]:
    """Parse one value starting at ``s[i]``; return it and the index after it."""
    n = len(s)
    if s.startswith(GEMMA_STRING_DELIM, i):
        start = i + len(GEMMA_STRING_DELIM)
        end = s.find(GEMMA_STRING_DELIM, start)
        if end == -1:
            return s[start:], n
        return s[start:end], end + len(GEMMA_STRING_DELIM)
    if s[i] == "{":
        end, closed = _gemma_match(s, i, "{", "}")
        return parse_gemma4_arguments(s[i + 1 : end - 1 if closed else end]), end
    if s[i] == "[":
        end, closed = _gemma_match(s, i, "[", "]")
        return _gemma_array(s[i + 1 : end - 1 if closed else end]), end
    j = i
    while j < n and s[j] not in stops:
        j += 1
    return _gemma_scalar(s[i:j]), j


def _gemma_array(s: str) -> list[Any]:
    items: list[Any] = []
    i, n = 0, len(s)
    while i < n:
        while i < n and s[i] in _WS + ",":
            i += 1
        if i >= n:
            break
        value, j = _gemma_value(s, i, ",]")
        if j == i:
            break
        items.append(value)
        i = j
    return items


def parse_gemma4_arguments(text: str) -> dict[str, Any]:
    """Parse the inside of Gemma 4's ``call:name{...}`` into a dict.

    The grammar follows vLLM's gemma4 tool parser: ``key:value`` pairs separated by commas,
    keys bare (or wrapped in ``<|"|>``), strings wrapped in ``<|"|>``, nested ``{}`` and ``[]``,
    bare ``true``/``false``/``null``/numbers. An unterminated string or bracket takes the rest.
    """
    result: dict[str, Any] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in _WS + ",":
            i += 1
        if i >= n:
            break
        colon = text.find(":", i)
        if text.startswith(GEMMA_STRING_DELIM, i):
            key_end = text.find(GEMMA_STRING_DELIM, i + len(GEMMA_STRING_DELIM))
            if key_end != -1:
                colon = text.find(":", key_end)
        if colon == -1:
            break
        key = text[i:colon].strip()
        d = GEMMA_STRING_DELIM
        if key.startswith(d) and key.endswith(d) and len(key) >= 2 * len(d):
            key = key[len(d) : -len(d)]
        key = key.strip("\"'")
        i = colon + 1
        while i < n and text[i] in _WS:
            i += 1
        if i >= n:
            result[key] = ""
            break
        value, j = _gemma_value(text, i, ",}]")
        result[key] = value
        i = max(j, i + 1)
    return result


# --------------------------------------------------------------------------------------------
# Public: tool calls written as text
# --------------------------------------------------------------------------------------------

_HERMES_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|(?=<tool_call>)|$)", re.DOTALL)
_GEMMA_CALL_RE = re.compile(r"<\|tool_call>\s*(call)?\s*:\s*([\w\-.]+)\s*\{")
_GEMMA_END = "<tool_call|>"
_QWEN_XML_FUNC_RE = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", re.DOTALL)
_QWEN_XML_PARAM_RE = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?(?:</parameter>|$)", re.DOTALL)
_FENCED_BLOCK_RE = re.compile(r"```[\w+-]*[^\S\n]*\n(.*?)\n?[^\S\n]*```", re.DOTALL)


@dataclass
class _Found:
    start: int
    end: int
    calls: list[tuple[str, dict[str, Any]]]
    repairs: list[str]


class _Tools:
    """The phase's tools as the text-call finders see them, and what they saw but refused."""

    def __init__(self, tools: Collection[str] | Mapping[str, dict[str, Any] | None]) -> None:
        self.schemas: Mapping[str, dict[str, Any] | None] | None = (
            tools if isinstance(tools, Mapping) else None
        )
        self.names = frozenset(tools)
        self.unknown: list[str] = []
        self.errors: list[str] = []

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def resolve(self, name: str) -> tuple[str | None, str | None]:
        resolved, note = resolve_tool_name(name, self.names)
        if resolved is None and name not in self.unknown:
            self.unknown.append(name)
        return resolved, note

    def by_arguments(self, name: str, raw: Any) -> tuple[str | None, str | None]:
        """The one tool whose parameters the arguments of an unknown ``name`` fit: its required
        ones all given, nothing it does not take (schema words aside). A small model names
        the file or the phase where the tool's name goes, with the tool's very arguments."""
        if self.schemas is None or not isinstance(raw, str | dict):
            return None, None
        parsed = repair_arguments(raw).arguments
        if not parsed:
            return None, None
        keys = set(parsed) - SCHEMA_KEYWORDS
        fits = []
        for tool, schema in self.schemas.items():
            props = set((schema or {}).get("properties", {}) or {})
            required = set((schema or {}).get("required", []) or [])
            if required <= keys <= props:
                fits.append(tool)
        if len(fits) != 1:
            return None, None
        if name in self.unknown:
            self.unknown.remove(name)
        return fits[0], f"tool name {name!r} is no tool; its arguments fit {fits[0]!r} alone"


_CALL_META_KEYS = frozenset({"name", "type", "id", "tool", "function", "tool_name"})


def _call_from_object(
    obj: Any, tools: _Tools, *, need_arguments: bool
) -> tuple[str, Any, list[str]] | None:
    """Recognise ``{"name", "arguments"|"parameters"}``, OpenAI's ``{"function": {...}}`` and,
    when the tool's schema is known, flat arguments beside the name (``{"name": "finish",
    "summary": ...}``). Returns (tool, raw arguments, repairs)."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str):
        name = obj.get("tool") if isinstance(obj.get("tool"), str) else obj.get("tool_name")
    if not isinstance(name, str):
        return None
    wrapped = next((k for k in ("arguments", "parameters", "args", "input") if k in obj), None)
    flat = {k: v for k, v in obj.items() if k not in _CALL_META_KEYS}
    if wrapped is None and flat and tools.schemas is None:
        return None  # flat arguments are taken only where the schema can check them
    if wrapped is None and not flat and need_arguments and tools.schemas is None:
        if name not in tools:
            tools.resolve(name)  # a bare {"name": "survey"}: worth telling the model
        return None
    resolved, note = tools.resolve(name)
    if resolved is None:
        resolved, note = tools.by_arguments(name, obj[wrapped] if wrapped is not None else flat)
    if resolved is None:
        return None
    notes = [note] if note else []
    if wrapped is not None:
        return resolved, obj[wrapped], notes
    if flat:
        notes.append(f"{resolved}: arguments given at the top level, beside the name")
    return resolved, flat, notes


def _calls_from_json_text(
    text: str, tools: _Tools, *, where: str, need_arguments: bool = True
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]] | None:
    """Parse text holding a call object or a list of them; None unless every call is usable."""
    value, repairs, err = _parse_json_value(text.strip())
    if err is not None:
        return None
    items = value if isinstance(value, list) else [value]
    if not items:
        return None
    calls: list[tuple[str, dict[str, Any]]] = []
    notes: list[str] = []
    for item in items:
        found = _call_from_object(item, tools, need_arguments=need_arguments)
        if found is None:
            return None
        name, raw_args, name_notes = found
        if raw_args is None:
            args = RepairResult({}, [])
        elif isinstance(raw_args, str | dict):
            args = repair_arguments(raw_args)
        else:
            return None  # arguments that are a list or a number: not a call we can run
        if args.arguments is None:
            return None
        arguments = args.arguments
        fit_notes: list[str] = []
        if tools.schemas is not None:
            fit = fit_arguments(name, arguments, tools.schemas.get(name))
            if fit.arguments is None:
                if fit.error and fit.error not in tools.errors:
                    tools.errors.append(fit.error)
                return None
            arguments, fit_notes = fit.arguments, fit.repairs
        notes.append(f"tool call {name!r} recovered from {where} in content")
        notes.extend(name_notes)
        notes.extend(f"{name}: {r}" for r in repairs)
        notes.extend(f"{name}: {r}" for r in args.repairs if r != "arguments given as an object")
        notes.extend(fit_notes)
        calls.append((name, arguments))
    return calls, notes


def _find_hermes(content: str, known: _Tools) -> list[_Found]:
    found: list[_Found] = []
    for m in _HERMES_RE.finditer(content):
        body = m.group(1)
        if body.lstrip().startswith("<function="):
            parsed = _qwen_xml_calls(body, known)
        else:
            parsed = _calls_from_json_text(
                body, known, where="<tool_call> text", need_arguments=False
            )
        if parsed:
            found.append(_Found(m.start(), m.end(), *parsed))
    return found


def _qwen_xml_calls(
    body: str, known: _Tools
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]] | None:
    calls: list[tuple[str, dict[str, Any]]] = []
    for fm in _QWEN_XML_FUNC_RE.finditer(body):
        name = fm.group(1).strip()
        if name not in known:
            return None
        args: dict[str, Any] = {}
        for pm in _QWEN_XML_PARAM_RE.finditer(fm.group(2)):
            raw = pm.group(2)
            value, err = _loads(raw.strip())
            args[pm.group(1).strip()] = raw if err is not None or isinstance(value, str) else value
        calls.append((name, args))
    if not calls:
        return None
    return calls, [
        f"tool call {n!r} recovered from <function=...> XML in content" for n, _ in calls
    ]


def _find_gemma(content: str, known: _Tools) -> list[_Found]:
    found: list[_Found] = []
    pos = 0
    while True:
        m = _GEMMA_CALL_RE.search(content, pos)
        if m is None:
            return found
        brace = m.end() - 1
        end, _closed = _gemma_match(content, brace, "{", "}")
        body = content[brace + 1 : end - 1 if _closed else end]
        span_end = end
        rest = content[end:]
        stripped = rest.lstrip()
        if stripped.startswith(_GEMMA_END):
            span_end = end + (len(rest) - len(stripped)) + len(_GEMMA_END)
        pos = max(span_end, m.end())
        name = m.group(2)
        if name not in known:
            continue
        notes = [f"tool call {name!r} recovered from Gemma <|tool_call> text in content"]
        if m.group(1) is None:
            notes.append(f"{name}: missing 'call' keyword tolerated")
        if not _closed:
            notes.append(f"{name}: unterminated call closed")
        found.append(_Found(m.start(), span_end, [(name, parse_gemma4_arguments(body))], notes))


def _find_fenced(content: str, known: _Tools) -> list[_Found]:
    found: list[_Found] = []
    for m in _FENCED_BLOCK_RE.finditer(content):
        parsed = _calls_from_json_text(m.group(1), known, where="a fenced code block")
        if parsed:
            found.append(_Found(m.start(), m.end(), *parsed))
    return found


DEFINITION_TOOL = ReplaceDefinition.name
_PYTHON_FENCE_RE = re.compile(r"```(python|py|python3)?[^\S\n]*\n(.*?)\n?[^\S\n]*```", re.DOTALL)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _block_definition(source: str) -> tuple[str, str, int] | None:
    """(name, code, statements left out) for a block holding exactly one top-level def or
    class: the code is its imports and that definition, without the rest (a usage example, a
    print) a model adds to show its fix. A method written with its class's indentation is
    dedented first (as ``replace_definition`` itself reads its code)."""
    source = textwrap.dedent(source)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    definitions = [n for n in tree.body if isinstance(n, _DEFINITIONS)]
    if len(definitions) != 1:
        return None
    lines = source.splitlines()
    kept, left_out = [], 0
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom, *_DEFINITIONS)):
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            kept.append("\n".join(lines[first - 1 : node.end_lineno]))
        else:
            left_out += 1
    return definitions[0].name, "\n\n".join(kept), left_out


def addition_target(code: str, prompt: str) -> str | None:
    """The file a phase's prompt names for a definition no file has yet: of the .py paths
    it names, the one test file for a test function, the one other file otherwise; None when
    that is not exactly one (then the tool says no file defines the name)."""
    parsed = _block_definition(code)
    if parsed is None:
        return None
    wants_test = parsed[0].startswith("test")
    paths = list(dict.fromkeys(m.group(1) for m in _PATH_RE.finditer(prompt)))
    fits = [p for p in paths if p.endswith(".py") and is_test_path(p) == wants_test]
    return fits[0] if len(fits) == 1 else None


def _find_definition(content: str, known: _Tools) -> list[_Found]:
    """A fenced Python block that defines one function or class, as a replace_definition
    call: what a coder model writes when it shows its fix. Only one such block per answer
    (two are ambiguous) and only when the phase has the tool; the tool finds the file."""
    if DEFINITION_TOOL not in known:
        return []
    blocks = []
    for m in _PYTHON_FENCE_RE.finditer(content):
        parsed = _block_definition(m.group(2))
        if parsed is not None:
            blocks.append((m, parsed))
    if len(blocks) != 1:
        return []
    m, (name, code, left_out) = blocks[0]
    repair = f"the fenced Python block defining {name} taken as a {DEFINITION_TOOL} call"
    if left_out:
        repair += f" ({left_out} other top-level statement(s) of the block left out)"
    return [_Found(m.start(), m.end(), [(DEFINITION_TOOL, {"code": code})], [repair])]


def _json_span_end(text: str, start: int) -> int:
    """Index just past the bracketed JSON value starting at ``text[start]`` (string-aware)."""
    depth = 0
    i, n = start, len(text)
    in_str: str | None = None
    while i < n:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 2
                continue
            if c == in_str:
                in_str = None
        elif c == '"':
            in_str = c
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


_CALL_START_RE = re.compile(
    r"""(?:\[\s*)?\{\s*["']?(?:name|function|type|arguments|parameters)["']?\s*:"""
)


_MAX_BARE_JSON_TRIES = 32
"""Bound on call-shaped openings tried per message, so adversarial text stays cheap."""


def _find_bare_json(content: str, known: _Tools, taken: list[_Found]) -> list[_Found]:
    """Call-shaped JSON anywhere in prose.

    Only openings that look like a call are tried, and at most ``_MAX_BARE_JSON_TRIES`` of
    them, so content full of code braces does not cost a parse from every brace.
    """
    found: list[_Found] = []
    pos = 0
    tries = 0
    while tries < _MAX_BARE_JSON_TRIES:
        m = _CALL_START_RE.search(content, pos)
        if m is None:
            return found
        tries += 1
        i = m.start()
        covered = next((f for f in taken if f.start <= i < f.end), None)
        if covered is not None:
            pos = covered.end
            continue
        end = _json_span_end(content, i)
        parsed = _calls_from_json_text(content[i:end], known, where="JSON text")
        if parsed:
            found.append(_Found(i, end, *parsed))
            pos = end
        elif end >= len(content):
            return found  # an opening never closed: later ones are inside it, as broken
        else:
            pos = i + 1
    return found


def _overlaps(a: _Found, others: list[_Found]) -> bool:
    return any(a.start < o.end and o.start < a.end for o in others)


_NAMED_JSON_RE = re.compile(r"(?<![\w\"'])([A-Za-z_][\w\-]*)[ \t]*(\(?)[ \t]*(?=\{)")


def _find_named_json(content: str, known: _Tools, taken: list[_Found]) -> list[_Found]:
    """A tool's name followed by its arguments object: ``list_dir {"path": "src"}`` or
    ``read_file({"path": "a.py"})``. Only an exact tool name counts (a word in prose before a
    brace is not a call), and the object must fit the tool's parameters."""
    found: list[_Found] = []
    for m in _NAMED_JSON_RE.finditer(content):
        name = m.group(1)
        if name not in known or any(f.start <= m.start() < f.end for f in taken + found):
            continue
        brace = m.end()
        end = _json_span_end(content, brace)
        value, repairs, err = _parse_json_value(content[brace:end])
        if err is not None or not isinstance(value, dict):
            continue
        if m.group(2) and content[end : end + 1] == ")":
            end += 1
        notes = [f"tool call {name!r} recovered from its name and a JSON object in content"]
        notes.extend(f"{name}: {r}" for r in repairs)
        arguments = value
        if known.schemas is not None:
            fit = fit_arguments(name, value, known.schemas.get(name))
            if fit.arguments is None:
                if fit.error and fit.error not in known.errors:
                    known.errors.append(fit.error)
                continue
            arguments = fit.arguments
            notes.extend(fit.repairs)
        found.append(_Found(m.start(), end, [(name, arguments)], notes))
    return found


def extract_text_tool_calls(
    content: str, known_tools: Collection[str] | Mapping[str, dict[str, Any] | None]
) -> TextCallsResult:
    """Find tool calls the model wrote as text in ``content`` instead of as real tool calls.

    Happens when the server's tool parser does not match the model's output (vLLM returns
    ``finish_reason="stop"`` with the call left in content; llama.cpp servers without a tool
    template always do). Recognised: Hermes/Qwen ``<tool_call>{...}</tool_call>`` (and
    Qwen3-Coder's ``<function=...>`` XML inside it), Gemma 4 ``<|tool_call>call:name{...}``,
    fenced code blocks, bare JSON ``{"name": ..., "arguments"|"parameters": {...}}`` or a list
    of them, and a tool's name followed by its arguments object. Only names of
    ``known_tools`` count (or one unique close spelling of one); anything else stays in
    ``remaining_content`` untouched.

    Given a mapping of tool names to their parameter schemas, calls are also fitted to them
    (:func:`fit_arguments`): flat arguments beside the name are taken, copied schema keywords
    dropped, near-miss argument names renamed. What was call-shaped but unusable is reported
    in ``unknown_tools`` and ``errors``, so the model can be told exactly what was wrong.
    """
    if not content:
        return TextCallsResult([], content or "", [])
    known = _Tools(known_tools)
    found: list[_Found] = []
    for finder in (_find_hermes, _find_gemma, _find_fenced):
        for f in finder(content, known):
            if not _overlaps(f, found):
                found.append(f)
    for f in _find_bare_json(content, known, found):
        if not _overlaps(f, found):
            found.append(f)
    for f in _find_named_json(content, known, found):
        if not _overlaps(f, found):
            found.append(f)
    if not found:
        found = _find_definition(content, known)
    if not found:
        return TextCallsResult([], content, [], known.unknown, known.errors)
    found.sort(key=lambda f: f.start)
    pieces: list[str] = []
    pos = 0
    calls: list[tuple[str, dict[str, Any]]] = []
    repairs: list[str] = []
    for f in found:
        pieces.append(content[pos : f.start])
        pos = f.end
        calls.extend(f.calls)
        repairs.extend(f.repairs)
    pieces.append(content[pos:])
    remaining = re.sub(r"\n{3,}", "\n\n", "".join(pieces)).strip()
    if not re.search(r"\w", remaining):
        # Only the separators between calls are left (``{...}, {...}``): keeping ", ," as the
        # answer's text teaches a small model to answer with commas next time.
        remaining = ""
    return TextCallsResult(calls, remaining, repairs)


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
"""What a string argument of an example call says when the workspace gives no real value: a
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


# --------------------------------------------------------------------------------------------
# Public: what to tell a model whose answer held no call that could be run
# --------------------------------------------------------------------------------------------


_PATH_RE = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]+\.\w+|[\w-]+\.(?:py|rs|go|js|ts|md))\b")
_TICKED_RE = re.compile(r"`[^`]*`")


_SHOWN_CODE_RE = re.compile(r"\(([^\s,()]+\.py), line \d+\):\n```python\n(.*?)\n```", re.DOTALL)


def example_values(prompt: str, files_read: Sequence[str] = ()) -> dict[str, str]:
    """Real values for example calls: the file and a line of the code the phase's prompt
    shows (``locate``), else the file the prompt names or the first one the run read."""
    shown = _SHOWN_CODE_RE.search(prompt)
    if shown:
        lines = [line for line in shown.group(2).splitlines() if line.strip()]
        return {"path": shown.group(1), "old": lines[-1] if lines else ""}
    path = example_path(prompt) or next(iter(files_read), None)
    return {"path": path} if path else {}


def example_path(prompt: str) -> str | None:
    """The file a phase's prompt names (outside `commands` first), for example calls."""
    outside = _TICKED_RE.sub(" ", prompt)
    for text in (outside, prompt):
        match = _PATH_RE.search(text)
        if match:
            return match.group(1)
    return None


_CODE_FENCE_RE = re.compile(r"```[\w+-]*\n")


def no_call_feedback(
    found: TextCallsResult,
    schemas: Mapping[str, dict[str, Any] | None],
    previous: str | None = None,
    *,
    content: str = "",
    path: str | None = None,
    values: Mapping[str, str] | None = None,
) -> str:
    """A specific answer to a turn with text but no runnable call, never the same twice in a row.

    Names what was wrong when something call-shaped was seen (an unknown tool name, with the
    tools there are; an argument, with the exact shape expected), else says no call was found
    and shows the exact format with this phase's tools. When that text is what the model was
    told last time, an example call of another tool is given instead, so a model repeating
    itself is not answered with the same words.
    """
    tools = list(schemas)
    listed = ", ".join(tools)
    parts: list[str] = []
    for name in found.unknown_tools[:3]:
        parts.append(f"There is no tool named {name!r}. The tools in this phase are: {listed}.")
    parts.extend(found.errors[:3])
    wrote_code = bool(_CODE_FENCE_RE.search(content))
    if not parts and wrote_code and DEFINITION_TOOL in schemas:
        parts.append(
            "You wrote code in your answer, but it changed no file: a code block counts as "
            "an edit only when it holds exactly one whole function or class (then it replaces "
            "the definition of that name). Answer with just the one corrected function in one "
            "```python block, or call edit_file with the exact lines to replace (old) and "
            "their replacement (new)."
        )
    elif not parts and wrote_code and "edit_file" in schemas:
        parts.append(
            "You wrote code in your answer, but code in an answer changes no file. To change "
            "a file, call edit_file with the exact lines to replace (old) and their "
            "replacement (new)."
        )
    if not parts:
        parts.append(
            "No tool call was found in your answer, so nothing ran. This run is unattended: "
            "nobody will reply to text."
        )
    example = next((t for t in tools if t != "finish"), tools[0] if tools else "finish")
    if wrote_code and "edit_file" in schemas:
        example = "edit_file"
    done = (
        f", or {call_shape('finish', schemas.get('finish'))} when the phase is done."
        if "finish" in schemas
        else "."
    )
    parts.append(
        f"Answer with one tool call as JSON, for example "
        f"{call_shape(example, schemas.get(example), path=path, values=values)}{done}"
    )
    text = "\n".join(parts)
    if previous is not None and text.strip() == previous.strip():
        others = [t for t in tools if t not in (example, "finish")]
        alt = others[len(previous) % len(others)] if others else example
        text = (
            "Your answer again held no tool call that could be run. Write only the JSON of "
            f"the call, nothing else, e.g. "
            f"{call_shape(alt, schemas.get(alt), path=path, values=values)}. "
            f"Tools: {listed}."
        )
    return text
