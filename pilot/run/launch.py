"""From a workflow file (or a stored run) to a driven run: params, plan, dry-run server.

Kept apart from the CLI so tests and other front ends (the queue worker) start runs the same way.
The plan itself is built by ``pilot.workflow.plan.build_plan`` (re-exported here for the CLI);
this module only gathers the params, checks a run can start, and hands the plan builder to the
runner.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from pilot.environ import state_dir
from pilot.errors import ConfigurationError
from pilot.run.outcomes import RunOutcome
from pilot.run.runner import Runner
from pilot.store import layout
from pilot.store.event_store import EventStore, LaunchFacts, RunRecord
from pilot.workflow import (
    LoadedWorkflow,
    load_params_file,
    load_workflow,
    parse_param_assignments,
    parse_workflow_text,
)
from pilot.workflow.params import sample_params
from pilot.workflow.plan import EndpointOverride, RunPlan, build_plan, split_endpoints

__all__ = [
    "DryRun",
    "EndpointOverride",
    "Preflight",
    "build_plan",
    "check_workflow_file",
    "collect_params",
    "copy_sample_repo",
    "is_dry_run",
    "keep_durability",
    "load_for_run",
    "load_stored",
    "preflight",
    "resume_run",
    "run_plan",
    "split_endpoints",
    "start_run",
    "stored_endpoints",
    "tool_names",
    "validate_workflow",
]


def tool_names() -> list[str]:
    from tools.registry import default_registry

    return default_registry().names()


def collect_params(
    assignments: Sequence[str], params_file: Path | None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    params: dict[str, Any] = dict(extra or {})
    if params_file is not None:
        params.update(load_params_file(params_file))
    params.update(parse_param_assignments(assignments))
    return params


def load_for_run(
    workflow: Path,
    assignments: Sequence[str],
    params_file: Path | None = None,
    *,
    extra_params: dict[str, Any] | None = None,
    settings: Sequence[str] = (),
) -> LoadedWorkflow:
    params = collect_params(assignments, params_file, extra_params)
    return load_workflow(workflow, params, tool_names=tool_names(), settings=settings)


def check_workflow_file(
    workflow: Path,
    assignments: Sequence[str],
    params_file: Path | None = None,
    settings: Sequence[str] = (),
) -> None:
    """The file's own problems, and its params' (required ones may still be missing: a dry
    run supplies ``repo``), before a run makes anything."""
    params = collect_params(assignments, params_file)
    load_workflow(
        workflow, params, tool_names=tool_names(), require_params=False, settings=settings
    )


def validate_workflow(workflow: Path, assignments: Sequence[str]) -> str:
    """Every check `pilot run` makes before it starts, workspace aside: the file, its params
    (a sample value for each required one not given), and every template rendered into the
    run's plan as a run would render it."""
    params = parse_param_assignments(assignments)
    # Without --param, a missing required param is not a problem of the file itself.
    loaded = load_workflow(workflow, params, tool_names=tool_names(), require_params=bool(params))
    if not params:
        sampled = {
            k: str(v) if not isinstance(v, list) else ",".join(v)
            for k, v in sample_params(loaded).items()
        }
        loaded = load_workflow(workflow, sampled, tool_names=tool_names())
    fleet = loaded.workflow.model.fleet
    build_plan(
        loaded,
        "validate",
        started_at=now_iso(),
        endpoint="http://127.0.0.1:8000/v1" if fleet else None,
        check_env=False,
    )
    wf = loaded.workflow
    return f"{workflow}: {wf.name}, {len(wf.phases)} phase(s), tools: {', '.join(wf.tool_names)}"


def now_iso() -> str:
    """A run's start time as its templates see it (``run.started_at``)."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


def run_plan(
    loaded: LoadedWorkflow,
    store: EventStore,
    run_id: str,
    *,
    started_at: str,
    endpoint: EndpointOverride = None,
    workspace: str | None = None,
) -> RunPlan:
    """The plan of one run, as every way of starting or resuming one makes it: working in the
    run's own worktree unless the workflow says ``in_place`` (``workspace``: where a resumed
    run already works), so ``run.workspace`` renders the same for a run started here, by a
    queue worker or by a resume."""
    if workspace is None and not loaded.workflow.workspace.in_place:
        workspace = str(layout.worktree_dir(store, run_id))
    return build_plan(loaded, run_id, started_at=started_at, endpoint=endpoint, workspace=workspace)


@dataclass(frozen=True)
class Preflight:
    """A run checked before anything is recorded: its id, its start time and its plan, made
    once, so the plan it was checked with is the plan it runs."""

    run_id: str
    started_at: str
    plan: RunPlan


def preflight(
    loaded: LoadedWorkflow, store: EventStore, *, endpoint: EndpointOverride = None
) -> Preflight:
    """Refuse a run that cannot start (its plan does not render, its workspace is missing, not
    a git repository, used by a live run, or a checkout with uncommitted changes its worktree
    would not see) before any record of it is written."""
    from pilot.store.event_store import new_run_id
    from pilot.workspace.snapshot import check_repository, refuse_uncommitted

    run_id, started_at = new_run_id(), now_iso()
    plan = run_plan(loaded, store, run_id, started_at=started_at, endpoint=endpoint)
    checkout = plan.source or plan.workspace
    repo = check_repository(Path(checkout), init=plan.init_workspace)
    store.check_workspace_free(run_id, checkout, claim=False)
    if repo is not None and not plan.in_place and not plan.carry_changes:
        refuse_uncommitted(repo)
    return Preflight(run_id, started_at, plan)


async def start_run(
    runner: Runner,
    loaded: LoadedWorkflow,
    *,
    endpoint: EndpointOverride = None,
    checked: Preflight | None = None,
    dry_run: bool = False,
) -> RunOutcome:
    """Record and drive a new run: with ``checked`` (``preflight``), the id, start time and
    plan it was checked with; otherwise they are made here. Its launch facts (start time,
    base folder, endpoints, dry run, durability) go in the run's own columns."""
    if dry_run and loaded.workflow.model.tool_calls == "text":
        raise ConfigurationError(
            "--dry-run: the simulated server's demo agent calls tools only through the "
            "server's parser, so model.tool_calls: text cannot be rehearsed with it (no answer "
            "would hold a call). Dry-run with tool_calls auto, native or forced, or try text "
            "mode against a real model with --endpoint."
        )
    started_at = checked.started_at if checked else now_iso()
    launch = LaunchFacts(
        started_at=started_at,
        base_dir=str(loaded.base_dir),
        # a dry run's endpoint is the in-process sim: not kept
        endpoints=() if dry_run else tuple(split_endpoints(endpoint) or ()),
        dry_run=dry_run,
        durability=runner.store.durability,
    )

    def plan_of(run_id: str) -> RunPlan:
        if checked is not None and run_id == checked.run_id:
            return checked.plan
        return run_plan(loaded, runner.store, run_id, started_at=started_at, endpoint=endpoint)

    return await runner.start(
        run_id=checked.run_id if checked else None,
        workflow_name=loaded.workflow.name,
        workflow_path=str(loaded.path or loaded.filename),
        workflow_text=loaded.text,
        params=dict(loaded.params),
        build_plan=plan_of,
        launch=launch,
    )


def keep_durability(store: EventStore, record: RunRecord, given: str | None) -> RunRecord:
    """The store set to commit as the run asks: its own durability, or ``given`` (the
    user's ``--durability``), which is then kept with the run for its next resume."""
    if given is not None and given != record.launch.durability:
        store.set_launch(record.id, replace(record.launch, durability=given))
        record = store.get_run(record.id)
    store.use_durability(record.launch.durability)
    return record


def stored_endpoints(record: RunRecord) -> list[str]:
    """The ``--endpoint``s the run was started with ([] when it used the workflow's)."""
    return list(record.launch.endpoints)


def is_dry_run(record: RunRecord) -> bool:
    return record.launch.dry_run


def load_stored(record: RunRecord) -> tuple[LoadedWorkflow, str]:
    """The workflow as it was stored with the run (whatever the file says now), and the
    run's start time as its templates saw it."""
    base_dir = record.launch.base_dir
    loaded = parse_workflow_text(
        record.workflow_text,
        record.workflow_path,
        dict(record.params),
        tool_names=tool_names(),
        base_dir=Path(base_dir) if base_dir else None,
    )
    return loaded, record.launch.started_at


async def resume_run(
    runner: Runner, record: RunRecord, *, endpoint: EndpointOverride = None
) -> RunOutcome:
    """Resume with the workflow as it was when the run started, whatever the file is now,
    and with the endpoints it was started with unless others are given."""
    loaded, started_at = load_stored(record)
    endpoint = endpoint or stored_endpoints(record) or None
    return await runner.resume(
        record.id,
        lambda run_id: run_plan(
            loaded,
            runner.store,
            run_id,
            started_at=started_at,
            endpoint=endpoint,
            workspace=record.workspace or None,
        ),
    )


# -- dry runs ---------------------------------------------------------------------------------


@dataclass
class DryRun:
    """The simulated model server (demo policy) for a run that needs no GPU."""

    endpoint: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    @contextmanager
    def maybe(
        cls,
        enabled: bool,
        workflow: Path | None,
        assignments: Sequence[str],
        console: Console,
        matrix: Path | None = None,
    ) -> Iterator[DryRun]:
        if not enabled:
            yield cls()
            return
        from brain.sim import dry_run_server

        dry = cls()
        given = parse_param_assignments(assignments)
        wants_repo = matrix is None and "repo" not in given
        with dry_run_server() as sim:
            if workflow is not None and wants_repo and _declares_repo_param(workflow):
                dry.params["repo"] = str(copy_sample_repo(sim.sample_repo))
            dry.endpoint = sim.openai_base_url
            console.print(
                f"[bold yellow]DRY RUN[/]: the simulated vLLM server (brain sim, demo policy) "
                f"answers at {sim.openai_base_url}; no GPU and no real model are used."
            )
            if "repo" in dry.params:
                console.print(
                    f"[yellow]DRY RUN[/]: working on a copy of the sample repository: "
                    f"{dry.params['repo']}"
                )
            yield dry


def _declares_repo_param(workflow: Path) -> bool:
    from pilot.errors import WorkflowError
    from pilot.workflow.source import parse_source, read_source

    try:
        doc, _problems = parse_source(read_source(workflow), str(workflow))
    except WorkflowError:
        return False  # refused with its reason when it is loaded
    params = doc.data.get("params") if doc is not None and isinstance(doc.data, dict) else None
    return isinstance(params, dict) and "repo" in params


def copy_sample_repo(sample: Path, destination: Path | None = None) -> Path:
    """A fresh git repository holding a copy of ``sample`` (the dry-run server's sample
    project), so a dry run never changes the bundled one."""
    if destination is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        destination = state_dir() / "dry-runs" / f"sample-repo-{stamp}"
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(
        sample,
        destination,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Marathon",
        "GIT_AUTHOR_EMAIL": "marathon@localhost",
        "GIT_COMMITTER_NAME": "Marathon",
        "GIT_COMMITTER_EMAIL": "marathon@localhost",
    }
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "Sample project"]):
        subprocess.run(["git", *args], cwd=destination, env=env, check=True, capture_output=True)
    return destination
