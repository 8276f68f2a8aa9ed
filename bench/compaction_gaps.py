"""How far apart compactions come and what their summaries claim, on the sim (issue 38).

A scripted model reads big.txt ten lines a step (small answers), says "I verified that all test
cases are passing." with every call, never edits, while the phase's check fails; the window is
6,000 tokens, so the run compacts. Printed per phase-prompt size: compactions, the steps between
them, the prompt before and after each, the summary's source, and whether a summary carries
the model's claim. Run it against another checkout's pilot with ``PYTHONPATH=<checkout>``
(the scenario imports nothing of the pilot's compaction).

    .venv/bin/python bench/compaction_gaps.py             # prompt paddings 0 and 70
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from brain.sim.config import SimConfig
from brain.sim.policy import SimChatRequest, SimTurn
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.run.launch import load_for_run, start_run
from pilot.run.outcomes import RunOutcome
from pilot.run.runner import Runner
from pilot.store.event_store import EventStore

WINDOW = 6000
CLAIM = "I verified that all test cases are passing."
CHECK = "python3 -c 'import app; assert app.VALUE == 2, app.VALUE'"
PADDING = "Context: the module app.py is read by the service at start. "
"""About 17 tokens: 70 of them make a phase prompt of about 1,200 tokens."""


class Claimer:
    """Reads big.txt ten lines at a time and says all tests pass; never edits; finishes after
    ``reads`` reads. Counts the summary requests (no tools offered) it is sent."""

    def __init__(self, reads: int) -> None:
        self.reads = 0
        self.limit = reads
        self.summaries_asked = 0

    def respond(self, request: SimChatRequest) -> SimTurn:
        if not request.tools:
            self.summaries_asked += 1
            return SimTurn(content=f"## Goal\n- done\n## Progress\n- {CLAIM}")
        self.reads += 1
        if self.reads > self.limit:
            return SimTurn(tool_calls=(("finish", json.dumps({"summary": CLAIM})),))
        args = {"path": "big.txt", "offset": 1 + 10 * (self.reads % 38), "limit": 10}
        return SimTurn(content=CLAIM, tool_calls=(("read_file", json.dumps(args)),))


@dataclass(frozen=True)
class Scenario:
    outcome: RunOutcome
    events: list[ev.Event]
    model: Claimer


def _repo(root: Path) -> Path:
    root.mkdir(parents=True)
    big = "\n".join(f"line {i}: " + "lorem ipsum dolor sit amet " * 3 for i in range(400))
    (root / "app.py").write_text("VALUE = 1\n")
    (root / "big.txt").write_text(big + "\n")
    (root / ".gitignore").write_text("__pycache__/\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@localhost"}
    env |= {"GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@localhost"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
    return root


def _workflow(path: Path, endpoint: str, padding: int) -> Path:
    phase = {
        "name": "fix",
        "prompt": "Make VALUE in app.py equal 2. " + PADDING * padding,
        "check": CHECK,
        "max_attempts": 1,
    }
    data = {
        "name": "compaction-gaps",
        "params": {"repo": {"type": "path", "required": True}},
        "model": {"endpoint": endpoint, "name": "auto", "max_tokens": 256},
        "workspace": {"path": "{{ params.repo }}"},
        "tools": ["read_file", "write_file", "edit_file", "run", "finish"],
        "sandbox": "none",
        "system": "Work with the tools.",
        "limits": {"max_no_progress_steps": 100, "max_steps": 100},
        "phases": [phase],
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


async def _run(workflow: Path, repo: Path, store: EventStore) -> RunOutcome:
    runner = Runner(store)
    try:
        return await start_run(runner, load_for_run(workflow, [f"repo={repo}"]))
    finally:
        await runner.aclose()


def run_scenario(base: Path, *, padding: int = 0, reads: int = 60) -> Scenario:
    """One run of the scenario in ``base`` (a git repository, the sim, a SQLite store)."""
    repo = _repo(base / "repo")
    model = Claimer(reads)
    store = EventStore(f"sqlite:///{base / 'm.db'}")
    with running_sim(SimConfig(model="m", max_model_len=WINDOW), policy=model) as sim:
        workflow = _workflow(base / "wf.yaml", sim.openai_base_url, padding)
        outcome = asyncio.run(_run(workflow, repo, store))
    return Scenario(outcome, store.load_events(outcome.run_id), model)


def steps_between(events: list[ev.Event]) -> list[int]:
    """Model requests between one compaction and the next."""
    at, requests = [], 0
    for event in events:
        if isinstance(event, ev.ModelRequest):
            requests += 1
        elif isinstance(event, ev.Compaction):
            at.append(requests)
    return [b - a for a, b in itertools.pairwise(at)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--padding", type=int, nargs="+", default=[0, 70])
    args = parser.parse_args()
    print("| padding | compactions | steps between | tokens before -> after | source | claim |")
    print("|---|---|---|---|---|---|")
    for padding in args.padding:
        with tempfile.TemporaryDirectory() as tmp:
            found = run_scenario(Path(tmp), padding=padding)
        compactions = [e for e in found.events if isinstance(e, ev.Compaction)]
        gaps = steps_between(found.events)
        before = max((c.tokens_before for c in compactions), default=0)
        after = max((c.tokens_after for c in compactions), default=0)
        sources = sorted({c.summary_source for c in compactions})
        claim = any("passing" in c.summary for c in compactions)
        print(
            f"| {padding} | {len(compactions)} | {min(gaps, default=0)}-{max(gaps, default=0)} "
            f"| {before} -> {after} ({after / WINDOW:.0%}) | {', '.join(sources)} | {claim} |"
        )


if __name__ == "__main__":
    main()
