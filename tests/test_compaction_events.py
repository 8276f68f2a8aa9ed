"""A compaction's summary says what the run's events show, end to end: a scripted model on the
sim that claims "all test cases are passing" while it only reads and the phase's check fails
(the scenario of ``bench/compaction_gaps.py``). The summary names the failing check, holds no
claim of the model, and the compactions of a long run stay far apart (each one leaves the
prompt under half the window)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from compaction_gaps import CHECK, WINDOW, run_scenario, steps_between

from pilot import events as ev
from pilot.agent.compaction import AFTER_FRACTION


@pytest.mark.parametrize(
    ("padding", "most_after", "least_gap"),
    [
        (0, AFTER_FRACTION, 8),  # with the model's summary: 7 steps apart, 42% of the window
        (70, 0.5, 5),  # a phase prompt of 1,200 tokens, pinned: before, 3-4 steps apart, 59%
    ],
)
def test_a_long_run_with_a_failing_check_and_no_edit_is_summarised_from_its_events(
    tmp_path: Path, padding: int, most_after: float, least_gap: int
) -> None:
    found = run_scenario(tmp_path, padding=padding)
    assert found.outcome.status == "failed", found.outcome.reason  # the check never passed
    compactions = [e for e in found.events if isinstance(e, ev.Compaction)]
    assert len(compactions) >= 2, len(compactions)
    assert found.model.summaries_asked == 0
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
    gaps = steps_between(found.events)
    assert gaps and min(gaps) >= least_gap, gaps
