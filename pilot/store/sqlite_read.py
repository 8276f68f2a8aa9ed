"""The raw SQLite path of a resume: a run's row read and its lease taken on the held
connection (``pilot.store.sqlite_held``), without SQLAlchemy's statement compiler.

A resume's first query of the run is otherwise most of its cost (compiling the select of
every column and its two subqueries), and taking the lease is its first write. The SQL is
written here with the columns named from the Core table, so it stays in step with it, and
each value goes through the column type's own result or bind processor (dates, JSON), as
SQLAlchemy would do it. ``tests/test_store.py`` holds each to its Core statement.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from typing import Any

from pilot.store.records import RunRecord
from pilot.store.schema import events, runs
from pilot.store.sqlite_held import HeldSqlite, sqlite_dialect

RUN_BY_ID_SQL = (
    f"SELECT {', '.join(c.name for c in runs.c)}, "
    "(SELECT max(seq) FROM events WHERE events.run_id = runs.id), "
    "(SELECT at FROM events WHERE events.run_id = runs.id ORDER BY seq DESC LIMIT 1) "
    "FROM runs WHERE id = ?"
)
"""``runs.RUN_BY_ID`` as SQLite runs it."""
TAKE_LEASE_SQL = (
    "UPDATE runs SET lease_owner = ?, lease_expires_at = ?, updated_at = ? "
    "WHERE id = ? AND (lease_owner IS NULL OR lease_owner = ? OR lease_owner = ?)"
)
"""``lease.TAKE_LEASE`` as SQLite runs it, its parameters in ``TAKE_LEASE_ORDER``."""
TAKE_LEASE_ORDER = (
    "lease_owner", "lease_expires_at", "updated_at", "run_id_", "previous_", "owner_"
)  # fmt: skip


class _RunValues:
    """A ``runs`` row read straight from sqlite3, its columns by name as ``from_row`` reads
    them."""

    def __init__(self, names: Sequence[str], values: Sequence[Any]) -> None:
        self.__dict__.update(zip(names, values, strict=True))


def run_by_id(held: HeldSqlite, run_id: str) -> list[RunRecord]:
    """``runs.records(conn, runs.RUN_BY_ID, ...)`` on the held connection."""
    names, processors, at = _run_processors(sqlite_dialect())
    records = []
    for *values, last_seq, last_at in held.rows(RUN_BY_ID_SQL, (run_id,)):
        row = _RunValues(
            names, [v if f is None else f(v) for f, v in zip(processors, values, strict=True)]
        )
        records.append(RunRecord.from_row(row, last_seq, last_at if at is None else at(last_at)))
    return records


@functools.cache
def _run_processors(dialect: Any) -> tuple[list[str], list[Any], Any]:
    """The ``runs`` columns' names and result processors, and the events' ``at``'s."""
    names = [c.name for c in runs.c]
    processors = [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in runs.c]
    at = events.c.at.type.dialect_impl(dialect).result_processor(dialect, None)
    return names, processors, at


def take_lease(connection: sqlite3.Connection, values: dict[str, Any]) -> int:
    """``lease.TAKE_LEASE`` on the held connection (call inside its transaction); the dates
    go through the column type's own bind processor. Rows changed."""
    stamp = _datetime_processor(sqlite_dialect())
    parameters = [values[name] for name in TAKE_LEASE_ORDER]
    for position in (1, 2):
        parameters[position] = stamp(parameters[position]) if stamp else parameters[position]
    cursor = connection.execute(TAKE_LEASE_SQL, parameters)
    try:
        return cursor.rowcount
    finally:
        cursor.close()


@functools.cache
def _datetime_processor(dialect: Any) -> Any:
    return runs.c.updated_at.type.dialect_impl(dialect).bind_processor(dialect)
