"""Local-model failure forms against the simulated server, end to end: a window that fills up
and must be compacted, questions, loops, no progress, empty turns, tool calls as text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pilot_harness import call, make_repo, run_in_process, write_script, write_workflow

from brain.sim.config import FaultRule, SimConfig
from brain.sim.policy import SimChatRequest, SimTurn
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.store.event_store import EventStore


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    big = "\n".join(f"line {i}: " + "lorem ipsum dolor sit amet " * 4 for i in range(400))
    return make_repo(tmp_path / "repo", {"app.py": "VALUE = 1\n", "big.txt": big + "\n"})


def stored(db: Path, run_id: str) -> list[ev.Event]:
    return EventStore(f"sqlite:///{db}").load_events(run_id)


def go(
    tmp_path: Path,
    repo: Path,
    key: str,
    turns: list[dict],
    *,
    window: int = 32768,
    phases: list[dict] | None = None,
    limits: dict | None = None,
    faults=(),
    **script,
):
    path = write_script(tmp_path / "s.yaml", key, turns, **script)
    config = SimConfig(
        model="m", max_model_len=window, policy=f"script:{path}", faults=list(faults)
    )
    with running_sim(config) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key=key,
            endpoint=sim.openai_base_url,
            phases=phases or [{"name": "work", "prompt": "Do the work."}],
            limits=limits,
            model={"max_tokens": 512},
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    return outcome, stored(tmp_path / "m.db", outcome.run_id)


class Reader:
    """Reads big.txt in slices, 30 times, then finishes (a summary request, which the pilot
    no longer sends, would be answered with a text).

    Stateful on purpose: a script keyed on the number of assistant messages would replay
    itself after a compaction (which replaces old assistant messages by a summary).
    """

    def __init__(self) -> None:
        self.reads = 0
        self.summaries_asked = 0

    def respond(self, request: SimChatRequest) -> SimTurn:
        if not request.tools:  # a summary request
            self.summaries_asked += 1
            return SimTurn(
                content="Goal: read big.txt\nProgress: read slices\nDecisions: none\n"
                "Files: big.txt read\nOpen problems: none\nNext step: read on"
            )
        self.reads += 1
        if self.reads > 30:
            return SimTurn(tool_calls=(("finish", json.dumps({"summary": "read it all"})),))
        offset = 1 + 40 * (self.reads % 10)
        args = {"path": "big.txt", "offset": offset, "limit": 40}
        return SimTurn(tool_calls=(("read_file", json.dumps(args)),))


def test_a_long_run_compacts_several_times_and_every_request_fits(tmp_path: Path, repo: Path):
    config = SimConfig(model="m", max_model_len=6000)
    reader = Reader()
    with running_sim(config, policy=reader) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="robust-long",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "Read big.txt."}],
            model={"max_tokens": 512},
            limits={"max_no_progress_steps": 100},
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    events = stored(tmp_path / "m.db", outcome.run_id)
    compactions = [e for e in events if isinstance(e, ev.Compaction)]
    requests = [e for e in events if isinstance(e, ev.ModelRequest)]
    assert outcome.status == "succeeded", outcome.reason
    assert len(compactions) >= 2
    assert all(c.tokens_after < c.tokens_before for c in compactions)
    assert all(c.summary_source == "events" for c in compactions)
    assert reader.summaries_asked == 0, "a summary is built from the events, not asked for"
    assert all(r.prompt_tokens + r.max_tokens <= 6000 for r in requests)
    # Far from the limit a bound proves the fit; near it the prompt is counted exactly.
    assert any(r.prompt_bound for r in requests) and any(not r.prompt_bound for r in requests)
    messages = outcome.state.messages
    assert any("[Summary of earlier work]" in (m.get("content") or "") for m in messages)
    called = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
    assert all(m["tool_call_id"] in called for m in messages if m["role"] == "tool")


def test_a_question_is_recorded_and_the_run_goes_on(tmp_path: Path, repo: Path) -> None:
    turns = [
        {"content": "I found two ways to do this. Should I delete the old module first?"},
        {"when": "Nobody will answer", "tool_calls": [call("finish", summary="assumed yes")]},
    ]
    outcome, events = go(tmp_path, repo, "robust-question", turns)
    assert outcome.status == "succeeded"
    (question,) = [e for e in events if isinstance(e, ev.Question)]
    assert question.text.startswith("Should I delete the old module")
    from pilot.report.build import build_report
    from pilot.report.markdown import render_markdown

    text = render_markdown(
        build_report(EventStore(f"sqlite:///{tmp_path / 'm.db'}"), [outcome.run_id])
    )
    assert "questions: 1" in text and "Should I delete the old module" in text


def test_repeating_the_same_call_gets_a_nudge_then_ends_the_phase_as_stuck(
    tmp_path: Path, repo: Path
) -> None:
    turns = [{"tool_calls": [call("read_file", path="app.py")]} for _ in range(12)]
    outcome, events = go(tmp_path, repo, "robust-loop", turns)
    loops = [e for e in events if isinstance(e, ev.LoopDetected)]
    assert loops[0].action == "nudge"
    assert loops[-1].action == "stuck"
    assert outcome.status == "failed" and "stuck" in outcome.reason
    finished = [e for e in events if isinstance(e, ev.PhaseFinished)]
    assert finished[-1].outcome == "stuck"


def test_empty_turns_are_retried_then_nudged(tmp_path: Path, repo: Path) -> None:
    turns = [{"tool_calls": [call("finish", summary="ok")]}]
    outcome, events = go(
        tmp_path, repo, "robust-empty", turns,
        faults=[FaultRule(kind="empty_turn", at=[1, 2])],
    )  # fmt: skip
    assert outcome.status == "succeeded"
    answers = [e for e in events if isinstance(e, ev.AssistantMessage)]
    assert len(answers) == 3 and not answers[0].tool_calls and not answers[1].tool_calls
    nudges = [e for e in events if isinstance(e, ev.Nudge)]
    assert [n.reason for n in nudges] == ["empty_turn"]
    assert not any(
        m["role"] == "assistant" and not m.get("content") and not m.get("tool_calls")
        for m in outcome.state.messages
    ), "empty turns are not kept"


@pytest.mark.parametrize(
    "content",
    [
        '{"name": "write_file", "arguments": {"path": "t.txt", "content": "x"}}',
        '<tool_call>{"name": "write_file", "arguments": {"path": "t.txt", "content": "x"}}'
        "</tool_call>",
        '<|tool_call>call:write_file{path:<|"|>t.txt<|"|>,content:<|"|>x<|"|>}<tool_call|>',
    ],
)
def test_tool_calls_written_as_text_are_recovered_and_run(
    tmp_path: Path, repo: Path, content: str
) -> None:
    turns = [{"content": content}, {"tool_calls": [call("finish", summary="ok")]}]
    outcome, events = go(tmp_path, repo, "robust-text-call", turns)
    assert outcome.status == "succeeded"
    assert (Path(outcome.state.started.workspace) / "t.txt").read_text() == "x"
    first = next(e for e in events if isinstance(e, ev.AssistantMessage))
    assert first.tool_calls[0].name == "write_file" and first.repairs


def test_a_huge_tool_result_is_cut_and_kept_readable(tmp_path: Path, repo: Path) -> None:
    turns = [
        {"tool_calls": [call("run", command="seq 1 100000")]},
        {"tool_calls": [call("finish", summary="ok")]},
    ]
    outcome, events = go(tmp_path, repo, "robust-huge", turns, window=8192)
    result = next(e for e in events if isinstance(e, ev.ToolFinished) and e.name == "run")
    assert result.truncated and len(result.output) < 8192 * 0.15 * 4
    assert outcome.status == "succeeded"


def test_a_long_file_read_is_cut_to_a_page_that_says_where_to_read_on(
    tmp_path: Path, repo: Path
) -> None:
    """A head and tail with the middle kept in another file read, to Qwen2.5-Coder-1.5B, as
    a file not yet seen: it read toolz/_signatures.py again and again. A read is cut to its
    first lines and the offset of the next, in the file itself; following it reads on."""
    big = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(600))
    repo = make_repo(tmp_path / "paged", {"big.py": big})
    turns = [
        {"tool_calls": [call("read_file", path="big.py")]},
        {"tool_calls": [call("finish", summary="big.py defines f0..f599")]},
    ]
    outcome, events = go(tmp_path, repo, "robust-page", turns, window=8192)
    assert outcome.status == "succeeded", outcome.reason
    result = next(e for e in events if isinstance(e, ev.ToolFinished) and e.name == "read_file")
    assert result.truncated and len(result.output) < 8192 * 0.15 * 4
    assert result.output.startswith("     1\tdef f0(x):")
    note = result.output.rstrip().splitlines()[-1]
    shown = max(int(line.split("\t")[0]) for line in result.output.splitlines()[:-1])
    assert f'read on with read_file (path="big.py", offset={shown + 1})' in note
    assert f"lines {shown + 1}-1200 of this read not shown" in note
    # ... and the definitions past the page, by line, to read from (as many as fit).
    first_hidden = (shown + 1) // 2
    assert f"offset=LINE: f{first_hidden}: {2 * first_hidden + 1}, " in note, note
    assert note.rstrip(".]").split(" and ")[-1].endswith(" more")
    assert not (Path(outcome.state.started.workspace) / ".marathon" / "outputs").exists()
