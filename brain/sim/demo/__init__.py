"""The demo: a sample repository and the rule-based agent that refactors it through the sim.

``sample_repo/`` is a tiny stdlib-only package (``billing``) whose three line formatters repeat
the same validation and amount formatting, with ``unittest`` tests. The quick start copies it,
serves ``brain sim --policy demo`` and runs ``workflows/refactor_repo.yaml`` against it; the
``DemoPolicy`` then surveys, refactors (extracting ``format_amount``) and reviews, for real.
"""

from __future__ import annotations

from pathlib import Path

from brain.sim.demo.policy import DemoPolicy

__all__ = ["DemoPolicy", "sample_repo_path"]


def sample_repo_path() -> Path:
    """Where the shipped sample repository lives (read-only: copy it before running on it)."""
    return Path(__file__).resolve().parent / "sample_repo"
