"""What the NVIDIA GPUs hold right now, and whether a spec's memory request fits.

vLLM refuses to start when a GPU's free memory is below ``gpu_memory_utilization * total``
("Free memory on device ... on startup is less than desired GPU memory utilization");
checking first turns a minutes-long failed start into an immediate, explained refusal.
Reads NVML (``pynvml``) when importable, else ``nvidia-smi``; raises NoNvidiaGpu when neither
answers. Does nothing at import time.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from brain.errors import NoNvidiaGpu
from brain.spec import ServerSpec

MIB = 1024 * 1024
_SMI_QUERY = "index,uuid,name,memory.total,memory.used,memory.free"


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    total_mib: int
    used_mib: int
    free_mib: int

    @property
    def total_gib(self) -> float:
        return self.total_mib / 1024

    @property
    def free_gib(self) -> float:
        return self.free_mib / 1024


def _query_nvml() -> list[GpuInfo] | None:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            out.append(
                GpuInfo(
                    index=i,
                    uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    total_mib=mem.total // MIB,
                    used_mib=mem.used // MIB,
                    free_mib=mem.free // MIB,
                )
            )
        return out
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def parse_nvidia_smi_csv(text: str) -> list[GpuInfo]:
    """Rows of ``--query-gpu=index,uuid,name,memory.total,memory.used,memory.free
    --format=csv,noheader,nounits`` (MiB)."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 6:
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        # A GPU name may itself contain commas: the numbers are the last three fields.
        index, uuid = parts[0], parts[1]
        total, used, free = parts[-3:]
        name = ", ".join(parts[2:-3])
        gpus.append(GpuInfo(int(index), uuid, name, int(total), int(used), int(free)))
    return gpus


def _query_smi(timeout: float) -> list[GpuInfo]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise NoNvidiaGpu(
            "no NVIDIA GPU found: pynvml is not installed and nvidia-smi is not on PATH. "
            "Install the NVIDIA driver, or use backend=sim to run without a GPU."
        )
    try:
        proc = subprocess.run(
            [exe, f"--query-gpu={_SMI_QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NoNvidiaGpu(f"nvidia-smi did not answer: {e}") from None
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise NoNvidiaGpu(
            "nvidia-smi failed"
            + (f": {msg[0]}" if msg else f" (exit {proc.returncode})")
            + ". Is the NVIDIA driver loaded? Use backend=sim to run without a GPU."
        )
    gpus = parse_nvidia_smi_csv(proc.stdout)
    if not gpus:
        raise NoNvidiaGpu("nvidia-smi lists no GPUs.")
    return gpus


def query_gpus(*, timeout: float = 10.0, use_nvml: bool = True) -> list[GpuInfo]:
    """All NVIDIA GPUs with their memory; NVML first, then nvidia-smi."""
    if use_nvml:
        gpus = _query_nvml()
        if gpus:
            return gpus
    return _query_smi(timeout)


def _selected(spec: ServerSpec, gpus: Sequence[GpuInfo]) -> tuple[list[GpuInfo], list[str]]:
    if spec.gpus == "all":
        return list(gpus), []
    chosen, problems = [], []
    for ident in spec.gpus:
        match = [g for g in gpus if str(g.index) == str(ident) or g.uuid == str(ident)]
        if match:
            chosen.append(match[0])
        else:
            have = ", ".join(str(g.index) for g in gpus) or "none"
            problems.append(f"gpus lists {ident!r}, but this machine has GPUs {have}.")
    return chosen, problems


CUDA_RESERVED_MIB = 620
"""NVML's total less what CUDA reports as total (cudaMemGetInfo): the driver keeps it. On the
H200 NVML said 140.40 GiB, vLLM's CUDA view 139.8 GiB; an 80 GB H100 shows about the same."""
CUDA_CONTEXT_MIB = 540
"""What the server's own CUDA context takes before vLLM measures free memory: NVML said 68.63
GiB free, vLLM (inside the new process) 68.11 GiB."""


def cuda_view(g: GpuInfo) -> tuple[float, float]:
    """(free, total) in MiB as vLLM will see them from inside the new server's process."""
    return max(g.free_mib - CUDA_CONTEXT_MIB, 0), max(g.total_mib - CUDA_RESERVED_MIB, 1)


def check_free_memory(spec: ServerSpec, gpus: Sequence[GpuInfo]) -> list[str]:
    """Problems that would make vLLM's startup memory check fail, one line each (empty = ok).

    The check is vLLM's: free >= gpu_memory_utilization * total on every GPU the server uses,
    both as CUDA sees them from inside the server (:func:`cuda_view`), not as NVML does: near
    the limit NVML's larger numbers let through a start vLLM then refuses. With preload
    zero_copy the daemon's weights sit outside the budget, which this cannot see, so it only
    checks what it can.
    """
    chosen, problems = _selected(spec, gpus)
    util = spec.gpu_memory_utilization
    for g in chosen:
        free, total = cuda_view(g)
        want = util * total
        if free < want:
            fits = int(free / total * 100) / 100 - 0.01
            fix = (
                f"set gpu_memory_utilization={fits:.2f} or free the GPU"
                if fits > 0.05
                else "free the GPU (another process holds almost all of it)"
            )
            problems.append(
                f"GPU {g.index} ({g.name}): {free / 1024:.2f} of {total / 1024:.2f} GiB free as "
                f"CUDA sees it (NVML: {g.free_gib:.2f} of {g.total_gib:.2f}), "
                f"gpu_memory_utilization={util:g} needs {want / 1024:.2f} GiB: {fix}."
            )
    return problems


def wait_memory_released(
    spec: ServerSpec,
    *,
    timeout_s: float = 60.0,
    interval_s: float = 1.0,
    query: Callable[[], list[GpuInfo]] = query_gpus,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[str]:
    """Poll until the spec's memory request fits (a just-stopped server frees VRAM a few
    seconds after its container exits). Returns the remaining problems; empty = fits."""
    deadline = clock() + timeout_s
    while True:
        problems = check_free_memory(spec, query())
        if not problems or clock() >= deadline:
            return problems
        sleep(interval_s)
