"""The event store on real SQLite files: append, load, totals, leases, prefixes, migration."""

from __future__ import annotations

import multiprocessing
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from pilot_harness import queued
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import IntegrityError

from pilot import events as ev
from pilot.errors import AmbiguousRunId, LeaseHeld, RunNotFound
from pilot.store.event_store import EventStore, sqlite_url, utcnow


def make_store(tmp_path: Path) -> EventStore:
    return EventStore(f"sqlite:///{tmp_path / 'm.db'}")


def new_run(store: EventStore, owner: str | None = "me:1:a", run_id: str | None = None) -> str:
    return store.create_run(
        workflow_name="wf",
        workflow_path="wf.yaml",
        workflow_text="name: wf",
        params={"a": 1},
        workspace="/tmp/x",
        owner=owner,
        run_id=run_id,
    )


def test_events_round_trip_in_order_with_totals(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    run_id = new_run(store)
    store.append(run_id, 1, ev.PhaseStarted(index=0, name="p", prompt="go"), totals={"phase": "p"})
    message = ev.AssistantMessage(
        step=1,
        content="hi",
        tool_calls=[ev.ToolCall(id="c1", name="read_file", arguments='{"path": "a"}')],
        usage=ev.Usage(prompt_tokens=10, completion_tokens=3),
    )
    store.append(run_id, 2, message, totals={"steps": 1, "prompt_tokens": 10})
    loaded = store.load_events(run_id)
    assert loaded[0] == ev.PhaseStarted(index=0, name="p", prompt="go", at=loaded[0].at)
    assert loaded[1].tool_calls[0].arguments == '{"path": "a"}'
    record = store.get_run(run_id)
    assert (record.last_seq, record.steps, record.prompt_tokens, record.phase) == (2, 1, 10, "p")


def test_an_event_that_changes_no_total_leaves_the_run_row_alone(tmp_path: Path) -> None:
    """Most appends (a tool result, a model request) change none of the run's totals: they
    write the event only, and the run's last seq and last activity come from its events."""
    store = make_store(tmp_path)
    run_id = new_run(store)
    created = store.get_run(run_id)
    assert (created.last_seq, created.updated_at) == (0, created.created_at)
    store.append(run_id, 1, ev.PhaseStarted(index=0, name="p", prompt="go"), totals={"phase": "p"})
    row = sqlite3.connect(tmp_path / "m.db").execute("SELECT updated_at FROM runs").fetchone()
    later = ev.ToolFinished(call_id="c1", name="read_file", output="x", at=utcnow())
    later = later.model_copy(update={"at": later.at + timedelta(seconds=30)})
    store.append(run_id, 2, later, totals={})
    assert (
        sqlite3.connect(tmp_path / "m.db").execute("SELECT updated_at FROM runs").fetchone() == row
    )
    for record in (store.get_run(run_id), store.find_run(run_id[:3]), *store.list_runs()):
        assert (record.last_seq, record.updated_at, record.phase) == (2, later.at, "p")
    assert [r.id for r in store.list_runs(since=later.at)] == [run_id]
    assert store.list_runs(since=later.at + timedelta(seconds=1)) == []


def test_duplicate_seq_is_refused_not_forked(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    run_id = new_run(store)
    store.append(run_id, 1, ev.RunPaused(reason="x"), totals={})
    # SQLAlchemy's exception on both backends (SQLite's append bypasses the engine, not its
    # exceptions), so callers handle one type.
    with pytest.raises(IntegrityError, match=r"UNIQUE|duplicate key"):
        store.append(run_id, 1, ev.RunPaused(reason="y"), totals={})
    # A failed batch commits nothing, and the run's totals stay as they were.
    with pytest.raises(IntegrityError):
        store.append_many(
            run_id,
            [(2, ev.RunPaused(reason="z"), None), (1, ev.RunPaused(reason="y"), None)],
            totals={"steps": 9},
        )
    assert [e.reason for e in store.load_events(run_id)] == ["x"]
    assert store.get_run(run_id).steps == 0 and store.get_run(run_id).last_seq == 1


def test_run_finished_sets_status(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    run_id = new_run(store)
    store.append(run_id, 1, ev.RunFinished(status="limit", reason="steps"), totals={})
    record = store.get_run(run_id)
    assert (record.status, record.status_reason) == ("limit", "steps")


def test_prefix_lookup(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    new_run(store, run_id="abc123")
    new_run(store, run_id="abd456")
    assert store.find_run("abc").id == "abc123"
    with pytest.raises(AmbiguousRunId, match="2 runs"):
        store.find_run("ab")
    with pytest.raises(RunNotFound):
        store.find_run("zz")


def test_a_run_read_straight_from_sqlite_is_the_record_the_statement_gives(
    tmp_path: Path,
) -> None:
    """``get_run`` and ``find_run`` read a run on SQLite without SQLAlchemy's compiler: the
    same record, dates (aware), JSON params and lease included, as the Core statement's."""
    from pilot.store import runs, sqlite_read

    store = make_store(tmp_path)
    bare = new_run(store, owner=None, run_id="bare0001")
    busy = new_run(store, run_id="busy0002")
    store.append(busy, 1, ev.PhaseStarted(index=0, name="p", prompt="go"), totals={"phase": "p"})
    store.append(busy, 2, ev.ModelRequest(step=1, messages=2), totals={"steps": 1})
    assert store.held is not None
    with store.engine.connect() as conn:
        for run_id in (bare, busy):
            core = runs.records(conn, runs.RUN_BY_ID, run_id_=run_id)
            assert sqlite_read.run_by_id(store.held, run_id) == core and len(core) == 1
    assert sqlite_read.run_by_id(store.held, "nope") == []
    record = store.get_run(busy)
    assert (record.params, record.last_seq, record.phase) == ({"a": 1}, 2, "p")
    assert record.created_at.tzinfo is not None and record.lease_expires_at is not None
    assert store.get_run(bare).lease_owner is None and store.find_run("bus") == record


def test_runs_listed_straight_from_sqlite_are_the_records_the_store_lists(
    tmp_path: Path,
) -> None:
    """``pilot runs`` reads a SQLite store through sqlite3 alone (``sqlite_list``): the same
    records, in the same order and limit, as ``EventStore.list_runs``: dates aware, JSON
    params and endpoints, the launch facts, the lease and the last event's seq and time."""
    from pilot.store import sqlite_list
    from pilot.store.event_store import LaunchFacts

    store = make_store(tmp_path)
    bare = new_run(store, owner=None, run_id="bare0001")
    busy = new_run(store, run_id="busy0002")
    store.append(busy, 1, ev.PhaseStarted(index=0, name="p", prompt="go"), totals={"phase": "p"})
    store.append(busy, 2, ev.ModelRequest(step=1, messages=2), totals={"steps": 1})
    facts = LaunchFacts("2026-12-06T10:00:00+00:00", "/w", ("http://127.0.0.1:9/v1",), True)
    store.create_run(
        workflow_name="wf",
        workflow_path="wf.yaml",
        workflow_text="name: wf",
        params={"n": [1, "x"]},
        workspace="/tmp/y",
        owner=None,
        status="queued",
        run_id="queu0003",
        origin="queue",
        launch=facts,
    )
    path = tmp_path / "m.db"
    listed = sqlite_list.list_runs(path, 10)
    assert listed == store.list_runs(limit=10) and len(listed) == 3
    assert sqlite_list.list_runs(path, 2) == store.list_runs(limit=2)
    by_id = {r.id: r for r in listed}
    assert by_id[busy].last_seq == 2 and by_id[busy].updated_at > by_id[busy].created_at
    assert by_id[bare].lease_owner is None and by_id["queu0003"].launch == facts
    assert by_id[busy].lease_expires_at is not None and by_id[busy].created_at.tzinfo


@pytest.mark.parametrize("version", [1, 2])
def test_an_old_store_is_not_listed_straight_from_sqlite(tmp_path: Path, version: int) -> None:
    """A file to migrate answers None (``pilot runs`` then opens the store, which migrates
    it), and is left as it was."""
    from pilot.store import sqlite_list

    old_store(tmp_path, version=version)
    assert sqlite_list.list_runs(tmp_path / "m.db", 10) is None
    with sqlite3.connect(tmp_path / "m.db") as conn:
        assert conn.execute("SELECT version FROM marathon_schema").fetchall() == [(version,)]
    conn.close()
    assert [r.id for r in make_store(tmp_path).list_runs(limit=10)][-1] == "old00001"


def test_the_lease_taken_straight_from_sqlite_writes_what_the_statement_writes(
    tmp_path: Path,
) -> None:
    """``acquire_lease`` runs its UPDATE on SQLite without SQLAlchemy's compiler: the same
    stored text for owner and dates as the Core statement, and the same refusal of a lease
    held by someone else."""
    from pilot.store import lease, sqlite_read

    store = make_store(tmp_path)
    now = utcnow()
    values = {"previous_": None, "owner_": "me:1:b", "lease_owner": "me:1:b",
              "lease_expires_at": now + timedelta(seconds=60), "updated_at": now}  # fmt: skip
    for run_id in ("core0001", "wire0002"):
        new_run(store, owner=None, run_id=run_id)
    with store.engine.begin() as conn:
        assert conn.execute(lease.TAKE_LEASE, {**values, "run_id_": "core0001"}).rowcount == 1
    assert store.held is not None
    take = sqlite_read.take_lease
    assert store.held.transaction(lambda c: take(c, {**values, "run_id_": "wire0002"})) == 1
    held = {**values, "run_id_": "wire0002", "owner_": "other:2:c", "lease_owner": "x"}
    assert store.held.transaction(lambda c: take(c, held)) == 0
    with sqlite3.connect(tmp_path / "m.db") as raw:
        rows = raw.execute(
            "SELECT lease_owner, lease_expires_at, updated_at FROM runs ORDER BY id"
        ).fetchall()
    assert rows[0] == rows[1] and rows[0][0] == "me:1:b"
    assert store.get_run("wire0002").lease_expires_at == values["lease_expires_at"]


def test_sqlite_is_wal_with_foreign_keys(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    new_run(store)
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_the_wal_is_checkpointed_at_4_mib_whatever_the_page_size(tmp_path: Path) -> None:
    # 12 MB of results through one store: its WAL is reused from 4 MiB on, not grown to 16
    # (1,000 of its 16 KiB pages), which the first open after a kill would read back whole.
    store = make_store(tmp_path)
    run_id = new_run(store)
    for seq in range(1, 1201):
        output = f"{seq} " + "x" * 10_000
        store.append(run_id, seq, ev.ToolFinished(call_id=f"c{seq}", name="run", output=output),
                     totals={})  # fmt: skip
    wal = tmp_path / "m.db-wal"
    assert 0 < wal.stat().st_size < 5 * 1024 * 1024
    old = tmp_path / "old.db"  # a file made with SQLite's default 4 KiB pages
    sqlite3.connect(old).execute("PRAGMA journal_mode=WAL").close()
    with EventStore(f"sqlite:///{old}").engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA page_size").scalar() == 4096
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 1024


def test_a_plain_sqlite_url_is_made_not_parsed_and_names_the_same_file() -> None:
    for url in ("sqlite:////tmp/a b/x.db", "sqlite:///rel/x.db", "sqlite:///x.db?mode=ro",
                "sqlite:///:memory:", "sqlite:////tmp/%41.db", "postgresql://u@h/db"):  # fmt: skip
        made = make_url(sqlite_url(url))
        assert (made.drivername, made.database) == (
            make_url(url).drivername,
            make_url(url).database,
        )
    assert isinstance(sqlite_url("sqlite:////tmp/a b/x.db"), URL)
    assert sqlite_url("sqlite:////tmp/%41.db") == "sqlite:////tmp/%41.db"  # decoded by the parser


def test_live_lease_is_refused_and_expired_one_taken_over(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    run_id = new_run(store, owner="otherhost:1:x")
    with pytest.raises(LeaseHeld, match="otherhost"):
        store.acquire_lease(run_id, "me:2:y")
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE runs SET lease_expires_at = ? WHERE id = ?",
            ((utcnow() - timedelta(seconds=5)).isoformat(sep=" "), run_id),
        )
    note = store.acquire_lease(run_id, "me:2:y")
    assert "expired lease of otherhost:1:x" in note
    assert store.get_run(run_id).lease_owner == "me:2:y"
    store.release_lease(run_id, "me:2:y")
    assert store.get_run(run_id).lease_owner is None


def _exit_now() -> None:
    pass


def test_lease_of_dead_local_process_is_taken_over_at_once(tmp_path: Path) -> None:
    import socket

    proc = multiprocessing.get_context("spawn").Process(target=_exit_now)
    proc.start()
    proc.join()
    store = make_store(tmp_path)
    run_id = new_run(store, owner=f"{socket.gethostname()}:{proc.pid}:zz")
    note = store.acquire_lease(run_id, "me:3:q")
    assert "no longer exists" in note


OLD_STORE = Path(__file__).parent / "fixtures" / "store_v2.sql"
"""A store file as version 2 wrote it (dumped from that code): three runs whose launch
facts ride in their params as ``__`` keys, one event."""


def old_store(tmp_path: Path, *, version: int = 2) -> Path:
    path = tmp_path / "m.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(OLD_STORE.read_text())
        if version == 1:  # what version 1 wrote: no origin column
            conn.execute("ALTER TABLE runs DROP COLUMN origin")
            conn.execute("UPDATE marathon_schema SET version = 1")
    return path


@pytest.mark.parametrize("version", [1, 2])
def test_an_old_store_is_migrated_forward_and_its_runs_kept(tmp_path: Path, version: int) -> None:
    """Versions 1 and 2 open as version 4: the columns added, each run's ``__`` params moved
    to its launch columns (and out of its params), the control events' index made, its events
    kept."""
    from pilot.store.schema import SCHEMA_VERSION

    old_store(tmp_path, version=version)
    reopened = make_store(tmp_path)
    with reopened.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version FROM marathon_schema").scalar() == 4
        names = set(conn.exec_driver_sql("SELECT name FROM sqlite_master").scalars())
    assert SCHEMA_VERSION == 4 and "events_control" in names
    first = reopened.get_run("old00001")
    assert first.origin == "cli" and first.params == {"target": "x"}
    assert first.launch.started_at == "2026-12-01T10:00:00+00:00"
    assert first.launch.base_dir == "/w" and not first.launch.dry_run
    assert first.launch.endpoints == ("http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1")
    assert first.launch.durability == "normal"
    dry = reopened.get_run("old00002")
    assert dry.params == {} and dry.launch.dry_run and dry.launch.endpoints == ()
    waiting = reopened.get_run("old00003")
    assert waiting.params == {"n": 3} and waiting.launch.started_at == ""
    assert waiting.origin == ("queue" if version == 2 else "cli")
    assert reopened.load_events("old00001")[0].reason == "paused under v2"
    reopened.close()
    again = make_store(tmp_path)  # opened a second time: nothing left to migrate
    assert again.get_run("old00001") == first


def test_a_current_file_missing_part_of_its_schema_gets_it_back_on_open(tmp_path: Path) -> None:
    """Opening a file whose version row is current reads the schema instead of creating it;
    a table gone from such a file (dropped by hand) is made again, with its indexes, and the
    runs it holds are kept."""
    store = make_store(tmp_path)
    run_id = new_run(store)
    store.close()
    with sqlite3.connect(tmp_path / "m.db") as conn:
        conn.execute("DROP TABLE server_events")
    reopened = make_store(tmp_path)
    with reopened.engine.connect() as conn:
        names = set(conn.exec_driver_sql("SELECT name FROM sqlite_master").scalars())
    assert {"server_events", "ix_server_events_at", "ix_server_events_server"} <= names
    assert reopened.get_run(run_id).workflow_name == "wf"
    assert reopened.server_events() == []


def test_queue_claims_are_exclusive_and_take_orphans(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    waiting = queued(store, 3)
    claims = [store.claim_next(f"w{i}:1:x") for i in range(4)]
    assert sorted(c.id for c in claims if c) == sorted(waiting)
    assert claims[3] is None
    orphan = claims[0].id
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE runs SET status='running', lease_expires_at = ? WHERE id = ?",
            ((utcnow() - timedelta(seconds=1)).isoformat(sep=" "), orphan),
        )
    again = store.claim_next("w9:1:y")
    assert again is not None and again.id == orphan and again.lease_owner == "w9:1:y"


def test_a_workspace_is_never_shared_by_two_live_runs(tmp_path: Path) -> None:
    from pilot.errors import ConfigurationError

    store = make_store(tmp_path)
    first, second = new_run(store), new_run(store)
    store.check_workspace_free(first, str(tmp_path / "ws"))
    with pytest.raises(ConfigurationError, match=f"used by run {first}"):
        store.check_workspace_free(second, str(tmp_path / "ws" / "."))
    store.append(first, 1, ev.RunFinished(status="succeeded"), totals={})
    store.check_workspace_free(second, str(tmp_path / "ws"))


@pytest.mark.parametrize(
    "opener",
    [
        "from pilot.store.event_store import EventStore as Open",
        "from brain.events import ServerEventWriter as Open",  # a fleet's supervisors
    ],
)
def test_processes_opening_one_new_database_together_all_get_the_schema(
    tmp_path: Path, opener: str
) -> None:
    """A test and the `pilot` it starts, two workers, or a fleet's supervisors may create the
    schema at once: the loser of that race must retry, not fail with "already exists"."""
    import subprocess
    import sys

    for trial in range(3):
        db = tmp_path / f"race{trial}.db"
        code = f"{opener}; Open('sqlite:///{db}')"
        procs = [
            subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
            for _ in range(4)
        ]
        outputs = [p.communicate()[1] for p in procs]
        errors = [err for p, err in zip(procs, outputs, strict=True) if p.returncode != 0]
        assert errors == [], errors[0][-500:]


def test_stored_events_parse_by_their_type_as_the_union_would(tmp_path: Path) -> None:
    """``event_from_json`` reads the type from the text and lets that class validate; older
    rows (other key order, spaces, no ``at``) still parse, through the union."""
    events = [
        ev.ModelRequest(step=3, messages=7, max_tokens=100, prompt_tokens=5000),
        ev.AssistantMessage(
            step=3,
            content='says "type":"nudge" inside',
            tool_calls=[ev.ToolCall(id="c1", name="read_file", arguments='{"type":"x"}')],
        ),
        ev.ToolStarted(call_id="c1", name="read_file", mutates=False),
        ev.ToolFinished(call_id="c1", name="read_file", output='{"type":"run_finished"}'),
        ev.RunFinished(status="succeeded", reason="all phases done"),
    ]
    for event in events:
        text = ev.event_to_json(event)
        parsed = ev.event_from_json(text)
        assert parsed == event and type(parsed) is type(event)
        assert parsed == ev.event_adapter().validate_json(text)
    old = '{"type": "tool_started", "call_id": "c9", "name": "run", "mutates": true}'
    assert isinstance(ev.event_from_json(old), ev.ToolStarted)
    with pytest.raises(ValueError, match="nope"):
        ev.event_from_json('{"at":"2026-11-30T00:00:00Z","type":"nope"}')


def test_server_events_keeps_its_table_and_indexes_for_old_and_new_files(tmp_path: Path) -> None:
    """The brain declares ``server_events``; a file whose table an older pilot created (its
    own declaration, same DDL) opens, takes the brain's rows and shows them to the store."""
    from brain.events import ServerEventWriter

    fresh = make_store(tmp_path)
    with fresh.engine.connect() as conn:
        indexes = conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'server_events'"
        )
        assert set(indexes.scalars()) == {"ix_server_events_server", "ix_server_events_at"}
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as conn:  # what the pilot's own declaration created
        conn.executescript(
            "CREATE TABLE server_events (id INTEGER NOT NULL, server VARCHAR(200) NOT NULL, "
            "at DATETIME NOT NULL, type VARCHAR(40) NOT NULL, payload TEXT NOT NULL, "
            "PRIMARY KEY (id));"
            "CREATE INDEX ix_server_events_server ON server_events (server);"
            "CREATE INDEX ix_server_events_at ON server_events (at);"
            "INSERT INTO server_events (server, at, type, payload) "
            "VALUES ('gemma', '2025-06-01 22:00:00.000000', 'ready', '{}');"
        )
    store = EventStore(f"sqlite:///{old}")
    writer = ServerEventWriter(f"sqlite:///{old}")
    writer.record("gemma", "died", {"summary": "exit 137"})
    writer.close()
    assert [(s, t, p) for _at, s, t, p in store.server_events()] == [
        ("gemma", "ready", {}),
        ("gemma", "died", {"summary": "exit 137"}),
    ]


def test_a_sqlite_resume_path_needs_no_engine(tmp_path: Path) -> None:
    # Opening an existing file, reading a run, taking its lease, reading and appending its
    # events: all on the store's held connection; SQLAlchemy's engine is made only when
    # something else asks for it.
    from pilot.store import queries

    run_id = new_run(make_store(tmp_path), owner=None)
    store = make_store(tmp_path)
    record = store.find_run(run_id)  # the id `pilot run` prints (a prefix asks the engine)
    store.acquire_lease(record.id, "me:2:b")
    store.append(run_id, 1, ev.ModelRequest(step=1, messages=2), totals={"steps": 1})
    assert [seq for seq, _ in queries.events_from(store, run_id, 1)] == [1]
    assert store.get_run(run_id).steps == 1
    assert store._connections._engine is None
    assert [r.id for r in store.list_runs()] == [run_id]  # a Core query: the engine is made
    assert store._connections._engine is not None


def control_store(tmp_path: Path) -> tuple[EventStore, str]:
    """A run of two phases with checks between many steps' events."""
    store = make_store(tmp_path)
    run_id = new_run(store)
    seq = 0

    def add(event: ev.Event) -> None:
        nonlocal seq
        seq += 1
        store.append(run_id, seq, event, totals={})

    for index in range(2):
        add(ev.PhaseStarted(index=index, name=f"p{index}", prompt="go"))
        for step in range(30):
            add(ev.ModelRequest(step=step + 1, messages=2 * step + 1))
            add(ev.ToolFinished(call_id=f"c{step}", name="read_file", output="x" * 100))
        add(ev.CheckStarted(phase=index, attempt=1, command="true"))
        add(
            ev.CheckFinished(
                phase=index, attempt=1, command="true", passed=True, exit_code=0, output=""
            )
        )
        add(ev.PhaseFinished(index=index, name=f"p{index}", outcome="succeeded"))
    add(ev.RunFinished(status="succeeded"))
    return store, run_id


def test_control_events_are_read_through_their_partial_index(tmp_path: Path) -> None:
    """A resume's check of its checkpoint reads a run's phase, check and end events through
    ``events_control`` (SQLite's plan names it), and gets exactly the rows a scan of every
    event finds (issue 35: the scan read a 3,000-step run's every row at each resume)."""
    from pilot.store import queries
    from pilot.store.schema import CONTROL_EVENTS

    store, run_id = control_store(tmp_path)
    last = store.get_run(run_id).last_seq
    for kinds in (
        frozenset({"phase_started", "phase_finished", "run_finished"}),
        frozenset({"check_started", "check_finished"}),
        frozenset(CONTROL_EVENTS),
    ):
        for first in (1, 40, last):
            through_index = list(queries.control_rows(store, run_id, first, last, kinds))
            scanned = list(queries.message_rows(store, run_id, first, last, kinds))
            assert through_index == scanned
    assert len(list(queries.control_rows(store, run_id, 1, last, frozenset(CONTROL_EVENTS)))) == 9
    sql = queries._CONTROL_SQL.format("?, ?")
    with sqlite3.connect(tmp_path / "m.db") as conn:
        plan = conn.execute(
            f"EXPLAIN QUERY PLAN {sql}", (run_id, 1, last, "phase_finished", "phase_started")
        ).fetchall()
    conn.close()
    assert any("USING INDEX events_control" in row[-1] for row in plan), plan
    with pytest.raises(ValueError, match="not control events"):
        queries.control_rows(store, run_id, 1, last, frozenset({"tool_finished"}))


def test_a_version_3_file_gets_the_control_index_and_keeps_its_runs(tmp_path: Path) -> None:
    """A file as version 3 wrote it (no ``events_control``) opens as version 4 with the
    index made over the events it already holds."""
    from pilot.store import queries

    store, run_id = control_store(tmp_path)
    store.close()
    with sqlite3.connect(tmp_path / "m.db") as conn:
        conn.execute("DROP INDEX events_control")
        conn.execute("UPDATE marathon_schema SET version = 3")
    conn.close()
    reopened = make_store(tmp_path)
    with reopened.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version FROM marathon_schema").scalar() == 4
        names = set(conn.exec_driver_sql("SELECT name FROM sqlite_master").scalars())
    assert "events_control" in names
    last = reopened.get_run(run_id).last_seq
    ends = frozenset({"phase_finished", "run_finished"})
    assert [seq for seq, _ in queries.control_rows(reopened, run_id, 1, last, ends)] == [
        64,
        128,
        129,
    ]
