"""A state checkpoint's claims, checked against the run's events before the resume uses it.

A checkpoint (``pilot.store.checkpoint``) is sealed with a plain SHA-256, which proves only
that the file is whole: anyone who can write the state directory can write a new one and seal
it again, and a command run without the sandbox can. So its seal is not what makes it
trusted. What decides the run's next step and its outcome is checked here against the stored
events, reading only the few of them that say it (the phase events, the last answer and the
calls after it, the current phase's checks); a checkpoint that claims anything they do not
say is refused and the resume folds every event instead (the state is then the events', as
if no checkpoint had been written). A refused checkpoint costs time, never correctness, so
the check is strict.

Checked: the run's end, the phases done (index, name, outcome), the current phase, the calls
still to answer and the call that was running, the current phase's check (attempts, passed,
in flight) and whether ``finish`` was called since, and the counters the limits are judged by
(steps, tokens) against the run's row. Not checked, because a command that could forge them
could already do what they would let it: the snapshot to restore (the command can write the
workspace itself) and the text of the few messages kept in the checkpoint (it can write the
files the model reads).
"""

from __future__ import annotations

from collections.abc import Iterator

from pilot import events as ev
from pilot.agent.state import RunState
from pilot.store import queries
from pilot.store.event_store import EventStore
from pilot.store.schema import CONTROL_EVENTS

CONTROL = frozenset(CONTROL_EVENTS)

_CONTROL = frozenset({"phase_started", "phase_finished", "run_finished"})
_TAIL_WINDOW = 64
"""Events read at a time while looking back for the run's last answer."""


def checkpoint_problem(store: EventStore, run_id: str, state: RunState) -> str | None:
    """Why ``state`` (a checkpoint with the events after it folded in) says something the
    stored events do not; None when every checked claim holds."""
    upto = state.last_seq
    control = [(seq, ev.event_from_json(p)) for seq, p in _rows(store, run_id, 1, upto, _CONTROL)]
    ends = [e for _s, e in control if isinstance(e, ev.RunFinished)]
    if (state.finished is None) != (not ends) or (
        state.finished is not None and state.finished.status != ends[-1].status
    ):
        return "its end of the run is not the stored one"
    done = [(e.index, e.name, e.outcome) for _s, e in control if isinstance(e, ev.PhaseFinished)]
    if [(p.index, p.name, p.outcome) for p in state.phases_done] != done:
        return "its phases done are not the stored ones"
    boundary = max((s for s, e in control if isinstance(e, ev.PhaseFinished)), default=0)
    opened = [(s, e) for s, e in control if isinstance(e, ev.PhaseStarted) and s > boundary]
    if (state.phase is None) != (not opened):
        return "its current phase is not the stored one"
    phase_seq = 0
    if opened:
        phase_seq, started = opened[-1]
        assert state.phase is not None
        if (state.phase.index, state.phase.name) != (started.index, started.name):
            return "its current phase is not the stored one"
        boundary = phase_seq
        problem = _check_claims(store, run_id, state, phase_seq, upto)
        if problem:
            return problem
    problem = _call_claims(store, run_id, state, boundary, upto)
    if problem:
        return problem
    record = store.get_run(run_id)
    counted = (record.steps, record.prompt_tokens, record.completion_tokens)
    if (state.steps, state.prompt_tokens, state.completion_tokens) != counted:
        return "its step and token counts are not the run's"
    return None


def _call_claims(
    store: EventStore, run_id: str, state: RunState, floor: int, upto: int
) -> str | None:
    """The calls still to answer and the one started: the last answer's calls (after the
    current phase began) less those answered since, and a start not yet finished."""
    answer = _last_answer(store, run_id, floor, upto)
    expected: list[ev.ToolCall] = []
    started: ev.ToolStarted | None = None
    if answer is not None:
        at, message = answer
        expected = list(message.tool_calls)
        after = {"tool_started", "tool_finished", "workspace_restored"}
        for _seq, payload in _rows(store, run_id, at + 1, upto, frozenset(after)):
            event = ev.event_from_json(payload)
            if isinstance(event, ev.ToolStarted):
                started = event
            elif isinstance(event, ev.ToolFinished):
                started = None
                expected = [c for c in expected if c.id != event.call_id]
            else:  # the workspace put back: the interrupted call is to be run again
                started = None
    claimed = [(c.id, c.name, c.arguments) for c in state.pending_calls]
    if claimed != [(c.id, c.name, c.arguments) for c in expected]:
        return "its calls to answer are not the stored answer's"
    running = state.started_call.call_id if state.started_call else None
    if running != (started.call_id if started else None):
        return "its running call is not the stored one"
    return None


def _check_claims(
    store: EventStore, run_id: str, state: RunState, phase_seq: int, upto: int
) -> str | None:
    """The current phase's check and ``finish``, as the events since it began say."""
    phase = state.phase
    assert phase is not None
    kinds = frozenset({"check_started", "check_finished"})
    attempts, passed, in_flight, last_failed = 0, False, None, phase_seq
    for seq, payload in _rows(store, run_id, phase_seq, upto, kinds):
        event = ev.event_from_json(payload)
        if isinstance(event, ev.CheckStarted):
            in_flight = event.attempt
            continue
        assert isinstance(event, ev.CheckFinished)
        in_flight, passed = None, event.passed
        if not event.after_edit:
            attempts = event.attempt
            if not event.passed:
                last_failed = seq
    claimed_flight = phase.check_in_flight.attempt if phase.check_in_flight else None
    if (phase.check_attempts, phase.check_passed, claimed_flight) != (attempts, passed, in_flight):
        return "its phase check is not the stored one"
    if phase.finish_called:
        finished = frozenset({"tool_finished"})
        for _seq, payload in _rows(store, run_id, last_failed, upto, finished):
            event = ev.event_from_json(payload)
            if isinstance(event, ev.ToolFinished) and event.name == "finish" and not event.is_error:
                return None
        return "it says finish was called and no stored call did"
    return None


def _last_answer(
    store: EventStore, run_id: str, floor: int, upto: int
) -> tuple[int, ev.AssistantMessage] | None:
    """The last stored answer after ``floor``, looking back a window at a time (a run's last
    answer is a few events from its end)."""
    window, high = _TAIL_WINDOW, upto
    kinds = frozenset({"assistant_message"})
    while high > floor:
        low = max(floor + 1, high - window + 1)
        rows = list(_rows(store, run_id, low, high, kinds))
        if rows:
            seq, payload = rows[-1]
            message = ev.event_from_json(payload)
            assert isinstance(message, ev.AssistantMessage)
            return seq, message
        high, window = low - 1, window * 2
    return None


def _rows(
    store: EventStore, run_id: str, first: int, last: int, kinds: frozenset[str]
) -> Iterator[tuple[int, str]]:
    """The stored ``(seq, payload)`` of ``kinds`` from ``first`` to ``last``, read whole.
    Control events (phases, checks, the end) come through their own index, so the check
    reads them and not the run's other rows (it did, all of them, at every resume)."""
    if first > last:
        return iter(())
    if kinds <= CONTROL:
        return iter(list(queries.control_rows(store, run_id, first, last, kinds)))
    return iter(list(queries.message_rows(store, run_id, first, last, kinds)))
