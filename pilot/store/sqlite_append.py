"""The event append on SQLite, on the store's held connection (``pilot.store.sqlite_held``).

An append is one small transaction: INSERT the events, UPDATE the run's totals if they
changed, COMMIT. Through SQLAlchemy's ``engine.begin()`` + ``execute`` that is a pool checkout,
connection events, two statement-cache lookups, result objects and a checkin: many times the
SQLite work itself, several times per agent step (figures in bench/README.md). This keeps
the SQL SQLAlchemy compiles from the ORM tables and the bind processors of their column types,
and runs them on the held ``sqlite3`` connection instead.
Errors are re-raised as the SQLAlchemy exceptions the rest of the pilot handles
(``OperationalError`` for a full disk or a lock held too long, ``IntegrityError`` for a
duplicate ``seq``).

PostgreSQL keeps the engine path: there the round trip dominates, not the Python around it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import Insert, Update

from pilot.store.sqlite_held import HeldSqlite, sqlite_dialect


class _Statement:
    """One compiled statement: its SQL text and, per positional parameter, its name and the
    column type's bind processor (datetime -> the text SQLAlchemy stores), if any."""

    def __init__(self, sql: str, names: Sequence[str], processors: Sequence[Any]) -> None:
        self.sql = sql
        self.names = tuple(names)
        self.processed = tuple(
            (position, process) for position, process in enumerate(processors) if process
        )
        """Only the parameters that have a processor (here: the datetimes) are touched."""

    def parameters(self, values: Mapping[str, Any]) -> list[Any]:
        parameters = [values[name] for name in self.names]
        for position, process in self.processed:
            if parameters[position] is not None:
                parameters[position] = process(parameters[position])
        return parameters


class SqliteAppender:
    """``append`` = INSERT into ``events`` (one or more rows) + UPDATE ``runs`` (when there are
    values to set) in one transaction, on the held connection (thread-safe: its lock)."""

    def __init__(
        self, held: HeldSqlite, insert_event: Insert, update_run: Update, run_key: str
    ) -> None:
        self._held = held
        self._insert_event = insert_event
        self._update_run = update_run
        self._run_key = run_key
        self._insert: _Statement | None = None
        self._updates: dict[tuple[str, ...], _Statement] = {}

    def _compile(self, statement: Insert | Update, keys: Sequence[str]) -> _Statement:
        dialect = sqlite_dialect()
        compiled = statement.compile(dialect=dialect, column_keys=list(keys))
        names = compiled.positiontup or ()
        processors = [
            compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in names
        ]
        return _Statement(compiled.string, names, processors)

    def append(
        self,
        event_rows: Sequence[Mapping[str, Any]],
        run_id: str,
        run_values: Mapping[str, Any],
    ) -> None:
        """INSERT every row of ``event_rows``, then UPDATE the run (unless ``run_values`` is
        empty), then COMMIT."""
        keys = tuple(sorted(run_values))
        with self._held.lock:
            if self._insert is None:
                self._insert = self._compile(self._insert_event, tuple(event_rows[0]))
            insert = self._insert
            update = None
            if keys:
                update = self._updates.get(keys)
                if update is None:
                    update = self._updates[keys] = self._compile(self._update_run, keys)
                update_parameters = update.parameters({self._run_key: run_id, **run_values})
            statement: str = insert.sql
            parameters: Any = [insert.parameters(row) for row in event_rows]

            def write(connection: sqlite3.Connection) -> None:
                nonlocal statement, parameters
                if len(parameters) == 1:
                    connection.execute(statement, parameters[0])
                else:
                    connection.executemany(statement, parameters)
                if update is not None:
                    statement, parameters = update.sql, update_parameters
                    connection.execute(statement, parameters)

            try:
                self._held.transaction(write)
            except DBAPIError as exc:  # named with the statement that failed
                raise DBAPIError.instance(
                    statement, parameters, exc.orig, sqlite3.Error, dialect=sqlite_dialect()
                ) from exc.orig
