"""Start and watch a fleet's replicas: the side-effecting half of ``brain.fleet.plan``.

Without ``--watch`` every replica is started at once (in threads, so N loads overlap), except
that replicas splitting one GPU start one after the other (``shared_gpu_groups``); the
fleet is all or nothing: if one fails, the ones already up are stopped and the error names the
replica. With ``--watch`` each replica gets its own supervisor *process* (``brain up
<replica spec> --watch``): a replica's death, restarts and give-up never touch the others, and
``brain down <replica>`` stops just that one while ``brain down <fleet>`` stops them all. The
parent only starts them (a split GPU's next replica once the previous one answers /health),
forwards SIGTERM/SIGINT/SIGHUP, and waits.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from brain.errors import BrainError, PortInUse
from brain.events import EventsWriter
from brain.fleet.plan import Replica, fleet_records, shared_gpu_groups
from brain.launchers import make_launcher
from brain.launchers.base import ServerHandle
from brain.launchers.ports import ensure_port_free
from brain.launchers.process import pid_alive
from brain.readiness import ReadyInfo
from brain.state import Registry, state_dir
from brain.supervisor import Preflight, Say, Supervisor

# How a child supervisor is started: the same CLI, whatever installed it (no PATH lookup).
BRAIN_CLI = [sys.executable, "-c", "from brain.cli import app; app()"]


def ensure_ports_free(replicas: Sequence[Replica]) -> None:
    """Every replica's port is free before any starts (no half-started fleet on a busy port)."""
    for r in replicas:
        try:
            ensure_port_free(r.spec.host, r.spec.port)
        except PortInUse as exc:
            raise BrainError(
                f"{r.name}: {exc} Replicas take base port + i: choose another base with "
                "--port, or --port 0 to let the OS pick free ports."
            ) from None


def clear_stale(replicas: Sequence[Replica], registry: Registry) -> None:
    """Refuse when the fleet (or one of its names) is running; forget records of dead ones."""
    names = {r.name for r in replicas}
    fleets = {r.fleet for r in replicas}
    for rec in registry.servers():
        if rec.name not in names and rec.fleet not in fleets:
            continue
        handle = ServerHandle.from_dict(rec.handle)
        if make_launcher(rec.backend).status(handle).alive:
            which = f"fleet {rec.fleet}" if rec.fleet in fleets else rec.name
            raise BrainError(
                f"{which} is already running ({rec.name} on port {handle.port}); "
                f"stop it first: brain down {rec.fleet or rec.name}"
            )
        registry.remove(rec.name)


def start_fleet(
    replicas: Sequence[Replica],
    *,
    registry: Registry,
    events: EventsWriter,
    preflight: Preflight | None,
    say: Say,
    pull: bool = False,
) -> list[tuple[Replica, ReadyInfo]]:
    """Start every replica and wait until all are ready; on any failure stop the others and
    raise that failure, prefixed with the replica's name."""
    results: dict[int, ReadyInfo] = {}
    errors: dict[int, BaseException] = {}
    supervisors: dict[int, Supervisor] = {}

    def one(r: Replica) -> None:
        sup = Supervisor(
            r.spec,
            make_launcher(r.spec.backend, pull=pull),
            events,
            registry=registry,
            preflight=preflight,
            say=say,
            fleet=r.fleet,
            replica=r.index,
        )
        supervisors[r.index] = sup
        try:
            results[r.index] = sup.start_once()
        except BaseException as exc:
            errors[r.index] = exc

    def chain(group: list[Replica]) -> None:
        for before, r in zip([None, *group], group, strict=False):
            if errors:
                return
            if before is not None:
                gpus = ",".join(map(str, r.spec.gpus)) if isinstance(r.spec.gpus, list) else ""
                say(f"{r.name} shares GPU {gpus} with {before.name}: starting it now")
            one(r)

    groups = shared_gpu_groups(replicas)
    threads = [threading.Thread(target=chain, args=(g,), daemon=True) for g in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for index, sup in supervisors.items():
            if index in results and sup.handle is not None:
                sup.launcher.stop(sup.handle, timeout=sup.spec.timeouts.stop_timeout_s)
                registry.remove(sup.spec.name)
        first = min(errors)
        name = next(r.name for r in replicas if r.index == first)
        say(f"{name} failed to start; the other replicas were stopped (all or nothing)")
        raise errors[first]
    return [(r, results[r.index]) for r in replicas]


# --------------------------------------------------------------------------- --watch


def replica_spec_file(replica: Replica) -> Path:
    """Write the replica's spec where its supervisor process can load it (0600: it may hold
    the API key). As JSON, which is YAML with every string quoted, so the profile reader
    (YAML 1.2) reads back exactly what was written (PyYAML's YAML 1.1 writer leaves ``08``
    and ``1e5`` unquoted, which YAML 1.2 reads as numbers)."""
    directory = state_dir() / "fleets" / replica.fleet
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / f"{replica.name}.yaml"
    text = json.dumps(replica.spec.model_dump(mode="json"), indent=2) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def watch_fleet(replicas: Sequence[Replica], *, child_args: Sequence[str], say: Say) -> int:
    """One ``brain up <spec> --watch`` process per replica; forward signals; wait for all.

    Returns 0 when every supervisor stopped cleanly, 1 when any failed or gave up.
    """
    procs: list[tuple[Replica, subprocess.Popen[bytes]]] = []
    after: dict[int, Replica] = {}
    for group in shared_gpu_groups(replicas):
        for before, r in itertools.pairwise(group):
            after[r.index] = before
    for r in replicas:
        if r.index in after:
            prev = after[r.index]
            say(f"{r.name} shares GPU {','.join(map(str, r.spec.gpus))}: waiting for {prev.name}")
            _wait_healthy(prev, next(p for q, p in procs if q.index == prev.index))
        cmd = [*BRAIN_CLI, "up", str(replica_spec_file(r)), "--watch"]
        cmd += ["--fleet-member", f"{r.fleet}:{r.index}", *child_args]
        procs.append((r, subprocess.Popen(cmd)))
    say(f"fleet {replicas[0].fleet}: {len(procs)} supervisors started")

    def forward(sig: int) -> Callable[[int, object], None]:
        def handler(_signum: int, _frame: object) -> None:
            for _r, p in procs:
                if p.poll() is None:
                    try:
                        p.send_signal(signal.SIGTERM if sig == signal.SIGINT else sig)
                    except ProcessLookupError:
                        pass

        return handler

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward(sig))
    codes: dict[str, int] = {}
    while len(codes) < len(procs):
        for r, p in procs:
            if r.name not in codes and (code := p.poll()) is not None:
                codes[r.name] = code
                if code:
                    say(f"{r.name}: its supervisor exited with code {code}; the others go on")
        time.sleep(0.2)
    return 1 if any(codes.values()) else 0


def _wait_healthy(replica: Replica, proc: subprocess.Popen[bytes]) -> None:
    """Until ``replica`` answers /health 200, its supervisor exits, or its load timeout passes
    (then the next replica starts anyway; its own start reports what went wrong)."""
    import httpx

    url = f"http://{replica.spec.host}:{replica.spec.port}/health"
    deadline = time.monotonic() + replica.spec.timeouts.load_timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)


def stop_fleet_supervisors(name: str, registry: Registry, timeout: float) -> None:
    """SIGTERM the supervisor of every replica of fleet ``name`` and wait for them together."""
    alive = pid_alive
    pids = [
        r.supervisor_pid
        for r in fleet_records(name, registry)
        if r.supervisor_pid and r.supervisor_pid != os.getpid() and alive(r.supervisor_pid)
    ]
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    if left:
        raise BrainError(f"supervisor(s) {', '.join(map(str, left))} did not stop in time.")
