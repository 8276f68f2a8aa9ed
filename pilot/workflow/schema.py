"""The workflow file's schema: pydantic models, the single truth of what a workflow may say.

The JSON Schema (`pilot schema`), the loader's validation and the documentation of
every field all come from these models, so they cannot drift apart. Every model
forbids unknown keys: a typo must be an error, not a silently ignored setting that
surfaces at 3 a.m. This module knows nothing of YAML, files or Jinja; cross-field
checks that need precise locations are expressed as ``(loc, message)`` problems
(`Workflow.problems`) that the loader maps to file positions.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from pilot.workflow.fields import (
    DEFAULT_ENDPOINT,
    EXTENSION_PREFIX,
    FORMAT_VERSION,
    PARAM_TYPES,
    Duration,
    EnvEntry,
    Loc,
    ParamName,
    RedactPattern,
    Strict,
    check_slug,
    parse_duration,
)
from pilot.workflow.model_section import ModelSettings, check_endpoint_url

__all__ = [
    "DEFAULT_ENDPOINT",
    "EXTENSION_PREFIX",
    "FORMAT_VERSION",
    "PARAM_TYPES",
    "Loc",
    "ModelSettings",
    "ParamSpec",
    "Phase",
    "PhaseLimits",
    "RunLimits",
    "ToolSettings",
    "Workflow",
    "WorkspaceSettings",
    "check_endpoint_url",
    "coerce_param",
    "parse_duration",
]


# --------------------------------------------------------------------------- params


class ParamSpec(Strict):
    """One typed parameter, set on the command line with ``--param NAME=VALUE``."""

    type: Literal["string", "integer", "number", "boolean", "path", "choice", "list"] = Field(
        "string",
        description=(
            "How the value is parsed: string, integer, number, boolean (true/false/yes/no/1/0), "
            "path (~ expanded, made absolute), choice (one of `choices`), "
            "list (comma-separated on the command line, a YAML list in a params file)."
        ),
    )
    required: bool = Field(
        False, description="The run refuses to start without it. Incompatible with `default`."
    )
    default: Any = Field(
        None, description="Value used when the param is not given (a plain value, not a template)."
    )
    description: str | None = Field(None, description="Shown in errors and `pilot show`.")
    choices: list[str] | None = Field(
        None, description="Allowed values; only (and always) for type: choice."
    )

    @model_validator(mode="after")
    def _coherent(self) -> ParamSpec:
        if self.type == "choice" and not self.choices:
            raise ValueError("a choice param needs `choices: [a, b, ...]`")
        if self.type != "choice" and self.choices is not None:
            raise ValueError(f"`choices` only applies to type: choice (this param is {self.type})")
        if self.required and self.default is not None:
            raise ValueError(
                "a param cannot be both `required: true` and have a `default`; remove one"
            )
        if self.default is not None:
            try:
                coerce_param(self, self.default)
            except ValueError as exc:
                raise ValueError(f"default: {exc}") from None
        return self


_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


def coerce_param(spec: ParamSpec, value: Any) -> Any:
    """Parse ``value`` (a ``--param`` string, or a typed value from a params file) as ``spec``.

    Returns the typed value: str, int, float, bool, an absolute path as str, or a
    list of str. Raises ``ValueError`` whose message says what was expected, with
    an example, so the caller can prefix it with where the value came from.
    """
    kind = spec.type
    if value is None:
        raise ValueError("expected a value, got nothing")
    if kind == "list":
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                import json

                try:
                    parsed = json.loads(text)
                except ValueError:
                    raise ValueError(
                        f'expected a list like a,b,c or ["a", "b"], got {value!r}'
                    ) from None
                value = parsed
            else:
                return [item.strip() for item in text.split(",") if item.strip()]
        if not isinstance(value, list) or any(isinstance(v, dict | list) for v in value):
            raise ValueError(f"expected a list of plain values like a,b,c, got {value!r}")
        return ["" if v is None else str(v) for v in value]
    if isinstance(value, dict | list):
        raise ValueError(f"expected a single {kind} value, got {value!r}")
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"expected true or false (also yes/no, 1/0), got {value!r}")
    if isinstance(value, bool):
        raise ValueError(f"expected a {kind}, got the boolean {value!r}")
    if kind == "integer":
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int):
            return value
        try:
            return int(str(value).strip())
        except ValueError:
            raise ValueError(f"expected an integer (like 60), got {value!r}") from None
    if kind == "number":
        if isinstance(value, int | float):
            return value
        try:
            return float(str(value).strip())
        except ValueError:
            raise ValueError(f"expected a number (like 0.5), got {value!r}") from None
    text = str(value)
    if kind == "path":
        if not text.strip():
            raise ValueError("expected a path, got an empty string")
        return os.path.abspath(os.path.expanduser(text))
    if kind == "choice":
        choices = spec.choices or []
        if text not in choices:
            close = difflib.get_close_matches(text, choices, n=1, cutoff=0.6)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}{hint}")
        return text
    return text


# --------------------------------------------------------------------------- workspace


class WorkspaceSettings(Strict):
    """The directory the agent works in; all tool paths are confined to it."""

    path: str = Field(
        description="Directory (Jinja: params, workflow, run.id). Relative = from the cwd."
    )
    init: bool = Field(False, description="git init the directory if it is not a repository.")
    branch: str = Field(
        "marathon/run-{{ run.id }}",
        description="The run's work branch (Jinja); your checked-out branch is never touched.",
    )
    in_place: bool = Field(
        False,
        description="Work in the checkout itself, switched to the run's branch (uncommitted "
        "changes come along), instead of in the run's own git worktree under the state "
        "directory; one run at a time per checkout.",
    )
    carry_changes: bool = Field(
        False,
        description="Copy the checkout's uncommitted changes into the run's worktree (without "
        "it a checkout with uncommitted changes is refused).",
    )

    @field_validator("path", "branch")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value


# --------------------------------------------------------------------------- tools


def _plain_value(value: Any) -> Any:
    if value is None or isinstance(value, dict | list):
        raise ValueError(
            f"tool settings are plain values (a number, text, true or false), got {value!r}"
        )
    return value


_PlainValue = Annotated[
    Any,
    AfterValidator(_plain_value),
    WithJsonSchema({"type": ["number", "string", "boolean"]}),
]


class ToolSettings(BaseModel):
    """Per-tool settings. ``timeout``/``max_timeout`` are common; other keys are the tool's own.

    This is the one open mapping in the schema: each tool defines its own knobs
    (``max_output_lines`` for run, ``max_matches`` for grep, ...), so unknown keys
    are passed through to the tool, but only as plain values.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, _PlainValue] = Field(init=False)  # type: ignore[assignment]

    timeout: Duration | None = Field(None, description="Default time limit of one call.")
    max_timeout: Duration | None = Field(
        None, description="Largest timeout the model may ask for in a call."
    )

    @model_validator(mode="after")
    def _timeouts_ordered(self) -> ToolSettings:
        if (
            self.timeout is not None
            and self.max_timeout is not None
            and self.timeout > self.max_timeout
        ):
            raise ValueError("timeout must not exceed max_timeout")
        return self

    def as_dict(self) -> dict[str, Any]:
        """The settings as the tools read them (unset ones left out)."""
        return self.model_dump(exclude_none=True)


def _tool_item_kind(value: Any) -> str:
    return "settings" if isinstance(value, dict) else "name"


def _tools_kind(value: Any) -> str:
    return "mapping" if isinstance(value, dict) else "list"


ToolItem = Annotated[
    Annotated[str, Tag("name")] | Annotated[dict[str, ToolSettings | None], Tag("settings")],
    Discriminator(_tool_item_kind),
]
ToolList = Annotated[
    Annotated[list[ToolItem], Tag("list")]
    | Annotated[dict[str, ToolSettings | None], Tag("mapping")],
    Discriminator(_tools_kind),
]


# --------------------------------------------------------------------------- limits


class RunLimits(Strict):
    """Caps on the whole run. Every run is capped: unattended means nobody stops it."""

    max_steps: int = Field(200, gt=0, description="Model requests over the whole run.")
    max_wall_time: Duration = Field(8 * 3600, description="Wall-clock time of the run.")
    max_tokens: int = Field(
        2_000_000, gt=0, description="Prompt + completion tokens summed over requests."
    )
    max_no_progress_steps: int = Field(
        12,
        gt=0,
        description="Steps in a row that change nothing (no edit, no new test result) "
        "before the run is stopped as stuck.",
    )


class PhaseLimits(Strict):
    """Caps on one phase; unset fields are limited only by the run's limits."""

    max_steps: int | None = Field(None, gt=0)
    max_wall_time: Duration | None = None
    max_tokens: int | None = Field(None, gt=0)
    max_no_progress_steps: int | None = Field(None, gt=0)


# --------------------------------------------------------------------------- phases


class Phase(Strict):
    """One step of the workflow: a prompt, the tools it may use, and what "done" means."""

    name: str = Field(description="Unique slug, shown in reports and used by `--from-phase`.")
    description: str | None = Field(
        None, description="One line about the phase, for its templates: {{ phase.description }}."
    )
    prompt: str = Field(
        description="Instructions to the model (Jinja: params, workflow, run, phase)."
    )
    tools: list[str] | None = Field(
        None, description="Subset of the workflow's tools for this phase; default all of them."
    )
    limits: PhaseLimits = Field(default_factory=PhaseLimits)
    check: str | None = Field(
        None,
        description="Shell command (Jinja) run in the workspace when the model finishes; "
        "the phase only counts as done when it exits 0.",
    )
    check_timeout: Duration = Field(600, description="Seconds the check may run.")
    images: list[str] = Field(
        default_factory=list,
        description="Workspace image files (Jinja) attached to the prompt, e.g. "
        "docs/mockup.png; loaded like view_image (PNG, JPEG, WebP, GIF).",
    )
    context: list[str] = Field(
        default_factory=list,
        description="Shell commands (Jinja) run in the workspace as the phase starts; each "
        "one's exit status and output (its end, when long) open the phase's prompt, e.g. the "
        "failing tests' output: what the model would otherwise have to find and run first.",
    )
    locate: bool = Field(
        False,
        description="After the context commands: show the source of the functions their "
        "failures call (pytest's `>` lines, doctest's failed examples), found by their `def` "
        "outside the tests, so the model starts from the code at fault.",
    )
    require_change: bool = Field(
        False,
        description="Done only when the workspace differs from the phase's start (and the "
        "check passes): for a phase whose job is to change code, so finishing at once on an "
        "unchanged tree is not a success. No change is sent back like a failed check.",
    )
    max_attempts: int = Field(
        3,
        ge=1,
        description="Failed checks sent back to the model (with their output) before "
        "the phase fails.",
    )
    check_after_edit: bool = Field(
        False,
        description="Also run the check after every file edit that succeeds (write_file, "
        "edit_file, replace_definition): the phase is done the moment it passes (on a "
        "changed tree), and a failure's output goes back to the model at once. These runs "
        "do not count against max_attempts. For small models, which rarely call finish "
        "right after the edit that fixed it.",
    )
    retry_fresh: bool = Field(
        False,
        description="When an edit is refused or the check fails, undo the try (the "
        "workspace back to the phase's start) and ask again from the phase's prompt alone, "
        "sampled hotter, instead of going on with a conversation full of failed tries (a "
        "small model's first answer is its best). The phase's step limit bounds the tries.",
    )

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        return check_slug(value, "phase name")

    @field_validator("prompt")
    @classmethod
    def _prompt_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the prompt must say what to do in this phase")
        return value

    @field_validator("check")
    @classmethod
    def _check_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("an empty check always fails; remove `check` or give a command")
        return value

    @model_validator(mode="after")
    def _check_options_need_a_check(self) -> Phase:
        for option, does in (
            ("check_after_edit", "runs the phase's check after each edit"),
            ("retry_fresh", "starts again when the phase's check fails"),
        ):
            if getattr(self, option) and self.check is None:
                raise ValueError(
                    f"{option} {does}, and this phase has no `check`; add one (e.g. the test "
                    f"command) or remove {option}"
                )
        return self


# --------------------------------------------------------------------------- workflow


END_STATUSES = ("succeeded", "failed", "limit", "cancelled", "paused")


class NotifySettings(Strict):
    """A command run when a run ends, e.g. a webhook: ``curl -fsS -d @- https://ntfy.sh/x``."""

    command: str = Field(
        description="Shell command (sh -c) run in the workspace when a run ends; it gets the "
        "run as JSON on stdin and MARATHON_RUN_ID, MARATHON_RUN_STATUS, MARATHON_RUN_REASON, "
        "MARATHON_WORKFLOW in its environment. Its failure never changes the run."
    )
    on: list[Literal["succeeded", "failed", "limit", "cancelled", "paused"]] = Field(
        default_factory=lambda: list(END_STATUSES),
        description="Which endings notify (default: all of them).",
    )
    timeout: Duration = Field(30, description="Seconds the command may run.")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"command": value} if isinstance(value, str) else value


class Workflow(Strict):
    """A workflow file: typed params, model, workspace, tools, limits and ordered phases."""

    version: int = Field(
        FORMAT_VERSION,
        description="File format version; files keep loading across releases.",
        json_schema_extra={"const": FORMAT_VERSION},
    )
    name: str = Field(description="Slug naming the workflow, e.g. refactor-repo.")
    description: str | None = Field(
        None,
        description="One line about the workflow, for its templates: {{ workflow.description }}.",
    )
    params: dict[ParamName, ParamSpec] = Field(
        default_factory=dict, description="Typed parameters: `--param NAME=VALUE`."
    )
    model: ModelSettings = Field(default_factory=ModelSettings)
    workspace: WorkspaceSettings
    tools: ToolList = Field(
        description="Tool names, each optionally with settings (`- run: {timeout: 300}`)."
    )
    env_allowlist: list[EnvEntry] = Field(
        default_factory=list,
        description="Caller environment variables commands may see (NAME, or a glob: PYTHON*), "
        "on top of the minimal base environment the shell tool always sets.",
    )
    sandbox: Literal["auto", "bwrap", "none"] = Field(
        "auto", description="Command isolation: bwrap when available (auto), always, or never."
    )
    redact: list[RedactPattern] = Field(
        default_factory=list,
        description="Regexes (Python syntax) whose matches are replaced by "
        "[REDACTED:redact[i]] in stored events, on top of the built-in secret patterns; a "
        "(?P<secret>...) group hides only that part.",
    )
    system: str | None = Field(
        None, description="System prompt (Jinja: params, workflow, run); null = built-in."
    )
    limits: RunLimits = Field(default_factory=RunLimits)
    notify: NotifySettings | None = Field(
        None,
        description="A command run when a run ends (a string is the command); without it, "
        "$MARATHON_NOTIFY if set.",
    )
    phases: list[Phase] = Field(description="Ordered phases; at least one.")

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        return check_slug(value, "workflow name")

    @field_validator("version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value != FORMAT_VERSION:
            raise ValueError(
                f"this pilot reads workflow format version {FORMAT_VERSION}; a version {value} "
                "file needs a newer marathon (or set version: 1 if that was a typo)"
            )
        return value

    @field_validator("phases")
    @classmethod
    def _at_least_one(cls, value: list[Phase]) -> list[Phase]:
        if not value:
            raise ValueError("a workflow needs at least one phase under `phases:`")
        return value

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> Workflow:
        # The loader asks to run these itself so each problem gets its own line.
        if info.context and info.context.get("defer_cross_checks"):
            return self
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(f"{_dotted(loc)}: {msg}" for loc, msg in problems))
        return self

    # ------------------------------------------------------------------ derived views

    @property
    def tool_settings(self) -> dict[str, ToolSettings]:
        """The tools in order of appearance, each with its settings (defaults if none)."""
        out: dict[str, ToolSettings] = {}
        for name, settings, _loc in self._tool_entries():
            out.setdefault(name, settings or ToolSettings())
        return out

    def tool_settings_dicts(self) -> dict[str, dict[str, Any]]:
        """``{tool: {setting: value}}``, the shape ``tools.base.ToolContext.settings`` takes."""
        return {name: settings.as_dict() for name, settings in self.tool_settings.items()}

    @property
    def tool_names(self) -> list[str]:
        """The workflow's tool names, in order."""
        return list(self.tool_settings)

    def phase_tools(self, index: int) -> list[str]:
        """The tools phase ``index`` may use: its own subset, or all the workflow's."""
        phase = self.phases[index]
        return list(phase.tools) if phase.tools is not None else self.tool_names

    def phase_index(self, name: str) -> int:
        """Index of the phase called ``name``; ``KeyError`` if there is none."""
        for i, phase in enumerate(self.phases):
            if phase.name == name:
                return i
        raise KeyError(name)

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The JSON Schema of workflow files, for editors (`pilot schema`)."""
        schema = cls.model_json_schema(mode="validation")
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            **schema,
            "title": "Marathon workflow",
            "patternProperties": {f"^{EXTENSION_PREFIX}": {}},
        }

    def problems(self, tool_names: Collection[str] | None = None) -> list[tuple[Loc, str]]:
        """Cross-field problems, each with the location it belongs to.

        ``tool_names``, when given, is the registry's set of tool names; without it,
        only the workflow's internal consistency is checked.
        """
        out: list[tuple[Loc, str]] = []
        seen_tools: dict[str, Loc] = {}
        known = sorted(tool_names) if tool_names is not None else None
        for name, _settings, loc in self._tool_entries():
            if name in seen_tools:
                out.append((loc, f"tool {name!r} is listed twice; keep one entry"))
                continue
            seen_tools[name] = loc
            if known is not None and name not in known:
                out.append((loc, _unknown_tool_message(name, known)))
        # A phase naming a real tool that the workflow's list misspells: the list's own
        # error says it all; do not echo it once per phase.
        misspelled = known is not None and any(name not in known for name in seen_tools)
        seen_endpoints: dict[str, int] = {}
        for i, url in enumerate(self.model.endpoints or []):
            if url in seen_endpoints:
                out.append(
                    (
                        ("model", "endpoints", i),
                        f"{url} is already endpoints[{seen_endpoints[url]}]; list each server once",
                    )
                )
            seen_endpoints.setdefault(url, i)
        seen_phases: dict[str, int] = {}
        for i, phase in enumerate(self.phases):
            if phase.name in seen_phases:
                out.append(
                    (
                        ("phases", i, "name"),
                        f"phase name {phase.name!r} is already used by phases"
                        f"[{seen_phases[phase.name]}]; phase names must be unique",
                    )
                )
            else:
                seen_phases[phase.name] = i
            for j, tool in enumerate(phase.tools or []):
                if tool not in seen_tools:
                    if misspelled and known is not None and tool in known:
                        continue
                    close = difflib.get_close_matches(tool, list(seen_tools), n=1, cutoff=0.6)
                    hint = f' (did you mean "{close[0]}"?)' if close else ""
                    out.append(
                        (
                            ("phases", i, "tools", j),
                            f'tool "{tool}" is not in the workflow\'s `tools`{hint}; a phase '
                            "may only use tools the workflow lists: "
                            + (", ".join(seen_tools) or "none"),
                        )
                    )
        return out

    def _tool_entries(self) -> list[tuple[str, ToolSettings | None, Loc]]:
        entries: list[tuple[str, ToolSettings | None, Loc]] = []
        if isinstance(self.tools, dict):
            for name, settings in self.tools.items():
                entries.append((name, settings, ("tools", name)))
            return entries
        for i, item in enumerate(self.tools):
            if isinstance(item, str):
                entries.append((item, None, ("tools", i)))
            else:
                for name, settings in item.items():
                    entries.append((name, settings, ("tools", i, name)))
        return entries


def _unknown_tool_message(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f' (did you mean "{close[0]}"?)' if close else ""
    return f'unknown tool "{name}"{hint}; available tools: {", ".join(known)}'


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
