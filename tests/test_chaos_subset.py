"""A small, fast slice of the chaos bench (bench/chaos.py): each section at --quick size or less,
asserting the figures that must be zero. The full matrices are run by the bench itself."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from chaos_faults import fault_matrix
from chaos_input import (
    generated_workflows,
    nasty_commands,
    odd_files,
    workflow_files,
    workspace_escapes,
)
from chaos_kills import kill_matrix
from chaos_storage import concurrent_resumes, storage_faults


@pytest.mark.timeout(240)
def test_sigkill_between_events_and_inside_a_tool_then_resume_equals_the_clean_run(
    tmp_path: Path,
) -> None:
    matrix = kill_matrix(steps=8, kills=2, seed=3, jobs=2, base=tmp_path)
    assert [r.case.kind for r in matrix.results] == ["event", "tool"]
    for r in matrix.results:
        assert r.killed, r
        assert r.completed, r.error
        assert r.duplicates == 0, "a side effect was applied twice"
        assert r.transcript_equal and r.tree_equal, r
        assert r.ledger_complete and r.integrity, r


@pytest.mark.timeout(240)
def test_stream_cuts_lose_nothing_and_malformed_calls_are_answered(tmp_path: Path) -> None:
    results = fault_matrix(
        steps=8,  # three phases, each with work of its own before its finish
        refuse_seconds=1,
        base=tmp_path,
        quick=True,
        only=["stream cut", "error event", "malformed"],
        supervised=False,
    )
    clean, cut, error_event, malformed = results
    for r in results:
        assert r.completed and r.integrity, r
    for r in (clean, cut, error_event):
        assert r.lost is False and r.duplicates == 0, r
    assert cut.retries > 0, "the cut streams were retried"
    assert error_event.retries > 0, "the streams that ended in an error event were retried"
    # A call cut mid-string is answered with an error and sent again, never run half-way.
    assert malformed.error_turns > 0, "malformed calls were answered with an error"
    assert malformed.duplicates == 0 and malformed.lost is False


def test_broken_workflow_files_end_in_located_errors(tmp_path: Path) -> None:
    texts = generated_workflows(60, seed=7)
    in_process, via_cli = workflow_files(texts, tmp_path, subprocess_sample=2)
    assert in_process.tried == 60 and in_process.crashes == 0, in_process.examples
    assert via_cli.tried == 2 and via_cli.crashes == 0, via_cli.examples
    assert in_process.clear > 0


def test_workspace_escapes_and_odd_files_are_tool_errors_never_crashes(tmp_path: Path) -> None:
    escapes = workspace_escapes(tmp_path)
    assert escapes.crashes == 0, escapes.examples
    assert escapes.clear == escapes.tried, "every escape is refused with an error"
    odd = odd_files(tmp_path)
    assert odd.crashes == 0, odd.examples


@pytest.mark.timeout(120)
def test_huge_output_and_sigterm_ignoring_children_are_contained(tmp_path: Path) -> None:
    result = nasty_commands(tmp_path, quick=True)
    assert result.crashes == 0, result.examples
    assert result.clear == result.tried


@pytest.mark.timeout(240)
def test_full_disk_pauses_cleanly_and_a_locked_database_is_waited_for(tmp_path: Path) -> None:
    for r in storage_faults(base=tmp_path, quick=True, steps=8, hold=2.0):
        assert r.integrity, r
        assert r.ok, r


@pytest.mark.timeout(240)
def test_two_concurrent_resumes_never_both_run(tmp_path: Path) -> None:
    race = concurrent_resumes(base=tmp_path, trials=2)
    assert race.both_ran == 0
    assert race.unclear == 0
    assert race.exactly_one == 2 and race.completed == 2
    assert race.integrity_failures == 0


@pytest.mark.timeout(240)
def test_a_server_the_supervisor_restarts_mid_run_loses_nothing(tmp_path: Path) -> None:
    # A real sim process served as a tool-calling model is (auto tool choice and a parser),
    # exiting at every 4th chat request and started again by the brain's Supervisor.
    results = fault_matrix(
        steps=10, refuse_seconds=1, base=tmp_path, quick=True, only=[], supervised=True
    )
    clean, exiting = results
    assert clean.completed and clean.lost is False
    assert exiting.completed and exiting.integrity, exiting
    assert exiting.lost is False and exiting.duplicates == 0, exiting
    assert int(exiting.note.split()[0]) >= 1, f"the server was never restarted: {exiting.note}"
