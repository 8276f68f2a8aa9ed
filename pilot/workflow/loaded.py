"""A workflow once loaded, and where each of its values is in its file.

Kept apart from ``load`` so that the modules the loader uses (``params``, ``render``) can name
these types without importing the loader: no circle, type-only imports included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from brain.yaml_source import Where, YamlDocument
from pilot.errors import WorkflowError
from pilot.workflow.schema import Loc, Workflow
from pilot.workflow.source import dotted
from pilot.workflow.templating import SourceSpan, WorkflowTemplate

__all__ = ["LoadedWorkflow", "Locator"]


@dataclass(frozen=True)
class LoadedWorkflow:
    """A workflow ready to run: validated, params resolved, templates compiled.

    ``text`` is the file exactly as read (the runner stores it with the run, so a
    resume uses the workflow as it was at start, whatever happened to the file).
    ``params`` holds every declared param with its typed value (``None`` for an
    optional param nobody set). ``base_dir`` is where relative workspace paths are
    resolved from (the current directory at load time, unless given).
    """

    workflow: Workflow
    text: str
    path: Path | None
    params: dict[str, Any]
    filename: str
    base_dir: Path
    templates: Mapping[str, WorkflowTemplate] = field(repr=False, compare=False)


class Locator:
    """Finds the file position for a path in the data (or its closest ancestor)."""

    def __init__(self, doc: YamlDocument) -> None:
        self.doc = doc

    def find(self, path: Loc) -> tuple[Where | None, Loc]:
        return self.doc.find(path)

    def error(
        self, path: Loc, message: str, *, field: str | None = None, at_key: bool = False
    ) -> WorkflowError:
        hit, _found = self.find(path)
        mark = None
        if hit is not None:
            mark = hit.key.start_mark if at_key and hit.key is not None else hit.node.start_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        return WorkflowError(
            message,
            file=self.doc.filename,
            line=line,
            column=column,
            field=field if field is not None else (dotted(path) or None),
        )

    def span(self, path: Loc) -> SourceSpan:
        """The template text's position for the string at ``path``."""
        hit, found = self.find(path)
        if hit is None:
            return SourceSpan(self.doc.filename, 1, 1, 1)
        node = hit.node
        if found != path or not isinstance(node, yaml.ScalarNode):
            # A default (not written in the file): point at the closest thing that is.
            mark = node.start_mark
            return SourceSpan(self.doc.filename, mark.line + 1, mark.column + 1, mark.line + 1)
        last = max(node.end_mark.line + 1, node.start_mark.line + 1)
        if node.style in ("|", ">"):
            first = node.start_mark.line + 2  # content starts on the line after `|`
            column = _indent_of(self.doc.text, first) + 1
            if node.end_mark.column == 0:
                last = node.end_mark.line  # end mark sits at the start of the next line
            return SourceSpan(self.doc.filename, first, column, max(first, last))
        quote = 1 if node.style in ('"', "'") else 0
        return SourceSpan(
            self.doc.filename, node.start_mark.line + 1, node.start_mark.column + 1 + quote, last
        )


def _indent_of(text: str, line: int) -> int:
    lines = text.splitlines()
    for candidate in lines[line - 1 :]:
        if candidate.strip():
            return len(candidate) - len(candidate.lstrip(" "))
    return 0
