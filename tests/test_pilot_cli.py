"""The `pilot` command as a user meets it: real subprocesses, a real sim, real SQLite and git."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pilot_harness import (
    call,
    make_repo,
    pilot_cmd,
    run_workspace,
    write_script,
    write_workflow,
)

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot.store.event_store import EventStore


def env_for(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "MARATHON_HOME": str(tmp_path / "home")}


def pilot(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        pilot_cmd(*args), env=env_for(tmp_path), capture_output=True, text=True, timeout=timeout
    )


def test_validate_reports_file_line_and_field_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\nworkspace: {path: .}\ntools: [read_file]\nphases:\n  - name: a\n    promt: hi\n"
    )
    proc = pilot(tmp_path, "validate", str(bad))
    assert proc.returncode == 2
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out
    assert f"{bad}:6:5: phases[0].promt: unknown key" in out


def test_validate_accepts_the_shipped_workflow_and_schema_is_json() -> None:
    here = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        pilot_cmd("validate", str(here / "workflows" / "refactor_repo.yaml")),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "refactor-repo, 3 phase(s)" in proc.stdout.replace("\n", " ")
    schema = json.loads(
        subprocess.run(pilot_cmd("schema"), capture_output=True, text=True, check=True).stdout
    )
    assert "phases" in schema["properties"]


@pytest.fixture
def slow_run(tmp_path: Path):
    """A workflow whose tools take a while, against a sim in this process."""
    turns = [
        {"tool_calls": [call("run", command=f"sleep 0.4; echo {i} >> log.txt")]} for i in range(6)
    ]
    turns.append({"tool_calls": [call("finish", summary="slow done")]})
    script = write_script(tmp_path / "s.yaml", "cli-slow", turns)
    config = SimConfig(model="cli-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(config) as sim:
        repo = make_repo(tmp_path / "repo")
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="cli-slow",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        yield workflow, repo, tmp_path / "m.db"


def wait_for_event(db: Path, kind: str, timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db.exists():
            store = EventStore(f"sqlite:///{db}")
            for record in store.list_runs():
                if any(e.type == kind for e in store.load_events(record.id)):
                    return record.id
        time.sleep(0.1)
    raise AssertionError(f"no {kind} event within {timeout}s")


def start_until_a_tool_runs(
    tmp_path: Path, slow_run, *, capture: bool = False
) -> tuple[subprocess.Popen, str]:
    """`pilot run` of the slow workflow in the background; returns once a tool has started."""
    workflow, repo, db = slow_run
    out = subprocess.PIPE if capture else subprocess.DEVNULL
    proc = subprocess.Popen(
        pilot_cmd("run", str(workflow), "--param", f"repo={repo}", "--db", f"sqlite:///{db}"),
        env=env_for(tmp_path),
        stdout=out,
        stderr=out,
        text=True,
    )
    return proc, wait_for_event(db, "tool_started")


def test_sigterm_pauses_cleanly_and_resume_finishes(tmp_path: Path, slow_run) -> None:
    _workflow, _repo, db = slow_run
    proc, run_id = start_until_a_tool_runs(tmp_path, slow_run, capture=True)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "paused" in out and f"pilot resume {run_id}" in out
    store = EventStore(f"sqlite:///{db}")
    record = store.get_run(run_id)
    assert record.status == "paused" and record.lease_owner is None
    events = store.load_events(run_id)
    assert events[-1].type == "run_paused"
    started = sum(e.type == "tool_started" for e in events)
    finished = sum(e.type == "tool_finished" for e in events)
    assert started == finished, "the running tool was let finish before pausing"

    done = pilot(tmp_path, "resume", run_id[:5], "--db", f"sqlite:///{db}")
    assert done.returncode == 0, done.stderr
    assert store.get_run(run_id).status == "succeeded"
    assert (run_workspace(db, run_id) / "log.txt").read_text().split() == [str(i) for i in range(6)]

    listing = pilot(tmp_path, "runs", "--db", f"sqlite:///{db}")
    assert run_id in listing.stdout and "succeeded" in listing.stdout
    shown = pilot(tmp_path, "show", run_id, "--db", f"sqlite:///{db}", "--json")
    types = [json.loads(line)["type"] for line in shown.stdout.splitlines()]
    assert types.count("run_paused") == 1 and types.count("run_resumed") == 1
    diff = pilot(tmp_path, "diff", run_id, "--db", f"sqlite:///{db}")
    assert "+5" in diff.stdout and "log.txt" in diff.stdout


def test_two_concurrent_resumes_exactly_one_proceeds(tmp_path: Path, slow_run) -> None:
    _workflow, _repo, db = slow_run
    proc, run_id = start_until_a_tool_runs(tmp_path, slow_run)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    resumes = [
        subprocess.Popen(
            pilot_cmd("resume", run_id, "--db", f"sqlite:///{db}"),
            env=env_for(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [(p.wait(timeout=120), *p.communicate()) for p in resumes]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, _, err in results if code == 2)
    assert "is being executed by" in refused
    events = EventStore(f"sqlite:///{db}").load_events(run_id)
    assert sum(e.type == "run_resumed" for e in events) == 1
    assert (run_workspace(db, run_id) / "log.txt").read_text().split() == [str(i) for i in range(6)]


def test_cancel_a_paused_run(tmp_path: Path, slow_run) -> None:
    _workflow, _repo, db = slow_run
    proc, run_id = start_until_a_tool_runs(tmp_path, slow_run)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    out = pilot(tmp_path, "cancel", run_id, "--db", f"sqlite:///{db}")
    assert out.returncode == 0 and "cancelled" in out.stdout
    assert EventStore(f"sqlite:///{db}").get_run(run_id).status == "cancelled"
    again = pilot(tmp_path, "resume", run_id, "--db", f"sqlite:///{db}")
    assert again.returncode == 4


def test_show_lists_the_brains_server_events_inside_the_run(tmp_path: Path, slow_run) -> None:
    from brain.events import ServerEventWriter

    _workflow, _repo, db = slow_run
    url = f"sqlite:///{db}"
    proc, run_id = start_until_a_tool_runs(tmp_path, slow_run)
    ServerEventWriter(url).record("gemma", "died", {"summary": "CUDA out of memory"})
    assert proc.wait(timeout=120) == 0
    shown = pilot(tmp_path, "show", run_id, "--db", url)
    assert "server gemma: died" in shown.stdout and "CUDA out of memory" in shown.stdout


def test_detach_prints_the_run_id_and_the_run_finishes_in_the_background(
    tmp_path: Path, slow_run
) -> None:
    import re

    workflow, repo, db = slow_run
    url = f"sqlite:///{db}"
    out = pilot(tmp_path, "run", str(workflow), "--param", f"repo={repo}", "--db", url, "--detach")
    assert out.returncode == 0, out.stderr
    run_id = re.search(r"run (\w+) started in the background", out.stdout).group(1)
    assert f"pilot logs {run_id} -f" in out.stdout
    store = EventStore(url)
    deadline = time.monotonic() + 120
    while store.get_run(run_id).status != "succeeded":
        assert time.monotonic() < deadline, store.get_run(run_id).status
        time.sleep(0.2)
