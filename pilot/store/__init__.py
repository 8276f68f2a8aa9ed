"""The store wing: where a run's truth is kept, and the only place that speaks SQL.

Modules: ``event_store`` (the facade: runs and their append-only events in SQLite or any
SQLAlchemy URL), ``schema`` (the Core tables, their version and migrations), ``connections``
(the engine, the held SQLite connection, a file refused unless it is ours), ``runs`` (the
run rows and their launch facts; the queue's ``SKIP LOCKED`` claim), ``lease`` (who drives a
run, and whether it is still alive), ``lock_wait`` (another process's lock waited out with
tenacity; ``StoreBusy`` / ``StoreGone``), ``records`` (a run's record as read and whether
its driver is alive, without SQLAlchemy), ``sqlite_check`` (a SQLite file checked to be
ours, plain sqlite3), ``sqlite_list`` (``pilot runs`` through plain sqlite3),
``sqlite_read`` (a resume's raw reads), ``sqlite_held`` (a SQLite store's own connection:
what every step and resume does, without the engine), ``sqlite_append`` (the event append on
it), ``queries`` (the named reads of the report, ``pilot show`` and retention), ``layout``
(where each run's files live), ``opening`` (a user's store URL opened, or an error naming
what is wrong with it), ``checkpoint`` and ``statecodec`` (a live run's folded state kept
beside the database so a resume replays only the events since) and ``retention`` (``pilot
gc``: remove old finished runs and reclaim the space).

``StoreError`` (any database error) and ``StoreOperationalError`` (the database could not do
it: full, locked, gone) are SQLAlchemy's, named here so that no module outside this wing
imports SQLAlchemy. The names are imported on first use (``__getattr__``): ``pilot runs``
reads a SQLite store through ``sqlite_list`` without importing SQLAlchemy at all.

It must not know what a step means: events go in and come out; folding them is
``pilot.agent.state``'s job.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "StoreOperationalError": ("sqlalchemy.exc", "OperationalError"),
    "StoreError": ("sqlalchemy.exc", "SQLAlchemyError"),
    **{
        name: ("pilot.store.event_store", name)
        for name in (
            "ACTIVE_STATUSES",
            "DURABILITIES",
            "EventStore",
            "LaunchFacts",
            "RunRecord",
            "StoreBusy",
            "StoreGone",
            "new_run_id",
        )
    },
}


def __getattr__(name: str) -> Any:
    """The wing's public names, imported when first asked for."""
    if name not in _WHERE:
        raise AttributeError(f"module 'pilot.store' has no attribute {name!r}")
    module, attribute = _WHERE[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


__all__ = sorted(_WHERE)
