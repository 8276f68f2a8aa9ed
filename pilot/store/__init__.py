"""The store wing: where a run's truth is kept, and the only place that speaks SQL.

Modules: ``event_store`` (runs and their append-only events in SQLite or any SQLAlchemy
URL; leases, the queue's ``SKIP LOCKED`` claim), ``sqlite_append`` (the one-connection
fast path for an event append), ``checkpoint`` and ``statecodec`` (a live run's folded
state kept beside the database so a resume replays only the events since) and
``retention`` (``pilot gc``: remove old finished runs and reclaim the space).

It must not know what a step means: events go in and come out; folding them is
``pilot.state``'s job.
"""

from __future__ import annotations

from pilot.store.event_store import (
    ACTIVE_STATUSES,
    EventStore,
    RunRecord,
    StoreBusy,
    new_run_id,
)

__all__ = [
    "ACTIVE_STATUSES",
    "EventStore",
    "RunRecord",
    "StoreBusy",
    "new_run_id",
]
