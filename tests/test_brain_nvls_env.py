"""NVLink multicast stays off in every environment the brain builds for a server: process and
sim (the Popen env), containers (docker SDK options and the `docker run` line), Ray nodes, TP
profiles and every replica of a fleet."""

from __future__ import annotations

import shlex

import pytest

from brain.command import (
    BRAIN_ENV,
    docker_run_command_line,
    docker_run_options,
    dry_run_text,
    process_environment,
    ray_worker_docker_argv,
)
from brain.fleet.plan import parse_gpus, plan_replicas
from brain.launchers.process import ProcessLauncher
from brain.profiles import apply_overrides, load_profile

OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
PROFILES = ["sim", "gemma4-e4b-mtp", "gemma4-e4b-mtp-tp2", "qwen2.5-1.5b-smoke"]


def test_the_brain_env_is_multicast_off():
    assert BRAIN_ENV == OFF


@pytest.mark.parametrize("profile", PROFILES)
def test_process_and_docker_envs_of_every_replica_have_multicast_off(profile, monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # the caller's own value does not leak in
    spec = load_profile(profile)
    tp = spec.tensor_parallel_size
    gpus = parse_gpus(",".join(str(i) for i in range(2 * tp)))
    for backend in ("process", "docker"):
        s = apply_overrides(spec, [f"backend={backend}", "gpus=all"])
        for r in [*plan_replicas(s, gpus=gpus, base_port=9000), *plan_replicas(s)]:
            assert OFF.items() <= process_environment(r.spec).items()
            assert OFF.items() <= ProcessLauncher().environment(r.spec).items()
            assert OFF.items() <= docker_run_options(r.spec, environ={}).environment.items()
            line = shlex.split(docker_run_command_line(r.spec))
            for k, v in OFF.items():
                assert f"{k}={v}" in line and line[line.index(f"{k}={v}") - 1] == "-e"
            if backend == "process":
                serve = [x for x in dry_run_text(r.spec).splitlines() if "vllm serve" in x]
                assert serve[0].startswith(" ".join(f"{k}={v}" for k, v in OFF.items()))


def test_a_ray_cluster_has_multicast_off_on_every_node():
    spec = load_profile("qwen3-32b-2node-ray")
    worker = ray_worker_docker_argv(spec)
    assert all(f"{k}={v}" in worker for k, v in OFF.items())
    assert OFF.items() <= docker_run_options(spec, environ={}).environment.items()
    text = dry_run_text(apply_overrides(spec, ["backend=process"]))
    ray_lines = [x for x in text.splitlines() if "ray start" in x]
    assert len(ray_lines) == 2 and all("NCCL_NVLS_ENABLE=0" in x for x in ray_lines)


def test_a_profile_may_turn_it_back_on_explicitly():
    spec = apply_overrides(
        load_profile("gemma4-e4b-mtp-tp2"), ["backend=process", "env.NCCL_NVLS_ENABLE=1"]
    )
    assert process_environment(spec)["NCCL_NVLS_ENABLE"] == "1"
    assert docker_run_options(spec, environ={}).environment["NCCL_NVLS_ENABLE"] == "1"
