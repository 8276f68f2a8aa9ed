"""The event store: runs and their append-only events, in SQLite (default) or any SQLAlchemy URL.

Invariants:
- an event, once appended, is never changed; ``(run_id, seq)`` is its identity;
- each append is one short transaction that also updates the run's running totals, so listing
  runs never needs to read events;
- only the lease holder appends to a run (enforced by the lease, checked by the primary key).

``EventStore`` is the facade the rest of the pilot holds; each job is a module of its own:
``schema`` (tables, version, migrations), ``connections`` (the engine, the held SQLite
connection, the check that a file is ours), ``runs`` (the run rows), ``lease`` (who drives a
run), ``sqlite_read`` and ``sqlite_append`` (a resume's and a step's statements on the held
connection) and ``lock_wait`` (another process's lock waited out, a lost database named).
Every public method that touches the database goes through ``lock_wait`` (a lock or a
stopped server ends in ``StoreBusy`` / ``StoreGone``, never in a traceback), except the
event streams (``iter_event_payloads`` and what reads through it), which are streamed from
one connection and cannot be tried again half read.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.engine import Engine

from brain.dbrace import retry_schema_race
from brain.events import server_events as server_events_table
from pilot.environ import default_db_url
from pilot.errors import LeaseHeld, RunNotFound
from pilot.events import Event, RunFinished, event_from_json, event_to_json
from pilot.private_files import private_file
from pilot.store import lease, runs, schema, sqlite_read
from pilot.store.connections import Connections, sqlite_url
from pilot.store.lock_wait import (
    StoreBusy,
    StoreGone,
    is_locked,
    is_storage_full,
    lock_wait_from_env,
    wait_out_locks,
    waits_out_locks,
)
from pilot.store.records import (
    ACTIVE_STATUSES,
    DURABILITIES,
    LaunchFacts,
    RunRecord,
    aware,
    new_run_id,
    utcnow,
)
from pilot.store.sqlite_append import SqliteAppender
from pilot.store.sqlite_held import HeldSqlite

lease_owner_id = lease.lease_owner_id
lease_holder_gone = lease.lease_holder_gone
shown_status = lease.shown_status
RE_EXPORTED = (ACTIVE_STATUSES, DURABILITIES, StoreBusy, StoreGone, is_locked, is_storage_full)
"""Named here for the modules that import them from the facade."""
RE_EXPORTED_TOO = (new_run_id, sqlite_url)
_T = TypeVar("_T")


class EventStore:
    """Runs and events behind one SQLAlchemy engine (on SQLite, what a step and a resume do
    goes through the store's held connection instead). Thread-safe; one transaction per
    call."""

    def __init__(
        self, url: str | None = None, *, durability: str = "normal", raw_sqlite: bool = True
    ) -> None:
        """``raw_sqlite=False``: every statement through the engine, even on SQLite (the
        tests hold the two paths to the same results)."""
        self.url = url or default_db_url()
        self.shown_url = _shown(self.url)
        if self.url.startswith("sqlite:///") and not self.url.startswith("sqlite:///:memory:"):
            private_file(Path(self.url.removeprefix("sqlite:///")).expanduser())
        self.lock_wait = lock_wait_from_env()
        """Seconds a write waits out a lock held by another process (then ``StoreBusy``)."""
        self.interrupt = threading.Event()
        """Set (from a signal handler) to stop waiting for a lock at once."""
        self._connections = Connections(self.url, durability)
        self.is_sqlite = self._connections.is_sqlite
        self.held: HeldSqlite | None = self._connections.held if raw_sqlite else None
        """On SQLite, the store's own connection (``pilot.store.sqlite_held``): the appends,
        a run's row, its lease and its events; everything else goes through ``engine``."""
        retry_schema_race(self._migrate_once)
        self._sqlite_appender = (
            SqliteAppender(self.held, runs.INSERT_EVENT, runs.UPDATE_RUN, "run_id_")
            if self.held is not None
            else None
        )

    @property
    def engine(self) -> Engine:
        """SQLAlchemy's engine, made on first use (a SQLite resume's path never needs it)."""
        return self._connections.engine

    @property
    def durability(self) -> str:
        """What each commit survives now: ``normal`` (any process death) or ``full`` (also a
        power cut: SQLite fsyncs each commit)."""
        return self._connections.durability

    def use_durability(self, durability: str) -> None:
        """Commit with ``durability`` from now on (a resumed run's own, or the user's)."""
        self._connections.use_durability(durability)

    def wait_out_locks(self, write: Callable[[], _T]) -> _T:
        """``write()``, its locks waited out (``pilot.store.lock_wait``)."""
        return wait_out_locks(self, write)

    def _migrate_once(self) -> None:
        """Create the schema or migrate it forward (``pilot.store.schema``). Two processes
        opening a new database together race; the loser's try is retried by the caller."""
        if not self._schema_is_current():
            schema.migrate(self.engine, self.shown_url)

    def _schema_is_current(self) -> bool:
        """True when a SQLite file already holds this version's schema: every table and index
        is in ``sqlite_master`` and the version row says ``SCHEMA_VERSION``. Two plain reads,
        so opening an existing store skips ``create_all``'s check of each table; a new,
        older or partly made file (and any other database) takes the full path."""
        if self.held is None:
            return False
        found = self.held.rows("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")
        if not schema.schema_names() <= {name for (name,) in found}:
            return False
        version = self.held.rows(f"SELECT version FROM {schema.schema_meta.name} WHERE id = 1")
        return bool(version) and version[0][0] == schema.SCHEMA_VERSION

    def close(self) -> None:
        """Release every connection (the store stays usable: they are reopened on demand)."""
        self._connections.close()

    # -- runs ---------------------------------------------------------------------------------

    @waits_out_locks
    def create_run(
        self,
        *,
        workflow_name: str,
        workflow_path: str,
        workflow_text: str,
        params: dict[str, Any],
        workspace: str,
        owner: str | None,
        lease_seconds: float = 60.0,
        status: str = "running",
        run_id: str | None = None,
        origin: str = "cli",
        launch: LaunchFacts | None = None,
    ) -> str:
        """A new run's row; its id (``run_id``, or a fresh one). ``launch``'s durability
        defaults to the store's."""
        facts = launch or LaunchFacts(durability=self.durability)
        values = dict(
            workflow_name=workflow_name,
            workflow_path=workflow_path,
            workflow_text=workflow_text,
            params=params,
            workspace=workspace,
            status=status,
            origin=origin,
            **facts.columns(),
        )
        return runs.create_run(self.engine, run_id, values, owner, lease_seconds)

    def _run_by_id(self, run_id: str) -> list[RunRecord]:
        if self.held is not None:
            return sqlite_read.run_by_id(self.held, run_id)
        with self.engine.connect() as conn:
            return runs.records(conn, runs.RUN_BY_ID, run_id_=run_id)

    @waits_out_locks
    def get_run(self, run_id: str) -> RunRecord:
        records = self._run_by_id(run_id)
        if not records:
            raise RunNotFound(run_id)
        return records[0]

    @waits_out_locks
    def find_run(self, prefix: str) -> RunRecord:
        """Any unambiguous prefix of a run id names the run."""
        exact = self._run_by_id(prefix)
        return exact[0] if exact else runs.find_by_prefix(self.engine, prefix)

    @waits_out_locks
    def list_runs(self, *, limit: int = 50, since: datetime | None = None) -> list[RunRecord]:
        return runs.list_runs(self.engine, limit, since)

    @waits_out_locks
    def set_status(self, run_id: str, status: str, reason: str = "") -> None:
        runs.update_run(
            self.engine, run_id, status=status, status_reason=reason, updated_at=utcnow()
        )

    @waits_out_locks
    def set_workspace(self, run_id: str, workspace: str) -> None:
        runs.update_run(self.engine, run_id, workspace=workspace)

    @waits_out_locks
    def set_launch(self, run_id: str, launch: LaunchFacts) -> None:
        """Record what the run is (re)started with: a queued run's start time, a resume's
        ``--durability``."""
        runs.update_run(self.engine, run_id, **launch.columns())

    @waits_out_locks
    def check_workspace_free(self, run_id: str, workspace: str, *, claim: bool = True) -> None:
        """Two live runs never share a workspace: claim it for ``run_id`` or refuse
        (``claim=False``: only look, writing nothing)."""
        runs.check_workspace_free(self.engine, run_id, workspace, claim)

    # -- the queue ----------------------------------------------------------------------------

    @waits_out_locks
    def claim_next(self, owner: str, *, lease_seconds: float = 60.0) -> RunRecord | None:
        """Take the oldest run a worker may drive: queued, or a queue run left paused or
        orphaned (its lease expired, or its holder a dead process of this host)."""
        now = utcnow()
        values = {
            "status": "running",
            "lease_owner": owner,
            "lease_expires_at": now + timedelta(seconds=lease_seconds),
            "updated_at": now,
        }
        claimed = runs.claim_next(self.engine, self.is_sqlite, values)
        if claimed is None:
            for run_id, holder in lease.dead_local_holders(self.engine, owner):
                if lease.take_from(self.engine, run_id, holder, values):
                    claimed = run_id
                    break
        return None if claimed is None else self.get_run(claimed)

    @waits_out_locks
    def list_queue(self) -> list[RunRecord]:
        return runs.list_queue(self.engine)

    # -- events -------------------------------------------------------------------------------

    def append(self, run_id: str, seq: int, ev: Event, *, totals: dict[str, Any]) -> None:
        """Append one event and update the run's totals, in one transaction.

        ``seq`` is chosen by the lease holder (last seq + 1); a duplicate means someone else
        wrote to this run, which the primary key turns into an error instead of a fork.
        """
        self.append_many(run_id, [(seq, ev, None)], totals=totals)

    @waits_out_locks
    def append_many(
        self,
        run_id: str,
        events: Sequence[tuple[int, Event, str | None]],
        *,
        totals: dict[str, Any],
    ) -> None:
        """Append consecutive events (``(seq, event, its JSON or None)``) and update the run's
        totals (``totals``: the columns they change, as after the last one), all in one
        transaction. The ``runs`` row is written only when they change something."""
        rows = [
            {
                "run_id": run_id,
                "seq": seq,
                "type": ev.type,
                "at": ev.at,
                "payload": event_to_json(ev) if payload is None else payload,
            }
            for seq, ev, payload in events
        ]
        values: dict[str, Any] = dict(totals)
        for _seq, ev, _payload in events:
            if isinstance(ev, RunFinished):
                values.update(status=ev.status, status_reason=ev.reason)
        if values:
            values["updated_at"] = events[-1][1].at
        if self._sqlite_appender is not None:
            self._sqlite_appender.append(rows, run_id, values)
            return
        # Fixed statements with bound parameters (the UPDATE's SET clause comes from the
        # parameter names): SQLAlchemy only looks up their compiled form.
        with self.engine.begin() as conn:
            conn.execute(runs.INSERT_EVENT, rows)
            if values:
                conn.execute(runs.UPDATE_RUN, {"run_id_": run_id, **values})

    def load_events(self, run_id: str, *, after_seq: int = 0) -> list[Event]:
        return [ev for _seq, ev in self.iter_events(run_id, after_seq=after_seq)]

    def iter_events(self, run_id: str, *, after_seq: int = 0) -> Iterator[tuple[int, Event]]:
        for seq, payload in self.iter_event_payloads(run_id, after_seq=after_seq):
            yield seq, event_from_json(payload)

    def iter_event_payloads(self, run_id: str, *, after_seq: int = 0) -> Iterator[tuple[int, str]]:
        """The run's events after ``after_seq`` as stored: ``(seq, JSON)``, in order."""
        table = schema.events
        with self.engine.connect() as conn:  # streamed: a long run's events never all in memory
            rows = conn.execute(
                select(table.c.seq, table.c.payload)
                .where(table.c.run_id == run_id, table.c.seq > after_seq)
                .order_by(table.c.seq)
            )
            yield from ((seq, payload) for seq, payload in rows)

    # -- leases -------------------------------------------------------------------------------

    @waits_out_locks
    def acquire_lease(self, run_id: str, owner: str, *, seconds: float = 60.0) -> str:
        """Take the run's lease, or raise LeaseHeld (``pilot.store.lease``). Returns a note
        when a stale lease was taken."""
        values, note = lease.lease_values(self.get_run(run_id), owner, seconds)
        if self.held is not None:
            taken = self.held.transaction(lambda conn: sqlite_read.take_lease(conn, values))
        else:
            with self.engine.begin() as conn:
                taken = conn.execute(lease.TAKE_LEASE, values).rowcount
        if taken != 1:
            fresh = self.get_run(run_id)
            raise LeaseHeld(run_id, fresh.lease_owner or "?", fresh.lease_expires_at)
        return note

    @waits_out_locks
    def renew_lease(self, run_id: str, owner: str, *, seconds: float = 60.0) -> bool:
        return lease.renew(self.engine, run_id, owner, seconds)

    @waits_out_locks
    def release_lease(self, run_id: str, owner: str) -> None:
        lease.release(self.engine, run_id, owner)

    # -- server events ------------------------------------------------------------------------

    @waits_out_locks
    def server_events(
        self, *, since: datetime | None = None, until: datetime | None = None
    ) -> list[tuple[datetime, str, str, dict[str, Any]]]:
        """The brain's records (``brain.events``) in time order: ``(at, server, type, payload)``."""
        table = server_events_table.c
        with self.engine.connect() as conn:
            query = select(table.at, table.server, table.type, table.payload).order_by(table.at)
            if since is not None:
                query = query.where(table.at >= since)
            if until is not None:
                query = query.where(table.at <= until)
            return [(aware(a), s, t, json.loads(p)) for a, s, t, p in conn.execute(query)]  # type: ignore[misc]

    @waits_out_locks
    def delete_runs(self, run_ids: Sequence[str]) -> None:
        runs.delete_runs(self.engine, run_ids)


def _shown(url: str) -> str:
    """The URL without its password (messages are pasted into issues)."""
    if "@" not in url:
        return url
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ValueError:
        return "<the database URL>"
