"""The `pilot` command's output as scripts and log files meet it: JSON mode is JSON lines only,
listings have --json and are not cut in pipes, a worker's log is written as events come,
completion installs, and a second SIGTERM exits 143."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pilot_harness import call, make_repo, pilot_cmd, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot.store.event_store import EventStore

REPO = Path(__file__).resolve().parents[1]


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "MARATHON_HOME": str(tmp_path / "home"), **extra}
    env.pop("MARATHON_DB", None)
    return env


def pilot(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pilot_cmd(*args),
        env=env_for(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dry_run_json_stdout_is_json_lines_only(tmp_path: Path) -> None:
    proc = pilot(
        tmp_path, "run", str(REPO / "workflows" / "refactor_repo.yaml"), "--dry-run", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines, proc.stderr
    for line in lines:
        json.loads(line)  # every stdout line is JSON (`| jq` works)
    assert "DRY RUN" in proc.stderr


def test_listings_have_json_and_are_not_cut_in_pipes(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    store = EventStore(f"sqlite:///{db}")
    long_name = "a-workflow-with-a-name-much-longer-than-a-narrow-eighty-column-table-allows-xyz"
    run_id = store.create_run(
        workflow_name=long_name,
        workflow_path="wf.yaml",
        workflow_text="t",
        params={},
        workspace="",
        owner=None,
        status="queued",
        origin="queue",
    )
    for command in (["runs"], ["queue", "ls"]):
        table = pilot(tmp_path, *command, "--db", f"sqlite:///{db}", COLUMNS="80")
        assert table.returncode == 0, table.stderr
        assert long_name in table.stdout and run_id in table.stdout
        listed = pilot(tmp_path, *command, "--db", f"sqlite:///{db}", "--json")
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        assert [(r["id"], r["workflow"], r["status"]) for r in rows] == [
            (run_id, long_name, "queued")
        ]


def test_first_day_runs_lists_nothing_and_creates_nothing(tmp_path: Path) -> None:
    proc = pilot(tmp_path, "runs")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "home").exists()


def test_shell_completion_installs(tmp_path: Path) -> None:
    """Typer's completion, from a bash (it detects the shell from its parent processes)."""
    script = Path(sys.executable).with_name("pilot")
    if not script.exists():
        pytest.skip("no pilot console script next to this Python")
    home = tmp_path / "user"
    home.mkdir()
    proc = subprocess.run(
        ["bash", "-c", f"'{script}' --install-completion; true"],
        env=env_for(tmp_path, HOME=str(home)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "completion installed" in proc.stdout, proc.stdout + proc.stderr
    completion = home / ".bash_completions" / "pilot.sh"
    assert str(completion) in (home / ".bashrc").read_text()
    assert "_pilot_completion" in completion.read_text()


@pytest.fixture
def slow_workflow(tmp_path: Path):
    turns = [{"tool_calls": [call("run", command=f"sleep 0.5; echo {i}")]} for i in range(40)]
    turns.append({"tool_calls": [call("finish", summary="done")]})
    script = write_script(tmp_path / "s.yaml", "out-slow", turns)
    config = SimConfig(model="out-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(config) as sim:
        repo = make_repo(tmp_path / "repo")
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="out-slow",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        yield workflow, repo


def wait_for_text(path: Path, text: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, path.read_text(errors="replace")
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {path} after {timeout}s: {path.read_text()!r}")


def test_a_killed_worker_leaves_its_log(tmp_path: Path, slow_workflow) -> None:
    workflow, repo = slow_workflow
    db = f"sqlite:///{tmp_path / 'q.db'}"
    added = pilot(tmp_path, "queue", "add", str(workflow), "-p", f"repo={repo}", "--db", db)
    assert added.returncode == 0, added.stderr
    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            pilot_cmd("worker", "--db", db, "--exit-when-idle"),
            env=env_for(tmp_path),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_text(log, "-> run", proc)  # a tool line, while the run goes on
    finally:
        proc.kill()
        proc.wait(timeout=30)
    text = log.read_text()
    assert "run started" in text and "phase 1: work" in text


def test_a_second_sigterm_exits_143(tmp_path: Path, slow_workflow) -> None:
    workflow, repo = slow_workflow
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            pilot_cmd("run", str(workflow), "-p", f"repo={repo}"),
            env=env_for(tmp_path),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wait_for_text(log, "-> run", proc)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, log.read_text()


def test_brain_ps_in_a_pipe_is_not_cut(tmp_path: Path) -> None:
    from brain.state import Registry, ServerRecord

    home = tmp_path / "home" / "brain"
    home.mkdir(parents=True)
    long_model = "an-organisation-with-a-long-name/a-model-whose-name-is-longer-than-eighty-columns"
    Registry(home).put(
        ServerRecord(
            name="gone",
            backend="process",
            spec={"model": long_model},
            handle={
                "name": "gone",
                "backend": "process",
                "ref": "999999999",
                "host": "127.0.0.1",
                "port": 8123,
            },
        )
    )
    proc = subprocess.run(
        [sys.executable, "-c", "from brain.cli import app; app()", "ps"],
        env=env_for(tmp_path, COLUMNS="80"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert long_model in proc.stdout
