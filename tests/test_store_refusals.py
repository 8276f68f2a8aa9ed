"""A store that is not ours, or that goes away mid-run: one clear error, never a traceback,
and nothing of anyone's lost. Every case through the CLI, in real processes.

- a ``marathon.db`` that is not SQLite, or that holds another program's ``runs`` table
  (SQLite and PostgreSQL): refused with exit 2, the file (the tables) left unchanged;
- ``MARATHON_HOME`` that cannot be made (under /proc): exit 2;
- PostgreSQL stopped while a run works (a private cluster, started and stopped here): the run
  stops with exit 74 and "unreachable", and once the server is back ``pilot resume`` finishes
  it with every event recorded before the stop.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from pilot_harness import GIT_ENV, call, make_repo, pilot_cmd, write_script, write_workflow
from test_pilot_postgres import pg_url  # noqa: F401  (the fixture)

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot.store.event_store import EventStore


def pilot(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, **GIT_ENV, "MARATHON_HOME": str(home)}
    env.pop("MARATHON_DB", None)
    return subprocess.run(
        pilot_cmd(*args), env=env, capture_output=True, text=True, timeout=timeout
    )


def digest(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def refused(done: subprocess.CompletedProcess, words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and words in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 3, done.stderr


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    return write_workflow(
        tmp_path / "wf.yaml",
        key="k",
        endpoint="http://127.0.0.1:9/v1",
        phases=[{"name": "work", "prompt": "p"}],
    )


def command_line(tmp_path: Path, workflow: Path, command: list[str]) -> list[str]:
    """``command`` with WF as the workflow's path and R as a fresh repository."""
    repo = make_repo(tmp_path / "repo")
    return [str(workflow) if a == "WF" else f"repo={repo}" if a == "repo=R" else a for a in command]


@pytest.mark.parametrize("command", [["runs"], ["show", "abc"], ["run", "WF", "-p", "repo=R"]])
def test_a_marathon_db_that_is_not_sqlite_is_refused_and_left_unchanged(
    tmp_path: Path, workflow: Path, command: list[str]
) -> None:
    db = tmp_path / "home" / "marathon.db"
    db.parent.mkdir()
    db.write_bytes(b"my notes, not a database\n" * 200)
    before = digest(db)
    home = db.parent
    refused(pilot(home, *command_line(tmp_path, workflow, command)), "is not a SQLite database")
    assert digest(db) == before
    assert sorted(p.name for p in home.iterdir()) == ["marathon.db"]


@pytest.mark.parametrize("command", [["runs"], ["queue", "ls"], ["run", "WF", "-p", "repo=R"]])
def test_a_marathon_db_holding_another_programs_runs_table_is_refused(
    tmp_path: Path, workflow: Path, command: list[str]
) -> None:
    db = tmp_path / "home" / "marathon.db"
    db.parent.mkdir()
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, km REAL, day TEXT)")
        conn.execute("INSERT INTO runs VALUES (1, 42.195, '2026-04-20')")
    conn.close()
    before = digest(db)
    args = command_line(tmp_path, workflow, command)
    refused(pilot(db.parent, *args), "holds a `runs` table that is not Marathon's")
    assert digest(db) == before
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT * FROM runs").fetchall() == [(1, 42.195, "2026-04-20")]
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
    assert tables == {"runs"}


def test_a_postgres_database_holding_another_programs_runs_table_is_refused(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    import psycopg

    plain = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, km REAL)")
        conn.execute("INSERT INTO runs VALUES (1, 42.195)")
    refused(pilot(tmp_path / "home", "runs", "--db", pg_url), "not Marathon's")
    with psycopg.connect(plain, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
        assert tables == [("runs",)]
        assert conn.execute("SELECT * FROM runs").fetchall() == [(1, 42.195)]


@pytest.mark.parametrize("command", [["runs"], ["queue", "ls"], ["show", "abc"]])
def test_a_marathon_home_that_cannot_be_made_is_an_error(command: list[str]) -> None:
    done = pilot(Path("/proc/nope"), *command)
    refused(done, "MARATHON_HOME=/proc/nope does not exist and cannot be created")
    assert done.stdout == ""


# -- PostgreSQL stopped during a run -----------------------------------------------------------

PG_BIN = next((p for p in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivatePostgres:
    """A PostgreSQL cluster of this test's own (the shared one is never stopped): initdb,
    start and stop as the ``postgres`` user."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *args: str) -> None:
        subprocess.run(
            ["su", "postgres", "-c", " ".join(args)], check=True, capture_output=True, timeout=60
        )

    def init(self) -> None:
        self.root.mkdir()
        shutil.chown(self.root, "postgres")
        self._as_postgres(
            f"{PG_BIN}/initdb", "-D", f"{self.root}/data", "-A", "trust", "-U", "postgres"
        )

    def start(self) -> None:
        options = f"'-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root}'"
        self._as_postgres(
            f"{PG_BIN}/pg_ctl", "-D", f"{self.root}/data", "-l", f"{self.root}/log", "-o", options,
            "-w", "start",
        )  # fmt: skip

    def stop(self) -> None:
        self._as_postgres(f"{PG_BIN}/pg_ctl", "-D", f"{self.root}/data", "-m", "fast", "-w", "stop")


@pytest.fixture
def private_postgres():
    if PG_BIN is None or os.geteuid() != 0 or shutil.which("su") is None:
        pytest.skip("a private PostgreSQL needs its binaries, root and a postgres user")
    base = Path(tempfile.mkdtemp(prefix="marathon-pg-test."))  # the postgres user reaches it
    try:
        shutil.chown(base, "postgres")
    except (LookupError, PermissionError):
        shutil.rmtree(base)
        pytest.skip("no postgres user")
    server = PrivatePostgres(base / "pg")
    try:
        server.init()
        server.start()
        yield server
    finally:
        subprocess.run(
            ["su", "postgres", "-c", f"{PG_BIN}/pg_ctl -D {server.root}/data -m immediate stop"],
            capture_output=True,
        )
        shutil.rmtree(base, ignore_errors=True)


def test_postgres_stopped_during_a_run_pauses_it_and_resume_finishes_it(
    tmp_path: Path, private_postgres: PrivatePostgres
) -> None:
    """The run's tool waits on a file; PostgreSQL is stopped meanwhile; the tool returns and
    its result cannot be committed: the run stops in seconds with exit 74 and a one-line
    reason, no traceback. With the server back, ``pilot runs`` shows it interrupted and
    ``pilot resume`` finishes it; the events from before the stop are all there."""
    hold = tmp_path / "hold"
    hold.touch()
    began = tmp_path / "began"
    script = write_script(
        tmp_path / "s.yaml",
        "pg-gone",
        [
            {"tool_calls": [call("write_file", path="a.txt", content="a\n")]},
            {
                "tool_calls": [
                    call("run", command=f"touch {began}; while [ -e {hold} ]; do sleep 0.05; done")
                ]
            },
            {"tool_calls": [call("finish", summary="done")]},
        ],
    )
    config = SimConfig(model="pg-model", max_model_len=32768, policy=f"script:{script}")
    home = tmp_path / "home"
    with running_sim(config) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="pg-gone",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        repo = make_repo(tmp_path / "repo")
        env = {**os.environ, **GIT_ENV, "MARATHON_HOME": str(home)}
        proc = subprocess.Popen(
            pilot_cmd("run", str(workflow), "-p", f"repo={repo}", "--db", private_postgres.url),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 90
        while not began.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        before = EventStore(private_postgres.url)
        (run,) = before.list_runs()
        recorded = [seq for seq, _ in before.iter_event_payloads(run.id)]
        before.close()
        private_postgres.stop()
        stopped = time.monotonic()
        hold.unlink()
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 74, out + err
        assert time.monotonic() - stopped < 30
        assert "Traceback" not in err and "cannot be reached" in err, err
        assert f"pilot resume {run.id}" in err
        private_postgres.start()
        shown = pilot(home, "runs", "--db", private_postgres.url)
        assert shown.returncode == 0 and "interrupted" in shown.stdout, shown.stdout + shown.stderr
        after = EventStore(private_postgres.url)
        kept = [seq for seq, _ in after.iter_event_payloads(run.id)]
        assert kept[: len(recorded)] == recorded and len(recorded) >= 3
        done = pilot(home, "resume", run.id, "--db", private_postgres.url)
        assert done.returncode == 0, done.stdout + done.stderr
        assert after.get_run(run.id).status == "succeeded"
        after.close()
