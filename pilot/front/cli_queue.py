"""``pilot queue``: runs waiting in the store for ``pilot worker`` (add, ls)."""

from __future__ import annotations

from pathlib import Path

import typer

from pilot.front.app import (
    DB_OPTION,
    Durability,
    _console,
    _durability_option,
    _store,
    _user_errors,
)
from pilot.front.cli_inspect import _print_records, _records

queue_app = typer.Typer(help="Runs waiting in the store for workers.", no_args_is_help=True)


@queue_app.command("add")
def queue_add(
    workflow: Path = typer.Argument(..., help="The workflow file (YAML)."),
    param: list[str] = typer.Option(
        [], "--param", "-p", metavar="NAME=VALUE", help="Set a param (repeat it for more)."
    ),
    params_file: Path | None = typer.Option(None, "--params-file", help="YAML file of params."),
    db: str | None = DB_OPTION,
    durability: Durability = _durability_option("normal", "Kept with the run: a worker keeps it."),
) -> None:
    """Validate WORKFLOW now and queue a run of it for `pilot worker`."""
    from pilot.run.queue import enqueue

    with _user_errors():
        run_id = enqueue(_store(db, durability), workflow, param, params_file)
    _console().print(f"queued run {run_id}")


@queue_app.command("ls")
def queue_ls(
    db: str | None = DB_OPTION,
    json_lines: bool = typer.Option(False, "--json", help="One JSON object per run."),
) -> None:
    """Queued runs and queue runs still in progress."""
    from pilot.front.lines import local_time
    from pilot.store.event_store import shown_status

    records = _records(db, lambda store: store.list_queue())
    columns = ("id", "workflow", "status", "phase", "steps", "worker", "added")
    rows = [
        (
            r.id,
            r.workflow_name,
            shown_status(r),
            r.phase or "-",
            str(r.steps),
            r.lease_owner or "-",
            local_time(r.created_at),
        )
        for r in records
    ]
    _print_records(records, columns, rows, json_lines)
