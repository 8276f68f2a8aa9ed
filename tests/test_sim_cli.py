"""``brain sim`` and the fake ``vllm serve`` entry point, as real processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from brain.sim.vllm_entry import config_from_vllm_argv, parse_max_model_len

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def read_until(process: subprocess.Popen[str], marker: str, timeout: float = 20) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            return lines
    raise AssertionError(f"{marker!r} not printed; got:\n{''.join(lines)}")


BRAIN_SIM = ["-c", "from brain.cli import app; app()", "sim"]


def test_brain_sim_serves_and_stops_promptly_on_sigterm():
    port = free_port()
    process = start(
        [*BRAIN_SIM, "--port", str(port), "--model", "demo-model", "--spec-tokens", "2"]
    )
    try:
        lines = read_until(process, "Application startup complete.")
        text = "".join(lines)
        assert "Initializing a V1 LLM engine (v0.33.0-sim) with config: model='demo-model'" in text
        assert "speculative_config=SpeculativeConfig(method='mtp'" in text
        assert (
            "GPU KV cache size:" in text
            and "Maximum concurrency for 8,192 tokens per request" in text
        )
        assert f"Starting vLLM server on http://127.0.0.1:{port}" in text  # 0.33's entry.py:139
        assert "GPU KV cache size: 262,144 tokens, Maximum concurrency for 8,192" in text
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
        assert (
            httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"][0]["id"] == "demo-model"
        )
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5) == 0
        assert time.monotonic() - started < 3
    finally:
        process.kill()


def test_load_delay_refuses_connections_until_ready():
    port = free_port()
    process = start([*BRAIN_SIM, "--port", str(port), "--load-delay", "0.8"])
    try:
        read_until(process, "Initializing a V1 LLM engine")
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/health")
        read_until(process, "Application startup complete.")
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=5)


def test_fatal_log_is_printed_and_exits_1():
    fatal = "ValueError: No available memory for the cache blocks."
    process = start([*BRAIN_SIM, "--port", str(free_port()), "--fatal-log", fatal])
    output, _ = process.communicate(timeout=20)
    assert process.returncode == 1
    assert fatal in output and "Starting vLLM server" not in output


def test_exit_fault_kills_the_process():
    port = free_port()
    process = start([*BRAIN_SIM, "--port", str(port), "--fault", "exit@1,exit_code=3"])
    try:
        read_until(process, "Application startup complete.")
        with pytest.raises(httpx.TransportError):
            httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "hi"}]},
            )
        assert process.wait(timeout=5) == 3
    finally:
        process.kill()


def test_vllm_entry_accepts_vllm_argv():
    port = free_port()
    process = start(
        [
            "-m",
            "brain.sim.vllm_entry",
            "serve",
            "some/model",
            "--max-model-len",
            "2048",
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--unknown-flag",
            "x",
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
        ]
    )
    try:
        text = "".join(read_until(process, "Application startup complete."))
        assert "ignores these vLLM flags: --unknown-flag x" in text
        card = httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"][0]
        assert card["id"] == "some/model" and card["max_model_len"] == 2048
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5) == 0


def test_vllm_argv_mapping():
    config, ignored = config_from_vllm_argv(
        [
            "serve",
            "google/gemma-4-E4B-it",
            "--served-model-name",
            "gemma",
            "--max-model-len",
            "32k",
            "--api-key",
            "k1",
            "--max-num-seqs",
            "4",
            "--speculative-config",
            '{"model": "google/gemma-4-E4B-it-assistant", "num_speculative_tokens": 4}',
            "--gpu-memory-utilization",
            "0.9",
            "--stream-interval",
            "8",
        ],
        {"BRAIN_SIM_FAULTS": "http_503@2;stall@3,seconds=0.1", "BRAIN_SIM_LOAD_DELAY": "1.5"},
    )
    assert config.stream_interval == 8
    assert config.served_names == ["gemma"] and config.model == "google/gemma-4-E4B-it"
    assert config.max_model_len == 32000 and config.api_keys == ["k1"] and config.max_num_seqs == 4
    assert config.speculative.num_tokens == 4 and config.speculative.draft_model.endswith(
        "assistant"
    )
    assert [f.kind for f in config.faults] == ["http_503", "stall"]
    assert config.timing.load_delay == 1.5 and config.host == "0.0.0.0" and config.port == 8000
    assert ignored == ["--gpu-memory-utilization", "0.9"]
    assert parse_max_model_len("32K") == 32768 and parse_max_model_len("auto") is None


@pytest.mark.parametrize(
    ("flags", "cause", "vllms_words"),
    [
        (
            ["--max-model-len", "0"],
            "invalid_max_model_len",
            "max_model_len must be a positive integer, got int: 0",
        ),
        (
            ["--max-num-seqs", "16", "--max-num-batched-tokens", "10"],
            "batched_tokens_below_max_num_seqs",
            "max_num_batched_tokens (10) must be greater than or equal to max_num_seqs (16).",
        ),
        (
            ["--load-format", "bogus"],
            "invalid_load_format",
            "Load format `bogus` is not supported",
        ),
    ],
)
def test_vllm_entry_refuses_what_vllm_refuses_and_the_brain_reads_why(flags, cause, vllms_words):
    from brain.diagnose import diagnose

    process = start(
        ["-m", "brain.sim.vllm_entry", "serve", "m", "--port", str(free_port()), *flags]
    )
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 1, output
    assert vllms_words in output and "Application startup complete" not in output
    assert diagnose(output).cause == cause


def test_vllm_entry_takes_what_vllm_takes():
    # No max_num_seqs given: vLLM lowers its default to max_num_batched_tokens; vLLM
    # lower-cases the load format; -1 is auto.
    config, ignored = config_from_vllm_argv(
        ["serve", "m", "--max-num-batched-tokens", "10", "--load-format", "SafeTensors"], {}
    )
    assert config.model == "m" and ignored == []
    config_from_vllm_argv(["serve", "m", "--max-model-len", "-1"], {})
