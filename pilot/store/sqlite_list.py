"""``pilot runs`` on a SQLite store, read through plain sqlite3: no SQLAlchemy import, which
was most of the command's CPU (issue 35; the figure is in bench/README.md).

Only a file already at this code's schema version is read here; anything else (a new, older
or partly made file, a lock, any sqlite3 error) answers None and the caller opens the store
the usual way, which migrates, waits out locks or says what is wrong. The values are turned
into Python as SQLAlchemy's SQLite column types turn them (dates stored naive in UTC, JSON as
text); ``tests/test_store.py`` holds this to ``EventStore.list_runs``.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

from pilot.store.records import RunRecord
from pilot.store.sqlite_check import SCHEMA_TABLE, SCHEMA_VERSION

COLUMNS = (
    "id", "workflow_name", "workflow_path", "workflow_text", "params", "workspace", "status",
    "status_reason", "phase", "steps", "prompt_tokens", "completion_tokens", "created_at",
    "updated_at", "lease_owner", "lease_expires_at", "origin", "started_at", "base_dir",
    "endpoints", "dry_run", "durability",
)  # fmt: skip
"""The ``runs`` columns ``RunRecord.from_row`` reads."""
LIST_SQL = (
    f"SELECT {', '.join(COLUMNS)}, "
    "(SELECT max(seq) FROM events WHERE events.run_id = runs.id), "
    "(SELECT at FROM events WHERE events.run_id = runs.id ORDER BY seq DESC LIMIT 1) "
    "FROM runs ORDER BY created_at DESC LIMIT ?"
)
"""``runs.list_runs`` (without ``since``) as SQLite runs it."""
_DATES = frozenset({"created_at", "updated_at", "lease_expires_at"})
_JSON = frozenset({"params", "endpoints"})
_BUSY_SECONDS = 0.25


class _Row:
    """A row's columns by name, as ``RunRecord.from_row`` reads them."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def list_runs(path: Path, limit: int) -> list[RunRecord] | None:
    """The ``limit`` newest runs of the store file at ``path`` (which exists and passed
    ``check_sqlite_file``), or None when the usual open must do it."""
    try:
        connection = sqlite3.connect(path, timeout=_BUSY_SECONDS)
    except sqlite3.Error:
        return None
    try:
        version = connection.execute(f"SELECT version FROM {SCHEMA_TABLE} WHERE id = 1").fetchall()
        if version != [(SCHEMA_VERSION,)]:
            return None
        rows = connection.execute(LIST_SQL, (limit,)).fetchall()
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    return [_record(row) for row in rows]


def _record(row: tuple[Any, ...]) -> RunRecord:
    *values, last_seq, last_at = row
    named = dict(zip(COLUMNS, values, strict=True))
    for name in _DATES:
        named[name] = _date(named[name])
    for name in _JSON:
        named[name] = None if named[name] is None else json.loads(named[name])
    return RunRecord.from_row(_Row(named), last_seq, _date(last_at))


def _date(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)
