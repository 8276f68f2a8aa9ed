"""Shared pieces for the pilot's end-to-end tests: a git workspace, a script, a workflow file.

Everything here is real: a git repository in a temp dir, a simulated vLLM server over loopback,
a SQLite file, and (for crash tests) real `pilot` subprocesses.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from pilot.launch import load_for_run, resume_run, start_run
from pilot.runner import Runner, RunOutcome
from pilot.state import RunState, fold
from pilot.store import EventStore

GIT_ENV = {
    "GIT_AUTHOR_NAME": "T",
    "GIT_AUTHOR_EMAIL": "t@x",
    "GIT_COMMITTER_NAME": "T",
    "GIT_COMMITTER_EMAIL": "t@x",
}


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
    endpoint: str,
    phases: list[dict[str, Any]],
    tools: list[Any] | None = None,
    limits: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
) -> Path:
    data: dict[str, Any] = {
        "name": "test-flow",
        "params": {"repo": {"type": "path", "required": True}},
        "model": {
            "endpoint": endpoint,
            "name": "auto",
            "server_wait": 20,
            "idle_timeout": 5,
            **(model or {}),
        },
        "workspace": {"path": "{{ params.repo }}"},
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
    return asyncio.run(start_run(runner, loaded, endpoint=endpoint))


def resume_in_process(run_id: str, db: Path) -> RunOutcome:
    store = EventStore(f"sqlite:///{db}")
    runner = Runner(store)
    return asyncio.run(resume_run(runner, store.find_run(run_id)))


def final_state(db: Path, run_id: str) -> RunState:
    return fold(EventStore(f"sqlite:///{db}").load_events(run_id))


def _stable(text: Any) -> Any:
    """Commit ids and run ids differ between two runs of the same work; nothing else may."""
    if not isinstance(text, str):
        return text
    text = re.sub(r"marathon/run-[0-9a-f]+", "marathon/run-<id>", text)
    return re.sub(r"\b[0-9a-f]{7,40}\b", "<sha>", text)


def transcript(state: RunState) -> list[dict[str, Any]]:
    """The conversation with server-chosen call ids replaced by their order of appearance,
    and commit and run ids masked."""
    ids: dict[str, str] = {}
    out = []
    for message in state.messages:
        m = dict(message)
        m["content"] = _stable(m.get("content"))
        if "tool_calls" in m:
            m["tool_calls"] = [
                {
                    "id": ids.setdefault(c["id"], f"c{len(ids)}"),
                    "name": c["function"]["name"],
                    "arguments": json.loads(c["function"]["arguments"]),
                }
                for c in m["tool_calls"]
            ]
        if "tool_call_id" in m:
            m["tool_call_id"] = ids.get(m["tool_call_id"], m["tool_call_id"])
        out.append(m)
    return out


def tree_hash(repo: Path) -> str:
    """A hash of every non-ignored file's path and bytes in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    digest = hashlib.sha256()
    for name in sorted(n for n in listed if n):
        path = repo / name.decode()
        if path.is_file():
            digest.update(name + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def pilot_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pilot", *args]
