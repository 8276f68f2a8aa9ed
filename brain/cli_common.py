"""What every ``brain`` server command shares: the consoles, the error exit, the spec options,
and the steps a single server and a fleet both take (build the spec, record events, check
before a start, stop one server).

``brain.cli_server`` (one server) and ``brain.fleet.cli`` (replicas) both import from here,
so neither reaches into the other's private names. Nothing here registers a command.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from brain.errors import BrainError, SpecError
from brain.launchers import make_launcher
from brain.launchers.base import Launcher, ServerHandle
from brain.spec import Backend, ServerSpec
from brain.state import Registry, ServerRecord

DEFAULT_PROFILE = "gemma4-e4b-mtp"
F = TypeVar("F", bound=Callable[..., Any])

out = Console(highlight=False, width=None if sys.stdout.isatty() else 100_000)
"""Tables written to a pipe or file are as wide as their cells: nothing is cut or wrapped."""
err = Console(stderr=True, highlight=False)


def complete_profile(incomplete: str) -> list[str]:
    """Shell completion of a profile argument: the built-in profiles (a path is left to the
    shell, which completes file names when this offers none)."""
    from brain.profiles import list_profiles

    return [name for name in list_profiles() if name.startswith(incomplete)]


def complete_preset(incomplete: str) -> list[tuple[str, str]]:
    """Shell completion of ``--preset``: the presets and their descriptions."""
    from brain.profiles import list_presets

    return [(n, d) for n, d in list_presets().items() if n.startswith(incomplete)]


def complete_server(incomplete: str) -> list[tuple[str, str]]:
    """Shell completion of a server name: the servers and fleets the brain started."""
    records = Registry().servers()
    names = {r.name: r.backend for r in records} | {r.fleet: "fleet" for r in records if r.fleet}
    return [(n, what) for n, what in sorted(names.items()) if n.startswith(incomplete)]


# The options that say which server: profile, then preset, then --backend/--no-gpu, then --set.
ProfileArg = Annotated[
    str,
    typer.Argument(
        help=f"Profile name or YAML file (default: {DEFAULT_PROFILE}).",
        metavar="PROFILE",
        autocompletion=complete_profile,
    ),
]
"""No square brackets in help texts: typer reads them as rich markup and drops them."""
SetOpt = Annotated[
    list[str], typer.Option("--set", metavar="KEY=VALUE", help="Override a spec key.")
]
PresetOpt = Annotated[
    str,
    typer.Option(
        "--preset",
        metavar="PRESET",
        help="Apply a preset (brain profiles lists them).",
        autocompletion=complete_preset,
    ),
]
BackendOpt = Annotated[
    Backend, typer.Option("--backend", help="Where it runs (the profile's by default).")
]
NoGpuOpt = Annotated[bool, typer.Option("--no-gpu", help="Docker: leave out the GPU request.")]


def expected_errors(fn: F) -> F:
    """Print BrainErrors (and their diagnosis) as messages and exit 1 (2 for a bad spec),
    without a traceback: tracebacks are for bugs only."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SpecError as exc:
            err.print(f"[red]spec error:[/red] {escape(str(exc))}", markup=True, soft_wrap=True)
            raise typer.Exit(2) from None
        except BrainError as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}", markup=True, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def say(msg: str) -> None:
    """A progress line on stderr, so stdout stays the command's result."""
    err.print(f"[dim]brain:[/dim] {escape(msg)}", markup=True, soft_wrap=True)


def fmt_age(seconds: float) -> str:
    """An uptime as people read it: ``42s``, ``5m07s``, ``3h02m``."""
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def pid_alive(pid: int | None) -> bool:
    """Whether the process (a supervisor, say) still runs; ``None`` is never alive."""
    from brain.launchers.process import pid_alive as alive

    return alive(pid)


def build_spec(
    profile: str | None,
    sets: list[str] | None = None,
    preset: str | None = None,
    backend: str | None = None,
    no_gpu: bool = False,
) -> ServerSpec:
    """Profile, then preset, then ``--backend``/``--no-gpu``, then ``--set`` (last wins)."""
    from brain.profiles import apply_overrides, apply_preset, load_profile

    spec = load_profile(profile or DEFAULT_PROFILE)
    if preset:
        spec = apply_preset(spec, preset)
    extra: list[str] = []
    if backend:
        extra.append(f"backend={backend}")
    if no_gpu:
        extra.append("docker.request_gpus=false")
    overrides = extra + list(sets or [])
    return apply_overrides(spec, overrides) if overrides else spec


def launcher_for_record(record: ServerRecord) -> Launcher:
    """The launcher that started ``record`` (its backend), to ask about or stop it."""
    return make_launcher(record.backend)


def server_events() -> Any:
    """The server-event writer; a null writer (and a warning) when the database cannot be
    written, since a missing event log must not stop a server."""
    from brain.events import NullEvents, ServerEventWriter

    try:
        return ServerEventWriter()
    except Exception as exc:  # an unwritable database must not stop the server
        say(f"server events will not be recorded ({exc})")
        return NullEvents()


def preflight(registry: Registry) -> Callable[[ServerSpec], None]:
    """The check run before each start: the GPUs are free and a preload daemon matches."""
    from brain.preload import check_preload
    from brain.supervisor import GpuGuard

    guard = GpuGuard(say)

    def check(spec: ServerSpec) -> None:
        guard.before_start(spec)
        check_preload(spec, registry)

    return check


def stop_server(registry: Registry, rec: ServerRecord) -> None:
    """Stop one server: its supervisor first (so it does not restart it), then the server."""
    spec = rec.server_spec()
    if rec.supervisor_pid and pid_alive(rec.supervisor_pid) and rec.supervisor_pid != os.getpid():
        os.kill(rec.supervisor_pid, signal.SIGTERM)
        deadline = time.monotonic() + spec.timeouts.stop_timeout_s + 15
        while pid_alive(rec.supervisor_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(rec.supervisor_pid):
            raise BrainError(f"the supervisor (pid {rec.supervisor_pid}) did not stop in time.")
    launcher = launcher_for_record(rec)
    handle = ServerHandle.from_dict(rec.handle)
    if launcher.status(handle).alive:
        launcher.stop(handle, timeout=spec.timeouts.stop_timeout_s)
    registry.remove(rec.name)
    server_events().record(rec.name, "stopped", {"reason": "brain down", "ref": handle.ref})
    from brain.supervisor import GpuGuard

    GpuGuard(say).after_stop(spec)
    out.print(f"stopped {rec.name}")
