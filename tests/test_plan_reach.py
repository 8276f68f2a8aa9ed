"""Every workflow setting reaches the plan, and every plan field is used: the plan is a
derivation with a total check.

One workflow sets every field of every schema section (run, phase, model, workspace, limits,
notify, tools, params) to a value unlike its default; ``build_plan`` must carry each one into
the plan (``REACH`` names every field: a new setting without an entry fails here, as a dropped
one does). Then each field of the plan's dataclasses must be read somewhere in the pilot
outside ``pilot/workflow/plan.py`` (a plan field nothing reads is a setting dropped one step
later). ``tests/test_model_settings_reach.py`` follows ``model.*`` further, into the request
bodies a real server receives.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from pilot.workflow.load import LoadedWorkflow, parse_workflow_text
from pilot.workflow.plan import (
    Limits,
    ModelPlan,
    NotifyPlan,
    PhasePlan,
    RunPlan,
    build_plan,
    schema_default,
)
from pilot.workflow.schema import (
    ModelSettings,
    NotifySettings,
    ParamSpec,
    Phase,
    PhaseLimits,
    RunLimits,
    ToolSettings,
    Workflow,
    WorkspaceSettings,
)

ROOT = Path(__file__).resolve().parent.parent
API_KEY_ENV = "MARATHON_TEST_PLAN_REACH_KEY"

WORKFLOW: dict[str, Any] = {
    "version": 1,
    "name": "reach-all",
    "description": "every setting, none at its default",
    "params": {
        "target": {
            "type": "choice",
            "choices": ["alpha", "beta"],
            "required": True,
            "description": "which one",
        },
        "level": {"type": "integer", "default": 3},
    },
    "model": {
        "endpoint": "http://127.0.0.1:9/v1",
        "name": "reach-model",
        "api_key_env": API_KEY_ENV,
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 7,
        "max_tokens": 777,
        "request_timeout": 321,
        "idle_timeout": 54,
        "server_wait": 43,
        "context_window": 16384,
        "context_margin": 99,
        "stream_interval": 4,
        "vision": False,
        "tool_calls": "forced",
    },
    "workspace": {
        "path": "{{ params.target }}-dir",
        "init": True,
        "branch": "reach/{{ params.target }}",
        "in_place": True,
        "carry_changes": True,
    },
    "tools": [{"run": {"timeout": 11, "max_timeout": 22, "max_output_lines": 33}}, "finish"],
    "env_allowlist": ["PYTHON*"],
    "sandbox": "bwrap",
    "redact": ["token-[0-9]+"],
    "system": "System for {{ params.target }}: {{ workflow.description }}.",
    "limits": {
        "max_steps": 17,
        "max_wall_time": 1234,
        "max_tokens": 5555,
        "max_no_progress_steps": 9,
    },
    "notify": {"command": "echo done", "on": ["failed"], "timeout": 5},
    "phases": [
        {
            "name": "only",
            "description": "the one phase",
            "prompt": "Work on {{ params.target }} ({{ phase.description }}).",
            "tools": ["run", "finish"],
            "limits": {
                "max_steps": 3,
                "max_wall_time": 60,
                "max_tokens": 999,
                "max_no_progress_steps": 4,
            },
            "check": "test {{ params.target }} = beta",
            "check_timeout": 77,
            "images": ["shot-{{ params.target }}.png"],
            "context": ["echo {{ params.target }}"],
            "locate": True,
            "require_change": True,
            "max_attempts": 5,
            "check_after_edit": True,
            "retry_fresh": True,
        }
    ],
}

Check = Callable[[RunPlan, LoadedWorkflow], bool]


def _phase(plan: RunPlan) -> PhasePlan:
    return plan.phases[0]


REACH: dict[type[BaseModel], dict[str, Check]] = {
    Workflow: {
        "version": lambda p, lw: lw.workflow.version == 1,  # read by the loader: one format
        "name": lambda p, lw: p.workflow_name == "reach-all",
        "description": lambda p, lw: p.system.endswith(": every setting, none at its default."),
        "params": lambda p, lw: lw.params == {"target": "beta", "level": 3},
        "model": lambda p, lw: p.model.name == "reach-model",
        "workspace": lambda p, lw: p.workspace.endswith("beta-dir"),
        "tools": lambda p, lw: p.tools == ["run", "finish"],
        "env_allowlist": lambda p, lw: p.env_allowlist == ["PYTHON*"],
        "sandbox": lambda p, lw: p.sandbox == "bwrap",
        "redact": lambda p, lw: p.redact == ["token-[0-9]+"],
        "system": lambda p, lw: p.system.startswith("System for beta: "),
        "limits": lambda p, lw: p.limits.max_steps == 17,
        "notify": lambda p, lw: p.notify is not None,
        "phases": lambda p, lw: len(p.phases) == 1,
    },
    ParamSpec: {
        "type": lambda p, lw: lw.params["level"] == 3 and isinstance(lw.params["level"], int),
        "choices": lambda p, lw: lw.workflow.params["target"].choices == ["alpha", "beta"],
        "required": lambda p, lw: lw.workflow.params["target"].required,  # given: --param
        "default": lambda p, lw: lw.params["level"] == 3,
        "description": lambda p, lw: lw.workflow.params["target"].description == "which one",
    },
    ModelSettings: {
        "endpoint": lambda p, lw: p.model.endpoint == "http://127.0.0.1:9/v1",
        "endpoints": lambda p, lw: p.model.targets == ("http://127.0.0.1:9/v1",),
        "profile": lambda p, lw: True,  # exclusive with endpoint: test_model_settings_reach
        "fleet": lambda p, lw: True,  # exclusive with endpoint: test_brain_fleet
        "name": lambda p, lw: p.model.name == "reach-model",
        "api_key_env": lambda p, lw: p.model.client.api_key == "sk-reach",
        "temperature": lambda p, lw: p.model.temperature == 0.7,
        "top_p": lambda p, lw: p.model.top_p == 0.9,
        "seed": lambda p, lw: p.model.seed == 7,
        "max_tokens": lambda p, lw: p.model.max_tokens == 777,
        "request_timeout": lambda p, lw: p.model.client.request_timeout == 321,
        "idle_timeout": lambda p, lw: p.model.client.idle_timeout == 54,
        "server_wait": lambda p, lw: p.model.client.server_wait == 43,
        "context_window": lambda p, lw: p.model.context_window == 16384,
        "context_margin": lambda p, lw: p.model.context_margin == 99,
        "stream_interval": lambda p, lw: p.model.stream_interval == 4,
        "vision": lambda p, lw: p.media.vision is False,
        "tool_calls": lambda p, lw: p.model.tool_calls == "forced",
    },
    WorkspaceSettings: {
        "path": lambda p, lw: p.source.endswith("beta-dir"),
        "init": lambda p, lw: p.init_workspace is True,
        "branch": lambda p, lw: p.branch == "reach/beta",
        "in_place": lambda p, lw: p.in_place is True,
        "carry_changes": lambda p, lw: p.carry_changes is True,
    },
    ToolSettings: {
        "timeout": lambda p, lw: p.tool_settings["run"]["timeout"] == 11,
        "max_timeout": lambda p, lw: p.tool_settings["run"]["max_timeout"] == 22,
        # a tool's own keys pass through as they are
        "<extra>": lambda p, lw: p.tool_settings["run"]["max_output_lines"] == 33,
    },
    RunLimits: {
        "max_steps": lambda p, lw: p.limits.max_steps == 17,
        "max_wall_time": lambda p, lw: p.limits.max_wall_time == 1234,
        "max_tokens": lambda p, lw: p.limits.max_tokens == 5555,
        "max_no_progress_steps": lambda p, lw: p.max_no_progress_steps == 9,
    },
    PhaseLimits: {
        "max_steps": lambda p, lw: _phase(p).limits.max_steps == 3,
        "max_wall_time": lambda p, lw: _phase(p).limits.max_wall_time == 60,
        "max_tokens": lambda p, lw: _phase(p).limits.max_tokens == 999,
        "max_no_progress_steps": lambda p, lw: _phase(p).max_no_progress_steps == 4,
    },
    Phase: {
        "name": lambda p, lw: _phase(p).name == "only",
        "description": lambda p, lw: _phase(p).prompt.endswith("(the one phase)."),
        "prompt": lambda p, lw: _phase(p).prompt.startswith("Work on beta "),
        "tools": lambda p, lw: _phase(p).tools == ["run", "finish"],
        "limits": lambda p, lw: _phase(p).limits.max_steps == 3,
        "check": lambda p, lw: _phase(p).check == "test beta = beta",
        "check_timeout": lambda p, lw: _phase(p).check_timeout == 77,
        "images": lambda p, lw: _phase(p).images == ("shot-beta.png",),
        "context": lambda p, lw: _phase(p).context == ("echo beta",),
        "locate": lambda p, lw: _phase(p).locate is True,
        "require_change": lambda p, lw: _phase(p).require_change is True,
        "max_attempts": lambda p, lw: _phase(p).max_attempts == 5,
        "check_after_edit": lambda p, lw: _phase(p).check_after_edit is True,
        "retry_fresh": lambda p, lw: _phase(p).retry_fresh is True,
    },
    NotifySettings: {
        "command": lambda p, lw: p.notify is not None and p.notify.command == "echo done",
        "on": lambda p, lw: p.notify is not None and p.notify.on == ("failed",),
        "timeout": lambda p, lw: p.notify is not None and p.notify.timeout == 5,
    },
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunPlan, LoadedWorkflow]:
    folder = tmp_path_factory.mktemp("reach")
    mp = pytest.MonkeyPatch()
    mp.setenv(API_KEY_ENV, "sk-reach")
    try:
        loaded = parse_workflow_text(
            yaml.safe_dump(WORKFLOW, sort_keys=False),
            "reach.yaml",
            {"target": "beta"},
            tool_names=["run", "finish"],
            base_dir=folder,
        )
        plan = build_plan(loaded, "run-1", started_at="2026-12-06T00:00:00+00:00")
    finally:
        mp.undo()
    return plan, loaded


def test_every_schema_field_is_named() -> None:
    for section, checks in REACH.items():
        fields = set(section.model_fields)
        if section is ToolSettings:
            fields.add("<extra>")
        assert set(checks) == fields, (
            f"{section.__name__}: a field without a reach check (or a check without a field): "
            f"{sorted(fields ^ set(checks))}"
        )


def test_the_workflow_sets_every_field_unlike_its_default() -> None:
    """A check passing on a default value would prove nothing."""
    sections = {
        Workflow: WORKFLOW,
        ModelSettings: WORKFLOW["model"],
        WorkspaceSettings: WORKFLOW["workspace"],
        RunLimits: WORKFLOW["limits"],
        NotifySettings: WORKFLOW["notify"],
        Phase: WORKFLOW["phases"][0],
        PhaseLimits: WORKFLOW["phases"][0]["limits"],
        ParamSpec: {**WORKFLOW["params"]["level"], **WORKFLOW["params"]["target"]},
    }
    exclusive = {"endpoints", "profile", "fleet"}  # one endpoint source at a time
    for section, given in sections.items():
        for name, info in section.model_fields.items():
            if section is ModelSettings and name in exclusive:
                continue
            assert name in given, f"{section.__name__}.{name} is not set in the workflow"
            if not info.is_required() and name != "version":
                default = schema_default(section, name)
                assert given[name] != default, f"{section.__name__}.{name} is at its default"


@pytest.mark.parametrize(
    ("section", "name"),
    [(section, name) for section, checks in REACH.items() for name in checks],
    ids=lambda v: v.__name__ if isinstance(v, type) else str(v),
)
def test_each_setting_reaches_the_plan(
    built: tuple[RunPlan, LoadedWorkflow], section: type[BaseModel], name: str
) -> None:
    plan, loaded = built
    assert REACH[section][name](plan, loaded), f"{section.__name__}.{name} did not reach the plan"


PLAN_CLASSES = (RunPlan, PhasePlan, ModelPlan, NotifyPlan, Limits)


def _attributes_read(exclude: Path) -> set[str]:
    """Every attribute name read (``x.name``) in the pilot's source, but in ``exclude``."""
    names: set[str] = set()
    for path in (ROOT / "pilot").rglob("*.py"):
        if path == exclude:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                names.add(node.attr)
    return names


def _read_through_properties(plan_source: Path, read: set[str]) -> set[str]:
    """The fields the plan classes' properties read (``self.x``), for the properties that are
    read outside the plan (``ModelPlan.sampling`` is how the temperature reaches a request)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(plan_source.read_text())):
        is_property = isinstance(node, ast.FunctionDef) and any(
            isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list
        )
        if not is_property or node.name not in read:
            continue
        for inner in ast.walk(node):
            is_self = isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name)
            if is_self and inner.value.id == "self":  # type: ignore[attr-defined]
                found.add(inner.attr)  # type: ignore[attr-defined]
    return found


def test_every_plan_field_is_used_outside_the_plan() -> None:
    plan_source = ROOT / "pilot" / "workflow" / "plan.py"
    read = _attributes_read(plan_source)
    read |= _read_through_properties(plan_source, read)
    unused = [
        f"{cls.__name__}.{f.name}"
        for cls in PLAN_CLASSES
        for f in dataclasses.fields(cls)
        if f.name not in read
    ]
    assert not unused, f"plan fields nothing reads (settings dropped after the plan): {unused}"


def test_plan_defaults_are_the_schemas() -> None:
    """A plan made without a setting gets the schema's default (each written once)."""
    phase = PhasePlan(name="p", prompt="x", tools=[])
    for name in ("check_timeout", "max_attempts", "locate", "require_change"):
        assert getattr(phase, name) == schema_default(Phase, name)
    for name in ("check_after_edit", "retry_fresh"):
        assert getattr(phase, name) == schema_default(Phase, name)
    notify = NotifyPlan(command="true")
    assert notify.on == schema_default(NotifySettings, "on")
    assert notify.timeout == schema_default(NotifySettings, "timeout")
    from pilot.agent.progress import ProgressLimits

    assert ProgressLimits().no_progress == schema_default(RunLimits, "max_no_progress_steps")
    from pilot.model.settings import ClientSettings

    for name in ("request_timeout", "idle_timeout", "server_wait"):
        assert getattr(ClientSettings(), name) == schema_default(ModelSettings, name)
