"""The fleet side of ``brain up/down/ps/status``: plan, dry-run, start, stop and list replicas.

``brain.cli_server`` hands over here when a command is about a fleet (``--replicas``,
``--gpus``, ``--fleet FILE``, or a fleet's name); single servers never pass through. Thin
like the rest of the CLI: planning is ``brain.fleet.plan``, starting and watching is
``brain.fleet.run``; the consoles, spec building and stopping one server are shared with
``brain.cli_server`` through ``brain.cli_common``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import httpx
from rich.table import Table

from brain.cli_common import (
    build_spec,
    fmt_age,
    out,
    pid_alive,
    preflight,
    say,
    server_events,
    stop_server,
)
from brain.errors import BrainError, SpecError
from brain.fleet.plan import (
    Replica,
    check_fleet,
    fleet_records,
    gpus_text,
    load_fleet_file,
    parse_gpus,
    plan_replicas,
)
from brain.launchers.base import ServerHandle
from brain.spec import ensure_api_key
from brain.spec_checks import check_launchable, launch_problems
from brain.state import Registry, ServerRecord, state_dir


def plan_from_cli(
    *,
    profile: str | None,
    sets: list[str] | None,
    preset: str | None,
    backend: str | None,
    no_gpu: bool,
    replicas: int | None,
    gpus: str | None,
    fleet_file: str | None,
    port: int | None,
) -> list[Replica]:
    """The replicas ``brain up`` was asked for, checked against each other."""
    if fleet_file:
        given = {
            "PROFILE": profile,
            "--replicas": replicas,
            "--gpus": gpus,
            "--port": port,
            "--set": sets,
            "--preset": preset,
            "--backend": backend,
        }
        extra = [k for k, v in given.items() if v not in (None, [], False)]
        if extra or no_gpu:
            given_text = ", ".join(extra or ["--no-gpu"])
            raise SpecError(
                f"--fleet takes every server setting from the file; {given_text} would be "
                "ambiguous.",
                field="--fleet",
                hint="put it in the file (profile, replicas, gpus, port, overrides per server)",
            )
        _name, reps = load_fleet_file(fleet_file)
    else:
        # --gpus replaces the profile's GPUs, so they must not fail validation on the way
        # (a one-GPU profile with --set tensor_parallel_size=2 --gpus 0,1,2,3).
        sets = (["gpus=all"] if gpus else []) + list(sets or [])
        spec = build_spec(profile, sets, preset, backend, no_gpu)
        reps = plan_replicas(
            spec, replicas=replicas, gpus=cli_gpus(gpus) if gpus else None, base_port=port
        )
    return reps


def cli_gpus(value: str) -> list[str]:
    """``--gpus`` as ``parse_gpus`` reads it, and ``all`` (as Docker takes it): every GPU this
    host has, by index, asked of NVML or nvidia-smi; a SpecError when it has none."""
    if value.strip().lower() != "all":
        return parse_gpus(value)
    from brain.errors import NoNvidiaGpu
    from brain.gpu import query_gpus

    try:
        found = query_gpus()
    except (NoNvidiaGpu, OSError) as exc:
        raise SpecError(
            f"--gpus all: this host shows no NVIDIA GPU ({exc})",
            field="--gpus",
            hint="name the GPUs (--gpus 0,1) where they are, or use --backend sim",
        ) from None
    return [str(g.index) for g in found]


def _with_shared_api_key(replicas: list[Replica]) -> list[Replica]:
    """Replicas reachable from the network get one API key per fleet (stored under the fleet's
    name), so a client configured once can use any replica."""
    needs = [r for r in replicas if launch_problems(r.spec)]
    if not needs:
        return replicas
    fleet = replicas[0].fleet
    keyed = ensure_api_key(needs[0].spec.model_copy(update={"name": fleet}), state_dir())
    return [
        Replica(r.fleet, r.index, r.spec.model_copy(update={"api_key": keyed.api_key}))
        if r in needs
        else r
        for r in replicas
    ]


def dry_run_fleet_text(replicas: Sequence[Replica], warnings: Sequence[str]) -> str:
    """Every replica's command line, each under a header saying which replica, GPUs, port."""
    from brain.command import dry_run_text

    fleet = replicas[0].fleet
    blocks = [f"# fleet {fleet}: {len(replicas)} replica(s)"]
    for r in replicas:
        blocks.append(
            f"\n# --- replica {r.index}: {r.name}  GPUs {r.gpus}  port {r.spec.port}\n"
            + dry_run_text(r.spec)
        )
    blocks += [f"# warning: {w}" for w in warnings]
    return "\n".join(blocks)


def up_fleet(
    replicas: list[Replica],
    *,
    dry_run: bool,
    watch: bool,
    pull: bool,
    child_args: Sequence[str],
) -> int:
    """``brain up`` for a fleet; returns the exit code."""
    from brain.fleet.run import clear_stale, ensure_ports_free, start_fleet, watch_fleet

    warnings = check_fleet(replicas)
    if dry_run:
        out.print(dry_run_fleet_text(replicas, warnings), markup=False, soft_wrap=True)
        return 0
    for w in warnings:
        say(f"warning: {w}")
    replicas = _with_shared_api_key(replicas)
    for r in replicas:
        check_launchable(r.spec)
    registry = Registry()
    clear_stale(replicas, registry)
    ensure_ports_free(replicas)
    fleet = replicas[0].fleet
    say(
        f"starting fleet {fleet}: "
        + ", ".join(f"{r.name} (GPUs {r.gpus}, port {r.spec.port})" for r in replicas)
    )
    if watch:
        return watch_fleet(replicas, child_args=child_args, say=say)
    started = start_fleet(
        replicas, registry=registry, events=server_events(), preflight=preflight(registry), say=say
    )
    out.print(f"[green]ready[/green] fleet {fleet}: {len(started)} replica(s)", markup=True)
    for r, info in started:
        out.print(
            f"  {r.name}  GPUs {r.gpus}  http://{r.spec.host}:{r.spec.port}/v1  "
            f"(model {', '.join(info.served_names)}, load {info.load_s:.1f} s)",
            markup=False,
        )
    if any(r.spec.api_key for r, _ in started):
        out.print(f"  API key: in {state_dir() / 'api-keys' / (fleet + '.key')}")
    return 0


def down_fleet(name: str) -> None:
    """Stop every replica of fleet ``name``: their supervisors together, then what is left."""
    from brain.fleet.run import stop_fleet_supervisors

    registry = Registry()
    records = fleet_records(name, registry)
    timeout = max(r.server_spec().timeouts.stop_timeout_s for r in records) + 15
    stop_fleet_supervisors(name, registry, timeout)
    for rec in fleet_records(name, registry):
        stop_server(registry, rec)
    out.print(f"stopped fleet {name} ({len(records)} replica(s))")


# --------------------------------------------------------------------------- views


def _state(rec: ServerRecord) -> tuple[str, bool]:
    from brain.launchers import make_launcher

    handle = ServerHandle.from_dict(rec.handle)
    try:
        status = make_launcher(rec.backend).status(handle)
    except BrainError as exc:
        return f"unknown ({str(exc).splitlines()[0]})", False
    return status.describe(), status.alive


def server_row(rec: ServerRecord, now: float) -> list[str]:
    """One line of ``brain ps``: server, state, model, port, GPUs, uptime, backend, supervised."""
    handle = ServerHandle.from_dict(rec.handle)
    state, alive = _state(rec)
    style = "green" if alive else "red"
    return [
        rec.name,
        f"[{style}]{state}[/{style}]",
        str(rec.spec.get("served_model_name") or rec.spec.get("model")),
        str(handle.port),
        gpus_text(rec.spec),
        fmt_age(now - handle.started_at) if alive else "-",
        rec.backend,
        f"pid {rec.supervisor_pid}" if pid_alive(rec.supervisor_pid) else "no",
    ]


PS_COLUMNS = ("server", "state", "model", "port", "gpus", "uptime", "backend", "supervised")


def ps_tables(registry: Registry) -> list[Table]:
    """Single servers in one table, then one table per fleet (its replicas in order)."""
    now = time.time()
    records = registry.servers()
    tables = []
    singles = sorted((r for r in records if not r.fleet), key=lambda r: r.name)
    if singles:
        t = Table(*PS_COLUMNS)
        for rec in singles:
            t.add_row(*server_row(rec, now))
        tables.append(t)
    for fleet in sorted({r.fleet for r in records if r.fleet}):
        members = fleet_records(fleet, registry)
        rows = [server_row(rec, now) for rec in members]
        running = sum("running" in row[1] for row in rows)
        t = Table(*PS_COLUMNS, title=f"fleet {fleet}: {running}/{len(rows)} running")
        for row in rows:
            t.add_row(*row)
        tables.append(t)
    return tables


def _health(rec: ServerRecord) -> str:
    plain = _health_plain(rec)
    return f"[green]{plain}[/green]" if plain == "ok" else f"[red]{plain}[/red]"


def _health_plain(rec: ServerRecord) -> str:
    """ "ok", "unreachable" or "HTTP <code>" from the server's /health."""
    base = ServerHandle.from_dict(rec.handle).base_url
    try:
        code = httpx.get(f"{base}/health", timeout=3.0).status_code
    except httpx.HTTPError:
        return "unreachable"
    return "ok" if code == 200 else f"HTTP {code}"


def _fleet_order(rec: ServerRecord) -> tuple[str, int, str]:
    return (rec.fleet or "", rec.replica if rec.replica is not None else -1, rec.name)


def status_overview_json(records: Sequence[ServerRecord]) -> list[str]:
    """``brain status --json`` over several servers: one JSON line per server, as the table."""
    import json

    lines = []
    for rec in sorted(records, key=_fleet_order):
        state, alive = _state(rec)
        handle = ServerHandle.from_dict(rec.handle)
        health = _health_plain(rec) if alive else None
        lines.append(
            json.dumps(
                {
                    "server": rec.name,
                    "fleet": rec.fleet,
                    "replica": rec.replica,
                    "gpus": gpus_text(rec.spec),
                    "url": f"{handle.base_url}/v1",
                    "process": state,
                    "alive": alive,
                    "health": health,
                }
            )
        )
    return lines


def status_overview(records: Sequence[ServerRecord]) -> Table:
    """``brain status`` over several servers: grouped by fleet, one line per replica."""
    table = Table("fleet", "replica", "server", "gpus", "port", "state", "health")
    last: str | None = None
    for rec in sorted(records, key=_fleet_order):
        if last is not None and rec.fleet != last:
            table.add_section()
        last = rec.fleet or ""
        state, alive = _state(rec)
        table.add_row(
            rec.fleet or "-",
            "-" if rec.replica is None else str(rec.replica),
            rec.name,
            gpus_text(rec.spec),
            str(ServerHandle.from_dict(rec.handle).port),
            f"[{'green' if alive else 'red'}]{state}[/]",
            _health(rec) if alive else "-",
        )
    return table
