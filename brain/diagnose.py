"""Log text (and container state) -> Diagnosis(cause, evidence, remedy).

Table-driven: one rule per known failure, matched against vLLM's real messages (checked in
vLLM 0.33.0's source and in logs of a real vLLM 0.26.0, tests/fixtures/vllm-0.26), most
specific first. A remedy names the spec field to change and, when
the spec and the log give numbers, the value to change it to. Pure: no I/O.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass

from brain.errors import Diagnosis
from brain.remedies import (
    Remedy,
    architecture_remedy,
    bad_argument_remedy,
    config_value_remedy,
    derived_len_remedy,
    fixed_remedy,
    free_memory_remedy,
    invalid_choice_remedy,
    is_draft,
    kv_remedy,
    load_format_remedy,
    max_model_len_remedy,
    mismatch_remedy,
    mm_item_remedy,
    model_remedy,
    parser_remedy,
    port_remedy,
    preload_budget_remedy,
    seqs_remedy,
    shm_remedy,
    window_budget_remedy,
)
from brain.spec import ServerSpec
from brain.vllm_log import (
    LoggedException,
    LogLine,
    exceptions,
    has_process_prefixes,
    is_api_server,
    read_lines,
)


@dataclass(frozen=True)
class Rule:
    cause: str
    pattern: re.Pattern[str]
    summary: str
    remedy: Remedy
    fatal: bool = True
    applies: Callable[[re.Match[str], ServerSpec | None], bool] = lambda m, s: True


_R = re.compile

RULES: list[Rule] = [
    Rule(
        "preload_mismatch",
        _R(r"WeightCacheKey mismatch on fields:\s*(?P<fields>\[[^\]]*\]|\S.*)"),
        "the weight-cache daemon's weights do not match this server",
        mismatch_remedy,
    ),
    Rule(
        "preload_daemon_unavailable",
        _R(r"WeightCacheUnavailableError|Cannot connect to weight cache daemon[^\n]*"),
        "no weight-cache daemon is reachable",
        fixed_remedy(
            "start the daemon first (brain preload) with the same spec and socket_dir, and wait "
            "for its 'Weight cache daemon READY' line; or disable preload."
        ),
    ),
    Rule(
        "preload_unsupported_quant",
        _R(r"UnsupportedQuantForIPCError[^\n]*|does not support loading from pre-processed"),
        "this model's quantization cannot be shared through the weight cache",
        fixed_remedy("disable preload for this model (preload.enabled=false, load_format unset)."),
    ),
    Rule(
        "preload_unsupported_platform",
        _R(r"UnsupportedPlatformForIPCError[^\n]*|does not support CUDA IPC weight sharing"),
        "this platform cannot share weights over CUDA IPC",
        fixed_remedy("disable preload (only CUDA and ROCm support it)."),
    ),
    Rule(
        "preload_budget_exceeded",
        _R(r"Externally held weights on device[^\n]*"),
        "the preload daemon's weights leave nothing of this server's memory budget",
        preload_budget_remedy,
    ),
    Rule(
        "preload_wrong_gpu",
        _R(r"Daemon GPU (?P<daemon>\S+) != engine GPU (?P<engine>[^\s,;.]+)[^\n]*"),
        "the weight-cache daemon holds its weights on another GPU than this server",
        lambda m, s: (
            f"the daemon is on GPU {m['daemon']}, the server on {m['engine']}: start both with "
            "the same gpus (the same CUDA_VISIBLE_DEVICES), or start a daemon for this GPU.",
            {"daemon_gpu": m["daemon"], "engine_gpu": m["engine"]},
        ),
    ),
    Rule(
        "preload_daemon_failed",
        _R(r"Weight cache daemon rank\(s\) exited during startup[^\n]*"),
        "the weight-cache daemon died while loading the weights",
        fixed_remedy(
            "read the daemon's log above this line (brain logs <name>-preload) for the root "
            "cause: a missing model, too little GPU memory for the weights, or a quantization "
            "the cache cannot hold; fix it and run brain preload again."
        ),
    ),
    Rule(
        "kv_cache_too_small",
        _R(
            r"max seq len \((?P<len>[\d,]+)\),?\s*\(?(?P<need>[\d.,]+) GiB KV\s+cache is needed, "
            r"which is larger than the available KV cache\s+memory \((?P<have>[\d.,]+) GiB\)\."
            r"(?:\s*Based on the available memory,\s*the estimated maximum model length is "
            r"(?P<est>[\d,]+))?"
        ),
        "the KV cache does not fit max_model_len",
        kv_remedy,
    ),
    Rule(
        "no_kv_cache_memory",
        _R(r"No available memory for the cache blocks"),
        "nothing is left for the KV cache after weights and activations",
        lambda m, s: (
            "raise gpu_memory_utilization"
            + (f" above {s.gpu_memory_utilization:g}" if s else "")
            + ", lower max_num_seqs / max_num_batched_tokens, or use a smaller or quantized "
            "model.",
            {},
        ),
    ),
    Rule(
        "gpu_memory_in_use",
        _R(
            r"Free memory on device (?P<dev>\S+) \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on "
            r"startup is less than (?:desired GPU memory utilization|(?P<budget>the engine's "
            r"budget)[^(]*)"
            r"\s*\((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)"
        ),
        "less GPU memory is free than gpu_memory_utilization asks for",
        free_memory_remedy,
    ),
    Rule(
        "cuda_oom",
        _R(r"(?:torch\.(?:cuda\.)?OutOfMemoryError|CUDA out of memory)[^\n]*"),
        "CUDA ran out of memory",
        lambda m, s: (
            "lower gpu_memory_utilization"
            + (f" (now {s.gpu_memory_utilization:g})" if s else "")
            + " if other processes share the GPU, else lower max_num_seqs / "
            "max_num_batched_tokens / max_model_len; enforce_eager=true skips CUDA graph "
            "capture, which often is where it runs out.",
            {},
        ),
    ),
    Rule(
        "shm_exhausted",
        _R(
            r"/dev/shm[^\n]*No space left on device[^\n]*|No space left on device[^\n]*/dev/shm"
            r"|^.*\bBus error\b.*$",
            re.M,
        ),
        "shared memory (/dev/shm) ran out",
        shm_remedy,
    ),
    Rule(
        "gpu_runtime_missing",
        _R(r'could not select device driver "[^"]*" with capabilities: \[\[gpu\]\]'),
        "Docker cannot give the container a GPU",
        fixed_remedy(
            "install the NVIDIA Container Toolkit and restart dockerd; on a machine without an "
            "NVIDIA GPU use backend=sim (or docker.request_gpus=false for a fake image)."
        ),
    ),
    Rule(
        "draft_model_not_found",
        _R(
            r"Invalid repository ID or local directory specified: (?P<path>'[^']*')"
            r"|HFValidationError: Repo id must be in the form [^\n]*?: (?P<path2>'[^']*')"
        ),
        "the draft model was not found",
        model_remedy("speculative.model"),
        applies=is_draft,
    ),
    Rule(
        "max_model_len_over_model_limit",
        # Not the WARNING vLLM logs instead when VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lets it by.
        _R(
            r"^(?![^\n]*\bWARNING\b)[^\n]*?User-specified max_model_len \((?P<want>\d+)\) is "
            r"greater than the derived max_model_len \((?P<derived>[^)]*)\)[^\n]*",
            re.M,
        ),
        "max_model_len is above what the model's config allows",
        derived_len_remedy,
    ),
    Rule(
        "unknown_architecture",
        _R(r"Model architectures (?P<archs>\[[^\]]*\]) are not supported for now[^\n]*"),
        "this vLLM does not support the model's architecture",
        architecture_remedy,
    ),
    Rule(
        "needs_trust_remote_code",
        _R(
            r"contains custom code which must be executed to correctly load the model[^\n]*"
            r"|Please pass the argument `trust_remote_code=True`[^\n]*"
        ),
        "the model ships its own code, which vLLM runs only when told to",
        lambda m, s: (
            "set trust_remote_code=true if you trust the model's repository (its Python code "
            "runs in the server), or use a model implemented natively in vLLM.",
            {},
        ),
        applies=lambda m, s: s is None or not s.trust_remote_code,
    ),
    Rule(
        "invalid_kv_cache_dtype",
        _R(
            r"Invalid kv_cache_dtype: '(?P<value>[^']*)'\.?"
            r"(?: Valid values are: (?P<choices>\[[^\]]*\]))?"
        ),
        "kv_cache_dtype is not one this vLLM knows",
        config_value_remedy("kv_cache_dtype"),
    ),
    Rule(
        "invalid_attention_backend",
        _R(
            r"Unknown attention backend: '(?P<value>[^']*)'\.?"
            r"(?: Valid options are: (?P<choices>[^\n]*))?"
        ),
        "attention_backend is not one this vLLM knows",
        config_value_remedy("attention_backend"),
    ),
    Rule(
        "invalid_quantization",
        _R(
            r"Unknown quantization method: (?P<value>\S+?)\.? Must be one of "
            r"(?P<choices>\[[^\]]*\])"
        ),
        "quantization is not a method this vLLM knows",
        config_value_remedy("quantization"),
    ),
    Rule(
        "invalid_speculative_method",
        _R(
            r"for SpeculativeConfig\s*\n[^\n]*\bmethod\s*\n[^\n]*?Input should be "
            r"(?P<choices>[^\[\n]*)"
            r"\[type=literal_error, input_value='(?P<value>[^']*)'"
        ),
        "speculative.method is not a method this vLLM knows",
        config_value_remedy("speculative.method"),
    ),
    Rule(
        "invalid_reasoning_parser",
        _R(
            r"Reasoning parser '(?P<value>[^']*)' not found\.?"
            r"(?: Available parsers: (?P<choices>[^\n]*))?"
        ),
        "the reasoning parser name is unknown to this vLLM",
        config_value_remedy("reasoning_parser"),
    ),
    Rule(
        "invalid_max_model_len",
        # ModelConfig (vllm/config/model.py): below 1 after auto (-1), or below -1 (ge=-1).
        _R(
            r"max_model_len must be a positive integer, got \w+: (?P<value>[^.\s]+)[^\n]*"
            r"|for ModelConfig\s*\n[^\n]*\bmax_model_len\s*\n[^\n]*?Input should be greater "
            r"than or equal to -1[^\n]*?input_value=(?P<value2>[^,\]\s]+)"
        ),
        "max_model_len is not a context length vLLM accepts",
        max_model_len_remedy,
    ),
    Rule(
        "batched_tokens_below_max_model_len",
        # SchedulerConfig.verify_max_model_len (vllm/config/scheduler.py), chunked prefill off.
        _R(
            r"max_num_batched_tokens \((?P<tokens>\d+)\) is smaller than max_model_len "
            r"\((?P<len>\d+)\)[^\n]*"
        ),
        "max_num_batched_tokens cannot hold a whole prompt with chunked prefill off",
        window_budget_remedy,
    ),
    Rule(
        "batched_tokens_below_max_num_seqs",
        # SchedulerConfig.verify_max_model_len (vllm/config/scheduler.py).
        _R(
            r"max_num_batched_tokens \((?P<tokens>\d+)\) must be greater than or equal to "
            r"max_num_seqs \((?P<seqs>\d+)\)[^\n]*"
        ),
        "max_num_batched_tokens is below max_num_seqs",
        seqs_remedy,
    ),
    Rule(
        "mm_item_over_batched_tokens",
        # compute_mm_encoder_budget (vllm/v1/core/encoder_cache_manager.py): Gemma 4 and
        # other prefix-LM multimodal models take a media item whole.
        _R(
            r"max_tokens_per_mm_item \((?P<item>\d+)\) is larger than max_num_batched_tokens"
            r" \((?P<tokens>\d+)\)[^\n]*"
        ),
        "max_num_batched_tokens is smaller than one media item of this model",
        mm_item_remedy,
    ),
    Rule(
        "invalid_load_format",
        # get_model_loader (vllm/model_executor/model_loader/__init__.py), in the engine.
        _R(r"Load format `(?P<value>[^`]*)` is not supported[^\n]*"),
        "load_format is not a format this vLLM loads",
        load_format_remedy,
    ),
    Rule(
        "invalid_cli_choice",
        _R(
            r"argument (?P<flag>-[\w-]+)(?:/[\w-]+)*: invalid choice: '(?P<value>[^']*)' "
            r"\(choose from (?P<choices>[^)]*)\)"
        ),
        "a flag's value is not one vLLM's parser accepts",
        invalid_choice_remedy,
    ),
    Rule(
        "unrecognized_arguments",
        _R(r"error: unrecognized arguments: (?P<args>[^\n]*)"),
        "vLLM does not know a flag it was given",
        bad_argument_remedy,
    ),
    Rule(
        "no_gpu_visible",
        _R(
            r"No CUDA GPUs are available"
            # vLLM 0.26 with CUDA_VISIBLE_DEVICES naming no GPU (empty, say): its NVML lookup
            r"|device_control_id_to_physical_device_id[\s\S]{0,800}?NVMLError_NotFound[^\n]*"
        ),
        "the server sees no GPU",
        lambda m, s: (
            "check that nvidia-smi lists a GPU and that gpus"
            + (f" ({s.gpus})" if s else "")
            + " names GPUs that exist (CUDA_VISIBLE_DEVICES); for the docker backend install "
            "the NVIDIA Container Toolkit and keep docker.request_gpus=true.",
            {},
        ),
    ),
    Rule(
        "driver_too_old",
        _R(
            r"The NVIDIA driver on your system is too old[^\n]*"
            r"|CUDA driver version is insufficient for CUDA runtime version[^\n]*"
        ),
        "the NVIDIA driver is older than the CUDA this vLLM was built for",
        fixed_remedy(
            "update the NVIDIA driver (nvidia-smi shows its version and the CUDA it supports), "
            "or use a vLLM build for an older CUDA (another image tag, or a vllm wheel built for "
            "the CUDA your driver supports)."
        ),
    ),
    Rule(
        "nccl_error",
        _R(
            r"NCCL error in: [^\n]*|DistBackendError: NCCL error[^\n]*"
            r"|ncclUnhandledCudaError[^\n]*|ncclSystemError[^\n]*|ncclInternalError[^\n]*"
        ),
        "NCCL (the GPUs' communication library) failed",
        lambda m, s: (
            "set env.NCCL_DEBUG=INFO and start again to see which transport failed; common "
            "fixes: docker.ipc_host=true (NCCL needs shared memory between ranks), "
            "env.NCCL_P2P_DISABLE=1 when GPUs cannot reach each other directly, and "
            "tensor_parallel_size no larger than the GPUs visible"
            + (f" (now {s.tensor_parallel_size})" if s else "")
            + ".",
            {},
        ),
    ),
    Rule(
        "model_gated",
        _R(r"GatedRepoError[^\n]*|Access to model (?P<path>\S+) is restricted[^\n]*"),
        "the model is gated on Hugging Face",
        fixed_remedy(
            "accept the license on huggingface.co, then export HF_TOKEN before brain up "
            "(docker.pass_env includes HF_TOKEN)."
        ),
    ),
    Rule(
        "model_not_found",
        _R(
            r"Invalid repository ID or local directory specified: (?P<path>'[^']*')"
            r"|RepositoryNotFoundError[^\n]*"
            r"|(?P<path2>\S+) does not appear to have a file named config\.json"
            r"|HFValidationError: Repo id must be in the form [^\n]*?: (?P<path3>'[^']*')"
        ),
        "the model was not found",
        model_remedy("model"),
    ),
    Rule(
        "image_missing",
        _R(
            r"No such image: (?P<image>\S+)|ImageNotFound[^\n]*|pull access denied for "
            r"(?P<image2>[^,\s]+)|manifest for (?P<image3>\S+) not found"
        ),
        "the Docker image is not available",
        lambda m, s: (
            f"docker pull {s.image_ref if s else '<image>'} (or fix image/tag in the spec).",
            {},
        ),
    ),
    Rule(
        "port_in_use",
        _R(r"\[Errno 98\][^\n]*|address already in use[^\n]*|port is already allocated"),
        "the port is already in use",
        port_remedy,
    ),
    Rule(
        "unknown_tool_parser",
        _R(r"invalid tool call parser: (?P<name>\S+)(?: \(chose from (?P<choices>\{[^}]*\}))?"),
        "the tool-call parser name is unknown to this vLLM",
        parser_remedy,
    ),
    Rule(
        "unknown_reasoning_parser",
        _R(r"invalid reasoning parser: (?P<name>\S+)"),
        "the reasoning parser name is unknown to this vLLM",
        lambda m, s: (f"set reasoning_parser to a registered name (not {m['name']!r}).", {}),
    ),
    Rule(
        "auto_tool_choice_disabled",
        _R(r'\\?"auto\\?" tool choice requires[^\n]*'),
        'tool_choice "auto" needs server flags that are not set',
        fixed_remedy(
            "set enable_auto_tool_choice=true and tool_call_parser=<parser for the model>."
        ),
    ),
    Rule(
        "unsupported_speculative_method",
        _R(r"Unsupported speculative method: '(?P<method>[^']*)'"),
        "vLLM does not know how to speculate with this config",
        lambda m, s: (
            "for Gemma 4 set speculative.model to the -assistant checkpoint; otherwise check "
            "speculative.method and speculative.model.",
            {"method": m["method"]},
        ),
    ),
    Rule(
        "engine_dead",
        _R(r"EngineCore encountered an issue[^\n]*|Engine core initialization failed[^\n]*"),
        "the engine process died",
        fixed_remedy(
            "read the traceback above the evidence line for the root cause; if it is not "
            "recognised here, try enforce_eager=true and a smaller max_model_len to narrow it."
        ),
    ),
    Rule(
        "stopped_while_starting",
        # The API server's SIGTERM handler until uvicorn runs (vllm/entrypoints/openai/
        # api_server.py in 0.26, launchers/api_server/entry.py in 0.33): the server was told
        # to stop; it reported no failure of its own. Last: a failure before it is the cause.
        _R(r"^(?:\([^()\n]* pid=\d+\) ?)?KeyboardInterrupt: terminated$", re.M),
        "the server was stopped (SIGTERM) before it was ready; it reported no failure",
        fixed_remedy(
            "nothing in the server failed: a SIGTERM stopped it while it started (brain down, "
            "docker stop, a supervisor, or a wait that gave up: raise timeouts.load_timeout_s "
            "if loading takes longer). Start it again."
        ),
    ),
    Rule(
        "preload_fallback",
        _R(
            r"Weight cache unusable \((?P<why>.*)\); falling back to disk loading"
            r"|Weight cache IPC loading failed; falling back to disk loading"
        ),
        "the weight cache was not used; weights are loading from disk (slow start)",
        fixed_remedy(
            "set preload.fallback=false to make this an error, and restart the daemon from "
            "the server's spec."
        ),
        fatal=False,
    ),
]


# --------------------------------------------------------------------------- an engine's death

ENGINE_DEATH_WINDOW_S = 60.0
"""How long before its death an engine's exception can be what killed it. The engine logs its
exception and dies, and the API server reports the death, within seconds; an exception from
minutes before was survived (a request's error, say)."""

# What the API server says when its engine is gone (vllm/v1/engine/async_llm.py, utils.py).
_ENGINE_WRAPPERS = ("Engine core initialization failed", "EngineCore encountered an issue")
# The API server's watch of the engine process (vllm/v1/engine/core_client.py,
# monitor_engine_cores), and an engine start that ended by a signal (utils.py: exit codes).
_ENGINE_EXITED = re.compile(
    r"engine core exited unexpectedly|Failed core proc\(s\): \{[^}]*: -\d+", re.IGNORECASE
)
_SUMMARY_CHARS = 400


def _line_at(lines: list[LogLine], offset: int) -> LogLine:
    index = bisect.bisect_right([line.offset for line in lines], offset) - 1
    return lines[max(0, index)]


def _is_wrapper(exc: LoggedException) -> bool:
    return exc.name.endswith("EngineDeadError") or any(w in exc.text for w in _ENGINE_WRAPPERS)


def engine_exception(lines: list[LogLine], death: LogLine) -> LoggedException | None:
    """The exception the engine died of: the last one an engine process (any but the API
    server) printed before ``death`` (the API server's "engine died" line), within
    ENGINE_DEATH_WINDOW_S of it. In a log that names no process, the last exception that is
    not the wrapper, within the window. None when the engine printed none."""
    named = has_process_prefixes(lines)
    for exc in reversed(exceptions(lines[: death.index])):
        if _is_wrapper(exc):
            continue
        if named and (exc.process is None or is_api_server(exc.process)):
            continue
        when, died = exc.line.stamp, death.stamp
        if when is not None and died is not None and died - when > ENGINE_DEATH_WINDOW_S:
            return None  # older ones are older still
        return exc
    return None


def root_cause(text: str, before: int | None = None) -> str | None:
    """What the engine died of, quoted whole (``ModuleNotFoundError: No module named 'x'``,
    or a pydantic error with its lines), for the engine death reported at offset ``before``
    (default: the end of the log); None when the engine printed no exception."""
    lines = read_lines(text)
    if not lines:
        return None
    found = engine_exception(lines, _line_at(lines, len(text) if before is None else before))
    return found.text if found is not None else None


def _short(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= _SUMMARY_CHARS else one[: _SUMMARY_CHARS - 1] + "…"


def _engine_death(log_text: str, m: re.Match[str], diag: Diagnosis) -> Diagnosis:
    """The engine_dead rule's match, told with what the engine died of, or as a death the
    engine did not log (killed, or a crash in native code) when the API server saw it exit."""
    lines = read_lines(log_text)
    death = _line_at(lines, m.start())
    cause = engine_exception(lines, death)
    if cause is not None:
        who = f" ({cause.writer})" if cause.writer else ""
        return Diagnosis(
            diag.cause,
            f"the engine process{who} died: {_short(cause.text)}",
            [*cause.lines, *diag.evidence],
            diag.remedy,
            diag.fatal,
            {**diag.details, "root_cause": cause.text, "process": cause.writer},
        )
    exited = [ln for ln in lines[: death.index + 1] if _ENGINE_EXITED.search(ln.body)]
    if not exited:
        return diag
    at = exited[-1].header.split("[", 1)[0].split(" ", 1)[-1].strip()
    return Diagnosis(
        "engine_killed",
        "the engine process died without logging an error: it was killed (SIGKILL, the "
        "kernel's OOM killer) or crashed in native code",
        [exited[-1].body.strip(), *diag.evidence],
        "nothing in vLLM's log explains it: look in the kernel log around "
        + (f"{at} " if at else "that time ")
        + "(dmesg -T or journalctl -k: 'Killed process', 'Out of memory', 'segfault'). If host "
        "memory ran out, lower max_num_seqs or limit_mm_per_prompt, or give the container more "
        "(docker.memory); if a person or a script killed it, start it again.",
        diag.fatal,
        {**diag.details, "root_cause": None},
    )


def _evidence(text: str, m: re.Match[str]) -> list[str]:
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.end())
    end = len(text) if end == -1 else end
    return [ln for ln in text[start:end].splitlines() if ln.strip()]


def diagnose(
    log_text: str,
    *,
    exit_code: int | None = None,
    oom_killed: bool = False,
    spec: ServerSpec | None = None,
) -> Diagnosis | None:
    """The most specific known failure in ``log_text``, or None if nothing is recognised.

    ``oom_killed`` / ``exit_code`` come from the container state (``docker inspect``), not the
    log: a kernel OOM kill leaves no line in vLLM's output.
    """
    if oom_killed:
        limit = spec.docker.memory if spec else None
        return Diagnosis(
            "container_oom_killed",
            "the kernel killed the container for exceeding its memory limit",
            [f"OOMKilled=true, exit code {exit_code if exit_code is not None else 137}"],
            "raise docker.memory and docker.memory_swap"
            + (f" (now {limit})" if limit else "")
            + ", or lower max_num_seqs / limit_mm_per_prompt (host RAM use grows with both).",
        )
    lines = read_lines(log_text)
    deaths = [ln for ln in lines if _ENGINE_DEAD.pattern.search(ln.body)]
    for rule in RULES:
        for m in rule.pattern.finditer(log_text):
            evidence = _evidence(log_text, m)
            if rule.fatal and any(_FALLBACK in ln for ln in evidence):
                continue  # the same error, logged as a warning vLLM recovered from
            if not rule.applies(m, spec):
                continue
            if rule is not _ENGINE_DEAD and _survived(_line_at(lines, m.start()), deaths):
                continue  # a request's error, say, minutes before the engine died
            remedy, details = rule.remedy(m, spec)
            found = Diagnosis(rule.cause, rule.summary, evidence, remedy, rule.fatal, details)
            return _engine_death(log_text, m, found) if rule.cause == "engine_dead" else found
    if exit_code == 137:
        return Diagnosis(
            "killed",
            "the server was killed (SIGKILL) without a fatal log line",
            ["exit code 137"],
            "if the host ran out of memory, raise docker.memory or free RAM; if a stop timed "
            "out, raise timeouts.stop_timeout_s.",
        )
    return None


_FALLBACK = "falling back to disk loading"
_ENGINE_DEAD = next(r for r in RULES if r.cause == "engine_dead")


def _survived(line: LogLine, deaths: list[LogLine]) -> bool:
    """Whether the server lived on for longer than ENGINE_DEATH_WINDOW_S after ``line``
    before its engine died: then what the line says is not what killed it."""
    death = next((d for d in deaths if d.index > line.index), None)
    if death is None or line.stamp is None or death.stamp is None:
        return False
    return death.stamp - line.stamp > ENGINE_DEATH_WINDOW_S


_FATAL_RULES = [r for r in RULES if r.fatal]


def is_fatal_line(line: str) -> bool:
    """True if this single log line means startup has failed (for readiness log-following).

    A recovered-from warning ("... falling back to disk loading") is not fatal.
    """
    if _FALLBACK in line:
        return False
    return any(r.pattern.search(line) for r in _FATAL_RULES)
