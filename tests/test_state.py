"""fold(events) on its own: messages, pending calls, phases, totals, time across pauses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pilot import events as ev
from pilot.agent.state import fold

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def started(**kw: object) -> ev.RunStarted:
    base = dict(
        workflow="wf",
        workspace="/w",
        branch="b",
        endpoint="http://x",
        system="be brief",
        phases=["a", "b"],
        owner="o",
        base_snapshot="s0",
        at=at(0),
    )
    base.update(kw)
    return ev.RunStarted(**base)  # type: ignore[arg-type]


def call(id_: str, name: str = "read_file", args: str = "{}") -> ev.ToolCall:
    return ev.ToolCall(id=id_, name=name, arguments=args)


def test_messages_follow_the_chat_protocol() -> None:
    state = fold(
        [
            started(),
            ev.PhaseStarted(index=0, name="a", prompt="Phase 1/2: a\n\ndo it", at=at(1)),
            ev.AssistantMessage(
                step=1,
                content="",
                reasoning="secret thoughts",
                tool_calls=[call("c1"), call("c2", "finish", '{"summary": "ok"}')],
                usage=ev.Usage(prompt_tokens=100, completion_tokens=20),
                at=at(2),
            ),
            ev.ToolStarted(call_id="c1", name="read_file", mutates=False, at=at(3)),
            ev.ToolFinished(call_id="c1", name="read_file", output="text", at=at(4)),
        ]
    )
    roles = [m["role"] for m in state.messages]
    assert roles == ["system", "user", "assistant", "tool"]
    assert "secret" not in str(state.messages)
    assert [c.id for c in state.pending_calls] == ["c2"]
    assert state.started_call is None
    assert (state.steps, state.total_tokens, state.phase.steps) == (1, 120, 1)


def test_started_but_unfinished_tool_is_visible_for_recovery() -> None:
    state = fold(
        [
            started(),
            ev.PhaseStarted(index=0, name="a", prompt="p"),
            ev.AssistantMessage(step=1, tool_calls=[call("c1", "write_file")]),
            ev.ToolStarted(call_id="c1", name="write_file", mutates=True),
        ]
    )
    assert state.started_call is not None and state.started_call.mutates
    assert state.snapshot == "s0"


def test_finish_then_failed_check_reopens_phase_with_feedback() -> None:
    state = fold(
        [
            started(),
            ev.PhaseStarted(index=0, name="a", prompt="p"),
            ev.AssistantMessage(step=1, tool_calls=[call("f", "finish", '{"summary": "done"}')]),
            ev.ToolStarted(call_id="f", name="finish", mutates=False),
            ev.ToolFinished(call_id="f", name="finish", output="ok"),
        ]
    )
    assert state.phase.finish_called and state.phase.finish_summary == "done"
    state.apply(ev.CheckStarted(phase=0, attempt=1, command="make test"))
    assert state.phase.check_in_flight is not None
    state.apply(
        ev.CheckFinished(
            phase=0,
            attempt=1,
            command="make test",
            exit_code=1,
            passed=False,
            output="boom",
            feedback="Check failed: fix it",
        )
    )
    assert not state.phase.finish_called
    assert state.phase.check_attempts == 1
    assert state.messages[-1] == {"role": "user", "content": "Check failed: fix it"}


def test_phase_finished_advances_and_run_finished_ends() -> None:
    state = fold(
        [
            started(),
            ev.PhaseStarted(index=0, name="a", prompt="p"),
            ev.PhaseFinished(index=0, name="a", outcome="succeeded"),
        ]
    )
    assert state.phase is None and state.next_phase_index == 1
    state.apply(ev.RunFinished(status="succeeded"))
    assert state.finished is not None


def test_active_time_excludes_time_paused() -> None:
    state = fold(
        [
            started(at=at(0)),
            ev.PhaseStarted(index=0, name="a", prompt="p", at=at(10)),
            ev.RunPaused(reason="signal", at=at(20)),
            ev.RunResumed(owner="o2", at=at(3600)),
            ev.Nudge(reason="x", text="go on", at=at(3605)),
        ]
    )
    assert state.elapsed_active(at(3610)) == 30.0


def test_a_mutating_result_without_its_snapshot_is_due_and_the_snapshot_event_settles_it() -> None:
    """The result is committed before the snapshot: folded alone it leaves the snapshot due
    (a resume takes it, never re-running the tool); an older event carrying its snapshot
    leaves nothing due."""

    call = ev.ToolCall(id="c1", name="write_file", arguments="{}")
    head = [
        ev.RunStarted(
            workflow="w",
            workspace="/w",
            branch="b",
            endpoint="e",
            system="s",
            phases=["p"],
            owner="o",
            base_snapshot="base",
        ),
        ev.PhaseStarted(index=0, name="p", prompt="go"),
        ev.AssistantMessage(step=1, tool_calls=[call]),
        ev.ToolStarted(call_id="c1", name="write_file", mutates=True),
    ]
    state = fold([*head, ev.ToolFinished(call_id="c1", name="write_file", output="ok")])
    assert state.snapshot_due == "c1" and state.snapshot == "base"
    assert state.started_call is None, "the tool returned: it is not run again"
    state.apply(ev.WorkspaceSnapshot(call_id="c1", snapshot="s1", head="h1"))
    assert state.snapshot_due is None and (state.snapshot, state.head) == ("s1", "h1")
    older = fold(
        [*head, ev.ToolFinished(call_id="c1", name="write_file", output="ok", snapshot="s1")]
    )
    assert older.snapshot_due is None and older.snapshot == "s1"
    check = fold(
        [
            *head[:2],
            ev.CheckFinished(phase=0, attempt=1, command="t", exit_code=0, passed=True, output=""),
        ]
    )
    assert check.snapshot_due == "check-0-1"


def test_a_run_recorded_without_its_start_is_timed_from_its_first_event() -> None:
    """The report folds runs whose first stored event is not run_started (and rows of types
    this version cannot read): the clock counts them as the report always did."""
    state = fold(
        [
            ev.PhaseStarted(index=0, name="a", prompt="p", at=at(0)),
            ev.Nudge(reason="x", text="go on", at=at(10)),
        ]
    )
    assert (state.driven, state.last_at, state.elapsed_active(at(10))) == (True, at(10), 10.0)
    state.note_time(at(31))  # a newer pilot's event type, read as a plain row
    assert state.elapsed_active(state.last_at or at(0)) == 31.0
    state.apply(ev.RunPaused(reason="signal", at=at(40)))
    assert (state.driven, state.active_seconds) == (False, 40.0)


def test_the_runs_row_totals_are_the_folds_own_counts() -> None:
    """The runner writes the runs row before the state takes the event: ``totals_with`` says
    what the fold will count, so the row and the state never disagree."""
    state = fold([started(), ev.PhaseStarted(index=0, name="a", prompt="p")])
    assert state.totals_with(ev.PhaseStarted(index=1, name="b", prompt="p")) == {"phase": "b"}
    answers = [
        ev.AssistantMessage(step=1, usage=ev.Usage(prompt_tokens=100, completion_tokens=7)),
        ev.AssistantMessage(step=2),  # the server sent no usage: only the step counts
        ev.AssistantMessage(step=3, usage=ev.Usage(prompt_tokens=50, completion_tokens=5)),
    ]
    for answer in answers:
        row = state.totals_with(answer)
        state.apply(answer)
        folded = {"steps": state.steps, "prompt_tokens": state.prompt_tokens}
        folded["completion_tokens"] = state.completion_tokens
        assert row == {k: v for k, v in folded.items() if k in row}
        assert "steps" in row and ("prompt_tokens" in row) == (answer.usage is not None)
    assert (state.steps, state.total_tokens, state.phase and state.phase.tokens) == (3, 162, 162)


def test_files_read_keeps_each_path_once_in_order_also_after_a_checkpoint() -> None:
    """The fold's list of files read has each path once, in the order first read, whether
    the state was folded or rebuilt from a checkpoint (where the set beside the list is not
    kept and is made again from the list)."""
    from pilot.store import statecodec

    def read(call_id: str, path: str) -> list[ev.Event]:
        arguments = f'{{"path": "{path}"}}'
        return [
            ev.AssistantMessage(
                step=1,
                content="",
                tool_calls=[ev.ToolCall(id=call_id, name="read_file", arguments=arguments)],
            ),
            ev.ToolStarted(call_id=call_id, name="read_file", arguments=arguments, mutates=False),
            ev.ToolFinished(call_id=call_id, name="read_file", output="x"),
        ]

    events: list[ev.Event] = [ev.PhaseStarted(index=0, name="p", prompt="go")]
    for k, path in enumerate(["a.py", "b.py", "a.py", "c.py", "b.py"]):
        events += read(f"c{k}", path)
    state = fold(events)
    assert state.files_read == ["a.py", "b.py", "c.py"]
    again = statecodec.decode(statecodec.encode(state))
    assert "_files_seen" not in again.__dict__ and again.files_read == ["a.py", "b.py", "c.py"]
    for event in read("c9", "b.py") + read("c10", "d.py"):
        again.apply(event)
    assert again.files_read == ["a.py", "b.py", "c.py", "d.py"]
    again.files_read = ["z.py"]  # a list put in its place: the set follows it
    for event in read("c11", "z.py") + read("c12", "a.py"):
        again.apply(event)
    assert again.files_read == ["z.py", "a.py"]
