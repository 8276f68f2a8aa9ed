"""Server events (start, ready, died, restarting, gave_up, stopped) into the pilot's database.

The brain owns the ``server_events`` table (id, server, at, type, payload JSON): it is declared
here once, and the pilot's store imports this declaration (the brain never imports the pilot).
Either side creates the table (and its indexes) when absent, so whichever runs first works.
``pilot show`` and ``pilot report`` then list server deaths next to the run that lived through
them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    insert,
    select,
)

from brain.dbrace import retry_schema_race

_metadata = MetaData()
server_events = Table(
    "server_events",
    _metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("server", String(200), nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("type", String(40), nullable=False),
    Column("payload", Text, nullable=False),
    Index("ix_server_events_server", "server"),
    Index("ix_server_events_at", "at"),
)


def create_server_events(engine: Engine) -> None:
    """Create ``server_events`` and its indexes in ``engine``'s database when absent (the
    caller retries a race with another process creating them: ``brain.dbrace``)."""
    _metadata.create_all(engine, checkfirst=True)


class EventsWriter(Protocol):
    """Anything that records a server event (the supervisor only needs this)."""

    def record(self, server: str, type_: str, payload: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class ServerEvent:
    at: datetime
    server: str
    type: str
    payload: dict[str, Any]


class NullEvents:
    """Records nothing (``brain up`` without a database, unit tests)."""

    def record(self, server: str, type_: str, payload: dict[str, Any]) -> None:
        return None


class ServerEventWriter:
    """Appends rows to ``server_events`` in the database at ``url`` (SQLite or PostgreSQL)."""

    def __init__(self, url: str | None = None) -> None:
        from brain.state import events_db_url

        self.url = url or events_db_url()
        if self.url.startswith("sqlite:///") and ":memory:" not in self.url:
            Path(self.url.removeprefix("sqlite:///")).expanduser().parent.mkdir(
                parents=True, exist_ok=True
            )
        self.engine = _engine(self.url)
        retry_schema_race(lambda: create_server_events(self.engine))

    def record(self, server: str, type_: str, payload: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                insert(server_events).values(
                    server=server,
                    at=datetime.now(UTC),
                    type=type_,
                    payload=json.dumps(payload, default=str),
                )
            )

    def read(self, server: str | None = None) -> list[ServerEvent]:
        """Events in the order they were recorded (for ``brain status`` and tests)."""
        query = select(server_events).order_by(server_events.c.id)
        if server is not None:
            query = query.where(server_events.c.server == server)
        with self.engine.connect() as conn:
            return [
                ServerEvent(_aware(r.at), r.server, r.type, json.loads(r.payload))
                for r in conn.execute(query)
            ]

    def close(self) -> None:
        self.engine.dispose()


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _engine(url: str) -> Engine:
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)
    engine = create_engine(url, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        # The pilot opens the same file in WAL mode; writers must agree on it.
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    return engine
