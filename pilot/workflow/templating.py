"""Jinja templating for workflow files: one sandboxed, strict environment, checked at load time.

Templates (system prompt, phase prompts, checks, workspace path and branch) are
compiled when the workflow is loaded, and every reference to a variable is checked
against what that template will really see, so a typo like ``params.nmae`` fails
in the second the user runs ``pilot run``, not hours later in phase three. Errors
are reported at the file's line (the template's first line plus its inner line).

This module renders text; it never runs commands or touches files. The sandbox
keeps a template from reaching Python internals (``__class__`` and friends).
"""

from __future__ import annotations

import difflib
import shlex
import traceback
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import jinja2
from jinja2 import StrictUndefined, meta, nodes
from jinja2.sandbox import SandboxedEnvironment

from pilot.errors import WorkflowError
from pilot.workflow.template_limits import (
    LimitedEnvironment,
    TemplateTooCostly,
    bounded_filters,
    render_bounded,
)

__all__ = [
    "RunContext",
    "SourceSpan",
    "TemplateKind",
    "WorkflowTemplate",
    "available_names",
    "compile_template",
    "make_environment",
]

#: Which context a template is rendered in; decides which variables it may use.
TemplateKind = Literal["workspace_path", "branch", "system", "phase"]

_TEMPLATE_FILENAME = "<workflow-template>"

# What each kind of template sees, beyond `params` (whose names come from the file).
# workspace.path is rendered before the workspace exists and the branch before the
# branch exists, so those two see less of `run`.
_RUN_FIELDS: dict[str, tuple[str, ...]] = {
    "workspace_path": ("id", "started_at"),
    "branch": ("id", "started_at", "workspace"),
    "system": ("id", "started_at", "workspace", "branch"),
    "phase": ("id", "started_at", "workspace", "branch"),
}
_PHASE_FIELDS = ("name", "index", "count", "description")
_WORKFLOW_FIELDS = ("name", "description")
_DICT_METHODS = frozenset(n for n in dir(dict) if not n.startswith("_"))


@dataclass(frozen=True)
class RunContext:
    """What templates know about the run: ``run.id``, ``run.started_at``, ...

    ``workspace`` (absolute path) and ``branch`` are filled in once known; templates
    rendered before that (workspace.path, branch) cannot refer to them.
    """

    id: str
    started_at: str = ""
    workspace: str = ""
    branch: str = ""

    def as_dict(self, kind: TemplateKind) -> dict[str, str]:
        """The fields a template of ``kind`` may use."""
        return {name: getattr(self, name) for name in _RUN_FIELDS[kind]}


def available_names(kind: TemplateKind) -> tuple[str, ...]:
    """Top-level variables a template of ``kind`` sees."""
    if kind == "phase":
        return ("params", "workflow", "run", "phase")
    return ("params", "workflow", "run")


class Raw(str):
    """A value a command template puts in as it is (``| raw``), or already quoted."""


def _shell_quote(value: Any) -> Raw:
    return Raw(shlex.quote(str(value)))


def _raw(value: Any) -> Raw:
    return Raw(str(value))


def _quoted_output(value: Any) -> Any:
    """Every ``{{ ... }}`` of a command template: one shell word, unless marked ``raw``."""
    if isinstance(value, Raw):
        return str(value)
    return shlex.quote(str(value))


def make_environment(*, commands: bool = False) -> SandboxedEnvironment:
    """A Jinja environment for workflow templates.

    Sandboxed (templates come from files users download and share), strict about
    undefined names (a silent empty string in a prompt is a bug that costs a
    night), no HTML autoescaping (these are prompts and shell commands), and block
    tags that do not leave stray blank lines in prompts.

    ``commands``: the environment of the templates that become shell commands (a phase's
    ``check`` and ``context``). There every ``{{ ... }}`` is quoted as one shell word, so a
    param never becomes shell (``--param 'target=x; rm -rf ~'`` is the argument
    ``'x; rm -rf ~'``); ``| raw`` puts a value in as it is, for a param that is a command
    by design (``{{ params.test_command | raw }}``). ``shell_quote`` quotes explicitly
    (anywhere, and never twice).
    """
    env = LimitedEnvironment(
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_quoted_output if commands else None,
    )
    env.filters["shell_quote"] = _shell_quote
    env.filters["raw"] = _raw
    bounded_filters(env.filters)
    return env


@dataclass(frozen=True)
class SourceSpan:
    """Where a template's text sits in the file, to turn template lines into file lines.

    ``first_line`` is the 1-based file line of the template's first line and
    ``column`` the 1-based column its text starts at. For ``|`` block scalars the
    mapping is exact; for folded or multi-line flow scalars, where YAML joins lines,
    it is clamped to ``last_line``.
    """

    file: str | None
    first_line: int
    column: int
    last_line: int

    def position(self, inner_line: int | None) -> tuple[int, int]:
        """File line and column of the template's ``inner_line`` (1-based)."""
        if inner_line is None or inner_line < 1:
            return self.first_line, self.column
        return min(self.first_line + inner_line - 1, self.last_line), self.column


@dataclass(frozen=True)
class WorkflowTemplate:
    """A compiled template and where it came from, so render errors point into the file."""

    field: str
    kind: TemplateKind
    source: str
    span: SourceSpan
    template: jinja2.Template | None = field(repr=False, compare=False)
    """None for a text with no template syntax: it renders to itself."""

    def render(self, context: Mapping[str, Any]) -> str:
        """Render with ``context``; any failure becomes a located ``WorkflowError``."""
        if self.template is None:
            return self.source
        try:
            return render_bounded(self.template, context)
        except Exception as exc:  # any template failure is the workflow's, mapped once here
            raise self.error(_template_line(exc), _describe_render_error(exc)) from exc

    def error(self, inner_line: int | None, message: str) -> WorkflowError:
        line, column = self.span.position(inner_line)
        return WorkflowError(
            message, file=self.span.file, line=line, column=column, field=self.field
        )


def compile_template(
    env: SandboxedEnvironment,
    source: str,
    *,
    field: str,
    kind: TemplateKind,
    span: SourceSpan,
    param_names: Collection[str],
) -> tuple[WorkflowTemplate | None, list[WorkflowError]]:
    """Compile ``source`` and check every variable it names; return it and the problems.

    Static checks catch what rendering alone would miss: a ``params.nmae`` inside an
    ``{% if %}`` branch that the load-time render does not take.
    """
    if is_literal(source):
        return WorkflowTemplate(field, kind, source, span, None), []
    try:
        ast = env.parse(source)
        # Compiled from the tree just parsed (Jinja takes either): one parse, not two. Code
        # generation folds constants only, never a node that names a variable, so the checks
        # below read the same names.
        compiled = env.from_string(ast)
    except jinja2.TemplateSyntaxError as exc:
        located = WorkflowTemplate(field, kind, source, span, env.from_string(""))
        hint = "" if isinstance(exc, jinja2.TemplateAssertionError) else f"; {_SYNTAX_HINT}"
        return None, [located.error(exc.lineno, f"template syntax error: {exc.message}{hint}")]
    except Exception as exc:  # e.g. RecursionError on absurd nesting: still the file's fault
        located = WorkflowTemplate(field, kind, source, span, env.from_string(""))
        return None, [located.error(None, f"template cannot be compiled: {exc!r}")]
    template = WorkflowTemplate(field, kind, source, span, compiled)
    return template, _check_names(template, ast, kind, param_names)


_JINJA_MARKS = ("{{", "{%", "{#", "\r")


def is_literal(source: str) -> bool:
    """Whether ``source`` renders to itself in ``make_environment``'s Jinja: no expression,
    tag or comment starts in it (line statements are off), and no carriage return (which
    Jinja would turn into a newline; a trailing newline is kept). Most prompts are such long
    texts, and a run's start and every resume skip parsing and compiling them."""
    return not any(mark in source for mark in _JINJA_MARKS)


_SYNTAX_HINT = (
    "Jinja uses {{ expression }} and {% tag %} ... {% endtag %}; "
    "write {{ '{{' }} for a literal '{{'"
)


def _check_names(
    template: WorkflowTemplate,
    ast: nodes.Template,
    kind: TemplateKind,
    param_names: Collection[str],
) -> list[WorkflowError]:
    known: dict[str, Collection[str]] = {
        "params": param_names,
        "workflow": _WORKFLOW_FIELDS,
        "run": _RUN_FIELDS[kind],
    }
    if kind == "phase":
        known["phase"] = _PHASE_FIELDS
    problems: list[WorkflowError] = []
    undeclared = meta.find_undeclared_variables(ast)
    for name in sorted(undeclared - set(known)):
        node = next(
            (n for n in ast.find_all(nodes.Name) if n.name == name and n.ctx == "load"), None
        )
        close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
        hint = f' (did you mean "{close[0]}"?)' if close else ""
        problems.append(
            template.error(
                node.lineno if node else None,
                f'undefined variable "{name}"{hint}; this template can use: ' + ", ".join(known),
            )
        )
    for node in _attribute_uses(ast):
        target, attr = node
        base = target.node.name  # type: ignore[attr-defined]
        if base not in known or base not in undeclared:  # shadowed by {% set %} / loop
            continue
        allowed = known[base]
        if attr in allowed or (base == "params" and attr in _DICT_METHODS):
            continue
        problems.append(
            template.error(target.lineno, _unknown_attribute(base, attr, allowed, kind))
        )
    return problems


def _attribute_uses(ast: nodes.Template) -> list[tuple[nodes.Node, str]]:
    """``x.attr`` and ``x['attr']`` where ``x`` is a plain name."""
    found: list[tuple[nodes.Node, str]] = []
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        if not isinstance(node.node, nodes.Name):
            continue
        if isinstance(node, nodes.Getattr):
            found.append((node, node.attr))
        elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            found.append((node, node.arg.value))
    return found


def _unknown_attribute(base: str, attr: str, allowed: Collection[str], kind: TemplateKind) -> str:
    close = difflib.get_close_matches(attr, list(allowed), n=1, cutoff=0.6)
    hint = f' (did you mean "{base}.{close[0]}"?)' if close else ""
    listed = ", ".join(f"{base}.{a}" for a in allowed) or "none"
    if base == "params":
        fix = (
            f"declare it under `params:` or fix the name; defined params: {listed}"
            if allowed
            else "this workflow declares no params; add it under `params:`"
        )
    elif base == "run" and attr in _RUN_FIELDS["phase"]:
        fix = f"it is not known yet when {_KIND_NAMES[kind]} is rendered; available: {listed}"
    else:
        fix = f"available: {listed}"
    return f'undefined variable "{base}.{attr}"{hint}; {fix}'


_KIND_NAMES = {
    "workspace_path": "workspace.path",
    "branch": "workspace.branch",
    "system": "the system prompt",
    "phase": "a phase",
}


def _template_line(exc: BaseException) -> int | None:
    """The template line a render error happened on, from Jinja's rewritten traceback."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename in ("<template>", _TEMPLATE_FILENAME):
            line = frame.lineno
    if line is None and isinstance(exc, jinja2.TemplateSyntaxError):
        line = exc.lineno
    return line


def _describe_render_error(exc: BaseException) -> str:
    if isinstance(exc, jinja2.UndefinedError):
        return f"template refers to something undefined: {exc.message}"
    if isinstance(exc, TemplateTooCostly):
        return f"template refused: {exc} (a template is bounded in size and time)"
    if isinstance(exc, jinja2.exceptions.SecurityError):
        return f"template does something the sandbox forbids: {exc}"
    return f"template failed to render: {type(exc).__name__}: {exc}"
