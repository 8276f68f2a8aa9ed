"""A run's record as read (``RunRecord``, ``LaunchFacts``) and who is still driving it,
without SQLAlchemy: ``pilot runs`` reads a SQLite store through plain sqlite3
(``pilot.store.sqlite_list``) and builds these, and the statements that write them are
``pilot.store.runs``' and ``pilot.store.lease``'s.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

ACTIVE_STATUSES = ("running", "paused", "cancelling")
"""Runs that still own their workspace (a queued run has none yet)."""
DURABILITIES = ("normal", "full")
"""A run's durability: normal survives any process death, full also a power cut (fsync)."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def new_run_id() -> str:
    return secrets.token_hex(4)


@dataclass(frozen=True)
class LaunchFacts:
    """What a run was started with besides its workflow and params: kept in its own columns
    so that a resume (or a worker) starts it the same way, and its params stay the user's."""

    started_at: str = ""
    """The start time its templates saw (ISO 8601; "" for a queued run not yet started)."""
    base_dir: str | None = None
    """The folder its workflow's relative paths are read from."""
    endpoints: tuple[str, ...] = ()
    """The ``--endpoint``s it was started with (() when it uses the workflow's)."""
    dry_run: bool = False
    """A dry run: its resume serves the simulated model again."""
    durability: str = "normal"
    """``normal`` or ``full`` (fsync on each commit): a resume or a worker keeps it."""

    def columns(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "base_dir": self.base_dir,
            "endpoints": list(self.endpoints) or None,
            "dry_run": self.dry_run,
            "durability": self.durability,
        }


@dataclass(frozen=True)
class RunRecord:
    id: str
    workflow_name: str
    workflow_path: str
    workflow_text: str
    params: dict[str, Any]
    workspace: str
    status: str
    status_reason: str
    phase: str
    steps: int
    prompt_tokens: int
    completion_tokens: int
    last_seq: int
    created_at: datetime
    updated_at: datetime
    lease_owner: str | None
    lease_expires_at: datetime | None
    origin: str = "cli"
    launch: LaunchFacts = field(default_factory=LaunchFacts)

    @classmethod
    def from_row(
        cls, row: Any, last_seq: int | None = None, last_event_at: datetime | None = None
    ) -> RunRecord:
        """The record of ``row`` (a result row of the ``runs`` columns) and of its last event
        (``last_seq``, ``last_event_at``: None when it has none): the row's ``updated_at``
        moves only with its summary, so the run's last activity is the later of the two."""
        updated_at = aware(row.updated_at)
        if last_event_at is not None:
            updated_at = max(updated_at, aware(last_event_at))  # type: ignore[type-var]
        return cls(
            id=row.id,
            workflow_name=row.workflow_name,
            workflow_path=row.workflow_path,
            workflow_text=row.workflow_text,
            params=dict(row.params or {}),
            workspace=row.workspace,
            status=row.status,
            status_reason=row.status_reason or "",
            phase=row.phase or "",
            steps=row.steps,
            prompt_tokens=row.prompt_tokens,
            completion_tokens=row.completion_tokens,
            last_seq=last_seq or 0,
            created_at=aware(row.created_at),  # type: ignore[arg-type]
            updated_at=updated_at,  # type: ignore[arg-type]
            lease_owner=row.lease_owner,
            lease_expires_at=aware(row.lease_expires_at),
            origin=row.origin or "cli",
            launch=LaunchFacts(
                started_at=row.started_at or "",
                base_dir=row.base_dir,
                endpoints=tuple(str(u) for u in row.endpoints or ()),
                dry_run=bool(row.dry_run),
                durability=row.durability or "normal",
            ),
        )


def owner_is_dead_local_process(owner: str) -> bool:
    """A lease owner (``host:pid:nonce``) that is a process of this host that is gone (or a
    zombie): its run is interrupted, whatever its lease's expiry says."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # A zombie (killed but not yet reaped by its parent) still answers kill(0).
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def lease_holder_gone(record: RunRecord, now: datetime | None = None) -> bool:
    """A live-looking run (running, cancelling) whose driver is not there: no lease, an
    expired one, or one held by a process of this host that no longer exists."""
    if record.status not in ("running", "cancelling"):
        return False
    owner, expires = record.lease_owner, record.lease_expires_at
    if not owner or expires is None or expires <= (now or utcnow()):
        return True
    return owner_is_dead_local_process(owner)


def shown_status(record: RunRecord) -> str:
    """The status the views show: ``interrupted`` for a run whose driver died (``pilot
    resume`` continues it), else the stored one."""
    return "interrupted" if lease_holder_gone(record) else record.status
