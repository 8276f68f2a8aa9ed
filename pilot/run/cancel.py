"""``pilot cancel``: a run asked to stop, or ended at once when nobody drives it.

A driven run (its lease held elsewhere) gets the status ``cancelling``, which its driver reads
at its next lease renewal or at once when rung (``pilot.run.cancel_bell``), and then finishes
as cancelled; a run nobody drives is finished here. Kept apart from the runner so that
``pilot cancel`` loads neither the agent loop nor the workspace code.
"""

from __future__ import annotations

from pilot import events as ev
from pilot.agent.state import fold
from pilot.errors import LeaseHeld
from pilot.run.cancel_bell import ring
from pilot.store.event_store import EventStore, lease_owner_id


def request_cancel(store: EventStore, run_id: str) -> str:
    """Cancel a run: a live one is asked to stop (it finishes as cancelled); else at once."""
    record = store.get_run(run_id)
    if record.status in ("succeeded", "failed", "cancelled", "limit"):
        return f"run {run_id} already ended ({record.status})"
    owner = lease_owner_id()
    try:
        store.acquire_lease(run_id, owner, seconds=30)
    except LeaseHeld:
        store.set_status(run_id, "cancelling", "cancel requested")
        if ring(store.get_run(run_id).lease_owner):
            return f"run {run_id} is running; told it to stop at its next safe point (cancelled)"
        return (
            f"run {run_id} is running in another process or host; it stops and finishes as "
            "cancelled when it next renews its lease (within 20 s)"
        )
    state = fold(store.load_events(run_id))
    seq = state.last_seq + 1
    store.append(
        run_id,
        seq,
        ev.RunFinished(status="cancelled", reason="cancelled by the user"),
        totals={},
    )
    store.release_lease(run_id, owner)
    return f"run {run_id} cancelled"
