"""Many runs in one process: a parameter matrix run side by side, and queue workers.

Runs share one event loop and one HTTP client per endpoint (continuous batching on the server
makes parallel runs nearly free); each keeps its own event stream, lease and workspace.
Workers claim runs from the store with leases, so several workers (on several machines, with
PostgreSQL) share one queue without ever driving a run twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilot.errors import ConfigurationError, MarathonError, WorkflowError
from pilot.run.launch import EndpointOverride, Preflight, load_for_run
from pilot.run.outcomes import RunOutcome
from pilot.run.runner import Runner
from pilot.store.event_store import EventStore, LaunchFacts, RunRecord
from pilot.workflow import LoadedWorkflow

if TYPE_CHECKING:
    from pilot.run.admission import Admission


def load_matrix(path: Path) -> list[dict[str, Any]]:
    """A params matrix: a YAML list of param mappings, one run each."""
    from pilot.workflow.load import load_yaml_file

    data = load_yaml_file(path)
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise WorkflowError(
            "a params matrix is a YAML list of mappings, one per run, e.g.\n"
            "- {repo: ./a}\n- {repo: ./b}",
            file=str(path),
        )
    if not data:
        raise WorkflowError(
            "the params matrix lists no runs; give one mapping of params per run, e.g.\n"
            "- {repo: ./a}\n- {repo: ./b}",
            file=str(path),
        )
    return data


def load_many(
    workflow: Path,
    assignments: Sequence[str],
    params_file: Path | None,
    matrix: Path | None,
    settings: Sequence[str] = (),
) -> list[LoadedWorkflow]:
    """One loaded workflow per parameter set (``preflight_many`` checks they can all start)."""
    rows = load_matrix(matrix) if matrix else [{}]
    return [
        load_for_run(workflow, assignments, params_file, extra_params=row, settings=settings)
        for row in rows
    ]


def preflight_many(
    loaded: Sequence[LoadedWorkflow], store: EventStore, *, endpoint: EndpointOverride = None
) -> list[Preflight]:
    """Every row checked as a single run is (``launch.preflight``) before any is recorded: one
    row that cannot start refuses the matrix, naming the row."""
    from pilot.run.launch import preflight

    checked: list[Preflight] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(loaded):
        try:
            ticket = preflight(item, store, endpoint=endpoint)
        except ConfigurationError as exc:
            raise ConfigurationError(f"matrix row {index + 1}: {exc}") from None
        checkout = str(Path(ticket.plan.source or ticket.plan.workspace).resolve())
        if checkout in seen:
            raise ConfigurationError(
                f"matrix rows {seen[checkout] + 1} and {index + 1} would share the workspace "
                f"{checkout}; two runs never share a workspace, give each its own directory"
            )
        seen[checkout] = index
        checked.append(ticket)
    return checked


async def run_many(
    runner: Runner,
    loaded: Sequence[LoadedWorkflow],
    *,
    parallel: int,
    endpoint: EndpointOverride = None,
    checked: Sequence[Preflight] | None = None,
    admission: Admission | None = None,
) -> list[RunOutcome]:
    """Start every run, at most ``parallel`` at a time, in this process (with the ids and
    start times ``checked`` by ``preflight_many``, when given; with an ``admission``, only
    while their contexts fit the server's KV cache: ``pilot.run.admission``)."""
    from pilot.run.launch import start_run

    gate = asyncio.Semaphore(max(1, parallel))
    tickets: Sequence[Preflight | None] = checked or [None] * len(loaded)

    async def one(index: int, item: LoadedWorkflow, ticket: Preflight | None) -> RunOutcome:
        async with gate:
            if admission is None:
                return await start_run(runner, item, endpoint=endpoint, checked=ticket)
            async with admission.slot(f"run {index + 1} of {len(loaded)}"):
                return await start_run(runner, item, endpoint=endpoint, checked=ticket)

    try:
        return list(
            await asyncio.gather(
                *(one(i, item, t) for i, (item, t) in enumerate(zip(loaded, tickets, strict=True)))
            )
        )
    finally:
        if admission is not None:
            await admission.aclose()
        await runner.aclose()


def enqueue(
    store: EventStore,
    workflow: Path,
    assignments: Sequence[str],
    params_file: Path | None = None,
) -> str:
    """Validate now (a bad file fails at `queue add`, not at 3 a.m.) and store the run."""
    loaded = load_for_run(workflow, assignments, params_file)
    return store.create_run(
        workflow_name=loaded.workflow.name,
        workflow_path=str(loaded.path or loaded.filename),
        workflow_text=loaded.text,
        params=dict(loaded.params),
        workspace="",
        owner=None,
        status="queued",
        origin="queue",
        launch=LaunchFacts(base_dir=str(loaded.base_dir), durability=store.durability),
    )


async def drive_claimed(
    runner: Runner, record: RunRecord, endpoint: EndpointOverride
) -> RunOutcome:
    """Start a queued run, or resume one that was paused or orphaned."""
    from pilot.run.launch import load_stored, now_iso, resume_run, run_plan

    if record.launch.durability == "full":  # never weaker than the run asks; a worker driving
        runner.store.use_durability("full")  # several runs commits as its strongest does
    if record.last_seq > 0:
        return await resume_run(runner, record, endpoint=endpoint)
    loaded, _ = load_stored(record)
    started_at = now_iso()
    runner.store.set_launch(record.id, replace(record.launch, started_at=started_at))
    return await runner.start(
        workflow_name=record.workflow_name,
        workflow_path=record.workflow_path,
        workflow_text=record.workflow_text,
        params=dict(record.params),
        build_plan=lambda run_id: run_plan(
            loaded, runner.store, run_id, started_at=started_at, endpoint=endpoint
        ),
        run_id=record.id,
        existing=True,
    )


async def work(
    runner: Runner,
    *,
    parallel: int,
    endpoint: EndpointOverride = None,
    poll_interval: float = 1.0,
    exit_when_idle: bool = False,
    admission: Admission | None = None,
) -> list[RunOutcome]:
    """Claim and drive runs until stopped (SIGTERM pauses every run cleanly, then returns).

    With an ``admission``, a run is claimed only while the runs' contexts fit the server's KV
    cache (``pilot.run.admission``); until then it stays queued and the worker says why."""
    stop = runner.stop
    assert stop is not None, "a worker needs a stop event"
    outcomes: list[RunOutcome] = []
    active: set[asyncio.Task[RunOutcome]] = set()
    told = ""
    try:
        while not stop.is_set():
            while len(active) < parallel and not stop.is_set():
                if admission is not None:
                    decision = await admission.can_admit()
                    if not decision.admit:
                        if decision.reason != told and admission.on_wait is not None:
                            admission.on_wait(f"queued runs wait for room: {decision.reason}")
                        told = decision.reason
                        break
                    told = ""
                record = await asyncio.to_thread(
                    runner.store.claim_next, runner.owner, lease_seconds=runner.lease_seconds
                )
                if record is None:
                    break
                task = asyncio.ensure_future(_safe(runner, record, endpoint))
                if admission is not None:
                    admission.admit()
                    task.add_done_callback(lambda _t, a=admission: a.release())
                active.add(task)
            if not active and exit_when_idle:
                break
            waiter = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait(
                {*active, waiter}, timeout=poll_interval, return_when=asyncio.FIRST_COMPLETED
            )
            waiter.cancel()
            for task in done - {waiter}:
                active.discard(task)  # type: ignore[arg-type]
                outcomes.append(task.result())  # type: ignore[arg-type]
        if active:
            outcomes.extend(await asyncio.gather(*active))
    finally:
        for task in active:
            task.cancel()
        if admission is not None:
            await admission.aclose()
        await runner.aclose()
    return outcomes


async def _safe(runner: Runner, record: RunRecord, endpoint: EndpointOverride) -> RunOutcome:
    """A run's own failure must not take the worker (and the other runs) down with it."""
    try:
        return await drive_claimed(runner, record, endpoint)
    except MarathonError as exc:
        with contextlib.suppress(Exception):
            runner.store.release_lease(record.id, runner.owner)
        runner.store.set_status(record.id, "failed", str(exc))
        from pilot.agent.state import RunState

        return RunOutcome(record.id, "failed", str(exc), RunState())
