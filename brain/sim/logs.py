"""vLLM-shaped log lines on stdout, so the brain's readiness and diagnosis can be tested on the sim.

vLLM prints ``LEVEL MM-DD HH:MM:SS [file.py:line] message`` for its own lines and uvicorn's
``INFO:     message`` for the HTTP server's; the sim copies both shapes and the messages the brain
looks for (engine config, KV cache size, maximum concurrency, API server start, startup complete).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from brain.sim.config import SimConfig

LogFn = Callable[[str], None]


def stdout_log(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


def silent_log(_line: str) -> None:
    """For in-process servers in tests, where stdout lines are noise."""


def vllm_line(message: str, source: str = "api_server.py:1", level: str = "INFO") -> str:
    stamp = time.strftime("%m-%d %H:%M:%S")
    return f"{level} {stamp} [{source}] {message}"


def uvicorn_line(message: str, level: str = "INFO") -> str:
    return f"{level + ':':<9} {message}"


def speculative_repr(config: SimConfig) -> str:
    spec = config.speculative
    if not spec.enabled:
        return "None"
    model = repr(spec.draft_model) if spec.draft_model else "None"
    return (
        f"SpeculativeConfig(method={spec.method!r}, model={model}, "
        f"num_spec_tokens={spec.num_tokens})"
    )


def engine_config_lines(config: SimConfig) -> list[str]:
    """The lines vLLM prints while it initialises the engine and loads the model."""
    name = config.primary_name
    version = config.version_string
    return [
        vllm_line(f"vLLM server version {version}, serving model {name}", "startup.py:41"),
        vllm_line(
            f"Initializing a V1 LLM engine (v{version}) with config: "
            f"model={config.model!r}, "
            f"speculative_config={speculative_repr(config)}, tokenizer={config.model!r}, "
            f"dtype=torch.bfloat16, max_seq_len={config.max_model_len}, download_dir=None, "
            f"load_format=auto, tensor_parallel_size=1, served_model_name={name}, "
            f"enable_prefix_caching={config.enable_prefix_caching}, enable_chunked_prefill=True",
            "core.py:140" if config.vllm_version == "0.33" else "core.py:116",
        ),
        vllm_line("Loading weights took 0.00 seconds", "default_loader.py:262"),
    ]


def ready_lines(config: SimConfig, load_seconds: float) -> list[str]:
    """The lines vLLM prints once the model is loaded, before the API server binds.

    0.33 prints the KV cache size and the concurrency on one line
    (``v1/core/kv_cache_utils.py:1148``); 0.26 printed two.
    """
    concurrency = config.kv_cache_tokens / config.max_model_len
    size = f"GPU KV cache size: {config.kv_cache_tokens:,} tokens"
    most = (
        f"Maximum concurrency for {config.max_model_len:,} tokens per request: {concurrency:.2f}x"
    )
    if config.vllm_version == "0.33":
        kv_lines = [vllm_line(f"{size}, {most}", "kv_cache_utils.py:1148")]
    else:
        kv_lines = [
            vllm_line(size, "kv_cache_utils.py:2177"),
            vllm_line(most, "kv_cache_utils.py:2178"),
        ]
    return [
        vllm_line(
            f"Model loading took 0.0000 GiB memory and {load_seconds:.6f} seconds",
            "gpu_model_runner.py:5347",
        ),
        vllm_line("Available KV cache memory: 1.00 GiB", "gpu_worker.py:560"),
        *kv_lines,
        vllm_line(
            f"Chunked prefill is enabled with max_num_batched_tokens={config.batched_tokens}.",
            "scheduler.py:252",
        ),
    ]


def listening_line(config: SimConfig, host: str, port: int) -> str:
    """vLLM's "Starting vLLM server on" (``launchers/api_server/entry.py:139`` in 0.33)."""
    source = "entry.py:139" if config.vllm_version == "0.33" else "api_server.py:677"
    return vllm_line(f"Starting vLLM server on http://{host}:{port}", source)
