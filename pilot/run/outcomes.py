"""How a sitting of a run ends, as the process reports it: the outcome and its exit code.

``RunOutcome`` is what ``Runner.start`` and ``Runner.resume`` return; a database that takes no
more writes (full, or locked past the bound) is told here on stderr, since nothing can be
recorded, and the run resumes from its last committed event.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pilot import events as ev
from pilot.agent.state import RunState

if TYPE_CHECKING:
    from pilot.store.event_store import StoreBusy

EXIT_CODES = {
    "succeeded": 0,
    "paused": 0,
    "failed": 1,
    "limit": 3,
    "cancelled": 4,
    "server_unavailable": 75,
    "storage_full": 74,
}
"""Process exit codes per outcome (2 is a usage or workflow error, from the CLI)."""
STORAGE_FULL = "the database disk is full"
STORAGE_BUSY = "the database is locked"
STORAGE_GONE = "the database is unreachable"


@dataclass
class RunOutcome:
    run_id: str
    status: str
    reason: str
    state: RunState

    @property
    def exit_code(self) -> int:
        if self.status == "paused" and self.reason.startswith("model server unavailable"):
            return EXIT_CODES["server_unavailable"]
        if self.status == "paused" and self.reason.startswith(
            (STORAGE_FULL, STORAGE_BUSY, STORAGE_GONE)
        ):
            return EXIT_CODES["storage_full"]
        return EXIT_CODES.get(self.status, 1)


def status_of(event: ev.Event) -> str | None:
    """The status a run's row takes from ``event`` (None: the event changes none)."""
    if isinstance(event, ev.RunFinished):
        return event.status
    if isinstance(event, ev.RunPaused):
        return "paused"
    if isinstance(event, ev.RunStarted | ev.RunResumed):
        return "running"
    return None


def storage_full_outcome(run_id: str, state: RunState) -> RunOutcome:
    """The database cannot take one more write: say so (stderr, as nothing can be recorded)
    and stop; the run resumes from its last committed event once there is room."""
    reason = f"{STORAGE_FULL}: free space then `pilot resume {run_id}`"
    print(f"error: {reason}", file=sys.stderr, flush=True)
    return RunOutcome(run_id, "paused", reason, state)


def store_busy_outcome(run_id: str, state: RunState, exc: StoreBusy) -> RunOutcome:
    """The database is locked by another process past the bound, or cannot be reached (its
    server stopped): like a full disk, nothing can be recorded, so say so (stderr) and stop
    (exit 74); the run resumes from its last committed event."""
    from pilot.store.lock_wait import StoreGone  # the store only once it failed

    reason = f"{exc}: `pilot resume {run_id}`"
    print(f"error: {reason}", file=sys.stderr, flush=True)
    kind = STORAGE_GONE if isinstance(exc, StoreGone) else STORAGE_BUSY
    return RunOutcome(run_id, "paused", f"{kind}: {reason}", state)
