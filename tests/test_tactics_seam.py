"""The tactics behind one seam: a run whose model calls its tools cleanly asks them one thing.

The loop asks ``pilot.agent.seams.Tactics`` every decision about an imperfect answer. A
model that calls its tools natively, with arguments its tools take as they are, must cost
no more of it than the one check per answer (``plain_calls``): no repair, no text reading,
no nudge. A model that writes its call as text goes through the reading. Real parts: the
simulated vLLM server over loopback, a git workspace, a SQLite store.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

from pilot_harness import call, make_repo, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot.agent.seams import Tactics
from pilot.run.launch import load_for_run, start_run
from pilot.run.outcomes import RunOutcome
from pilot.run.runner import Runner
from pilot.store.event_store import EventStore
from pilot.tactics.small_models import SmallModelTactics


class CountingTactics:
    """The pilot's own tactics, each question counted by name."""

    def __init__(self) -> None:
        self.inner = SmallModelTactics()
        self.asked: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        self.asked[name] += 1
        return getattr(self.inner, name)


def run_with(tactics: Tactics, workflow: Path, repo: Path, db: Path) -> RunOutcome:
    async def go() -> RunOutcome:
        runner = Runner(EventStore(f"sqlite:///{db}"), tactics=tactics)
        try:
            return await start_run(runner, load_for_run(workflow, [f"repo={repo}"]))
        finally:
            await runner.aclose()

    return asyncio.run(go())


def test_a_native_tool_call_run_enters_the_tactics_through_one_check(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    turns = [
        {"content": "Reading.", "tool_calls": [call("read_file", path="app.py")]},
        {"tool_calls": [call("edit_file", path="app.py", old="VALUE = 1", new="VALUE = 2")]},
        {"tool_calls": [call("git_commit", message="Bump VALUE")]},
        {"tool_calls": [call("finish", summary="bumped")]},
    ]
    script = write_script(tmp_path / "s.yaml", "seam-native", turns)
    tactics = CountingTactics()
    config = SimConfig(model="test-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(config) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="seam-native",
            endpoint=sim.openai_base_url,
            phases=[
                {"name": "change", "prompt": "Bump it.", "check": "grep -q 'VALUE = 2' app.py"}
            ],
        )
        outcome = run_with(tactics, workflow, repo, tmp_path / "m.db")
    assert outcome.status == "succeeded", outcome.reason
    assert outcome.state.steps == len(turns)
    assert dict(tactics.asked) == {"plain_calls": len(turns)}


def test_a_call_written_as_text_is_read_by_the_tactics(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    turns = [
        {"content": f"<tool_call>{json.dumps(call('read_file', path='app.py'))}</tool_call>"},
        {"tool_calls": [call("finish", summary="read app.py")]},
    ]
    script = write_script(tmp_path / "s.yaml", "seam-text", turns)
    tactics = CountingTactics()
    config = SimConfig(model="test-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(config) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="seam-text",
            endpoint=sim.openai_base_url,
            phases=[{"name": "look", "prompt": "Look.", "tools": ["read_file", "finish"]}],
        )
        outcome = run_with(tactics, workflow, repo, tmp_path / "m.db")
    assert outcome.status == "succeeded", outcome.reason
    assert tactics.asked["read_answer"] == 1
    assert tactics.asked["as_text_turns"] == 1, "the history went back as text once"
    answers = [m for m in outcome.state.messages if m["role"] == "assistant"]
    first = answers[0]["tool_calls"][0]
    assert first["function"]["name"] == "read_file" and first["id"].startswith("text-")
