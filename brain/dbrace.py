"""Schema creation that survives several processes opening one new database at once.

The brain's supervisors (one per fleet replica), the pilot and its workers may all open the
same fresh SQLite file (or PostgreSQL database) together. SQLAlchemy's ``create_all`` checks
that a table is missing, then creates it: between the two, another process may win, and the
loser fails with "already exists" (or a duplicate key on PostgreSQL's catalog). Trying again
sees the winner's schema, so that failure is retried, never shown.

The retries are tenacity's. Its import is paid only by a process that lost the race: every
store open runs this (a resume's ``open -> state`` is about 10 ms in bench/README.md), and
importing tenacity there costs 10 to 26 ms (fresh processes), each call through ``Retrying``
28 us of CPU (``python -m bench.libraries backoff``). So the first try is a plain call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

__all__ = ["retry_schema_race"]

T = TypeVar("T")
_RACE_MARKS = ("already exists", "duplicate", "unique constraint")
_SCHEMA_ERRORS = (OperationalError, IntegrityError, ProgrammingError)
PAUSE_S = 0.05
"""The first pause after a lost race; each later one is longer by as much (50, 100, 150 ms)."""


def _lost_race(exc: BaseException) -> bool:
    return isinstance(exc, _SCHEMA_ERRORS) and any(mark in str(exc).lower() for mark in _RACE_MARKS)


def retry_schema_race(action: Callable[[], T], attempts: int = 5) -> T:
    """Run ``action`` (schema creation or migration), again if it lost a creation race: up to
    ``attempts`` tries in all; any other failure, or the last try's, is raised."""
    try:
        return action()
    except _SCHEMA_ERRORS as exc:
        if attempts < 2 or not _lost_race(exc):
            raise
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_incrementing

    time.sleep(PAUSE_S)  # the winner may still be creating: give it a moment first
    retrying = Retrying(
        stop=stop_after_attempt(attempts - 1),
        wait=wait_incrementing(start=2 * PAUSE_S, increment=PAUSE_S),
        retry=retry_if_exception(_lost_race),
        reraise=True,
    )
    return retrying(action)
