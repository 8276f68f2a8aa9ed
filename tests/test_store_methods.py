"""Every public method of the store, through each of its paths: SQLite on the held
connection (raw ``sqlite3``, what a step and a resume use), SQLite through SQLAlchemy's
engine, and PostgreSQL (``MARATHON_TEST_PG_URL``; skipped without one). Each path must give
the same answers; a public method this file does not call fails ``test_every_method_is_run``.
"""

from __future__ import annotations

import inspect
import os
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.exc import IntegrityError
from test_pilot_postgres import pg_url  # noqa: F401  (the fixture)

from pilot import events as ev
from pilot.errors import AmbiguousRunId, ConfigurationError, LeaseHeld, RunNotFound
from pilot.store import EventStore, LaunchFacts, StoreBusy
from pilot.store.event_store import utcnow

CALLED: set[str] = set()
"""The methods the test below called (``test_every_method_is_run`` checks the list)."""


class Recorder:
    """The store, each public method call noted in ``CALLED``."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    def __getattr__(self, name: str):
        CALLED.add(name)
        return getattr(self.store, name)


@pytest.fixture(params=["sqlite-held", "sqlite-engine", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> EventStore:
    if request.param == "postgresql":
        url = request.getfixturevalue("pg_url")
        made = EventStore(url)
        assert made.held is None
    else:
        made = EventStore(
            f"sqlite:///{tmp_path / 'm.db'}", raw_sqlite=request.param == "sqlite-held"
        )
        assert (made.held is not None) == (request.param == "sqlite-held")
    yield made
    made.close()


def new(s: Recorder, run_id: str, **kw: object) -> str:
    values: dict[str, object] = dict(
        workflow_name="wf",
        workflow_path="/w/wf.yaml",
        workflow_text="name: wf",
        params={"target": "x", "n": [1, 2]},
        workspace=f"/w/{run_id}",
        owner=None,
        run_id=run_id,
    )
    values.update(kw)
    return s.create_run(**values)


def test_each_method_on_each_path(store: EventStore, tmp_path: Path) -> None:
    s = Recorder(store)
    launch = LaunchFacts(
        started_at="2026-12-06T10:00:00+00:00",
        base_dir="/w",
        endpoints=("http://127.0.0.1:9/v1",),
        dry_run=True,
        durability="full",
    )
    # runs
    first = new(s, "aa000001", owner="me:1:x", launch=launch)
    second = new(s, "aa000002")
    drawn = s.create_run(
        workflow_name="wf", workflow_path="p", workflow_text="t", params={},
        workspace="", owner=None,
    )  # fmt: skip
    assert len(drawn) == 8 and drawn not in (first, second)
    record = s.get_run(first)
    assert record.params == {"target": "x", "n": [1, 2]} and record.launch == launch
    assert record.lease_owner == "me:1:x" and record.lease_expires_at is not None
    assert record.created_at.tzinfo is not None and record.last_seq == 0
    assert s.get_run(second).launch == LaunchFacts(durability=store.durability)
    with pytest.raises(RunNotFound):
        s.get_run("nope")
    assert s.find_run("aa000001") == record and s.find_run(drawn[:6]).id == drawn
    with pytest.raises(AmbiguousRunId):
        s.find_run("aa0000")
    with pytest.raises(RunNotFound):
        s.find_run("zz")
    assert [r.id for r in s.list_runs(limit=2)] == [drawn, second]
    assert {r.id for r in s.list_runs(since=utcnow() - timedelta(minutes=1))} == {
        first,
        second,
        drawn,
    }
    s.set_status(second, "paused", "why")
    assert (s.get_run(second).status, s.get_run(second).status_reason) == ("paused", "why")
    s.set_workspace(second, "/w/other")
    s.set_launch(second, LaunchFacts(started_at="later", durability="full"))
    again = s.get_run(second)
    assert (again.workspace, again.params) == ("/w/other", {"target": "x", "n": [1, 2]})
    assert again.launch == LaunchFacts(started_at="later", durability="full")
    s.check_workspace_free(second, str(tmp_path / "ws"))
    assert s.get_run(second).workspace == str((tmp_path / "ws").resolve())
    with pytest.raises(ConfigurationError, match="two runs never share"):
        s.check_workspace_free(first, str(tmp_path / "ws"), claim=False)
    # events
    s.append(first, 1, ev.PhaseStarted(index=0, name="p", prompt="go"), totals={"phase": "p"})
    s.append_many(
        first,
        [(2, ev.ModelRequest(step=1, messages=2), None),
         (3, ev.RunFinished(status="succeeded", reason="done"), None)],
        totals={"steps": 1},
    )  # fmt: skip
    with pytest.raises(IntegrityError):
        s.append(first, 3, ev.RunPaused(reason="a fork"), totals={})
    done = s.get_run(first)
    assert (done.status, done.status_reason, done.steps, done.phase, done.last_seq) == (
        "succeeded", "done", 1, "p", 3
    )  # fmt: skip
    assert [type(e).__name__ for e in s.load_events(first)] == [
        "PhaseStarted", "ModelRequest", "RunFinished"
    ]  # fmt: skip
    assert [seq for seq, _ in s.iter_events(first, after_seq=1)] == [2, 3]
    assert [seq for seq, _ in s.iter_event_payloads(first, after_seq=2)] == [3]
    # leases
    with pytest.raises(LeaseHeld):
        s.acquire_lease(first, "other:1:y")
    assert s.acquire_lease(second, "me:1:x") == ""
    assert s.renew_lease(second, "me:1:x", seconds=5) is True
    assert s.renew_lease(second, "other:1:y") is False
    s.release_lease(second, "me:1:x")
    assert s.get_run(second).lease_owner is None
    # the queue
    queued_id = new(s, "aa000004", status="queued", origin="queue")
    assert [r.id for r in s.list_queue()] == [queued_id]
    claimed = s.claim_next("worker:1:z")
    assert claimed is not None and claimed.id == queued_id and claimed.status == "running"
    assert s.claim_next("worker:1:z") is None
    # the brain's records, removal, connections, durability, locks
    assert s.server_events() == []
    assert s.server_events(since=utcnow(), until=utcnow()) == []
    s.delete_runs([drawn])
    with pytest.raises(RunNotFound):
        s.get_run(drawn)
    assert s.wait_out_locks(lambda: 7) == 7
    s.use_durability("full")
    assert s.durability == "full"
    new(s, "aa000005")
    assert s.get_run("aa000005").launch.durability == "full"
    s.use_durability("normal")
    assert s.engine is not None
    s.close()
    assert s.get_run(first).id == first  # reopened on demand
    s.interrupt.set()
    assert s.wait_out_locks(lambda: 8) == 8  # a stop ends a wait, not a first try


def test_a_stop_ends_a_wait_for_a_lock_at_once(tmp_path: Path) -> None:
    """A write that meets a lock another connection holds raises ``StoreBusy`` as soon as
    ``interrupt`` is set (here after 0.3 s), not after ``lock_wait``."""
    import sqlite3
    import time

    store = EventStore(f"sqlite:///{tmp_path / 'm.db'}")
    new(Recorder(store), "bb000001")
    blocker = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    threading.Timer(0.3, store.interrupt.set).start()
    began = time.monotonic()
    with pytest.raises(StoreBusy, match="stopped while the database was locked"):
        store.set_status("bb000001", "paused")
    assert time.monotonic() - began < 30
    blocker.execute("ROLLBACK")
    store.interrupt.clear()
    store.set_status("bb000001", "paused")
    assert store.get_run("bb000001").status == "paused"


def test_every_method_is_run() -> None:
    """The list of public methods is the store's own: a new one must be called above."""
    public = {
        name
        for name, _ in inspect.getmembers(EventStore)
        if not name.startswith("_") and name not in ("durability", "engine")
    } | {"durability", "engine", "interrupt"}
    if not CALLED:
        pytest.skip("run with the tests above")
    assert public <= CALLED, f"never called: {sorted(public - CALLED)}"


def test_tenacity_is_imported_only_by_a_write_that_met_a_lock(tmp_path: Path) -> None:
    """The first try of every write is a plain call: a process that meets no lock never
    imports tenacity (10 to 26 ms, bench/README.md); one that does, does."""
    import subprocess
    import sys

    db = tmp_path / "m.db"
    program = f"""
import sqlite3, sys, threading
from pilot import events as ev
from pilot.store import EventStore
store = EventStore("sqlite:///{db}")
run = store.create_run(workflow_name="w", workflow_path="p", workflow_text="t", params={{}},
                       workspace="", owner=None)
store.append(run, 1, ev.RunPaused(reason="r"), totals={{}})
store.get_run(run)
print("tenacity" in sys.modules)
blocker = sqlite3.connect("{db}", isolation_level=None, check_same_thread=False)
blocker.execute("BEGIN EXCLUSIVE")
threading.Timer(0.5, lambda: blocker.execute("ROLLBACK")).start()
store.set_status(run, "paused")
print("tenacity" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MARATHON_DB_LOCK_WAIT": "60"},
    )
    assert done.stdout.split() == ["False", "True"], done.stdout + done.stderr
