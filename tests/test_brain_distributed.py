"""A multi-node server (vLLM + Ray): the spec's validation, the head's argv and container, the
worker commands. Pure: nothing here starts Ray."""

from __future__ import annotations

import shlex

import pytest

from brain.command import (
    docker_run_argv,
    docker_run_options,
    dry_run_text,
    process_command,
    process_environment,
    ray_head_argv,
    ray_worker_argv,
    ray_worker_docker_argv,
    vllm_serve_argv,
)
from brain.errors import SpecError
from brain.profiles import apply_overrides, load_profile
from brain.spec import ServerSpec
from brain.spec_checks import spec_warnings

PROFILE = "qwen3-32b-2node-ray"
HEAD = "10.0.0.1"


def two_nodes(*overrides: str) -> ServerSpec:
    return apply_overrides(load_profile(PROFILE), list(overrides))


def refused(*overrides: str) -> str:
    with pytest.raises(SpecError) as e:
        two_nodes(*overrides)
    return str(e.value)


def test_the_head_runs_vllm_serve_with_the_ray_executor_tp_and_pp():
    argv = vllm_serve_argv(two_nodes(), in_container=False)
    flags = " ".join(argv)
    assert (
        "--tensor-parallel-size 2 --pipeline-parallel-size 2 --distributed-executor-backend ray"
        in flags
    )
    # --nnodes/--node-rank/--master-addr belong to vLLM's mp backend ("nnodes > 1 can only be
    # set when distributed executor backend is mp ..."): never with Ray.
    assert "--nnodes" not in flags and "--node-rank" not in flags and "--master-addr" not in flags
    assert process_command(two_nodes("backend=process"))[:3] == [
        "vllm",
        "serve",
        "Qwen/Qwen3-32B",
    ]


def test_pipeline_parallel_size_one_is_not_spelled_out():
    spec = two_nodes(
        "tensor_parallel_size=4",
        "distributed.pipeline_parallel_size=1",
    )
    argv = vllm_serve_argv(spec)
    assert "--pipeline-parallel-size" not in argv
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"


def test_under_docker_the_servers_container_is_the_ray_head():
    spec = two_nodes()
    opts = docker_run_options(spec)
    assert opts.entrypoint == ["/bin/bash", "-c"] and opts.network_mode == "host"
    assert opts.environment["VLLM_HOST_IP"] == HEAD
    (script,) = opts.command
    head, serve = script.split(" && exec ")
    assert shlex.split(head) == ray_head_argv(spec)
    assert shlex.split(serve) == ["vllm", "serve", *vllm_serve_argv(spec, in_container=True)]
    assert ray_head_argv(spec) == [
        "ray",
        "start",
        "--head",
        f"--node-ip-address={HEAD}",
        "--port=6379",
    ]
    argv = docker_run_argv(opts)
    i = argv.index("--entrypoint")
    assert argv[i + 1] == "/bin/bash" and argv[-3:] == [spec.image_ref, "-c", script]
    assert opts.to_sdk_kwargs()["entrypoint"] == ["/bin/bash", "-c"]


def test_workers_join_the_head_with_ray_start_address():
    spec = two_nodes()
    assert ray_worker_argv(spec) == ["ray", "start", "--block", f"--address={HEAD}:6379"]
    worker = ray_worker_docker_argv(spec)
    assert "--network=host" in worker and worker[-3:-1] == [spec.image_ref, "-c"]
    assert worker[-1] == f"ray start --block --address={HEAD}:6379"
    assert "VLLM_HOST_IP=<WORKER_IP>" in worker


def test_dry_run_shows_the_head_and_worker_set_up_per_backend():
    text = dry_run_text(two_nodes())
    assert "ray start --head --node-ip-address=10.0.0.1 --port=6379 && exec vllm serve" in text
    assert "on every other node (1)" in text and "--address=10.0.0.1:6379" in text
    proc = dry_run_text(two_nodes("backend=process"))
    assert "VLLM_HOST_IP=10.0.0.1 vllm serve Qwen/Qwen3-32B" in proc
    off = "NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
    assert f"\n{off} ray start --head --node-ip-address=10.0.0.1 --port=6379\n" in proc
    assert process_environment(two_nodes("backend=process"))["VLLM_HOST_IP"] == HEAD


def test_ranks_must_equal_the_gpus_across_the_nodes():
    msg = refused("distributed.pipeline_parallel_size=1")
    assert "tensor_parallel_size 2 x pipeline_parallel_size 1 = 2 ranks" in msg
    assert "2 nodes x 2 GPUs = 4 GPUs" in msg
    assert "tensor_parallel_size=2 (GPUs per node)" in msg
    assert "distributed.pipeline_parallel_size=2 (nodes)" in msg


def test_the_head_lists_one_nodes_share_of_gpus():
    assert "gpus lists 1 device(s) for the head node" in refused("gpus=[0]")
    assert two_nodes("gpus=all").gpus == "all"


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("distributed.head_address=127.0.0.1", "cannot be reached from the other nodes"),
        ("distributed.head_address=not an address", "is not an IP address or host name"),
        ("docker.network_host=false", "set docker.network_host=true"),
        ("distributed.nodes=1", "distributed.nodes"),
        ("distributed.backend=mp", "distributed.backend"),
        ("extra_args=[--pipeline-parallel-size, '2']", "set distributed.pipeline_parallel_size"),
    ],
)
def test_a_multi_node_spec_refuses_what_cannot_work(override, needle):
    assert needle in refused(override)


def test_no_weight_cache_and_no_adaptive_verification_across_pipeline_stages():
    assert "multi-node server cannot load from it" in refused(
        "preload.enabled=true", "preload.socket_dir=/tmp/wc"
    )
    msg = refused(
        "speculative={method: ngram, num_speculative_tokens: 2, enable_adaptive_verification: true}"
    )
    assert "not supported with pipeline parallelism" in msg


def test_tensor_parallelism_across_machines_is_legal_but_warned():
    spec = two_nodes("tensor_parallel_size=4", "distributed.pipeline_parallel_size=1")
    (warning,) = [w for w in spec_warnings(spec) if "spans machines" in w]
    assert "TP 4 > 2 GPUs per node" in warning
    assert not [w for w in spec_warnings(two_nodes()) if "spans machines" in w]
