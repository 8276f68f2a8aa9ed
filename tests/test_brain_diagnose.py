"""Log text -> Diagnosis, one realistic excerpt per known failure (texts from vLLM 0.33.0)."""

from __future__ import annotations

import pytest

from brain.diagnose import RULES, diagnose, is_fatal_line
from brain.profiles import apply_overrides, load_profile

E = "(EngineCore pid=253) ERROR 11-29 10:01:02 [core.py:1123] "
A = "(APIServer pid=1) ERROR 11-29 10:01:03 [utils.py:1474] "

CASES = [
    (
        "kv_cache_too_small",
        E + "ValueError: To serve at least one request with the model's max seq len (32768), "
        "(6.0 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(4.5 GiB). Based on the available memory, the estimated maximum model length is "
        "24576. Try increasing `gpu_memory_utilization` (which also controls CPU memory on the "
        "CPU backend) or decreasing `max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        "max_model_len <= 24576",
    ),
    (
        "no_kv_cache_memory",
        E + "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine (this flag also controls CPU "
        "memory reservation on the CPU backend, despite its name).",
        "raise gpu_memory_utilization above 0.9",
    ),
    (
        "gpu_memory_in_use",
        E + "ValueError: Free memory on device cuda:0 (12.18/23.56 GiB) on startup is less "
        "than desired GPU memory utilization (0.9, 21.2 GiB). Decrease GPU memory utilization "
        "or reduce GPU memory used by other processes.",
        "gpu_memory_utilization=0.50",
    ),
    (
        "cuda_oom",
        E + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has "
        "a total capacity of 23.56 GiB of which 1.02 GiB is free.",
        "enforce_eager=true",
    ),
    (
        "shm_exhausted",
        "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-Xyz1 (size 9637888)"
        ", error: No space left on device (28)",
        "--ipc=host",
    ),
    (
        "shm_exhausted",
        "bash: line 1:    27 Bus error               (core dumped) vllm serve",
        "ipc",
    ),
    (
        "model_not_found",
        E + "ValueError: Invalid repository ID or local directory specified: "
        "'google/gemma-4-E4B-itt'.",
        "model ('google/gemma-4-E4B-itt')",
    ),
    (
        "model_not_found",
        "OSError: /models/hub/models--x/snapshots/abc does not appear to have a file named "
        "config.json. Checkout 'https://huggingface.co//models/hub/...' for available files.",
        "snapshots/",
    ),
    (
        "draft_model_not_found",
        E + "ValueError: Invalid repository ID or local directory specified: "
        "'google/gemma-4-E4B-it-assistant'.",
        "speculative.model",
    ),
    (
        "model_gated",
        "huggingface_hub.errors.GatedRepoError: 401 Client Error. Access to model "
        "google/gemma-4-E4B-it is restricted. You must have access to it.",
        "HF_TOKEN",
    ),
    (
        "image_missing",
        "docker.errors.ImageNotFound: 404 Client Error for http+docker://localhost/v1.41/"
        'containers/create: Not Found ("No such image: vllm/vllm-openai:v0.33.0")',
        "docker pull vllm/vllm-openai:v0.33.0",
    ),
    (
        "image_missing",
        "Error response from daemon: pull access denied for vllm/vllm-openai, repository does "
        "not exist or may require 'docker login'",
        "docker pull",
    ),
    (
        "port_in_use",
        "(APIServer pid=1) ERROR [Errno 98] error while attempting to bind on address "
        "('0.0.0.0', 8000): address already in use",
        "port=<free port>",
    ),
    (
        "unknown_tool_parser",
        "KeyError: 'invalid tool call parser: gemma5 (chose from { gemma4,hermes,qwen3_coder })'",
        "tool_call_parser",
    ),
    (
        "auto_tool_choice_disabled",
        '{"error":{"message":"\\"auto\\" tool choice requires --enable-auto-tool-choice and '
        '--tool-call-parser to be set","type":"BadRequestError","code":400}}',
        "enable_auto_tool_choice=true",
    ),
    (
        "auto_tool_choice_disabled",
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        "tool_call_parser",
    ),
    (
        "engine_dead",
        A + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
        "stack trace (above) for the root cause.",
        "traceback",
    ),
    (
        "engine_dead",
        A + "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {'EngineCore': 1}",
        "traceback",
    ),
    (
        "preload_mismatch",
        E + "vllm.model_executor.model_loader.weight_cache.protocol.CacheConfigMismatchError: "
        "WeightCacheKey mismatch on fields: ['tp_size', 'kv_cache_dtype']",
        "tp_size, kv_cache_dtype",
    ),
    (
        "preload_daemon_unavailable",
        E + "WeightCacheUnavailableError: Cannot connect to weight cache daemon at "
        "/tmp/vllm_weight_cache_0/GPU-abc.sock: [Errno 111] Connection refused",
        "brain preload",
    ),
    (
        "preload_unsupported_quant",
        E + "UnsupportedQuantForIPCError: layer model.layers.0.mlp: AWQMarlinLinearMethod does "
        "not support loading from pre-processed weights.",
        "preload.enabled=false",
    ),
    (
        "preload_fallback",
        "(EngineCore pid=9) WARNING 11-29 10:00:09 [ipc_loader.py:252] Weight cache unusable "
        "(Cannot connect to weight cache daemon at /tmp/x.sock: refused); falling back to disk "
        "loading",
        "preload.fallback=false",
    ),
    (
        "gpu_runtime_missing",
        'docker: Error response from daemon: could not select device driver "" with '
        "capabilities: [[gpu]].",
        "NVIDIA Container Toolkit",
    ),
]


def _spec():
    return load_profile("gemma4-e4b-mtp")


@pytest.mark.parametrize(("cause", "log", "remedy_part"), CASES)
def test_each_known_failure_is_recognised_with_evidence_and_remedy(cause, log, remedy_part):
    text = "INFO 11-29 10:00:00 [api_server.py:1] vLLM API server version 0.33.0\n" + log + "\n"
    d = diagnose(text, spec=_spec())
    assert d is not None and d.cause == cause
    assert d.evidence == [log]
    assert remedy_part in d.remedy, d.remedy
    assert is_fatal_line(log) is d.fatal


def test_every_rule_has_a_case():
    assert {r.cause for r in RULES} - {c for c, _, _ in CASES} == {
        "preload_unsupported_platform",
        "unknown_reasoning_parser",
        "unsupported_speculative_method",
    }


def test_kv_numbers_are_parsed_into_details():
    d = diagnose(CASES[0][1])
    assert d.details == {
        "max_model_len": 32768,
        "needed_gib": 6.0,
        "available_gib": 4.5,
        "estimated_max_len": 24576,
    }
    assert "kv_cache_dtype=fp8" in d.remedy


def test_free_memory_suggests_a_utilization_that_fits():
    d = diagnose(CASES[2][1])
    assert d.details["suggested_utilization"] == 0.5


def test_same_missing_path_is_the_model_without_a_spec():
    assert diagnose(CASES[8][1]).cause == "model_not_found"


def test_container_oom_kill_comes_from_state_not_log():
    d = diagnose("INFO loading weights\n", exit_code=137, oom_killed=True, spec=_spec())
    assert d.cause == "container_oom_killed" and "docker.memory" in d.remedy and "32g" in d.remedy
    assert diagnose("", exit_code=137).cause == "killed"
    assert diagnose("INFO all fine\n", exit_code=0) is None


def test_a_real_error_after_a_fallback_warning_wins():
    text = CASES[21][1] + "\n" + CASES[0][1]
    assert diagnose(text).cause == "kv_cache_too_small"


def test_fallback_line_alone_is_a_warning_not_fatal():
    d = diagnose(CASES[21][1])
    assert d.cause == "preload_fallback" and d.fatal is False


def test_shm_remedy_points_at_ipc_host_when_it_is_off():
    spec = apply_overrides(_spec(), ["docker.ipc_host=false"])
    d = diagnose(CASES[4][1], spec=spec)
    assert "docker.ipc_host=true" in d.remedy and "20g" in d.remedy


def test_ordinary_startup_lines_are_not_fatal():
    for line in [
        "(EngineCore pid=1) INFO 11-29 10:00:01 [gpu_worker.py:773] Available KV cache memory: "
        "5.2 GiB",
        "INFO:     Application startup complete.",
        '(APIServer pid=1) INFO 11-29 10:00:00 [parser_manager.py:36] "auto" tool choice has '
        "been enabled.",
    ]:
        assert not is_fatal_line(line)
