"""Retention on real SQLite files and git repositories: what goes, what stays, what is freed."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pilot_harness import make_repo
from sqlalchemy import insert, update

from brain.events import server_events
from pilot import events as ev
from pilot.run.runner import Runner
from pilot.store.event_store import EventStore
from pilot.store.layout import artifacts_dir
from pilot.store.retention import database_bytes, describe, gc
from pilot.store.schema import runs as RunRow
from pilot.workspace.snapshot import GitRepo, take_snapshot

NOW = datetime(2025, 7, 1, 8, 0, tzinfo=UTC)


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=U", "-c", "user.email=u@x", *args],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture
def store(tmp_path: Path) -> EventStore:
    return EventStore(f"sqlite:///{tmp_path / 'state' / 'marathon.db'}")


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    return GitRepo(make_repo(tmp_path / "ws", {"a.txt": "one\n"}))


def make_run(
    store: EventStore,
    run_id: str,
    *,
    status: str,
    days_ago: float,
    repo: GitRepo | None = None,
    steps: int = 50,
) -> None:
    """A run with a snapshot ref, an index file, artifacts and ``steps`` bulky events."""
    store.create_run(
        workflow_name="wf",
        workflow_path="wf.yaml",
        workflow_text="name: wf",
        params={},
        workspace=str(repo.root) if repo else "",
        owner=None,
        run_id=run_id,
    )
    when = NOW - timedelta(days=days_ago)
    seq = 1
    snapshot = take_snapshot(repo, run_id, "start") if repo else None
    store.append(
        run_id,
        seq,
        ev.RunStarted(
            at=when,
            workflow="wf",
            workspace=str(repo.root) if repo else "/nonexistent/ws",
            branch=f"marathon/{run_id}",
            base_snapshot=snapshot,
            endpoint="e",
            system="s",
            phases=["p"],
            owner="o",
        ),
        totals={"status": "running"},
    )
    for step in range(steps):
        seq += 1
        store.append(
            run_id,
            seq,
            ev.AssistantMessage(at=when, step=step, content="x" * 2000),
            totals={},
        )
    seq += 1
    if status == "paused":
        store.append(run_id, seq, ev.RunPaused(at=when, reason="stop"), totals={"status": status})
    elif status == "running":
        pass
    else:
        store.append(run_id, seq, ev.RunFinished(at=when, status=status), totals={})
    artifacts = artifacts_dir(store, run_id)
    artifacts.mkdir(parents=True)
    (artifacts / "out.txt").write_bytes(b"a" * 3000)
    checkpoints = Runner(store).checkpoint_dir(run_id)
    checkpoints.mkdir(parents=True)
    (checkpoints / "state.json").write_text("{}")


def run_ids(store: EventStore) -> set[str]:
    return {r.id for r in store.list_runs(limit=1000)}


def test_artifacts_dir_matches_the_runner(store: EventStore) -> None:
    assert artifacts_dir(store, "abc") == Runner(store).artifacts_dir("abc")


def test_gc_removes_old_finished_runs_with_their_events_artifacts_and_refs(
    store: EventStore, repo: GitRepo
) -> None:
    make_run(store, "old_ok", status="succeeded", days_ago=40, repo=repo)
    make_run(store, "old_fail", status="failed", days_ago=35, repo=repo)
    make_run(store, "old_paused", status="paused", days_ago=50, repo=repo)
    make_run(store, "old_running", status="running", days_ago=45, repo=repo)
    make_run(store, "new_ok", status="succeeded", days_ago=2, repo=repo)
    git_dir = repo.root / ".git"
    assert (git_dir / "marathon" / "old_ok.index").exists()
    before = database_bytes(store)

    report = gc(store, timedelta(days=30), now=NOW)

    assert [r.id for r in report.removed] == ["old_ok", "old_fail"]
    assert report.kept == [
        ("old_paused", "paused", "paused (may still be resumed; --include-paused)"),
        ("old_running", "running", "running (not finished)"),
    ]
    assert run_ids(store) == {"old_paused", "old_running", "new_ok"}
    assert store.load_events("old_ok") == []
    assert report.events == 2 * 52
    assert report.artifact_bytes == 2 * 3000
    assert report.refs == 2
    assert not artifacts_dir(store, "old_ok").exists()
    assert artifacts_dir(store, "new_ok").exists()
    assert not Runner(store).checkpoint_dir("old_ok").exists(), "its checkpoint goes too"
    assert Runner(store).checkpoint_dir("new_ok").exists()
    refs = git(repo.root, "for-each-ref", "--format=%(refname)", "refs/marathon/")
    assert refs.split() == [
        "refs/marathon/new_ok",
        "refs/marathon/old_paused",
        "refs/marathon/old_running",
    ]
    assert not (git_dir / "marathon" / "old_ok.index").exists()
    assert (git_dir / "marathon" / "new_ok.index").exists()
    assert git(repo.root, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert report.vacuumed and report.db_bytes_before == before
    assert report.db_bytes_after is not None and report.db_bytes_after < before
    assert report.db_bytes_after == database_bytes(store)


def test_keep_failed_and_include_paused(store: EventStore, repo: GitRepo) -> None:
    make_run(store, "old_fail", status="failed", days_ago=35, repo=repo)
    make_run(store, "old_limit", status="limit", days_ago=35, repo=repo)
    make_run(store, "old_paused", status="paused", days_ago=50, repo=repo)
    report = gc(store, timedelta(days=30), keep_failed=True, include_paused=True, now=NOW)
    assert [r.id for r in report.removed] == ["old_paused", "old_limit"]  # oldest first
    assert sorted(r.id for r in report.removed) == ["old_limit", "old_paused"]
    assert report.kept == [("old_fail", "failed", "failed (--keep-failed)")]
    assert run_ids(store) == {"old_fail"}


def test_dry_run_reports_the_same_and_changes_nothing(store: EventStore, repo: GitRepo) -> None:
    make_run(store, "old_ok", status="succeeded", days_ago=40, repo=repo)
    before = database_bytes(store)
    report = gc(store, timedelta(days=30), dry_run=True, now=NOW)
    assert [r.id for r in report.removed] == ["old_ok"]
    assert (report.events, report.artifact_bytes, report.refs) == (52, 3000, 1)
    assert run_ids(store) == {"old_ok"}
    assert len(store.load_events("old_ok")) == 52
    assert artifacts_dir(store, "old_ok").exists()
    assert git(repo.root, "rev-parse", "refs/marathon/old_ok")
    assert (report.db_bytes_before, report.db_bytes_after, report.vacuumed) == (before, None, False)
    assert describe(report)[0].startswith("would remove 1 run(s) last updated before ")


def test_deleted_workspace_is_noted_and_the_run_still_removed(
    store: EventStore, tmp_path: Path
) -> None:
    make_run(store, "lost", status="cancelled", days_ago=40, repo=None)
    report = gc(store, timedelta(days=30), now=NOW)
    (run,) = report.removed
    assert run.notes == ["workspace /nonexistent/ws is gone; no ref to remove"]
    assert run_ids(store) == set()


def test_old_server_events_go_unless_a_remaining_run_may_need_them(
    store: EventStore, repo: GitRepo
) -> None:
    def server_event(days_ago: float) -> None:
        with store.engine.begin() as conn:
            conn.execute(
                insert(server_events).values(
                    server="s",
                    at=NOW - timedelta(days=days_ago),
                    type="died",
                    payload=json.dumps({}),
                )
            )

    for days in (90, 60, 31, 1):
        server_event(days)
    make_run(store, "old_ok", status="succeeded", days_ago=40, repo=repo)
    report = gc(store, timedelta(days=30), now=NOW)
    # No run stays that started before the cutoff (the store stamps created_at with the real
    # clock, later than NOW), so the bound is the cutoff itself: rows older than 30 days go.
    assert report.server_events == 3
    assert [t for _at, _s, t, _p in store.server_events()] == ["died"]


def test_nothing_to_do_does_not_vacuum(store: EventStore) -> None:
    report = gc(store, timedelta(days=30), now=NOW)
    assert (report.removed, report.kept, report.vacuumed) == ([], [], False)
    assert describe(report)[0].startswith("removed 0 run(s)")


def test_server_events_a_kept_run_lived_through_are_kept(store: EventStore, repo: GitRepo) -> None:
    with store.engine.begin() as conn:
        for days in (90, 60, 31):
            conn.execute(
                insert(server_events).values(
                    server="s", at=NOW - timedelta(days=days), type="died", payload="{}"
                )
            )
    make_run(store, "old_paused", status="paused", days_ago=70, repo=repo)
    with store.engine.begin() as conn:
        conn.execute(
            update(RunRow)
            .where(RunRow.c.id == "old_paused")
            .values(created_at=NOW - timedelta(days=70))
        )
    report = gc(store, timedelta(days=30), now=NOW)
    assert report.server_events == 1
    assert len(store.server_events()) == 2


def test_pilot_gc_command_dry_run_then_real(store: EventStore, repo: GitRepo) -> None:
    import typer
    from typer.testing import CliRunner

    from pilot.front.report_cli import register

    app = typer.Typer()
    register(app)
    make_run(store, "old_ok", status="succeeded", days_ago=40, repo=repo)
    make_run(store, "new_ok", status="succeeded", days_ago=0, repo=repo)
    # The runs are dated by their events (2025); "1d" from the real clock covers both.
    result = CliRunner().invoke(app, ["gc", "--older-than", "1d", "--dry-run", "--db", store.url])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("would remove 2 run(s)")
    assert run_ids(store) == {"old_ok", "new_ok"}
    result = CliRunner().invoke(app, ["gc", "--older-than", "1d", "--db", store.url])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("removed 2 run(s)")
    assert run_ids(store) == set()
    bad = CliRunner().invoke(app, ["gc", "--older-than", "soon", "--db", store.url])
    assert bad.exit_code == 2 and "cannot read the duration 'soon'" in bad.output
