"""Retention: remove old finished runs and everything they left behind, then reclaim the space.

A run older than the cutoff (by its last update) that has finished is removed with its events
and run row, its artifacts directory, its own worktree (``git worktree`` record and files; what
was never committed on its branch goes with it), its private snapshot ref
``refs/marathon/<id>`` and its snapshot index; then the database is vacuumed. The run's branch
stays unless ``delete_branches``.
Running runs are never touched; paused ones only with ``include_paused``; failed ones are kept
with ``keep_failed``. Files go before rows, so a gc interrupted half-way finds the same runs
again next time and finishes the job. Nothing else in the user's repository is changed (git's
own gc prunes the snapshot commits once no ref holds them).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pilot.store import layout, queries
from pilot.store.event_store import EventStore

REMOVABLE = ("succeeded", "failed", "cancelled", "limit")
_BATCH = 500


@dataclass
class GcRun:
    id: str
    status: str
    updated_at: datetime
    events: int = 0
    workspace: str = ""
    artifacts: str = ""
    artifact_bytes: int = 0
    ref_removed: bool = False
    index_removed: bool = False
    worktree_removed: bool = False
    branch_removed: bool = False
    repository: str = ""
    branch: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class GcReport:
    cutoff: datetime
    dry_run: bool
    removed: list[GcRun] = field(default_factory=list)
    kept: list[tuple[str, str, str]] = field(default_factory=list)
    """Runs older than the cutoff that were kept: (id, status, why)."""
    server_events: int = 0
    db_bytes_before: int | None = None
    db_bytes_after: int | None = None
    vacuumed: bool = False

    @property
    def events(self) -> int:
        return sum(r.events for r in self.removed)

    @property
    def artifact_bytes(self) -> int:
        return sum(r.artifact_bytes for r in self.removed)

    @property
    def refs(self) -> int:
        return sum(1 for r in self.removed if r.ref_removed)

    @property
    def db_bytes_freed(self) -> int | None:
        if self.db_bytes_before is None or self.db_bytes_after is None:
            return None
        return self.db_bytes_before - self.db_bytes_after


def database_bytes(store: EventStore) -> int | None:
    """The SQLite file's size with its WAL (what the disk really holds); None for servers."""
    path = layout.sqlite_file(store)
    if path is None:
        return None
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def gc(
    store: EventStore,
    older_than: timedelta,
    *,
    keep_failed: bool = False,
    include_paused: bool = False,
    dry_run: bool = False,
    now: datetime | None = None,
    delete_branches: bool = False,
) -> GcReport:
    """Remove finished runs last updated before ``now - older_than``; see the module doc."""
    cutoff = (now or datetime.now(UTC)) - older_than
    report = GcReport(cutoff=cutoff, dry_run=dry_run, db_bytes_before=database_bytes(store))
    for old in queries.runs_updated_before(store, cutoff):
        why = _keep_reason(old.status, keep_failed=keep_failed, include_paused=include_paused)
        if why:
            report.kept.append((old.id, old.status, why))
            continue
        run = GcRun(id=old.id, status=old.status, updated_at=old.updated_at, events=old.events)
        workspace, run.repository, run.branch = _workspace_of(store, old.id)
        run.workspace = workspace or old.workspace
        _clean_files(store, run, dry_run=dry_run, delete_branch=delete_branches)
        report.removed.append(run)

    ids = [r.id for r in report.removed]
    if not dry_run:
        for start in range(0, len(ids), _BATCH):
            store.delete_runs(ids[start : start + _BATCH])
    report.server_events = _old_server_events(store, cutoff, set(ids), delete_them=not dry_run)
    if dry_run:
        return report
    if report.removed or report.server_events:
        queries.vacuum(store)
        report.vacuumed = True
    report.db_bytes_after = database_bytes(store)
    return report


def _keep_reason(status: str, *, keep_failed: bool, include_paused: bool) -> str:
    if status == "failed" and keep_failed:
        return "failed (--keep-failed)"
    if status == "paused":
        return "" if include_paused else "paused (may still be resumed; --include-paused)"
    if status not in REMOVABLE:
        return f"{status} (not finished)"
    return ""


def _workspace_of(store: EventStore, run_id: str) -> tuple[str, str, str]:
    """The run's workspace, the checkout its worktree came from ("" in place), its branch."""
    payload = queries.run_started_payload(store, run_id) or {}
    return (
        str(payload.get("workspace") or ""),
        str(payload.get("repository") or ""),
        str(payload.get("branch") or ""),
    )


def _clean_files(store: EventStore, run: GcRun, *, dry_run: bool, delete_branch: bool) -> None:
    """Artifacts, the worktree, the snapshot ref and index (and the branch when asked); each
    failure becomes a note."""
    artifacts = layout.artifacts_dir(store, run.id)
    if artifacts.is_dir():
        run.artifacts = str(artifacts)
        run.artifact_bytes = _tree_bytes(artifacts)
        if not dry_run:
            shutil.rmtree(artifacts, ignore_errors=True)
            shutil.rmtree(layout.checkpoint_dir(store, run.id), ignore_errors=True)
            if artifacts.exists():
                run.notes.append(f"could not remove all of {artifacts}")
    if run.repository:
        _clean_worktree(run, dry_run=dry_run, delete_branch=delete_branch)
        return
    if not run.workspace:
        return
    root = Path(run.workspace)
    if not root.is_dir():
        run.notes.append(f"workspace {root} is gone; no ref to remove")
        return
    from pilot.workspace.snapshot import GitError, GitRepo, snapshot_ref

    repo = GitRepo(root)
    try:
        if not repo.is_repo():
            run.notes.append(f"workspace {root} is no longer a git repository")
            return
        ref = snapshot_ref(run.id)
        if repo.git("rev-parse", "--verify", "-q", ref, check=False):
            run.ref_removed = True
            if not dry_run:
                repo.git("update-ref", "-d", ref)
        index = repo.git_dir / "marathon" / f"{run.id}.index"
        if index.exists():
            run.index_removed = True
            if not dry_run:
                index.unlink()
    except (GitError, OSError) as exc:
        run.notes.append(f"git in {root}: {str(exc).splitlines()[0]}")


def _clean_worktree(run: GcRun, *, dry_run: bool, delete_branch: bool) -> None:
    """A run's own worktree: its files and git's record of it, the snapshot ref, and the
    branch when asked. The user's checkout (HEAD, index, branches) is not touched."""
    from pilot.workspace.snapshot import GitError, GitRepo, remove_worktree, snapshot_ref

    source = GitRepo(Path(run.repository))
    if not Path(run.repository).is_dir() or not source.is_repo():
        run.notes.append(f"repository {run.repository} is gone; nothing of git to remove")
        if not dry_run and Path(run.workspace).is_dir():
            shutil.rmtree(run.workspace, ignore_errors=True)
        return
    try:
        path = Path(run.workspace)
        run.worktree_removed = path.exists()
        run.index_removed = run.worktree_removed
        if not dry_run:
            run.worktree_removed = remove_worktree(source, path) or run.worktree_removed
        ref = snapshot_ref(run.id)
        if source.git("rev-parse", "--verify", "-q", ref, check=False):
            run.ref_removed = True
            if not dry_run:
                source.git("update-ref", "-d", ref)
        if delete_branch and run.branch:
            branch = f"refs/heads/{run.branch}"
            if source.git("rev-parse", "--verify", "-q", branch, check=False):
                run.branch_removed = True
                if not dry_run:
                    source.git("update-ref", "-d", branch)
    except (GitError, OSError) as exc:
        run.notes.append(f"git in {run.repository}: {str(exc).splitlines()[0]}")


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += (Path(dirpath) / name).lstat().st_size
            except OSError:
                pass
    return total


def _old_server_events(
    store: EventStore, cutoff: datetime, removed: set[str], *, delete_them: bool
) -> int:
    """The brain's rows older than the cutoff and than every run that stays (its report may
    show them)."""
    created = queries.run_created_times(store)
    limit = min([cutoff, *(at for run_id, at in created.items() if run_id not in removed)])
    return queries.delete_server_events_before(store, limit, dry_run=not delete_them)


def format_bytes(count: int | None) -> str:
    if count is None:
        return "?"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def describe(report: GcReport, *, limit: int = 20) -> list[str]:
    """The lines ``pilot gc`` prints: what was (or would be) freed, and what was kept and why."""
    verb = "would remove" if report.dry_run else "removed"
    lines = [
        f"{verb} {len(report.removed)} run(s) last updated before "
        f"{report.cutoff.astimezone():%Y-%m-%d %H:%M}: {report.events} event(s), "
        f"{format_bytes(report.artifact_bytes)} of artifacts, {report.refs} snapshot ref(s), "
        f"{report.server_events} old server event(s)"
    ]
    if report.dry_run:
        lines.append(f"database now {format_bytes(report.db_bytes_before)} (dry run: unchanged)")
    elif report.db_bytes_before is not None:
        lines.append(
            f"database {format_bytes(report.db_bytes_before)} -> "
            f"{format_bytes(report.db_bytes_after)} "
            f"(freed {format_bytes(report.db_bytes_freed)}"
            f"{', vacuumed' if report.vacuumed else ''})"
        )
    for run in report.removed[:limit]:
        extra = f"; {'; '.join(run.notes)}" if run.notes else ""
        lines.append(
            f"  {run.id} {run.status} {run.updated_at.astimezone():%Y-%m-%d}: {run.events} "
            f"events, artifacts {format_bytes(run.artifact_bytes)}, "
            f"ref {'yes' if run.ref_removed else 'no'}"
            f"{', worktree' if run.worktree_removed else ''}"
            f"{', branch ' + run.branch if run.branch_removed else ''}{extra}"
        )
    if len(report.removed) > limit:
        lines.append(f"  ... and {len(report.removed) - limit} more")
    for run_id, status, why in report.kept[:limit]:
        lines.append(f"  kept {run_id} {status}: {why}")
    if len(report.kept) > limit:
        lines.append(f"  ... and {len(report.kept) - limit} more kept")
    return lines
