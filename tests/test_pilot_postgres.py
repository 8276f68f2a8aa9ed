"""The store and the queue on a real PostgreSQL (started by .ci/services; skipped without one):
claims with FOR UPDATE SKIP LOCKED never give one run to two workers."""

from __future__ import annotations

import os
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pilot_harness import (
    call,
    make_repo,
    pilot_cmd,
    queued,
    worktree_of,
    write_script,
    write_workflow,
)

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.store.event_store import EventStore

URL_FILE = Path(__file__).resolve().parent.parent / ".ci" / "build" / "postgres.url"


def admin_url() -> str:
    url = os.environ.get("MARATHON_TEST_PG_URL")
    if not url and URL_FILE.exists():
        url = URL_FILE.read_text().strip()
    if not url:
        pytest.skip("no PostgreSQL: run `.ci/services start` or set MARATHON_TEST_PG_URL")
    return url


@pytest.fixture
def pg_url():
    import psycopg

    base = admin_url()
    plain = base.replace("postgresql+psycopg://", "postgresql://")
    name = f"marathon_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(plain, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"CREATE DATABASE {name}")
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL at {plain} is not reachable: {exc}")
    yield base.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def start_workers(db_url: str, env: dict[str, str], n: int) -> list[subprocess.Popen[str]]:
    """``n`` real `pilot worker` processes (2 runs at once each) that exit once the queue is
    empty; their stderr is kept for the failure message."""
    return [
        subprocess.Popen(
            pilot_cmd("worker", "-j", "2", "--exit-when-idle", "--db", db_url, "--json"),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]


def test_store_round_trip_on_postgres(pg_url: str) -> None:
    store = EventStore(pg_url)
    run_id = store.create_run(
        workflow_name="wf",
        workflow_path="wf.yaml",
        workflow_text="t",
        params={"a": [1, 2]},
        workspace="/w",
        owner="me:1:x",
    )
    store.append(run_id, 1, ev.RunPaused(reason="r"), totals={"status": "paused"})
    assert store.load_events(run_id)[0].reason == "r"
    assert store.get_run(run_id).status == "paused"
    assert store.find_run(run_id[:4]).id == run_id


def test_a_resume_from_a_checkpoint_on_postgres_reads_its_messages_on_first_use(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_checkpoint import essence, start, steps

    from pilot.agent.state import fold
    from pilot.store.checkpoint import load_run_state

    monkeypatch.setenv("MARATHON_HOME", str(tmp_path / "home"))  # a server's checkpoints
    store, runner, run = start(tmp_path / "unused.db", "r1", url=pg_url)
    steps(run, 1, 10)
    loaded, seq = load_run_state(store, "r1", runner.checkpoint_dir("r1"))
    assert seq is not None
    assert essence(loaded) == essence(fold(store.load_events("r1")))
    store.engine.dispose()


def test_concurrent_claims_never_hand_out_a_run_twice(pg_url: str) -> None:
    store = EventStore(pg_url)
    ids = queued(store, 24)

    def claim_all(worker: int) -> list[str]:
        own = EventStore(pg_url)
        got = []
        while (record := own.claim_next(f"host{worker}:1:w")) is not None:
            got.append(record.id)
        return got

    with ThreadPoolExecutor(6) as pool:
        claimed = [run for batch in pool.map(claim_all, range(6)) for run in batch]
    assert sorted(claimed) == sorted(ids)


def test_two_worker_processes_share_one_postgres_queue(tmp_path: Path, pg_url: str) -> None:
    turns = [{"tool_calls": [call("run", command=f"echo {i} >> log.txt")]} for i in range(3)]
    turns.append({"tool_calls": [call("finish", summary="ok")]})
    script = write_script(tmp_path / "s.yaml", "pg-queue", turns)
    config = SimConfig(model="pg-model", max_model_len=32768, policy=f"script:{script}")
    env = {**os.environ, "MARATHON_HOME": str(tmp_path / "home")}
    with running_sim(config) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="pg-queue",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        repos = [make_repo(tmp_path / f"repo{i}") for i in range(6)]
        for repo in repos:
            subprocess.run(
                pilot_cmd("queue", "add", str(workflow), "--param", f"repo={repo}", "--db", pg_url),
                env=env,
                check=True,
                capture_output=True,
            )
        workers = start_workers(pg_url, env, 2)
        for worker in workers:
            assert worker.wait(timeout=180) == 0, worker.stderr.read()
    store = EventStore(pg_url)
    runs = store.list_runs()
    assert sorted(r.status for r in runs) == ["succeeded"] * 6
    for record in runs:
        starts = [e for e in store.load_events(record.id) if e.type == "run_started"]
        assert len(starts) == 1
    for repo in repos:
        assert (worktree_of(store, repo) / "log.txt").read_text().split() == ["0", "1", "2"]
