"""ServerSpec -> the exact ``vllm serve`` / ``vllm preload`` argv and Docker run options.

Pure functions: no Docker client, no subprocess, no environment reads (the caller passes the
environment when it wants pass-through variables resolved). Flag order is stable so argv can
be compared in tests and diffed by users.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from brain.spec import CONTAINER_PORT, DistributedSpec, ServerSpec, spec_hash
from brain.spec_checks import launch_problems, spec_warnings
from brain.spec_flags import FlagField, field_value, flag_fields
from brain.spec_paths import CONTAINER_HF_CACHE, docker_mounts, expand_host

REDACTED = "<redacted>"

# `vllm serve` front-end flags without a spec field that `vllm preload` (EngineArgs only) does
# not accept, with whether they take a value; dropped from extra_args for the daemon. Checked
# against vLLM 0.33.0's parsers. The ones with a field are the Flag(serve_only=True) fields.
_SERVE_ONLY_FLAGS: dict[str, bool] = {
    "--uds": True,
    "--tool-parser-plugin": True,
    "--chat-template-content-format": True,
    "--response-role": True,
    "--uvicorn-log-level": True,
    "--root-path": True,
    "--allowed-origins": True,
    "--middleware": True,
    "--ssl-keyfile": True,
    "--ssl-certfile": True,
    "--enable-log-requests": False,
    "--disable-log-requests": False,
    "--enable-server-load-tracking": False,
    "--api-server-count": True,
    "--lora-modules": True,
}


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def speculative_config(spec: ServerSpec) -> dict[str, Any] | None:
    """The ``--speculative-config`` value: the set SpeculativeSpec keys in field order, then
    ``extra`` verbatim."""
    sp = spec.speculative
    if sp is None:
        return None
    cfg = {k: v for k in sp.config_keys() if (v := getattr(sp, k)) is not None and v != ""}
    cfg.update(sp.extra)
    return cfg


def model_loader_extra_config(spec: ServerSpec) -> dict[str, Any] | None:
    """``--model-loader-extra-config`` for ipc_cache; fallback is explicit (vLLM defaults true)."""
    if not spec.uses_ipc_cache:
        return None
    cfg: dict[str, Any] = {}
    if spec.preload.socket_dir:
        cfg["socket_dir"] = spec.preload.socket_dir
    cfg["mode"] = spec.preload.mode
    cfg["fallback"] = spec.preload.fallback
    return cfg


def _flag_argv(field: FlagField, value: Any) -> list[str]:
    """One field's flag with its value, rendered as ``Flag`` describes; [] when left out."""
    if value is None or value == "" or (value == field.default and not field.flag.always):
        return []
    if isinstance(value, bool):
        return [field.flag.name if value else str(field.negative)]
    if isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, dict):
        text = _json(value)
    else:
        text = str(value)
    return [field.flag.name, text]


def _argv_values(spec: ServerSpec, *, in_container: bool, redact: bool) -> dict[str, Any]:
    """The fields whose argv value is not the field's own value."""
    host, port = _listen_address(spec, in_container)
    return {
        "host": host,
        "port": port,
        "api_key": REDACTED if redact and spec.api_key else spec.api_key,
        "load_format": "ipc_cache" if spec.uses_ipc_cache else spec.load_format,
        "preload": model_loader_extra_config(spec),
        "speculative": speculative_config(spec),
    }


def _flags(spec: ServerSpec, values: Mapping[str, Any], *, for_preload: bool) -> list[str]:
    """Every flagged field's flag, in field order (``brain.spec_flags.flag_fields``)."""
    a: list[str] = []
    for field in flag_fields(ServerSpec):
        if for_preload and field.flag.serve_only:
            continue
        if not for_preload and field.flag.serve_positional:
            continue
        value = values[field.path] if field.path in values else field_value(spec, field.path)
        a += _flag_argv(field, value)
    return a


def _listen_address(spec: ServerSpec, in_container: bool) -> tuple[str, int]:
    """Inside a bridged container vLLM must listen on all interfaces at the container port;
    the host side of the publish decides who can reach it."""
    if in_container and not spec.docker.network_host:
        return "0.0.0.0", CONTAINER_PORT
    return spec.host, spec.port


def vllm_serve_argv(
    spec: ServerSpec, *, in_container: bool | None = None, redact: bool = False
) -> list[str]:
    """What follows ``vllm serve``: the model positional, the spec's flags in field order,
    then ``extra_args``.

    ``in_container`` defaults to ``spec.backend == "docker"``. ``redact`` hides the API key
    (for printing).
    """
    if in_container is None:
        in_container = spec.backend == "docker"
    values = _argv_values(spec, in_container=in_container, redact=redact)
    return [spec.model, *_flags(spec, values, for_preload=False), *spec.extra_args]


def _drop_serve_only(args: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        flag, has_eq, _ = arg.partition("=")
        if flag in _SERVE_ONLY_FLAGS:
            skip = _SERVE_ONLY_FLAGS[flag] and not has_eq
            continue
        out.append(arg)
    return out


def vllm_preload_argv(spec: ServerSpec) -> list[str]:
    """What follows ``vllm preload``: the serve engine args, minus front-end flags and minus
    ``--load-format`` (the daemon must load from disk), plus the daemon's own flags.

    The engine args must equal the server's so the WeightCacheKey matches.
    """
    argv = _flags(spec, _argv_values(spec, in_container=False, redact=False), for_preload=True)
    argv += _drop_serve_only(list(spec.extra_args))
    if spec.preload.socket_dir:
        argv += ["--weight-cache-socket-dir", spec.preload.socket_dir]
    if spec.preload.health_port is not None:
        argv += ["--weight-cache-health-port", str(spec.preload.health_port)]
    return argv


def process_command(spec: ServerSpec) -> list[str]:
    """The full command for the local-process backend."""
    return ["vllm", "serve", *vllm_serve_argv(spec, in_container=False)]


BRAIN_ENV: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
"""Variables in every environment the brain builds for a server (process, sim, container, Ray
node): NVLink multicast off in NCCL, PyTorch's symmetric memory and NVSHMEM. A TP >= 2 server
gains little from it, and on hosts whose GPUs are shared (NVLink without a working fabric
manager) a program that uses multicast can put every GPU of the host out of service.
``spec.env`` may still set them (``env.NCCL_NVLS_ENABLE=1``) where multicast is known to work."""


def brain_environment(spec: ServerSpec) -> dict[str, str]:
    """``BRAIN_ENV`` with the spec's own values for the same names (``spec.env`` wins)."""
    return {k: spec.env.get(k, v) for k, v in BRAIN_ENV.items()}


def process_environment(spec: ServerSpec) -> dict[str, str]:
    """Variables the process (and sim) backend adds to the server's environment.

    ``CUDA_VISIBLE_DEVICES`` from ``gpus`` is how a local process is pinned to its GPUs (what
    ``--gpus device=...`` does for a container), so replicas on one machine never share a
    device; a multi-node head gets ``VLLM_HOST_IP`` like vLLM's run_cluster.sh sets it.
    ``BRAIN_ENV`` (NVLink multicast off) is always there; ``spec.env`` wins over all of them.
    """
    env: dict[str, str] = dict(BRAIN_ENV)
    if isinstance(spec.gpus, list):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpus)
    if spec.distributed is not None:
        env["VLLM_HOST_IP"] = spec.distributed.head_address
    env.update(spec.env)
    return env


# --------------------------------------------------------------------------- multi-node (Ray)


WORKER_IP = "<WORKER_IP>"
"""Placeholder in the printed worker commands: each worker node's own IP."""


def ray_head_argv(spec: ServerSpec) -> list[str]:
    """``ray start --head`` for the head node, as vLLM's run_cluster.sh starts it (without
    ``--block``: under Docker the same container then runs ``vllm serve``)."""
    d = _distributed(spec)
    return ["ray", "start", "--head", f"--node-ip-address={d.head_address}", f"--port={d.ray_port}"]


def ray_worker_argv(spec: ServerSpec) -> list[str]:
    """``ray start --block --address=HEAD:PORT``: one per worker node, kept running."""
    d = _distributed(spec)
    return ["ray", "start", "--block", f"--address={d.head_address}:{d.ray_port}"]


def ray_worker_docker_argv(spec: ServerSpec) -> list[str]:
    """The worker container (run_cluster.sh ``--worker``): same image, host network, all GPUs
    of the node, the HF cache; ``VLLM_HOST_IP`` must be set to that worker's own IP.
    ``--restart unless-stopped`` lets a worker rejoin by itself after the head restarts."""
    d = spec.docker
    a = ["docker", "run", "-d", "--restart", "unless-stopped"]
    a += ["--name", f"{container_name(spec)}-ray-worker", "--entrypoint", "/bin/bash"]
    a += ["--network=host", "--gpus", "all"]
    a.append("--ipc=host" if d.ipc_host else f"--shm-size={d.shm_size}")
    if d.hf_cache:
        a += ["-v", f"{expand_host(d.hf_cache)}:{CONTAINER_HF_CACHE}"]
    for k in d.pass_env:
        a += ["-e", k]
    for k, v in brain_environment(spec).items():
        a += ["-e", f"{k}={v}"]
    a += ["-e", f"VLLM_HOST_IP={WORKER_IP}", spec.image_ref, "-c"]
    a.append(shlex.join(ray_worker_argv(spec)))
    return a


def _distributed(spec: ServerSpec) -> DistributedSpec:
    if spec.distributed is None:
        raise ValueError(f"{spec.name} is not a multi-node server (no distributed section)")
    return spec.distributed


def ray_head_container_script(spec: ServerSpec, *, redact: bool = False) -> str:
    """The head container's shell command: join Ray as the head, then become ``vllm serve``
    (``exec``: the container stops when the server does, and Ray with it)."""
    serve = ["vllm", "serve", *vllm_serve_argv(spec, in_container=True, redact=redact)]
    return f"{shlex.join(ray_head_argv(spec))} && exec {shlex.join(serve)}"


# --------------------------------------------------------------------------- docker


class DeviceRequestSpec(BaseModel):
    """A GPU request, kept as plain data; ``to_sdk`` builds docker.types.DeviceRequest."""

    model_config = ConfigDict(frozen=True)

    device_ids: list[str] | None = None
    count: int | None = None
    capabilities: list[list[str]] = Field(default_factory=lambda: [["gpu"]])

    def to_sdk(self) -> Any:
        from docker.types import DeviceRequest

        kw: dict[str, Any] = {"capabilities": self.capabilities}
        if self.device_ids is not None:
            kw["device_ids"] = self.device_ids
        if self.count is not None:
            kw["count"] = self.count
        return DeviceRequest(**kw)

    def cli_value(self) -> str:
        if self.device_ids is None:
            return "all"
        return f'"device={",".join(self.device_ids)}"'


class DockerRunOptions(BaseModel):
    """Everything ``docker.from_env().containers.run(**opts.to_sdk_kwargs())`` needs."""

    model_config = ConfigDict(extra="forbid")

    image: str
    name: str
    command: list[str]
    entrypoint: list[str] | None = None
    labels: dict[str, str]
    ipc_mode: str | None = None
    pid_mode: str | None = None
    network_mode: str | None = None
    shm_size: str | int | None = None
    mem_limit: str | int | None = None
    memswap_limit: str | int | None = None
    mem_reservation: str | int | None = None
    oom_score_adj: int | None = None
    cpu_shares: int | None = None
    nano_cpus: int | None = None
    ports: dict[str, tuple[str, int]] = Field(default_factory=dict)
    volumes: dict[str, dict[str, str]] = Field(default_factory=dict)
    environment: dict[str, str] = Field(default_factory=dict)
    pass_env: list[str] = Field(default_factory=list)
    """Variables the `docker run` line passes as bare ``-e NAME`` (from the caller's env)."""
    device_requests: list[DeviceRequestSpec] = Field(default_factory=list)
    detach: bool = True

    def to_sdk_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for docker-py's ``containers.run``; unset options are omitted."""
        kw: dict[str, Any] = {
            "image": self.image,
            "name": self.name,
            "command": list(self.command),
            "labels": dict(self.labels),
            "detach": self.detach,
        }
        for key in (
            "entrypoint",
            "ipc_mode",
            "pid_mode",
            "network_mode",
            "shm_size",
            "mem_limit",
            "memswap_limit",
            "mem_reservation",
            "oom_score_adj",
            "cpu_shares",
            "nano_cpus",
        ):
            value = getattr(self, key)
            if value is not None:
                kw[key] = value
        if self.ports:
            kw["ports"] = dict(self.ports)
        if self.volumes:
            kw["volumes"] = {k: dict(v) for k, v in self.volumes.items()}
        if self.environment:
            kw["environment"] = dict(self.environment)
        if self.device_requests:
            kw["device_requests"] = [d.to_sdk() for d in self.device_requests]
        return kw


def container_name(spec: ServerSpec) -> str:
    return f"marathon-{spec.name}"


def docker_labels(spec: ServerSpec) -> dict[str, str]:
    return {"marathon.server": spec.name, "marathon.spec-hash": spec_hash(spec)}


def _device_requests(spec: ServerSpec) -> list[DeviceRequestSpec]:
    if not spec.docker.request_gpus:
        return []
    if spec.gpus == "all":
        return [DeviceRequestSpec(count=-1)]
    return [DeviceRequestSpec(device_ids=[str(g) for g in spec.gpus])]


def docker_run_options(
    spec: ServerSpec,
    *,
    environ: Mapping[str, str] | None = None,
    request_gpus: bool | None = None,
    redact: bool = False,
) -> DockerRunOptions:
    """Container options for the server (image entrypoint is ``vllm serve``).

    ``environ``: the host environment to resolve ``docker.pass_env`` from (the launcher
    passes ``os.environ``); unset names are skipped. ``request_gpus`` overrides the spec
    (False for the CI fake image).
    """
    d = spec.docker
    environment: dict[str, str] = dict(BRAIN_ENV)
    if environ is not None:
        environment.update({k: environ[k] for k in d.pass_env if k in environ})
    environment.update(spec.env)
    volumes = {
        expand_host(m.host): {"bind": m.container, "mode": "ro" if m.read_only else "rw"}
        for m in docker_mounts(spec)
    }
    ports: dict[str, tuple[str, int]] = {}
    if not d.network_host:
        ports[f"{CONTAINER_PORT}/tcp"] = (spec.host, spec.port)
    gpus = request_gpus if request_gpus is not None else d.request_gpus
    command = vllm_serve_argv(spec, in_container=True, redact=redact)
    entrypoint = None
    if spec.distributed is not None:
        # The container is the Ray head: `ray start --head`, then `vllm serve` (run_cluster.sh).
        entrypoint = ["/bin/bash", "-c"]
        command = [ray_head_container_script(spec, redact=redact)]
        environment.setdefault("VLLM_HOST_IP", spec.distributed.head_address)
    return DockerRunOptions(
        image=spec.image_ref,
        name=container_name(spec),
        command=command,
        entrypoint=entrypoint,
        labels=docker_labels(spec),
        ipc_mode="host" if d.ipc_host else None,
        pid_mode="host" if d.pid_host else None,
        network_mode="host" if d.network_host else None,
        shm_size=None if d.ipc_host else d.shm_size,
        mem_limit=d.memory,
        memswap_limit=d.memory_swap,
        mem_reservation=d.memory_reservation,
        oom_score_adj=d.oom_score_adj,
        cpu_shares=d.cpu_shares,
        nano_cpus=int(d.cpus * 1e9) if d.cpus else None,
        ports=ports,
        volumes=volumes,
        environment=environment,
        pass_env=[k for k in d.pass_env if k not in spec.env],
        device_requests=_device_requests(spec) if gpus else [],
    )


def docker_run_argv(opts: DockerRunOptions) -> list[str]:
    """The ``docker run`` command equivalent to ``opts`` as an argv list."""
    a = ["docker", "run", "-d", "--name", opts.name]
    for k, v in opts.labels.items():
        a += ["--label", f"{k}={v}"]
    for d in opts.device_requests:
        a += ["--gpus", d.cli_value()]
    if opts.ipc_mode:
        a.append(f"--ipc={opts.ipc_mode}")
    if opts.pid_mode:
        a.append(f"--pid={opts.pid_mode}")
    if opts.network_mode:
        a.append(f"--network={opts.network_mode}")
    if opts.shm_size is not None:
        a.append(f"--shm-size={opts.shm_size}")
    if opts.mem_limit is not None:
        a.append(f"--memory={opts.mem_limit}")
    if opts.memswap_limit is not None:
        a.append(f"--memory-swap={opts.memswap_limit}")
    if opts.mem_reservation is not None:
        a.append(f"--memory-reservation={opts.mem_reservation}")
    if opts.oom_score_adj is not None:
        a.append(f"--oom-score-adj={opts.oom_score_adj}")
    if opts.cpu_shares is not None:
        a.append(f"--cpu-shares={opts.cpu_shares}")
    if opts.nano_cpus is not None:
        a.append(f"--cpus={opts.nano_cpus / 1e9:g}")
    for container_port, (host, port) in opts.ports.items():
        a += ["-p", f"{host}:{port}:{container_port.split('/')[0]}"]
    for host_path, bind in opts.volumes.items():
        suffix = ":ro" if bind["mode"] == "ro" else ""
        a += ["-v", f"{host_path}:{bind['bind']}{suffix}"]
    for k in opts.pass_env:
        a += ["-e", k]
    for k, v in opts.environment.items():
        if k not in opts.pass_env:
            a += ["-e", f"{k}={v}"]
    if opts.entrypoint:
        a += ["--entrypoint", opts.entrypoint[0]]
    a.append(opts.image)
    if opts.entrypoint and len(opts.entrypoint) > 1:
        a += opts.entrypoint[1:]
    a += opts.command
    return a


def docker_run_command_line(spec: ServerSpec, *, redact: bool = True) -> str:
    """The ``docker run ...`` shell line for ``brain up --dry-run``, quoted with shlex.

    Pass-through variables appear as bare ``-e NAME`` so the line works when pasted into a
    shell that has them; the API key is redacted unless ``redact=False``.
    """
    opts = docker_run_options(spec, environ=None, redact=redact)
    return shlex.join(docker_run_argv(opts))


def dry_run_text(spec: ServerSpec) -> str:
    """What ``brain up --dry-run`` prints: the command, then warnings and launch problems."""
    lines = [f"# server {spec.name} ({spec.backend}): {spec.model}"]
    if spec.description:
        lines.append(f"# {spec.description}")
    if spec.backend == "docker":
        lines.append(docker_run_command_line(spec))
    elif spec.backend == "process":
        argv = ["vllm", "serve", *vllm_serve_argv(spec, in_container=False, redact=True)]
        env = {k: v for k, v in process_environment(spec).items() if k not in spec.env}
        lines.append(
            " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(argv)])
        )
    else:
        lines.append(
            f"# simulated vLLM server on http://{spec.host}:{spec.port} "
            f"serving {spec.effective_served_name!r} (no GPU needed)"
        )
        lines.append("# the flags a real server would get:")
        lines.append("# " + shlex.join(["vllm", "serve", *vllm_serve_argv(spec, redact=True)]))
    if spec.distributed is not None:
        lines += _distributed_dry_run_lines(spec)
    if spec.preload.enabled:
        lines.append("# weight-cache daemon (start first, same image and engine args):")
        lines.append(shlex.join(["vllm", "preload", *vllm_preload_argv(spec)]))
    lines.append(
        f"# endpoint: http://{spec.host}:{spec.port}/v1  model: {spec.effective_served_name}"
    )
    for w in spec_warnings(spec):
        lines.append(f"# warning: {w}")
    for field, msg, hint in launch_problems(spec):
        lines.append(f"# will refuse to launch: {field}: {msg} Fix: {hint}")
    if spec.api_key:
        lines.append("# the API key is redacted above")
    return "\n".join(lines)


def _distributed_dry_run_lines(spec: ServerSpec) -> list[str]:
    """The Ray cluster around a multi-node server: what runs where, in which order."""
    d = _distributed(spec)
    lines = [
        f"# multi-node: {d.nodes} nodes x {d.gpus_per_node} GPUs, tensor_parallel_size "
        f"{spec.tensor_parallel_size} x pipeline_parallel_size {d.pipeline_parallel_size}, "
        f"Ray head {d.head_address}:{d.ray_port}"
    ]
    others = f"# on every other node ({d.nodes - 1}), with {WORKER_IP} that node's own IP:"
    if spec.backend == "docker":
        lines.append("# the container above is the Ray head (ray start --head, then vllm serve);")
        lines.append(others)
        lines.append(shlex.join(ray_worker_docker_argv(spec)))
    elif spec.backend == "process":
        lines.append("# first, on this (head) node, in the same Python environment as vllm:")
        ray_env = " ".join(f"{k}={shlex.quote(v)}" for k, v in brain_environment(spec).items())
        lines.append(f"{ray_env} " + shlex.join(ray_head_argv(spec)))
        lines.append(others)
        lines.append(f"{ray_env} VLLM_HOST_IP='{WORKER_IP}' " + shlex.join(ray_worker_argv(spec)))
    else:
        lines.append("# the sim serves alone; a real server needs the Ray cluster above")
    lines.append("# check with `ray status` that every node and GPU is there before brain up")
    return lines
