"""The store wing: where a run's truth is kept, and the only place that speaks SQL.

Modules: ``event_store`` (the facade: runs and their append-only events in SQLite or any
SQLAlchemy URL), ``schema`` (the Core tables, their version and migrations), ``connections``
(the engine, the held SQLite connection, a file refused unless it is ours), ``runs`` (the
run rows and their launch facts; the queue's ``SKIP LOCKED`` claim), ``lease`` (who drives a
run, and whether it is still alive), ``lock_wait`` (another process's lock waited out with
tenacity; ``StoreBusy`` / ``StoreGone``), ``sqlite_read`` (a resume's raw reads),
``sqlite_held`` (a SQLite store's own
connection: what every step and resume does, without the engine), ``sqlite_append`` (the
event append on it), ``queries`` (the named reads of the report, ``pilot show``
and retention), ``layout`` (where each run's files live), ``opening`` (a user's store URL
opened, or an error naming what is wrong with it), ``checkpoint`` and ``statecodec`` (a live
run's folded state kept beside the database so a resume replays only the events since) and
``retention`` (``pilot gc``: remove old finished runs and reclaim the space).

``StoreError`` (any database error) and ``StoreOperationalError`` (the database could not do
it: full, locked, gone) are SQLAlchemy's, named here so that no module outside this wing
imports SQLAlchemy.

It must not know what a step means: events go in and come out; folding them is
``pilot.agent.state``'s job.
"""

from __future__ import annotations

from sqlalchemy.exc import OperationalError as StoreOperationalError
from sqlalchemy.exc import SQLAlchemyError as StoreError

from pilot.store.event_store import (
    ACTIVE_STATUSES,
    DURABILITIES,
    EventStore,
    LaunchFacts,
    RunRecord,
    StoreBusy,
    StoreGone,
    new_run_id,
)

__all__ = [
    "ACTIVE_STATUSES",
    "DURABILITIES",
    "EventStore",
    "LaunchFacts",
    "RunRecord",
    "StoreBusy",
    "StoreError",
    "StoreGone",
    "StoreOperationalError",
    "new_run_id",
]
