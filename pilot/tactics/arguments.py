"""Deterministic repair of a tool call's arguments written imperfectly by a local model.

Small models served by vLLM or llama.cpp often emit almost-right arguments: a trailing comma or
single quotes, a JSON object wrapped in a code fence, Gemma 4's ``<|"|>`` string delimiters
leaking through the parser, or Gemma 4's own call syntax. Re-prompting costs a turn; these
cheap, deterministic repairs come first, and every repair applied is named so the run's events
say exactly what was changed (a repaired call is recorded next to what the server really sent).

Pure functions only: no I/O, no logging, no model calls. Nothing here ever raises on bad input;
what cannot be repaired is reported as an error the model can read.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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


_TRIPLE_OPEN_RE = re.compile(r"(?<=:)\s*(?<!\\)(\"\"\"|''')")
_TRIPLE_CLOSE_AFTER = r"(?=\s*(?:,\s*[\"']?\w+[\"']?\s*:|[}\]]|$))"


def _triple_quoted_strings(text: str) -> str:
    """A value written as a Python triple-quoted string (code in JSON, as small models write
    it) as a JSON string. The value ends at the triple quote followed by the next key or a
    closer, so the code's own docstring stays inside it."""
    out: list[str] = []
    pos = 0
    while (opened := _TRIPLE_OPEN_RE.search(text, pos)) is not None:
        quote = opened.group(1)
        closer = re.compile(re.escape(quote) + _TRIPLE_CLOSE_AFTER)
        closed = closer.search(text, opened.end())
        if closed is None:
            break
        value = _block_value(text[opened.end() : closed.start()])
        out += [text[pos : opened.start(1)], json.dumps(value, ensure_ascii=False)]
        pos = closed.end()
    return "".join(out) + text[pos:] if out else text


def _block_value(content: str) -> str:
    """A triple-quoted value's text: its blank edge lines dropped, dedented."""
    lines = content.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return textwrap.dedent("\n".join(lines)).strip()


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
    ("Python triple-quoted strings converted to JSON strings", _triple_quoted_strings),
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


def loads(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except (ValueError, RecursionError) as exc:
        return None, str(exc)


def parse_json_value(text: str) -> tuple[Any, list[str], str | None]:
    """Parse JSON-ish text into any JSON value, applying the repairs in order until it parses."""
    value, err = loads(text)
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
        value, err = loads(current)
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
    value, step_repairs, err = parse_json_value(text)
    repairs.extend(step_repairs)
    # Arguments double-encoded as a JSON string of JSON (some templates serialise twice).
    for _ in range(3):
        if not isinstance(value, str):
            break
        inner = value.strip()
        if not inner.startswith(("{", "[", "```")):
            break
        value, inner_repairs, err = parse_json_value(inner)
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


def gemma_match(s: str, i: int, open_c: str, close_c: str) -> tuple[int, bool]:
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
        end, closed = gemma_match(s, i, "{", "}")
        return parse_gemma4_arguments(s[i + 1 : end - 1 if closed else end]), end
    if s[i] == "[":
        end, closed = gemma_match(s, i, "[", "]")
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
