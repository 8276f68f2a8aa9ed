"""Shared pieces for the pilot's end-to-end tests: a git workspace, a script, a workflow file.

Everything here is real: a git repository in a temp dir, a simulated vLLM server over loopback,
a SQLite file, and (for crash tests) real `pilot` subprocesses.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import chaos_common

from pilot.agent.state import RunState, fold
from pilot.run.launch import load_for_run, resume_run, start_run
from pilot.run.outcomes import RunOutcome
from pilot.run.runner import Runner
from pilot.store.event_store import EventStore

GIT_ENV = chaos_common.GIT_ENV


def make_repo(root: Path, files: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    files = files or {"README.md": "# demo\n", "app.py": "VALUE = 1\n"}
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / ".gitignore").write_text("__pycache__/\n")
    env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
    return root


def write_script(path: Path, key: str, turns: list[dict[str, Any]], **extra: Any) -> Path:
    conversation = {"key": key, "turns": turns, **extra}
    path.write_text(yaml.safe_dump({"conversations": [conversation]}, sort_keys=False))
    return path


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def write_workflow(
    path: Path,
    *,
    key: str,
    endpoint: str | list[str],
    phases: list[dict[str, Any]],
    tools: list[Any] | None = None,
    limits: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    workspace: dict[str, Any] | None = None,
) -> Path:
    data: dict[str, Any] = {
        "name": "test-flow",
        "params": {"repo": {"type": "path", "required": True}},
        "model": {
            ("endpoints" if isinstance(endpoint, list) else "endpoint"): endpoint,
            "name": "auto",
            "server_wait": 20,
            "idle_timeout": 5,
            **(model or {}),
        },
        "workspace": {"path": "{{ params.repo }}", **(workspace or {})},
        "tools": tools
        or ["read_file", "write_file", "edit_file", "run", "git_commit", "git_diff", "finish"],
        "sandbox": "none",
        "system": f"Test conversation {key}. Work with the tools.",
        "phases": phases,
    }
    if limits:
        data["limits"] = limits
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_in_process(
    workflow: Path, repo: Path, db: Path, *, endpoint: str | None = None
) -> RunOutcome:
    store = EventStore(f"sqlite:///{db}")
    loaded = load_for_run(workflow, [f"repo={repo}"])
    runner = Runner(store)
    return asyncio.run(_closing(runner, start_run(runner, loaded, endpoint=endpoint)))


def resume_in_process(run_id: str, db: Path) -> RunOutcome:
    store = EventStore(f"sqlite:///{db}")
    runner = Runner(store)
    return asyncio.run(_closing(runner, resume_run(runner, store.find_run(run_id))))


async def _closing(runner: Runner, outcome: Awaitable[RunOutcome]) -> RunOutcome:
    """``outcome``, then the runner's model clients closed (as the CLI does)."""
    try:
        return await outcome
    finally:
        await runner.aclose()


def final_state(db: Path, run_id: str) -> RunState:
    return fold(EventStore(f"sqlite:///{db}").load_events(run_id))


def run_workspace(db: Path, run_id: str) -> Path:
    """Where the run works: its own worktree (the user's checkout is never changed)."""
    state = final_state(db, run_id)
    assert state.started is not None, "the run has not started"
    return Path(state.started.workspace)


def worktree_of(store: EventStore, repo: Path) -> Path:
    """The workspace of the one run made from the checkout ``repo`` (its own worktree)."""
    found = []
    for record in store.list_runs(limit=1000):
        started = fold(store.load_events(record.id)).started
        if started is not None and started.repository == str(repo.resolve()):
            found.append(Path(started.workspace))
    assert len(found) == 1, f"{len(found)} runs from {repo}"
    return found[0]


def transcript(state: RunState) -> list[dict[str, Any]]:
    """The conversation with what differs between two equal runs normalised (call ids, commit
    hashes, the run id): the chaos harness's comparison, so tests and bench judge alike."""
    return chaos_common.transcript(state.messages)


pilot_cmd = chaos_common.pilot_cmd
tree_hash = chaos_common.tree_hash


def queued(store: EventStore, n: int) -> list[str]:
    """``n`` bare queued runs (no workflow behind them), for claim and lease tests."""
    return [
        store.create_run(
            workflow_name="wf",
            workflow_path="wf.yaml",
            workflow_text="t",
            params={},
            workspace="",
            owner=None,
            status="queued",
            origin="queue",
        )
        for _ in range(n)
    ]


async def read_request(reader: asyncio.StreamReader) -> None:
    """Read one request (head and ``content-length`` body) off a hand-written server's socket."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)
