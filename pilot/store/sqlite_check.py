"""The check that a SQLite file is ours before anything opens it with our pragmas, and the
schema's version and name: plain sqlite3, no SQLAlchemy, so that ``pilot runs`` (which reads
a SQLite store through sqlite3, ``pilot.store.sqlite_list``) refuses a bad file exactly as an
opened store does (``pilot.store.connections`` and ``pilot.store.schema`` use these).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pilot.errors import ConfigurationError

SCHEMA_VERSION = 4
"""The schema version this code writes (``pilot.store.schema`` migrates older files to it)."""
SCHEMA_TABLE = "marathon_schema"
"""The table holding the file's schema version: a file without it is not (yet) ours."""


def foreign_runs(columns: set[str]) -> bool:
    """A ``runs`` table with these columns is another program's (ours has these six since
    its first version)."""
    ours = {"id", "workflow_name", "workflow_text", "params", "status", "lease_owner"}
    return not ours <= columns


def foreign_message(where: str, columns: set[str]) -> str:
    return (
        f"{where} holds a `runs` table that is not Marathon's (its columns: "
        f"{', '.join(sorted(columns)) or 'none'}); it was left unchanged. Point --db or "
        "MARATHON_HOME at Marathon's own database"
    )


def check_sqlite_file(path: Path) -> None:
    """Refuse a file that is not a SQLite database, or one whose ``runs`` table is another
    program's, before any connection with our pragmas (WAL mode rewrites the header) opens
    it. Read-only; an empty or missing file is a new database."""
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return
    except OSError:
        return
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return  # unreadable: the real open says why
    try:
        names = {n for (n,) in connection.execute("SELECT name FROM sqlite_master")}
        if "runs" in names and SCHEMA_TABLE not in names:
            columns = {row[1] for row in connection.execute("PRAGMA table_info(runs)")}
            if foreign_runs(columns):
                raise ConfigurationError(foreign_message(str(path), columns))
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc) or "malformed" in str(exc):
            raise ConfigurationError(
                f"{path} is not a SQLite database ({exc}); it was left unchanged. Point --db "
                "or MARATHON_HOME at Marathon's own database, or move the file away"
            ) from None
        return  # locked, unreadable: the real open waits it out or says why
    finally:
        connection.close()
