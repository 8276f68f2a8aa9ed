"""Run and resume: the lease, the workspace, the model client and the loop, put together.

The runner owns the one place where events are written (``RunSession.emit``): append to the store
(committed), fold into the state, then tell the observers (live view, JSON lines). Nothing is
shown or acted upon that is not already durable: an event the loop holds back (an assistant
message and its read-only calls, their results, a snapshot) is committed with the next one
that must be durable, most often the next step's ``model_request``, or once the run's task
has waited ``commit_wait`` seconds on something, whichever comes first: a read-only step is
one transaction, so a step costs one commit (one fsync with ``--durability full``). Every
``checkpoint_every`` events the state is checkpointed (``pilot.store.checkpoint``), so a resume
folds only what came after.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import re2  # noqa: F401  (the progress tracker's engine: see below)

from pilot import events as ev
from pilot.agent.context import ServerCounts
from pilot.agent.endings import stopped_by
from pilot.agent.loop import AgentLoop
from pilot.agent.progress import ProgressLimits
from pilot.agent.seams import StopRequested, Tactics
from pilot.agent.state import RunState, fold
from pilot.environ import state_dir
from pilot.errors import ConfigurationError, MarathonError
from pilot.failpoints import (
    checkpoint_every_from_env,
    die_now,
    kill_after_seq_from_env,
    kill_at,
)
from pilot.model.types import ModelClient, WaitEvent
from pilot.private_files import inside, private_dirs
from pilot.redact import redact_for_storage
from pilot.run.claims import checkpoint_problem
from pilot.run.confinement import confinement
from pilot.run.notify import notify_run_end
from pilot.run.outcomes import (
    RunOutcome,
    status_of,
    storage_full_outcome,
    store_busy_outcome,
)
from pilot.run.session_stop import SessionStop
from pilot.store import LaunchFacts, StoreError, StoreOperationalError, layout
from pilot.store.checkpoint import (
    CHECKPOINT_EVERY,
    CheckpointWriter,
    delete_checkpoint,
    delete_legacy,
    load_run_state,
)
from pilot.store.event_store import (
    EventStore,
    StoreBusy,
    is_storage_full,
    lease_owner_id,
)
from pilot.tactics.small_models import SmallModelTactics
from pilot.workflow.plan import RunPlan
from pilot.workspace.executor import GitWorkspace, RegistryExecutor
from pilot.workspace.snapshot import (
    GitRepo,
    add_worktree,
    clear_stale_locks,
    ensure_repository,
    restore_snapshot,
    start_work_branch,
    take_snapshot,
)
from tools.registry import ToolRegistry, default_registry

# RE2 (``pilot.agent.progress._duration_re``) is imported with the runner: the fold of a resume and
# every step's tool result use it, so a run loads it with its code, not inside its first fold.
Observer = Callable[[str, int, ev.Event, RunState], None]

COMMIT_WAIT_S = 0.05
"""How long held events wait for the next commit while the run waits: a read-only tool
quicker than this shares its step's one transaction; a slower one is shown (and durable)
while it runs."""


PlanBuilder = Callable[[str], RunPlan]
"""Builds the run's plan once its id is known (prompts and the branch name may use it)."""


@dataclass
class Runner:
    """Starts and resumes runs in this process (``start``, ``resume``): the store, the tools,
    the observers and the model clients that its run sessions share."""

    store: EventStore
    registry: ToolRegistry = field(default_factory=default_registry)
    observers: list[Observer] = field(default_factory=list)
    owner: str = field(default_factory=lease_owner_id)
    lease_seconds: float = 60.0
    client_factory: Callable[[RunPlan], ModelClient] | None = None
    stop: asyncio.Event | None = None
    kill_after_seq: int | None = field(default_factory=kill_after_seq_from_env)
    checkpoint_every: int = field(
        default_factory=lambda: checkpoint_every_from_env(CHECKPOINT_EVERY)
    )
    """Events between two state checkpoints (``pilot.store.checkpoint``)."""
    commit_wait: float = COMMIT_WAIT_S
    """Seconds held events may wait while the run's task waits on something (a read-only
    tool in its thread, a request) before they are committed on their own."""
    tactics: Tactics | None = None
    """What the loop asks how to read imperfect answers (None: ``SmallModelTactics``)."""
    _clients: dict[tuple, Any] = field(default_factory=dict, repr=False)
    _server_counts: dict[tuple, ServerCounts] = field(default_factory=dict, repr=False)
    bells: set[asyncio.Event] = field(default_factory=set, repr=False)
    """One per live run session: set when this process hears ``pilot cancel``'s signal, so
    each run reads its status at once (``pilot.run.cancel_bell``)."""

    def ring_bells(self) -> None:
        """``pilot cancel`` signalled this process: every live run looks at its status now."""
        for bell in self.bells:
            bell.set()

    def artifacts_dir(self, run_id: str) -> Path:
        return layout.artifacts_dir(self.store, run_id)

    def checkpoint_dir(self, run_id: str) -> Path:
        return layout.checkpoint_dir(self.store, run_id)

    def state_paths(self) -> list[Path]:
        """What the sandbox hides from the agent's commands: the database and the folders of
        checkpoints and artifacts (made now, so that they are hidden from the first command
        on) and of background logs (where they exist)."""
        root = layout.files_root(self.store)
        folders = [root / "checkpoints", root / "artifacts"]  # a run makes both anyway
        for folder in folders:
            private_dirs(folder)
        logs = [root / "logs", state_dir() / "logs"]  # --detach's, hidden where they exist
        database = layout.sqlite_file(self.store)
        files = [Path(f"{database}{end}") for end in ("", "-wal", "-shm")] if database else []
        return [*folders, *logs, *files]

    def _client(self, plan: RunPlan, run_id: str = "", previous: str | None = None) -> ModelClient:
        """One client (one HTTP connection pool) per endpoint, shared by this process's runs;
        with several endpoints, one router for them and a per-run view of it
        (``pilot.model.router``: a run's requests stay on one endpoint while it is healthy)."""
        if self.client_factory is not None:
            return self.client_factory(plan)
        from pilot.model.client import (
            OpenAIModelClient,
        )  # imported when needed: openai is slow to load

        model = plan.model
        key = self._client_key(plan)
        if len(model.targets) > 1:
            from pilot.model.router import Router

            if key not in self._clients:
                self._clients[key] = Router(model.targets, model=model.name, settings=model.client)
            return self._clients[key].for_run(run_id, previous)
        client = self._clients.get(key)
        if client is None:
            client = OpenAIModelClient(model.endpoint, model.client)
            self._clients[key] = client
        return client

    @staticmethod
    def _client_key(plan: RunPlan) -> tuple:
        model = plan.model
        if len(model.targets) > 1:  # one router (and its view of their load) per model
            return ("router", model.targets, model.name, model.client)
        return (model.endpoint, model.client)

    def server_counts(self, plan: RunPlan) -> ServerCounts | None:
        """The tokenizer facts of the plan's server(s), shared by this process's runs (not
        with a ``client_factory``: its clients need not count alike)."""
        if self.client_factory is not None:
            return None
        return self._server_counts.setdefault(self._client_key(plan), ServerCounts())

    async def aclose(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                await client.aclose()
        self._clients.clear()

    # -- entry points -----------------------------------------------------------------------

    async def start(
        self,
        *,
        workflow_name: str,
        workflow_path: str,
        workflow_text: str,
        params: dict[str, Any],
        build_plan: PlanBuilder,
        run_id: str | None = None,
        existing: bool = False,
        launch: LaunchFacts | None = None,
    ) -> RunOutcome:
        """Create a run (or take a queued one whose lease we hold), prepare its workspace and
        branch, and drive it; ``launch``: what it is started with (kept in its row)."""
        if not existing:
            run_id = self.store.create_run(
                workflow_name=workflow_name,
                workflow_path=workflow_path,
                workflow_text=workflow_text,
                params=params,
                workspace="",
                owner=self.owner,
                lease_seconds=self.lease_seconds,
                run_id=run_id,
                launch=launch,
            )
        assert run_id is not None
        kill_at("startup")
        return await self._start_up(run_id, params, build_plan)

    def worktree_path(self, run_id: str) -> Path:
        return layout.worktree_dir(self.store, run_id)

    async def _start_up(
        self, run_id: str, params: dict[str, Any], build_plan: PlanBuilder
    ) -> RunOutcome:
        """Prepare the workspace and record ``run_started``, then drive the run. Every step is
        idempotent, so a start-up killed anywhere is done again by ``resume``; a workspace
        that cannot be prepared ends the run as failed, with the reason."""
        run = RunSession(self, run_id, None, RunState())  # type: ignore[arg-type]
        try:
            plan = build_plan(run_id)
            run.plan = plan
            run.state = RunState(progress_limits=ProgressLimits.of_plan(plan))
            repo, repository = self._prepare_workspace(run_id, plan)
            head = repo.head()
            base = take_snapshot(repo, run_id, "run start")
            self.store.set_workspace(run_id, str(repo.root))
            run.emit(
                ev.RunStarted(
                    workflow=plan.workflow_name,
                    params=params,
                    workspace=str(repo.root),
                    branch=plan.branch,
                    base_head=head,
                    base_snapshot=base,
                    endpoint=plan.model.endpoint,
                    endpoints=list(plan.model.endpoints),
                    system=plan.system,
                    phases=[p.name for p in plan.phases],
                    owner=self.owner,
                    repository=repository,
                    sandbox=confinement(plan.sandbox),
                )
            )
        except StoreBusy as exc:
            return store_busy_outcome(run_id, run.state, exc)
        except MarathonError as exc:
            try:
                run.emit_started_stub(error=str(exc))
            except StoreBusy as busy:
                return store_busy_outcome(run_id, run.state, busy)
            outcome = run.outcome()
            await notify_run_end(outcome, run.plan)
            return outcome
        except StoreOperationalError as exc:
            if not is_storage_full(exc):
                raise
            return storage_full_outcome(run_id, run.state)
        outcome = await run.drive(repo)
        await notify_run_end(outcome, run.plan)
        return outcome

    def _prepare_workspace(self, run_id: str, plan: RunPlan) -> tuple[GitRepo, str | None]:
        """The run's git workspace and, for a run in its own worktree, the user's checkout it
        was made from (None in place)."""
        self._refuse_state_inside(Path(plan.source or plan.workspace))
        if plan.in_place:
            self.store.check_workspace_free(run_id, plan.workspace)
            repo = ensure_repository(Path(plan.workspace), init=plan.init_workspace)
            clear_stale_locks(repo, run_id)
            start_work_branch(repo, plan.branch)
            return repo, None
        source = ensure_repository(Path(plan.source or plan.workspace), init=plan.init_workspace)
        path = self.worktree_path(run_id)
        self.store.check_workspace_free(run_id, str(path))
        repo = add_worktree(source, path, plan.branch, carry_changes=plan.carry_changes)
        clear_stale_locks(repo, run_id)
        return repo, str(source.root.resolve())

    def _refuse_state_inside(self, workspace: Path) -> None:
        """A workspace holding the pilot's database or state folders would hand them to the
        agent's commands (the sandbox binds the workspace writable): refused."""
        for path in (layout.files_root(self.store), layout.sqlite_file(self.store)):
            if path is not None and inside(path, workspace):
                raise ConfigurationError(
                    f"the workspace {workspace} holds Marathon's state ({path}): the agent's "
                    "commands could rewrite the run's record; keep the database and "
                    "MARATHON_HOME outside the workspace (--db, MARATHON_HOME)"
                )

    async def resume(self, run_id: str, build_plan: PlanBuilder) -> RunOutcome:
        """Continue a paused or interrupted run from its events (a run killed in its
        start-up, before ``run_started``, has its start-up done again)."""
        try:
            note = self.store.acquire_lease(run_id, self.owner, seconds=self.lease_seconds)
        except StoreBusy as exc:
            return store_busy_outcome(run_id, RunState(), exc)
        except StoreOperationalError as exc:
            if not is_storage_full(exc):
                raise
            return storage_full_outcome(run_id, RunState())
        try:
            plan = build_plan(run_id)
        except MarathonError:
            self.store.release_lease(run_id, self.owner)
            raise
        state, checkpoint_seq = load_run_state(
            self.store, run_id, self.checkpoint_dir(run_id), ProgressLimits.of_plan(plan)
        )
        refused = None
        if checkpoint_seq is not None:
            refused = checkpoint_problem(self.store, run_id, state)
            if refused is not None:  # forged or stale: the events decide
                delete_checkpoint(self.checkpoint_dir(run_id))
                state = fold(
                    self.store.load_events(run_id), progress_limits=ProgressLimits.of_plan(plan)
                )
                checkpoint_seq = None
        delete_legacy(self.artifacts_dir(run_id))
        run = RunSession(self, run_id, plan, state)
        if state.finished is not None:
            self.store.release_lease(run_id, self.owner)
            return run.outcome()
        if state.started is None:
            record = self.store.get_run(run_id)
            return await self._start_up(run_id, dict(record.params), build_plan)
        try:
            repo = self._reopen_workspace(run_id, state)
        except MarathonError:
            self.store.release_lease(run_id, self.owner)
            raise
        try:
            if refused is not None:
                note = f"{note}; its state checkpoint was refused ({refused})".lstrip("; ")
            run.emit(ev.RunResumed(owner=self.owner, note=note, from_checkpoint=checkpoint_seq))
        except StoreBusy as exc:
            return store_busy_outcome(run_id, run.state, exc)
        except StoreOperationalError as exc:
            if not is_storage_full(exc):
                raise
            return storage_full_outcome(run_id, run.state)
        outcome = await run.drive(repo)
        await notify_run_end(outcome, run.plan)
        return outcome

    def _reopen_workspace(self, run_id: str, state: RunState) -> GitRepo:
        """The workspace of a started run, with what a killed git left behind cleared (the
        lease is ours: nothing else of this run can be writing). A run's own worktree that
        is gone (removed by hand) is made again on its branch and put back to the last
        snapshot."""
        started = state.started
        assert started is not None
        root = Path(started.workspace)
        if started.repository is not None and not (root / ".git").exists():
            source = GitRepo(Path(started.repository))
            if not source.is_repo():
                raise ConfigurationError(
                    f"run {run_id}'s worktree {root} and its repository {started.repository} "
                    "are gone; the run cannot be resumed"
                )
            repo = add_worktree(source, root, started.branch, carry_changes=True, check=False)
            clear_stale_locks(repo, run_id)
            if state.snapshot:
                restore_snapshot(repo, run_id, state.snapshot, state.head)
            return repo
        repo = GitRepo(root)
        if repo.is_repo():
            clear_stale_locks(repo, run_id)
        return repo


class RunSession:
    """One sitting of a run in this process, from its start or resume until it stops: the
    emit path (fold, store, show), the held-back events, the checkpoints, the lease, and the
    agent loop it drives (a run resumed twice has had three sessions)."""

    def __init__(self, runner: Runner, run_id: str, plan: RunPlan, state: RunState) -> None:
        self.runner = runner
        self.store = runner.store
        self.run_id = run_id
        self.plan = plan
        self.state = state
        self.cancel_requested = False
        self.checkpointed_seq = state.last_seq
        self.checkpoints: CheckpointWriter | None = None
        self.unsaved: list[tuple[int, ev.Event, str]] = []
        """Events held back by ``emit(commit=False)``: in the state, not yet in the store."""
        self.totals: dict[str, Any] = {}
        """The run's totals after the unsaved events (the ``runs`` row's new values)."""
        self.flush_scheduled = False
        self._flush_timer: asyncio.TimerHandle | None = None

    def emit(self, event: ev.Event, *, commit: bool = True) -> None:
        """Record ``event``: fold it into the state, store it, then show it.

        ``commit=False`` holds it back to be committed in one transaction with the next event,
        or once the run's task has waited ``commit_wait`` seconds, whichever comes first. The
        state has it at once, the store and the observers with the transaction, so nothing is
        shown that is not durable.
        """
        event = self.honour_cancel(event)
        seq = self.state.last_seq + 1
        # Secrets never reach the store or the views; the live loop keeps the real text.
        stored, payload = redact_for_storage(
            event, self.plan.redact if self.plan is not None else (), ev.event_to_json
        )
        totals = self.totals
        status = status_of(event)
        if status is not None:
            totals["status"] = status
            totals["status_reason"] = getattr(stored, "reason", "") or ""
        totals.update(self.state.totals_with(event))
        self.unsaved.append((seq, stored, payload))
        if not commit:
            self.state.apply(event)
            self._commit_after_a_wait()
            return
        committed = self.flush()
        self.state.apply(event)
        self.show(committed)
        if isinstance(event, ev.RunFinished):
            delete_checkpoint(self.runner.checkpoint_dir(self.run_id))
        elif self.state.last_seq - self.checkpointed_seq >= self.runner.checkpoint_every or (
            isinstance(event, ev.RunPaused) and self.state.last_seq > self.checkpointed_seq
        ):
            self.checkpoint(payload)

    def honour_cancel(self, event: ev.Event) -> ev.Event:
        """A run asked to cancel never ends otherwise: its pause or its end (even one reached
        before it heard the request) is recorded as cancelled."""
        if not isinstance(event, ev.RunPaused | ev.RunFinished) or (
            isinstance(event, ev.RunFinished) and event.status == "cancelled"
        ):
            return event
        if not self.cancel_requested:
            with contextlib.suppress(StoreError, StoreBusy, StoreOperationalError):
                self.cancel_requested = self._cancel_requested()
        if not self.cancel_requested:
            return event
        if isinstance(event, ev.RunPaused):
            why = "stopped at its next safe point"
        else:
            why = f"it had {event.status} before it heard the request"
        return ev.RunFinished(
            status="cancelled", reason=f"cancelled by the user (pilot cancel): {why}"
        )

    def checkpoint(self, last_payload: str) -> None:
        """Save the state (every event in it is committed; the last one's JSON is given) so
        that a resume folds only what follows (``pilot.store.checkpoint``). A cache: a failure to
        write it costs a longer resume, nothing else."""
        self.checkpointed_seq = self.state.last_seq
        if self.checkpoints is None:
            self.checkpoints = CheckpointWriter(
                self.runner.checkpoint_dir(self.run_id),
                self.run_id,
                redact=self.plan.redact if self.plan is not None else (),
                workspace=self.state.started.workspace if self.state.started else None,
            )
        with contextlib.suppress(OSError):
            self.checkpoints.write(self.state, last_payload)

    def _commit_after_a_wait(self) -> None:
        """Make sure held events do not wait long for an event to carry them: a timer commits
        them once the run's task has waited ``commit_wait`` on something (a read-only tool
        in its thread, a model request). It runs only while the task waits, so a step that
        never waits commits with its own next event."""
        if self.flush_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to yield to: nothing can wait, commit now
            self.commit_held()
            return
        self.flush_scheduled = True
        self._flush_timer = loop.call_later(self.runner.commit_wait, self._commit_held_at_yield)

    def _commit_held_at_yield(self) -> None:
        self.flush_scheduled = False
        self._flush_timer = None
        if not self.unsaved:
            return
        held, totals = self.unsaved, self.totals
        try:
            self.commit_held()
        except (StoreError, StoreBusy):
            # A full disk, a lock held too long: they stay held, and the next event's commit
            # meets the error again in the run's task, where it is handled.
            self.unsaved, self.totals = held, totals

    def commit_held(self) -> None:
        """Commit and show the events held back (the loop stopped before its next event)."""
        self.show(self.flush())

    def show(self, committed: list[tuple[int, ev.Event, str]]) -> None:
        for seq, stored, _payload in committed:
            for observer in self.runner.observers:
                observer(self.run_id, seq, stored, self.state)

    def flush(self) -> list[tuple[int, ev.Event, str]]:
        """Commit the events held back, in one transaction; returns them."""
        if not self.unsaved:
            return []
        if self._flush_timer is not None:  # its events go now: the next hold waits anew
            self._flush_timer.cancel()
            self._flush_timer = None
            self.flush_scheduled = False
        batch, self.unsaved = self.unsaved, []
        totals, self.totals = self.totals, {}
        self.store.append_many(self.run_id, batch, totals=totals)
        if self.runner.kill_after_seq is not None and any(
            seq == self.runner.kill_after_seq for seq, _e, _p in batch
        ):
            die_now()
        return batch

    def emit_started_stub(self, *, error: str) -> None:
        self.emit(ev.RunFinished(status="failed", reason=error))
        self.store.release_lease(self.run_id, self.runner.owner)

    def outcome(self) -> RunOutcome:
        state = self.state
        if state.finished is not None:
            return RunOutcome(self.run_id, state.finished.status, state.finished.reason, state)
        record = self.store.get_run(self.run_id)
        return RunOutcome(self.run_id, record.status, record.status_reason, state)

    async def drive(self, repo: GitRepo) -> RunOutcome:
        runner = self.runner
        stop = SessionStop(runner.stop)  # a cancel or a lost lease stops this run alone
        client = runner._client(self.plan, self.run_id, self.state.endpoint)
        executor = RegistryExecutor(
            registry=runner.registry,
            workspace_root=repo.root,
            artifacts_dir=runner.artifacts_dir(self.run_id),
            settings=self.plan.tool_settings,
            env_allowlist=self.plan.env_allowlist,
            sandbox=self.plan.sandbox,
            work_branch=self.plan.branch,
            base_commit=self.state.started.base_head if self.state.started else None,
            redact=self.plan.redact,
            run_id=self.run_id,
            hidden=runner.state_paths(),
        )
        private_dirs(runner.artifacts_dir(self.run_id))
        lease_lost = asyncio.Event()
        renewer = asyncio.ensure_future(self._renew_lease(stop, lease_lost))
        storage_full = False
        busy: StoreBusy | None = None
        workspace = GitWorkspace(repo, self.run_id, executor.take_written)
        loop = AgentLoop(
            self.plan,
            self.state,
            self.emit,
            client,
            executor,
            workspace,
            tactics=runner.tactics or SmallModelTactics(),
            stop=stop,  # type: ignore[arg-type]  # is_set and wait, as an Event
            server_counts=runner.server_counts(self.plan),
        )
        try:
            try:
                # Waiting for the server before the first request: a stop pauses it at once.
                await loop.stoppable(self._resolve_model(client))
            except StopRequested as exc:
                loop.release_stop_waiter()
                self.emit(stopped_by(exc))
            else:
                await loop.run()
            if self.cancel_requested and self.state.finished is None:
                self.emit(ev.RunFinished(status="cancelled", reason="cancelled by the user"))
        except StoreBusy as exc:
            busy = exc  # nothing can be written, as with a full disk (below)
        except MarathonError as exc:  # a server away pauses; any other error fails
            if self.state.finished is None:
                self.emit(stopped_by(exc))
        except StoreOperationalError as exc:
            if not is_storage_full(exc):
                raise
            # Nothing more can be written: no event, no lease release (a resume takes over
            # the lease of this dead process). The last committed event is where it resumes.
            storage_full = True
        finally:
            loop.release_stop_waiter()
            workspace.close()
            if self.unsaved and not storage_full and busy is None:
                # lost: the model is asked again
                with contextlib.suppress(StoreOperationalError, StoreBusy):
                    self.commit_held()
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await renewer
            release = getattr(client, "release", None)  # a routed run's hold on its endpoint
            if release is not None:
                release()
            if not lease_lost.is_set() and not storage_full and busy is None:
                with contextlib.suppress(StoreBusy):  # a resume takes over a dead holder's
                    self.store.release_lease(self.run_id, runner.owner)
        if storage_full:
            return storage_full_outcome(self.run_id, self.state)
        if busy is not None:
            return store_busy_outcome(self.run_id, self.state, busy)
        return self.outcome()

    async def _resolve_model(self, client: ModelClient) -> None:
        from pilot.model.types import resolve_model_name

        async def on_wait(wait: WaitEvent) -> None:
            self.emit(ev.from_wait(wait))

        served = await resolve_model_name(client, self.plan.model.name, on_wait=on_wait)
        window, source = served.max_model_len, served.window_source
        if self.plan.model.context_window is not None:
            window, source = self.plan.model.context_window, "setting model.context_window"
        elif window is None and self.state.max_model_len is not None:
            window, source = self.state.max_model_len, None  # learnt from a context error
        if served.id != self.state.model or window != self.state.max_model_len:
            self.emit(ev.ModelResolved(model=served.id, max_model_len=window, window_source=source))
            from pilot.run.window_check import refuse_small_window

            resolved = served.model_copy(update={"max_model_len": window, "window_source": source})
            await refuse_small_window(
                client, resolved, self.plan, self.runner.registry.openai_tools
            )

    def _cancel_requested(self) -> bool:
        return self.store.get_run(self.run_id).status == "cancelling"

    async def _renew_lease(self, stop: SessionStop, lease_lost: asyncio.Event) -> None:
        """Keep the lease while running; notice a cancel request (at once when ``pilot
        cancel`` rings this process, else at the next renewal) or a lost lease."""
        interval = max(0.2, self.runner.lease_seconds / 3)
        bell = asyncio.Event()
        self.runner.bells.add(bell)
        try:
            await self._renewals(stop, lease_lost, bell, interval)
        finally:
            self.runner.bells.discard(bell)

    async def _renewals(
        self, stop: SessionStop, lease_lost: asyncio.Event, bell: asyncio.Event, interval: float
    ) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(bell.wait(), interval)
            bell.clear()
            ok = await asyncio.to_thread(
                self.store.renew_lease,
                self.run_id,
                self.runner.owner,
                seconds=self.runner.lease_seconds,
            )
            if not ok:
                lease_lost.set()
                stop.set()
                return
            if await asyncio.to_thread(self._cancel_requested):
                self.cancel_requested = True
                stop.set()
