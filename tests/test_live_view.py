"""The live view and the event lines as a person reads them: the clock moves while the run waits
for its server, the rate counts this process's tokens, the last phase stays shown, lines use
the terminal's width, and every event type prints something."""

from __future__ import annotations

import io

from rich.console import Console

from pilot import events as ev
from pilot.agent.state import RunState
from pilot.front.ui import LiveView, event_line, line_width

STARTED = ev.RunStarted(
    workflow="wf",
    workspace="/tmp/ws",
    branch="marathon/x",
    endpoint="http://127.0.0.1:8123/v1",
    system="s",
    phases=["survey", "fix"],
    owner="me",
)


def terminal(width: int = 160) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=width, color_system=None), out


def feed(view: LiveView, state: RunState, *events: ev.Event) -> None:
    for event in events:
        state.apply(event)
        view("run1", state.last_seq, event, state)


def shown(view: LiveView) -> str:
    """What the next refresh of the live display draws (Live's own renderable)."""
    console, out = terminal(view.console.width)
    console.print(view.live.get_renderable())
    return out.getvalue()


def test_the_clock_and_the_wait_move_between_events() -> None:
    console, _ = terminal()
    view = LiveView(console, server_wait=600)
    state = RunState()
    feed(view, state, STARTED, ev.ServerAway(error="Connect call failed ('127.0.0.1', 8123)"))
    view.started -= 95  # as if 95 s passed with no event (the server still away)
    assert view.waiting_since is not None
    view.waiting_since -= 95
    text = shown(view)
    assert "1m35s" in text
    assert "waiting 1m35s" in text
    assert "10m00s (model.server_wait)" in text and "Ctrl-C" in text and "127.0.0.1:8123" in text


def test_rate_after_a_resume_counts_only_this_process() -> None:
    console, _ = terminal()
    view = LiveView(console)
    state = RunState()
    state.apply(STARTED)
    state.apply(ev.PhaseStarted(index=0, name="survey", prompt="p"))
    state.apply(
        ev.AssistantMessage(step=1, usage=ev.Usage(prompt_tokens=10, completion_tokens=90_000))
    )
    feed(view, state, ev.RunResumed(owner="me"))
    view.started -= 100
    assert view.rate(100) == 0
    assert "(0 out/s)" in shown(view)
    feed(view, state, ev.AssistantMessage(step=2, usage=ev.Usage(completion_tokens=500)))
    assert view.rate(100) == 5


def test_the_last_phase_stays_shown_at_the_end() -> None:
    console, _ = terminal()
    view = LiveView(console)
    state = RunState()
    feed(
        view,
        state,
        STARTED,
        ev.PhaseStarted(index=0, name="survey", prompt="p"),
        ev.PhaseFinished(index=0, name="survey", outcome="succeeded"),
        ev.RunFinished(status="succeeded"),
    )
    text = shown(view)
    assert "phase survey" in text and "phase -" not in text


def test_lines_use_the_terminals_width() -> None:
    address = "Connect call failed ('10.20.30.40', 8123) " + "x" * 60 + " END"
    event = ev.ServerAway(error=address)
    wide = event_line(event, width=160).plain
    assert "END" in wide
    narrow = event_line(event, width=80).plain
    assert len(narrow) <= 80 and "END" not in narrow
    output = ev.ToolFinished(call_id="c", name="run", output="y" * 120 + " TAIL")
    assert "TAIL" in event_line(output, width=200).plain
    piped = Console(file=io.StringIO(), width=80)
    assert line_width(piped) > 10_000  # a pipe or file gets the whole line


def test_every_event_type_prints_something() -> None:
    samples = [
        ev.Question(step=3, text="Which database?", reply="Choose the safest option."),
        ev.ImageFallback(error="cannot identify image file", action="drop"),
        ev.Compaction(
            pinned=[0],
            replaced_to=10,
            replaced_count=8,
            summary="s",
            tokens_before=30_000,
            tokens_after=4_000,
            reason="threshold",
        ),
        ev.LoopDetected(kind="repeat", detail="read_file app.py x4", action="nudge"),
    ]
    for event in samples:
        line = event_line(event).plain
        assert len(line.split(" ", 1)[1].strip()) > 10, event.type
    assert "Which database?" in event_line(samples[0]).plain
    assert "cannot identify image file" in event_line(samples[1]).plain
    assert "30000 -> 4000" in event_line(samples[2]).plain
    assert "read_file app.py x4" in event_line(samples[3]).plain


def test_the_matrix_view_keeps_each_runs_last_phase() -> None:
    from pilot.front.ui import MultiRunView

    console, _ = terminal()
    view = MultiRunView(console)
    state = RunState()
    for event in (
        STARTED,
        ev.PhaseStarted(index=0, name="survey", prompt="p"),
        ev.PhaseFinished(index=0, name="survey", outcome="succeeded"),
        ev.RunFinished(status="succeeded"),
    ):
        state.apply(event)
        view("run1", state.last_seq, event, state)
    assert view.runs["run1"]["phase"] == "survey"
    out = io.StringIO()
    Console(file=out, force_terminal=True, width=160).print(view.live.get_renderable())
    assert "survey" in out.getvalue()


def test_the_views_show_the_call_mode_and_the_answers_by_mode() -> None:
    from pilot.front.ui import MultiRunView

    chose = ev.CallModeChosen(
        model="m", kind="calls", mode="forced", by="workflow", reason="model.tool_calls: forced"
    )
    call = ev.ToolCall(id="c1", name="read_file", arguments="{}")
    answer = ev.AssistantMessage(step=1, tool_calls=[call], call_mode="forced")
    events = (STARTED, ev.ModelResolved(model="m"), chose, answer)
    assert "m: calls forced (by workflow)" in event_line(chose).plain
    assert "(forced)" in event_line(answer).plain
    console, _ = terminal()
    live, state = LiveView(console), RunState()
    feed(live, state, *events)
    assert "calls forced f1" in shown(live)
    view, state = MultiRunView(console), RunState()
    for event in events:
        state.apply(event)
        view("run1", state.last_seq, event, state)
    out = io.StringIO()
    Console(file=out, force_terminal=True, width=200).print(view.live.get_renderable())
    assert "forced f1" in out.getvalue()
