"""Tool calls a model wrote as text in its answer's content, in the dialects models write.

Happens when the server's tool parser does not match the model's output: Hermes/Qwen
``<tool_call>`` blocks (and Qwen3-Coder's XML in them), Gemma 4's ``<|tool_call>``, fenced
blocks, bare JSON, a tool's name followed by its arguments, a whole Python definition (taken
as ``replace_definition``). Pure functions, like ``arguments``.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from pilot.tactics.arguments import (
    RepairResult,
    gemma_match,
    loads,
    parse_gemma4_arguments,
    parse_json_value,
    repair_arguments,
)
from pilot.tactics.fitting import SCHEMA_KEYWORDS, fit_arguments, resolve_tool_name
from pilot.tactics.locate import LOCATED_RE, prompt_names
from tools.definitions import ReplaceDefinition, is_test_path

PATH_RE = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]+\.\w+|[\w-]+\.(?:py|rs|go|js|ts|md))\b")
"""A file path in a prompt (``notes/a.py``, ``app.py``)."""


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
# Public: tool calls written as text
# --------------------------------------------------------------------------------------------

_HERMES_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|(?=<tool_call>)|$)", re.DOTALL)
_GEMMA_CALL_RE = re.compile(r"<\|tool_call>\s*(call)?\s*:\s*([\w\-.]+)\s*\{")
_GEMMA_END = "<tool_call|>"
_QWEN_XML_FUNC_RE = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", re.DOTALL)
_QWEN_XML_PARAM_RE = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?(?:</parameter>|$)", re.DOTALL)
FENCE_RE = re.compile(r"```([\w+-]*)[^\S\n]*\n(.*?)\n?[^\S\n]*```", re.DOTALL)
"""A fenced block: its language and body. Scanned with ``finditer``, each match consumes its
closing fence, so a block's close is never taken for the next block's opening."""


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
    value, repairs, err = parse_json_value(text.strip())
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
            value, err = loads(raw.strip())
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
        end, _closed = gemma_match(content, brace, "{", "}")
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
    for m in FENCE_RE.finditer(content):
        parsed = _calls_from_json_text(m.group(2), known, where="a fenced code block")
        if parsed:
            found.append(_Found(m.start(), m.end(), *parsed))
    return found


DEFINITION_TOOL = ReplaceDefinition.name
_PYTHON_LANGUAGES = ("", "python", "py", "python3")
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _block_definition(source: str) -> tuple[str, str, int] | None:
    """(name, code, statements left out) for a block holding exactly one top-level def or
    class: the code is its imports and that definition, without the rest (a usage example, a
    print) a model adds to show its fix."""
    source = textwrap.dedent(source)  # a method written with its class's indentation
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
    paths = list(dict.fromkeys(m.group(1) for m in PATH_RE.finditer(prompt)))
    fits = [p for p in paths if p.endswith(".py") and is_test_path(p) == wants_test]
    return fits[0] if len(fits) == 1 else None


_QUALIFIER_RE = r"\b((?:[A-Z]\w*\.)+){}\b"
"""``LRUCache.popitem``: a name after CapWords classes (``cache.popitem`` is a call)."""


def definition_target(code: str, content: str, prompt: str) -> dict[str, Any]:
    """Which definition a Python block taken as a replace_definition call rewrites, when
    several classes define its name: the file and line the prompt's located code showed it at
    (one header for that name: where the failure ran), else the one qualified name
    (``LRUCache.popitem``) the answer's text, else the prompt, gives it. Empty when neither
    is there; the tool uses these only to choose among several definitions of the name, or
    (a qualified name) to add a method to the class it names."""
    parsed = _block_definition(code)
    if parsed is None:
        return {}
    name = parsed[0]
    member = _method_the_prompt_names(code, name, prompt)
    if member is not None:
        return {"qualified_name": member}
    located = {
        (m.group(3), int(m.group(4))) for m in LOCATED_RE.finditer(prompt) if m.group(2) == name
    }
    if len(located) == 1:
        path, line = located.pop()
        return {"path": path, "line": line}
    pattern = re.compile(_QUALIFIER_RE.format(re.escape(name)))
    for text in (content, prompt):
        qualifiers = {m.group(1) for m in pattern.finditer(text)}
        if len(qualifiers) == 1:
            return {"qualified_name": f"{qualifiers.pop()}{name}"}
    return {}


def _method_the_prompt_names(code: str, cls: str, prompt: str) -> str | None:
    """The ``Class.method`` the prompt names among the methods of a block that writes class
    ``cls`` with more than that one method (the tool then takes that method alone); None
    otherwise."""
    try:
        tree = ast.parse(textwrap.dedent(code))
    except (SyntaxError, ValueError):
        return None
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)
    if node is None:
        return None
    methods = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if len(methods) < 2:
        return None
    named = {
        n
        for n in prompt_names(prompt)
        if n.rpartition(".")[0].rpartition(".")[2] == cls and n.rpartition(".")[2] in methods
    }
    return named.pop() if len(named) == 1 else None


def _imitates_tool(code: str, name: str, known: _Tools) -> bool:
    """Whether a block's function is one of the phase's tools written as Python (``def
    finish(summary):``, ``def replace_definition(code, path=None, ...)``): its name a tool's,
    its parameters among that tool's. The 1.5B wrote one, and it was added to the module it
    was fixing as a new function."""
    if name not in known or known.schemas is None:
        return False
    try:
        tree = ast.parse(textwrap.dedent(code))
    except (SyntaxError, ValueError):
        return False
    node = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)), None
    )
    if node is None:
        return False
    params = {a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs}
    schema = known.schemas.get(name) or {}
    return params <= set(schema.get("properties", {}) or {})


def _find_definition(content: str, known: _Tools) -> list[_Found]:
    """A fenced Python block that defines one function or class, as a replace_definition
    call: what a coder model writes when it shows its fix. Only one such block per answer
    (two are ambiguous; a block defining a test beside it is not counted) and only when the
    phase has the tool; the tool finds the file."""
    if DEFINITION_TOOL not in known:
        return []
    blocks = []
    for m in FENCE_RE.finditer(content):
        if m.group(1).lower() not in _PYTHON_LANGUAGES:
            continue
        parsed = _block_definition(m.group(2))
        if parsed is not None and not _imitates_tool(parsed[1], parsed[0], known):
            blocks.append((m, parsed))
    if len(blocks) > 1:
        # A block that defines a test beside one that defines the fix is the model showing
        # how to check it, not a second edit.
        blocks = [b for b in blocks if not b[1][0].startswith("test")] or blocks
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
        value, repairs, err = parse_json_value(content[brace:end])
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
    of them, and a tool's name followed by its arguments object; a fenced Python block
    defining one function, as a ``replace_definition``, when it is the answer's only call or
    stands beside ``finish`` (then before it). Only names of
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
    elif all(name == "finish" for f in found for name, _ in f.calls):
        # The fix shown as a block beside finish: the block is the edit the answer reports,
        # run before the finish (a block identical to the code is refused, the finish with it).
        found += [f for f in _find_definition(content, known) if not _overlaps(f, found)]
    if not found:
        return TextCallsResult([], content, [], known.unknown, known.errors)
    found.sort(key=lambda f: (f.calls[0][0] == "finish", f.start) if f.calls else (False, f.start))
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
