"""How a sitting of a run ends, as the process reports it: the outcome and its exit code.

``RunOutcome`` is what ``Runner.start`` and ``Runner.resume`` return; a database that takes no
more writes (full, or locked past the bound) is told here on stderr, since nothing can be
recorded, and the run resumes from its last committed event.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
        if self.status == "paused" and self.reason.startswith((STORAGE_FULL, STORAGE_BUSY)):
            return EXIT_CODES["storage_full"]
        return EXIT_CODES.get(self.status, 1)


def storage_full_outcome(run_id: str, state: RunState) -> RunOutcome:
    """The database cannot take one more write: say so (stderr, as nothing can be recorded)
    and stop; the run resumes from its last committed event once there is room."""
    reason = f"{STORAGE_FULL}: free space then `pilot resume {run_id}`"
    print(f"error: {reason}", file=sys.stderr, flush=True)
    return RunOutcome(run_id, "paused", reason, state)


def store_busy_outcome(run_id: str, state: RunState, exc: StoreBusy) -> RunOutcome:
    """The database is locked by another process past the bound: like a full disk, nothing
    can be recorded, so say so (stderr) and stop; the run resumes from its last event."""
    reason = f"{exc}: `pilot resume {run_id}`"
    print(f"error: {reason}", file=sys.stderr, flush=True)
    return RunOutcome(run_id, "paused", f"{STORAGE_BUSY}: {reason}", state)
