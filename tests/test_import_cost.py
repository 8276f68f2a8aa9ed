"""What each command imports, read from a real ``pilot`` process (``python -X importtime``):
the commands a person types to look (``--help``, ``runs``, ``show``) load neither the model
client (openai, httpx, tenacity) nor the ORM, and ``--help`` not even the store; the model
client's libraries come with its first request, not with ``import pilot.model.client``.

The cost itself (CPU seconds) is a bench figure (bench/README.md), never asserted here; the
import graph is what keeps it low, and it is asserted exactly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pilot_harness import queued

from pilot.store.event_store import EventStore

REPO = Path(__file__).resolve().parents[1]
CLIENT_LIBRARIES = ("openai", "httpx", "httpx2", "tenacity", "pilot.model.client")


def imported(tmp_path: Path, *argv: str) -> set[str]:
    """The modules a ``python -X importtime ARGV`` process imported, by full name."""
    env = {**os.environ, "MARATHON_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)}
    env.pop("MARATHON_DB", None)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    assert "pilot" in names or "-c" in argv, proc.stderr[-2000:]
    return names


def loaded(names: set[str], *top: str) -> list[str]:
    return sorted(n for n in names if any(n == t or n.startswith(t + ".") for t in top))


def test_help_imports_neither_the_store_nor_the_client(tmp_path: Path) -> None:
    names = imported(tmp_path, "-m", "pilot", "--help")
    assert "pilot.front.cli" in names
    assert loaded(names, *CLIENT_LIBRARIES, "sqlalchemy", "pilot.store", "pilot.events") == []


@pytest.fixture
def stored_run(tmp_path: Path) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    (run_id,) = queued(EventStore(url), 1)
    return url, run_id


@pytest.mark.parametrize("command", ["runs", "show"])
def test_looking_at_runs_never_imports_the_model_client(
    tmp_path: Path, stored_run: tuple[str, str], command: str
) -> None:
    url, run_id = stored_run
    argv = ["runs", "--db", url] if command == "runs" else ["show", run_id, "--db", url]
    names = imported(tmp_path, "-m", "pilot", *argv)
    assert "pilot.store" in names  # it did read the store
    assert loaded(names, *CLIENT_LIBRARIES) == []
