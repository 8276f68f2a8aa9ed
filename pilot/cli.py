"""The ``pilot`` command line: run, resume and inspect durable agent runs.

Exit codes: 0 succeeded (or paused on request, with the resume command printed), 1 failed,
2 bad usage or a workflow/configuration error, 3 stopped by a limit, 4 cancelled,
75 paused because the model server stayed unavailable longer than ``model.server_wait``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from pilot import __version__
from pilot.errors import MarathonError, WorkflowError

app = typer.Typer(
    name="pilot",
    help="Run coding agents for hours against your own model server; resume after any crash.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

DB_OPTION = typer.Option(
    None,
    "--db",
    envvar="MARATHON_DB",
    help="SQLAlchemy URL of the store (default: SQLite in "
    "the state directory, $MARATHON_HOME or ~/.local/state/marathon).",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pilot (marathon) {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Run coding agents for hours against your own model server; resume after any crash."""


def _console() -> Console:
    return Console(stderr=False, highlight=False, soft_wrap=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    from rich.text import Text

    Console(stderr=True, highlight=False, soft_wrap=True).print(
        Text.assemble(("error: ", "bold red"), message)
    )
    return typer.Exit(code)


@contextmanager
def _user_errors() -> Iterator[None]:
    """Our errors become one clean message and an exit code; anything else is a bug."""
    try:
        yield
    except WorkflowError as exc:
        raise _fail(str(exc), 2) from None
    except MarathonError as exc:
        raise _fail(str(exc), 2) from None


def _store(db: str | None, durability: str = "normal"):
    from pilot.store import EventStore

    return EventStore(db, durability=durability)


# -- run / resume ------------------------------------------------------------------------------


@app.command()
def run(
    workflow: Path = typer.Argument(..., help="The workflow file (YAML).", exists=False),
    param: list[str] = typer.Option([], "--param", "-p", help="Set a param: NAME=VALUE."),
    params_file: Path | None = typer.Option(None, "--params-file", help="YAML file of params."),
    db: str | None = DB_OPTION,
    endpoint: str | None = typer.Option(
        None, "--endpoint", help="Use this OpenAI-compatible URL instead of the workflow's."
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="No GPU needed: serve the simulated model (brain sim, demo policy) in-process; "
        "without a repo param, work on a fresh copy of the bundled sample repository.",
    ),
    json_lines: bool = typer.Option(False, "--json", help="Print events as JSON lines."),
    durability: str = typer.Option(
        "normal", "--durability", help="normal (survives any process death) or full (fsync)."
    ),
) -> None:
    """Start a run of WORKFLOW and drive it until it ends (Ctrl-C pauses; resume later)."""
    from pilot.launch import DryRun, load_for_run, start_run

    console = _console()
    with _user_errors(), DryRun.maybe(dry_run, workflow, param, console) as dry:
        loaded = load_for_run(workflow, param, params_file, extra_params=dry.params)
        store = _store(db, durability)
        outcome = _drive(
            console,
            json_lines,
            lambda runner: start_run(runner, loaded, endpoint=dry.endpoint or endpoint),
            store,
        )
    raise typer.Exit(outcome)


@app.command()
def resume(
    run_id: str = typer.Argument(..., help="Run id (any unambiguous prefix)."),
    db: str | None = DB_OPTION,
    endpoint: str | None = typer.Option(None, "--endpoint", help="Override the endpoint."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Serve the simulated model in-process again (for dry runs)."
    ),
    json_lines: bool = typer.Option(False, "--json", help="Print events as JSON lines."),
) -> None:
    """Continue a paused or interrupted run exactly where it stopped."""
    from pilot.launch import DryRun, resume_run

    console = _console()
    with _user_errors():
        store = _store(db)
        record = store.find_run(run_id)
        with DryRun.maybe(dry_run, None, [], console) as dry:
            outcome = _drive(
                console,
                json_lines,
                lambda runner: resume_run(runner, record, endpoint=dry.endpoint or endpoint),
                store,
            )
    raise typer.Exit(outcome)


def _drive(console: Console, json_lines: bool, start: Any, store: Any) -> int:
    """Drive one run with signal handling and a view; returns the exit code."""
    from pilot.runner import Runner
    from pilot.ui import LiveView, event_json

    stop = asyncio.Event()
    runner = Runner(store, stop=stop)
    view: LiveView | None = None
    if json_lines:
        runner.observers.append(lambda rid, seq, e, _s: print(event_json(rid, seq, e), flush=True))
    elif console.is_terminal:
        view = LiveView(console)
        runner.observers.append(view)
    else:
        from pilot.ui import event_line

        runner.observers.append(lambda _rid, _seq, e, _s: console.print(event_line(e)))

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        signals = {"count": 0}

        def on_signal() -> None:
            signals["count"] += 1
            if signals["count"] > 1:
                os._exit(130)
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        return await start(runner)

    if view is not None:
        with view:
            outcome = asyncio.run(main())
    else:
        outcome = asyncio.run(main())
    if not json_lines:
        from pilot.summary import print_outcome

        print_outcome(console, store, outcome)
    return outcome.exit_code


# -- inspect ---------------------------------------------------------------------------------


@app.command("runs")
def list_runs(
    db: str | None = DB_OPTION,
    limit: int = typer.Option(30, "--limit", "-n", help="How many runs to show."),
) -> None:
    """List runs: id, workflow, status, phase, steps, tokens, started, elapsed."""
    from pilot.ui import format_duration, local_time

    store = _store(db)
    table = Table(box=None, header_style="bold")
    for column in ("id", "workflow", "status", "phase", "steps", "tokens", "started", "elapsed"):
        table.add_column(column)
    for record in store.list_runs(limit=limit):
        elapsed = (record.updated_at - record.created_at).total_seconds()
        table.add_row(
            record.id,
            record.workflow_name,
            record.status,
            record.phase or "-",
            str(record.steps),
            str(record.prompt_tokens + record.completion_tokens),
            local_time(record.created_at),
            format_duration(elapsed),
        )
    _console().print(table)


@app.command()
def show(
    run_id: str = typer.Argument(..., help="Run id (any unambiguous prefix)."),
    db: str | None = DB_OPTION,
    json_lines: bool = typer.Option(False, "--json", help="Print events as JSON lines."),
) -> None:
    """The run's timeline, from its events."""
    from pilot.ui import event_json, event_line

    console = _console()
    with _user_errors():
        store = _store(db)
        record = store.find_run(run_id)
        for seq, event in store.iter_events(record.id):
            if json_lines:
                print(event_json(record.id, seq, event))
            else:
                console.print(event_line(event))
        if not json_lines:
            console.print(f"[bold]{record.id}[/] {record.status} {record.status_reason}")


@app.command()
def logs(
    run_id: str = typer.Argument(..., help="Run id (any unambiguous prefix)."),
    db: str | None = DB_OPTION,
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events."),
) -> None:
    """Print the run's events (with -f, follow them as another process appends them)."""
    import time

    from pilot.ui import event_line

    console = _console()
    with _user_errors():
        store = _store(db)
        record = store.find_run(run_id)
        last = 0
        while True:
            for seq, event in store.iter_events(record.id, after_seq=last):
                console.print(event_line(event))
                last = seq
            if not follow or store.get_run(record.id).status not in ("running", "cancelling"):
                break
            time.sleep(0.5)


@app.command()
def cancel(
    run_id: str = typer.Argument(..., help="Run id (any unambiguous prefix)."),
    db: str | None = DB_OPTION,
) -> None:
    """Cancel a run (a running one is asked to stop; it ends as cancelled)."""
    from pilot.runner import request_cancel

    with _user_errors():
        store = _store(db)
        record = store.find_run(run_id)
        _console().print(request_cancel(store, record.id))


@app.command()
def diff(
    run_id: str = typer.Argument(..., help="Run id (any unambiguous prefix)."),
    db: str | None = DB_OPTION,
    stat: bool = typer.Option(False, "--stat", help="Only the diffstat."),
) -> None:
    """What the run changed in its workspace (from its first to its latest snapshot)."""
    from pilot.snapshot import GitRepo, diff_snapshots
    from pilot.state import fold

    with _user_errors():
        store = _store(db)
        record = store.find_run(run_id)
        state = fold(store.load_events(record.id))
        if state.started is None or not state.started.base_snapshot or not state.snapshot:
            raise _fail(f"run {record.id} has no workspace snapshots yet", 1)
        repo = GitRepo(Path(state.started.workspace))
        sys.stdout.write(
            diff_snapshots(repo, state.started.base_snapshot, state.snapshot, stat=stat)
        )
        sys.stdout.write("\n")


# -- workflow files ----------------------------------------------------------------------------


@app.command()
def validate(
    workflow: Path = typer.Argument(..., help="The workflow file to check."),
    param: list[str] = typer.Option([], "--param", "-p", help="Also check these params."),
) -> None:
    """Check a workflow file; every problem is reported with file, line and field."""
    from pilot.launch import validate_workflow

    with _user_errors():
        summary = validate_workflow(workflow, param)
    _console().print(f"[green]ok[/] {summary}")


@app.command()
def schema() -> None:
    """Print the workflow file's JSON Schema (for editor completion)."""
    from pilot.workflow import Workflow

    print(json.dumps(Workflow.json_schema(), indent=2))
