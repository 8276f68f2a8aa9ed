"""Fixtures shared by the test modules."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def marathon_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private ``MARATHON_HOME`` for the test (the brain's state, the default database),
    with any ``MARATHON_DB`` of the caller's environment out of the way."""
    home = tmp_path / "home"
    monkeypatch.setenv("MARATHON_HOME", str(home))
    monkeypatch.delenv("MARATHON_DB", raising=False)
    return home
