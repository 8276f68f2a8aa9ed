"""The server commands of ``brain``: up, down, restart, ps, status, logs, doctor, profiles,
preload start|stop|status.

Thin: each command builds a ServerSpec (profile + preset + ``--set``), calls the launcher,
readiness, supervisor or preload module, and prints with rich. Expected failures (bad spec,
busy port, failed start with its diagnosis, preload mismatch) print a clear message and exit
non-zero; tracebacks are for bugs only.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import typer
from rich.table import Table

from brain.cli_common import (
    BackendOpt,
    NoGpuOpt,
    PresetOpt,
    ProfileArg,
    SetOpt,
    build_spec,
    complete_server,
    expected_errors,
    fmt_age,
    launcher_for_record,
    out,
    pid_alive,
    preflight,
    say,
    server_events,
    stop_server,
)
from brain.errors import BrainError, SpecError
from brain.launchers import make_launcher
from brain.launchers.base import Launcher, ServerHandle
from brain.server_status import status_facts, status_rows, unhealthy_reason
from brain.spec import ServerSpec
from brain.state import Registry, ServerRecord, state_dir
from brain.urls import server_root


def _launcher_for(spec: ServerSpec, pull: bool = False) -> Launcher:
    return make_launcher(spec.backend, request_gpus=None, pull=pull)


def _pick(registry: Registry, name: str | None) -> ServerRecord:
    """The named server, or the only one; a clear error otherwise."""
    records = registry.servers()
    if name:
        rec = registry.get(name)
        members = [r.name for r in records if r.fleet == name]
        if rec is None and members:
            raise BrainError(
                f"{name} is a fleet of {len(members)} replica(s) ({', '.join(sorted(members))}); "
                f"name one of them (brain down {name} and brain status {name} take the fleet)."
            )
        if rec is None:
            known = ", ".join(r.name for r in records) or "none"
            raise BrainError(f"no server named {name!r} was started by brain (running: {known}).")
        return rec
    if not records:
        raise BrainError("no server is running (start one with: brain up PROFILE).")
    if len(records) > 1:
        raise BrainError(
            "several servers are running; name one: " + ", ".join(r.name for r in records)
        )
    return records[0]


# --------------------------------------------------------------------------- commands


@expected_errors
def up(
    profile: ProfileArg = None,
    set_: SetOpt = None,
    preset: PresetOpt = None,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the command, start nothing."),
    watch: bool = typer.Option(False, "--watch", help="Stay in the foreground; restart on death."),
    backend: BackendOpt = None,
    no_gpu: NoGpuOpt = False,
    pull: bool = typer.Option(False, "--pull", help="Docker: pull the image if it is missing."),
    max_restarts: int = typer.Option(5, "--max-restarts", help="With --watch: cap per window."),
    window: float = typer.Option(600.0, "--window", help="With --watch: the window, seconds."),
    poll_interval: float = typer.Option(
        3.0, "--poll-interval", help="With --watch: seconds between health checks."
    ),
    replicas: int = typer.Option(
        None, "--replicas", help="Start N copies, each on its own GPU (group) and port."
    ),
    gpus: str = typer.Option(
        None,
        "--gpus",
        metavar="IDS",
        help="GPUs for the replicas: all, or indexes or UUIDs, e.g. 0,1,2,3 (split in TP-sized "
        "groups); a number is an index, not a count as in docker run --gpus 2.",
    ),
    fleet: str = typer.Option(
        None, "--fleet", help="A fleet file: servers (profile, gpus, port) started together."
    ),
    port: int = typer.Option(
        None, "--port", help="The port; replicas take port + i (0: the OS picks free ports)."
    ),
    fleet_member: str = typer.Option(None, "--fleet-member", hidden=True),
) -> None:
    """Start a vLLM server (or a fleet of replicas) and wait until it is really ready."""
    from brain.spec import ensure_api_key
    from brain.spec_checks import check_launchable

    if fleet or replicas is not None or gpus:
        from brain.fleet.cli import plan_from_cli, up_fleet

        planned = plan_from_cli(
            profile=profile,
            sets=set_,
            preset=preset,
            backend=backend,
            no_gpu=no_gpu,
            replicas=replicas,
            gpus=gpus,
            fleet_file=fleet,
            port=port,
        )
        child_args = ["--max-restarts", str(max_restarts), "--window", str(window)]
        child_args += ["--poll-interval", str(poll_interval)] + (["--pull"] if pull else [])
        code = up_fleet(planned, dry_run=dry_run, watch=watch, pull=pull, child_args=child_args)
        if code:
            raise typer.Exit(code)
        return
    if port is not None:
        set_ = [f"port={port}", *(set_ or [])]
    spec = build_spec(profile, set_, preset, backend, no_gpu)
    if dry_run:
        from brain.command import dry_run_text

        out.print(dry_run_text(spec), markup=False, soft_wrap=True)
        if spec.tuned is not None:
            out.print(f"# {spec.tuned.line()}", markup=False, soft_wrap=True)
        return
    spec = ensure_api_key(spec, state_dir())
    check_launchable(spec)
    registry = Registry()
    existing = registry.get(spec.name)
    if existing is not None:
        handle = ServerHandle.from_dict(existing.handle)
        if launcher_for_record(existing).status(handle).alive:
            raise BrainError(
                f"{spec.name} is already running on port {handle.port} "
                f"(brain restart {spec.name} / brain down {spec.name})."
            )
        registry.remove(spec.name)

    from brain.supervisor import GpuGuard, RestartPolicy, Supervisor

    member_fleet, member_index = _fleet_member(fleet_member)
    launcher = _launcher_for(spec, pull)
    supervisor = Supervisor(
        spec,
        launcher,
        server_events(),
        policy=RestartPolicy(max_restarts=max_restarts, window_s=window),
        registry=registry,
        preflight=preflight(registry),
        after_stop=GpuGuard(say).after_stop,
        poll_interval_s=poll_interval,
        say=say,
        fleet=member_fleet,
        replica=member_index,
    )
    say(f"starting {spec.name} ({spec.backend}: {spec.model}) on {spec.host}:{spec.port}")
    if not watch:
        info = supervisor.start_once()
        _print_ready(spec, info)
        return
    supervisor.install_signal_handlers()
    code = supervisor.run()
    raise typer.Exit(code)


def _fleet_member(value: str | None) -> tuple[str | None, int | None]:
    """``--fleet-member FLEET:INDEX``: how a fleet's supervisor process records its replica."""
    if not value:
        return None, None
    fleet, _, index = value.rpartition(":")
    if not fleet or not index.isdigit():
        raise SpecError(f"--fleet-member {value!r} is not FLEET:INDEX.")
    return fleet, int(index)


def _print_ready(spec: ServerSpec, info: Any) -> None:
    t = info.timeline
    out.print(f"[green]ready[/green] {spec.name}: http://{spec.host}:{spec.port}/v1", markup=True)
    out.print(f"  model: {', '.join(info.served_names)}  max_model_len: {info.max_model_len}")
    out.print(f"  vLLM {info.version}  load {info.load_s:.1f} s", end="")
    if t.kv_cache_tokens:
        out.print(f"  KV cache {t.kv_cache_tokens:,} tokens", end="")
    if t.speculative_enabled is not None:
        out.print(f"  speculative {'on' if t.speculative_enabled else 'off'}", end="")
    out.print("")
    if spec.tuned is not None:
        out.print(f"  {spec.tuned.line()}", markup=False, soft_wrap=True)
    if spec.api_key:
        out.print(f"  API key: in {state_dir() / 'api-keys' / (spec.name + '.key')}")


@expected_errors
def down(
    name: str = typer.Argument(
        None,
        help="Server or fleet name (default: the only one).",
        autocompletion=complete_server,
    ),
) -> None:
    """Stop a server the brain started (and its supervisor, if any), or every replica of a
    fleet."""
    registry = Registry()
    records = registry.servers()
    fleets = {r.fleet for r in records}
    if name is None and len(records) > 1 and len(fleets) == 1 and None not in fleets:
        name = records[0].fleet
    if name and registry.get(name) is None and any(r.fleet == name for r in records):
        from brain.fleet.cli import down_fleet

        down_fleet(name)
        return
    stop_server(registry, _pick(registry, name))


@expected_errors
def restart(
    name: str = typer.Argument(
        None, help="Server name (default: the only one).", autocompletion=complete_server
    ),
) -> None:
    """Restart a server; with a live weight-cache daemon for it, load from the daemon."""
    registry = Registry()
    rec = _pick(registry, name)
    if rec.supervisor_pid and pid_alive(rec.supervisor_pid):
        os.kill(rec.supervisor_pid, signal.SIGHUP)
        out.print(f"asked the supervisor (pid {rec.supervisor_pid}) to restart {rec.name}")
        return
    spec = rec.server_spec()
    daemon = registry.get_preload(spec.name)
    if daemon is not None and not spec.preload.enabled:
        from brain.preload import preload_status

        if preload_status(daemon).alive:
            preload = spec.preload.model_copy(
                update={"enabled": True, "socket_dir": daemon.server_spec().preload.socket_dir}
            )
            spec = spec.model_copy(update={"preload": preload})
            say("a weight-cache daemon is running for it: loading from the daemon")
    registry_check = preflight(registry)
    registry_check(spec)  # refuse before stopping the old server if the new one cannot start
    launcher = launcher_for_record(rec)
    handle = ServerHandle.from_dict(rec.handle)
    launcher.stop(handle, timeout=spec.timeouts.stop_timeout_s)
    registry.remove(rec.name)
    from brain.supervisor import GpuGuard, Supervisor

    GpuGuard(say).after_stop(spec)
    supervisor = Supervisor(
        spec,
        make_launcher(spec.backend),
        server_events(),
        registry=registry,
        preflight=None,
        say=say,
    )
    info = supervisor.start_once()
    _print_ready(spec, info)


@expected_errors
def ps(
    json_out: bool = typer.Option(False, "--json", help="One JSON object per server."),
) -> None:
    """The servers and weight-cache daemons the brain started."""
    from brain.fleet.cli import ps_tables

    registry = Registry()
    if json_out:
        for line in _ps_json(registry):
            print(line)
        return
    now = time.time()
    tables = ps_tables(registry)
    for table in tables:
        out.print(table)
    if not tables:
        out.print("no servers (start one with: brain up PROFILE)")
    daemons = registry.preloads()
    if daemons:
        from brain.preload import preload_status

        t = Table("preload daemon", "state", "model", "backend", "uptime")
        for d in daemons:
            st = preload_status(d)
            t.add_row(
                d.name,
                st.describe(),
                str(d.fingerprint.get("checkpoint")),
                d.backend,
                fmt_age(now - d.started_at),
            )
        out.print(t)


def _ps_json(registry: Registry) -> list[str]:
    """Each server the brain started, as a JSON line (what `brain ps` shows, for scripts)."""
    import json

    lines = []
    for rec in sorted(registry.servers(), key=lambda r: r.name):
        handle = ServerHandle.from_dict(rec.handle)
        try:
            state = launcher_for_record(rec).status(handle).describe()
        except Exception as exc:  # a listing reports, it does not fail on one server
            state = f"unknown ({exc})"
        lines.append(
            json.dumps(
                {
                    "name": rec.name,
                    "backend": rec.backend,
                    "state": state,
                    "url": f"{handle.base_url}/v1",
                    "model": rec.spec.get("model"),
                    "fleet": rec.fleet,
                    "replica": rec.replica,
                    "supervisor_pid": rec.supervisor_pid,
                    "started_at": rec.started_at,
                }
            )
        )
    return lines


@expected_errors
def status(
    name: str = typer.Argument(
        None,
        help="Server name (default: the only one), or the URL of any OpenAI server.",
        autocompletion=complete_server,
    ),
    interval: float = typer.Option(2.0, "--interval", help="Seconds between metric samples."),
    api_key: str = typer.Option(
        None, "--api-key", envvar="OPENAI_API_KEY", help="For a URL: the server's key."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="One JSON object (one per server for a fleet or several)."
    ),
) -> None:
    """Health, version, context, load, KV cache and speculative acceptance of a server: one the
    brain started (by name), or any OpenAI-compatible server by its URL. Exits 1, with the
    reason, when the server does not answer /health with 200."""
    if name and name.startswith(("http://", "https://")):
        base = server_root(name)
        facts = {"server": None, "url": f"{base}/v1", "started_by_brain": False}
        facts |= status_facts(base, api_key, interval)
        problem = unhealthy_reason(facts, base)
        if problem is None or json_out:
            _print_status(facts, f"{base}/v1 (not started by the brain)", json_out)
        if problem is not None:
            raise BrainError(problem)
        return
    registry = Registry()
    records = registry.servers()
    members = [r for r in records if name and r.fleet == name]
    if registry.get(name or "") is None and (members or (name is None and len(records) > 1)):
        from brain.fleet.cli import status_overview, status_overview_json

        if json_out:
            for line in status_overview_json(members or records):
                print(line)
            return
        out.print(status_overview(members or records))  # a fleet, or several servers: one line each
        return
    rec = _pick(registry, name)
    spec = rec.server_spec()
    handle = ServerHandle.from_dict(rec.handle)
    st = launcher_for_record(rec).status(handle)
    facts = {
        "server": rec.name,
        "backend": rec.backend,
        "url": f"{handle.base_url}/v1",
        "started_by_brain": True,
        "process": st.describe(),
        "alive": st.alive,
    }
    facts |= status_facts(handle.base_url, spec.api_key, interval)
    _print_status(facts, f"{rec.name} ({rec.backend}) {handle.base_url}/v1", json_out)
    if (problem := unhealthy_reason(facts, handle.base_url)) is not None:
        raise BrainError(problem)


def _print_status(facts: dict[str, Any], server: str, json_out: bool) -> None:
    """``facts`` as one JSON line (for scripts), or as the table people read."""
    if json_out:
        import json

        print(json.dumps(facts))
        return
    table = Table(show_header=False, box=None)
    table.add_row("server", server)
    if "process" in facts:
        table.add_row("process", facts["process"])
    for key, value in status_rows(facts):
        table.add_row(key, value)
    out.print(table)


@expected_errors
def logs(
    name: str = typer.Argument(
        None, help="Server name (default: the only one).", autocompletion=complete_server
    ),
    follow: bool = typer.Option(False, "-f", "--follow", help="Keep printing new lines."),
    tail: int = typer.Option(0, "--tail", help="Only the last N lines (0: all)."),
) -> None:
    """The server's output (vLLM's log)."""
    from collections import deque

    registry = Registry()
    rec = _pick(registry, name)
    launcher = launcher_for_record(rec)
    handle = ServerHandle.from_dict(rec.handle)
    if tail and not follow:
        lines: Any = deque(launcher.logs(handle), maxlen=tail)
    else:
        lines = launcher.logs(handle, follow=follow)
    try:
        for line in lines:
            out.print(line, markup=False, highlight=False, soft_wrap=True)
    except KeyboardInterrupt:
        pass


@expected_errors
def doctor(
    profile: ProfileArg = None,
    set_: SetOpt = None,
    preset: PresetOpt = None,
    backend: BackendOpt = None,
    no_gpu: NoGpuOpt = False,
    json_out: bool = typer.Option(
        False, "--json", help="One JSON object: the server, ok, and each check."
    ),
) -> None:
    """Check everything a start needs; each line ok or what to do. Exit 1 if any fails."""
    from brain.doctor import run_checks

    spec = build_spec(profile, set_, preset, backend, no_gpu)
    results = run_checks(spec)
    failed = any(r.level == "fail" for r in results)
    if json_out:
        import json

        checks = [{"level": r.level, "check": r.name, "message": r.message} for r in results]
        facts = {"server": spec.name, "backend": spec.backend, "ok": not failed}
        print(json.dumps(facts | {"checks": checks}))
        if failed:
            raise typer.Exit(1)
        return
    table = Table("", "check", "result")
    marks = {"ok": "[green]ok[/green]", "warn": "[yellow]warn[/yellow]", "fail": "[red]FAIL[/red]"}
    for r in results:
        table.add_row(marks[r.level], r.name, r.message)
    out.print(f"doctor: {spec.name} ({spec.backend})")
    out.print(table)
    if failed:
        raise typer.Exit(1)


@expected_errors
def profiles(
    json_out: bool = typer.Option(
        False, "--json", help="One JSON object per profile and per preset."
    ),
) -> None:
    """Built-in profiles and presets, one line each."""
    from brain.profiles import list_presets, list_profiles, load_profile

    if json_out:
        for line in _profiles_json():
            print(line)
        return
    out.print("profiles (brain up PROFILE):")
    for name in list_profiles():
        try:
            s = load_profile(name)
            line = f"  {name:<26} {s.backend:<7} {s.model}  port {s.port}  - {s.description}"
        except SpecError as exc:
            line = f"  {name:<26} invalid: {exc}"
        out.print(line, markup=False, soft_wrap=True)
    out.print("presets (--preset NAME):")
    for name, desc in list_presets().items():
        out.print(f"  {name:<26} {desc}", markup=False, soft_wrap=True)


def _profiles_json() -> list[str]:
    """Each built-in profile (``kind: profile``, or its error when it does not load) and each
    preset (``kind: preset``), as JSON lines."""
    import json

    from brain.profiles import list_presets, list_profiles, load_profile

    lines = []
    for name in list_profiles():
        try:
            s = load_profile(name)
        except SpecError as exc:
            lines.append(json.dumps({"kind": "profile", "name": name, "error": str(exc)}))
            continue
        facts = {"kind": "profile", "name": name, "backend": s.backend, "model": s.model}
        facts |= {"port": s.port, "description": s.description, "error": None}
        lines.append(json.dumps(facts))
    for name, desc in list_presets().items():
        lines.append(json.dumps({"kind": "preset", "name": name, "description": desc}))
    return lines


# --------------------------------------------------------------------------- preload

preload_app = typer.Typer(help="The vLLM weight-cache daemon (vllm preload).", no_args_is_help=True)


@preload_app.command("start")
@expected_errors
def preload_start(
    profile: ProfileArg = None,
    set_: SetOpt = None,
    preset: PresetOpt = None,
    backend: BackendOpt = None,
    no_gpu: NoGpuOpt = False,
    timeout: float = typer.Option(None, "--timeout", help="Seconds to wait for READY."),
) -> None:
    """Start the daemon with the server's exact engine args; wait for its READY line."""
    from brain.preload import make_preload_launcher, start_preload

    spec = build_spec(profile, set_, preset, backend, no_gpu)
    if not spec.preload.enabled:
        spec = spec.model_copy(
            update={"preload": spec.preload.model_copy(update={"enabled": True})}
        )
    rec = start_preload(spec, make_preload_launcher(spec.backend), Registry(), timeout=timeout)
    out.print(f"[green]weight-cache daemon ready[/green] for {spec.name}", markup=True)
    for k, v in rec.fingerprint.items():
        out.print(f"  {k}: {v}")


@preload_app.command("stop")
@expected_errors
def preload_stop(name: str = typer.Argument(None, help="Server name (default: the only one).")):
    """Stop the daemon."""
    from brain.preload import stop_preload

    registry = Registry()
    if name is None:
        names = [d.name for d in registry.preloads()]
        if len(names) != 1:
            raise BrainError("name the daemon to stop: " + (", ".join(names) or "none is running"))
        name = names[0]
    if not stop_preload(name, registry):
        raise BrainError(f"no weight-cache daemon recorded for {name!r}.")
    out.print(f"stopped the weight-cache daemon for {name}")


@preload_app.command("status")
@expected_errors
def preload_status_cmd(name: str = typer.Argument(None)) -> None:
    """State and fingerprint of the daemon(s)."""
    from brain.preload import preload_status

    daemons = Registry().preloads()
    if name:
        daemons = [d for d in daemons if d.name == name]
    if not daemons:
        out.print("no weight-cache daemon is running (brain preload start PROFILE)")
        raise typer.Exit(1 if name else 0)
    for d in daemons:
        out.print(f"{d.name}: {preload_status(d).describe()} ({d.backend})")
        for k, v in d.fingerprint.items():
            out.print(f"  {k}: {v}")


def register(app: typer.Typer) -> None:
    """Add the server commands to the ``brain`` app."""
    app.command("up")(up)
    app.command("down")(down)
    app.command("restart")(restart)
    app.command("ps")(ps)
    app.command("status")(status)
    app.command("logs")(logs)
    app.command("doctor")(doctor)
    app.command("profiles")(profiles)
    app.add_typer(preload_app, name="preload")
