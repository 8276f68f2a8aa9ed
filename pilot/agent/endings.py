"""How a phase ends, written once: succeeded, or failed / stuck / at a limit (the run with it).

Every way a phase ends goes through ``end_phase``: one ``phase_finished`` event, and for any
outcome but success the ``run_finished`` that follows it, with the reason said the same way.
The limits (``limit_reason``) and the success text of a run live here too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pilot import events as ev
from pilot.agent.seams import EventSink, StopRequested
from pilot.agent.state import RunState
from pilot.errors import ServerUnavailable
from pilot.workflow.plan import Limits

NOTHING_CHANGED = "the run changed no file"
"""Said in the outcome of a run that ends with the workspace as it started."""

Ending = Literal["succeeded", "failed", "stuck", "limit"]


def end_phase(
    emit: EventSink,
    state: RunState,
    outcome: Ending,
    *,
    reason: str = "",
    summary: str = "",
) -> None:
    """End the current phase with ``outcome``; any outcome but success ends the run too
    (failed, or at its limit), its reason naming the phase (a limit's says its scope)."""
    progress = state.phase
    assert progress is not None
    if outcome == "succeeded":
        emit(
            ev.PhaseFinished(
                index=progress.index, name=progress.name, outcome="succeeded", summary=summary
            )
        )
        return
    name = progress.name
    emit(ev.PhaseFinished(index=progress.index, name=name, outcome=outcome, reason=reason))
    if outcome == "limit":
        emit(ev.RunFinished(status="limit", reason=reason))
    elif outcome == "stuck":
        emit(ev.RunFinished(status="failed", reason=f"phase {name} {reason}"))
    else:
        emit(ev.RunFinished(status="failed", reason=f"phase {name}: {reason}"))


def limit_reason(limits: Limits, state: RunState, now: datetime, *, scope: str) -> str | None:
    """Which of ``limits`` the run (``scope="run"``) or its current phase has reached."""
    phase = state.phase
    if scope == "run":
        used = (state.steps, state.elapsed_active(now), state.total_tokens)
    elif phase is not None:
        used = (phase.steps, state.elapsed_active(now) - phase.active_at_start, phase.tokens)
    else:
        return None
    if limits.max_steps is not None and used[0] >= limits.max_steps:
        return f"{scope} step limit reached ({limits.max_steps} steps)"
    if limits.max_wall_time is not None and used[1] >= limits.max_wall_time:
        return f"{scope} wall-time limit reached ({limits.max_wall_time:.0f} s)"
    if limits.max_tokens is not None and used[2] >= limits.max_tokens:
        return f"{scope} token limit reached ({limits.max_tokens} tokens)"
    return None


def wall_time_reason(
    phase_limits: Limits, run_limits: Limits, state: RunState, now: datetime
) -> str | None:
    """Why the phase's or the run's wall time is spent, or None (the one limit an answer
    already received does not outlive)."""
    progress = state.phase
    elapsed = state.elapsed_active(now)
    for scope, limits, used in (
        ("run", run_limits, elapsed),
        ("phase", phase_limits, elapsed - (progress.active_at_start if progress else 0.0)),
    ):
        if limits.max_wall_time is not None and used >= limits.max_wall_time:
            return f"{scope} wall-time limit reached ({limits.max_wall_time:.0f} s)"
    return None


def wall_left(
    phase_limits: Limits | None, run_limits: Limits, state: RunState, now: datetime
) -> float | None:
    """Seconds the run's and the phase's wall-time limits leave (None: neither has one): a
    check or a context command gets no more, so a hung test cannot carry a run past its
    limit (a 1.5B's endless generator held a 300 s try for 397 s)."""
    progress = state.phase
    elapsed = state.elapsed_active(now)
    left = []
    if run_limits.max_wall_time is not None:
        left.append(run_limits.max_wall_time - elapsed)
    if phase_limits is not None and phase_limits.max_wall_time is not None:
        used = elapsed - (progress.active_at_start if progress else 0.0)
        left.append(phase_limits.max_wall_time - used)
    return min(left) if left else None


def bounded_timeout(timeout: float, left: float | None) -> float:
    """``timeout`` cut to the wall time left (at least one second, so the command still runs
    and its timeout is what ends it)."""
    return timeout if left is None else max(1.0, min(timeout, left))


def success_reason(unchanged: bool) -> str:
    """Why a run succeeded, saying plainly when it left every file as it found it."""
    return f"all phases done; {NOTHING_CHANGED}" if unchanged else "all phases done"


STOP_REQUESTED = "stop requested (signal); resume to continue"


def stopped_by(exc: BaseException) -> ev.RunPaused | ev.RunFinished:
    """How an exception that stopped a run is recorded, the one mapping (the loop's and the
    run session's): a stop asked for, or a server away, pauses it (a resume goes on); any
    other error of ours fails it with its message."""
    if isinstance(exc, StopRequested):
        return ev.RunPaused(reason=STOP_REQUESTED)
    if isinstance(exc, ServerUnavailable):
        return ev.RunPaused(reason=f"model server unavailable: {exc}")
    return ev.RunFinished(status="failed", reason=str(exc))
