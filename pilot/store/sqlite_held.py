"""A SQLite store's own connection: what every step and every resume does, without the engine.

A step appends its events, a resume reads its run's row, takes its lease and reads its
events: a few small statements each. Through SQLAlchemy's engine each costs a pool checkout,
connection events and result objects, and opening the store cost the engine itself and its
first connection (about 1.2 ms of a resume's first 10, figures in bench/README.md). So a
SQLite store keeps one plain ``sqlite3`` connection for those, opened on first use with the
same pragmas as the engine's, behind one lock (the store is used from several threads), and
creates the engine only when something else needs it (the report, retention, a new run).

Its errors are raised as the SQLAlchemy exceptions the rest of the pilot handles
(``OperationalError`` for a full disk or a lock held too long, ``IntegrityError`` for a
duplicate ``seq``).
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError

SQLITE_BUSY_MS = 250
"""How long SQLite itself waits for a lock before answering "database is locked"; the store
then waits out longer locks in Python (``pilot.store.lock_wait``), where a stop can end
the wait."""
SQLITE_PAGE_SIZE = 16384
SQLITE_WAL_BYTES = 4 * 1024 * 1024
"""How much WAL a connection lets build up before it checkpoints: SQLite's own default
(1,000 pages) in bytes. Counted in pages, 16 KiB pages would let it reach 16 MiB, and the
first connection after a kill reads the whole WAL to rebuild its index: a resume's first
statement took 3.5 ms for that instead of under 1 (figures in bench/README.md)."""
SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL", "off": "OFF"}
"""A store's durability as SQLite's ``synchronous`` setting."""

_T = TypeVar("_T")


def apply_pragmas(connection: Any, durability: str) -> None:
    """The settings every connection to a store's file gets (the engine's and the held one)."""
    cursor = connection.cursor()
    # Pages of 16 KiB for a new file (no effect on an existing one): an event of a few KB (a
    # tool result) fits several to a page instead of leaving half of a 4 KiB page empty
    # (figures in bench/README.md).
    cursor.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA synchronous={SYNCHRONOUS[durability]}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
    (page_size,) = cursor.execute("PRAGMA page_size").fetchone()
    cursor.execute(f"PRAGMA wal_autocheckpoint={SQLITE_WAL_BYTES // page_size}")
    cursor.close()


@functools.cache
def sqlite_dialect() -> Any:
    """SQLAlchemy's pysqlite dialect, for the column types' processors and the statements
    compiled for the held connection (no engine needed for either)."""
    from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

    return SQLiteDialect_pysqlite()


class HeldSqlite:
    """One ``sqlite3`` connection, opened on first use by ``connect`` and kept until
    ``close``; every use holds its lock."""

    def __init__(self, connect: Callable[[], Any], release: Callable[[Any], None]) -> None:
        self._connect = connect
        self._release = release
        self.lock = threading.RLock()
        self._connection: Any = None

    @classmethod
    def of_file(cls, path: str, durability: Callable[[], str]) -> HeldSqlite:
        """A connection of its own to the database file at ``path``, its ``synchronous``
        from ``durability()`` when it opens."""

        def connect() -> sqlite3.Connection:
            connection = sqlite3.connect(
                path, timeout=SQLITE_BUSY_MS / 1000, check_same_thread=False
            )
            try:
                apply_pragmas(connection, durability())
            except BaseException:
                connection.close()
                raise
            return connection

        return cls(connect, lambda connection: connection.close())

    def connection(self) -> sqlite3.Connection:
        """The DBAPI connection (call with ``lock`` held)."""
        if self._connection is None:
            self._connection = _translated("connect", (), self._connect)
        raw = self._connection
        return getattr(raw, "dbapi_connection", raw)  # a pooled connection's driver one

    def rows(self, sql: str, parameters: Sequence[Any] = ()) -> list[Any]:
        """Every row of one query."""
        with self.lock:
            connection = self.connection()

            def read() -> list[Any]:
                cursor = connection.execute(sql, parameters)
                try:
                    return cursor.fetchall()
                finally:
                    cursor.close()

            return _translated(sql, parameters, read)

    def transaction(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """``work(connection)`` in one transaction: committed, or rolled back if it raises."""
        with self.lock:
            connection = self.connection()

            def run() -> _T:
                with connection:
                    return work(connection)

            return _translated("transaction", (), run)

    def pragma(self, statement: str) -> None:
        """Run ``statement`` on the connection if it is open (a new one gets the pragmas
        anew)."""
        with self.lock:
            if self._connection is not None:
                _translated(statement, (), lambda: self.connection().execute(statement).close())

    def close(self) -> None:
        with self.lock:
            if self._connection is not None:
                connection, self._connection = self._connection, None
                self._release(connection)


def _translated(statement: str, parameters: Any, work: Callable[[], _T]) -> _T:
    """``work()``, a driver error raised as SQLAlchemy's exception for it."""
    try:
        return work()
    except sqlite3.Error as exc:
        raise DBAPIError.instance(
            statement, parameters, exc, sqlite3.Error, dialect=sqlite_dialect()
        ) from exc
