"""The workflow wing: a workflow file, from YAML text to the plan one run follows.

Modules, by concern: ``schema`` (what a workflow may say, pydantic; its ``model`` section in
``model_section``, what the sections share in ``fields``), ``source`` (a file's
text and its YAML with positions, read by ``brain.yaml_source``), ``load`` (YAML -> validated
workflow, every error located at file:line), ``params`` (``--param`` text and params files,
typed by the workflow), ``templating`` (sandboxed, strict Jinja; ``template_limits``: bounded
in size and time), ``render`` (the templates rendered for one run) and ``plan`` (``RunPlan``
and ``build_plan``: what the loop needs).

It must not touch the store, the model server or the workspace: loading a workflow has no
side effects, so ``--dry-run`` and ``pilot check`` can load anything safely (``build_plan``
reads the brain's profile or fleet registry for the endpoints, and writes nothing).

Typical use::

    params = {**load_params_file(f), **parse_param_assignments(args.param)}
    loaded = load_workflow(Path("workflows/refactor_repo.yaml"), params,
                           tool_names=registry.names())
    prompt = render_phase_prompt(loaded, 0, RunContext(id=run_id))
    plan = build_plan(loaded, run_id)  # pilot.workflow.plan: everything, rendered once
"""

from __future__ import annotations

from pilot.errors import WorkflowError, WorkflowErrors
from pilot.workflow.load import LoadedWorkflow, load_workflow, parse_workflow_text
from pilot.workflow.params import load_params_file, parse_param_assignments
from pilot.workflow.render import (
    RenderedPhase,
    RenderedRun,
    render_branch,
    render_check,
    render_phase_images,
    render_phase_prompt,
    render_run,
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
    "RenderedPhase",
    "RenderedRun",
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
    "render_phase_images",
    "render_phase_prompt",
    "render_run",
    "render_system",
    "render_workspace_path",
]
