"""Schema creation that survives several processes opening one new database at once.

The brain's supervisors (one per fleet replica), the pilot and its workers may all open the
same fresh SQLite file (or PostgreSQL database) together. SQLAlchemy's ``create_all`` checks
that a table is missing, then creates it: between the two, another process may win, and the
loser fails with "already exists" (or a duplicate key on PostgreSQL's catalog). Trying again
sees the winner's schema, so that failure is retried, never shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

__all__ = ["retry_schema_race"]

T = TypeVar("T")
_RACE_MARKS = ("already exists", "duplicate", "unique constraint")


def retry_schema_race(action: Callable[[], T], attempts: int = 5) -> T:
    """Run ``action`` (schema creation or migration), again if it lost a creation race."""
    for attempt in range(attempts):
        try:
            return action()
        except (OperationalError, IntegrityError, ProgrammingError) as exc:
            racing = any(mark in str(exc).lower() for mark in _RACE_MARKS)
            if not racing or attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover
