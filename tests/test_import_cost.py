"""What each command imports, read from a real ``pilot`` process (``python -X importtime``):
the commands a person types to look (``--help``, ``runs``, ``show``) load neither the model
client (openai, httpx, tenacity) nor the ORM, ``runs`` on SQLite no SQLAlchemy at all, and
``--help`` not even the store; the model client's libraries come with its first request, not
with ``import pilot.model.client``.

The cost itself (CPU seconds) is a bench figure (bench/README.md), never asserted here; the
import graph is what keeps it low, and it is asserted exactly.
"""

from __future__ import annotations

import json
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
def test_looking_at_runs_imports_neither_the_model_client_nor_the_orm(
    tmp_path: Path, stored_run: tuple[str, str], command: str
) -> None:
    url, run_id = stored_run
    argv = ["runs", "--db", url] if command == "runs" else ["show", run_id, "--db", url]
    names = imported(tmp_path, "-m", "pilot", *argv)
    assert "pilot.store" in names  # it did read the store
    assert loaded(names, *CLIENT_LIBRARIES, "sqlalchemy.orm") == []  # Core, never the ORM
    if command == "runs":  # a table of rows: no fold, no workflow schema, no rich views
        assert loaded(names, "pilot.agent.state", "pilot.workflow", "pilot.front.ui") == []
        # nor SQLAlchemy at all: a SQLite store's rows read through sqlite3 (issue 35)
        assert loaded(names, "sqlalchemy", "pilot.store.event_store") == []


CLIENT_FIRST_REQUEST = """
import asyncio, json, sys
from pilot.model.client import OpenAIModelClient
from pilot.model.router import Router
from pilot.model.settings import ClientSettings

LIBS = ("openai", "httpx", "httpx2", "tenacity")
client = OpenAIModelClient(sys.argv[1], ClientSettings())
made = [m for m in LIBS if m in sys.modules]

async def ask():
    served = await client.list_models()
    await client.aclose()
    return served[0].id

model = asyncio.run(ask())
print(json.dumps({"made": made, "asked": [m for m in LIBS if m in sys.modules], "model": model}))
"""


def test_the_client_imports_its_sdk_with_the_first_request(tmp_path: Path) -> None:
    from brain.sim.config import SimConfig
    from brain.sim.server import running_sim

    with running_sim(SimConfig(model="lazy-model", max_model_len=4096)) as sim:
        proc = subprocess.run(
            [sys.executable, "-c", CLIENT_FIRST_REQUEST, sim.openai_base_url],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["made"] == []  # the module, the router and a client made: no SDK yet
    assert seen["model"] == "lazy-model"
    assert {"openai", "httpx2"} <= set(seen["asked"])  # the request brought it
    assert "tenacity" not in seen["asked"]  # nothing failed: no retry loop was needed
