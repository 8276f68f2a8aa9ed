"""The tool registry: names -> tools, the schemas the model sees, and a call that never raises.

``invoke`` is the one door through which the pilot runs a tool. Whatever goes wrong (unknown
tool, arguments that are not JSON or do not fit the schema, a refused path, a bug inside the
tool) comes back as a ``ToolResult`` with ``is_error=True`` and an output starting "Error: "
that tells the model what to do next. It must not import ``pilot`` or ``brain``.
"""

from __future__ import annotations

import copy
import json
import traceback
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from tools.base import ERROR_PREFIX, Tool, ToolContext, ToolError, ToolResult
from tools.workspace import WorkspaceEscape

MAX_OUTPUT_CHARS = 100_000  # a last guard; each tool keeps far below it by itself


class UnknownToolError(KeyError):
    """A tool name that is not registered; the message lists the valid names."""

    def __init__(self, unknown: Sequence[str], valid: Sequence[str]) -> None:
        self.unknown = list(unknown)
        self.valid = list(valid)
        names = ", ".join(repr(n) for n in self.unknown)
        plural = "s" if len(self.unknown) > 1 else ""
        super().__init__(f"unknown tool{plural} {names}; valid tools: {', '.join(self.valid)}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class ToolRegistry:
    """Tools by name, in registration order."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._schemas: dict[tuple[str, ...], list[dict]] = {}
        self._summaries: dict[str, str] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add a tool; a second tool with the same name is a programming error."""
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._schemas.clear()  # a cached set may now be incomplete (check_names passes)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def names(self) -> list[str]:
        """Registered tool names, in registration order."""
        return list(self._tools)

    def get(self, name: str) -> Tool:
        """The tool called ``name``; ``UnknownToolError`` (a KeyError) lists the valid ones."""
        try:
            return self._tools[name]
        except (KeyError, TypeError):
            raise UnknownToolError([str(name)], self.names()) from None

    def check_names(self, names: Iterable[str]) -> None:
        """Raise ``UnknownToolError`` naming every unknown name (the workflow loader's check)."""
        unknown = [n for n in names if n not in self._tools]
        if unknown:
            raise UnknownToolError(unknown, self.names())

    def openai_tools(self, names: Sequence[str]) -> list[dict]:
        """The ``tools=[...]`` list of a chat request, for ``names`` in the order given.

        Built once per tool set and then shared by every request that sends that set: a
        pydantic schema build per tool per model call cost more than the rest of a step.
        The list and its dicts are shared, so callers must not mutate them.
        """
        key = tuple(names)
        cached = self._schemas.get(key)
        if cached is not None:
            return cached
        self.check_names(key)
        built = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": parameters_schema(tool.args_model),
                },
            }
            for tool in (self._tools[n] for n in key)
        ]
        self._schemas[key] = built
        return built

    def argument_summary(self, tool: Tool) -> str:
        """``argument_summary(tool)``, built once per tool (a model that keeps sending bad
        arguments meets it every step)."""
        summary = self._summaries.get(tool.name)
        if summary is None:
            summary = self._summaries[tool.name] = argument_summary(tool)
        return summary

    def invoke(self, name: str, arguments: str | dict | None, ctx: ToolContext) -> ToolResult:
        """Run a tool from a model's call. Never raises (but for KeyboardInterrupt/SystemExit)."""
        try:
            tool = self.get(name)
        except UnknownToolError as exc:
            return ToolResult.error(f"{exc}. Call one of those instead.")
        try:
            parsed = parse_arguments(arguments)
        except ToolError as exc:
            return ToolResult.error(f"{exc}\n{self.argument_summary(tool)}")
        try:
            args = tool.args_model.model_validate(parsed)
        except ValidationError as exc:
            return ToolResult.error(
                f"invalid arguments for {tool.name}: {describe_validation_error(exc)}\n"
                f"{self.argument_summary(tool)}"
            )
        try:
            result = tool.run(args, ctx)
        except (ToolError, WorkspaceEscape) as exc:
            return ToolResult.error(str(exc))
        except Exception as exc:  # a bug or an OS failure must not end the run
            where = traceback.extract_tb(exc.__traceback__)[-1:]
            loc = f" (at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno})" if where else ""
            return ToolResult.error(
                f"{tool.name} failed unexpectedly: {type(exc).__name__}: {exc}{loc}. "
                "Try different arguments or another tool."
            )
        if not isinstance(result, ToolResult):
            return ToolResult.error(f"{tool.name} returned no result (internal error)")
        return _normalised(result)


def _normalised(result: ToolResult) -> ToolResult:
    if result.is_error and not result.output.startswith(ERROR_PREFIX):
        result = result.model_copy(update={"output": ERROR_PREFIX + result.output})
    if len(result.output) > MAX_OUTPUT_CHARS:
        result = result.model_copy(
            update={
                "output": result.output[:MAX_OUTPUT_CHARS]
                + f"\n... [output cut at {MAX_OUTPUT_CHARS} characters]",
                "truncated": True,
            }
        )
    return result


def parse_arguments(arguments: str | dict | None) -> dict:
    """A model's ``arguments`` as a dict, with cheap repairs for what small models send.

    "" and "null" mean no arguments; a JSON string holding JSON (double-encoded) is decoded
    twice. Anything else that is not a JSON object raises ``ToolError``.
    """
    if arguments is None:
        return {}
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str):
        raise ToolError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    text = arguments.strip()
    if not text:
        return {}
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        snippet = text if len(text) <= 200 else text[:200] + "..."
        raise ToolError(
            f"arguments are not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): "
            f'{snippet}. Send the arguments as one JSON object, e.g. {{"path": "README.md"}}.'
        ) from None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ToolError(f"arguments must be a JSON object, got a JSON {type(value).__name__}")
    return value


def describe_validation_error(exc: ValidationError) -> str:
    """Pydantic's errors as one line per field, naming the field and what was wrong."""
    lines = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(p) for p in err.get("loc", ())) or "(arguments)"
        kind = err.get("type", "")
        if kind == "missing":
            lines.append(f"'{field}' is required but missing")
        elif kind == "extra_forbidden":
            lines.append(f"'{field}' is not an argument of this tool")
        else:
            got = err.get("input")
            shown = repr(got)
            if len(shown) > 80:
                shown = shown[:80] + "..."
            lines.append(f"'{field}': {err.get('msg')} (got {shown})")
    return "; ".join(lines)


def argument_summary(tool: Tool) -> str:
    """A one-line reminder of a tool's arguments, e.g. ``read_file(path: string, ...)``."""
    schema = parameters_schema(tool.args_model)
    required = set(schema.get("required", []))
    parts = []
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type", "any")
        if isinstance(kind, list):
            kind = "|".join(kind)
        flag = "" if name in required else "?"
        default = f" = {json.dumps(prop['default'])}" if "default" in prop else ""
        parts.append(f"{name}{flag}: {kind}{default}")
    return f"Expected arguments: {tool.name}({', '.join(parts)})"


def parameters_schema(model: type[BaseModel]) -> dict:
    """The JSON schema of an argument model, cleaned for a model's eyes.

    No "title" noise, ``$ref`` inlined, ``X | None`` shown as plain ``X``, null defaults
    dropped, ``additionalProperties: false`` and an explicit ``required`` list.
    """
    raw = model.model_json_schema()
    defs = raw.pop("$defs", {})
    schema = _clean(raw, defs)
    schema["type"] = "object"
    schema.setdefault("properties", {})
    schema["required"] = list(schema.get("required", []))
    schema["additionalProperties"] = False
    ordered = {k: schema[k] for k in ("type", "properties", "required") if k in schema}
    ordered.update({k: v for k, v in schema.items() if k not in ordered})
    return ordered


def _clean(node: Any, defs: dict) -> Any:
    if isinstance(node, list):
        return [_clean(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
        merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
        return _clean(merged, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _ordered(_clean(prop, defs)) for name, prop in value.items()}
        else:
            out[key] = _clean(value, defs)
    options = out.get("anyOf")
    if isinstance(options, list):
        non_null = [o for o in options if o != {"type": "null"}]
        if len(non_null) == 1 and len(non_null) < len(options):
            del out["anyOf"]
            out = {**non_null[0], **out}
    if out.get("default", 0) is None:
        del out["default"]
    return out


def _ordered(prop: Any) -> Any:
    if not isinstance(prop, dict):
        return prop
    first = {k: prop[k] for k in ("type", "description") if k in prop}
    return {**first, **{k: v for k, v in prop.items() if k not in first}}


def default_registry() -> ToolRegistry:
    """A registry with every built-in tool."""
    from tools.definitions import ReplaceDefinition
    from tools.files import EditFile, ReadFile, WriteFile
    from tools.finish import Finish
    from tools.git import GitCommit, GitDiff, GitStatus
    from tools.images import ViewImage
    from tools.search import FindFiles, Grep, ListDir
    from tools.shell import Run

    return ToolRegistry(
        [
            ReadFile(),
            WriteFile(),
            EditFile(),
            ReplaceDefinition(),
            ListDir(),
            FindFiles(),
            Grep(),
            ViewImage(),
            Run(),
            GitStatus(),
            GitDiff(),
            GitCommit(),
            Finish(),
        ]
    )
