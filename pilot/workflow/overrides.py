"""``pilot run --set FIELD=VALUE``: a workflow field given on the command line.

The value is read as a YAML scalar (as the file's own values are) and put at the dotted path
in the workflow's data (a number indexes a list: ``phases.0.max_attempts=5`` is the first
phase's); the text that results is what the run loads, validates and stores, so a resume runs
with it and a bad value is refused as the same value in the file would be
(``model.tool_calls=json`` names the field and the values it takes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from brain.yaml_source import read_yaml_scalar
from pilot.errors import WorkflowError
from pilot.workflow.source import parse_source

__all__ = ["apply_settings"]


def apply_settings(text: str, filename: str, settings: Sequence[str]) -> str:
    """``text`` with each ``FIELD=VALUE`` of ``settings`` set (unchanged when there are none,
    or when the text is no YAML mapping: loading it then says why)."""
    if not settings:
        return text
    doc, _errors = parse_source(text, filename)
    if doc is None or not isinstance(doc.data, dict):
        return text
    data: dict[str, Any] = doc.data
    for item in settings:
        key, sep, raw = item.partition("=")
        parts = [p.strip() for p in key.split(".")]
        if not sep or not all(parts):
            raise WorkflowError(
                f"--set {item!r}: write it as FIELD=VALUE with a dotted field, e.g. "
                "--set model.tool_calls=forced"
            )
        try:
            value = read_yaml_scalar(raw) if raw.strip() else None
        except ValueError as exc:
            raise WorkflowError(f"--set {item!r}: the value is not valid YAML: {exc}") from None
        _put(data, parts, value, item, filename)
    note = "".join("# pilot run --set " + item.replace("\n", " ") + "\n" for item in settings)
    return note + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _put(data: dict[str, Any], parts: list[str], value: Any, item: str, filename: str) -> None:
    """``value`` at the dotted ``parts`` of ``data``: mappings made as needed, a list entry
    only where it exists (a new phase has no name or prompt to be made from)."""
    node: Any = data
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise WorkflowError(
                    f"--set {item!r}: `{'.'.join(parts[:depth])}` is a list of {len(node)} in "
                    f"{filename}; index it with 0 to {len(node) - 1}"
                )
            index = int(part)
            if last:
                node[index] = value
            else:
                node = node[index]
            continue
        if not isinstance(node, dict):
            raise WorkflowError(
                f"--set {item!r}: `{'.'.join(parts[:depth])}` is not a mapping in {filename}, "
                f"so it has no field `{part}`"
            )
        if last:
            node[part] = value
        else:
            if node.get(part) is None:
                node[part] = {}
            node = node[part]
