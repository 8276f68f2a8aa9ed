"""How a store reaches its database: SQLAlchemy's engine (made on first use), and on SQLite
the store's held connection and the check that a file is ours before anything touches it.

``pilot.store.opening`` turns a user's URL into a store, or an error; this module is what
the store then connects with. Every SQLite connection gets the same pragmas
(``sqlite_held.apply_pragmas``), its ``synchronous`` from the store's durability, which
``Connections.use_durability`` may change on connections already open.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine

from pilot.store.sqlite_check import check_sqlite_file
from pilot.store.sqlite_held import SQLITE_BUSY_MS, SYNCHRONOUS, HeldSqlite, apply_pragmas


def sqlite_url(url: str) -> str | URL:
    """A plain ``sqlite:///<file>`` URL as SQLAlchemy's ``URL`` (made, not parsed: its parser
    compiles a regular expression on first use, a resume's first half millisecond); any
    other form as given."""
    file = url.removeprefix("sqlite:///")
    if file == url or not file or "?" in file or "%" in file or file.startswith(":memory:"):
        return url
    return URL.create("sqlite", database=file)


class Connections:
    """The engine (lazy) and, on SQLite, the held connection of one store URL."""

    def __init__(self, url: str, durability: str) -> None:
        self.url = url
        self.durability = durability
        self.is_sqlite = url.startswith("sqlite")
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self.held: HeldSqlite | None = None
        if self.is_sqlite:
            made = sqlite_url(url)
            if isinstance(made, URL):
                check_sqlite_file(Path(str(made.database)).expanduser())
                self.held = HeldSqlite.of_file(str(made.database), lambda: self.durability)
            else:  # an in-memory or otherwise spelled URL: the engine's own
                self.held = HeldSqlite(
                    lambda: self.engine.raw_connection(), lambda pooled: pooled.close()
                )

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._engine = self._make_engine()
        return self._engine

    def _make_engine(self) -> Engine:
        if not self.is_sqlite:
            return create_engine(self.url, pool_pre_ping=True)
        engine = create_engine(
            sqlite_url(self.url), connect_args={"timeout": SQLITE_BUSY_MS / 1000}
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            apply_pragmas(dbapi_connection, self.durability)

        return engine

    def use_durability(self, durability: str) -> None:
        """From now on, commit with ``durability`` (SQLite's ``synchronous``): on the held
        connection at once, on the engine's as they are next opened."""
        if durability == self.durability:
            return
        self.durability = durability
        if self.held is not None:
            self.held.pragma(f"PRAGMA synchronous={SYNCHRONOUS[durability]}")
        if self._engine is not None:
            self._engine.dispose()

    def close(self) -> None:
        if self.held is not None:
            self.held.close()
        if self._engine is not None:
            self._engine.dispose()
