"""A phase's check, run when the model calls ``finish`` or after an edit, and its outcome.

Each check is recorded the same way (``record_check``: one ``check_started``, the command run,
one ``check_finished``, the workspace snapshot after it), whether ``finish`` asked for it,
an edit did (``check_after_edit``) or ``require_change`` found nothing changed. A phase's
fresh try after a failure (``retry_fresh``) is here too: it undoes what the check judged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pilot import events as ev
from pilot.agent.conclude import conclude, conclude_after_edit
from pilot.agent.endings import bounded_timeout, end_phase
from pilot.agent.seams import CheckOutcome, EventSink, Tactics, ToolExecutor, WorkspaceOps
from pilot.agent.state import RunState, check_failed_message
from pilot.workflow.plan import PhasePlan

NO_CHANGE_CHECK = "a change to the workspace"
"""The check's label when a ``require_change`` phase is closed on an unchanged tree."""
NO_CHANGE_OUTPUT = "No file differs from the phase's start; this phase must change the code."


def workspace_changed(workspace: WorkspaceOps, since: str | None, now: str) -> bool:
    """Whether the workspace at snapshot ``now`` differs from ``since`` (the phase start)."""
    if since is None:
        return True  # no snapshot at the start: nothing to compare with, nothing refused
    if since == now:
        return False
    changed = getattr(workspace, "changed", None)
    return True if changed is None else bool(changed(since, now))


@dataclass
class PhaseChecks:
    """The checks of the current phase, recorded through the loop's sink."""

    state: RunState
    emit: EventSink
    tools: ToolExecutor
    workspace: WorkspaceOps
    tactics: Tactics
    take_due_snapshot: Callable[[], Awaitable[None]]
    time_left: Callable[[], float | None] = lambda: None
    """Seconds the run's and the phase's wall-time limits leave (``endings.wall_left``)."""

    def check_timeout(self, phase: PhasePlan) -> float:
        """The phase's ``check_timeout``, cut to the wall time left."""
        return bounded_timeout(phase.check_timeout, self.time_left())

    async def close_phase(self, phase: PhasePlan) -> None:
        """``finish`` was called: end the phase if its check passes (or it has none)."""
        progress = self.state.phase
        assert progress is not None
        if phase.require_change and not progress.check_passed:
            snapshot, head = await asyncio.to_thread(
                self.workspace.snapshot, f"before closing phase {phase.name}"
            )
            if not workspace_changed(self.workspace, progress.start_snapshot, snapshot):
                await self.refuse_unchanged(phase, snapshot, head)
                return
        if not phase.check or progress.check_passed:
            await conclude(self, phase, progress.finish_summary, check_passed=bool(phase.check))
            return
        attempt = progress.check_attempts + 1
        attempts_left = phase.max_attempts - attempt
        outcome, duration = await self.run_check(
            phase, attempt, f"check-{progress.index}-{attempt}", after_edit=False
        )
        passed = outcome.exit_code == 0 and not outcome.timed_out
        feedback = ""
        if not passed and attempts_left > 0:
            feedback = check_failed_message(
                phase.check, outcome.exit_code, outcome.timed_out, outcome.output, attempts_left
            )
        await self.record_check(phase.check, attempt, outcome, duration, passed, feedback)
        if passed:
            await conclude(self, phase, progress.finish_summary, check_passed=True)
        elif attempts_left <= 0:
            reason = f"check `{phase.check}` still failing after {phase.max_attempts} attempt(s)"
            end_phase(self.emit, self.state, "failed", reason=reason)

    async def check_edit(self, phase: PhasePlan) -> None:
        """``check_after_edit``: the phase's check, run after a file edit succeeded. Passing on
        a changed tree ends the phase; failing sends its output back at once (what is said is
        the tactics'). Not an attempt (``max_attempts`` counts the checks finish asks for)."""
        progress = self.state.phase
        assert progress is not None and phase.check is not None
        command, attempt = phase.check, progress.check_attempts
        outcome, duration = await self.run_check(
            phase, attempt, f"check-{progress.index}-edit-{progress.steps}", after_edit=True
        )
        passed = outcome.exit_code == 0 and not outcome.timed_out
        if passed and phase.require_change and self.state.snapshot:
            passed = workspace_changed(self.workspace, progress.start_snapshot, self.state.snapshot)
        feedback = "" if passed else self.tactics.after_edit_feedback(command, outcome)
        await self.record_check(
            command, attempt, outcome, duration, passed, feedback, after_edit=True
        )
        if passed:
            summary = progress.finish_summary or f"`{command}` passed after the last edit"
            await conclude_after_edit(self, phase, summary)

    async def run_check(
        self, phase: PhasePlan, attempt: int, call_id: str, *, after_edit: bool
    ) -> tuple[CheckOutcome, float]:
        """Record the phase's check as started, run it; its outcome and how long it took."""
        progress = self.state.phase
        assert progress is not None and phase.check is not None
        self.emit(
            ev.CheckStarted(
                phase=progress.index, attempt=attempt, command=phase.check, after_edit=after_edit
            )
        )
        started = time.monotonic()
        outcome = await asyncio.to_thread(
            self.tools.run_check, phase.check, self.check_timeout(phase), call_id
        )
        return outcome, time.monotonic() - started

    async def record_check(
        self,
        command: str,
        attempt: int,
        outcome: CheckOutcome,
        duration: float,
        passed: bool,
        feedback: str,
        *,
        after_edit: bool = False,
        snapshot: tuple[str, str | None] | None = None,
    ) -> None:
        """The one ``check_finished`` of a check, then the workspace as it left it (taken
        now, or ``snapshot`` when it was taken before)."""
        progress = self.state.phase
        assert progress is not None
        self.emit(
            ev.CheckFinished(
                phase=progress.index,
                attempt=attempt,
                command=command,
                exit_code=outcome.exit_code,
                passed=passed,
                output=outcome.output,
                timed_out=outcome.timed_out,
                duration_s=duration,
                snapshot=snapshot[0] if snapshot else None,
                head=snapshot[1] if snapshot else None,
                feedback=feedback,
                after_edit=after_edit,
            )
        )
        await self.take_due_snapshot()

    async def refuse_unchanged(self, phase: PhasePlan, snapshot: str, head: str | None) -> None:
        """``require_change`` and nothing changed: a failed attempt, told like a failed check."""
        await self.refuse_attempt(
            phase,
            NO_CHANGE_CHECK if not phase.check else f"{NO_CHANGE_CHECK}, then `{phase.check}`",
            NO_CHANGE_OUTPUT,
            lambda left: (
                f"The phase is not done: it must change the code, and no file differs from "
                f"when it started. {left} attempt(s) left. Make the change with the "
                "tools (write_file or edit_file), check it, then call finish again."
            ),
            f"no change made to the workspace in {phase.max_attempts} attempt(s)",
            (snapshot, head),
        )

    async def refuse_attempt(
        self,
        phase: PhasePlan,
        label: str,
        output: str,
        feedback: Callable[[int], str],
        final: str,
        snapshot: tuple[str, str | None] | None = None,
    ) -> None:
        """A finish refused without running the check (no change, no evidence): a failed
        attempt named ``label``, ``feedback(attempts left)`` sent back; the last one fails
        the phase with ``final``."""
        progress = self.state.phase
        assert progress is not None
        attempt = progress.check_attempts + 1
        attempts_left = phase.max_attempts - attempt
        self.emit(ev.CheckStarted(phase=progress.index, attempt=attempt, command=label))
        outcome = CheckOutcome(exit_code=None, output=output, timed_out=False)
        told = feedback(attempts_left) if attempts_left > 0 else ""
        await self.record_check(label, attempt, outcome, 0.0, False, told, snapshot=snapshot)
        if attempts_left <= 0:
            end_phase(self.emit, self.state, "failed", reason=final)

    def changed(self, since: str | None, now: str) -> bool:
        return workspace_changed(self.workspace, since, now)

    async def restart_try(self) -> None:
        """``retry_fresh``: undo the failed try and start again from the phase's prompt. The
        restore is idempotent and the decision comes from the state, so a kill before the
        event is recorded makes the same restart on resume."""
        progress = self.state.phase
        assert progress is not None and progress.failed_try is not None
        snapshot, head = progress.start_snapshot, progress.start_head
        if snapshot and snapshot != self.state.snapshot:
            await asyncio.to_thread(self.workspace.restore, snapshot, head)
        self.emit(
            ev.AttemptRestarted(
                phase=progress.index, reason=progress.failed_try, snapshot=snapshot, head=head
            )
        )
