"""replace_definition: put a whole new function or class in place of the one of that name.

Small models fix code far more reliably by rewriting a whole function than by copying the
exact lines to replace (edit_file's ``old``): shown a failing function, a 0.5B model answers
with the corrected function. This tool finds the definition by its name with ``ast`` (in
the file given, or else in the one Python file that defines it), swaps its lines for the new
ones at the original indentation, adds the imports the new code starts with that the file
lacks, and refuses a result that does not parse. Must not import ``pilot`` or ``brain``.
"""

from __future__ import annotations

import ast
import os
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from tools.base import ToolArgs, ToolContext, ToolError, ToolResult
from tools.files import (
    EDIT_MAX_BYTES,
    SAMPLE_BYTES,
    atomic_write,
    line_ending_of,
    looks_binary,
    unified_diff,
)
from tools.listing import visible_files

_DEFINITION = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_IMPORT = (ast.Import, ast.ImportFrom)
_FENCE_RE = re.compile(r"^\s*```[\w+-]*\s*\n(.*?)\n?\s*```\s*$", re.DOTALL)


class ReplaceDefinitionArgs(ToolArgs):
    code: str = Field(
        description="The whole new source of one function or class, from its def (or "
        "decorator) line to its last line; it may start with the import lines it needs."
    )
    path: str | None = Field(
        default=None,
        description="The Python file, relative to the workspace root. Omitted: the one "
        "Python file that defines this name (tests last).",
    )
    add_to: str | None = Field(
        default=None,
        description="Without `path`, the file a new definition goes to when no file "
        "defines this name yet.",
    )


@dataclass(frozen=True)
class NewDefinition:
    """The parsed ``code`` argument: the definition's name, its lines, the imports before it."""

    name: str
    kind: str
    lines: list[str]
    imports: list[str]
    method: bool
    """Its first parameter is ``self`` or ``cls``: it belongs in a class."""


def parse_new_definition(code: str) -> NewDefinition:
    """The one definition ``code`` holds, or a ToolError that says what it holds instead."""
    fenced = _FENCE_RE.match(code)
    source = textwrap.dedent(fenced.group(1) if fenced else code).strip("\n")
    if not source.strip():
        raise ToolError("`code` is empty; give the whole new function or class.")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ToolError(
            f"`code` is not valid Python (line {exc.lineno}: {exc.msg}); send the whole "
            "definition, from its def line to its last line."
        ) from None
    lines = source.splitlines()
    definitions = [node for node in tree.body if isinstance(node, _DEFINITION)]
    others = [node for node in tree.body if not isinstance(node, (*_DEFINITION, *_IMPORT))]
    if len(definitions) != 1 or others:
        found = ", ".join(_describe(node) for node in definitions + others) or "nothing"
        raise ToolError(
            "`code` must hold exactly one function or class (and the imports it needs); "
            f"it holds {found}. Send one definition per call."
        )
    node = definitions[0]
    first = _first_line(node)
    imports = [
        "\n".join(lines[n.lineno - 1 : n.end_lineno or n.lineno])
        for n in tree.body
        if isinstance(n, _IMPORT)
    ]
    return NewDefinition(
        name=node.name,
        kind="class" if isinstance(node, ast.ClassDef) else "function",
        lines=textwrap.dedent("\n".join(lines[first - 1 : node.end_lineno])).splitlines(),
        imports=imports,
        method=_is_method(node),
    )


def _is_method(node: ast.stmt) -> bool:
    args = getattr(node, "args", None)
    first = args.posonlyargs + args.args if args is not None else []
    return bool(first) and first[0].arg in ("self", "cls")


def _describe(node: ast.stmt) -> str:
    if isinstance(node, _DEFINITION):
        kind = "class" if isinstance(node, ast.ClassDef) else "def"
        return f"{kind} {node.name} (line {node.lineno})"
    return f"a {type(node).__name__.lower()} statement (line {node.lineno})"


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def is_test_path(rel: str) -> bool:
    """Whether ``rel`` is a test file by the usual conventions (tests/ or test_*.py)."""
    parts = rel.split("/")
    name = parts[-1]
    return (
        any(p in ("tests", "test", "testing") for p in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


def _definitions_named(tree: ast.AST, name: str) -> list[ast.stmt]:
    return [node for node in ast.walk(tree) if isinstance(node, _DEFINITION) and node.name == name]


class ReplaceDefinition:
    """Replace (or add) one function or class, found by name."""

    name = "replace_definition"
    description = (
        "Replace a whole function or class with new source: give the complete new definition "
        "(def line to last line); the definition of that name in the file is replaced, at its "
        "indentation, and imports at the start of `code` are added when missing. Without "
        "`path`, the one Python file that defines the name is used. In a file without that "
        "name, the definition is added at its end. Answers with a diff."
    )
    args_model = ReplaceDefinitionArgs
    mutates = True
    known_writes = True  # it writes only the path it resolved for writing

    def run(self, args: ReplaceDefinitionArgs, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        new = parse_new_definition(args.code)
        rel = args.path if args.path else self._defining_file(ctx, new, args.add_to)
        real = ctx.workspace.resolve(rel, for_write=True)
        rel = ctx.workspace.relative(real)
        if not rel.endswith(".py"):
            raise ToolError(f"{rel} is not a Python file; replace_definition edits .py files.")
        if not real.is_file():
            raise ToolError(
                f"no such file {rel!r}. To create it use write_file; to find where "
                f"{new.name} is defined, leave `path` out."
            )
        data = _read_text(real, rel)
        text = data.decode("utf-8", errors="surrogateescape")
        newline = line_ending_of(data)
        updated, verb = self._replaced(text.replace("\r\n", "\n"), new, rel)
        if newline == "\r\n":
            updated = updated.replace("\n", "\r\n")
        if updated == text:
            raise ToolError(
                f"the {new.kind} {new.name} you wrote is the same as the one in {rel}, so "
                "nothing changed. Write it again with the lines that cause the failure "
                "corrected, whole, in one ```python block."
            )
        atomic_write(real, updated.encode("utf-8", errors="surrogateescape"))
        return ToolResult.ok(
            f"{verb} {new.kind} {new.name} in {rel}.\n{unified_diff(text, updated, rel)}"
        )

    def _defining_file(self, ctx: ToolContext, new: NewDefinition, add_to: str | None) -> str:
        """The one .py file that defines ``new``'s name (outside the tests first; as a
        method or not, like ``new``, when several do), or a ToolError."""
        pattern = re.compile(rf"^([ \t]*)(?:async\s+def|def|class)\s+{re.escape(new.name)}\b", re.M)
        hits: dict[str, bool] = {}  # file -> defines it indented (in a class)
        for rel in visible_files(ctx.workspace).files:
            full = os.path.join(ctx.workspace.root, rel)
            if not rel.endswith(".py") or os.path.islink(full):
                continue  # a link may lead out of the workspace: never read through one
            try:
                with open(full, "rb") as fh:
                    head = fh.read(EDIT_MAX_BYTES)
            except OSError:
                continue
            indents = [m.group(1) for m in pattern.finditer(head.decode("utf-8", "replace"))]
            if indents:
                hits[rel] = any(indents)
        source = [h for h in hits if not is_test_path(h)] or list(hits)
        if len(source) > 1:
            alike = [h for h in source if hits[h] == new.method]
            source = alike if len(alike) == 1 else source
        if len(source) == 1:
            return source[0]
        if not source and add_to:
            return add_to
        if not source:
            raise ToolError(
                f"no Python file in the workspace defines {new.name}; give `path` to add it "
                "to a file."
            )
        shown = ", ".join(source[:8]) + (", ..." if len(source) > 8 else "")
        raise ToolError(f"{new.name} is defined in {len(source)} files ({shown}); give `path`.")

    def _replaced(self, text: str, new: NewDefinition, rel: str) -> tuple[str, str]:
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            raise ToolError(
                f"{rel} does not parse now (line {exc.lineno}: {exc.msg}); fix that line with "
                "edit_file first."
            ) from None
        lines = text.splitlines()
        found = _definitions_named(tree, new.name)
        if len(found) > 1:
            in_classes = {
                id(child)
                for node in ast.walk(tree)
                if isinstance(node, ast.ClassDef)
                for child in node.body
            }
            alike = [n for n in found if (id(n) in in_classes) == new.method]
            found = alike if len(alike) == 1 else found
        if len(found) > 1:
            where = ", ".join(str(n.lineno) for n in found)
            raise ToolError(
                f"{new.name} is defined {len(found)} times in {rel} (lines {where}); change "
                "the one you mean with edit_file."
            )
        at, added = _missing_imports(lines, new.imports, tree)
        if found:
            node = found[0]
            first, last = _first_line(node), node.end_lineno or node.lineno
            indent = re.match(r"\s*", lines[first - 1]).group(0)  # type: ignore[union-attr]
            body = [indent + line if line.strip() else line for line in new.lines]
            lines[first - 1 : last] = body
            verb = "Replaced"
            if first <= at:  # a definition above the imports: they move down with it
                at += len(body) - (last - first + 1)
        else:
            while lines and not lines[-1].strip():
                lines.pop()
            lines += ["", "", *new.lines]
            verb = "Added"
        lines[at:at] = added
        updated = "\n".join(lines) + "\n"
        try:
            ast.parse(updated)
        except SyntaxError as exc:
            raise ToolError(
                f"with the new {new.kind} {new.name}, {rel} would not parse (line "
                f"{exc.lineno}: {exc.msg}); nothing was changed."
            ) from None
        return updated, verb


def _missing_imports(
    lines: list[str], imports: list[str], tree: ast.Module
) -> tuple[int, list[str]]:
    """Where new imports go (after the module's last top-level import, else its docstring)
    and the lines of each of ``imports`` the file does not have yet."""
    present = {line.strip() for line in lines}
    added = [
        line for block in imports if block.strip() not in present for line in block.splitlines()
    ]
    top = [node for node in tree.body if isinstance(node, _IMPORT)]
    first = tree.body[0] if tree.body else None
    if top:
        at = max(node.end_lineno or node.lineno for node in top)
    elif isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        at = first.end_lineno or 1
    else:
        at = 0
    return at, added


def _read_text(real: Path, rel: str) -> bytes:
    with open(real, "rb") as fh:
        if looks_binary(fh.read(SAMPLE_BYTES)):
            raise ToolError(f"{rel} is a binary file; replace_definition edits Python source.")
        if os.fstat(fh.fileno()).st_size > EDIT_MAX_BYTES:
            raise ToolError(f"{rel} is too large for replace_definition; use edit_file.")
        fh.seek(0)
        return fh.read()
