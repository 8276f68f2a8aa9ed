"""The loop's side of a phase's evidence: the check before any change, and the verdict at the
phase's end, each recorded as an event (the rules are ``pilot.agent.evidence``'s).

Functions over the phase's checks (``pilot.agent.checks``), so each hook there is one line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from pilot import events as ev
from pilot.agent.endings import end_phase
from pilot.agent.evidence import PhaseFacts, Verdict, judge, prose_test_files
from pilot.agent.seams import EventSink, ToolExecutor, WorkspaceOps
from pilot.agent.state import PhaseProgress, RunState
from pilot.workflow.plan import PhasePlan

NEEDS_FINISH = "the phase ends when the model calls finish"
BASELINE_OUTPUT_CHARS = 2000
"""How much of the baseline check's output its event keeps (its end)."""


class Checks(Protocol):
    """What of the phase's checks (``pilot.agent.checks.PhaseChecks``) the verdict uses."""

    state: RunState
    emit: EventSink
    tools: ToolExecutor
    workspace: WorkspaceOps

    def changed(self, since: str | None, now: str) -> bool: ...

    def check_timeout(self, phase: PhasePlan) -> float: ...

    async def refuse_attempt(
        self,
        phase: PhasePlan,
        label: str,
        output: str,
        feedback: Callable[[int], str],
        final: str,
        snapshot: tuple[str, str | None] | None = None,
    ) -> None: ...


def baseline_due(progress: PhaseProgress | None, phase: PhasePlan) -> bool:
    """The phase has a check that has not run before any change: as it starts (no answer yet,
    no try restarted). A phase resumed from a pilot that recorded none is judged without one."""
    return bool(
        phase.check
        and progress is not None
        and progress.baseline is None
        and progress.steps == 0
        and progress.restarts == 0
    )


async def run_baseline(checks: Checks, phase: PhasePlan) -> None:
    """Run the phase's check before any change and record it, with the snapshot after it (what
    the check itself leaves is part of the phase's start, not of the model's change)."""
    progress = checks.state.phase
    assert progress is not None and phase.check is not None
    started = time.monotonic()
    outcome = await asyncio.to_thread(
        checks.tools.run_check,
        phase.check,
        checks.check_timeout(phase),
        f"check-{progress.index}-baseline",
    )
    duration = time.monotonic() - started
    snapshot, head = await asyncio.to_thread(
        checks.workspace.snapshot, f"after phase {phase.name}'s check before any change"
    )
    checks.emit(
        ev.CheckBaseline(
            phase=progress.index,
            command=phase.check,
            exit_code=outcome.exit_code,
            passed=outcome.exit_code == 0 and not outcome.timed_out,
            output=outcome.output[-BASELINE_OUTPUT_CHARS:],
            timed_out=outcome.timed_out,
            duration_s=duration,
            snapshot=snapshot,
            head=head,
        )
    )


def facts_of(checks: Checks, phase: PhasePlan, *, check_passed: bool) -> PhaseFacts:
    """The phase's facts from the state (and the workspace's diff since the phase began)."""
    state = checks.state
    progress = state.phase
    assert progress is not None
    start, now = progress.start_snapshot, state.snapshot
    changed = now is not None and checks.changed(start, now)
    diff = ""
    differ = getattr(checks.workspace, "diff", None)
    if changed and differ is not None and start is not None and now is not None:
        diff = differ(start, now)
    return PhaseFacts(
        has_check=bool(phase.check),
        require_change=phase.require_change,
        baseline_passed=progress.baseline.passed if progress.baseline else None,
        check_passed=check_passed,
        finish_called=progress.finish_called,
        summary=progress.finish_summary,
        changed=changed,
        diff=diff,
        files_read=tuple(state.files_read),
        survey=is_survey(checks.tools, phase),
        named_tests=prose_test_files(phase.prompt),
    )


def is_survey(tools: ToolExecutor, phase: PhasePlan) -> bool:
    """Whether the phase's tools change nothing but can read something."""
    readers = [t for t in phase.tools if t != "finish"]
    return bool(readers) and not any(tools.mutates(t) for t in readers)


async def conclude(checks: Checks, phase: PhasePlan, summary: str, *, check_passed: bool) -> None:
    """The model called finish (and the check, if any, ran): the phase succeeds on evidence,
    else the refusal is a failed attempt, told to the model like a failed check."""
    facts = await asyncio.to_thread(facts_of, checks, phase, check_passed=check_passed)
    verdict = judge(facts)
    record(checks, verdict)
    if verdict.accepted:
        end_phase(checks.emit, checks.state, "succeeded", summary=summary)
        return
    await checks.refuse_attempt(
        phase,
        f"evidence: {verdict.rule}",
        verdict.reason,
        lambda left: feedback(verdict, left),
        f"no evidence of success after {phase.max_attempts} attempt(s): {verdict.reason}",
    )


async def conclude_after_edit(checks: Checks, phase: PhasePlan, summary: str) -> None:
    """``check_after_edit`` saw the check pass: the phase ends only when that is evidence (the
    check failed before any change); a check that passed from the start waits for finish, and
    a change that deletes or skips a test is told to the model at once."""
    facts = await asyncio.to_thread(facts_of, checks, phase, check_passed=True)
    verdict = judge(facts)
    if verdict.accepted:
        record(checks, verdict)
        end_phase(checks.emit, checks.state, "succeeded", summary=summary)
    elif NEEDS_FINISH not in verdict.reason:
        record(checks, verdict)
        checks.emit(ev.Nudge(reason="evidence", text=feedback(verdict, None)))


def record(checks: Checks, verdict: Verdict) -> None:
    progress = checks.state.phase
    assert progress is not None
    checks.emit(
        ev.PhaseEvidence(
            phase=progress.index,
            rule=verdict.rule,
            accepted=verdict.accepted,
            items=verdict.items,
            reason=verdict.reason,
        )
    )


def feedback(verdict: Verdict, attempts_left: int | None) -> str:
    left = "" if attempts_left is None else f" {attempts_left} attempt(s) left."
    return (
        f"The phase is not done: {verdict.reason}.{left} A phase succeeds on evidence: "
        f"{verdict.rule}. Make the change the task asks for with the tools (never by deleting, "
        "skipping or commenting out a test), check it, then call finish with a summary naming "
        "the files you read or changed."
    )
