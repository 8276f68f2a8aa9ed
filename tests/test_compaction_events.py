"""A compaction's summary says what the run's events show, end to end: a scripted model on the
sim that claims "all test cases are passing" while it only reads and the phase's check fails.
The summary names the failing check, holds no claim of the model, and the compactions of a
long run stay far apart (each one leaves the prompt under half the window)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from pilot_harness import make_repo, run_in_process, write_workflow

from brain.sim.config import SimConfig
from brain.sim.policy import SimChatRequest, SimTurn
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.agent.compaction import AFTER_FRACTION
from pilot.store.event_store import EventStore

WINDOW = 6000
CLAIM = "I verified that all test cases are passing."
CHECK = "python3 -c 'import app; assert app.VALUE == 2, app.VALUE'"


class Claimer:
    """Reads big.txt ten lines at a time (small answers) and says all tests pass; never edits;
    finishes after ``reads`` reads."""

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


@pytest.mark.parametrize(
    ("padding", "most_after", "least_gap"),
    [
        (0, AFTER_FRACTION, 8),  # with the model's summary: 6 steps apart, 47% of the window
        (70, 0.5, 5),  # a phase prompt of 1,200 tokens, pinned: before, 3 steps apart, 64%
    ],
)
def test_a_long_run_with_a_failing_check_and_no_edit_is_summarised_from_its_events(
    tmp_path: Path, padding: int, most_after: float, least_gap: int
) -> None:
    big = "\n".join(f"line {i}: " + "lorem ipsum dolor sit amet " * 3 for i in range(400))
    repo = make_repo(tmp_path / "repo", {"app.py": "VALUE = 1\n", "big.txt": big + "\n"})
    model = Claimer(reads=60)
    with running_sim(SimConfig(model="m", max_model_len=WINDOW), policy=model) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="claims",
            endpoint=sim.openai_base_url,
            phases=[
                {
                    "name": "fix",
                    "prompt": "Make VALUE in app.py equal 2. "
                    + "Context: the module app.py is read by the service at start. " * padding,
                    "check": CHECK,
                    "max_attempts": 1,
                }
            ],
            model={"max_tokens": 256},
            limits={"max_no_progress_steps": 100, "max_steps": 100},
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    events = EventStore(f"sqlite:///{tmp_path / 'm.db'}").load_events(outcome.run_id)
    assert outcome.status == "failed", outcome.reason  # the check never passed
    compactions = [e for e in events if isinstance(e, ev.Compaction)]
    assert len(compactions) >= 2, len(compactions)
    assert model.summaries_asked == 0
    for compaction in compactions:
        summary = compaction.summary
        assert compaction.summary_source == "events"
        assert "passing" not in summary and "verified" not in summary, summary
        assert f"`{CHECK}` FAILED (exit code 1)" in summary, summary
        assert "still failing" in summary
        assert "## Edits\n- none: no file was changed in these turns." in summary
        assert "big.txt" in summary  # the file read
        assert compaction.tokens_after <= most_after * WINDOW, compaction
        assert compaction.tokens_before - compaction.tokens_after >= WINDOW // 4, compaction
    # small answers: each compaction is many steps from the one before
    steps_between: list[int] = []
    requests = 0
    for event in events:
        if isinstance(event, ev.ModelRequest):
            requests += 1
        elif isinstance(event, ev.Compaction):
            steps_between.append(requests)
    gaps = [b - a for a, b in itertools.pairwise(steps_between)]
    assert gaps and min(gaps) >= least_gap, gaps
