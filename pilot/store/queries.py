"""The store's named reads (and retention's deletes) for the report, `pilot show`, `pilot gc`.

Every query of the pilot lives in this wing: the report and retention ask these functions
for facts instead of building SQL on ``store.engine``, so a change to the tables (or to the
brain's ``server_events``, declared once in ``brain.events``) is made here and nowhere else.
They only read, except ``delete_server_events_before`` and ``vacuum``, which retention calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, get_args

from pydantic import ValidationError
from sqlalchemy import bindparam, delete, func, select, text

from brain.events import server_events
from pilot import events as ev
from pilot.store.event_store import EventStore
from pilot.store.schema import CONTROL_EVENTS, CONTROL_WHERE
from pilot.store.schema import events as EVENTS_TABLE
from pilot.store.schema import runs as RUNS_TABLE


def _known_event_types() -> frozenset[str]:
    union = get_args(ev.Event)[0]
    return frozenset(cls.model_fields["type"].default for cls in get_args(union))


KNOWN_EVENT_TYPES = _known_event_types()
"""The event types this version can parse; a stored row of another type is kept as a dict."""


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


# -- a run's events as stored --------------------------------------------------------------------


@dataclass(frozen=True)
class StoredEvent:
    """One stored row: parsed when its type is known, else kept as the raw payload."""

    seq: int
    type: str
    at: datetime
    payload: dict[str, Any]
    event: ev.Event | None = None
    error: str = ""
    """Why a row of a known type could not be parsed (it is then treated like an unknown one)."""


def stored_events(store: EventStore, run_id: str) -> list[StoredEvent]:
    """The run's events in order; unknown or unreadable types never stop the loading.

    The type comes from the row's ``type`` column, so an event type added by a newer version
    is kept as a dict and counted instead of failing the discriminated-union validation that
    ``EventStore.load_events`` does.
    """
    query = (
        select(EVENTS_TABLE.c.seq, EVENTS_TABLE.c.type, EVENTS_TABLE.c.at, EVENTS_TABLE.c.payload)
        .where(EVENTS_TABLE.c.run_id == run_id)
        .order_by(EVENTS_TABLE.c.seq)
    )
    loaded: list[StoredEvent] = []
    with store.engine.connect() as conn:
        for seq, type_, at, payload in conn.execute(query):
            try:
                raw = json.loads(payload)
            except ValueError:
                raw = {"type": type_, "unreadable": payload[:200]}
            if not isinstance(raw, dict):
                raw = {"type": type_, "value": raw}
            parsed: ev.Event | None = None
            error = ""
            if type_ in KNOWN_EVENT_TYPES:
                try:
                    parsed = ev.event_from_json(payload)
                except ValidationError as exc:
                    error = f"{exc.error_count()} validation error(s)"
            when = parsed.at if parsed is not None else _aware(at)
            loaded.append(StoredEvent(seq, type_, when, raw, parsed, error))
    return loaded


def run_started_payload(store: EventStore, run_id: str) -> dict[str, Any] | None:
    """The run's ``run_started`` event as stored (a dict: read even when it no longer parses),
    or None when the run never started."""
    query = (
        select(EVENTS_TABLE.c.payload)
        .where(EVENTS_TABLE.c.run_id == run_id, EVENTS_TABLE.c.type == "run_started")
        .order_by(EVENTS_TABLE.c.seq)
        .limit(1)
    )
    with store.engine.connect() as conn:
        payload = conn.execute(query).scalar()
    if payload is None:
        return None
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# -- the brain's server events -------------------------------------------------------------------


def server_ports(store: EventStore, until: datetime) -> dict[str, int]:
    """Each brain server's port, from its latest event naming one (``starting`` does)."""
    table = server_events.c
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(table.server, table.payload)
            .where(table.at <= until, table.type == "starting")
            .order_by(table.at)
        ).all()
    ports: dict[str, int] = {}
    for server, payload in rows:
        try:
            port = json.loads(payload).get("port")
        except (TypeError, ValueError, AttributeError):
            continue
        if isinstance(port, int):
            ports[server] = port
    return ports


def server_names(store: EventStore) -> set[str]:
    """Every server the brain has recorded an event of."""
    with store.engine.connect() as conn:
        return set(conn.execute(select(server_events.c.server).distinct()).scalars())


def server_events_before(store: EventStore, at: datetime, *, limit: int) -> list[tuple[str, str]]:
    """The latest ``limit`` server events before ``at``, newest first: ``(server, type)``."""
    table = server_events.c
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(table.server, table.type)
            .where(table.at < at)
            .order_by(table.at.desc())
            .limit(limit)
        ).all()
    return [(server, type_) for server, type_ in rows]


# -- retention -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OldRun:
    id: str
    status: str
    updated_at: datetime
    workspace: str
    events: int


def runs_updated_before(store: EventStore, cutoff: datetime) -> list[OldRun]:
    """Runs whose row was last updated before ``cutoff``, oldest first, with their event
    counts."""
    with store.engine.connect() as conn:
        old = conn.execute(
            select(
                RUNS_TABLE.c.id,
                RUNS_TABLE.c.status,
                RUNS_TABLE.c.updated_at,
                RUNS_TABLE.c.workspace,
            )
            .where(RUNS_TABLE.c.updated_at < cutoff)
            .order_by(RUNS_TABLE.c.updated_at)
        ).all()
        counts = dict(
            conn.execute(
                select(EVENTS_TABLE.c.run_id, func.count())
                .join(RUNS_TABLE, RUNS_TABLE.c.id == EVENTS_TABLE.c.run_id)
                .where(RUNS_TABLE.c.updated_at < cutoff)
                .group_by(EVENTS_TABLE.c.run_id)
            ).all()
        )
    return [
        OldRun(run_id, status, _aware(updated_at), workspace or "", counts.get(run_id, 0))
        for run_id, status, updated_at, workspace in old
    ]


def run_created_times(store: EventStore) -> dict[str, datetime]:
    """Every run's creation time, by id."""
    with store.engine.connect() as conn:
        rows = conn.execute(select(RUNS_TABLE.c.id, RUNS_TABLE.c.created_at)).all()
    return {run_id: _aware(created) for run_id, created in rows}


def delete_server_events_before(store: EventStore, at: datetime, *, dry_run: bool) -> int:
    """How many server events are older than ``at``; removed unless ``dry_run``."""
    where = server_events.c.at < at
    with store.engine.begin() as conn:
        count = conn.execute(select(func.count()).select_from(server_events).where(where))
        found = int(count.scalar() or 0)
        if found and not dry_run:
            conn.execute(delete(server_events).where(where))
    return found


def vacuum(store: EventStore) -> None:
    """Give the space of deleted rows back to the disk (SQLite ``VACUUM`` and a WAL
    checkpoint; PostgreSQL ``VACUUM (ANALYZE)`` of the three tables)."""
    if store.is_sqlite:
        store.close()  # no pooled or held connection may hold a read snapshot
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM"))
            conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
    elif store.engine.dialect.name == "postgresql":
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            for table in ("events", "runs", "server_events"):
                conn.execute(text(f"VACUUM (ANALYZE) {table}"))


# -- a state checkpoint's events -------------------------------------------------------------------


def events_from(store: EventStore, run_id: str, seq: int) -> Iterator[tuple[int, str]]:
    """The run's events from ``seq`` on, in order, as stored: a resume from the checkpoint at
    ``seq`` checks that one and folds the rest."""
    return _payload_rows(store, _FROM_SQL, (run_id, seq), _FROM, {"run_id": run_id, "seq": seq})


def message_rows(
    store: EventStore, run_id: str, first: int, last: int, kinds: frozenset[str]
) -> Iterator[tuple[int, str]]:
    """The run's events of ``kinds`` from ``first`` to ``last``, in order: the ones a resumed
    state's messages are made of, read when they are first used."""
    return _payload_rows(
        store,
        _MESSAGES_SQL.format(", ".join("?" * len(kinds))),
        (run_id, first, last, *sorted(kinds)),
        _MESSAGES,
        {"run_id": run_id, "first": first, "last": last, "kinds": sorted(kinds)},
    )


def control_rows(
    store: EventStore, run_id: str, first: int, last: int, kinds: frozenset[str]
) -> Iterator[tuple[int, str]]:
    """The run's control events (``schema.CONTROL_EVENTS``) of ``kinds`` from ``first`` to
    ``last``, in order, through the partial index ``events_control``: the rows themselves,
    not every event of a long run (a resume checks its checkpoint against them)."""
    if not kinds <= frozenset(CONTROL_EVENTS):
        raise ValueError(f"not control events: {sorted(kinds - frozenset(CONTROL_EVENTS))}")
    return _payload_rows(
        store,
        _CONTROL_SQL.format(", ".join("?" * len(kinds))),
        (run_id, first, last, *sorted(kinds)),
        _CONTROL,
        {"run_id": run_id, "first": first, "last": last, "kinds": sorted(kinds)},
    )


def _payload_rows(
    store: EventStore, sql: str, args: tuple[Any, ...], statement: Any, params: dict[str, Any]
) -> Iterator[tuple[int, str]]:
    """``(seq, payload)`` rows: on SQLite from the store's held connection with ``sql``
    (neither column has a result processor, and a resume reads thousands of these rows:
    SQLAlchemy's result rows cost more than the read), elsewhere the Core ``statement``."""
    if store.held is not None:
        yield from store.held.rows(sql, args)
        return
    with store.engine.connect() as conn:
        yield from ((at, payload) for at, payload in conn.execute(statement, params))


_FROM_SQL = "SELECT seq, payload FROM events WHERE run_id = ? AND seq >= ? ORDER BY seq"
_MESSAGES_SQL = (
    "SELECT seq, payload FROM events WHERE run_id = ? AND seq BETWEEN ? AND ? AND type IN ({}) "
    "ORDER BY seq"
)
"""``_MESSAGES`` as SQLite runs it (``{}``: a ``?`` per kind)."""
_CONTROL_SQL = (
    "SELECT seq, payload FROM events WHERE run_id = ? AND seq BETWEEN ? AND ? "
    f"AND {CONTROL_WHERE} AND type IN ({{}}) ORDER BY seq"
)
"""``_CONTROL`` as SQLite runs it: the index's own condition, then the kinds wanted."""

_EVENTS = EVENTS_TABLE
_FROM = (
    select(_EVENTS.c.seq, _EVENTS.c.payload)
    .where(_EVENTS.c.run_id == bindparam("run_id"), _EVENTS.c.seq >= bindparam("seq"))
    .order_by(_EVENTS.c.seq)
)
_MESSAGES = (
    select(_EVENTS.c.seq, _EVENTS.c.payload)
    .where(
        _EVENTS.c.run_id == bindparam("run_id"),
        _EVENTS.c.seq.between(bindparam("first"), bindparam("last")),
        _EVENTS.c.type.in_(bindparam("kinds", expanding=True)),
    )
    .order_by(_EVENTS.c.seq)
)
_CONTROL = (
    select(_EVENTS.c.seq, _EVENTS.c.payload)
    .where(
        _EVENTS.c.run_id == bindparam("run_id"),
        _EVENTS.c.seq.between(bindparam("first"), bindparam("last")),
        text(CONTROL_WHERE),
        _EVENTS.c.type.in_(bindparam("kinds", expanding=True)),
    )
    .order_by(_EVENTS.c.seq)
)
"""The statements, Core on the table, built once (a resume's first read of the events then
configures no ORM mapper)."""
