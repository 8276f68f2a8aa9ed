"""A run against what a real 0.5B model writes (issue 25's texts), over loopback with the sim:
calls left as text in every shape it used are recovered and run; what cannot be run gets a
specific answer, never the same one twice in a row."""

from __future__ import annotations

from pathlib import Path

import pytest
from pilot_harness import make_repo, run_in_process, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.store import EventStore


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def events_of(db: Path, run_id: str) -> list[ev.Event]:
    return EventStore(f"sqlite:///{db}").load_events(run_id)


def test_the_shapes_a_small_model_writes_are_run(tmp_path: Path, repo: Path) -> None:
    turns = [
        {"content": '```json\n{"name": "survey", "arguments": {"path": "."}}\n```'},
        {"content": "I will now survey the repository."},
        {"content": "I will now survey the repository."},
        {"content": 'list_dir {"path": ".", "required": [], "additionalProperties": false}'},
        {"content": '```json\n{"name": "read_file", "arguments": {"file_path": "app.py"}}\n```'},
        {"content": '```json\n{"name": "finish", "summary": "Surveyed: one module."}\n```'},
    ]
    script = write_script(tmp_path / "s.yaml", "small-model", turns)
    with running_sim(
        SimConfig(model="test-model", max_model_len=32768, policy=f"script:{script}")
    ) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="small-model",
            endpoint=sim.openai_base_url,
            tools=["read_file", "list_dir", "finish"],
            phases=[{"name": "survey", "prompt": "Survey the repository."}],
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "succeeded", outcome.reason
    events = events_of(tmp_path / "m.db", outcome.run_id)
    nudges = [e.text for e in events if isinstance(e, ev.Nudge)]
    assert len(nudges) == 3
    assert "no tool named 'survey'" in nudges[0] and "read_file, list_dir, finish" in nudges[0]
    assert nudges[1] != nudges[2], "the same answer twice in a row"
    assert all('"arguments"' in n for n in nudges), "every answer shows the exact format"
    ran = [e for e in events if isinstance(e, ev.ToolFinished)]
    assert [(e.name, e.is_error) for e in ran] == [
        ("list_dir", False),
        ("read_file", False),
        ("finish", False),
    ]
    repairs = [r for e in events if isinstance(e, ev.AssistantMessage) for r in e.repairs]
    assert any("JSON-Schema keywords dropped" in r for r in repairs)
    assert "read_file: argument 'file_path' taken as 'path'" in repairs
    assert "finish: arguments given at the top level, beside the name" in repairs
