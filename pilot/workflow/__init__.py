"""The workflow wing: a workflow file, from YAML text to the plan one run follows.

Modules, by concern: ``schema`` (what a workflow may say, pydantic), ``load`` (YAML ->
validated workflow, every error located at file:line), ``templating`` (sandboxed, strict
Jinja) and ``plan`` (``RunPlan``: what the loop needs, rendered for one run).

It must not touch the store, the model server or the workspace: loading a workflow has no
side effects, so ``--dry-run`` and ``pilot check`` can load anything safely.

Typical use::

    params = {**load_params_file(f), **parse_param_assignments(args.param)}
    loaded = load_workflow(Path("workflows/refactor_repo.yaml"), params,
                           tool_names=registry.names())
    prompt = render_phase_prompt(loaded, 0, RunContext(id=run_id))
"""

from __future__ import annotations

from pilot.errors import WorkflowError, WorkflowErrors
from pilot.workflow.load import (
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
from pilot.workflow.schema import (
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
from pilot.workflow.templating import RunContext

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
