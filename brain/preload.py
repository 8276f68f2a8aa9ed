"""The ``vllm preload`` weight-cache daemon: start it, wait for it, match it, stop it.

The daemon loads the weights once and hands them to servers started with ``--load-format
ipc_cache``; the brain starts servers with ``fallback: false`` so a mismatched daemon is an
error, and checks first, naming the fields that differ (what vLLM would report as
``WeightCacheKey mismatch on fields: [...]``). The fingerprint holds all 22 fields of vLLM
0.33's ``WeightCacheKey`` (``model_loader/weight_cache/protocol.py:308``), each as the spec
determines it (the ranks as the set a spec runs, the quantization and RoPE hashes from a local
config.json and the overriding flags), plus the GPUs and the draft model; offline, the
architecture is read from a local config.json or stands in as the model id.

The daemon runs through the same kind of launcher as the server: a second container sharing
the host's IPC and PID namespaces and the socket directory, or a local process. For the sim
backend a stand-in (``brain.launchers.sim_preload``) prints the READY line and answers the
health port, so the lifecycle is testable without a GPU.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from brain.command import DockerRunOptions, docker_run_options, vllm_preload_argv
from brain.diagnose import diagnose, is_fatal_line
from brain.errors import LaunchError, NotReady, PreloadMismatch
from brain.launchers.base import Launcher, ServerHandle, ServerStatus
from brain.launchers.docker import DockerLauncher
from brain.launchers.process import ProcessLauncher
from brain.spec import ServerSpec
from brain.spec_paths import container_to_host_path
from brain.state import PreloadRecord, Registry

READY_MARKER = "===== Weight cache daemon READY"
FAILED_MARKER = "Weight cache daemon rank(s) exited during startup"
KEY_FIELDS = (
    "checkpoint",
    "model_arch",
    "tp_size",
    "tp_rank",
    "dtype",
    "quantization",
    "quant_config_hash",
    "rope_parameters_hash",
    "kv_cache_dtype",
    "kv_cache_dtype_skip_layers",
    "revision",
    "vllm_version",
    "pp_size",
    "pp_rank",
    "is_draft",
    "dp_size",
    "dp_rank",
    "enable_expert_parallel",
    "expert_placement_strategy",
    "moe_backend",
    "linear_backend",
    "linear_backend_per_quant",
)
"""vLLM 0.33's WeightCacheKey fields, in its order (``weight_cache/protocol.py:308``)."""
EXTRA_FIELDS = ("gpus", "draft_model", "socket_dir")
"""Not in the key, but a difference still breaks reuse: another GPU ("Daemon GPU X != engine
GPU Y"), a drafter with no daemon group, sockets the server cannot find."""


# --------------------------------------------------------------------------- fingerprint


def _local_model_dir(spec: ServerSpec) -> Path | None:
    """Where the model's files are on this host, if it is a local directory."""
    path = spec.model
    if spec.backend == "docker" and path.startswith("/"):
        path = container_to_host_path(spec, path) or path
    p = Path(os.path.expanduser(path))
    return p if p.is_dir() else None


def _safetensors_header(path: str) -> bytes:
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        return f.read(min(size, 100 * 1024 * 1024))


def checkpoint_identity(spec: ServerSpec) -> str:
    """vLLM's rule: a hash of the shards' safetensors headers when the weights are local (the
    same weights in two directories match), else the model path or id as given."""
    local = _local_model_dir(spec)
    if local is not None:
        files = sorted(glob.glob(str(local / "*.safetensors")), key=os.path.basename)
        if files:
            h = hashlib.sha256()
            for f in files:
                h.update(os.path.basename(f).encode())
                h.update(_safetensors_header(f))
            return "safetensors:" + h.hexdigest()[:16]
    return spec.model


def _model_arch(spec: ServerSpec) -> str:
    local = _local_model_dir(spec)
    if local is not None:
        try:
            archs = json.loads((local / "config.json").read_text()).get("architectures") or []
            if archs:
                return str(archs[0])
        except (OSError, ValueError):
            pass
    return f"(unknown offline: {spec.model})"


def _flag(spec: ServerSpec, *names: str) -> str | None:
    """The value of a vLLM flag in ``extra_args`` (``--flag v`` or ``--flag=v``), or None."""
    args = spec.extra_args
    for i, a in enumerate(args):
        for name in names:
            if a == name and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(name + "="):
                return a.split("=", 1)[1]
    return None


def _revision(spec: ServerSpec) -> str | None:
    return _flag(spec, "--revision")


def _local_config(spec: ServerSpec) -> dict[str, Any]:
    local = _local_model_dir(spec)
    if local is None:
        return {}
    try:
        data = json.loads((local / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _digest(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def _int_flag(spec: ServerSpec, default: int, *names: str) -> int:
    value = _flag(spec, *names)
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _kernel(spec: ServerSpec, key: str, flag: str) -> Any:
    """A KernelConfig value: its own flag, else ``--kernel-config`` JSON, else vLLM's default."""
    value = _flag(spec, flag) if flag else None
    if value is not None:
        return value.lower().replace("-", "_")
    try:
        config = json.loads(_flag(spec, "--kernel-config") or "{}")
    except ValueError:
        config = {}
    default: Any = [] if key == "linear_backend_per_quant" else "auto"
    found = config.get(key, default) if isinstance(config, dict) else default
    return [list(kv) for kv in sorted(found.items())] if isinstance(found, dict) else found


def _key_fields(spec: ServerSpec) -> dict[str, Any]:
    """vLLM's WeightCacheKey as far as the spec fixes it (see ``from_model_config``)."""
    config = _local_config(spec)
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    tp = spec.tensor_parallel_size
    pp = spec.distributed.pipeline_parallel_size if spec.distributed else 1
    dp = _int_flag(spec, 1, "--data-parallel-size", "-dp")
    skip = _flag(spec, "--kv-cache-dtype-skip-layers")
    return {
        "tp_rank": list(range(tp)),
        "quant_config_hash": _digest(
            {
                "checkpoint": config.get("quantization_config"),
                "runtime": _flag(spec, "--quantization-config"),
            }
        ),
        "rope_parameters_hash": _digest(
            {
                "rope_parameters": text.get("rope_parameters") or text.get("rope_scaling"),
                "rope_theta": text.get("rope_theta"),
                "max_position_embeddings": text.get("max_position_embeddings"),
                "hf_overrides": _flag(spec, "--hf-overrides"),
            }
        ),
        "kv_cache_dtype": spec.kv_cache_dtype or "auto",
        "kv_cache_dtype_skip_layers": sorted(set((skip or "").replace(",", " ").split())),
        "pp_size": pp,
        "pp_rank": list(range(pp)),
        "is_draft": False,
        "dp_size": dp,
        "dp_rank": list(range(dp)),
        "enable_expert_parallel": any(
            a in ("--enable-expert-parallel", "-ep") for a in spec.extra_args
        ),
        "expert_placement_strategy": _flag(spec, "--expert-placement-strategy") or "linear",
        "moe_backend": _kernel(spec, "moe_backend", "--moe-backend"),
        "linear_backend": _kernel(spec, "linear_backend", "--linear-backend"),
        "linear_backend_per_quant": _kernel(spec, "linear_backend_per_quant", ""),
    }


def _vllm_version(spec: ServerSpec) -> str:
    if spec.backend == "docker":
        return spec.image_ref
    if spec.backend == "sim":
        return "sim"
    try:
        from importlib.metadata import version

        return version("vllm")
    except Exception:
        return os.environ.get("MARATHON_VLLM_EXECUTABLE") or "vllm (local)"


def fingerprint(spec: ServerSpec) -> dict[str, Any]:
    """What the daemon and a server must agree on for the server to reuse the weights."""
    return {
        "checkpoint": checkpoint_identity(spec),
        "model_arch": _model_arch(spec),
        "tp_size": spec.tensor_parallel_size,
        "dtype": spec.dtype or "auto",
        "quantization": spec.quantization,
        "revision": _revision(spec),
        "vllm_version": _vllm_version(spec),
        **_key_fields(spec),
        "gpus": spec.gpus if spec.gpus == "all" else [str(g) for g in spec.gpus],
        "draft_model": spec.speculative.model if spec.speculative else None,
        "socket_dir": spec.preload.socket_dir,
    }


def mismatched_fields(daemon: dict[str, Any], server: dict[str, Any]) -> list[str]:
    """The fields whose values differ; a daemon recorded before a field was fingerprinted
    (no such key in its record) is not judged on it."""
    return [
        f
        for f in (*KEY_FIELDS, *EXTRA_FIELDS)
        if (f in daemon or f in EXTRA_FIELDS) and daemon.get(f) != server.get(f)
    ]


def explain_mismatch(daemon: dict[str, Any], server: dict[str, Any]) -> PreloadMismatch:
    fields = mismatched_fields(daemon, server)
    parts = [f"{f}: daemon {daemon.get(f)!r} vs server {server.get(f)!r}" for f in fields]
    return PreloadMismatch(
        fields,
        "the weight-cache daemon holds other weights than this server would load "
        f"(vLLM: WeightCacheKey mismatch on fields: {fields}):\n  "
        + "\n  ".join(parts)
        + "\nFix: restart the daemon with this spec (brain preload stop, then brain preload "
        "start with the same profile and --set values) or align the spec with the daemon.",
    )


# --------------------------------------------------------------------------- launchers


class ProcessPreloadLauncher(ProcessLauncher):
    """``vllm preload ...`` as a local process, log in ``<name>.preload.log``."""

    kind = "process"

    def command(self, spec: ServerSpec) -> list[str]:
        return [*self.executable(), "preload", *vllm_preload_argv(spec)]

    def log_name(self, spec: ServerSpec) -> str:
        return f"{spec.name}.preload"

    def listen_address(self, spec: ServerSpec) -> tuple[str, int] | None:
        hp = spec.preload.health_port
        return ("127.0.0.1", hp) if hp else None


class SimPreloadLauncher(ProcessPreloadLauncher):
    """The stand-in daemon (``brain.launchers.sim_preload``) for the sim backend."""

    kind = "sim"

    def command(self, spec: ServerSpec) -> list[str]:
        return [sys.executable, "-m", "brain.launchers.sim_preload", *vllm_preload_argv(spec)]


class DockerPreloadLauncher(DockerLauncher):
    """A second container, ``marathon-<name>-preload``: same image, engine args and mounts as
    the server, entrypoint ``vllm preload``, host IPC and PID (CUDA IPC between containers
    needs them; unverified upstream), the health port published on 127.0.0.1."""

    def run_options(self, spec: ServerSpec) -> DockerRunOptions:
        opts = docker_run_options(spec, environ=os.environ, request_gpus=self.request_gpus)
        hp = spec.preload.health_port
        return opts.model_copy(
            update={
                "name": f"marathon-{spec.name}-preload",
                "entrypoint": ["vllm", "preload"],
                "command": vllm_preload_argv(spec),
                "labels": {"marathon.preload": spec.name},
                "ipc_mode": "host",
                "pid_mode": "host",
                "shm_size": None,
                "network_mode": None,
                "ports": {f"{hp}/tcp": ("127.0.0.1", hp)} if hp else {},
            }
        )

    def listen_address(self, spec: ServerSpec) -> tuple[str, int] | None:
        hp = spec.preload.health_port
        return ("127.0.0.1", hp) if hp else None


def make_preload_launcher(backend: str, *, request_gpus: bool | None = None) -> Launcher:
    if backend == "docker":
        return DockerPreloadLauncher(request_gpus=request_gpus)
    if backend == "process":
        return ProcessPreloadLauncher()
    if backend == "sim":
        return SimPreloadLauncher()
    raise ValueError(f"unknown backend {backend!r}")


# --------------------------------------------------------------------------- lifecycle


def wait_preload_ready(
    launcher: Launcher, handle: ServerHandle, spec: ServerSpec, timeout: float
) -> None:
    """Until the READY line (or the health port's 200); fail fast on a fatal line or exit."""
    stop = threading.Event()
    found = threading.Event()
    failed: list[str] = []
    tail: list[str] = []

    def follow() -> None:
        try:
            for line in launcher.logs(handle, follow=True, stop=stop):
                tail.append(line)
                if READY_MARKER in line:
                    found.set()
                    return
                if FAILED_MARKER in line or is_fatal_line(line):
                    failed.append(line)
                    found.set()
                    return
        except Exception:
            pass

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            if found.wait(0.2):
                if failed:
                    time.sleep(0.2)
                    raise LaunchError(
                        f"the weight-cache daemon failed to start:\n  > {failed[0]}",
                        diagnose("\n".join(tail), spec=spec),
                    )
                return
            if handle.port and _health_ok(handle):
                return
            status: ServerStatus = launcher.status(handle)
            if not status.alive:
                follower.join(3.0)  # the log of a dead process ends: read it to the end
                text = "\n".join(tail[-200:])
                last = "\n".join(f"  > {ln}" for ln in (failed or tail[-5:]))
                raise LaunchError(
                    f"the weight-cache daemon {status.describe()} before it was ready:\n{last}",
                    diagnose(
                        text, exit_code=status.exit_code, oom_killed=status.oom_killed, spec=spec
                    ),
                )
            if time.monotonic() >= deadline:
                raise NotReady(f"the weight-cache daemon was not ready after {timeout:g} s")
    finally:
        stop.set()


def _health_ok(handle: ServerHandle) -> bool:
    try:
        return httpx.get(f"{handle.base_url}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def start_preload(
    spec: ServerSpec,
    launcher: Launcher,
    registry: Registry,
    *,
    timeout: float | None = None,
) -> PreloadRecord:
    """Start the daemon for ``spec``, wait until it is ready, record it with its fingerprint."""
    existing = registry.get_preload(spec.name)
    if existing is not None:
        old = ServerHandle.from_dict(existing.handle)
        if launcher.status(old).alive:
            raise LaunchError(
                f"a weight-cache daemon for {spec.name!r} is already running "
                f"(brain preload stop {spec.name} first)"
            )
        registry.remove_preload(spec.name)
    handle = launcher.start(spec)
    try:
        wait_preload_ready(launcher, handle, spec, timeout or spec.timeouts.load_timeout_s)
    except BaseException:
        launcher.stop(handle, timeout=spec.timeouts.stop_timeout_s)
        raise
    record = PreloadRecord(
        name=spec.name,
        backend=launcher.kind,
        spec=spec.model_dump(mode="json"),
        handle=handle.to_dict(),
        fingerprint=fingerprint(spec),
    )
    registry.put_preload(record)
    return record


def stop_preload(name: str, registry: Registry, *, timeout: float = 30.0) -> bool:
    """Stop the named daemon; False when none is recorded."""
    record = registry.get_preload(name)
    if record is None:
        return False
    launcher = make_preload_launcher(record.backend)
    launcher.stop(ServerHandle.from_dict(record.handle), timeout=timeout)
    registry.remove_preload(name)
    return True


def preload_status(record: PreloadRecord) -> ServerStatus:
    return make_preload_launcher(record.backend).status(ServerHandle.from_dict(record.handle))


def check_preload(spec: ServerSpec, registry: Registry) -> PreloadRecord | None:
    """Before a server start with preload: a live daemon must exist and match the spec.

    Returns the daemon's record (None when the spec does not use preload). Raises LaunchError
    when there is no live daemon, PreloadMismatch naming the differing fields otherwise.
    """
    if not spec.preload.enabled:
        return None
    record = registry.get_preload(spec.name)
    if record is None or not preload_status(record).alive:
        raise LaunchError(
            f"{spec.name} loads its weights from a weight-cache daemon, and none is running. "
            f"Start it: brain preload start (same profile), or set preload.enabled=false"
        )
    want = fingerprint(spec)
    if mismatched_fields(record.fingerprint, want):
        raise explain_mismatch(record.fingerprint, want)
    return record
