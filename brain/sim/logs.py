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
    return [
        vllm_line(f"vLLM API server version {config.version}", "api_server.py:1793"),
        vllm_line(
            f"Initializing a V1 LLM engine (v{config.version}) with config: "
            f"model={config.model!r}, "
            f"speculative_config={speculative_repr(config)}, tokenizer={config.model!r}, "
            f"dtype=torch.bfloat16, max_seq_len={config.max_model_len}, download_dir=None, "
            f"load_format=auto, tensor_parallel_size=1, served_model_name={name}, "
            f"enable_prefix_caching=True, enable_chunked_prefill=True",
            "core.py:75",
        ),
        vllm_line("Loading weights took 0.00 seconds", "default_loader.py:262"),
    ]


def ready_lines(config: SimConfig, load_seconds: float) -> list[str]:
    """The lines vLLM prints once the model is loaded, before the API server binds."""
    concurrency = config.kv_cache_tokens / config.max_model_len
    return [
        vllm_line(
            f"Model loading took 0.0000 GiB and {load_seconds:.6f} seconds",
            "gpu_model_runner.py:1892",
        ),
        vllm_line("Available KV cache memory: 1.00 GiB", "gpu_worker.py:241"),
        vllm_line(
            f"GPU KV cache size: {config.kv_cache_tokens:,} tokens", "kv_cache_utils.py:1087"
        ),
        vllm_line(
            f"Maximum concurrency for {config.max_model_len:,} tokens per request: "
            f"{concurrency:.2f}x",
            "kv_cache_utils.py:1091",
        ),
        vllm_line(
            "Chunked prefill is enabled with "
            f"max_num_batched_tokens={max(2048, config.max_model_len)}.",
            "scheduler.py:222",
        ),
    ]
