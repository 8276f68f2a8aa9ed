"""The rules a ServerSpec must keep, each a named check, and the warnings worth a line.

A spec that vLLM would reject, or would silently mishandle, is refused when it is built, with
the field, the reason and the fix, before a GPU is touched. Each rule is one function
``(spec) -> [(field, message, fix), ...]`` named for what it refuses; ``STRUCTURAL_CHECKS``
lists them in the order their problems are reported and ``structural_problems`` runs them
all, so one refusal names every problem at once. ``launch_problems`` are the ones that only
matter when launching (``ensure_api_key`` fixes them). No I/O except asking whether a host
path exists, to tell "not mounted" from "no such file".
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from brain import vllm_choices
from brain.errors import SpecError, SpecErrors
from brain.spec_flags import owned_flags
from brain.spec_paths import container_to_host_path, expand_host, host_to_container_path
from brain.vllm_refusals import (
    batched_tokens_below_seqs,
    batched_tokens_below_window,
    load_format_refusal,
    max_model_len_refusal,
)

if TYPE_CHECKING:
    from brain.spec import ServerSpec

Problem = tuple[str, str, str]
"""(field, message, fix)."""

# Quantizations whose vLLM 0.33 methods set ``supports_pre_processed_weights`` (fp8 linear and
# MoE, ModelOpt NVFP4 MoE, MXFP4 MoE); anything else raises UnsupportedQuantForIPCError.
IPC_CACHE_QUANTIZATIONS: frozenset[str | None] = frozenset({None, "fp8", "modelopt_fp4", "mxfp4"})

# Speculative methods that need a separate draft checkpoint in ``speculative.model``.
DRAFT_MODEL_METHODS = frozenset({"eagle", "eagle3", "dflash", "dspark", "draft_model", "medusa"})

_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host`` (such a server needs no API key)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# --------------------------------------------------------------------------- GPUs


def gpu_memory_is_a_fraction(spec: ServerSpec) -> list[Problem]:
    if 0 < spec.gpu_memory_utilization <= 1:
        return []
    return [
        (
            "gpu_memory_utilization",
            f"{spec.gpu_memory_utilization} is outside (0, 1]; it is a fraction of the "
            "GPU's total memory.",
            "use e.g. 0.9",
        )
    ]


def gpus_listed_for_every_rank(spec: ServerSpec) -> list[Problem]:
    if not isinstance(spec.gpus, list):
        return []
    if not spec.gpus:
        return [("gpus", "the GPU list is empty.", 'list device ids, e.g. [0], or "all"')]
    tp = spec.tensor_parallel_size
    if spec.distributed is None and tp > len(spec.gpus):
        return [
            (
                "tensor_parallel_size",
                f"{tp} ranks need {tp} GPUs but gpus lists {len(spec.gpus)}.",
                f"list {tp} device ids in gpus or lower tensor_parallel_size",
            )
        ]
    return []


# --------------------------------------------------------------------------- context, batch


def _vllm_says(text: str, when: str = "") -> str:
    return f"vLLM refuses it{when}: {text!r}."


def max_model_len_positive(spec: ServerSpec) -> list[Problem]:
    value = spec.max_model_len
    if not isinstance(value, int) or (refusal := max_model_len_refusal(value)) is None:
        return []
    return [
        (
            "max_model_len",
            f"{value} is not a context length; {_vllm_says(refusal)}",
            "set max_model_len to the tokens one request may hold (e.g. 32768), or auto "
            "(or unset it) for the model's own limit",
        )
    ]


def batched_tokens_hold_a_whole_prompt(spec: ServerSpec) -> list[Problem]:
    """With chunked prefill off, one step must hold a whole prompt of max_model_len."""
    tokens, window = spec.max_num_batched_tokens, spec.max_model_len
    if tokens is None or not isinstance(window, int):
        return []
    refusal = batched_tokens_below_window(tokens, window, spec.enable_chunked_prefill)
    if refusal is None:
        return []
    return [
        (
            "max_num_batched_tokens",
            f"{tokens} is below max_model_len {window} with chunked prefill off; "
            f"{_vllm_says(refusal)}",
            f"set max_num_batched_tokens >= {window}, lower max_model_len, or "
            "enable_chunked_prefill=true",
        )
    ]


def batched_tokens_cover_max_num_seqs(spec: ServerSpec) -> list[Problem]:
    """Every running sequence needs a token of a step's budget."""
    tokens, seqs = spec.max_num_batched_tokens, spec.max_num_seqs
    if tokens is None or (refusal := batched_tokens_below_seqs(tokens, seqs)) is None:
        return []
    return [
        (
            "max_num_batched_tokens",
            f"{tokens} is below max_num_seqs {seqs}; {_vllm_says(refusal)}",
            f"set max_num_batched_tokens >= {seqs} or max_num_seqs <= {tokens} (or unset "
            "max_num_seqs: vLLM then fits it to max_num_batched_tokens)",
        )
    ]


def load_format_known(spec: ServerSpec) -> list[Problem]:
    """A format no vLLM release the brain knows loads (the parser takes any string; the
    engine dies loading the model)."""
    known = vllm_choices.LOAD_FORMATS | vllm_choices.LOAD_FORMATS_026
    if (
        spec.load_format is None
        or (refusal := load_format_refusal(spec.load_format, known)) is None
    ):
        return []
    return [
        (
            "load_format",
            f"{spec.load_format!r} is not a load format; "
            f"{_vllm_says(refusal, ' as its engine loads the model')} "
            f"Known: {', '.join(sorted(vllm_choices.LOAD_FORMATS))}.",
            "unset load_format (auto: safetensors, else pt), or pick a known one",
        )
    ]


# --------------------------------------------------------------------------- multi-node


def one_rank_per_gpu_across_nodes(spec: ServerSpec) -> list[Problem]:
    d = spec.distributed
    if d is None:
        return []
    tp, pp = spec.tensor_parallel_size, d.pipeline_parallel_size
    if tp * pp == d.world_size:
        return []
    return [
        (
            "distributed",
            f"tensor_parallel_size {tp} x pipeline_parallel_size {pp} = {tp * pp} ranks, "
            f"but {d.nodes} nodes x {d.gpus_per_node} GPUs = {d.world_size} GPUs; vLLM "
            "runs exactly one rank per GPU.",
            f"the usual split is tensor_parallel_size={d.gpus_per_node} (GPUs per node) and "
            f"distributed.pipeline_parallel_size={d.nodes} (nodes)",
        )
    ]


def head_gpus_match_gpus_per_node(spec: ServerSpec) -> list[Problem]:
    d = spec.distributed
    if d is None or not isinstance(spec.gpus, list) or not spec.gpus:
        return []
    if len(spec.gpus) == d.gpus_per_node:
        return []
    return [
        (
            "gpus",
            f"gpus lists {len(spec.gpus)} device(s) for the head node, but "
            f"distributed.gpus_per_node is {d.gpus_per_node}.",
            f'list {d.gpus_per_node} device ids, or gpus: "all"',
        )
    ]


def head_reachable_from_workers(spec: ServerSpec) -> list[Problem]:
    d = spec.distributed
    if d is None:
        return []
    if is_loopback(d.head_address) or d.head_address in ("0.0.0.0", "::"):
        return [
            (
                "distributed.head_address",
                f"{d.head_address!r} cannot be reached from the other nodes.",
                "set it to the head node's IP on the private network the nodes share",
            )
        ]
    if not _HOSTNAME_RE.match(d.head_address):
        return [
            (
                "distributed.head_address",
                f"{d.head_address!r} is not an IP address or host name.",
                "e.g. 10.0.0.1",
            )
        ]
    return []


def no_weight_cache_across_nodes(spec: ServerSpec) -> list[Problem]:
    if spec.distributed is None or not spec.preload.enabled:
        return []
    return [
        (
            "preload.enabled",
            "the weight-cache daemon is per machine and the brain starts it only here; a "
            "multi-node server cannot load from it.",
            "set preload.enabled=false",
        )
    ]


def nodes_share_the_host_network(spec: ServerSpec) -> list[Problem]:
    if spec.distributed is None or spec.backend != "docker" or spec.docker.network_host:
        return []
    return [
        (
            "docker.network_host",
            "Ray and NCCL connect the nodes directly over the host's network (vLLM's "
            "run_cluster.sh runs its containers with --network host).",
            "set docker.network_host=true",
        )
    ]


def no_adaptive_verification_with_pipeline(spec: ServerSpec) -> list[Problem]:
    d, sp = spec.distributed, spec.speculative
    if d is None or d.pipeline_parallel_size <= 1 or sp is None:
        return []
    if not sp.enable_adaptive_verification:
        return []
    return [
        (
            "speculative.enable_adaptive_verification",
            "adaptive verification is not supported with pipeline parallelism.",
            "set it to false, or use tensor parallelism only (pipeline_parallel_size=1)",
        )
    ]


# --------------------------------------------------------------------------- speculative


def speculative_tokens_positive(spec: ServerSpec) -> list[Problem]:
    sp = spec.speculative
    if sp is None or sp.num_speculative_tokens > 0:
        return []
    return [
        (
            "speculative.num_speculative_tokens",
            f"{sp.num_speculative_tokens} must be > 0 (vLLM: 'Expected "
            "num_speculative_tokens to be greater than zero').",
            "use 1-4, or remove the speculative section to turn speculation off",
        )
    ]


def adaptive_verification_needs_cuda_graphs(spec: ServerSpec) -> list[Problem]:
    sp = spec.speculative
    if sp is None or not (sp.enable_adaptive_verification and spec.enforce_eager):
        return []
    return [
        (
            "speculative.enable_adaptive_verification",
            "adaptive verification requires full CUDA graphs, which enforce_eager disables.",
            "set enforce_eager=false or enable_adaptive_verification=false",
        )
    ]


def _is_gemma4(model: str) -> bool:
    m = model.lower()
    return "gemma-4" in m or "gemma4" in m


def _gemma_assistant(model: str) -> str:
    return model.rstrip("/") + "-assistant" if model.endswith("-it") else "<model>-it-assistant"


def something_drafts(spec: ServerSpec) -> list[Problem]:
    """vLLM must be able to tell what drafts: a method that needs no checkpoint, or one."""
    sp = spec.speculative
    if sp is None or sp.model:
        return []
    method = (sp.method or "").lower()
    if method in ("", "mtp", "gemma4_mtp") and _is_gemma4(spec.model):
        return [
            (
                "speculative.model",
                "Gemma 4 has no MTP layers in its checkpoint; {method: mtp} without a draft "
                "model fails ('Unsupported speculative method').",
                f"set speculative.model={_gemma_assistant(spec.model)}",
            )
        ]
    if not method:
        return [
            (
                "speculative",
                "neither method nor model is set, so vLLM cannot tell what drafts.",
                "set speculative.model (a draft checkpoint) or speculative.method "
                "(e.g. mtp, ngram)",
            )
        ]
    if method in DRAFT_MODEL_METHODS:
        return [
            (
                "speculative.model",
                f"method {method!r} needs a draft checkpoint.",
                "set speculative.model to the draft's HF id",
            )
        ]
    return []


def speculative_extra_repeats_no_field(spec: ServerSpec) -> list[Problem]:
    sp = spec.speculative
    if sp is None:
        return []
    bad = sorted(set(sp.extra) & {*sp.config_keys(), "tensor_parallel_size"})
    return [
        (
            f"speculative.extra.{key}",
            "not allowed here.",
            "use extra.draft_tensor_parallel_size (1 or the target's TP)"
            if key == "tensor_parallel_size"
            else f"set speculative.{key} instead",
        )
        for key in bad
    ]


def draft_model_is_a_container_path(spec: ServerSpec) -> list[Problem]:
    sp = spec.speculative
    return [] if sp is None else _container_path_problem(spec, "speculative.model", sp.model)


# --------------------------------------------------------------------------- values, parsers


def values_vllm_accepts(spec: ServerSpec) -> list[Problem]:
    """Values vLLM would refuse at parse or engine-config time (``brain/vllm_choices.py``)."""
    c = vllm_choices
    plugin = any(a.startswith("--reasoning-parser-plugin") for a in spec.extra_args)
    checks = [
        c.choice_problem("dtype", spec.dtype, c.DTYPES),
        c.choice_problem("kv_cache_dtype", spec.kv_cache_dtype, c.KV_CACHE_DTYPES),
        c.choice_problem(
            "attention_backend", spec.attention_backend, c.ATTENTION_BACKENDS, upper=True
        ),
        c.choice_problem("quantization", spec.quantization, c.QUANTIZATION_METHODS),
        None
        if plugin
        else c.choice_problem(
            "reasoning_parser",
            spec.reasoning_parser,
            c.REASONING_PARSERS,
            plugin="--reasoning-parser-plugin",
        ),
    ]
    if spec.speculative is not None and spec.speculative.method:
        checks.append(
            c.choice_problem("speculative.method", spec.speculative.method, c.SPECULATIVE_METHODS)
        )
    return [problem for problem in checks if problem is not None]


def auto_tool_choice_needs_a_parser(spec: ServerSpec) -> list[Problem]:
    if not spec.enable_auto_tool_choice or spec.tool_call_parser:
        return []
    return [
        (
            "enable_auto_tool_choice",
            "auto tool choice needs a tool-call parser to extract calls from the text.",
            "set tool_call_parser (e.g. hermes, gemma4, qwen3_coder)",
        )
    ]


def tool_call_parser_registered(spec: ServerSpec) -> list[Problem]:
    known = vllm_choices.TOOL_CALL_PARSERS
    if not spec.tool_call_parser or spec.tool_call_parser in known:
        return []
    if any(a.startswith("--tool-parser-plugin") for a in spec.extra_args):
        return []
    return [
        (
            "tool_call_parser",
            f"{spec.tool_call_parser!r} is not a parser vLLM v{vllm_choices.VLLM_VERSION} "
            f"registers (known: {', '.join(sorted(known))}).",
            "pick a known name, or load a plugin parser with extra_args: "
            "[--tool-parser-plugin, /path/in/container.py]",
        )
    ]


# --------------------------------------------------------------------------- weight cache


def weight_cache_loads_ipc_cache(spec: ServerSpec) -> list[Problem]:
    if not spec.uses_ipc_cache or spec.load_format in (None, "ipc_cache"):
        return []
    return [
        (
            "load_format",
            f"preload is enabled but load_format is {spec.load_format!r}.",
            "remove load_format (preload implies ipc_cache) or disable preload",
        )
    ]


def weight_cache_quantization(spec: ServerSpec) -> list[Problem]:
    if not spec.uses_ipc_cache or spec.quantization in IPC_CACHE_QUANTIZATIONS:
        return []
    return [
        (
            "quantization",
            f"{spec.quantization!r} weights cannot be shared through the weight cache "
            "(UnsupportedQuantForIPCError).",
            "use an unquantized, fp8, modelopt_fp4 or mxfp4 checkpoint, or disable preload",
        )
    ]


def weight_cache_kv_cache_dtype(spec: ServerSpec) -> list[Problem]:
    kv = spec.kv_cache_dtype
    if not spec.uses_ipc_cache or kv in (None, "auto") or kv.startswith("fp8"):
        return []
    return [
        (
            "kv_cache_dtype",
            f"{kv!r} is not verified with the weight cache (only auto and fp8*).",
            "use kv_cache_dtype auto or fp8, or disable preload",
        )
    ]


def weight_cache_socket_dir_shared(spec: ServerSpec) -> list[Problem]:
    if not (spec.uses_ipc_cache and spec.backend == "docker" and spec.preload.enabled):
        return []
    if spec.preload.socket_dir:
        return []
    return [
        (
            "preload.socket_dir",
            "the daemon and server containers must share the socket directory.",
            "set preload.socket_dir to a host directory (mounted at the same path)",
        )
    ]


# --------------------------------------------------------------------------- container paths


def _container_path_problem(spec: ServerSpec, field: str, value: str | None) -> list[Problem]:
    """A path vLLM reads inside the container must be a container path, not a host one."""
    if value is None or spec.backend != "docker" or not value.startswith(("/", "~")):
        return []
    if value.startswith("/") and container_to_host_path(spec, value) is not None:
        return []  # already a path on a container mount
    mapped = host_to_container_path(spec, value)
    if mapped is not None:
        return [
            (
                field,
                f"{value!r} is a host path; vLLM runs in the container and sees it as {mapped!r}.",
                f"set {field}={mapped}",
            )
        ]
    if os.path.exists(expand_host(value)):
        return [
            (
                field,
                f"{value!r} exists on the host but no volume mounts it into the container.",
                f"add docker.volumes: [{{host: {value}, container: /models/...}}] and use the "
                "container path",
            )
        ]
    return []


def files_are_container_paths(spec: ServerSpec) -> list[Problem]:
    if spec.backend != "docker":
        return []
    return [
        *_container_path_problem(spec, "model", spec.model),
        *_container_path_problem(spec, "chat_template", spec.chat_template),
        *_container_path_problem(spec, "generation_config", spec.generation_config),
    ]


def media_path_is_mounted(spec: ServerSpec) -> list[Problem]:
    media = spec.allowed_local_media_path
    if spec.backend != "docker" or media is None:
        return []
    if container_to_host_path(spec, media) is not None:
        return []
    mapped = host_to_container_path(spec, media)
    hint = (
        f"set allowed_local_media_path={mapped} (the container side)"
        if mapped
        else "mount the media directory (docker.volumes) and use its container path"
    )
    return [
        (
            "allowed_local_media_path",
            f"{media!r} is not inside any container mount, so vLLM cannot read it.",
            hint,
        )
    ]


# --------------------------------------------------------------------------- extra_args


def extra_args_repeat_no_field(spec: ServerSpec) -> list[Problem]:
    owned = owned_flags(type(spec))
    problems = []
    for arg in spec.extra_args:
        flag = arg.split("=", 1)[0]
        field = owned.get(flag)
        if field is not None:
            problems.append(
                (
                    "extra_args",
                    f"{flag} is a spec field; passing it in extra_args would make two truths.",
                    f"set {field} instead",
                )
            )
    return problems


STRUCTURAL_CHECKS: tuple[Callable[[ServerSpec], list[Problem]], ...] = (
    gpu_memory_is_a_fraction,
    gpus_listed_for_every_rank,
    max_model_len_positive,
    batched_tokens_hold_a_whole_prompt,
    batched_tokens_cover_max_num_seqs,
    load_format_known,
    one_rank_per_gpu_across_nodes,
    head_gpus_match_gpus_per_node,
    head_reachable_from_workers,
    no_weight_cache_across_nodes,
    nodes_share_the_host_network,
    no_adaptive_verification_with_pipeline,
    speculative_tokens_positive,
    adaptive_verification_needs_cuda_graphs,
    something_drafts,
    speculative_extra_repeats_no_field,
    draft_model_is_a_container_path,
    values_vllm_accepts,
    auto_tool_choice_needs_a_parser,
    tool_call_parser_registered,
    weight_cache_loads_ipc_cache,
    weight_cache_quantization,
    weight_cache_kv_cache_dtype,
    weight_cache_socket_dir_shared,
    files_are_container_paths,
    media_path_is_mounted,
    extra_args_repeat_no_field,
)
"""Every rule a built spec must keep, in the order its problems are reported."""


def structural_problems(spec: ServerSpec) -> list[Problem]:
    """Combinations vLLM rejects or silently mishandles, as (field, message, fix)."""
    return [problem for check in STRUCTURAL_CHECKS for problem in check(spec)]


# --------------------------------------------------------------------------- launch, warnings


def launch_problems(spec: ServerSpec) -> list[Problem]:
    """Problems that only matter when actually launching (``ensure_api_key`` fixes the first)."""
    p: list[Problem] = []
    if spec.backend != "sim" and not is_loopback(spec.host) and not spec.api_key:
        p.append(
            (
                "api_key",
                f"host {spec.host} is reachable from other machines and the server has no API key.",
                "call ensure_api_key (brain up does) or set api_key, or bind 127.0.0.1",
            )
        )
    return p


def check_launchable(spec: ServerSpec) -> None:
    """Raise SpecErrors listing every launch-time problem."""
    problems = launch_problems(spec)
    if problems:
        raise SpecErrors([SpecError(m, field=f, hint=h) for f, m, h in problems])


def spec_warnings(spec: ServerSpec) -> list[str]:
    """Legal but probably unintended settings, worth one line in ``brain up`` output."""
    w: list[str] = []
    if spec.tool_call_parser and not spec.enable_auto_tool_choice:
        w.append(
            'tool_call_parser is set without enable_auto_tool_choice: tool_choice "auto" '
            "requests will get HTTP 400."
        )
    if spec.uses_ipc_cache and spec.preload.fallback:
        w.append(
            "preload.fallback is true: a daemon mismatch silently falls back to slow disk loading."
        )
    if spec.backend == "docker" and spec.preload.enabled and not spec.docker.pid_host:
        w.append(
            "preload under Docker: CUDA IPC between containers probably needs docker.pid_host "
            "(unverified); set it if the server reports 'invalid device context'."
        )
    d = spec.distributed
    if d is not None and spec.tensor_parallel_size > d.gpus_per_node:
        w.append(
            f"tensor parallelism spans machines (TP {spec.tensor_parallel_size} > "
            f"{d.gpus_per_node} GPUs per node): every layer waits on the network. vLLM's docs "
            "advise TP = GPUs per node and pipeline_parallel_size = nodes, unless the nodes "
            "share InfiniBand."
        )
    if spec.backend == "docker" and not spec.docker.ipc_host and spec.tensor_parallel_size > 1:
        w.append("tensor parallelism without --ipc=host: make sure docker.shm_size is large.")
    return w
