"""Loading workflow files: YAML -> validated ``Workflow`` + typed params + compiled templates.

Every problem is reported as a ``WorkflowError`` naming file, line, column and field,
and all problems found in one pass are reported together, because the person
reading them is about to leave a run going overnight and should fix everything in
one edit. The pipeline:

1. YAML is read by ``brain.yaml_source`` (shared with the brain's profiles and fleet
   files; ``source``): one parse, YAML 1.2 scalars, so ``no`` stays a string; duplicate
   keys refused; each node's position recorded by path.
2. pydantic validates the data; each error's ``loc`` is mapped back to the closest
   recorded position, and its message rewritten to say what to write instead.
3. Cross-field checks, params (``params``) and templates (compiled by ``templating``,
   tried once by ``render``) are checked together.

This module reads the files it is given and nothing else: no network, no commands.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from pilot.errors import WorkflowError, WorkflowErrors
from pilot.workflow.loaded import LoadedWorkflow, Locator
from pilot.workflow.params import load_params_file, parse_param_assignments, resolve_params
from pilot.workflow.render import (
    check_templates,
    render_branch,
    render_check,
    render_phase_images,
    render_phase_prompt,
    render_run,
    render_system,
    render_workspace_path,
    template_slots,
)
from pilot.workflow.schema import EXTENSION_PREFIX, Loc, Workflow
from pilot.workflow.source import MAX_FILE_BYTES, dotted, load_yaml_file, parse_source, read_source
from pilot.workflow.templating import (
    WorkflowTemplate,
    compile_template,
    make_environment,
)

# The loader's public API; the params and rendering functions live in their own modules and
# are named here too, so ``pilot.workflow.load`` stays the one import for a loaded workflow.
__all__ = [
    "MAX_FILE_BYTES",
    "LoadedWorkflow",
    "load_params_file",
    "load_workflow",
    "load_yaml_file",
    "parse_param_assignments",
    "parse_workflow_text",
    "render_branch",
    "render_check",
    "render_phase_images",
    "render_phase_prompt",
    "render_run",
    "render_system",
    "render_workspace_path",
]


# =========================================================================== result


# =========================================================================== locations


def _normalize(loc: tuple[Any, ...], data: Any) -> tuple[Loc, str | None]:
    """Map a pydantic ``loc`` onto the data: (existing path, missing trailing key or None).

    Union tags (``"list"``, ``"settings"``) that pydantic inserts are dropped: they
    are the elements that name nothing in the data and are not the last one.
    """
    path: list[str | int] = []
    current = data
    for i, part in enumerate(loc):
        if part == "[key]":  # pydantic's marker for an error in a mapping's key
            continue
        in_dict = isinstance(current, dict) and isinstance(part, str) and part in current
        in_list = isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current)
        if in_dict or in_list:
            path.append(part)
            current = current[part]
        elif i == len(loc) - 1 and isinstance(part, str) and isinstance(current, dict):
            return tuple(path), part
        # else: a union tag or a key-error marker; skip it
    return tuple(path), None


# =========================================================================== pydantic errors


def _unwrap(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _type_at(path: Loc) -> Any:
    """The annotated type of the value at ``path`` in a Workflow, or None if unknown."""
    tp: Any = Workflow
    for part in path:
        tp = _step(tp, part)
        if tp is None:
            return None
    return tp


def _step(tp: Any, part: str | int) -> Any:
    tp = _unwrap(tp)
    origin = get_origin(tp)
    if origin in (Union, UnionType):
        for arg in get_args(tp):
            if _unwrap(arg) is NoneType:
                continue
            found = _step(arg, part)
            if found is not None:
                return found
        return None
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        info = tp.model_fields.get(part) if isinstance(part, str) else None
        return info.annotation if info else None
    if origin is list and isinstance(part, int):
        return get_args(tp)[0]
    if origin is dict and isinstance(part, str):
        return get_args(tp)[1]
    return None


def _model_at(path: Loc) -> type[BaseModel] | None:
    tp = _unwrap(_type_at(path))
    candidates = get_args(tp) if get_origin(tp) in (Union, UnionType) else (tp,)
    for candidate in candidates:
        candidate = _unwrap(candidate)
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _show(value: Any) -> str:
    """A value as the user wrote it, short."""
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "...'"


_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list (`[a, b]`, or one `- item` per line)",
    "dict_type": "a mapping (`key: value` lines)",
    "model_type": "a mapping (`key: value` lines)",
    "model_attributes_type": "a mapping (`key: value` lines)",
}
_BOUNDS = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}


def _describe(error: Mapping[str, Any], path: Loc, tail: str | None) -> tuple[str, bool]:
    """A pydantic error -> (actionable message, whether it belongs at the key)."""
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        key = str(path[-1]) if path else "?"
        model = _model_at(path[:-1])
        allowed = list(model.model_fields) if model else []
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        if close:
            return f'unknown key "{key}" (did you mean "{close[0]}"?)', True
        listed = f"; allowed keys here: {', '.join(allowed)}" if allowed else ""
        return f'unknown key "{key}"{listed}', True
    if kind == "missing":
        model = _model_at(path)
        info = model.model_fields.get(tail) if model and tail else None
        about = ""
        if info and info.description:
            text = info.description.rstrip(".")
            about = f" ({text[:1].lower()}{text[1:]})"
        return f'missing required key "{tail}"{about}', False
    if kind in _EXPECTED:
        message = f"expected {_EXPECTED[kind]}, got {_show(value)}"
        if kind == "string_type" and isinstance(value, int | float | bool):
            message += " (quote it if you mean the text)"
        return message, False
    if kind == "literal_error":
        options = re.findall(r"'([^']*)'|(\d+)", str(ctx.get("expected", "")))
        names = [a or b for a, b in options]
        close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.6)
        hint = f' (did you mean "{close[0]}"?)' if close else ""
        return f"expected one of {', '.join(names)}, got {_show(value)}{hint}", False
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        return f"must be {words} {ctx.get(key)}, got {_show(value)}", False
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", error.get("msg", ""))), False
    message = str(error.get("msg", "invalid value"))
    return f"{message[:1].lower()}{message[1:]}, got {_show(value)}", False


def _validation_errors(
    exc: ValidationError, locator: Locator, already: Iterable[WorkflowError] = ()
) -> list[WorkflowError]:
    """pydantic's errors as located WorkflowErrors, without echoes of problems already known.

    Dropped: errors inside a value the YAML reader already complained about (its data
    is a stand-in), and "missing key X" when an unknown key next to it is a typo of X.
    """
    known = [e.field for e in already if e.field] + [dotted(p) for p in locator.doc.stand_ins]
    entries: list[tuple[Loc, str | None, dict[str, Any]]] = []
    for error in exc.errors(include_url=False):
        path, tail = _normalize(tuple(error["loc"]), locator.doc.data)
        entries.append((path, tail, dict(error)))
    typos: set[tuple[Loc, str]] = set()
    for path, _tail, error in entries:
        if error["type"] == "extra_forbidden" and path:
            model = _model_at(path[:-1])
            allowed = list(model.model_fields) if model else []
            for close in difflib.get_close_matches(str(path[-1]), allowed, n=1, cutoff=0.6):
                typos.add((path[:-1], close))
    out: list[WorkflowError] = []
    for path, tail, error in entries:
        if error["type"] == "missing" and tail and (path, tail) in typos:
            continue
        field = dotted((*path, tail) if tail else path) or None
        if field and any(_within(field, prefix) for prefix in known):
            continue
        message, at_key = _describe(error, path, tail)
        at_key = at_key or "[key]" in error["loc"]
        out.append(locator.error(path, message, field=field, at_key=at_key))
    return out


def _within(field: str, prefix: str) -> bool:
    return field == prefix or field.startswith((prefix + ".", prefix + "["))


# =========================================================================== loading


def load_workflow(
    path: Path,
    params: Mapping[str, Any] | None = None,
    *,
    tool_names: Collection[str] | None = None,
    base_dir: Path | None = None,
    require_params: bool = True,
    settings: Sequence[str] = (),
) -> LoadedWorkflow:
    """Read, validate and prepare the workflow file at ``path``.

    ``params`` are the user's values (``--param`` text or a params file's values);
    ``tool_names`` are the tool registry's names, so unknown tools fail now. Raises
    ``WorkflowError`` (a ``WorkflowErrors`` when there are several problems).
    ``require_params=False`` is for checking a file without its params (`pilot
    validate`): missing required params are then not errors (their value is None and
    templates are only checked statically); the result must not be run. ``settings`` are
    ``FIELD=VALUE`` items (``pilot run --set``), applied to the text before it is read.
    """
    text = read_source(path)
    if settings:  # `pilot run --set FIELD=VALUE`
        from pilot.workflow.overrides import apply_settings

        text = apply_settings(text, str(path), settings)
    return parse_workflow_text(
        text,
        str(path),
        params,
        tool_names=tool_names,
        path=Path(path),
        base_dir=base_dir,
        require_params=require_params,
    )


def parse_workflow_text(
    text: str,
    filename: str = "<workflow>",
    params: Mapping[str, Any] | None = None,
    *,
    tool_names: Collection[str] | None = None,
    path: Path | None = None,
    base_dir: Path | None = None,
    require_params: bool = True,
) -> LoadedWorkflow:
    """Like ``load_workflow``, for text already in hand (a stored run's workflow, a test).

    ``filename`` is only used in messages. ``base_dir`` resolves a relative
    workspace path; a resume should pass the one recorded at the run's start.
    """
    doc, errors = parse_source(text, filename)
    if doc is None:
        raise _collected(errors)
    if not isinstance(doc.data, dict):
        got = "an empty file" if doc.data is None else _show(doc.data)
        errors.append(
            WorkflowError(
                f"a workflow is a YAML mapping with at least `name`, `workspace`, `tools` and "
                f"`phases`, got {got}; start from workflows/refactor_repo.yaml",
                file=filename,
                line=1,
                column=1,
            )
        )
        raise _collected(errors)
    locator = Locator(doc)
    # Top-level `x-...` keys are the user's own (a place for YAML anchors), as in Compose.
    data = {k: v for k, v in doc.data.items() if not k.startswith(EXTENSION_PREFIX)}
    try:
        workflow = Workflow.model_validate(data, context={"defer_cross_checks": True})
    except ValidationError as exc:
        raise _collected(errors + _validation_errors(exc, locator, errors)) from None
    for loc, message in workflow.problems(tool_names):
        errors.append(locator.error(loc, message))
    values, param_errors = resolve_params(workflow, params or {}, locator, require=require_params)
    unset_required = [
        n for n, spec in workflow.params.items() if spec.required and values.get(n) is None
    ]
    errors += param_errors

    env, command_env = make_environment(), make_environment(commands=True)
    templates: dict[str, WorkflowTemplate] = {}
    template_errors: list[WorkflowError] = []
    for slot, source in template_slots(workflow):
        template, problems = compile_template(
            command_env if slot.command else env,
            source,
            field=dotted(slot.path),
            kind=slot.kind,
            span=locator.span(slot.path),
            param_names=list(workflow.params),
        )
        template_errors += problems
        if template is not None:
            templates[dotted(slot.path)] = template
    errors += template_errors
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    if not errors and not unset_required:
        errors += check_templates(workflow, values, templates, base)
    if errors:
        raise _collected(errors)
    return LoadedWorkflow(
        workflow=workflow,
        text=text,
        path=path,
        params=values,
        filename=filename,
        base_dir=base,
        templates=templates,
    )


def _collected(errors: list[WorkflowError]) -> WorkflowError:
    unique: dict[str, WorkflowError] = {}
    for error in errors:
        unique.setdefault(str(error), error)
    found = list(unique.values())
    return found[0] if len(found) == 1 else WorkflowErrors(found)
