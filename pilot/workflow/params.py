"""A workflow's params: ``--param NAME=VALUE`` text and params files, typed by the workflow.

Values arrive as text (``--param``) or YAML values (a params file); each is parsed by its
param's declared type when the workflow is loaded, and every problem names the param, says
what was expected, and shows how to pass it (``--param repo=PATH``).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pilot.errors import WorkflowError, WorkflowErrors
from pilot.workflow.loaded import LoadedWorkflow, Locator
from pilot.workflow.schema import ParamSpec, Workflow, coerce_param
from pilot.workflow.source import parse_source, read_source

__all__ = [
    "SAMPLE_VALUES",
    "load_params_file",
    "parse_param_assignments",
    "resolve_params",
    "sample_params",
]

_PLACEHOLDERS = {
    "string": "TEXT",
    "integer": "N",
    "number": "X",
    "boolean": "true",
    "path": "PATH",
    "list": "A,B",
}


def _example(name: str, spec: ParamSpec) -> str:
    value = "|".join(spec.choices or []) if spec.type == "choice" else _PLACEHOLDERS[spec.type]
    return f"--param {name}={value}"


def resolve_params(
    workflow: Workflow, given: Mapping[str, Any], locator: Locator, *, require: bool = True
) -> tuple[dict[str, Any], list[WorkflowError]]:
    values: dict[str, Any] = {}
    errors: list[WorkflowError] = []
    declared = list(workflow.params)
    for name in given:
        if name not in workflow.params:
            close = difflib.get_close_matches(name, declared, n=1, cutoff=0.6)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            takes = (
                f"this workflow takes: {', '.join(declared)}"
                if declared
                else "this workflow takes no params"
            )
            errors.append(
                locator.error(
                    ("params",),
                    f'unknown param "{name}" given with --param{hint}; {takes}',
                    field="params",
                    at_key=True,
                )
            )
    for name, spec in workflow.params.items():
        loc = ("params", name)
        about = f" ({spec.description})" if spec.description else ""
        if name in given:
            try:
                values[name] = coerce_param(spec, given[name])
            except ValueError as exc:
                errors.append(
                    locator.error(
                        loc,
                        f'bad value for param "{name}": {exc}; pass it like {_example(name, spec)}',
                        at_key=True,
                    )
                )
        elif spec.default is not None:
            values[name] = coerce_param(spec, spec.default)  # checked by the schema
        elif spec.required and require:
            errors.append(
                locator.error(
                    loc,
                    f'missing required param "{name}"{about}; pass it with {_example(name, spec)}',
                    at_key=True,
                )
            )
        else:
            values[name] = None
    return values, errors


def parse_param_assignments(assignments: Iterable[str]) -> dict[str, str]:
    """``["repo=~/src/x", "goal=Tidy up"]`` -> ``{"repo": "~/src/x", "goal": "Tidy up"}``.

    Values are kept as text; ``load_workflow`` parses them by each param's type.
    A param given twice is refused rather than silently overridden.
    """
    out: dict[str, str] = {}
    errors: list[WorkflowError] = []
    for item in assignments:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            errors.append(
                WorkflowError(
                    f"--param {item!r} is not NAME=VALUE; write --param {name or 'NAME'}=VALUE",
                    field="params",
                )
            )
        elif name in out:
            errors.append(
                WorkflowError(
                    f'--param "{name}" is given twice ({out[name]!r} and {value!r}); give it once',
                    field=f"params.{name}",
                )
            )
        else:
            out[name] = value
    if errors:
        raise errors[0] if len(errors) == 1 else WorkflowErrors(errors)
    return out


def load_params_file(path: Path) -> dict[str, Any]:
    """Read params from a YAML mapping (``repo: ~/src/x``), for long or many values.

    Values may be typed (numbers, lists); they are parsed by each param's type when
    the workflow is loaded. Merge with ``--param`` values by letting the latter win.
    """
    filename = str(path)
    text = read_source(path)
    doc, errors = parse_source(text, filename, "params file")
    if doc is None:
        raise errors[0]
    if errors:
        raise WorkflowErrors(errors)
    if doc.data is None:
        return {}
    if not isinstance(doc.data, dict):
        raise WorkflowError(
            "a params file is a YAML mapping of param names to values, like `repo: ~/src/x`",
            file=filename,
            line=1,
            column=1,
        )
    return dict(doc.data)


SAMPLE_VALUES: dict[str, Any] = {
    "string": "sample",
    "integer": 1,
    "number": 1.0,
    "boolean": True,
    "path": ".",
    "list": ["sample"],
}
"""What `pilot validate` renders a required param it was not given with (a choice: its first)."""


def sample_params(loaded: LoadedWorkflow) -> dict[str, Any]:
    """The given params, and a sample value for each required one that was not given."""
    values = {k: v for k, v in loaded.params.items() if v is not None}
    for name, spec in loaded.workflow.params.items():
        if name not in values and spec.required:
            values[name] = spec.choices[0] if spec.choices else SAMPLE_VALUES[spec.type]
    return values
