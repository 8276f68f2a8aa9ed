"""Workflow files: the public API (schema, loading with file:line errors, templating).

The implementation is split by concern: ``workflow_schema`` (what a workflow may
say), ``workflow_load`` (YAML -> validated workflow, every error located) and
``templating`` (sandboxed, strict Jinja). Import from here; the split is private.

Typical use::

    params = {**load_params_file(f), **parse_param_assignments(args.param)}
    loaded = load_workflow(Path("workflows/refactor_repo.yaml"), params,
                           tool_names=registry.names())
    prompt = render_phase_prompt(loaded, 0, RunContext(id=run_id))
"""

from __future__ import annotations

from pilot.errors import WorkflowError, WorkflowErrors
from pilot.templating import RunContext
from pilot.workflow_load import (
    LoadedWorkflow,
    load_params_file,
    load_workflow,
    parse_param_assignments,
    parse_workflow_text,
    render_branch,
    render_check,
    render_phase_prompt,
    render_system,
    render_workspace_path,
)
from pilot.workflow_schema import (
    DEFAULT_ENDPOINT,
    FORMAT_VERSION,
    PARAM_TYPES,
    ModelSettings,
    ParamSpec,
    Phase,
    PhaseLimits,
    RunLimits,
    ToolSettings,
    Workflow,
    WorkspaceSettings,
    parse_duration,
)

__all__ = [
    "DEFAULT_ENDPOINT",
    "FORMAT_VERSION",
    "PARAM_TYPES",
    "LoadedWorkflow",
    "ModelSettings",
    "ParamSpec",
    "Phase",
    "PhaseLimits",
    "RunContext",
    "RunLimits",
    "ToolSettings",
    "Workflow",
    "WorkflowError",
    "WorkflowErrors",
    "WorkspaceSettings",
    "load_params_file",
    "load_workflow",
    "parse_duration",
    "parse_param_assignments",
    "parse_workflow_text",
    "render_branch",
    "render_check",
    "render_phase_prompt",
    "render_system",
    "render_workspace_path",
]
