"""The ``pilot`` command line: run, resume and inspect durable agent runs.

Exit codes: 0 succeeded (or paused on request, with the resume command printed), 1 failed,
2 bad usage or a workflow/configuration error, 3 stopped by a limit, 4 cancelled,
74 paused because the database cannot take writes (disk full, locked past
``$MARATHON_DB_LOCK_WAIT``, or unreachable: a stopped PostgreSQL), 75 paused because the
model server stayed unavailable longer than ``model.server_wait``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pilot import __version__
from pilot.errors import ConfigurationError, MarathonError, WorkflowError
from pilot.front.cli_errors import UserErrorGroup
from pilot.front.completion import run_id_argument

if TYPE_CHECKING:
    import asyncio

app = typer.Typer(
    name="pilot",
    help="Run coding agents for hours against your own model server; resume after any crash.",
    no_args_is_help=True,
    cls=UserErrorGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)

Durability = Literal["normal", "full"]
"""``--durability``'s choices, shown in the help and completed: the store's DURABILITIES."""
DB_OPTION = typer.Option(
    None,
    "--db",
    envvar="MARATHON_DB",
    help="SQLAlchemy URL of the store (default: SQLite in "
    "the state directory, $MARATHON_HOME or ~/.local/state/marathon).",
)
ADMISSION_OPTION = typer.Option(
    True,
    "--admission/--no-admission",
    help="Start runs only while their contexts fit the server's KV cache (read from its "
    "/metrics), --parallel being the upper bound.",
)
ENDPOINT_OPTION = typer.Option(
    [],
    "--endpoint",
    metavar="URL",
    help="Use this OpenAI-compatible URL instead of the workflow's; repeat it (or give "
    "a comma-separated list) to route runs over several servers of one model.",
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
    if not sys.stdout.isatty() and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # a log file is written as lines come


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


def _endpoints(values: list[str]) -> list[str] | None:
    """``--endpoint`` given any number of times, each maybe a comma-separated list; each must
    be an http(s) URL (a ConfigurationError says which is not)."""
    from pilot.run.launch import split_endpoints
    from pilot.workflow.schema import check_endpoint_url

    urls = split_endpoints(values)
    for url in urls:
        try:
            check_endpoint_url(url)
        except ValueError as exc:
            raise ConfigurationError(f"--endpoint: {exc}") from None
    return urls or None


def _notes(console: Console, json_lines: bool) -> Console:
    """Where notes for a person go: stderr in JSON mode, whose stdout is JSON lines only."""
    return Console(stderr=True, highlight=False, soft_wrap=True) if json_lines else console


def _durability_option(default: str | None, what: str) -> Any:
    return typer.Option(
        default,
        "--durability",
        help=f"{' or '.join(get_args(Durability))}: normal survives any process death, "
        f"full also a power cut (fsync). {what}",
    )


def _store(db: str | None, durability: str = "normal", *, create: bool = True):
    """The store, or a ConfigurationError naming what is wrong (see ``pilot.front.cli_errors``)."""
    from pilot.environ import protect_environment
    from pilot.store.opening import open_store

    store = open_store(db, durability, create=create)
    protect_environment()  # before any tool runs: /proc/<pid>/environ shows no secret
    return store


# -- run / resume ------------------------------------------------------------------------------


@app.command()
def run(
    workflow: Path = typer.Argument(..., help="The workflow file (YAML).", exists=False),
    param: list[str] = typer.Option(
        [], "--param", "-p", metavar="NAME=VALUE", help="Set a param (repeat it for more)."
    ),
    params_file: Path | None = typer.Option(None, "--params-file", help="YAML file of params."),
    matrix: Path | None = typer.Option(
        None, "--matrix", help="YAML list of param sets: one run per set."
    ),
    parallel: int = typer.Option(1, "--parallel", "-j", min=1, help="Runs driven at once."),
    db: str | None = DB_OPTION,
    endpoint: list[str] = ENDPOINT_OPTION,
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="No GPU needed: serve the simulated model (brain sim, demo policy) in-process; "
        "without a repo param, work on a fresh copy of the bundled sample repository.",
    ),
    detach: bool = typer.Option(
        False, "--detach", help="Run in the background; print the run id and a log file."
    ),
    json_lines: bool = typer.Option(False, "--json", help="Print events as JSON lines."),
    durability: Durability = _durability_option("normal", "Kept with the run: resume keeps it."),
    admission: bool = ADMISSION_OPTION,
) -> None:
    """Start a run of WORKFLOW and drive it until it ends (Ctrl-C pauses; resume later)."""
    from pilot.run.launch import DryRun, check_workflow_file, load_for_run, preflight, start_run

    console = _console()
    if detach:
        raise typer.Exit(_detach(console, sys.argv[1:]))
    # Nothing is made (store, sample repository, sim) for a file that cannot run.
    with _user_errors():
        _endpoints(endpoint)
        if matrix is None:
            check_workflow_file(workflow, param, params_file)
        store = _store(db, durability)
    with (
        _user_errors(),
        DryRun.maybe(dry_run, workflow, param, _notes(console, json_lines), matrix) as dry,
    ):
        target = dry.endpoint or _endpoints(endpoint)
        if matrix is None and parallel <= 1:
            loaded = load_for_run(workflow, param, params_file, extra_params=dry.params)
            checked = preflight(loaded, store, endpoint=target)
            code = _drive(
                console,
                json_lines,
                lambda runner: start_run(
                    runner,
                    loaded,
                    endpoint=target,
                    checked=checked,
                    dry_run=dry.endpoint is not None,
                ),
                store,
                server_wait=loaded.workflow.model.server_wait,
            )
        else:
            from pilot.run.queue import load_many, preflight_many, run_many

            many = load_many(workflow, param, params_file, matrix)
            checked = preflight_many(many, store, endpoint=target)
            model = checked[0].plan.model
            targets = _endpoints(target or []) or model.targets
            code = _drive_many(
                console,
                json_lines,
                lambda runner: run_many(
                    runner,
                    many,
                    parallel=parallel,
                    endpoint=target,
                    checked=checked,
                    admission=_admission(
                        runner,
                        admission,
                        parallel,
                        targets,
                        model.client.api_key,
                        console,
                        json_lines,
                        history=(store, {item.workflow.name for item in many}),
                    ),
                ),
                store,
                endpoints=targets,
            )
    raise typer.Exit(code)


def _detach(console: Console, argv: list[str]) -> int:
    """Start the same command in the background, its output in a log file."""
    import subprocess
    import time
    from datetime import datetime

    from pilot.environ import protect_environment, state_dir, taken_db_url
    from pilot.private_files import private_dirs

    # This process is the run's parent until the run has started: its /proc/<pid>/environ
    # must show no secret either (the child gets them through ``env`` and protects its own).
    protect_environment()
    args, env = _db_to_environment([a for a in argv if a != "--detach"])
    if (url := taken_db_url()) and "MARATHON_DB" not in env:
        env["MARATHON_DB"] = url  # dropped from this process's environment, not the child's
    if "--json" not in args:
        args.append("--json")
    logs = private_dirs(state_dir() / "logs")
    log = logs / f"run-{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}.log"
    with os.fdopen(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pilot", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    deadline = time.monotonic() + 30
    run_id = None
    while time.monotonic() < deadline and run_id is None:
        if proc.poll() is not None and run_id is None:
            break
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{") and '"run_id"' in line:
                run_id = json.loads(line)["run_id"]
                break
        time.sleep(0.1)
    if run_id is None:
        console.print(f"the background run did not start; see {log}")
        return 1
    console.print(f"run {run_id} started in the background (pid {proc.pid})")
    console.print(f"  follow: pilot logs {run_id} -f")
    console.print(f"  log:    {log}")
    return 0


def _db_to_environment(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """``args`` without ``--db URL`` and an environment with it as ``MARATHON_DB``: a command
    line is visible to every user of the machine (``ps``), a URL's password too."""
    env = dict(os.environ)
    kept: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--db":
            env["MARATHON_DB"] = next(rest, "")
        elif arg.startswith("--db="):
            env["MARATHON_DB"] = arg.removeprefix("--db=")
        else:
            kept.append(arg)
    return kept, env


@app.command()
def resume(
    run_id: str = run_id_argument(),
    db: str | None = DB_OPTION,
    endpoint: list[str] = ENDPOINT_OPTION,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Serve the simulated model in-process again (for dry runs)."
    ),
    json_lines: bool = typer.Option(False, "--json", help="Print events as JSON lines."),
    durability: Durability | None = _durability_option(
        None, "Default: the run's own (as it was started); a value given is kept with it."
    ),
) -> None:
    """Continue a paused or interrupted run exactly where it stopped."""
    from pilot.run.launch import DryRun, is_dry_run, keep_durability, resume_run

    console = _console()
    with _user_errors():
        store = _store(db, durability or "normal", create=False)
        record = keep_durability(store, store.find_run(run_id), durability)
        # A dry run resumes as one (its sim died with the process that served it).
        with DryRun.maybe(
            dry_run or is_dry_run(record), None, [], _notes(console, json_lines)
        ) as dry:
            outcome = _drive(
                console,
                json_lines,
                lambda runner: resume_run(
                    runner, record, endpoint=dry.endpoint or _endpoints(endpoint)
                ),
                store,
            )
    raise typer.Exit(outcome)


def _install_signals(stop: asyncio.Event, store: Any, runner: Any) -> None:
    """First SIGINT/SIGTERM: pause at the next safe point, or at once from any wait (the
    server, a backoff, a database lock). Second: exit at once (130); the run is left
    interrupted and ``pilot resume`` takes it over.

    A Python-level handler, not ``loop.add_signal_handler``: it also runs while the event
    loop's thread is blocked waiting for a database lock (``EventStore.interrupt``)."""
    import asyncio

    loop = asyncio.get_running_loop()
    signals = {"count": 0}

    def on_signal(signum: int, _frame: Any) -> None:
        signals["count"] += 1
        if signals["count"] > 1:
            os._exit(128 + signum)  # the shell's code for death by this signal (130, 143)
        store.interrupt.set()
        loop.call_soon_threadsafe(stop.set)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)

    from pilot.run.cancel_bell import CANCEL_SIGNAL

    def on_cancel(_signum: int, _frame: Any) -> None:  # `pilot cancel` on this host
        loop.call_soon_threadsafe(runner.ring_bells)

    signal.signal(CANCEL_SIGNAL, on_cancel)


def _observed(
    console: Console,
    json_lines: bool,
    store: Any,
    start: Any,
    live_view: Callable[[], Any],
    *,
    with_run_id: bool,
) -> Any:
    """``start(runner)`` on a fresh ``Runner``, with the signals handled and the events shown
    (JSON lines, ``live_view()`` on a terminal, plain lines elsewhere); what it returns."""
    import asyncio

    from pilot.front.printer import LinePrinter, plain_render
    from pilot.front.ui import event_json
    from pilot.heap import settle_startup_heap
    from pilot.run.cancel_bell import with_bell
    from pilot.run.runner import Runner
    from pilot.store.lease import lease_owner_id

    stop = asyncio.Event()
    runner = Runner(store, stop=stop, owner=with_bell(lease_owner_id()))
    view: Any
    if json_lines:
        view = LinePrinter(sys.stdout, event_json)
    elif console.is_terminal:
        view = live_view()
    else:  # a pipe, a log file, CI, --detach: plain lines off the step's thread
        view = LinePrinter(console.file, plain_render(with_run_id=with_run_id))
    runner.observers.append(view)

    async def main() -> Any:
        _install_signals(stop, store, runner)
        try:
            return await start(runner)
        finally:
            await runner.aclose()

    settle_startup_heap()
    with view:
        return asyncio.run(main())


def _drive_many(
    console: Console,
    json_lines: bool,
    start: Any,
    store: Any,
    endpoints: Sequence[str] = (),
) -> int:
    """Drive several runs in this process; the exit code is the worst outcome's. A roll-up
    line ends it (a JSON object on stderr with --json, whose stdout is events only)."""
    from pilot.front.outcome import print_outcome, rollup, rollup_line
    from pilot.front.ui import MultiRunView
    from pilot.run.notify import notify_queue_end

    def view() -> MultiRunView:
        return MultiRunView(console, endpoints=endpoints)

    outcomes = _observed(console, json_lines, store, start, view, with_run_id=True)
    if not json_lines:
        for outcome in outcomes:
            print_outcome(console, store, outcome)
        console.print()
        console.print(f"[bold]{escape(rollup_line(outcomes))}[/]")
    else:
        print(json.dumps({"rollup": rollup(outcomes)}), file=sys.stderr, flush=True)
    notify_queue_end(outcomes)
    codes = [o.exit_code for o in outcomes] or [0]
    return max(codes)


def _admission(
    runner: Any,
    enabled: bool,
    parallel: int,
    endpoints: Sequence[str],
    api_key: str | None,
    console: Console,
    json_lines: bool,
    history: tuple[Any, set[str]] | None = None,
) -> Any:
    """The KV-aware admission of these runs (``pilot.run.admission``), None when it is off; its
    status lines (a run waiting for room, and why) go to stderr with --json. ``history``: the
    store and the workflows whose earlier runs seed a run's expected size."""
    if not enabled or not endpoints:
        return None
    from pilot.run.admission import Admission, MetricsKvSource, peak_history

    def tell(message: str) -> None:
        if json_lines:
            print(json.dumps({"admission": message}), file=sys.stderr, flush=True)
        else:
            console.print(f"[yellow]{escape(message)}[/]")

    peaks = peak_history(*history) if history else []
    admission = Admission(
        MetricsKvSource(endpoints, api_key=api_key), parallel, history=peaks, on_wait=tell
    )
    runner.observers.append(admission.observe)
    return admission


def _queued_targets(store: Any) -> list[str]:
    """The endpoints of the oldest queued run's workflow (a worker without --endpoint)."""
    from pilot.errors import MarathonError
    from pilot.run.launch import build_plan, load_stored

    queued = [r for r in store.list_runs(limit=200) if r.status == "queued"]
    if not queued:
        return []
    try:
        loaded, _ = load_stored(queued[-1])
        return list(build_plan(loaded, "view").model.targets)
    except MarathonError:
        return []


def _drive(
    console: Console,
    json_lines: bool,
    start: Any,
    store: Any,
    server_wait: float | None = None,
) -> int:
    """Drive one run with signal handling and a view; returns the exit code."""
    from pilot.front.outcome import print_outcome
    from pilot.front.ui import LiveView

    def view() -> LiveView:
        return LiveView(console, server_wait=server_wait)

    outcome = _observed(console, json_lines, store, start, view, with_run_id=False)
    if not json_lines:
        print_outcome(console, store, outcome)
    return outcome.exit_code


# -- inspect ---------------------------------------------------------------------------------


@app.command("runs")
def list_runs(
    db: str | None = DB_OPTION,
    limit: int = typer.Option(30, "--limit", "-n", min=1, help="How many runs to show."),
    json_lines: bool = typer.Option(False, "--json", help="One JSON object per run."),
) -> None:
    """List runs: id, workflow, status, phase, steps, tokens, started, elapsed."""
    from pilot.front.lines import format_duration, local_time
    from pilot.store.event_store import shown_status

    records = _records(db, lambda store: store.list_runs(limit=limit))
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


def _record_json(record: Any) -> str:
    from pilot.store.event_store import shown_status

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


@app.command()
def show(
    run_id: str = run_id_argument(),
    db: str | None = DB_OPTION,
    json_lines: bool = typer.Option(False, "--json", help="Print events as JSON lines."),
) -> None:
    """The run's timeline, from its events."""
    from pilot.front.ui import event_json, event_line, evidence_lines, line_width

    console = _console()
    with _user_errors():
        store = _store(db, create=False)
        record = store.find_run(run_id)
        server = _run_server_events(store, record)
        judged = []
        for seq, event in store.iter_events(record.id):
            if event.type in ("phase_started", "phase_evidence"):
                judged.append(event)
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


@app.command()
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


@app.command()
def cancel(
    run_id: str = run_id_argument(),
    db: str | None = DB_OPTION,
) -> None:
    """Cancel a run (a running one is asked to stop; it ends as cancelled)."""
    from pilot.run.runner import request_cancel

    with _user_errors():
        store = _store(db, create=False)
        record = store.find_run(run_id)
        _console().print(request_cancel(store, record.id))


@app.command()
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


# -- the queue ---------------------------------------------------------------------------------

queue_app = typer.Typer(help="Runs waiting in the store for workers.", no_args_is_help=True)
app.add_typer(queue_app, name="queue")


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


@app.command()
def worker(
    parallel: int = typer.Option(1, "--parallel", "-j", min=1, help="Runs driven at once."),
    db: str | None = DB_OPTION,
    endpoint: list[str] = ENDPOINT_OPTION,
    exit_when_idle: bool = typer.Option(
        False, "--exit-when-idle", help="Stop when the queue is empty instead of waiting."
    ),
    poll: float = typer.Option(1.0, "--poll", min=0.01, help="Seconds between queue checks."),
    json_lines: bool = typer.Option(False, "--json", help="Print events as JSON lines."),
    admission: bool = ADMISSION_OPTION,
) -> None:
    """Claim queued (and paused or orphaned queue) runs and drive them; SIGTERM pauses them."""
    from pilot.run.queue import work

    console = _console()
    with _user_errors():
        targets = _endpoints(endpoint)
        store = _store(db)
        servers = targets or (_queued_targets(store) if admission else [])
        code = _drive_many(
            console,
            json_lines,
            lambda runner: work(
                runner,
                parallel=parallel,
                endpoint=targets,
                poll_interval=poll,
                exit_when_idle=exit_when_idle,
                admission=_admission(
                    runner,
                    admission and bool(servers),
                    parallel,
                    servers,
                    None,
                    console,
                    json_lines,
                ),
            ),
            store,
            endpoints=targets or (),
        )
    raise typer.Exit(code)


# -- workflow files ----------------------------------------------------------------------------


@app.command()
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


@app.command()
def schema() -> None:
    """Print the workflow file's JSON Schema (for editor completion)."""
    from pilot.workflow import Workflow

    print(json.dumps(Workflow.json_schema(), indent=2))


def _register_more() -> None:
    from pilot.front.replay_export import register as register_replay
    from pilot.front.report_cli import register
    from pilot.front.trace_cli import register as register_trace

    register(app)
    register_replay(app)
    register_trace(app)


_register_more()
