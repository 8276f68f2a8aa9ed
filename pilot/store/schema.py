"""The store's tables, their version, and the migrations that bring an older file forward.

SQLAlchemy Core tables, not ORM classes: a process that opens a store (every ``pilot``
command but ``--help``) then never imports ``sqlalchemy.orm`` nor configures a mapper, which
cost ``pilot runs`` and ``pilot show`` tens of milliseconds of imports for nothing.

``SCHEMA_VERSION`` is what this code writes; ``MIGRATIONS`` take a file of any earlier version
forward, one version at a time, each in the transaction that records the new version. A file
from a newer version, or a ``runs`` table that is not ours, is refused with a message instead
of being changed (:func:`check_foreign`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection, Engine

from brain.events import create_server_events
from brain.events import server_events as server_events_table
from pilot.errors import ConfigurationError
from pilot.store.sqlite_check import (
    SCHEMA_TABLE,
    SCHEMA_VERSION,
    foreign_message,
    foreign_runs,
)

metadata = MetaData()

schema_meta = Table(
    SCHEMA_TABLE,
    metadata,
    Column("id", Integer, primary_key=True),
    Column("version", Integer, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("workflow_name", String(200), nullable=False),
    Column("workflow_path", Text, nullable=False),
    Column("workflow_text", Text, nullable=False),
    Column("params", JSON, nullable=False),
    Column("workspace", Text, nullable=False),
    Column("status", String(20), nullable=False, index=True),
    Column("status_reason", Text, nullable=False, default=""),
    Column("phase", String(200), nullable=False, default=""),
    Column("steps", Integer, nullable=False, default=0),
    Column("prompt_tokens", Integer, nullable=False, default=0),
    Column("completion_tokens", Integer, nullable=False, default=0),
    # No longer written (kept so that files from before still open): a run's last seq and
    # last activity are read from its events (``RunRecord``).
    Column("last_seq", Integer, nullable=False, default=0),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("lease_owner", String(200), nullable=True),
    Column("lease_expires_at", DateTime(timezone=True), nullable=True),
    # "cli" (started by `pilot run`) or "queue" (workers may pick it up when paused).
    Column("origin", String(20), nullable=False, default="cli", server_default="cli"),
    # The launch facts (version 3; before, ``__`` keys of ``params``): when its templates
    # saw the run start, the folder its workflow's relative paths are read from, the
    # ``--endpoint``s it was started with, whether it is a dry run, and its durability.
    Column("started_at", String(40), nullable=False, default="", server_default=""),
    Column("base_dir", Text, nullable=True),
    Column("endpoints", JSON, nullable=True),
    Column("dry_run", Boolean, nullable=False, default=False, server_default="0"),
    Column("durability", String(10), nullable=False, default="normal", server_default="normal"),
)

events = Table(
    "events",
    metadata,
    Column("run_id", String(32), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("type", String(40), nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("payload", Text, nullable=False),
)

CONTROL_EVENTS = (
    "check_finished",
    "check_started",
    "phase_finished",
    "phase_started",
    "run_finished",
)
"""The few events of a run that say where it is (its phases, their checks, its end): a resume
checks its checkpoint's claims against them (``pilot.run.claims``)."""
CONTROL_WHERE = "type IN (" + ", ".join(f"'{kind}'" for kind in CONTROL_EVENTS) + ")"
"""The partial index's condition, written the same in every query that means to use it:
SQLite uses a partial index only for a query whose WHERE has this very term."""

Index(
    "events_control",
    events.c.run_id,
    events.c.seq,
    sqlite_where=text(CONTROL_WHERE),
    postgresql_where=text(CONTROL_WHERE),
)
"""The control events by run and seq (version 4): without it, finding a run's phase events
read every row of the run (a 3,000-step run's 12 MB at each resume); with it, the few rows
themselves. Partial, so a step's four events add nothing to it (storage per step unchanged)."""

LAUNCH_KEYS = {
    "__started_at": "started_at",
    "__base_dir": "base_dir",
    "__endpoints": "endpoints",
    "__dry_run": "dry_run",
}
"""The ``params`` keys that carried the launch facts before version 3, and their columns."""


def _launch_out_of_params(conn: Connection) -> None:
    """Version 3: each run's ``__`` params become its launch columns, and leave its params."""
    rows = conn.execute(select(runs.c.id, runs.c.params)).all()
    for run_id, params in rows:
        if not isinstance(params, dict) or not any(k in LAUNCH_KEYS for k in params):
            continue
        kept = {k: v for k, v in params.items() if k not in LAUNCH_KEYS}
        values: dict[str, Any] = {"params": kept}
        for key, column in LAUNCH_KEYS.items():
            if key in params:
                values[column] = params[key]
        values["started_at"] = str(values.get("started_at") or "")
        values["dry_run"] = bool(values.get("dry_run"))
        ends = values.get("endpoints")
        values["endpoints"] = [str(u) for u in ends] if isinstance(ends, list) and ends else None
        conn.execute(update(runs).where(runs.c.id == run_id).values(**values))


Migration = Sequence[str | Callable[[Connection], None]]
MIGRATIONS: dict[int, Migration] = {
    2: ("ALTER TABLE runs ADD COLUMN origin VARCHAR(20) NOT NULL DEFAULT 'cli'",),
    3: (
        "ALTER TABLE runs ADD COLUMN started_at VARCHAR(40) NOT NULL DEFAULT ''",
        "ALTER TABLE runs ADD COLUMN base_dir TEXT",
        "ALTER TABLE runs ADD COLUMN endpoints JSON",
        "ALTER TABLE runs ADD COLUMN dry_run BOOLEAN NOT NULL DEFAULT false",
        "ALTER TABLE runs ADD COLUMN durability VARCHAR(10) NOT NULL DEFAULT 'normal'",
        _launch_out_of_params,
    ),
    4: (
        f"CREATE INDEX IF NOT EXISTS events_control ON events (run_id, seq) WHERE {CONTROL_WHERE}",
    ),
}
"""Forward migrations: version -> steps (SQL, or a function of the transaction) taking the
schema from version-1 to version."""


@functools.cache
def schema_names() -> frozenset[str]:
    """The tables and named indexes this version creates (the pilot's and the brain's)."""
    tables = [*metadata.sorted_tables, server_events_table]
    return frozenset(
        [t.name for t in tables] + [str(i.name) for t in tables for i in t.indexes if i.name]
    )


def migrate(engine: Engine, where: str) -> None:
    """Create what is missing, then run the migrations from the file's version to ours (each
    with its version row, in one transaction). A file newer than this code, or a ``runs``
    table that is another program's, is refused before anything is written."""
    with engine.connect() as conn:
        found = inspect(conn)
        has_meta = found.has_table(schema_meta.name)
        version = conn.execute(select(schema_meta.c.version)).scalar() if has_meta else None
        if version is None and found.has_table(runs.name):
            columns = {c["name"] for c in found.get_columns(runs.name)}
            if foreign_runs(columns):
                raise ConfigurationError(foreign_message(where, columns))
    if version is not None and version > SCHEMA_VERSION:
        raise ConfigurationError(
            f"{where} was written by a newer Marathon (schema {version}; this one knows up to "
            f"{SCHEMA_VERSION}): upgrade Marathon to use it"
        )
    metadata.create_all(engine)
    create_server_events(engine)
    with engine.begin() as conn:
        if version is None:
            conn.execute(schema_meta.insert().values(id=1, version=SCHEMA_VERSION))
            return
        for step_version in range(version + 1, SCHEMA_VERSION + 1):
            for step in MIGRATIONS.get(step_version, ()):
                if isinstance(step, str):
                    conn.execute(text(step))
                else:
                    step(conn)
            conn.execute(
                update(schema_meta).where(schema_meta.c.id == 1).values(version=step_version)
            )
