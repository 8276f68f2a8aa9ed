"""No cut call is ever run: a call cut at max_tokens, whatever finish_reason the server gives,
is answered with what happened; the calls of an answer received at a limit run first."""

from __future__ import annotations

from pathlib import Path

import pytest
from pilot_harness import call, make_repo, run_in_process, write_script, write_workflow

from bench.tasks.callmodes import cut_answers
from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.agent.cut import cut_reason
from pilot.model.types import Usage
from pilot.store.event_store import EventStore

MODULE = "def helper():\n    return 1\n" * 40


def events_of(db: Path, run_id: str) -> list[ev.Event]:
    return EventStore(f"sqlite:///{db}").load_events(run_id)


def test_an_answer_is_cut_on_the_servers_word_or_on_its_token_count() -> None:
    spent = Usage(prompt_tokens=10, completion_tokens=64)
    assert cut_reason("length", None, 64) is not None
    # vLLM 0.26's stream says tool_calls for a call cut at max_tokens.
    assert "64 completion tokens" in (cut_reason("tool_calls", spent, 64) or "")
    assert cut_reason("stop", spent, 64) is not None
    assert cut_reason("tool_calls", Usage(completion_tokens=63), 64) is None
    # an estimate (no usage from the server) is no evidence of a cut
    assert cut_reason("stop", Usage(completion_tokens=90, estimated=True), 64) is None
    assert cut_reason("stop", spent, None) is None


@pytest.mark.parametrize("version", ["0.26", "0.33"])
def test_a_streamed_call_cut_at_max_tokens_is_never_run(tmp_path: Path, version: str) -> None:
    """0.26 ends the cut stream with finish_reason tool_calls, 0.33 with length: either way
    the half-written file is not written and the model is told why."""
    repo = make_repo(tmp_path / "repo", {"pkg/__init__.py": MODULE})
    script = write_script(
        tmp_path / "s.yaml",
        "cut",
        [
            {"tool_calls": [call("write_file", path="pkg/__init__.py", content="x = 1\n" * 80)]},
            {"when": "cut off", "content": "I will stop here."},
        ],
    )
    config = SimConfig(
        model="test-model", max_model_len=32768, policy=f"script:{script}", vllm_version=version
    )
    with running_sim(config) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="cut",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p", "check": "false"}],
            model={"max_tokens": 40},
            limits={"max_steps": 2},
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    events = events_of(tmp_path / "m.db", outcome.run_id)
    answer = next(e for e in events if isinstance(e, ev.AssistantMessage))
    assert answer.finish_reason == ("tool_calls" if version == "0.26" else "length")
    cut = next(e for e in events if isinstance(e, ev.AnswerCut))
    assert cut.calls == ["write_file"] and cut.max_tokens == 40
    assert not any(isinstance(e, ev.ToolStarted) for e in events), "nothing ran"
    refused = next(e for e in events if isinstance(e, ev.ToolFinished))
    assert not refused.executed and "cut off" in refused.output
    assert (Path(outcome.state.started.workspace) / "pkg/__init__.py").read_text() == MODULE
    # the task suite's figure reads the same events: one answer cut, none of its calls run
    dumped = [e.model_dump(mode="json") for e in events]
    assert cut_answers(dumped) == (1, 0)
    forged = [{**e, "executed": True} if e["type"] == "tool_finished" else e for e in dumped]
    assert cut_answers(forged) == (1, 1), "a cut call that ran is counted"


def test_the_last_answers_calls_run_before_the_step_limit_stops_the_run(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    script = write_script(
        tmp_path / "s.yaml",
        "limit",
        [
            {"tool_calls": [call("read_file", path="app.py")]},
            {"tool_calls": [call("edit_file", path="app.py", old="VALUE = 1", new="VALUE = 2")]},
        ],
    )
    with running_sim(SimConfig(model="m", max_model_len=32768, policy=f"script:{script}")) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="limit",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p", "check": "grep -q 'VALUE = 3' app.py"}],
            limits={"max_steps": 2},
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "limit", outcome.reason
    assert "step limit" in outcome.reason
    work = Path(outcome.state.started.workspace)
    assert (work / "app.py").read_text() == "VALUE = 2\n", "the last answer's edit ran"
    finished = [
        e for e in events_of(tmp_path / "m.db", outcome.run_id) if e.type == "tool_finished"
    ]
    assert [e.name for e in finished] == ["read_file", "edit_file"]
    assert all(e.executed for e in finished)
