"""``brain doctor``: check everything a start needs, before spending minutes on a failed one.

Each check returns ok / warn / fail with one line saying what was found or what to do. Checks
only look (Docker API, NVML/nvidia-smi, the filesystem, a TCP connect); they never start,
pull or change anything.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from brain.spec import ServerSpec
from brain.spec_checks import launch_problems, spec_warnings
from brain.spec_paths import container_to_host_path

Level = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    level: Level
    name: str
    message: str


def _docker_client() -> Any:
    import docker

    client = docker.from_env(timeout=5)
    client.ping()
    return client


def _uses_gpu(spec: ServerSpec) -> bool:
    return spec.backend == "process" or (spec.backend == "docker" and spec.docker.request_gpus)


def check_docker(spec: ServerSpec) -> list[Check]:
    if spec.backend != "docker":
        return []
    try:
        client = _docker_client()
    except Exception as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        return [
            Check(
                "fail",
                "docker",
                f"not reachable ({first[:120]}): start Docker (sudo systemctl start docker) "
                "or check DOCKER_HOST / permissions on /var/run/docker.sock",
            )
        ]
    info = client.info()
    checks = [Check("ok", "docker", f"reachable, server {info.get('ServerVersion', '?')}")]
    runtimes = info.get("Runtimes") or {}
    if not spec.docker.request_gpus:
        checks.append(Check("ok", "nvidia runtime", "not needed (docker.request_gpus=false)"))
    elif "nvidia" in runtimes or info.get("CDISpecDirs"):
        checks.append(Check("ok", "nvidia runtime", "present"))
    else:
        checks.append(
            Check(
                "fail",
                "nvidia runtime",
                "Docker has no nvidia runtime: install nvidia-container-toolkit, run "
                "`sudo nvidia-ctk runtime configure --runtime=docker` and restart Docker "
                "(or --no-gpu for a CPU-only image)",
            )
        )
    try:
        client.images.get(spec.image_ref)
        checks.append(Check("ok", "image", f"{spec.image_ref} present"))
    except Exception:
        checks.append(
            Check("fail", "image", f"{spec.image_ref} missing: docker pull {spec.image_ref}")
        )
    return checks


def check_gpu(spec: ServerSpec) -> list[Check]:
    if not _uses_gpu(spec):
        return [Check("ok", "gpu", f"not needed ({spec.backend} backend without GPU request)")]
    from brain.errors import NoNvidiaGpu
    from brain.gpu import check_free_memory, query_gpus

    try:
        gpus = query_gpus(timeout=10.0)
    except NoNvidiaGpu as exc:
        return [Check("fail", "gpu", f"no NVIDIA GPU visible ({exc}); use --backend sim to try")]
    problems = check_free_memory(spec, gpus)
    if problems:
        return [Check("fail", "gpu", p) for p in problems]
    desc = ", ".join(
        f"{g.index}: {g.name} {g.free_gib:.1f}/{g.total_gib:.1f} GiB free" for g in gpus
    )
    return [Check("ok", "gpu", desc)]


def _host_path(spec: ServerSpec, path: str) -> Path:
    if spec.backend == "docker" and path.startswith("/"):
        mapped = container_to_host_path(spec, path)
        if mapped:
            return Path(mapped)
    return Path(os.path.expanduser(path))


def _hf_cache_dir(spec: ServerSpec) -> Path:
    if spec.backend == "docker" and spec.docker.hf_cache:
        return Path(os.path.expanduser(spec.docker.hf_cache)) / "hub"
    home = os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
    return Path(home) / "hub"


def _check_model_ref(spec: ServerSpec, label: str, ref: str) -> Check:
    if spec.backend == "sim":
        return Check("ok", label, f"{ref} (simulated)")
    if ref.startswith(("/", "~", "./")):
        p = _host_path(spec, ref)
        if not p.exists():
            where = " (host side of the container path)" if str(p) != ref else ""
            return Check("fail", label, f"{p}{where} does not exist: fix the path or the mount")
        if not (p / "config.json").is_file():
            return Check("fail", label, f"{p} has no config.json: point at the model directory")
        return Check("ok", label, f"{p} holds a config.json")
    cached = _hf_cache_dir(spec) / ("models--" + ref.replace("/", "--"))
    if cached.is_dir():
        return Check("ok", label, f"{ref} is in the HF cache ({cached})")
    hint = " with HF_TOKEN set if it is gated" if "HF_TOKEN" not in os.environ else ""
    return Check(
        "warn",
        label,
        f"{ref} is not in {cached.parent}: the first start downloads it (network{hint})",
    )


def check_models(spec: ServerSpec) -> list[Check]:
    checks = [_check_model_ref(spec, "model", spec.model)]
    if spec.speculative and spec.speculative.model:
        checks.append(_check_model_ref(spec, "draft model", spec.speculative.model))
    return checks


def check_shm(spec: ServerSpec) -> list[Check]:
    if spec.backend == "docker" and spec.docker.ipc_host:
        return [Check("ok", "shared memory", "--ipc=host (the host's /dev/shm)")]
    if spec.backend == "docker":
        return [Check("ok", "shared memory", f"--shm-size={spec.docker.shm_size}")]
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return [Check("warn", "shared memory", "/dev/shm not found")]
    gib = st.f_bavail * st.f_frsize / 2**30
    level: Level = "ok" if gib >= 1 or spec.tensor_parallel_size == 1 else "warn"
    return [Check(level, "shared memory", f"/dev/shm has {gib:.1f} GiB free")]


def check_port(spec: ServerSpec) -> list[Check]:
    from brain.errors import PortInUse
    from brain.launchers.ports import ensure_port_free

    try:
        ensure_port_free(spec.host, spec.port)
    except PortInUse as exc:
        message = str(exc)
        if exc.holder in (None, "another process"):
            message += (
                f" Its process is not visible to this user (another user's, or in a container): "
                f"`sudo ss -ltnp 'sport = :{spec.port}'` names it."
            )
        return [Check("fail", "port", message)]
    return [Check("ok", "port", f"{spec.host}:{spec.port} is free")]


def check_media(spec: ServerSpec) -> list[Check]:
    path = spec.allowed_local_media_path
    if not path:
        return []
    p = _host_path(spec, path)
    if p.is_dir():
        return [Check("ok", "media path", f"{p} exists")]
    if spec.backend == "docker" and str(p) != path:
        # A bind mount's missing host folder is made (empty, owned by root) by Docker at the
        # first start; nothing fails until the user wants to put images there.
        return [
            Check(
                "warn",
                "media path",
                f"{p} (mounted at {path}) does not exist yet: Docker creates it empty, owned "
                f"by root; to give the agent images, create it yourself first: mkdir -p {p}",
            )
        ]
    return [
        Check(
            "fail",
            "media path",
            f"{p} is not an existing directory, and vLLM refuses to start with "
            f"--allowed-local-media-path {path}: create it, or unset allowed_local_media_path",
        )
    ]


def check_executable(spec: ServerSpec) -> list[Check]:
    if spec.backend != "process":
        return []
    exe = os.environ.get("MARATHON_VLLM_EXECUTABLE", "vllm").split()[0]
    if shutil.which(exe):
        return [Check("ok", "vllm", f"{shutil.which(exe)}"), *check_vllm_version(spec)]
    return [Check("fail", "vllm", f"{exe!r} not on PATH: pip install vllm, or --backend docker")]


def check_vllm_version(spec: ServerSpec) -> list[Check]:
    """The release the spec will meet (`vllm --version`, or the image tag) and what in the
    spec it does not accept (brain.vllm_versions)."""
    from brain.vllm_versions import check_spec as version_check
    from brain.vllm_versions import facts_for, version_from_tag

    if spec.backend == "process":
        from brain.launchers.process import ProcessLauncher

        version, source = ProcessLauncher().vllm_version(), "vllm --version"
    else:
        version, source = version_from_tag(spec.tag), f"image tag {spec.tag}"
    facts = facts_for(version)
    said = (
        f"{version} ({source}); checked as {facts.version}"
        if version
        else (f"unknown ({source} said nothing); checked as {facts.version}")
    )
    checks = [Check("ok", "vllm version", said)]
    for issue in version_check(spec, facts):
        level: Level = "fail" if issue.action == "refuse" else "warn"
        checks.append(Check(level, "vllm version", f"{issue.field}: {issue.message}"))
    return checks


def check_spec(spec: ServerSpec) -> list[Check]:
    checks = [Check("warn", "spec", w) for w in spec_warnings(spec)]
    checks += [Check("warn", "spec", f"{f}: {m} Fix: {h}") for f, m, h in launch_problems(spec)]
    if spec.backend == "docker" and spec.docker.hf_cache:
        hf = Path(os.path.expanduser(spec.docker.hf_cache))
        if not hf.exists():
            checks.append(
                Check("warn", "hf cache", f"{hf} does not exist; Docker will create it as root")
            )
    return checks


def check_image_version(spec: ServerSpec) -> list[Check]:
    return check_vllm_version(spec) if spec.backend == "docker" else []


CHECKS: list[Callable[[ServerSpec], list[Check]]] = [
    check_docker,
    check_image_version,
    check_executable,
    check_gpu,
    check_models,
    check_shm,
    check_port,
    check_media,
    check_spec,
]


def run_checks(spec: ServerSpec) -> list[Check]:
    """Every check, in order; a check that crashes is reported as a failure, not raised."""
    results: list[Check] = []
    for check in CHECKS:
        try:
            results += check(spec)
        except Exception as exc:
            results.append(Check("fail", check.__name__.removeprefix("check_"), f"error: {exc}"))
    return results
