"""The ``pilot`` command line: run, resume and inspect durable agent runs.

Exit codes: 0 succeeded (or paused on request, with the resume command printed), 1 failed,
2 bad usage or a workflow/configuration error, 3 stopped by a limit, 4 cancelled,
74 paused because the database cannot take writes (disk full, locked past
``$MARATHON_DB_LOCK_WAIT``, or unreachable: a stopped PostgreSQL), 75 paused because the
model server stayed unavailable longer than ``model.server_wait``.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from pilot.front.app import Durability, _console, _user_errors, app
from pilot.front.cli_inspect import cancel, diff, list_runs, logs, show
from pilot.front.cli_queue import queue_app
from pilot.front.cli_run import resume, run, worker

__all__ = ["Durability", "app"]


def validate(
    workflow: Path = typer.Argument(..., help="The workflow file to check."),
    param: list[str] = typer.Option(
        [], "--param", "-p", metavar="NAME=VALUE", help="Also check these params."
    ),
) -> None:
    """Check a workflow file; every problem is reported with file, line and field."""
    from pilot.run.launch import validate_workflow

    with _user_errors():
        summary = validate_workflow(workflow, param)
    _console().print(f"[green]ok[/] {summary}")


def schema() -> None:
    """Print the workflow file's JSON Schema (for editor completion)."""
    from pilot.workflow import Workflow

    print(json.dumps(Workflow.json_schema(), indent=2))


def _register() -> None:
    """Every command on ``app``, in the order ``pilot --help`` lists them."""
    from pilot.front.replay_export import register as register_replay
    from pilot.front.report_cli import register
    from pilot.front.trace_cli import register as register_trace

    app.command()(run)
    app.command()(resume)
    app.command("runs")(list_runs)
    for command in (show, logs, cancel, diff, worker, validate, schema):
        app.command()(command)
    app.add_typer(queue_app, name="queue")
    register(app)
    register_replay(app)
    register_trace(app)


_register()
