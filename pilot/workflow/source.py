"""Reading a workflow's files: the text (size-limited, UTF-8) and its YAML with positions.

The workflow, params and matrix files are read here and nowhere else, so each has the same
limits and its problems the same ``file:line:column: field:`` form. YAML itself is read by
``brain.yaml_source``, the one reader of hand-written files (the brain's profiles use it too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from brain.yaml_source import YamlDocument, parse_yaml
from pilot.errors import WorkflowError, WorkflowErrors
from pilot.workflow.schema import Loc

__all__ = ["MAX_FILE_BYTES", "dotted", "load_yaml_file", "parse_source", "read_source"]

MAX_FILE_BYTES = 1024 * 1024
"""Workflow, params and matrix files are small: a larger one is refused before it is read (a
workflow is stored whole with its run, so a huge one would swell the database)."""


def read_source(path: Path) -> str:
    """The file's text; ``WorkflowError`` saying why it cannot be used (missing, a
    directory, too large, not UTF-8)."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise WorkflowError(
                f"is over {MAX_FILE_BYTES // 1024} KB; a workflow, params or matrix file is "
                "YAML of a few KB: keep long texts (prompts, data) in files the run reads",
                file=str(path),
            )
        return data.decode("utf-8")
    except FileNotFoundError:
        raise WorkflowError(
            "no such file; check the path (the bundled workflows are in workflows/)",
            file=str(path),
        ) from None
    except IsADirectoryError:
        raise WorkflowError(
            "is a directory; give the YAML file inside it", file=str(path)
        ) from None
    except UnicodeDecodeError as exc:
        raise WorkflowError(
            f"is not UTF-8 text (byte {exc.start}); save it as UTF-8", file=str(path)
        ) from None
    except OSError as exc:
        raise WorkflowError(f"cannot be read: {exc.strerror}", file=str(path)) from None


def parse_source(
    text: str, filename: str, kind: str = "workflow file"
) -> tuple[YamlDocument | None, list[WorkflowError]]:
    """YAML text -> plain data with positions (``brain.yaml_source``, the one YAML reader of
    hand-written files); (None, [error]) when it cannot be read."""
    doc, problems = parse_yaml(text, filename, kind=kind)
    errors = [
        WorkflowError(
            p.message, file=filename, line=p.line, column=p.column, field=dotted(p.path) or None
        )
        for p in problems
    ]
    return doc, errors


def dotted(loc: Loc) -> str:
    """``("phases", 1, "check")`` -> ``"phases[1].check"``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def load_yaml_file(path: Path) -> Any:
    """The data of a small YAML file (a params matrix), read with the workflow's limits (its
    size, its alias expansion); ``WorkflowError`` with file and line when it cannot be read."""
    filename = str(path)
    doc, errors = parse_source(read_source(path), filename, "matrix file")
    if doc is None:
        raise errors[0]
    if errors:
        raise WorkflowErrors(errors)
    return doc.data
