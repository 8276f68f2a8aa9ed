"""Property: whatever is wrong with a workflow file, the loader answers with located WorkflowErrors.

A valid workflow (the bundled one) is mutated at random, structurally (keys deleted or
renamed, values swapped for other types) and textually (characters and lines changed),
and the loader must either accept the result or raise ``WorkflowError`` in which every
problem has a file and a line. Any other exception is a crash a user would see as a
traceback instead of a diagnostic.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pilot.errors import WorkflowError
from pilot.workflow import parse_workflow_text

REFACTOR = Path(__file__).resolve().parents[1] / "workflows" / "refactor_repo.yaml"
TOOLS = [
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "find_files",
    "grep",
    "run",
    "git_status",
    "git_diff",
    "git_commit",
    "finish",
]
FILENAME = "fuzz.yaml"


@functools.cache
def _original() -> tuple[str, Any]:
    text = REFACTOR.read_text()
    return text, yaml.load(text, Loader=yaml.CSafeLoader)


FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,  # no example files written into the shared tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["{{ params.nope }}", "{% if %}", "10m", "auto", "read_file", "-1", ""]),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*prefix, i))
    return found


def _parent(data: Any, path: tuple) -> Any:
    for part in path[:-1]:
        data = data[part]
    return data


def _mutate(data: Any, draw: st.DrawFn) -> None:
    paths = _paths(data)
    if not paths:
        return
    path = draw(st.sampled_from(paths))
    parent, last = _parent(data, path), path[-1]
    op = draw(st.sampled_from(["delete", "rename", "replace", "replace"]))
    if op == "delete":
        del parent[last]
    elif op == "rename" and isinstance(parent, dict):
        new = draw(st.one_of(st.text(max_size=10), st.just(str(last)[:-1] or "x")))
        parent[new] = parent.pop(last)
    else:
        parent[last] = draw(values)


def _assert_located(text: str) -> None:
    try:
        parse_workflow_text(text, FILENAME, {"repo": "/tmp/fuzz-repo"}, tool_names=TOOLS)
    except WorkflowError as exc:
        assert exc.errors, exc
        for error in exc.errors:
            assert isinstance(error, WorkflowError)
            assert error.file == FILENAME, str(error)
            assert isinstance(error.line, int) and error.line >= 1, str(error)
            assert error.message, str(error)


@FUZZ
@given(st.data())
def test_structural_mutations_only_ever_raise_located_workflow_errors(data: st.DataObject) -> None:
    tree = copy.deepcopy(_original()[1])
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        _mutate(tree, data.draw)
    _assert_located(yaml.dump(tree, Dumper=yaml.CSafeDumper, sort_keys=False, allow_unicode=True))


@FUZZ
@given(st.data())
def test_text_mutations_only_ever_raise_located_workflow_errors(data: st.DataObject) -> None:
    text = _original()[0]
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        where = data.draw(st.integers(min_value=0, max_value=max(len(text) - 1, 0)))
        op = data.draw(st.sampled_from(["delete", "insert", "line"]))
        if op == "delete":
            text = text[:where] + text[where + 1 :]
        elif op == "insert":
            piece = data.draw(
                st.sampled_from(["\t", ":", " ", "\n", "{", "}", "-", "'", '"', "&a", "*a", "<<"])
                | st.text(max_size=3)
            )
            text = text[:where] + piece + text[where:]
        else:
            lines = text.splitlines(keepends=True)
            i = data.draw(st.integers(min_value=0, max_value=len(lines) - 1))
            lines[i] = lines[data.draw(st.integers(min_value=0, max_value=len(lines) - 1))]
            text = "".join(lines)
    _assert_located(text)


@given(st.text(max_size=200))
@settings(max_examples=100, deadline=None, database=None)
def test_arbitrary_text_only_ever_raises_located_workflow_errors(text: str) -> None:
    _assert_located(text)
