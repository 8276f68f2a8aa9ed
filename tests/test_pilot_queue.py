"""Many runs at once and the queue: a matrix in one process, workers claiming runs, a worker
killed or stopped mid-queue and another one finishing its runs."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from pilot_harness import (
    call,
    make_repo,
    pilot_cmd,
    worktree_of,
    write_script,
    write_workflow,
)

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot.store.event_store import EventStore

KEY = "queue-flow"


@pytest.fixture
def sim(tmp_path: Path):
    turns = [
        {"tool_calls": [call("run", command=f"sleep 0.3; echo {i} >> log.txt")]} for i in range(4)
    ]
    turns.append({"tool_calls": [call("finish", summary="done")]})
    script = write_script(tmp_path / "s.yaml", KEY, turns)
    config = SimConfig(model="q-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(config) as server:
        yield server


def env_for(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "MARATHON_HOME": str(tmp_path / "home")}


def pilot(tmp_path: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        pilot_cmd(*args), env=env_for(tmp_path), capture_output=True, text=True, timeout=timeout
    )


def flow(tmp_path: Path, endpoint: str) -> Path:
    return write_workflow(
        tmp_path / "wf.yaml", key=KEY, endpoint=endpoint, phases=[{"name": "work", "prompt": "p"}]
    )


def worker_with_two_runs_going(tmp_path: Path, url: str, *extra: str) -> subprocess.Popen:
    """A real `pilot worker` (2 runs at once), returned once both runs have taken a step."""
    worker = subprocess.Popen(
        pilot_cmd("worker", "--parallel", "2", "--db", url, *extra),
        env=env_for(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    store = EventStore(url)
    deadline = time.monotonic() + 60
    while sum(r.steps > 0 for r in store.list_runs()) < 2:
        assert time.monotonic() < deadline, "the worker did not start two runs"
        time.sleep(0.1)
    return worker


def test_matrix_runs_in_parallel_each_in_its_own_workspace(tmp_path: Path, sim) -> None:
    repos = [make_repo(tmp_path / f"repo{i}") for i in range(3)]
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump([{"repo": str(r)} for r in repos]))
    db = tmp_path / "m.db"
    proc = pilot(
        tmp_path,
        "run", str(flow(tmp_path, sim.openai_base_url)),
        "--matrix", str(matrix), "--parallel", "3", "--db", f"sqlite:///{db}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = EventStore(f"sqlite:///{db}").list_runs()
    assert sorted(r.status for r in runs) == ["succeeded"] * 3
    for repo in repos:
        work = worktree_of(EventStore(f"sqlite:///{db}"), repo)
        assert (work / "log.txt").read_text().split() == ["0", "1", "2", "3"]
    starts = sorted(r.created_at for r in runs)
    ends = sorted(r.updated_at for r in runs)
    assert starts[-1] < ends[0], "the three runs overlapped in time"


def test_matrix_rows_sharing_a_workspace_are_refused(tmp_path: Path, sim) -> None:
    repo = make_repo(tmp_path / "repo")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump([{"repo": str(repo)}, {"repo": str(repo)}]))
    proc = pilot(
        tmp_path, "run", str(flow(tmp_path, sim.openai_base_url)), "--matrix", str(matrix),
        "--db", f"sqlite:///{tmp_path / 'm.db'}",
    )  # fmt: skip
    assert proc.returncode == 2
    assert "would share the workspace" in proc.stderr


def test_worker_killed_mid_queue_and_another_worker_finishes(tmp_path: Path, sim) -> None:
    db = tmp_path / "m.db"
    url = f"sqlite:///{db}"
    workflow = flow(tmp_path, sim.openai_base_url)
    repos = [make_repo(tmp_path / f"repo{i}") for i in range(3)]
    for repo in repos:
        added = pilot(
            tmp_path, "queue", "add", str(workflow), "--param", f"repo={repo}", "--db", url
        )
        assert added.returncode == 0, added.stderr
    listed = pilot(tmp_path, "queue", "ls", "--db", url)
    assert listed.stdout.count(" queued ") == 3

    first = worker_with_two_runs_going(tmp_path, url, "--json")
    store = EventStore(url)
    first.send_signal(signal.SIGKILL)
    first.wait()
    listed = pilot(tmp_path, "queue", "ls", "--db", url)
    assert listed.stdout.count(" interrupted ") == 2, listed.stdout  # as `pilot runs` says
    assert " running " not in listed.stdout

    second = pilot(tmp_path, "worker", "--parallel", "2", "--exit-when-idle", "--db", url)
    assert second.returncode == 0, second.stdout + second.stderr
    runs = store.list_runs()
    assert sorted(r.status for r in runs) == ["succeeded"] * 3
    for repo in repos:
        work = worktree_of(store, repo)
        assert (work / "log.txt").read_text().split() == ["0", "1", "2", "3"], "no step twice"


def test_sigterm_pauses_a_workers_runs_and_another_worker_resumes_them(tmp_path: Path, sim) -> None:
    db = tmp_path / "m.db"
    url = f"sqlite:///{db}"
    workflow = flow(tmp_path, sim.openai_base_url)
    repos = [make_repo(tmp_path / f"repo{i}") for i in range(2)]
    for repo in repos:
        pilot(tmp_path, "queue", "add", str(workflow), "--param", f"repo={repo}", "--db", url)
    worker = worker_with_two_runs_going(tmp_path, url)
    store = EventStore(url)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0
    assert sorted(r.status for r in store.list_runs()) == ["paused", "paused"]
    assert all(r.lease_owner is None for r in store.list_runs())

    again = pilot(tmp_path, "worker", "--parallel", "2", "--exit-when-idle", "--db", url)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(r.status for r in store.list_runs()) == ["succeeded", "succeeded"]
