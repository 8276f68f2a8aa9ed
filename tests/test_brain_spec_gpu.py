"""GPU memory checks against a fake nvidia-smi (a real subprocess on PATH)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from brain.errors import NoNvidiaGpu
from brain.gpu import (
    GpuInfo,
    check_free_memory,
    cuda_view,
    parse_nvidia_smi_csv,
    query_gpus,
    wait_memory_released,
)
from brain.profiles import apply_overrides, load_profile


def fake_smi(tmp_path, monkeypatch, body: str) -> None:
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_query_gpus_reads_nvidia_smi_csv(tmp_path, monkeypatch):
    fake_smi(
        tmp_path,
        monkeypatch,
        'case "$*" in *--query-gpu=index,uuid,name,memory.total,memory.used,memory.free*'
        "--format=csv,noheader,nounits*)\n"
        'echo "0, GPU-aaa, NVIDIA GeForce RTX 4090, 24564, 1200, 23364"\n'
        'echo "1, GPU-bbb, NVIDIA A100-SXM4-80GB, 81920, 70000, 11920";;\n'
        "*) exit 9;; esac\n",
    )
    gpus = query_gpus(use_nvml=False)
    assert gpus[0] == GpuInfo(0, "GPU-aaa", "NVIDIA GeForce RTX 4090", 24564, 1200, 23364)
    assert gpus[1].free_mib == 11920


def test_failing_nvidia_smi_is_no_nvidia_gpu(tmp_path, monkeypatch):
    fake_smi(
        tmp_path,
        monkeypatch,
        'echo "NVIDIA-SMI has failed because it could not communicate'
        ' with the NVIDIA driver." >&2; exit 9\n',
    )
    with pytest.raises(NoNvidiaGpu, match="could not communicate"):
        query_gpus(use_nvml=False)


def test_missing_nvidia_smi_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NoNvidiaGpu, match="nvidia-smi is not on PATH"):
        query_gpus(use_nvml=False)


def test_names_with_commas_parse():
    [g] = parse_nvidia_smi_csv("3, GPU-x, Weird, Name, 100, 10, 90\n")
    assert (g.index, g.name, g.free_mib) == (3, "Weird, Name", 90)


GPUS = [
    GpuInfo(0, "GPU-a", "RTX", 24000, 12000, 12000),
    GpuInfo(1, "GPU-b", "RTX", 24000, 0, 24000),
]


def test_free_memory_check_is_vllms_startup_check():
    spec = load_profile("gemma4-e4b-mtp")  # gpus [0], 0.9
    [problem] = check_free_memory(spec, GPUS)
    assert "GPU 0" in problem and "gpu_memory_utilization=0.48" in problem
    assert check_free_memory(apply_overrides(spec, ["gpus=[1]"]), GPUS) == []
    assert check_free_memory(apply_overrides(spec, ["gpu_memory_utilization=0.48"]), GPUS) == []
    # 0.5 of NVML's numbers fits, but not of what vLLM sees from inside its process
    assert check_free_memory(apply_overrides(spec, ["gpu_memory_utilization=0.5"]), GPUS)


def test_free_memory_is_judged_as_vllm_saw_it_on_the_h200():
    # The same moment, two views (tests/fixtures/vllm-0.26): the brain's NVML said 68.63 of
    # 140.40 GiB free (brain/up_toobig), vLLM's own check said 68.11/139.8 GiB.
    real = (Path(__file__).parent / "fixtures/vllm-0.26/logs/fail-gpu-memory-0.99.log").read_text()
    m = re.search(r"Free memory on device \S+ \(([\d.]+)/([\d.]+) GiB\)", real)
    vllm_free, vllm_total = float(m[1]), float(m[2])
    nvml = GpuInfo(0, "GPU-h", "NVIDIA H200", round(140.40 * 1024), 0, round(68.63 * 1024))
    free, total = cuda_view(nvml)
    assert abs(free / 1024 - vllm_free) < 0.02 and abs(total / 1024 - vllm_total) < 0.02
    spec = apply_overrides(load_profile("gemma4-e4b-mtp"), ["gpus=[0]"])
    # vLLM refuses 0.488 (x 139.8 = 68.22 > 68.11); NVML's numbers (x 140.40 = 68.52) let it by
    assert 0.488 * 140.40 < 68.63 and 0.488 * vllm_total > vllm_free
    assert check_free_memory(apply_overrides(spec, ["gpu_memory_utilization=0.488"]), [nvml])
    [problem] = check_free_memory(apply_overrides(spec, ["gpu_memory_utilization=0.99"]), [nvml])
    fits = float(re.search(r"set gpu_memory_utilization=([\d.]+)", problem)[1])
    assert fits * vllm_total <= vllm_free


def test_unknown_device_id_is_a_problem():
    spec = apply_overrides(load_profile("gemma4-e4b-mtp"), ["gpus=[7]"])
    assert check_free_memory(spec, GPUS) == ["gpus lists 7, but this machine has GPUs 0, 1."]


def test_wait_memory_released_polls_until_it_fits():
    spec = load_profile("gemma4-e4b-mtp")
    states = [GPUS, GPUS, [GpuInfo(0, "GPU-a", "RTX", 24000, 500, 23500)]]
    now = [0.0]
    problems = wait_memory_released(
        spec,
        timeout_s=10,
        query=lambda: states.pop(0),
        sleep=lambda s: now.__setitem__(0, now[0] + s),
        clock=lambda: now[0],
    )
    assert problems == [] and now[0] == 2.0
