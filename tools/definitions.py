"""replace_definition: put a whole new function or class in place of the one of that name.

Small models fix code far more reliably by rewriting a whole function than by copying the
exact lines to replace (edit_file's ``old``): shown a failing function, a 0.5B model answers
with the corrected function. This tool finds the definition by its name with ``ast`` (in
the file given, or else in the one Python file that defines it), swaps its lines for the new
ones at the original indentation, adds the imports the new code starts with that the file
lacks, and refuses a result that does not parse. A library of classes defines one method name
in several classes (cachetools' ``LRUCache.popitem`` and ``FIFOCache.popitem``):
``qualified_name``
takes the qualified name (``Class.method``, ``Outer.Inner.method``) and a bare name that
several classes define is refused with the qualified names to choose from, never guessed.
Must not import ``pilot`` or ``brain``.
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
_QUALIFIED_RE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


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
    qualified_name: str | None = Field(
        default=None,
        description="Which definition to replace when several classes define the name: its "
        "qualified name, `Class.method` or `Outer.Inner.method` (or just the class). "
        "Omitted: the name on the def line of `code`.",
    )
    line: int | None = Field(
        default=None,
        description="With `path`, the line the definition to replace starts on (its def or "
        "first decorator, as the located code shows it): which of several definitions of "
        "the name is meant.",
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
    members: tuple[str, ...] = ()
    """For a class whose body is methods alone (after a docstring): each method's source,
    dedented; a model that rewrites one method often writes it inside its class line."""


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
        members=_members(node, lines),
    )


def _members(node: ast.stmt, lines: list[str]) -> tuple[str, ...]:
    if not isinstance(node, ast.ClassDef):
        return ()
    body = list(node.body)
    if docstring_node(node) is not None:
        body = body[1:]
    if not body or not all(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in body):
        return ()
    return tuple(textwrap.dedent("\n".join(lines[_first_line(n) - 1 : n.end_lineno])) for n in body)


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


@dataclass(frozen=True)
class Qualified:
    """One definition of a module with its qualified name (``LRUCache.popitem``)."""

    name: str
    node: ast.stmt
    in_class: bool
    """It sits directly in a class body (a method, or a class nested in a class)."""


def qualified_definitions(tree: ast.AST) -> list[Qualified]:
    """Every function and class of ``tree`` in source order, named by the classes and
    functions around it (without ``<locals>``), inside ``if``/``try`` blocks too."""
    found: list[Qualified] = []

    def visit(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _DEFINITION):
                name = prefix + child.name
                found.append(Qualified(name, child, in_class))
                visit(child, name + ".", isinstance(child, ast.ClassDef))
            elif isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                visit(child, prefix, in_class)

    visit(tree, "", False)
    return found


def matching(definitions: list[Qualified], target: str) -> list[Qualified]:
    """The definitions ``target`` names: for a bare name, every one of that name; for a
    qualified one, the definition of that qualified name when there is one, else those it ends
    (``Inner.method`` names ``Outer.Inner.method``)."""
    if "." not in target:
        return [d for d in definitions if d.name.rpartition(".")[2] == target]
    exact = [d for d in definitions if d.name == target]
    return exact or [d for d in definitions if d.name.endswith("." + target)]


def _member_named(new: NewDefinition, name: str | None) -> tuple[NewDefinition, list[str]]:
    """The method ``name`` (``Class.method``) names, taken from ``new`` when ``new`` is that
    class written with several methods, and the names of the others, left out: a small model
    asked to fix ``LRUCache.popitem`` writes the class back with ``__init__`` rewritten too,
    and the class's rewrite broke what the task did not ask to change. ``new`` as it is
    otherwise."""
    if not name or new.kind != "class" or len(new.members) < 2:
        return new, []
    cls, _, method = name.strip().rpartition(".")
    if cls.rpartition(".")[2] != new.name:
        return new, []
    members = [parse_new_definition(code) for code in new.members]
    chosen = [m for m in members if m.name == method]
    if len(chosen) != 1:
        return new, []
    return chosen[0], [f"{new.name}.{m.name}" for m in members if m.name != method]


def target_name(name: str | None, new: NewDefinition) -> str:
    """The qualified name to replace: ``name`` (the ``qualified_name`` argument) when it ends
    in the name ``code`` defines, ``name`` taken as the class around it otherwise, the bare
    name without it."""
    if not name or not name.strip():
        return new.name
    name = name.strip()
    if not _QUALIFIED_RE.match(name):
        raise ToolError(
            f"`qualified_name` {name!r} is not a qualified name; give it as Class.method "
            f"(dots between names), e.g. {new.name!r} or 'SomeClass.{new.name}'."
        )
    return name if name.split(".")[-1] == new.name else f"{name}.{new.name}"


def _choices(definitions: list[Qualified]) -> str:
    return ", ".join(f"{d.name} (line {d.node.lineno})" for d in definitions)


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
        new, passed_over = _member_named(parse_new_definition(args.code), args.qualified_name)
        target = target_name(args.qualified_name, new)
        rel = args.path if args.path else self._defining_file(ctx, new, target, args.add_to)
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
        line = args.line if args.path else None
        updated = text.replace("\r\n", "\n")
        partial = _partial_class(updated, new, target)
        if partial is None:
            updated, verb, qualified = self._replaced(updated, new, target, rel, line)
        else:  # methods written inside their class line: each replaces its own, the rest stays
            names, verbs = [], set()
            for member in partial:
                updated, verb, name = self._replaced(
                    updated, member, f"{target}.{member.name}", rel, None
                )
                names.append(name)
                verbs.add(verb)
            verb = "Replaced" if "Replaced" in verbs else "Added"
            kind = "method" if len(names) == 1 else "methods"
            qualified = f"{', '.join(names)} (written in its class; the class's other members kept)"
            new = NewDefinition(new.name, kind, [], [], True)
        if newline == "\r\n":
            updated = updated.replace("\n", "\r\n")
        if updated == text:
            raise ToolError(
                f"the {new.kind} {new.name} you wrote is the same as the one in {rel}, so "
                "nothing changed. Write it again with the lines that cause the failure "
                "corrected, whole, in one ```python block."
            )
        atomic_write(real, updated.encode("utf-8", errors="surrogateescape"))
        if passed_over:
            qualified += (
                f" (taken from the class written; its other methods, {', '.join(passed_over)}, "
                f"left as they are: qualified_name names {args.qualified_name}; send one alone "
                "to change it)"
            )
        return ToolResult.ok(
            f"{verb} {new.kind} {qualified} in {rel}.\n{unified_diff(text, updated, rel)}"
        )

    def _defining_file(
        self, ctx: ToolContext, new: NewDefinition, target: str, add_to: str | None
    ) -> str:
        """The one .py file that defines ``target`` (outside the tests first; as a method or
        not, like ``new``, when several define a bare name), or a ToolError. A qualified
        ``target`` is looked up by its outermost name, then in each candidate's ``ast``."""
        parts = target.split(".")
        pattern = re.compile(rf"^([ \t]*)(?:async\s+def|def|class)\s+{re.escape(parts[0])}\b", re.M)
        hits: dict[str, bool] = {}  # file -> defines it indented (in a class)
        for rel in visible_files(ctx.workspace).files:
            full = os.path.join(ctx.workspace.root, rel)
            if not rel.endswith(".py") or os.path.islink(full):
                continue  # a link may lead out of the workspace: never read through one
            try:
                with open(full, "rb") as fh:
                    head = fh.read(EDIT_MAX_BYTES).decode("utf-8", "replace")
            except OSError:
                continue
            indents = [m.group(1) for m in pattern.finditer(head)]
            if indents and len(parts) > 1:
                indents = [" "] if _holds(head, target) else []
            if indents:
                hits[rel] = any(indents)
        source = [h for h in hits if not is_test_path(h)] or list(hits)
        if len(source) > 1 and len(parts) == 1:
            alike = [h for h in source if hits[h] == new.method]
            source = alike if len(alike) == 1 else source
        if len(source) == 1:
            return source[0]
        if not source and add_to and len(parts) == 1:
            return add_to
        if not source:
            raise ToolError(
                f"no Python file in the workspace defines {target}; give `path` to add it "
                "to a file."
            )
        shown = ", ".join(source[:8]) + (", ..." if len(source) > 8 else "")
        raise ToolError(f"{target} is defined in {len(source)} files ({shown}); give `path`.")

    def _replaced(
        self, text: str, new: NewDefinition, target: str, rel: str, line: int | None
    ) -> tuple[str, str, str]:
        """The file's new text, the verb (Replaced/Added) and the qualified name changed.
        ``line`` chooses among several definitions of ``target`` the one starting there (a
        line that starts none of them chooses nothing: the file may have moved since)."""
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            raise ToolError(
                f"{rel} does not parse now (line {exc.lineno}: {exc.msg}); fix that line with "
                "edit_file first."
            ) from None
        lines = text.splitlines()
        definitions = qualified_definitions(tree)
        found = matching(definitions, target)
        if len(found) > 1 and "." not in target:
            alike = [d for d in found if d.in_class == new.method]
            found = alike if len(alike) == 1 else found
        if len(found) > 1 and line is not None:
            at_line = [d for d in found if line in (d.node.lineno, _first_line(d.node))]
            found = at_line if len(at_line) == 1 else found
        if len(found) > 1:
            raise ToolError(
                f"{target} is defined {len(found)} times in {rel}: {_choices(found)}. Give "
                "`qualified_name` for the one you mean (e.g. qualified_name="
                f'"{found[0].name}"), or write the method inside its class line '
                f"(class {found[0].name.rpartition('.')[0] or 'Name'}: ...): only the methods "
                "written are replaced."
            )
        scope: Qualified | None = None
        if not found and "." in target:
            scope = _scope_of(definitions, target, rel)
        at, added = _missing_imports(lines, new.imports, tree)
        if found:
            node = found[0].node
            qualified = found[0].name
            first, last = _first_line(node), node.end_lineno or node.lineno
            indent = re.match(r"\s*", lines[first - 1]).group(0)  # type: ignore[union-attr]
            written = _with_docstring_of(new.lines, node, lines)
            if written is not new.lines:
                qualified += " (its docstring kept: the code sent had none)"
            body = [indent + line if line.strip() else line for line in written]
            lines[first - 1 : last] = body
            verb = "Replaced"
            if first <= at:  # a definition above the imports: they move down with it
                at += len(body) - (last - first + 1)
        elif scope is not None:  # a new method at the end of the class the name gives
            qualified = f"{scope.name}.{new.name}"
            last = scope.node.end_lineno or scope.node.lineno
            inner = _first_line(scope.node.body[0])  # type: ignore[attr-defined]
            indent = re.match(r"\s*", lines[inner - 1]).group(0)  # type: ignore[union-attr]
            body = ["", *(indent + line if line.strip() else line for line in new.lines)]
            lines[last:last] = body
            verb = "Added"
            if last <= at:
                at += len(body)
        elif new.method:
            # A def taking self added at module level is never what was meant.
            classes = [d.name for d in definitions if isinstance(d.node, ast.ClassDef)]
            shown = ", ".join(classes[:8]) + (", ..." if len(classes) > 8 else "")
            where = f"the classes of {rel}: {shown}" if classes else f"{rel} defines no class"
            raise ToolError(
                f"{new.name} takes self or cls first: it is a method, and no {new.name} is "
                f"defined in {rel}; nothing was changed. Give "
                f'qualified_name="Class.{new.name}" with its class, or write it inside its '
                f"class line, or use the name of the method you mean ({where})."
            )
        else:
            qualified = new.name
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
                f"with the new {new.kind} {qualified}, {rel} would not parse (line "
                f"{exc.lineno}: {exc.msg}); nothing was changed."
            ) from None
        return updated, verb, qualified


def docstring_node(node: ast.AST) -> ast.Expr | None:
    """The statement holding the docstring of a module, class or function (its lines are
    wanted, not only its text, which ``ast.get_docstring`` gives); None when it has none."""
    if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    if ast.get_docstring(node, clean=False) is None:
        return None
    first = node.body[0]
    return first if isinstance(first, ast.Expr) else None


def _with_docstring_of(new_lines: list[str], old: ast.stmt, file_lines: list[str]) -> list[str]:
    """``new_lines`` (a function, dedented) with the docstring of the function ``old`` put back
    when they have none: a model rewriting a long function leaves the docstring out to fit
    its answer (shown without it, or cut at its output limit), and losing the documentation
    and its doctests is never the fix asked for. The same list when nothing is added."""
    if not isinstance(old, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return new_lines
    kept = docstring_node(old)
    try:
        tree = ast.parse("\n".join(new_lines))
    except SyntaxError:
        return new_lines
    fresh = tree.body[0] if tree.body else None
    if kept is None or not isinstance(fresh, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return new_lines
    if docstring_node(fresh) is not None or fresh.body[0].lineno == fresh.lineno:
        return new_lines  # it has one, or its body is on the def line
    old_indent = " " * kept.col_offset
    new_indent = " " * fresh.body[0].col_offset
    text = file_lines[kept.lineno - 1 : kept.end_lineno or kept.lineno]
    moved = [
        new_indent + line[len(old_indent) :] if line.startswith(old_indent) else line
        for line in text
    ]
    at = fresh.body[0].lineno - 1
    while at > 0 and (not new_lines[at - 1].strip() or new_lines[at - 1].lstrip()[:1] == "#"):
        at -= 1  # after the signature, before the blank lines and comments the body starts with
    return new_lines[:at] + moved + new_lines[at:]


def _partial_class(text: str, new: NewDefinition, target: str) -> list[NewDefinition] | None:
    """The methods of ``new`` one by one when it is a class of methods alone that leaves
    out members the file's class ``target`` has: a rewrite of those methods, not of the
    class (taken whole, it would delete the rest). None: take ``new`` as it is."""
    if not new.members:
        return None
    try:
        found = matching(qualified_definitions(ast.parse(text)), target)
    except (SyntaxError, ValueError):
        return None  # the tool says so when it parses the file again
    classes = [d.node for d in found if isinstance(d.node, ast.ClassDef)]
    if len(classes) != 1:
        return None
    members = [parse_new_definition(code) for code in new.members]
    given = {m.name for m in members}
    kept = [
        n
        for n in classes[0].body
        if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
        and getattr(n, "name", None) not in given
    ]
    if not kept:
        return None  # every member rewritten: the class as written
    first = members[0]
    members[0] = NewDefinition(first.name, first.kind, first.lines, new.imports, first.method)
    return members


def _holds(text: str, target: str) -> bool:
    """Whether the module ``text`` defines ``target``, or the class a new ``target`` would go
    in (False when it does not parse: then the tool says so once the file is chosen)."""
    try:
        definitions = qualified_definitions(ast.parse(text))
    except (SyntaxError, ValueError):
        return False
    scope = target.rsplit(".", 1)[0]
    return bool(matching(definitions, target)) or any(
        isinstance(d.node, ast.ClassDef) for d in matching(definitions, scope)
    )


def _scope_of(definitions: list[Qualified], target: str, rel: str) -> Qualified:
    """The one class a new ``target`` goes in, or a ToolError naming what the file has."""
    scope, _, leaf = target.rpartition(".")
    classes = [d for d in matching(definitions, scope) if isinstance(d.node, ast.ClassDef)]
    if len(classes) == 1:
        return classes[0]
    if classes:
        raise ToolError(
            f"{scope} names {len(classes)} classes in {rel}: {_choices(classes)}; give "
            "`qualified_name` with the outer class too."
        )
    same = [d for d in definitions if d.name.split(".")[-1] == leaf]
    known = _choices(same) if same else "none of that name"
    raise ToolError(
        f"{rel} has no class {scope} for {target}; definitions of {leaf} there: {known}."
    )


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
    elif first is not None and docstring_node(tree) is first:
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
