"""The registry: names, schemas the model sees, and invoke() that never raises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from tools.base import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from tools.registry import ToolRegistry, UnknownToolError, default_registry, parameters_schema
from tools.workspace import Workspace

EXPECTED = [
    "read_file",
    "write_file",
    "edit_file",
    "replace_definition",
    "list_dir",
    "find_files",
    "grep",
    "view_image",
    "run",
    "git_status",
    "git_diff",
    "git_commit",
    "finish",
]


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("hi\n")
    return ToolContext(
        workspace=Workspace(tmp_path / "ws"), artifacts_dir=tmp_path / "art", sandbox="none"
    )


def test_default_registry_has_every_tool_with_the_contract() -> None:
    reg = default_registry()
    assert reg.names() == EXPECTED
    mutating = {n for n in reg.names() if reg.get(n).mutates}
    assert mutating == {"write_file", "edit_file", "replace_definition", "run", "git_commit"}
    for name in reg.names():
        tool = reg.get(name)
        assert isinstance(tool, Tool)
        assert tool.name == name and issubclass(tool.args_model, BaseModel)
        assert 40 < len(tool.description) < 400, name  # one or two sentences for a small model


def test_unknown_names_are_reported_with_the_valid_ones() -> None:
    reg = default_registry()
    with pytest.raises(UnknownToolError) as info:
        reg.get("bash")
    assert "'bash'" in str(info.value) and "read_file" in str(info.value)
    assert isinstance(info.value, KeyError)
    with pytest.raises(UnknownToolError) as info:
        reg.check_names(["read_file", "shell", "ls"])
    assert "unknown tools 'shell', 'ls'" in str(info.value) and info.value.unknown == [
        "shell",
        "ls",
    ]
    reg.check_names(EXPECTED)


def test_openai_tools_schema_shape() -> None:
    tools = default_registry().openai_tools(EXPECTED)
    assert [t["function"]["name"] for t in tools] == EXPECTED
    for spec in tools:
        assert spec["type"] == "function"
        params = spec["function"]["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert isinstance(params["required"], list)
        text = json.dumps(params)
        assert '"title"' not in text and "$ref" not in text and "anyOf" not in text
    read = tools[0]["function"]["parameters"]
    assert read["required"] == ["path"]
    assert read["properties"]["offset"] == {
        "type": "integer",
        "description": "First line to show (1-based).",
        "default": 1,
        "minimum": 1,
    }
    assert (
        read["properties"]["limit"]["type"] == "integer"
        and "default" not in read["properties"]["limit"]
    )
    status = next(t for t in tools if t["function"]["name"] == "git_status")
    assert status["function"]["parameters"] == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    with pytest.raises(UnknownToolError):
        default_registry().openai_tools(["nope"])


def test_schemas_are_built_once_per_tool_set(monkeypatch: pytest.MonkeyPatch) -> None:
    import tools.registry as registry_module

    built: list[str] = []
    real = registry_module.parameters_schema

    def counting(model: type[BaseModel]) -> dict:
        built.append(model.__name__)
        return real(model)

    monkeypatch.setattr(registry_module, "parameters_schema", counting)
    reg = default_registry()
    first = reg.openai_tools(EXPECTED)
    assert len(built) == len(EXPECTED)
    for _ in range(3):
        assert reg.openai_tools(EXPECTED) is first  # no pydantic schema build per request
    assert len(built) == len(EXPECTED)
    two = reg.openai_tools(["read_file", "finish"])
    assert [t["function"]["name"] for t in two] == ["read_file", "finish"]
    assert len(built) == len(EXPECTED) + 2  # another set is its own entry
    with pytest.raises(UnknownToolError):
        reg.openai_tools(["read_file", "nope"])

    class Args(ToolArgs):
        x: int

    class Late:
        name = "late"
        description = "A tool registered after the first request."
        args_model = Args
        mutates = False

        def run(self, args: BaseModel, ctx: ToolContext) -> ToolResult:
            return ToolResult.ok("late")

    reg.register(Late())
    assert [t["function"]["name"] for t in reg.openai_tools(["late"])] == ["late"]
    assert "late" in reg and "nope" not in reg


def test_schema_keeps_a_property_named_title() -> None:
    class Args(ToolArgs):
        title: str = Field(description="A title.")

    assert parameters_schema(Args)["properties"]["title"] == {
        "type": "string",
        "description": "A title.",
    }


def test_invoke_never_raises_on_bad_input(ctx: ToolContext) -> None:
    reg = default_registry()
    cases = [
        ("nope", "{}", "unknown tool 'nope'"),
        ("read_file", "{not json", "not valid JSON"),
        ("read_file", "[1, 2]", "must be a JSON object"),
        ("read_file", "{}", "'path' is required but missing"),
        ("read_file", '{"path": "a.txt", "offset": "abc"}', "'offset'"),
        ("read_file", '{"path": "a.txt", "file": "x"}', "'file' is not an argument"),
        ("read_file", '{"path": "a.txt", "offset": 0}', "greater than or equal to 1"),
        ("edit_file", {"path": "a.txt"}, "'old' is required"),
        ("read_file", 42, "must be a JSON object"),
    ]
    for name, args, expected in cases:
        res = reg.invoke(name, args, ctx)
        assert res.is_error and res.output.startswith("Error: "), (name, args)
        assert expected in res.output, (name, args, res.output)
    res = reg.invoke("read_file", "{}", ctx)
    assert (
        "Expected arguments: read_file(path: string, offset?: integer = 1, limit?: integer)"
        in res.output
    )


def test_invoke_accepts_what_small_models_send(ctx: ToolContext) -> None:
    reg = default_registry()
    assert reg.invoke("git_status", "", ctx).is_error  # no repo, but the arguments parsed
    assert "not a git repository" in reg.invoke("git_status", "null", ctx).output
    double = json.dumps(json.dumps({"path": "a.txt"}))
    assert reg.invoke("read_file", double, ctx).output == "     1\thi"
    assert reg.invoke("read_file", {"path": "a.txt", "offset": "1"}, ctx).output == "     1\thi"


class _Boom:
    name = "boom"
    description = "Always fails."
    mutates = False

    class args_model(ToolArgs):
        kind: str = "crash"

    def run(self, args, ctx):  # type: ignore[no-untyped-def]
        if args.kind == "tool_error":
            raise ToolError("expected failure, try X")
        if args.kind == "plain_error_result":
            return ToolResult(output="no prefix", is_error=True)
        if args.kind == "huge":
            return ToolResult(output="x" * 500_000)
        if args.kind == "none":
            return None
        raise RuntimeError("kaboom")


def test_invoke_turns_exceptions_into_error_results(ctx: ToolContext) -> None:
    reg = ToolRegistry([_Boom()])
    crash = reg.invoke("boom", {}, ctx)
    assert crash.is_error and "boom failed unexpectedly: RuntimeError: kaboom" in crash.output
    assert (
        reg.invoke("boom", {"kind": "tool_error"}, ctx).output == "Error: expected failure, try X"
    )
    assert reg.invoke("boom", {"kind": "plain_error_result"}, ctx).output == "Error: no prefix"
    huge = reg.invoke("boom", {"kind": "huge"}, ctx)
    assert huge.truncated and len(huge.output) < 100_100
    assert reg.invoke("boom", {"kind": "none"}, ctx).is_error
    with pytest.raises(ValueError):
        reg.register(_Boom())


def test_finish_acknowledges(ctx: ToolContext) -> None:
    reg = default_registry()
    res = reg.invoke("finish", {"summary": "Refactored X; tests pass."}, ctx)
    assert not res.is_error and "Finish recorded" in res.output
    assert reg.invoke("finish", {"summary": "  "}, ctx).is_error
