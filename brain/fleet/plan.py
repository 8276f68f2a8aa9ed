"""Fleets: several copies (replicas) of a server, one per GPU or GPU group, and where they are.

``brain up PROFILE --replicas N --gpus 0,1,2,3`` and ``brain up --fleet fleet.yaml`` both turn
into a list of ``Replica``s here: each one a complete ServerSpec named ``<fleet>-r<i>`` with
its own port (base port + i) and its own GPUs (groups of ``tensor_parallel_size``), so every
other part of the brain (launchers, supervisor, registry, ``brain down``) handles a replica
exactly like a single server. Planning is pure: nothing is started and no port is probed
here (``brain.fleet.run`` does that). ``fleet_endpoints`` is the pilot's way in: the OpenAI
base URLs of a fleet's running replicas, read from the brain's registry.

Two replicas share a GPU only when the split is explicit: a GPU listed k times in ``--gpus``
(``0,0``) is shared by k replicas, each at the profile's ``gpu_memory_utilization / k``.
vLLM's utilization is a per-instance budget (its docs: two instances on one GPU can each take
0.5), so the k budgets add up to what the profile asked of the card.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from brain.errors import BrainError, FleetNotRunning, SpecError
from brain.spec import ServerSpec
from brain.state import Registry, ServerRecord

MAX_PORT = 65535
MIN_SHARED_UTILIZATION = 0.05
"""The smallest per-replica share of a split GPU: below it the CUDA context, the weights and
the activation profile leave no KV cache (vLLM then refuses with no room for cache blocks)."""


@dataclass(frozen=True)
class Replica:
    """One server of a fleet: its index and its complete spec (name, port and GPUs set)."""

    fleet: str
    index: int
    spec: ServerSpec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def gpus(self) -> str:
        """The GPUs as people write them (``0,1``), or ``-`` for the sim without GPUs."""
        return gpus_text(self.spec)


def gpus_text(spec: ServerSpec | dict[str, Any]) -> str:
    gpus = spec.gpus if isinstance(spec, ServerSpec) else spec.get("gpus", "all")
    if isinstance(gpus, list):
        return ",".join(str(g) for g in gpus)
    backend = spec.backend if isinstance(spec, ServerSpec) else spec.get("backend")
    return "-" if backend == "sim" else str(gpus)


def replica_name(fleet: str, index: int) -> str:
    return f"{fleet}-r{index}"


# --------------------------------------------------------------------------- GPUs and ports


_GPU_ID = re.compile(r"\d+|(?:GPU|MIG)-[\w/-]+")
"""What CUDA_VISIBLE_DEVICES and Docker's ``--gpus device=`` take: an index, or a GPU's or a
MIG instance's UUID (``nvidia-smi -L``)."""


def parse_gpus(value: str | int | Sequence[int | str]) -> list[str]:
    """``"0,1,2,3"``, ``4`` or ``[0, 1]`` -> ``["0", "1", ...]``; ids may be GPU UUIDs, and
    Docker's ``device=0,1`` is read as ``0,1``. A number is a device index, never a count
    (Docker's ``--gpus 2`` means two GPUs; ours means GPU 2): ``all`` is expanded by the CLI,
    which can ask the host (:func:`brain.fleet.cli.cli_gpus`).

    A GPU may be listed more than once (``0,0``): that is the explicit split of one card
    between replicas (``plan_replicas`` divides their memory)."""
    if isinstance(value, int):
        value = str(value)
    if isinstance(value, str):
        value = value.strip().removeprefix("device=")  # Docker's --gpus device=0,1 form
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    gpus = [g.strip() for g in items if g.strip()]
    if not gpus:
        raise SpecError("the GPU list is empty.", field="--gpus", hint="e.g. --gpus 0,1,2,3")
    if bad := [g for g in gpus if not _GPU_ID.fullmatch(g)]:
        raise SpecError(
            f"{', '.join(map(repr, bad))} {'is not a GPU' if len(bad) == 1 else 'are not GPUs'}: "
            "--gpus takes device indexes or UUIDs (GPU-..., MIG-...), separated by "
            "commas.",
            field="--gpus",
            hint="e.g. --gpus 0,1,2,3 or --gpus GPU-5e1a0c2b,GPU-77f3d9e0 (nvidia-smi -L)",
        )
    return gpus


def gpu_groups(
    gpus: Sequence[str], tensor_parallel_size: int, replicas: int | None = None
) -> list[list[str]]:
    """Split ``gpus`` into consecutive groups of ``tensor_parallel_size``, one per replica.

    TP 2 with ``0,1,2,3`` gives ``[["0","1"], ["2","3"]]``. A list that does not divide
    evenly, or a ``replicas`` count that does not match, is an error saying what to change:
    a silently idle GPU or a replica without one is worse than a refusal.
    """
    tp = tensor_parallel_size
    listed = ",".join(gpus)
    if len(gpus) % tp:
        fits = len(gpus) - len(gpus) % tp
        raise SpecError(
            f"{len(gpus)} GPUs ({listed}) cannot be split into groups of "
            f"tensor_parallel_size {tp}.",
            field="--gpus",
            hint=f"list a multiple of {tp} GPUs"
            + (f" (e.g. --gpus {','.join(gpus[:fits])})" if fits else "")
            + ", or change tensor_parallel_size (--set tensor_parallel_size=N)",
        )
    groups = [list(gpus[i : i + tp]) for i in range(0, len(gpus), tp)]
    for group in groups:
        twice = sorted({g for g in group if group.count(g) > 1})
        if twice:
            raise SpecError(
                f"GPU {', '.join(twice)} is twice in one tensor-parallel group "
                f"({','.join(group)}): one server's ranks need {tp} different GPUs.",
                field="--gpus",
                hint=f"give each rank its own GPU; to split GPUs between replicas repeat "
                f"whole groups of {tp} (e.g. --gpus "
                f"{','.join(str(i) for i in range(tp))},{','.join(str(i) for i in range(tp))})",
            )
    if replicas is not None and replicas != len(groups):
        raise SpecError(
            f"--replicas {replicas} at tensor_parallel_size {tp} needs {replicas * tp} GPUs, "
            f"but --gpus lists {len(gpus)} ({listed}), which makes {len(groups)} replica(s).",
            field="--replicas",
            hint=f"use --replicas {len(groups)} or leave it out (the GPUs decide), or list "
            f"{replicas * tp} GPUs",
        )
    return groups


def replica_ports(
    base: int, count: int, *, pick_free: Callable[[], int] | None = None
) -> list[int]:
    """``base, base+1, ...`` for ``count`` replicas; ``base`` 0 asks ``pick_free`` (the OS) for
    each one instead, for scripts and tests that must not collide with anything."""
    if base == 0:
        if pick_free is None:
            from brain.launchers.ports import free_port

            pick_free = free_port
        ports: list[int] = []
        while len(ports) < count:
            port = pick_free()
            if port not in ports:
                ports.append(port)
        return ports
    if base + count - 1 > MAX_PORT:
        raise SpecError(
            f"{count} replicas from port {base} would go past {MAX_PORT}.",
            field="port",
            hint="pick a lower base port (--port)",
        )
    return [base + i for i in range(count)]


# --------------------------------------------------------------------------- planning


def plan_replicas(
    spec: ServerSpec,
    *,
    replicas: int | None = None,
    gpus: Sequence[str] | None = None,
    base_port: int | None = None,
    fleet: str | None = None,
    first_index: int = 0,
) -> list[Replica]:
    """The replicas of ``spec``: how many (``replicas``, else one per GPU group), their GPUs,
    ports and names. Each replica spec is validated again, like any profile."""
    name = fleet or spec.name
    tp = spec.tensor_parallel_size
    if replicas is not None and replicas < 1:
        raise SpecError("must be at least 1.", field="--replicas")
    if spec.distributed is not None and ((replicas or 1) > 1 or gpus):
        raise SpecError(
            "a multi-node server is one replica spread over several machines; it cannot be "
            "replicated or pinned with --gpus here.",
            field="--replicas",
            hint="drop --replicas/--gpus (the distributed section says where it runs)",
        )
    groups: list[list[str]] | None
    if gpus:
        groups = gpu_groups(gpus, tp, replicas)
    elif spec.backend == "sim" or (replicas or 1) == 1:
        groups = None  # the sim needs no GPU; one replica keeps the profile's GPUs
    else:
        count = replicas or 1
        own = [str(g) for g in spec.gpus] if isinstance(spec.gpus, list) else []
        pool = own if len(own) == count * tp else [str(i) for i in range(count * tp)]
        groups = gpu_groups(pool, tp, count)
    count = len(groups) if groups is not None else (replicas or 1)
    if spec.preload.enabled and count > 1:
        raise SpecError(
            "the weight-cache daemon serves one server; replicas cannot share it.",
            field="preload.enabled",
            hint="set preload.enabled=false for a fleet",
        )
    shares = split_shares(groups, spec.gpu_memory_utilization) if groups is not None else None
    ports = replica_ports(spec.port if base_port is None else base_port, count)
    out = []
    for i in range(count):
        index = first_index + i
        update: dict[str, Any] = {"name": replica_name(name, index), "port": ports[i]}
        if groups is not None:
            update["gpus"] = [int(g) if g.isdigit() else g for g in groups[i]]
        if shares is not None and shares[i] is not None:
            update["gpu_memory_utilization"] = shares[i]
        out.append(Replica(name, index, _revalidate(spec, update)))
    return out


def split_shares(groups: Sequence[Sequence[str]], utilization: float) -> list[float | None]:
    """Per replica (one GPU group each): its memory share when its GPUs are split, else None.

    A group listed k times gets ``utilization / k`` (rounded down to 0.001, so the k shares
    never add up to more than the profile asked). Refused, saying what to change: replicas
    that share only some of their GPUs (the unshared ones would sit half idle), and a share
    below ``MIN_SHARED_UTILIZATION``.
    """
    keys = [tuple(g) for g in groups]
    out: list[float | None] = []
    for key in keys:
        k = keys.count(key)
        overlap = [o for o in keys if o != key and set(o) & set(key)]
        if overlap:
            raise SpecError(
                f"GPU group {','.join(key)} overlaps {','.join(overlap[0])} without being the "
                "same group: replicas split a GPU only when they share all their GPUs.",
                field="--gpus",
                hint="repeat whole groups (e.g. --gpus 0,1,0,1 at tensor_parallel_size 2)",
            )
        if k == 1:
            out.append(None)
            continue
        share = int(utilization / k * 1000) / 1000
        if share < MIN_SHARED_UTILIZATION:
            raise SpecError(
                f"GPU {','.join(key)} is listed {k} times: gpu_memory_utilization "
                f"{utilization} split {k} ways is {utilization / k:.3f} per replica, below "
                f"{MIN_SHARED_UTILIZATION}, which leaves no room for weights and KV cache.",
                field="--gpus",
                hint=f"list it fewer times, or raise gpu_memory_utilization "
                f"(--set gpu_memory_utilization={min(0.95, MIN_SHARED_UTILIZATION * k):.2f} "
                "or more)",
            )
        out.append(share)
    return out


def shared_gpu_groups(replicas: Sequence[Replica]) -> list[list[Replica]]:
    """The replicas in start order groups: those on the same GPUs together (in index order),
    every other replica alone. Two vLLMs profiling memory on one GPU at once charge each
    other's allocations to their own budget, so a split GPU's replicas start one after the
    other while different GPUs start in parallel."""
    chains: dict[object, list[Replica]] = {}
    for r in replicas:
        gpus = r.spec.gpus
        key: object = (
            tuple(str(g) for g in gpus)
            if isinstance(gpus, list) and r.spec.backend != "sim"
            else ("replica", r.index)
        )
        chains.setdefault(key, []).append(r)
    return list(chains.values())


def _revalidate(spec: ServerSpec, update: dict[str, Any]) -> ServerSpec:
    data = spec.model_dump(mode="python") | update
    try:
        return ServerSpec.model_validate(data)
    except ValidationError as exc:
        from brain.profiles import validation_to_spec_error

        raise validation_to_spec_error(exc, source=f"replica {update['name']}") from None


def check_fleet(replicas: Sequence[Replica]) -> list[str]:
    """Across a fleet: no port given twice, and no GPU given twice unless split explicitly
    (the replicas on it have the same GPUs and their utilizations add up to at most 1)
    (errors); warnings returned as lines."""
    by_port: dict[int, str] = {}
    by_gpu: dict[str, Replica] = {}
    used: dict[str, float] = {}
    names = [r.name for r in replicas]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise SpecError(f"two servers are named {', '.join(dupes)}.", field="name")
    for r in replicas:
        if r.spec.port in by_port:
            raise SpecError(
                f"port {r.spec.port} is given to both {by_port[r.spec.port]} and {r.name}.",
                field="port",
                hint="give each server its own port (or leave ports out: base port + i)",
            )
        by_port[r.spec.port] = r.name
        if r.spec.backend == "sim" or not isinstance(r.spec.gpus, list):
            continue
        for g in (str(g) for g in r.spec.gpus):
            used[g] = used.get(g, 0.0) + r.spec.gpu_memory_utilization
            other = by_gpu.get(g)
            if other is not None and (other.spec.gpus != r.spec.gpus or used[g] > 1.0 + 1e-9):
                raise SpecError(
                    f"GPU {g} is given to both {other.name} and {r.name}"
                    + (
                        f", whose gpu_memory_utilization add up to {used[g]:.3f} (over 1)."
                        if other.spec.gpus == r.spec.gpus
                        else " with different GPU groups."
                    ),
                    field="gpus",
                    hint="give each replica its own GPUs, or split one explicitly: list it "
                    "once per replica in gpus (e.g. gpus: 0,0), which divides the memory",
                )
            by_gpu.setdefault(g, r)
    served = sorted({r.spec.effective_served_name for r in replicas})
    warnings = []
    if len(served) > 1:
        warnings.append(
            f"the replicas serve different model names ({', '.join(served)}): a client sending "
            "one of them gets 404 from the others."
        )
    return warnings


# --------------------------------------------------------------------------- fleet files


class FleetServer(BaseModel):
    """One entry of a fleet file: a profile and where its replica(s) run."""

    model_config = ConfigDict(extra="forbid")

    profile: str
    replicas: int | None = Field(default=None, ge=1)
    gpus: list[int | str] | str | int | None = None
    """``0,1,2,3``, ``[0, 1]`` or one id; split in groups of the profile's TP like --gpus."""
    port: int | None = Field(default=None, ge=0, le=MAX_PORT)
    preset: str | None = None
    backend: str | None = None
    overrides: dict[str, Any] | list[str] = Field(default_factory=dict)
    """Like ``--set``: ``{max_model_len: 16384}`` or ``["max_model_len=16384"]``."""


class FleetFile(BaseModel):
    """``brain up --fleet FILE``: a named group of servers started, listed and stopped together."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    """The fleet's name (default: the file name without .yaml)."""
    servers: list[FleetServer] = Field(min_length=1)


def _override_items(overrides: dict[str, Any] | list[str]) -> list[str]:
    if isinstance(overrides, list):
        return list(overrides)
    return [
        f"{k}={v}" if isinstance(v, str) else f"{k}={json.dumps(v)}" for k, v in overrides.items()
    ]


def load_fleet_file(path: str | Path) -> tuple[str, list[Replica]]:
    """Read a fleet file into its name and replicas; errors carry file, line and field.
    (``check_fleet`` then checks the replicas against each other.)"""
    from brain.profiles import _lookup_line, parse_yaml_source, read_source_text

    path = Path(path)
    if not path.exists():
        raise SpecError(f"fleet file {str(path)!r} does not exist.")
    data, lines = parse_yaml_source(read_source_text(path, "fleet file"), str(path), "fleet file")
    if not isinstance(data, dict):
        raise SpecError(
            "a fleet file is a mapping with name and servers.",
            file=str(path),
            line=1,
            hint="write `name: NAME` and `servers:` with one `- profile: PROFILE` per server",
        )
    try:
        fleet = FleetFile.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = [x for x in e["loc"] if isinstance(x, int) or "[" not in str(x)]
        raise SpecError(
            "unknown field." if e["type"] == "extra_forbidden" else e["msg"],
            file=str(path),
            line=_lookup_line(lines, loc),
            field=".".join(str(x) for x in loc),
        ) from None
    name = fleet.name or path.stem
    replicas: list[Replica] = []
    for i, entry in enumerate(fleet.servers):
        try:
            replicas += _entry_replicas(path, name, entry, replicas)
        except SpecError as exc:
            raise SpecError(
                str(exc), file=str(path), line=_lookup_line(lines, ["servers", i]), field=None
            ) from None
    return name, replicas


def _entry_replicas(
    path: Path, fleet: str, entry: FleetServer, before: list[Replica]
) -> list[Replica]:
    from brain.profiles import apply_overrides, apply_preset, load_profile

    profile = entry.profile
    if "/" in profile or profile.endswith((".yaml", ".yml")):
        profile = str((path.parent / profile).resolve())
    spec = load_profile(profile)
    if entry.preset:
        spec = apply_preset(spec, entry.preset)
    items = ([f"backend={entry.backend}"] if entry.backend else []) + _override_items(
        entry.overrides
    )
    if items:
        spec = apply_overrides(spec, items)
    base = entry.port
    if base is None and before:
        base = max(r.spec.port for r in before) + 1
    gpus = parse_gpus(entry.gpus) if entry.gpus is not None else None
    return plan_replicas(
        spec,
        replicas=entry.replicas,
        gpus=gpus,
        base_port=base,
        fleet=fleet,
        first_index=len(before),
    )


# --------------------------------------------------------------------------- what runs


def fleet_records(name: str, registry: Registry | None = None) -> list[ServerRecord]:
    """The registry's records of fleet ``name``, in replica order (running or not)."""
    registry = registry or Registry()
    records = [r for r in registry.servers() if r.fleet == name]
    return sorted(records, key=lambda r: (r.replica if r.replica is not None else -1, r.name))


def fleet_names(registry: Registry | None = None) -> list[str]:
    registry = registry or Registry()
    return sorted({r.fleet for r in registry.servers() if r.fleet})


def fleet_endpoints(name: str, registry: Registry | None = None) -> list[str]:
    """The OpenAI base URLs (``http://127.0.0.1:PORT/v1``) of fleet ``name``'s running replicas.

    For the pilot's ``model: {fleet: NAME}``: read from the brain's registry, each replica's
    process or container checked alive (not its /health: a replica that is restarting comes
    back on the same URL, and the model client already waits for it). Raises FleetNotRunning,
    naming ``brain up``, when none is running.
    """
    from brain.launchers import make_launcher
    from brain.launchers.base import ServerHandle

    records = fleet_records(name, registry)
    if not records:
        known = fleet_names(registry)
        raise FleetNotRunning(name, "fleets running: " + (", ".join(known) or "none"))
    urls: list[str] = []
    unknown: list[str] = []
    for rec in records:
        handle = ServerHandle.from_dict(rec.handle)
        try:
            if make_launcher(rec.backend).status(handle).alive:
                urls.append(f"{handle.base_url}/v1")
        except BrainError as exc:  # e.g. Docker not reachable: say so rather than "stopped"
            unknown.append(f"{rec.name}: {str(exc).splitlines()[0]}")
    if not urls:
        detail = "; ".join(unknown) or f"its {len(records)} replica(s) have all stopped"
        raise FleetNotRunning(name, detail)
    return urls


__all__ = [
    "FleetFile",
    "FleetServer",
    "Replica",
    "check_fleet",
    "fleet_endpoints",
    "fleet_names",
    "fleet_records",
    "gpu_groups",
    "load_fleet_file",
    "parse_gpus",
    "plan_replicas",
    "replica_name",
    "replica_ports",
    "shared_gpu_groups",
    "split_shares",
]
