"""Log text -> Diagnosis, one realistic excerpt per known failure (texts from vLLM 0.33.0)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from brain.diagnose import RULES, diagnose, is_fatal_line
from brain.profiles import apply_overrides, load_profile
from brain.vllm_choices import LOAD_FORMATS
from brain.vllm_refusals import (
    MODEL_CONFIG_ERROR,
    batched_tokens_below_seqs,
    batched_tokens_below_window,
    load_format_refusal,
    max_model_len_refusal,
)

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


# --------------------------------------------------------------------------- real and source texts

FIX = Path(__file__).parent / "fixtures" / "vllm-0.26"


def _log(name: str) -> str:
    return (FIX / "logs" / name).read_text()


# (cause, text, part of the remedy, where the text comes from). Texts from a real vLLM 0.26.0 on
# an H200 are whole logs; the others are vLLM 0.33.0's (or torch's, transformers') format
# strings filled in, with the source location.
SOURCE_CASES = [
    (
        "max_model_len_over_model_limit",
        _log("brain-up-badlen.log"),
        "max_model_len <= 8192",
        "real 0.26 log; vllm/config/model.py:2663 in 0.33",
    ),
    (
        "model_not_found",
        _log("brain-up-nomodel.log"),
        "'/tmp/no/such/model' is not a directory on this machine",
        "real 0.26 log; huggingface_hub utils/_validators.py validate_repo_id",
    ),
    (
        "unrecognized_arguments",
        _log("brain-up-badflag.log"),
        "'--no-such-flag 1'",
        "real 0.26 log; argparse",
    ),
    (
        "invalid_cli_choice",
        "vllm serve: error: argument --dtype: invalid choice: 'float7' (choose from 'auto', "
        "'bfloat16', 'float', 'float16', 'float32', 'half')",
        "dtype to one of auto, bfloat16, float, float16, float32, half",
        "argparse, vllm/engine/arg_utils.py --dtype choices in 0.33",
    ),
    (
        "unknown_architecture",
        E + "ValueError: Model architectures ['FooForCausalLM'] are not supported for now. "
        "Supported architectures: dict_keys(['AfmoeForCausalLM', 'LlamaForCausalLM'])",
        "--model-impl, transformers",
        "vllm/model_executor/models/registry.py:1250 in 0.33",
    ),
    (
        "needs_trust_remote_code",
        A + "ValueError: The repository /models/custom contains custom code which must be "
        "executed to correctly load the model. You can inspect the repository content at "
        "/models/custom .\n" + A + " Please pass the argument `trust_remote_code=True` to allow "
        "custom code to be run.",
        "trust_remote_code=true",
        "transformers dynamic_module_utils.py:743",
    ),
    (
        "nccl_error",
        E + "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
        "c10d/ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with NCCL_DEBUG=INFO for "
        "details), NCCL version 2.27.3",
        "NCCL_DEBUG=INFO",
        "torch ProcessGroupNCCL.cpp",
    ),
    (
        "no_gpu_visible",
        E + "RuntimeError: No CUDA GPUs are available",
        "nvidia-smi lists a GPU",
        "torch/cuda/__init__.py _lazy_init",
    ),
    (
        "driver_too_old",
        E + "RuntimeError: The NVIDIA driver on your system is too old (found version 12020). "
        "Please update your GPU driver by downloading and installing a new version from the URL: "
        "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to "
        "install a PyTorch version that has been compiled with your version of the CUDA driver.",
        "update the NVIDIA driver",
        "torch/cuda/__init__.py _check_driver",
    ),
    (
        "preload_budget_exceeded",
        E + "ValueError: Externally held weights on device cuda:0 (15.2/23.56 GiB) exceed the "
        "desired GPU memory utilization (0.6, 14.14 GiB). Increase GPU memory utilization or "
        "reduce GPU memory used by other processes.",
        "raise gpu_memory_utilization",
        "vllm/v1/worker/utils.py:732 in 0.33",
    ),
    (
        "preload_wrong_gpu",
        E + "vllm.model_executor.model_loader.weight_cache.errors.CacheConfigMismatchError: "
        "Daemon GPU GPU-6f1c != engine GPU GPU-90ab; check the socket path / GPU mapping",
        "the same gpus",
        "vllm/model_executor/model_loader/weight_cache/ipc_loader.py:519 in 0.33",
    ),
    (
        "preload_daemon_failed",
        "ERROR 11-29 10:01:02 [preload.py:394] Weight cache daemon rank(s) exited during startup "
        "(exitcodes=[1]); shutting down.",
        "brain preload again",
        "vllm/entrypoints/cli/preload.py:394 in 0.33",
    ),
    (
        "invalid_kv_cache_dtype",
        A + "  Value error, Invalid kv_cache_dtype: 'fp9'. Valid values are: ['auto', 'float16', "
        "'bfloat16', 'fp8', 'fp8_e4m3', 'fp8_e5m2'] [type=value_error, input_value='fp9', "
        "input_type=str]",
        "kv_cache_dtype to one of auto, float16, bfloat16, fp8",
        "vllm/config/cache.py:473 in 0.33",
    ),
    (
        "invalid_attention_backend",
        A + "ValueError: Unknown attention backend: 'FOO'. Valid options are: FLASH_ATTN, "
        "TRITON_ATTN, FLASHINFER, FLEX_ATTENTION",
        "attention_backend to one of FLASH_ATTN, TRITON_ATTN",
        "vllm/v1/attention/backends/registry.py:29 in 0.33",
    ),
    (
        "invalid_quantization",
        A + "  Value error, Unknown quantization method: bogus. Must be one of ['awq', 'fp8', "
        "'gptq']. [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]",
        "quantization to one of awq, fp8, gptq",
        "vllm/config/model.py:1467 in 0.33",
    ),
    (
        "invalid_speculative_method",
        A + "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
        "SpeculativeConfig\n" + A + "method\n" + A + "  Input should be 'ngram', 'draft_model', "
        "'suffix', 'custom_class', 'eagle', 'eagle3', 'mtp', 'ngram_gpu' or 'dspark' "
        "[type=literal_error, input_value='bogus', input_type=str]",
        "speculative.method to one of ngram, draft_model, suffix",
        "vllm/config/speculative.py:74 (SpeculativeMethod Literal) in 0.33",
    ),
    (
        "invalid_reasoning_parser",
        A + "KeyError: \"Reasoning parser 'nope' not found. Available parsers: deepseek_r1, "
        'qwen3, gemma4"',
        "reasoning_parser to one of deepseek_r1, qwen3, gemma4",
        "vllm/reasoning/abs_reasoning_parsers.py:257 in 0.33",
    ),
]


def _config_refusal(config: str, text: str) -> str:
    """A config's refusal as the API server prints it dying (pydantic wraps the ValueError
    of a config's validator; the real badlen log has the same shape)."""
    return (
        A
        + MODEL_CONFIG_ERROR.format(config)
        + "\n"
        + A
        + f"  Value error, {text} [type=value_error, input_value=ArgsKwargs((), {{}}), "
        "input_type=ArgsKwargs]\n"
        + A
        + "    For further information visit https://errors.pydantic.dev/2.14/v/value_error"
    )


# The engine arguments vLLM refuses, in its words (brain/vllm_refusals.py, which the spec
# checks quote and the sim prints).
SOURCE_CASES += [
    (
        "invalid_max_model_len",
        _config_refusal("ModelConfig", max_model_len_refusal(0)),
        "max_model_len=32768",
        "vllm/config/model.py validate_model_config_after (0.26, 0.33)",
    ),
    (
        "batched_tokens_below_max_num_seqs",
        _config_refusal("SchedulerConfig", batched_tokens_below_seqs(10, 16)),
        "max_num_batched_tokens >= 16, or max_num_seqs <= 10",
        "vllm/config/scheduler.py verify_max_model_len (0.26, 0.33)",
    ),
    (
        "batched_tokens_below_max_model_len",
        _config_refusal("SchedulerConfig", batched_tokens_below_window(100, 4096, False)),
        "max_num_batched_tokens >= 4096",
        "vllm/config/scheduler.py verify_max_model_len (0.26, 0.33)",
    ),
    (
        "mm_item_over_batched_tokens",
        E + "ValueError: Chunked MM input disabled but max_tokens_per_mm_item (280) is larger "
        "than max_num_batched_tokens (10). Please increase max_num_batched_tokens.",
        "max_num_batched_tokens >= 280",
        "vllm/v1/core/encoder_cache_manager.py compute_mm_encoder_budget (0.26, 0.33)",
    ),
    (
        "invalid_load_format",
        E + "ValueError: " + load_format_refusal("bogus", LOAD_FORMATS),
        "unset load_format (auto)",
        "vllm/model_executor/model_loader/__init__.py get_model_loader (0.26, 0.33)",
    ),
    (
        "stopped_while_starting",
        _log("h200-2026-12-01b/kvsmall.log"),
        "timeouts.load_timeout_s",
        "real 0.26 log: the brain's SIGTERM while it started",
    ),
]


def test_a_max_model_len_below_minus_one_is_read_from_pydantics_error():
    # Field(ge=-1) on ModelConfig.max_model_len: pydantic's own error, over three lines.
    text = (
        A
        + MODEL_CONFIG_ERROR.format("ModelConfig")
        + "\n"
        + A
        + "max_model_len\n"
        + A
        + "  Input should be greater than or equal to -1 [type=greater_than_equal, "
        "input_value=-5, input_type=int]"
    )
    d = diagnose(text)
    assert d.cause == "invalid_max_model_len" and d.details == {"max_model_len": -5}


def test_a_refusal_the_server_lived_through_is_not_why_its_engine_died():
    # The same refusal text, logged minutes before an engine death, is not its cause.
    early = "(APIServer pid=1) ERROR 11-29 10:01:03 [serving.py:1] " + load_format_refusal(
        "bogus", LOAD_FORMATS
    )
    late = (
        "(APIServer pid=1) ERROR 11-29 10:09:00 [async_llm.py:704] vllm.v1.engine.exceptions."
        "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root "
        "cause."
    )
    assert diagnose(early).cause == "invalid_load_format"
    assert diagnose(early + "\n" + late).cause == "engine_dead"


@pytest.mark.parametrize(("cause", "text", "remedy_part", "source"), SOURCE_CASES)
def test_real_and_source_texts_are_diagnosed(cause, text, remedy_part, source):
    d = diagnose(text, spec=_spec())
    assert d is not None and d.cause == cause, (source, d)
    assert remedy_part in d.remedy, d.remedy
    assert d.evidence and all(ln.strip() in text for ln in d.evidence)
    if cause != "invalid_speculative_method":  # pydantic's error spans lines: found at exit
        assert any(is_fatal_line(ln) for ln in text.splitlines())


def test_every_rule_has_a_case_in_one_table():
    tested = {c for c, _, _ in CASES} | {c for c, *_ in SOURCE_CASES}
    assert {r.cause for r in RULES} - tested == {
        "preload_unsupported_platform",
        "unknown_reasoning_parser",
        "unsupported_speculative_method",
    }


def test_derived_max_model_len_is_read_from_the_real_message():
    d = diagnose(_log("brain-up-badlen.log"))
    assert d.details == {"max_model_len": 65536, "model_limit": 8192}
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in d.remedy


def test_a_missing_local_draft_path_is_the_draft_model():
    spec = _spec()
    spec = spec.model_copy(
        update={"speculative": spec.speculative.model_copy(update={"model": "/tmp/no/draft"})}
    )
    text = (
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
        "'namespace/repo_name': '/tmp/no/draft'. Use `repo_type` argument if needed."
    )
    assert diagnose(text, spec=spec).cause == "draft_model_not_found"


def test_unknown_engine_failure_shows_the_root_cause_above_the_wrapper():
    # The real 0.99 failure, with its ValueError replaced by an error no rule knows (the
    # ModuleNotFoundError seen on the H200): the evidence must carry it, not only the
    # "See root cause above" wrapper.
    real = _log("fail-gpu-memory-0.99.log")
    text = re.sub(
        r"ValueError: Free memory on device[^\n]*",
        "ModuleNotFoundError: No module named 'flashinfer'",
        real,
    )
    assert "Free memory" not in text
    d = diagnose(text)
    assert d.cause == "engine_dead"
    assert d.evidence[0] == "ModuleNotFoundError: No module named 'flashinfer'"
    assert "ModuleNotFoundError" in d.summary and d.details["root_cause"] == d.evidence[0]
    assert any("Engine core initialization failed" in e for e in d.evidence)


def test_real_free_memory_failure_is_diagnosed_before_the_engine_wrapper():
    d = diagnose(_log("fail-gpu-memory-0.99.log"))
    assert d.cause == "gpu_memory_in_use"
    assert d.details["free_gib"] == 68.11 and d.details["total_gib"] == 139.8


def test_preload_free_memory_remedy_counts_the_daemons_weights():
    # vllm/v1/worker/utils.py:741 in 0.33: the budget is util x total less the held weights.
    text = (
        E + "ValueError: Free memory on device cuda:0 (12.18/23.56 GiB) on startup is less than "
        "the engine's budget after excluding external process's weights (0.9, 12.2 GiB). "
        "Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )
    d = diagnose(text)
    assert d.cause == "gpu_memory_in_use"
    assert d.details["externally_held_gib"] == 9.0
    assert d.details["suggested_utilization"] == 0.88
    assert "gpu_memory_utilization=0.88" in d.remedy


def test_real_unknown_tool_parser_lists_the_versions_parsers():
    d = diagnose(_log("fail-unknown-tool-parser.log"))
    assert d.cause == "unknown_tool_parser" and d.details["parser"] == "nosuch"
    assert "hermes" in d.details["choices"] and "beam" not in d.details["choices"]


def test_real_kv_cache_too_small():
    d = diagnose(_log("brain-up-kvsmall.log"))
    assert d.cause == "kv_cache_too_small" and d.details["estimated_max_len"] == 871808


def test_the_long_max_model_len_warning_is_not_a_failure():
    # With VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vLLM logs the same sentence as a WARNING and goes
    # on; taking it for the fatal error killed a start that was still going.
    text = _log("h200-2026-12-01b/kvsmall.log")
    warning = next(ln for ln in text.splitlines() if "User-specified max_model_len" in ln)
    assert "WARNING" in warning
    assert not is_fatal_line(warning)
    d = diagnose(text)
    assert d is None or d.cause != "max_model_len_over_model_limit"
