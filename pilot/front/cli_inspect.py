"""The commands that read the store: ``runs``, ``show``, ``logs``, ``diff``; and ``cancel``,
which only writes the request (the run's driver stops it)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from pilot.front.app import DB_OPTION, _console, _fail, _store, _user_errors
from pilot.front.completion import run_id_argument


def list_runs(
    db: str | None = DB_OPTION,
    limit: int = typer.Option(30, "--limit", "-n", min=1, help="How many runs to show."),
    json_lines: bool = typer.Option(False, "--json", help="One JSON object per run."),
) -> None:
    """List runs: id, workflow, status, phase, steps, tokens, started, elapsed."""
    from pilot.front.lines import format_duration, local_time
    from pilot.store.records import shown_status

    records = _listed(db, limit)
    columns = ("id", "workflow", "status", "phase", "steps", "tokens", "started", "elapsed")
    rows = [
        (
            r.id,
            r.workflow_name,
            shown_status(r),
            r.phase or "-",
            str(r.steps),
            str(r.prompt_tokens + r.completion_tokens),
            local_time(r.created_at),
            format_duration((r.updated_at - r.created_at).total_seconds()),
        )
        for r in records
    ]
    _print_records(records, columns, rows, json_lines)
    interrupted = [r.id for r in records if shown_status(r) == "interrupted"]
    if interrupted and not json_lines:
        flag = _db_flag_of(db)
        for rid in interrupted:
            _console().print(f"interrupted (its process is gone): pilot resume {rid}{flag}")


def _db_flag_of(db: str | None) -> str:
    from pilot.environ import db_option, default_db_url

    return db_option(db or default_db_url())


def _db_flag(store: Any) -> str:
    from pilot.environ import db_option

    return db_option(store.url)


def _records(db: str | None, read: Any) -> list[Any]:
    """Records from the store, none when the default database does not exist yet (a first
    day's `pilot runs`); a ``--db`` naming a missing file is an error."""
    from pilot.store.opening import NoDatabase

    try:
        store = _store(db, create=False)
    except NoDatabase:
        if db is not None or os.environ.get("MARATHON_DB"):
            raise
        return []
    return list(read(store))


def _listed(db: str | None, limit: int) -> list[Any]:
    """The ``limit`` newest runs: a SQLite store read through sqlite3 alone (no SQLAlchemy
    import, ``pilot.store.opening.read_runs``), any other through the opened store."""
    from pilot.environ import protect_environment
    from pilot.store.opening import NoDatabase, read_runs

    try:
        found = read_runs(db, limit)
    except NoDatabase:
        if db is not None or os.environ.get("MARATHON_DB"):
            raise
        return []
    if found is None:
        return _records(db, lambda store: store.list_runs(limit=limit))
    protect_environment()  # as ``_store`` does
    return found


def _record_json(record: Any) -> str:
    from pilot.store.records import shown_status

    return json.dumps(
        {
            "id": record.id,
            "workflow": record.workflow_name,
            "workflow_path": record.workflow_path,
            "status": shown_status(record),
            "status_reason": record.status_reason,
            "phase": record.phase,
            "steps": record.steps,
            "prompt_tokens": record.prompt_tokens,
            "completion_tokens": record.completion_tokens,
            "workspace": record.workspace,
            "worker": record.lease_owner,
            "origin": record.origin,
            "durability": record.launch.durability,
            "dry_run": record.launch.dry_run,
            "endpoints": list(record.launch.endpoints),
            "created_at": record.created_at.isoformat(),
            "updated_at": record.updated_at.isoformat(),
        }
    )


def _print_records(
    records: Sequence[Any], columns: Sequence[str], rows: Sequence[Sequence[str]], as_json: bool
) -> None:
    """JSON lines, or a table; in a pipe the table is as wide as its cells (nothing cut)."""
    if as_json:
        for record in records:
            print(_record_json(record))
        return
    console = _console()
    if not console.is_terminal:
        console = Console(highlight=False, soft_wrap=True, width=100_000)
    table = Table(box=None, header_style="bold")
    for column in columns:
        table.add_column(column, no_wrap=True, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def show(
    run_id: str = run_id_argument(),
    db: str | None = DB_OPTION,
    json_lines: bool = typer.Option(False, "--json", help="Print events as JSON lines."),
) -> None:
    """The run's timeline, from its events."""
    from pilot.agent import call_modes
    from pilot.front.ui import event_json, event_line, evidence_lines, line_width

    console = _console()
    with _user_errors():
        store = _store(db, create=False)
        record = store.find_run(run_id)
        server = _run_server_events(store, record)
        judged = []
        book, model = call_modes.new_book(), None
        for seq, event in store.iter_events(record.id):
            if event.type in ("phase_started", "phase_evidence"):
                judged.append(event)
            if event.type == "model_resolved":
                model = event.model
            elif event.type in call_modes.FOLDED:
                call_modes.fold(book, event, model)
            while server and server[0][0] <= event.at:
                _print_server_event(console, json_lines, *server.pop(0))
            if json_lines:
                print(event_json(record.id, seq, event))
            else:
                console.print(event_line(event, width=line_width(console)))
        for item in server:
            _print_server_event(console, json_lines, *item)
        if not json_lines:
            from pilot.store.event_store import shown_status

            for line in evidence_lines(judged):
                console.print(line, highlight=False, markup=False)
            for line in call_modes.summary_lines(book):
                console.print(line, highlight=False, markup=False)

            status = shown_status(store.get_run(record.id))
            console.print(f"[bold]{record.id}[/] {status} {record.status_reason}")
            if status == "interrupted":
                console.print(
                    f"its process is gone: [bold]pilot resume {record.id}{_db_flag(store)}[/]"
                )


def _run_server_events(store: Any, record: Any) -> list[Any]:
    """The brain's events, in the run's window, of the servers on the run's own endpoints."""
    from pilot.events import RunStarted
    from pilot.report.build import run_servers

    endpoints: list[str] = []
    for _seq, event in store.iter_events(record.id):
        if isinstance(event, RunStarted):
            endpoints = [event.endpoint, *event.endpoints]
        break
    mine = run_servers(store, endpoints, record.updated_at)
    events = store.server_events(since=record.created_at, until=record.updated_at)
    return [e for e in events if mine is None or e[1] in mine]


def _print_server_event(
    console: Console, json_lines: bool, at: Any, server: str, kind: str, payload: dict
) -> None:
    """The brain's record of its server (start, ready, death, restart) in the run's timeline."""
    if json_lines:
        print(json.dumps({"server_event": kind, "server": server, "at": at.isoformat(), **payload}))
        return
    detail = payload.get("summary") or payload.get("reason") or payload.get("message") or ""
    stamp = at.astimezone().strftime("%H:%M:%S")
    console.print(f"[dim]{stamp}[/] [magenta]server {server}: {kind}[/] {detail}", highlight=False)


def logs(
    run_id: str = run_id_argument(),
    db: str | None = DB_OPTION,
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events."),
    json_lines: bool = typer.Option(
        False, "--json", help="Print events as JSON lines (as pilot run --json does)."
    ),
) -> None:
    """Print the run's events (with -f, follow them as another process appends them)."""
    import time

    from pilot.front.ui import event_json, event_line, line_width

    console = _console()
    with _user_errors():
        store = _store(db, create=False)
        record = store.find_run(run_id)
        last = 0
        while True:
            for seq, event in store.iter_events(record.id, after_seq=last):
                if json_lines:
                    print(event_json(record.id, seq, event), flush=True)
                else:
                    console.print(event_line(event, width=line_width(console)))
                last = seq
            if not follow:
                break
            from pilot.store.event_store import lease_holder_gone

            now = store.get_run(record.id)
            if lease_holder_gone(now):
                raise _fail(
                    f"run {record.id} is interrupted: nobody drives it (the process that did "
                    f"is gone), so nothing more will come; continue it with "
                    f"`pilot resume {record.id}{_db_flag(store)}`",
                    1,
                )
            if now.status not in ("running", "cancelling"):
                break
            time.sleep(0.5)


def cancel(
    run_id: str = run_id_argument(),
    db: str | None = DB_OPTION,
) -> None:
    """Cancel a run (a running one is asked to stop; it ends as cancelled)."""
    from pilot.run.cancel import request_cancel

    with _user_errors():
        store = _store(db, create=False)
        record = store.find_run(run_id)
        _console().print(request_cancel(store, record.id))


def diff(
    run_id: str = run_id_argument(),
    db: str | None = DB_OPTION,
    stat: bool = typer.Option(False, "--stat", help="Only the diffstat."),
) -> None:
    """What the run changed in its workspace (from its first to its latest snapshot)."""
    from pilot.agent.state import fold
    from pilot.workspace.snapshot import GitRepo, diff_snapshots

    with _user_errors():
        store = _store(db, create=False)
        record = store.find_run(run_id)
        state = fold(store.load_events(record.id))
        if state.started is None or not state.started.base_snapshot or not state.snapshot:
            raise _fail(f"run {record.id} has no workspace snapshots yet", 1)
        root = Path(state.started.workspace)
        if state.started.repository and not root.is_dir():
            root = Path(state.started.repository)  # its worktree was removed (pilot gc)
        repo = GitRepo(root)
        sys.stdout.write(
            diff_snapshots(repo, state.started.base_snapshot, state.snapshot, stat=stat)
        )
        sys.stdout.write("\n")
