"""The run rows: the statements that create, find and change them (the record as read is
``pilot.store.records``').

Each function takes the engine (or a connection) and does one statement or one short
transaction; waiting out locks is the facade's (``EventStore``), lease ownership is
``pilot.store.lease``'s. The statements are SQLAlchemy Core on the tables of
``pilot.store.schema``, the fixed ones built once so a process compiles each once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Select, and_, bindparam, func, insert, or_, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from pilot.errors import AmbiguousRunId, ConfigurationError, RunNotFound
from pilot.store.records import ACTIVE_STATUSES, RunRecord, new_run_id, utcnow
from pilot.store.schema import events, runs

INSERT_EVENT = insert(events)
UPDATE_RUN = update(runs).where(runs.c.id == bindparam("run_id_"))
_LAST_SEQ = (
    select(func.max(events.c.seq))
    .where(events.c.run_id == runs.c.id)
    .correlate(runs)
    .scalar_subquery()
)
LAST_EVENT_AT = (
    select(events.c.at)
    .where(events.c.run_id == runs.c.id)
    .order_by(events.c.seq.desc())
    .limit(1)
    .correlate(runs)
    .scalar_subquery()
)
"""A run's last event, each found by one probe of the events' primary key."""
RECORDS = select(*runs.c, _LAST_SEQ.label("last_seq_"), LAST_EVENT_AT.label("last_at_"))
"""Runs with what ``RunRecord.from_row`` needs; add ``where`` and ``order_by``."""
RUN_BY_ID = RECORDS.where(runs.c.id == bindparam("run_id_"))


def records(conn: Connection, query: Select[Any], **params: Any) -> list[RunRecord]:
    return [
        RunRecord.from_row(row, row.last_seq_, row.last_at_) for row in conn.execute(query, params)
    ]


def create_run(
    engine: Engine,
    run_id: str | None,
    values: dict[str, Any],
    owner: str | None,
    lease_seconds: float,
) -> str:
    """Insert a run row (``values``: its columns but the id and the lease); a fresh id is
    drawn again on the rare collision, a given one is refused (``IntegrityError``)."""
    now = utcnow()
    row = {
        **values,
        "status_reason": "",
        "created_at": now,
        "updated_at": now,
        "lease_owner": owner,
        "lease_expires_at": now + timedelta(seconds=lease_seconds) if owner else None,
    }
    for _ in range(5):
        candidate = run_id or new_run_id()
        try:
            with engine.begin() as conn:
                conn.execute(insert(runs).values(id=candidate, **row))
            return candidate
        except IntegrityError:
            if run_id:
                raise
    raise RuntimeError("could not allocate a unique run id")


def find_by_prefix(engine: Engine, prefix: str) -> RunRecord:
    """The one run whose id starts with ``prefix``, or RunNotFound / AmbiguousRunId."""
    with engine.connect() as conn:
        query = RECORDS.where(runs.c.id.startswith(prefix, autoescape=True)).limit(10)
        found = records(conn, query)
    if not found:
        raise RunNotFound(prefix)
    if len(found) > 1:
        raise AmbiguousRunId(prefix, [r.id for r in found])
    return found[0]


def list_runs(engine: Engine, limit: int, since: datetime | None) -> list[RunRecord]:
    query = RECORDS.order_by(runs.c.created_at.desc()).limit(limit)
    if since is not None:
        query = query.where(or_(runs.c.updated_at >= since, since <= LAST_EVENT_AT))
    with engine.connect() as conn:
        return records(conn, query)


def update_run(engine: Engine, run_id: str, **values: Any) -> None:
    with engine.begin() as conn:
        conn.execute(update(runs).where(runs.c.id == run_id).values(**values))


def check_workspace_free(engine: Engine, run_id: str, workspace: str, claim: bool) -> None:
    """Two live runs never share a workspace: claim it for ``run_id`` or refuse
    (``claim=False``: only look, writing nothing)."""
    path = str(Path(workspace).resolve())
    with engine.begin() as conn:
        other = conn.execute(
            select(runs.c.id, runs.c.status)
            .where(
                runs.c.workspace == path,
                runs.c.id != run_id,
                runs.c.status.in_(ACTIVE_STATUSES),
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
            conn.execute(update(runs).where(runs.c.id == run_id).values(workspace=path))


def claim_next(engine: Engine, is_sqlite: bool, values: dict[str, Any]) -> str | None:
    """Set ``values`` on the oldest run a worker may drive (queued, or a queue run left
    paused or orphaned); its id, or None. SQLite serialises the single UPDATE; PostgreSQL
    skips rows another worker has locked (FOR UPDATE SKIP LOCKED)."""
    now = values["updated_at"]
    claimable = or_(
        runs.c.status == "queued",
        and_(
            runs.c.origin == "queue",
            runs.c.status.in_(("running", "paused")),
            or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_at < now),
        ),
    )
    with engine.begin() as conn:
        if is_sqlite:
            pick = select(runs.c.id).where(claimable).order_by(runs.c.created_at).limit(1)
            return conn.execute(
                update(runs)
                .where(runs.c.id == pick.scalar_subquery(), claimable)
                .values(**values)
                .returning(runs.c.id)
            ).scalar()
        claimed = conn.execute(
            select(runs.c.id)
            .where(claimable)
            .order_by(runs.c.created_at)
            .limit(1)
            .with_for_update(skip_locked=True)
        ).scalar()
        if claimed is not None:
            conn.execute(update(runs).where(runs.c.id == claimed).values(**values))
        return claimed


def list_queue(engine: Engine) -> list[RunRecord]:
    query = RECORDS.where(
        runs.c.origin == "queue", runs.c.status.in_(("queued", *ACTIVE_STATUSES))
    ).order_by(runs.c.created_at)
    with engine.connect() as conn:
        return records(conn, query)


def delete_runs(engine: Engine, run_ids: Sequence[str]) -> None:
    with engine.begin() as conn:
        conn.execute(events.delete().where(events.c.run_id.in_(run_ids)))
        conn.execute(runs.delete().where(runs.c.id.in_(run_ids)))
