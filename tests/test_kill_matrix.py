"""The kill matrix's small subset (``bench/kill_matrix.py --quick``): a kill in worktree
creation, one inside the one-commit window and one just after it, each resumed; the full
matrix is a bench command (figures in bench/README.md)."""

from __future__ import annotations

from pathlib import Path

import pilot_harness  # noqa: F401  (puts bench/ on sys.path)

# isort: split
import kill_matrix  # bench/ is on the path (tests/pilot_harness.py)


def test_quick_kill_matrix_resumes_every_run_and_doubles_only_inside_the_window(
    tmp_path: Path,
) -> None:
    ref, results = kill_matrix.matrix(quick=True, randoms=0, base=tmp_path)
    # five commands and the phase check twice: before any change (its baseline) and at finish
    assert len(ref.outside) == 7
    assert {r.case.kind for r in results} == {"worktree_add", "tool_returned", "result_committed"}
    for result in results:
        assert result.killed, result
        assert result.resumed and result.identical, result
        assert result.doubled == result.doubled_same_id == result.doubled_in_window, result
        assert result.integrity
    window = next(r for r in results if r.case.kind == "tool_returned")
    assert window.doubled == 1 and window.ignored_doubled == 1
    after = next(r for r in results if r.case.kind == "result_committed")
    assert after.doubled == 0 and after.ignored_doubled == 0
