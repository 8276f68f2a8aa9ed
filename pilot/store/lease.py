"""Who drives a run: the lease (an owner and an expiry on the run's row), its holder's
liveness, and taking, renewing and releasing it.

Only the lease holder appends to a run. A lease is free when unset, expired, ours, or held
by a process of this host that no longer exists: a SIGKILLed pilot cannot release its lease,
and waiting out its expiry would only delay the resume. The owner is ``host:pid:nonce`` so
that a process on the same host can tell.
"""

from __future__ import annotations

import os
import secrets
import socket
from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, or_, select, update
from sqlalchemy.engine import Engine

from pilot.errors import LeaseHeld
from pilot.store.records import (
    RunRecord,
    lease_holder_gone,
    owner_is_dead_local_process,
    shown_status,
    utcnow,
)
from pilot.store.schema import runs

TAKE_LEASE = update(runs).where(
    runs.c.id == bindparam("run_id_"),
    or_(
        runs.c.lease_owner.is_(None),
        runs.c.lease_owner == bindparam("previous_"),
        runs.c.lease_owner == bindparam("owner_"),
    ),
)
"""The lease's row, while its holder is nobody, the one seen (``previous_``) or us
(``owner_``); the SET clause comes from the other parameters' names."""
RE_EXPORTED = (lease_holder_gone, shown_status)
"""Named here for the modules that read liveness with the lease."""
HELD_LEASE = update(runs).where(
    runs.c.id == bindparam("run_id_"), runs.c.lease_owner == bindparam("owner_")
)


def lease_owner_id() -> str:
    """host:pid:nonce: the pid lets a resume on the same host see that a holder died."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def lease_values(run: RunRecord, owner: str, seconds: float) -> tuple[dict[str, Any], str]:
    """The parameters of ``TAKE_LEASE`` for ``owner``, and a note when a stale lease is
    taken over; LeaseHeld when a live holder has it."""
    now = utcnow()
    note = ""
    previous, expires = run.lease_owner, run.lease_expires_at
    if previous and previous != owner and expires and expires > now:
        if not owner_is_dead_local_process(previous):
            raise LeaseHeld(run.id, previous, expires)
        note = f"took over the lease of {previous}, whose process no longer exists"
    elif previous and previous != owner:
        note = f"took over the expired lease of {previous}"
    values = {
        "run_id_": run.id,
        "previous_": previous,
        "owner_": owner,
        "lease_owner": owner,
        "lease_expires_at": now + timedelta(seconds=seconds),
        "updated_at": now,
    }
    return values, note


def renew(engine: Engine, run_id: str, owner: str, seconds: float) -> bool:
    with engine.begin() as conn:
        expires = utcnow() + timedelta(seconds=seconds)
        params = {"run_id_": run_id, "owner_": owner, "lease_expires_at": expires}
        return conn.execute(HELD_LEASE, params).rowcount == 1


def release(engine: Engine, run_id: str, owner: str) -> None:
    with engine.begin() as conn:
        params = {"run_id_": run_id, "owner_": owner, "lease_owner": None}
        conn.execute(HELD_LEASE, {**params, "lease_expires_at": None})


def dead_local_holders(engine: Engine, owner: str) -> list[tuple[str, str]]:
    """Queue runs marked running whose holder is a process of this host that no longer
    exists (a SIGKILLed worker cannot release its leases): ``(run id, holder)``."""
    with engine.connect() as conn:
        held = conn.execute(
            select(runs.c.id, runs.c.lease_owner).where(
                runs.c.origin == "queue",
                runs.c.status == "running",
                runs.c.lease_owner.is_not(None),
            )
        ).all()
    return [
        (run_id, holder)
        for run_id, holder in held
        if holder != owner and owner_is_dead_local_process(holder)
    ]


def take_from(engine: Engine, run_id: str, holder: str, values: dict[str, Any]) -> bool:
    """Set ``values`` on the run while ``holder`` still has it; True if it did."""
    with engine.begin() as conn:
        result = conn.execute(
            update(runs).where(runs.c.id == run_id, runs.c.lease_owner == holder).values(**values)
        )
    return result.rowcount == 1
