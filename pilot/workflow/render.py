"""Rendering a loaded workflow's templates: for one run, and once at load time to check them.

The templates see ``params``, ``workflow``, ``run`` and (phase templates) ``phase``; the
workspace path is rendered first (it sees only the run's id and start time), then the branch
(which sees the workspace), then the system prompt and the phases (which see both), so
``render_run`` renders them in that order. Rendering is pure: it reads no file and runs
nothing (a check command is rendered here and run by the loop).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pilot.errors import WorkflowError
from pilot.workflow.loaded import LoadedWorkflow
from pilot.workflow.schema import Loc, Workflow
from pilot.workflow.source import dotted
from pilot.workflow.templating import RunContext, TemplateKind, WorkflowTemplate

__all__ = [
    "RenderedPhase",
    "RenderedRun",
    "check_templates",
    "render_branch",
    "render_check",
    "render_phase_context",
    "render_phase_images",
    "render_phase_prompt",
    "render_run",
    "render_system",
    "render_workspace_path",
    "template_slots",
]

# The run context used to try every template at load time.
_PLACEHOLDER_RUN_ID = "00000000-check"


@dataclass(frozen=True)
class TemplateSlot:
    path: Loc
    kind: TemplateKind
    phase: int | None = None
    command: bool = False
    """It becomes a shell command: its values are quoted (``make_environment(commands=True)``)."""


def template_slots(workflow: Workflow) -> list[tuple[TemplateSlot, str]]:
    slots: list[tuple[TemplateSlot, str]] = [
        (TemplateSlot(("workspace", "path"), "workspace_path"), workflow.workspace.path),
        (TemplateSlot(("workspace", "branch"), "branch"), workflow.workspace.branch),
    ]
    if workflow.system is not None:
        slots.append((TemplateSlot(("system",), "system"), workflow.system))
    for i, phase in enumerate(workflow.phases):
        slots.append((TemplateSlot(("phases", i, "prompt"), "phase", i), phase.prompt))
        if phase.check is not None:
            slots.append((TemplateSlot(("phases", i, "check"), "phase", i, True), phase.check))
        for k, image in enumerate(phase.images):
            slots.append((TemplateSlot(("phases", i, "images", k), "phase", i), image))
        for k, command in enumerate(phase.context):
            slots.append((TemplateSlot(("phases", i, "context", k), "phase", i, True), command))
    return slots


def _context(
    workflow: Workflow,
    params: Mapping[str, Any],
    kind: TemplateKind,
    run: RunContext,
    phase_index: int | None = None,
) -> dict[str, Any]:
    context: dict[str, Any] = {
        "params": dict(params),
        "workflow": {"name": workflow.name, "description": workflow.description or ""},
        "run": run.as_dict(kind),
    }
    if kind == "phase" and phase_index is not None:
        phase = workflow.phases[phase_index]
        context["phase"] = {
            "name": phase.name,
            "index": phase_index + 1,
            "count": len(workflow.phases),
            "description": phase.description or "",
        }
    return context


def _branch_problem(name: str) -> str | None:
    """Why ``name`` is not a usable git branch name (git check-ref-format), or None."""
    if not name:
        return "it is empty"
    bad = sorted({c for c in name if c in " ~^:?*[\\" or ord(c) < 32 or ord(c) == 127})
    if bad:
        return f"it contains {', '.join(repr(c) for c in bad)}"
    if ".." in name or "@{" in name or "//" in name:
        return "it contains '..', '@{' or '//'"
    if name.startswith(("-", "/")) or name.endswith(("/", ".", ".lock")) or name == "@":
        return "it starts with '-' or '/', or ends with '/', '.' or '.lock'"
    if any(part.startswith(".") for part in name.split("/")):
        return "a part of it starts with '.'"
    return None


def check_templates(
    workflow: Workflow,
    params: Mapping[str, Any],
    templates: Mapping[str, WorkflowTemplate],
    base_dir: Path,
) -> list[WorkflowError]:
    """Render every template once with the real params and a stand-in run."""
    errors: list[WorkflowError] = []
    run = RunContext(id=_PLACEHOLDER_RUN_ID, started_at="2000-01-01T00:00:00+00:00")
    rendered: dict[str, str] = {}
    for slot, _source in template_slots(workflow):
        key = dotted(slot.path)
        template = templates.get(key)
        if template is None:
            continue
        if slot.kind == "branch":
            workspace = rendered.get("workspace.path", "")
            run = RunContext(run.id, run.started_at, _absolute(workspace, base_dir))
        elif slot.kind in ("system", "phase") and run.branch == "":
            run = RunContext(
                run.id, run.started_at, run.workspace, rendered.get("workspace.branch", "")
            )
        try:
            text = template.render(_context(workflow, params, slot.kind, run, slot.phase))
        except WorkflowError as exc:
            errors.append(exc)
            continue
        rendered[key] = text.strip()
        if slot.kind == "workspace_path" and not text.strip():
            errors.append(template.error(None, "renders to an empty path; give a directory"))
        if slot.kind == "branch":
            problem = _branch_problem(text.strip())
            if problem:
                errors.append(
                    template.error(
                        None,
                        f"renders to {text.strip()!r}, which is not a valid git branch name "
                        f"({problem}); use letters, digits, '-', '_', '.' and '/'",
                    )
                )
    return errors


def _absolute(path: str, base_dir: Path) -> str:
    expanded = os.path.expanduser(path.strip())
    return os.path.abspath(os.path.join(base_dir, expanded))


def _template(loaded: LoadedWorkflow, key: str) -> WorkflowTemplate:
    try:
        return loaded.templates[key]
    except KeyError:
        raise WorkflowError(
            f"the workflow has no template at {key}", file=loaded.filename
        ) from None


def _phase_run(loaded: LoadedWorkflow, phase_index: int) -> None:
    count = len(loaded.workflow.phases)
    if not 0 <= phase_index < count:
        raise IndexError(f"phase index {phase_index} out of range (the workflow has {count})")


def render_system(loaded: LoadedWorkflow, run: RunContext) -> str:
    """The system prompt for ``run``; empty when the workflow has none (use the built-in)."""
    if loaded.workflow.system is None:
        return ""
    template = _template(loaded, "system")
    return template.render(_context(loaded.workflow, loaded.params, "system", run)).strip()


def render_phase_prompt(loaded: LoadedWorkflow, phase_index: int, run: RunContext) -> str:
    """Phase ``phase_index``'s (0-based) prompt; templates see ``phase.index`` 1-based."""
    _phase_run(loaded, phase_index)
    template = _template(loaded, f"phases[{phase_index}].prompt")
    context = _context(loaded.workflow, loaded.params, "phase", run, phase_index)
    return template.render(context).strip()


def render_check(loaded: LoadedWorkflow, phase_index: int, run: RunContext) -> str | None:
    """Phase ``phase_index``'s check command, or None when the phase has no check."""
    _phase_run(loaded, phase_index)
    if loaded.workflow.phases[phase_index].check is None:
        return None
    template = _template(loaded, f"phases[{phase_index}].check")
    context = _context(loaded.workflow, loaded.params, "phase", run, phase_index)
    return template.render(context).strip()


def _render_phase_list(
    loaded: LoadedWorkflow, phase_index: int, run: RunContext, field: str
) -> list[str]:
    """Phase ``phase_index``'s list ``field``, each item rendered; blanks dropped."""
    _phase_run(loaded, phase_index)
    context = _context(loaded.workflow, loaded.params, "phase", run, phase_index)
    items = getattr(loaded.workflow.phases[phase_index], field)
    rendered = (
        _template(loaded, f"phases[{phase_index}].{field}[{k}]").render(context).strip()
        for k in range(len(items))
    )
    return [text for text in rendered if text]


def render_phase_images(loaded: LoadedWorkflow, phase_index: int, run: RunContext) -> list[str]:
    """Phase ``phase_index``'s image paths (workspace-relative), rendered; blanks dropped."""
    return _render_phase_list(loaded, phase_index, run, "images")


def render_phase_context(loaded: LoadedWorkflow, phase_index: int, run: RunContext) -> list[str]:
    """Phase ``phase_index``'s ``context:`` commands, rendered; blanks dropped."""
    return _render_phase_list(loaded, phase_index, run, "context")


def render_workspace_path(loaded: LoadedWorkflow, run: RunContext) -> Path:
    """The absolute workspace directory (``~`` expanded, relative to ``loaded.base_dir``)."""
    template = _template(loaded, "workspace.path")
    text = template.render(_context(loaded.workflow, loaded.params, "workspace_path", run))
    if not text.strip():
        raise template.error(None, "renders to an empty path; give a directory")
    return Path(_absolute(text, loaded.base_dir))


def render_branch(loaded: LoadedWorkflow, run: RunContext) -> str:
    """The run's work branch name, checked to be a valid git branch name."""
    template = _template(loaded, "workspace.branch")
    name = template.render(_context(loaded.workflow, loaded.params, "branch", run)).strip()
    problem = _branch_problem(name)
    if problem:
        raise template.error(
            None, f"renders to {name!r}, which is not a valid git branch name ({problem})"
        )
    return name


@dataclass(frozen=True)
class RenderedPhase:
    """One phase's templates, rendered for a run."""

    prompt: str
    check: str | None
    images: tuple[str, ...]
    context: tuple[str, ...] = ()


@dataclass(frozen=True)
class RenderedRun:
    """Every template of a workflow rendered for one run, and the run context they saw."""

    run: RunContext
    """Complete: its ``workspace`` is where the run works, its ``branch`` the rendered one."""
    source: Path
    """The rendered ``workspace.path``: the checkout a run's worktree is made from."""
    system: str
    """The workflow's system prompt ("" when it has none)."""
    phases: tuple[RenderedPhase, ...]


def render_run(
    loaded: LoadedWorkflow, run_id: str, *, started_at: str = "", workspace: str | None = None
) -> RenderedRun:
    """Render the whole workflow for one run, in the order its templates depend on each
    other: the workspace path (which sees only the id and start time), then the branch (which
    sees the workspace: ``workspace`` when the run works elsewhere, a worktree, else the
    rendered path), then the system prompt and the phases (which see both)."""
    run = RunContext(id=run_id, started_at=started_at)
    source = render_workspace_path(loaded, run)
    run = replace(run, workspace=workspace or str(source))
    run = replace(run, branch=render_branch(loaded, run))
    phases = tuple(
        RenderedPhase(
            prompt=render_phase_prompt(loaded, index, run),
            check=render_check(loaded, index, run),
            images=tuple(render_phase_images(loaded, index, run)),
            context=tuple(render_phase_context(loaded, index, run)),
        )
        for index in range(len(loaded.workflow.phases))
    )
    return RenderedRun(run=run, source=source, system=render_system(loaded, run), phases=phases)
