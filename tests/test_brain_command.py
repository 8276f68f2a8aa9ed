"""ServerSpec -> exact argv, container options and the dry-run line, per profile."""

from __future__ import annotations

import json
import shlex

import pytest
from docker.types import DeviceRequest

from brain.command import (
    BRAIN_ENV,
    docker_run_command_line,
    docker_run_options,
    dry_run_text,
    process_command,
    vllm_preload_argv,
    vllm_serve_argv,
)
from brain.errors import SpecErrors
from brain.profiles import apply_overrides, load_profile
from brain.spec import spec_hash

HF = "/root/.cache/huggingface"

EXPECTED_ARGV = {
    "gemma4-e4b-mtp": [
        "google/gemma-4-E4B-it",
        "--served-model-name", "gemma4-e4b",
        "--host", "0.0.0.0", "--port", "8000",
        "--max-model-len", "32768",
        "--gpu-memory-utilization", "0.9",
        "--speculative-config",
        '{"model":"google/gemma-4-E4B-it-assistant","num_speculative_tokens":2}',
        "--reasoning-parser", "gemma4",
        "--allowed-local-media-path", "/media",
        "--enable-auto-tool-choice",
        "--tool-call-parser", "gemma4",
        "--prefix-cache-retention-interval", "4096",
    ],
    "qwen2.5-1.5b-smoke": [
        "Qwen/Qwen2.5-1.5B-Instruct",
        "--served-model-name", "qwen-smoke",
        "--host", "0.0.0.0", "--port", "8000",
        "--max-model-len", "4096",
        "--gpu-memory-utilization", "0.5",
        "--max-num-seqs", "1",
        "--enforce-eager",
        "--enable-auto-tool-choice",
        "--tool-call-parser", "hermes",
    ],
    "deepseek-v4-flash-dspark": [
        "deepseek-ai/DeepSeek-V4-Flash",
        "--served-model-name", "deepseek-v4-flash",
        "--host", "0.0.0.0", "--port", "8000",
        "--tensor-parallel-size", "4",
        "--max-model-len", "131072",
        "--gpu-memory-utilization", "0.9",
        "--kv-cache-dtype", "fp8",
        "--trust-remote-code",
        "--speculative-config",
        '{"method":"dspark","model":"deepseek-ai/DeepSeek-V4-Flash-DSpark",'
        '"num_speculative_tokens":7,"draft_sample_method":"probabilistic",'
        '"enable_adaptive_verification":true}',
        "--reasoning-parser", "deepseek_v4",
        "--enable-auto-tool-choice",
        "--tool-call-parser", "deepseek_v4",
        "--tokenizer-mode", "deepseek_v4",
        "--block-size", "256",
    ],
    "sim": [
        "sim/marathon-demo",
        "--served-model-name", "sim",
        "--host", "127.0.0.1", "--port", "8011",
        "--max-model-len", "32768",
        "--gpu-memory-utilization", "0.9",
        "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}',
        "--enable-auto-tool-choice",
        "--tool-call-parser", "hermes",
    ],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXPECTED_ARGV))
def test_serve_argv_per_profile_is_exact(name):
    assert vllm_serve_argv(load_profile(name)) == EXPECTED_ARGV[name]


def test_gemma_docker_options_map_onto_the_sdk():
    s = load_profile("gemma4-e4b-mtp")
    opts = docker_run_options(s, environ={"HF_TOKEN": "hf_x", "OTHER": "no"})
    kw = opts.to_sdk_kwargs()
    dev = kw.pop("device_requests")
    assert kw == {
        "image": "vllm/vllm-openai:v0.33.0",
        "name": "marathon-gemma4-e4b-mtp",
        "command": EXPECTED_ARGV["gemma4-e4b-mtp"],
        "labels": {"marathon.server": "gemma4-e4b-mtp", "marathon.spec-hash": spec_hash(s)},
        "detach": True,
        "ipc_mode": "host",
        "mem_limit": "32g",
        "memswap_limit": "32g",
        "mem_reservation": "24g",
        "oom_score_adj": 300,
        "ports": {"8000/tcp": ("127.0.0.1", 8000)},
        "volumes": {
            str(__import__("pathlib").Path("~/marathon/media").expanduser()): {
                "bind": "/media",
                "mode": "ro",
            },
            str(__import__("pathlib").Path("~/.cache/huggingface").expanduser()): {
                "bind": HF,
                "mode": "rw",
            },
        },
        "environment": {**BRAIN_ENV, "HF_TOKEN": "hf_x"},
    }
    assert len(dev) == 1 and isinstance(dev[0], DeviceRequest)
    assert dev[0]["DeviceIDs"] == ["0"] and dev[0]["Capabilities"] == [["gpu"]]


def test_gpu_requests_can_be_omitted_for_the_ci_fake_image():
    s = load_profile("qwen2.5-1.5b-smoke")
    assert "device_requests" not in docker_run_options(s, request_gpus=False).to_sdk_kwargs()
    s2 = apply_overrides(s, ["docker.request_gpus=false"])
    assert docker_run_options(s2).device_requests == []


def test_all_gpus_is_count_minus_one_and_cpus_become_nano_cpus():
    s = apply_overrides(
        load_profile("qwen2.5-1.5b-smoke"),
        ["gpus=all", "docker.cpus=2.5", "docker.cpu_shares=512", "docker.ipc_host=false"],
    )
    kw = docker_run_options(s).to_sdk_kwargs()
    assert kw["device_requests"][0]["Count"] == -1
    assert kw["nano_cpus"] == 2_500_000_000 and kw["cpu_shares"] == 512
    assert kw["shm_size"] == "8g" and "ipc_mode" not in kw


def test_network_host_listens_on_the_spec_address_and_publishes_nothing():
    s = apply_overrides(load_profile("qwen2.5-1.5b-smoke"), ["docker.network_host=true"])
    opts = docker_run_options(s)
    assert opts.ports == {} and opts.network_mode == "host"
    assert opts.command[3:7] == ["--host", "127.0.0.1", "--port", "8001"]


def test_api_key_goes_into_argv_but_is_redacted_when_printed():
    s = apply_overrides(load_profile("qwen2.5-1.5b-smoke"), ["host=0.0.0.0", "api_key=sekret"])
    assert vllm_serve_argv(s)[7:9] == ["--api-key", "sekret"]
    line = docker_run_command_line(s)
    assert "sekret" not in line and "<redacted>" in line and "-p 0.0.0.0:8001:8000" in line
    assert "sekret" not in dry_run_text(s)


def test_preload_adds_ipc_cache_with_loud_fallback_and_daemon_argv_matches():
    s = apply_overrides(
        load_profile("gemma4-e4b-mtp"),
        ["preload.enabled=true", "preload.socket_dir=/run/wc", "preload.health_port=8990"],
    )
    argv = vllm_serve_argv(s)
    i = argv.index("--load-format")
    assert argv[i : i + 4] == [
        "--load-format",
        "ipc_cache",
        "--model-loader-extra-config",
        '{"socket_dir":"/run/wc","mode":"zero_copy","fallback":false}',
    ]
    pre = vllm_preload_argv(s)
    assert pre[:2] == ["--model", "google/gemma-4-E4B-it"]
    assert "--load-format" not in pre and "--host" not in pre and "--tool-call-parser" not in pre
    assert "--enable-auto-tool-choice" not in pre
    assert pre[-4:] == [
        "--weight-cache-socket-dir",
        "/run/wc",
        "--weight-cache-health-port",
        "8990",
    ]
    # the engine args the WeightCacheKey depends on are the same on both sides
    for flag in ("--max-model-len", "--gpu-memory-utilization", "--speculative-config"):
        assert pre[pre.index(flag) + 1] == argv[argv.index(flag) + 1]
    assert "-v /run/wc:/run/wc" in docker_run_command_line(s)


def test_preload_drops_serve_only_extra_args_with_their_values():
    s = apply_overrides(
        load_profile("qwen2.5-1.5b-smoke"),
        ["extra_args=[--tool-parser-plugin, /p.py, --seed, '3', --uvicorn-log-level=debug]"],
    )
    assert vllm_preload_argv(s)[-2:] == ["--seed", "3"]


def test_process_command_listens_on_the_spec_host():
    s = apply_overrides(load_profile("qwen2.5-1.5b-smoke"), ["backend=process"])
    assert process_command(s)[:8] == [
        "vllm", "serve", "Qwen/Qwen2.5-1.5B-Instruct", "--served-model-name", "qwen-smoke",
        "--host", "127.0.0.1", "--port",
    ]  # fmt: skip


def test_docker_command_line_round_trips_through_shlex():
    s = load_profile("deepseek-v4-flash-dspark")
    parts = shlex.split(docker_run_command_line(s))
    assert parts[:4] == ["docker", "run", "-d", "--name"]
    assert parts[parts.index("--gpus") + 1] == '"device=0,1,2,3"'
    i = parts.index("vllm/vllm-openai:v0.33.0")
    assert parts[i + 1 :] == EXPECTED_ARGV["deepseek-v4-flash-dspark"]
    spec_json = parts[parts.index("--speculative-config") + 1]
    assert json.loads(spec_json)["method"] == "dspark"


def test_boolean_tristate_flags():
    s = apply_overrides(
        load_profile("qwen2.5-1.5b-smoke"),
        ["enable_prefix_caching=false", "enable_chunked_prefill=true"],
    )
    argv = vllm_serve_argv(s)
    assert "--no-enable-prefix-caching" in argv and "--enable-chunked-prefill" in argv


def test_stream_interval_is_a_serve_flag_and_a_spec_field_only():
    spec = apply_overrides(load_profile("qwen2.5-1.5b-smoke"), ["stream_interval=8"])
    argv = vllm_serve_argv(spec)
    assert argv[argv.index("--stream-interval") + 1] == "8"
    assert "--stream-interval" not in vllm_preload_argv(spec)  # a serving setting, not a load one
    with pytest.raises(SpecErrors, match="set stream_interval instead"):
        apply_overrides(load_profile("qwen2.5-1.5b-smoke"), ["extra_args=[--stream-interval, '4']"])


def test_dry_run_text_shows_the_line_warnings_and_launch_problems():
    s = apply_overrides(
        load_profile("qwen2.5-1.5b-smoke"), ["host=0.0.0.0", "enable_auto_tool_choice=false"]
    )
    text = dry_run_text(s)
    assert text.splitlines()[2].startswith("docker run -d --name marathon-qwen2.5-1.5b-smoke")
    assert "# warning: tool_call_parser is set without enable_auto_tool_choice" in text
    assert "# will refuse to launch: api_key:" in text
    sim = dry_run_text(load_profile("sim"))
    assert "no GPU needed" in sim and "docker run" not in sim
