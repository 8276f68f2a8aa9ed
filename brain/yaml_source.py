"""YAML files read with positions: one parse, YAML 1.2 core scalars, every value's line.

The one YAML reader for the files people write by hand (workflows, params and matrix files,
brain profiles, presets, fleet files), so all of them read a value the same way and every
problem can name its file, line and column:

* YAML 1.2 core-schema scalars: only ``true``/``false`` are booleans, ints are decimal. YAML
  1.1 (PyYAML's default) reads ``no``, ``off`` and ``y`` as booleans, ``1:30`` as 90 and
  ``0755`` as octal; in prompts, names and params that silently changes values.
* One parse: the text is composed into nodes once and turned into plain data while each
  value's position is recorded by its path (``("servers", 0, "gpus")``).
* Duplicate keys are refused (YAML keeps one of them silently), tags other than the standard
  scalars are refused, alias bombs and deep nesting stop early.

Problems come back as ``YamlProblem`` values (message, 1-based line and column, data path), so
each caller raises its own error type: the pilot a ``WorkflowError``, the brain a
``SpecError``. It reads text it is given; it never opens files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

try:  # libyaml, when PyYAML was built with it
    from yaml.cyaml import CParser as _CParser
except ImportError:  # pragma: no cover - depends on the PyYAML build
    _CParser = None  # type: ignore[assignment, misc]

__all__ = ["DataPath", "Where", "YamlDocument", "YamlProblem", "parse_yaml", "read_yaml_scalar"]

DataPath = tuple[str | int, ...]
"""Where a value sits in the data: mapping keys and list indexes from the root."""

_MAX_NODES = 100_000  # alias bombs ("billion laughs") stop here
_MAX_DEPTH = 64


@dataclass(frozen=True)
class YamlProblem:
    """One problem in a YAML file, where it is (1-based, as editors count) and how to fix it."""

    message: str
    line: int = 1
    column: int = 1
    path: DataPath = ()
    """The value the problem is about (empty: the file as a whole, or a syntax error)."""


def _core_schema_resolvers() -> dict[str | None, list[tuple[str, re.Pattern[str]]]]:
    """Implicit tags of the YAML 1.2 core schema, in PyYAML's resolver-table shape."""
    table: dict[str | None, list[tuple[str, re.Pattern[str]]]] = {}
    for tag, pattern, first in (
        ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
        ("int", r"^[-+]?[0-9]+$", "-+0123456789"),
        (
            "float",
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*|[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+)"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
            "-+0123456789.",
        ),
        ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
        ("merge", r"^<<$", "<"),
    ):
        for char in first:
            key = char or None  # PyYAML files the empty scalar under None
            table.setdefault(key, []).append((f"tag:yaml.org,2002:{tag}", re.compile(pattern)))
    return table


def _construct_int(loader: SafeConstructor, node: yaml.ScalarNode) -> int:
    return int(loader.construct_scalar(node))  # decimal: "0755" is 755, not octal


class _Schema(SafeConstructor, Resolver):
    """Safe construction with YAML 1.2 core scalars: only true/false are booleans.

    YAML 1.1 reads ``no``, ``off`` and ``y`` as booleans, ``1:30`` as 90 and ``0755``
    as octal; in prompts and param defaults that silently changes values.
    """

    yaml_implicit_resolvers = _core_schema_resolvers()
    yaml_constructors = {
        **SafeConstructor.yaml_constructors,
        "tag:yaml.org,2002:int": _construct_int,
    }

    def __init__(self) -> None:
        SafeConstructor.__init__(self)
        Resolver.__init__(self)


class _PyLoader(Reader, Scanner, Parser, Composer, _Schema):
    """The pure-Python parser, used where PyYAML was built without libyaml."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _Schema.__init__(self)


_YamlLoader: type[_PyLoader] | type[Any] = _PyLoader
if _CParser is not None:

    class _CLoader(_CParser, _Schema):  # type: ignore[misc, valid-type]
        """libyaml's parser (C, faster); same nodes and marks as the Python one."""

        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            _Schema.__init__(self)

    _YamlLoader = _CLoader


_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class Where:
    """Where a value sits in the file: its key (if in a mapping) and its node."""

    key: yaml.Node | None
    node: yaml.Node

    @property
    def line(self) -> int:
        """The 1-based line of the value's key, or of the value itself in a list."""
        return (self.key or self.node).start_mark.line + 1


@dataclass
class YamlDocument:
    """Plain data built from YAML, with every value's position by path."""

    filename: str
    text: str
    data: Any
    where: dict[DataPath, Where]
    stand_ins: list[DataPath] = field(default_factory=list)
    """Paths holding a stand-in (the raw text) for a value that could not be read, already
    reported: checks of the data should not report it again."""

    def find(self, path: DataPath) -> tuple[Where | None, DataPath]:
        """The recorded position of ``path``, or of its closest ancestor (and that path)."""
        for n in range(len(path), -1, -1):
            hit = self.where.get(path[:n])
            if hit is not None:
                return hit, path[:n]
        return None, ()


class _Builder:
    """Turns a composed YAML node tree into plain data, recording positions and problems."""

    def __init__(self, loader: Any, text: str, kind: str) -> None:
        self.loader = loader
        self.kind = kind
        self.lines = text.splitlines()
        self.where: dict[DataPath, Where] = {}
        self.errors: list[YamlProblem] = []
        self.count = 0
        self.stack: set[int] = set()
        self.unreadable: set[int] = set()
        self.stand_ins: list[DataPath] = []  # holding a stand-in for an unreadable value

    def error(self, mark: yaml.Mark, path: DataPath, message: str) -> None:
        self.errors.append(YamlProblem(message, mark.line + 1, mark.column + 1, path))

    def build(self, node: yaml.Node, path: DataPath, key: yaml.Node | None = None) -> Any:
        self.count += 1
        if self.count > _MAX_NODES or len(path) > _MAX_DEPTH:
            raise _Abort(
                _mark_problem(
                    node.start_mark,
                    "the document is too large or too deeply nested (an alias loop?); "
                    f"{self.kind}s are small",
                )
            )
        if id(node) in self.stack:
            raise _Abort(_mark_problem(node.start_mark, "an alias refers to itself"))
        self.where.setdefault(path, Where(key, node))
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        self.stack.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                if node.tag != _SEQ_TAG:
                    self.error(node.start_mark, path, _tag_message(node.tag, self.kind))
                return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
            if isinstance(node, yaml.MappingNode):
                if node.tag != _MAP_TAG:
                    self.error(node.start_mark, path, _tag_message(node.tag, self.kind))
                out: dict[str, Any] = {}
                for name, key_node, value_node in self._pairs(node, path):
                    out[name] = self.build(value_node, (*path, name), key_node)
                return out
        finally:
            self.stack.discard(id(node))
        return None  # pragma: no cover - composer yields only these three node kinds

    def _scalar(self, node: yaml.ScalarNode, path: DataPath) -> Any:
        if id(node) in self.unreadable:  # an alias of a value already reported
            self.stand_ins.append(path)
            return node.value
        if not node.tag.startswith(_STANDARD_TAGS):
            self.unreadable.add(id(node))
            self.error(node.start_mark, path, _tag_message(node.tag, self.kind))
            return node.value
        try:
            return self.loader.construct_object(node, deep=True)
        except Exception as exc:  # bad explicit tags (!!int abc): the file's fault
            self.unreadable.add(id(node))
            problem = getattr(exc, "problem", None) or str(exc)
            self.error(node.start_mark, path, f"cannot read this value: {problem}")
            return node.value

    def _pairs(
        self, node: yaml.MappingNode, path: DataPath
    ) -> list[tuple[str, yaml.Node, yaml.Node]]:
        """Explicit keys (duplicates refused) over merged ``<<`` keys, in file order."""
        merged: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        explicit: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                sources = (
                    value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                )
                for source in sources:
                    if not isinstance(source, yaml.MappingNode):
                        self.error(
                            source.start_mark, path, "`<<` merges only mappings (use an anchor)"
                        )
                        continue
                    for name, k, v in self._pairs(source, path):
                        merged.setdefault(name, (k, v))
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self.error(key_node.start_mark, path, self._complex_key_message(key_node, path))
                continue
            name = key_node.value
            if name in explicit:
                first = explicit[name][0].start_mark
                self.error(
                    key_node.start_mark,
                    (*path, name),
                    f'duplicate key "{name}" (first given on line {first.line + 1}); '
                    "YAML keeps only one of them, so remove or rename the other",
                )
                continue
            explicit[name] = (key_node, value_node)
        combined = {**merged, **explicit}
        return [(name, k, v) for name, (k, v) in combined.items()]

    def _complex_key_message(self, key_node: yaml.Node, path: DataPath) -> str:
        number = key_node.start_mark.line
        line = self.lines[number] if number < len(self.lines) else ""
        if "{{" in line:
            key = path[-1] if path and isinstance(path[-1], str) else "key"
            return (
                "a value starting with '{{' must be quoted, or YAML reads it as a mapping: "
                f'write {key}: "{{{{ ... }}}}"'
            )
        return "keys must be plain names, not lists or mappings"


class _Abort(Exception):
    """Stop building: the document cannot be read further."""

    def __init__(self, problem: YamlProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


_STANDARD_TAGS = tuple(
    f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "merge")
)


def _tag_message(tag: str, kind: str) -> str:
    short = tag.replace("tag:yaml.org,2002:", "!!")
    return f"YAML tag {short} is not supported here; {kind}s are plain YAML without tags"


def _mark_problem(mark: yaml.Mark | None, message: str) -> YamlProblem:
    if mark is None:
        return YamlProblem(message)
    return YamlProblem(message, mark.line + 1, mark.column + 1)


def _yaml_message(exc: yaml.MarkedYAMLError, text: str, kind: str) -> str:
    """A YAML syntax error in words a workflow author can act on.

    The parser's own text (which differs between libyaml and the Python parser) is
    kept after the explanation, for the rare case the explanation guesses wrong.
    """
    mark = exc.problem_mark or exc.context_mark
    lines = text.splitlines()
    line_text = lines[mark.line] if mark is not None and mark.line < len(lines) else ""
    at = line_text[mark.column : mark.column + 1] if mark is not None else ""
    problem = exc.problem or ""
    context = exc.context or ""
    detail = problem or context or "invalid YAML"
    if context and problem:
        since = exc.context_mark
        start = (
            f" from line {since.line + 1}"
            if since is not None and mark is not None and since.line != mark.line
            else ""
        )
        detail += f", {context}{start}"
    words = f"{problem} {context}"
    if at == "\t" or "'\\t'" in problem:
        return "a tab character; YAML does not allow tabs for indentation, indent with spaces"
    if "{{" in line_text and ("{" in words or "flow" in words or "unhashable" in words):
        return f"a value starting with '{{{{' must be quoted: key: \"{{{{ ... }}}}\" ({detail})"
    if "mapping values are not allowed" in problem:
        return (
            "unexpected ': '. If this line starts a new key, line it up with the keys "
            "above; if it is text containing ': ', quote it or use a block (key: |, then "
            f"the text indented on the next lines) ({detail})"
        )
    if "could not find expected ':'" in problem:
        return f"expected `key: value`; check this line's indentation and quotes ({detail})"
    if any(k in words for k in ("block end", "expected key", "'-' indicator", "block mapping")):
        return f"bad indentation: keys of one mapping and items of one list must line up ({detail})"
    if "cannot start any token" in problem:
        return f"{at!r} cannot start a value here; quote the value ({detail})"
    if "single document" in words:
        return f"a {kind} holds one YAML document; remove the extra `---` ({detail})"
    return f"{detail}; fix the YAML syntax at this position"


def _reader_problem(exc: yaml.reader.ReaderError, text: str, kind: str) -> YamlProblem:
    position = min(max(exc.position, 0), len(text))
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    return YamlProblem(
        f"invalid character {chr(exc.character)!r} in the file; {kind}s are UTF-8 "
        "text without control characters (other than tab and newline)",
        line,
        column,
    )


def parse_yaml(
    text: str, filename: str = "<yaml>", *, kind: str = "YAML file"
) -> tuple[YamlDocument | None, list[YamlProblem]]:
    """YAML text -> plain data with positions, and the problems found on the way.

    ``(None, [problem])`` when the text cannot be read at all (a syntax error); otherwise the
    document, and problems (duplicate keys, unsupported tags) that leave the rest readable, so a
    caller can report them together with its own checks. ``kind`` names the file in messages
    ("workflow file": "workflow files are plain YAML without tags").
    """
    try:
        loader = _YamlLoader(text)
    except yaml.reader.ReaderError as exc:
        return None, [_reader_problem(exc, text, kind)]
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            return None, [_mark_problem(mark, f"invalid YAML: {_yaml_message(exc, text, kind)}")]
        except yaml.reader.ReaderError as exc:
            return None, [_reader_problem(exc, text, kind)]
        except (yaml.YAMLError, RecursionError) as exc:
            return None, [YamlProblem(f"invalid YAML: {exc}")]
        if root is None:
            return YamlDocument(filename, text, None, {}), []
        builder = _Builder(loader, text, kind)
        try:
            data = builder.build(root, ())
        except _Abort as abort:
            return None, [abort.problem]
        except RecursionError:
            return None, [YamlProblem("the document is nested too deeply")]
        return YamlDocument(filename, text, data, builder.where, builder.stand_ins), builder.errors
    finally:
        loader.dispose()


def read_yaml_scalar(text: str) -> Any:
    """One value written inline (``--set key=VALUE``), read as a file's value would be; raises
    ``ValueError`` with the problem when it is not valid YAML."""
    doc, problems = parse_yaml(text, "<value>", kind="value")
    if doc is None or problems:
        raise ValueError(problems[0].message)
    return doc.data
