"""The event store: runs and their append-only events, in SQLite (default) or any SQLAlchemy URL.

Invariants:
- an event, once appended, is never changed; ``(run_id, seq)`` is its identity;
- each append is one short transaction that also updates the run's running totals, so listing
  runs never needs to read events;
- only the lease holder appends to a run (enforced by the lease, checked by the primary key).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast

from sqlalchemy import (
    JSON,
    DateTime,
    ForeignKey,
    Integer,
    Select,
    String,
    Table,
    Text,
    and_,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects import sqlite as _sqlite_dialect  # noqa: F401
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from brain.dbrace import retry_schema_race
from brain.events import create_server_events
from brain.events import server_events as server_events_table
from pilot.environ import default_db_url
from pilot.errors import (
    AmbiguousRunId,
    ConfigurationError,
    LeaseHeld,
    MarathonError,
    RunNotFound,
)
from pilot.events import Event, RunFinished, event_from_json, event_to_json
from pilot.private_files import private_file
from pilot.store.sqlite_append import SqliteAppender
from pilot.store.sqlite_held import (
    SQLITE_BUSY_MS,
    HeldSqlite,
    apply_pragmas,
    sqlite_dialect,
)

# The SQLite dialect above and its driver (``sqlite3``) are imported with this module rather
# than by the first ``create_engine`` (SQLAlchemy loads a dialect and its driver on first use):
# every store but a test's opens SQLite, and a resume then spends its open on the file, not on
# loading code.
DEFAULT_LOCK_WAIT = 600.0
"""Seconds a write waits out a database locked by another process before giving up
(``$MARATHON_DB_LOCK_WAIT`` overrides it)."""


class StoreBusy(MarathonError):
    """The database stayed locked by another process past the bound (or a stop was asked for
    while waiting): nothing can be recorded, so the run stops where its last committed event
    left it, and resumes from there."""


def is_locked(error: BaseException) -> bool:
    text = str(error).lower()
    return isinstance(error, OperationalError) and ("locked" in text or "busy" in text)


def lock_wait_from_env() -> float:
    value = os.environ.get("MARATHON_DB_LOCK_WAIT", "")
    try:
        return max(0.0, float(value)) if value else DEFAULT_LOCK_WAIT
    except ValueError:
        raise ConfigurationError(
            f"MARATHON_DB_LOCK_WAIT={value!r} is not a number of seconds; set it to e.g. 600"
        ) from None


SCHEMA_VERSION = 2
ACTIVE_STATUSES = ("running", "paused", "cancelling")
"""Runs that still own their workspace (a queued run has none yet)."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    pass


class SchemaMeta(Base):
    __tablename__ = "marathon_schema"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)


class RunRow(Base):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    workflow_name: Mapped[str] = mapped_column(String(200))
    workflow_path: Mapped[str] = mapped_column(Text)
    workflow_text: Mapped[str] = mapped_column(Text)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    workspace: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20), index=True)
    status_reason: Mapped[str] = mapped_column(Text, default="")
    phase: Mapped[str] = mapped_column(String(200), default="")
    steps: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    last_seq: Mapped[int] = mapped_column(Integer, default=0)
    """No longer written (kept so that files from before still open): a run's last seq and last
    activity are read from its events (``RunRecord``), so an append touches this row only when
    the run's summary changes."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    lease_owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    origin: Mapped[str] = mapped_column(String(20), default="cli", server_default="cli")
    """"cli" (started by `pilot run`) or "queue" (workers may pick it up when paused)."""


class EventRow(Base):
    __tablename__ = "events"
    run_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    type: Mapped[str] = mapped_column(String(40))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    payload: Mapped[str] = mapped_column(Text)


@dataclass(frozen=True)
class RunRecord:
    id: str
    workflow_name: str
    workflow_path: str
    workflow_text: str
    params: dict[str, Any]
    workspace: str
    status: str
    status_reason: str
    phase: str
    steps: int
    prompt_tokens: int
    completion_tokens: int
    last_seq: int
    created_at: datetime
    updated_at: datetime
    lease_owner: str | None
    lease_expires_at: datetime | None
    origin: str = "cli"

    @classmethod
    def from_row(
        cls, row: Any, last_seq: int | None = None, last_event_at: datetime | None = None
    ) -> RunRecord:
        """The record of ``row`` and of its last event (``last_seq``, ``last_event_at``: None
        when it has none; ``row``: a ``RunRow`` or a result row of the ``runs`` columns): the
        row's ``updated_at`` moves only with its summary, so the run's
        last activity is the later of the two."""
        updated_at = _aware(row.updated_at)
        if last_event_at is not None:
            updated_at = max(updated_at, _aware(last_event_at))  # type: ignore[type-var]
        return cls(
            id=row.id,
            workflow_name=row.workflow_name,
            workflow_path=row.workflow_path,
            workflow_text=row.workflow_text,
            params=dict(row.params or {}),
            workspace=row.workspace,
            status=row.status,
            status_reason=row.status_reason or "",
            phase=row.phase or "",
            steps=row.steps,
            prompt_tokens=row.prompt_tokens,
            completion_tokens=row.completion_tokens,
            last_seq=last_seq or 0,
            created_at=_aware(row.created_at),  # type: ignore[arg-type]
            updated_at=updated_at,  # type: ignore[arg-type]
            lease_owner=row.lease_owner,
            lease_expires_at=_aware(row.lease_expires_at),
            origin=row.origin or "cli",
        )


_RUNS = cast(Table, RunRow.__table__)
_EVENTS = cast(Table, EventRow.__table__)
# The statements a resume and a step run are SQLAlchemy Core on the tables, built once: a
# process compiles each once and never configures the ORM's mappers for them.
_INSERT_EVENT = insert(_EVENTS)
_UPDATE_RUN = update(_RUNS).where(_RUNS.c.id == bindparam("run_id_"))
_LAST_SEQ = (
    select(func.max(_EVENTS.c.seq))
    .where(_EVENTS.c.run_id == _RUNS.c.id)
    .correlate(_RUNS)
    .scalar_subquery()
)
_LAST_EVENT_AT = (
    select(_EVENTS.c.at)
    .where(_EVENTS.c.run_id == _RUNS.c.id)
    .order_by(_EVENTS.c.seq.desc())
    .limit(1)
    .correlate(_RUNS)
    .scalar_subquery()
)
"""A run's last event, each found by one probe of the events' primary key."""
_RECORDS = select(*_RUNS.c, _LAST_SEQ.label("last_seq_"), _LAST_EVENT_AT.label("last_at_"))
"""Runs with what ``RunRecord.from_row`` needs; add ``where`` and ``order_by``."""
_RUN_BY_ID = _RECORDS.where(_RUNS.c.id == bindparam("run_id_"))
_TAKE_LEASE = update(_RUNS).where(
    _RUNS.c.id == bindparam("run_id_"),
    or_(
        _RUNS.c.lease_owner.is_(None),
        _RUNS.c.lease_owner == bindparam("previous_"),
        _RUNS.c.lease_owner == bindparam("owner_"),
    ),
)
"""The lease's row, while its holder is nobody, the one seen (``previous_``) or us
(``owner_``); the SET clause comes from the other parameters' names."""
_HELD_LEASE = update(_RUNS).where(
    _RUNS.c.id == bindparam("run_id_"), _RUNS.c.lease_owner == bindparam("owner_")
)


def _records(conn: Connection, query: Select[Any], **params: Any) -> list[RunRecord]:
    return [
        RunRecord.from_row(row, row.last_seq_, row.last_at_) for row in conn.execute(query, params)
    ]


_RUN_BY_ID_SQL = (
    f"SELECT {', '.join(c.name for c in _RUNS.c)}, "
    "(SELECT max(seq) FROM events WHERE events.run_id = runs.id), "
    "(SELECT at FROM events WHERE events.run_id = runs.id ORDER BY seq DESC LIMIT 1) "
    "FROM runs WHERE id = ?"
)
"""``_RUN_BY_ID`` as SQLite runs it (the columns named from the table, so they stay in step)."""


class _RunValues:
    """A ``runs`` row read straight from sqlite3, its columns by name as ``from_row`` reads
    them, each through the column type's own result processor (dates, JSON)."""

    def __init__(self, names: Sequence[str], values: Sequence[Any]) -> None:
        self.__dict__.update(zip(names, values, strict=True))


def _sqlite_run_by_id(held: HeldSqlite, run_id: str) -> list[RunRecord]:
    """``_records(conn, _RUN_BY_ID, ...)`` on the held connection, without SQLAlchemy's
    statement compiler: a resume's first query of the run is otherwise most of its cost
    (compiling the select of every column and its two subqueries)."""
    names, processors, at = _run_processors(sqlite_dialect())
    rows = held.rows(_RUN_BY_ID_SQL, (run_id,))
    records = []
    for *values, last_seq, last_at in rows:
        row = _RunValues(
            names, [v if f is None else f(v) for f, v in zip(processors, values, strict=True)]
        )
        records.append(RunRecord.from_row(row, last_seq, last_at if at is None else at(last_at)))
    return records


@functools.cache
def _run_processors(dialect: Any) -> tuple[list[str], list[Any], Any]:
    """The ``runs`` columns' names and result processors, and the events' ``at``'s."""
    names = [c.name for c in _RUNS.c]
    processors = [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in _RUNS.c]
    at = _EVENTS.c.at.type.dialect_impl(dialect).result_processor(dialect, None)
    return names, processors, at


_TAKE_LEASE_SQL = (
    "UPDATE runs SET lease_owner = ?, lease_expires_at = ?, updated_at = ? "
    "WHERE id = ? AND (lease_owner IS NULL OR lease_owner = ? OR lease_owner = ?)"
)
"""``_TAKE_LEASE`` as SQLite runs it, its parameters in ``_TAKE_LEASE_ORDER``."""
_TAKE_LEASE_ORDER = (
    "lease_owner", "lease_expires_at", "updated_at", "run_id_", "previous_", "owner_"
)  # fmt: skip


def _sqlite_take_lease(connection: sqlite3.Connection, values: dict[str, Any]) -> int:
    """``_TAKE_LEASE`` on the held connection, without SQLAlchemy's statement compiler (the
    first write of a resume); the dates go through the column type's own bind processor.
    Rows changed."""
    stamp = _datetime_processor(sqlite_dialect())
    parameters = [values[name] for name in _TAKE_LEASE_ORDER]
    for position in (1, 2):
        parameters[position] = stamp(parameters[position]) if stamp else parameters[position]
    cursor = connection.execute(_TAKE_LEASE_SQL, parameters)
    try:
        return cursor.rowcount
    finally:
        cursor.close()


@functools.cache
def _datetime_processor(dialect: Any) -> Any:
    return _RUNS.c.updated_at.type.dialect_impl(dialect).bind_processor(dialect)


def lease_owner_id() -> str:
    """host:pid:nonce: the pid lets a resume on the same host see that a holder died."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def _owner_is_dead_local_process(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # A zombie (killed but not yet reaped by its parent) still answers kill(0).
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def lease_holder_gone(record: RunRecord, now: datetime | None = None) -> bool:
    """A live-looking run (running, cancelling) whose driver is not there: no lease, an
    expired one, or one held by a process of this host that no longer exists."""
    if record.status not in ("running", "cancelling"):
        return False
    owner, expires = record.lease_owner, record.lease_expires_at
    if not owner or expires is None or expires <= (now or utcnow()):
        return True
    return _owner_is_dead_local_process(owner)


def shown_status(record: RunRecord) -> str:
    """The status the views show: ``interrupted`` for a run whose driver died (``pilot
    resume`` continues it), else the stored one."""
    return "interrupted" if lease_holder_gone(record) else record.status


_T = TypeVar("_T")
_P = ParamSpec("_P")


def _waits_out_locks(method: Callable[_P, _T]) -> Callable[_P, _T]:
    """A write of the store that waits out another process's lock (``wait_out_locks``)."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        store = args[0]
        assert isinstance(store, EventStore)
        return store.wait_out_locks(lambda: method(*args, **kwargs))

    return wrapper


def sqlite_url(url: str) -> str | URL:
    """A plain ``sqlite:///<file>`` URL as SQLAlchemy's ``URL`` (made, not parsed: its parser
    compiles a regular expression on first use, a resume's first half millisecond); any
    other form as given."""
    file = url.removeprefix("sqlite:///")
    if file == url or not file or "?" in file or "%" in file or file.startswith(":memory:"):
        return url
    return URL.create("sqlite", database=file)


def new_run_id() -> str:
    return secrets.token_hex(4)


class EventStore:
    """Runs and events behind one SQLAlchemy engine (on SQLite, what a step and a resume do
    goes through the store's held connection instead). Thread-safe; one transaction per
    call."""

    def __init__(self, url: str | None = None, *, durability: str = "normal") -> None:
        self.url = url or default_db_url()
        if self.url.startswith("sqlite:///") and not self.url.startswith("sqlite:///:memory:"):
            private_file(Path(self.url.removeprefix("sqlite:///")).expanduser())
        self.durability = durability
        self.lock_wait = lock_wait_from_env()
        """Seconds a write waits out a lock held by another process (then ``StoreBusy``)."""
        self.interrupt = threading.Event()
        """Set (from a signal handler) to stop waiting for a lock at once."""
        self.is_sqlite = self.url.startswith("sqlite")
        self._engine: Engine | None = None
        self._engine_lock = threading.Lock()
        self.held: HeldSqlite | None = None
        """On SQLite, the store's own connection (``pilot.store.sqlite_held``): the appends,
        a run's row, its lease and its events; everything else goes through ``engine``."""
        if self.is_sqlite:
            made = sqlite_url(self.url)
            self.held = (
                HeldSqlite.of_file(str(made.database), durability)
                if isinstance(made, URL)
                else HeldSqlite(  # an in-memory or otherwise spelled URL: the engine's own
                    lambda: self.engine.raw_connection(), lambda pooled: pooled.close()
                )
            )
        self._migrate()
        self._sqlite_appender = (
            SqliteAppender(self.held, _INSERT_EVENT, _UPDATE_RUN, "run_id_")
            if self.held is not None
            else None
        )

    @property
    def engine(self) -> Engine:
        """SQLAlchemy's engine, made on first use (a SQLite resume's path never needs it)."""
        if self._engine is None:
            with self._engine_lock:
                if self._engine is None:
                    self._engine = self._make_engine()
        return self._engine

    def _make_engine(self) -> Engine:
        if self.is_sqlite:
            engine = create_engine(
                sqlite_url(self.url), connect_args={"timeout": SQLITE_BUSY_MS / 1000}
            )
            durability = self.durability

            @event.listens_for(engine, "connect")
            def _pragmas(dbapi_connection: Any, _record: Any) -> None:
                apply_pragmas(dbapi_connection, durability)

            return engine
        return create_engine(self.url, pool_pre_ping=True)

    def wait_out_locks(self, write: Callable[[], _T]) -> _T:
        """``write()``, tried again with backoff while another process holds the database
        locked, for ``lock_wait`` seconds at most; a stop (``interrupt``) ends the wait at
        once. Both end in ``StoreBusy``, never in a traceback. A failed write rolled back, so
        trying it again cannot write twice."""
        deadline: float | None = None
        told = False
        delay = 0.02
        while True:
            try:
                return write()
            except OperationalError as exc:
                if not is_locked(exc):
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.lock_wait
                elif not told and now > deadline - self.lock_wait + 1.0:
                    told = True  # a lock held past a second is worth a word, once
                    print(
                        f"note: the database is locked by another process; waiting up to "
                        f"{self.lock_wait:.0f} s (Ctrl-C pauses)",
                        file=sys.stderr,
                        flush=True,
                    )
                if self.interrupt.is_set():
                    raise StoreBusy(
                        "stopped while the database was locked by another process; "
                        "resume once it is free"
                    ) from None
                if now >= deadline:
                    raise StoreBusy(
                        f"the database {self.url} stayed locked by another process for "
                        f"{self.lock_wait:.0f} s (set MARATHON_DB_LOCK_WAIT to wait longer); "
                        "find what holds it (e.g. `fuser` on the file), then resume"
                    ) from None
                self.interrupt.wait(min(delay, deadline - now))
                delay = min(delay * 2, 1.0)

    def _migrate(self) -> None:
        """Create the schema, then migrate forward from whatever version the file has.

        Two processes opening a new database together (a test and the `pilot` it starts, two
        workers) race between "does the table exist?" and CREATE, or on the version row; the
        loser's statement fails with "already exists" or a duplicate key. Trying again sees
        the winner's schema, so that failure is retried, never shown.
        """
        retry_schema_race(self._migrate_once)

    def _migrate_once(self) -> None:
        if self._schema_is_current():
            return
        Base.metadata.create_all(self.engine)
        create_server_events(self.engine)
        with Session(self.engine) as session, session.begin():
            meta = session.get(SchemaMeta, 1)
            if meta is None:
                session.add(SchemaMeta(id=1, version=SCHEMA_VERSION))
                return
            for version in range(meta.version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS.get(version, ()):
                    session.execute(text(statement))
                meta.version = version

    def _schema_is_current(self) -> bool:
        """True when a SQLite file already holds this version's schema: every table and index
        is in ``sqlite_master`` and the version row says ``SCHEMA_VERSION``. Two plain reads,
        so opening an existing store skips ``create_all``'s check of each table and the ORM's
        first use; a new, older or partly made file (and any other database) takes the full
        path, with its migrations and its retried creation race."""
        if self.held is None:
            return False
        found = self.held.rows("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")
        if not _schema_names() <= {name for (name,) in found}:
            return False
        version = self.held.rows(f"SELECT version FROM {SchemaMeta.__tablename__} WHERE id = 1")
        return bool(version) and version[0][0] == SCHEMA_VERSION

    def close(self) -> None:
        """Release every connection (the store stays usable: they are reopened on demand)."""
        if self.held is not None:
            self.held.close()
        if self._engine is not None:
            self._engine.dispose()

    # -- runs ---------------------------------------------------------------------------------

    @_waits_out_locks
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
    ) -> str:
        now = utcnow()
        for _ in range(5):
            candidate = run_id or new_run_id()
            try:
                with Session(self.engine) as session, session.begin():
                    session.add(
                        RunRow(
                            id=candidate,
                            workflow_name=workflow_name,
                            workflow_path=workflow_path,
                            workflow_text=workflow_text,
                            params=params,
                            workspace=workspace,
                            status=status,
                            status_reason="",
                            created_at=now,
                            updated_at=now,
                            lease_owner=owner,
                            lease_expires_at=(
                                now + timedelta(seconds=lease_seconds) if owner else None
                            ),
                            origin=origin,
                        )
                    )
                return candidate
            except IntegrityError:
                if run_id:
                    raise
        raise RuntimeError("could not allocate a unique run id")

    def _run_by_id(self, run_id: str) -> list[RunRecord]:
        if self.held is not None:
            return _sqlite_run_by_id(self.held, run_id)
        with self.engine.connect() as conn:
            return _records(conn, _RUN_BY_ID, run_id_=run_id)

    def get_run(self, run_id: str) -> RunRecord:
        records = self._run_by_id(run_id)
        if not records:
            raise RunNotFound(run_id)
        return records[0]

    def find_run(self, prefix: str) -> RunRecord:
        """Any unambiguous prefix of a run id names the run."""
        exact = self._run_by_id(prefix)
        if exact:
            return exact[0]
        with self.engine.connect() as conn:
            records = _records(
                conn, _RECORDS.where(_RUNS.c.id.startswith(prefix, autoescape=True)).limit(10)
            )
        if not records:
            raise RunNotFound(prefix)
        if len(records) > 1:
            raise AmbiguousRunId(prefix, [r.id for r in records])
        return records[0]

    def list_runs(self, *, limit: int = 50, since: datetime | None = None) -> list[RunRecord]:
        query = _RECORDS.order_by(RunRow.created_at.desc()).limit(limit)
        if since is not None:
            query = query.where(or_(RunRow.updated_at >= since, since <= _LAST_EVENT_AT))
        with self.engine.connect() as conn:
            return _records(conn, query)

    @_waits_out_locks
    def set_status(self, run_id: str, status: str, reason: str = "") -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(RunRow)
                .where(RunRow.id == run_id)
                .values(status=status, status_reason=reason, updated_at=utcnow())
            )

    @_waits_out_locks
    def set_workspace(self, run_id: str, workspace: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(RunRow).where(RunRow.id == run_id).values(workspace=workspace))

    @_waits_out_locks
    def set_params(self, run_id: str, params: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(RunRow).where(RunRow.id == run_id).values(params=params))

    @_waits_out_locks
    def check_workspace_free(self, run_id: str, workspace: str, *, claim: bool = True) -> None:
        """Two live runs never share a workspace: claim it for ``run_id`` or refuse
        (``claim=False``: only look, writing nothing)."""
        path = str(Path(workspace).resolve())
        with self.engine.begin() as conn:
            other = conn.execute(
                select(RunRow.id, RunRow.status)
                .where(
                    RunRow.workspace == path,
                    RunRow.id != run_id,
                    RunRow.status.in_(ACTIVE_STATUSES),
                )
                .limit(1)
            ).first()
            if other is not None:
                raise ConfigurationError(
                    f"workspace {path} is used by run {other.id} ({other.status}); two runs "
                    f"never share a workspace. Finish or cancel it (`pilot cancel {other.id}`), "
                    "or give this run another directory"
                )
            if claim:
                conn.execute(update(RunRow).where(RunRow.id == run_id).values(workspace=path))

    # -- the queue ----------------------------------------------------------------------------

    def claim_next(self, owner: str, *, lease_seconds: float = 60.0) -> RunRecord | None:
        """Take the oldest run a worker may drive: queued, or a queue run left paused or
        orphaned (its lease expired). Safe with many workers: SQLite serialises the single
        UPDATE; PostgreSQL skips rows another worker has locked (FOR UPDATE SKIP LOCKED)."""
        now = utcnow()
        claimable = or_(
            RunRow.status == "queued",
            and_(
                RunRow.origin == "queue",
                RunRow.status.in_(("running", "paused")),
                or_(RunRow.lease_owner.is_(None), RunRow.lease_expires_at < now),
            ),
        )
        values = {
            "status": "running",
            "lease_owner": owner,
            "lease_expires_at": now + timedelta(seconds=lease_seconds),
            "updated_at": now,
        }
        with self.engine.begin() as conn:
            if self.is_sqlite:
                pick = select(RunRow.id).where(claimable).order_by(RunRow.created_at).limit(1)
                claimed = conn.execute(
                    update(RunRow)
                    .where(RunRow.id == pick.scalar_subquery(), claimable)
                    .values(**values)
                    .returning(RunRow.id)
                ).scalar()
            else:
                claimed = conn.execute(
                    select(RunRow.id)
                    .where(claimable)
                    .order_by(RunRow.created_at)
                    .limit(1)
                    .with_for_update(skip_locked=True)
                ).scalar()
                if claimed is not None:
                    conn.execute(update(RunRow).where(RunRow.id == claimed).values(**values))
        if claimed is None:
            claimed = self._claim_from_dead_local_owner(owner, values)
        return None if claimed is None else self.get_run(claimed)

    def _claim_from_dead_local_owner(self, owner: str, values: dict[str, Any]) -> str | None:
        """A worker on this host that was SIGKILLed cannot release its leases: take them now
        rather than waiting for them to expire."""
        with self.engine.connect() as conn:
            held = conn.execute(
                select(RunRow.id, RunRow.lease_owner).where(
                    RunRow.origin == "queue",
                    RunRow.status == "running",
                    RunRow.lease_owner.is_not(None),
                )
            ).all()
        for run_id, holder in held:
            if holder != owner and _owner_is_dead_local_process(holder):
                with self.engine.begin() as conn:
                    result = conn.execute(
                        update(RunRow)
                        .where(RunRow.id == run_id, RunRow.lease_owner == holder)
                        .values(**values)
                    )
                if result.rowcount == 1:
                    return run_id
        return None

    def list_queue(self) -> list[RunRecord]:
        query = _RECORDS.where(
            RunRow.origin == "queue", RunRow.status.in_(("queued", *ACTIVE_STATUSES))
        ).order_by(RunRow.created_at)
        with self.engine.connect() as conn:
            return _records(conn, query)

    # -- events -------------------------------------------------------------------------------

    def append(self, run_id: str, seq: int, ev: Event, *, totals: dict[str, Any]) -> None:
        """Append one event and update the run's totals, in one transaction.

        ``seq`` is chosen by the lease holder (last seq + 1); a duplicate means someone else
        wrote to this run, which the primary key turns into an error instead of a fork.
        """
        self.append_many(run_id, [(seq, ev, None)], totals=totals)

    @_waits_out_locks
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
        # parameter names): built once, so SQLAlchemy only looks up its compiled form instead
        # of building, coercing and cache-keying a new statement for every event.
        with self.engine.begin() as conn:
            conn.execute(_INSERT_EVENT, rows)
            if values:
                conn.execute(_UPDATE_RUN, {"run_id_": run_id, **values})

    def load_events(self, run_id: str, *, after_seq: int = 0) -> list[Event]:
        return [ev for _seq, ev in self.iter_events(run_id, after_seq=after_seq)]

    def iter_events(self, run_id: str, *, after_seq: int = 0) -> Iterator[tuple[int, Event]]:
        for seq, payload in self.iter_event_payloads(run_id, after_seq=after_seq):
            yield seq, event_from_json(payload)

    def iter_event_payloads(self, run_id: str, *, after_seq: int = 0) -> Iterator[tuple[int, str]]:
        """The run's events after ``after_seq`` as stored: ``(seq, JSON)``, in order."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(EventRow.seq, EventRow.payload)
                .where(EventRow.run_id == run_id, EventRow.seq > after_seq)
                .order_by(EventRow.seq)
            )
            yield from ((seq, payload) for seq, payload in rows)

    # -- leases -------------------------------------------------------------------------------

    @_waits_out_locks
    def acquire_lease(self, run_id: str, owner: str, *, seconds: float = 60.0) -> str:
        """Take the run's lease, or raise LeaseHeld. Returns a note when a stale lease was taken.

        A lease is free when unset, expired, ours, or held by a process on this host that no
        longer exists (a SIGKILLed pilot cannot release its lease; waiting out its expiry would
        only delay the resume).
        """
        now = utcnow()
        run = self.get_run(run_id)
        note = ""
        previous = run.lease_owner
        expires = run.lease_expires_at
        if previous and previous != owner and expires and expires > now:
            if not _owner_is_dead_local_process(previous):
                raise LeaseHeld(run_id, previous, expires)
            note = f"took over the lease of {previous}, whose process no longer exists"
        elif previous and previous != owner:
            note = f"took over the expired lease of {previous}"
        values = {
            "run_id_": run_id,
            "previous_": previous,
            "owner_": owner,
            "lease_owner": owner,
            "lease_expires_at": now + timedelta(seconds=seconds),
            "updated_at": now,
        }
        if self.held is not None:
            taken = self.held.transaction(lambda connection: _sqlite_take_lease(connection, values))
        else:
            with self.engine.begin() as conn:
                taken = conn.execute(_TAKE_LEASE, values).rowcount
        if taken != 1:
            fresh = self.get_run(run_id)
            raise LeaseHeld(run_id, fresh.lease_owner or "?", fresh.lease_expires_at)
        return note

    @_waits_out_locks
    def renew_lease(self, run_id: str, owner: str, *, seconds: float = 60.0) -> bool:
        with self.engine.begin() as conn:
            result = conn.execute(
                _HELD_LEASE,
                {
                    "run_id_": run_id,
                    "owner_": owner,
                    "lease_expires_at": utcnow() + timedelta(seconds=seconds),
                },
            )
            return result.rowcount == 1

    @_waits_out_locks
    def release_lease(self, run_id: str, owner: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                _HELD_LEASE,
                {"run_id_": run_id, "owner_": owner, "lease_owner": None, "lease_expires_at": None},
            )

    # -- server events ------------------------------------------------------------------------

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
            return [(_aware(a), s, t, json.loads(p)) for a, s, t, p in conn.execute(query)]  # type: ignore[misc]

    def delete_runs(self, run_ids: Sequence[str]) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(EventRow).where(EventRow.run_id.in_(run_ids)))
            conn.execute(delete(RunRow).where(RunRow.id.in_(run_ids)))


@functools.cache
def _schema_names() -> frozenset[str]:
    """The tables and named indexes this version creates (the pilot's and the brain's)."""
    tables = [*Base.metadata.sorted_tables, server_events_table]
    return frozenset(
        [t.name for t in tables] + [str(i.name) for t in tables for i in t.indexes if i.name]
    )


MIGRATIONS: dict[int, Sequence[str]] = {
    2: ("ALTER TABLE runs ADD COLUMN origin VARCHAR(20) NOT NULL DEFAULT 'cli'",),
}
"""Forward migrations: version -> SQL statements taking the schema from version-1 to version."""


def is_storage_full(error: BaseException) -> bool:
    return isinstance(error, OperationalError) and "full" in str(error).lower()
