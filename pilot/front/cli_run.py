"""The commands that drive runs in this process: ``run``, ``resume``, ``worker``; with the
background start (``--detach``), the signals (pause, exit, cancel bell), the views and the
KV-aware admission they share."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape

from pilot.front.app import (
    ADMISSION_OPTION,
    DB_OPTION,
    ENDPOINT_OPTION,
    Durability,
    _console,
    _durability_option,
    _endpoints,
    _notes,
    _store,
    _user_errors,
)
from pilot.front.completion import run_id_argument

if TYPE_CHECKING:
    import asyncio


def run(
    workflow: Path = typer.Argument(..., help="The workflow file (YAML).", exists=False),
    param: list[str] = typer.Option(
        [], "--param", "-p", metavar="NAME=VALUE", help="Set a param (repeat it for more)."
    ),
    params_file: Path | None = typer.Option(None, "--params-file", help="YAML file of params."),
    setting: list[str] = typer.Option(
        [],
        "--set",
        metavar="FIELD=VALUE",
        help="Set a workflow field, e.g. --set model.tool_calls=forced (repeat it for more); "
        "kept with the run.",
    ),
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
            check_workflow_file(workflow, param, params_file, setting)
        store = _store(db, durability)
    with (
        _user_errors(),
        DryRun.maybe(dry_run, workflow, param, _notes(console, json_lines), matrix) as dry,
    ):
        target = dry.endpoint or _endpoints(endpoint)
        if matrix is None and parallel <= 1:
            loaded = load_for_run(
                workflow, param, params_file, extra_params=dry.params, settings=setting
            )
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

            many = load_many(workflow, param, params_file, matrix, setting)
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
