"""The remedies of the diagnosis table (``brain.diagnose.RULES``): from a matched log line and
the spec, the sentence that says what to change and the field and value it names.

Kept apart from the table so the table reads as the catalogue of known failures. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from brain import vllm_choices
from brain.spec import ServerSpec
from brain.spec_flags import owned_flags

Remedy = Callable[[re.Match[str], ServerSpec | None], tuple[str, dict[str, Any]]]


def fixed_remedy(text: str) -> Remedy:
    return lambda m, s: (text, {})


def log_number(s: str) -> float:
    return float(s.replace(",", ""))


# --------------------------------------------------------------------------- remedies


def kv_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    want, need, have = int(log_number(m["len"])), log_number(m["need"]), log_number(m["have"])
    est = int(log_number(m["est"])) if m["est"] else None
    details: dict[str, Any] = {
        "max_model_len": want,
        "needed_gib": need,
        "available_gib": have,
        "estimated_max_len": est,
    }
    util = spec.gpu_memory_utilization if spec else None
    parts = []
    if est:
        fit = est // 1024 * 1024 if est >= 2048 else est
        parts.append(f"set max_model_len <= {est} (e.g. max_model_len={fit})")
    else:
        parts.append("lower max_model_len")
    parts.append(
        "or raise gpu_memory_utilization" + (f" above {util:g}" if util is not None else "")
    )
    if spec is None or spec.kv_cache_dtype in (None, "auto"):
        parts.append("or set kv_cache_dtype=fp8 (halves KV memory)")
    return (
        f"{want} tokens need {need:g} GiB of KV cache but only {have:g} GiB is left: "
        + ", ".join(parts)
        + ".",
        details,
    )


def free_memory_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    free, total, util, req = (
        log_number(m["free"]),
        log_number(m["total"]),
        log_number(m["util"]),
        log_number(m["req"]),
    )
    # The preload variant asks for the engine's budget: util x total less the weights the
    # daemon already holds on this GPU. Those stay held whatever this server asks for, so the
    # utilization that fits is (free + held) / total, not free / total.
    held = max(0.0, util * total - req) if m["budget"] else 0.0
    suggest = math.floor((free + held) / total * 100) / 100 - 0.01
    details = {"free_gib": free, "total_gib": total, "requested_utilization": util}
    if held:
        details["externally_held_gib"] = round(held, 2)
        details["suggested_utilization"] = round(suggest, 2)
        return (
            f"{free:g} of {total:g} GiB free, and this server's budget after the "
            f"{held:.2f} GiB of weights the preload daemon holds is {req:g} GiB: set "
            f"gpu_memory_utilization={suggest:.2f} (the budget includes the daemon's weights) "
            "or free the GPU (nvidia-smi shows who holds it).",
            details,
        )
    details["suggested_utilization"] = round(suggest, 2)
    if suggest <= 0.05:
        return (
            f"only {free:g} of {total:g} GiB is free: another process holds the GPU. Stop it "
            "(nvidia-smi shows who), or wait for a previous server to release its memory.",
            details,
        )
    return (
        f"{free:g} of {total:g} GiB free but gpu_memory_utilization={util:g} asks for "
        f"{util * total:.2f} GiB: set gpu_memory_utilization={suggest:.2f} or free the GPU "
        "(nvidia-smi shows who holds it).",
        details,
    )


def shm_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    if spec is not None and spec.backend == "docker" and not spec.docker.ipc_host:
        return (
            f"the container's /dev/shm ({spec.docker.shm_size}) is too small: set "
            "docker.ipc_host=true (recommended) or docker.shm_size=32g.",
            {},
        )
    return ("run the container with --ipc=host (docker.ipc_host=true) or a larger shm_size.", {})


def model_path(m: re.Match[str]) -> str | None:
    g = m.groupdict()
    return g.get("path") or g.get("path2") or g.get("path3")


def is_draft(m: re.Match[str], spec: ServerSpec | None) -> bool:
    path = model_path(m)
    return bool(
        spec is not None
        and spec.speculative is not None
        and spec.speculative.model
        and path is not None
        and path.strip("'\"") == spec.speculative.model
    )


def model_remedy(field_name: str) -> Remedy:
    def remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
        path = (model_path(m) or "").strip("'\"")
        text = (
            f"check {field_name} ({path!r}): an HF id must exist and be spelled exactly; "
            "a path must be the container-side path of a mounted directory containing "
            "config.json."
        )
        if path.startswith(("/", "./", "../", "~")):
            text = (
                f"{field_name} {path!r} is not a directory on this machine, so vLLM took it "
                "for a Hugging Face repo id, which it cannot be: fix the path (a directory "
                "containing config.json; for the docker backend, the container-side path of a "
                "mounted directory) or use the model's HF id."
            )
        if "snapshots/" in path:
            text += (
                " The path is inside an HF snapshots/ directory, whose files are symlinks into "
                "../../blobs: mount the whole HF cache (docker.hf_cache) and use the HF id."
            )
        return text, {"path": path}

    return remedy


def mismatch_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    fields = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", m["fields"])
    return (
        f"the weight-cache daemon holds weights for other engine args (differs in: "
        f"{', '.join(fields)}). Restart the daemon from this spec (same image tag, model, "
        "tensor_parallel_size, dtype, quantization, kv_cache_dtype), or disable preload.",
        {"fields": fields},
    )


def parser_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    name = m["name"]
    choices = sorted(x for x in re.split(r"[\s,{}]+", m["choices"] or "") if x)
    return (
        f"{name!r} is not registered in this image: set tool_call_parser to one of the listed "
        "parsers, or load a plugin with extra_args [--tool-parser-plugin, <path>].",
        {"parser": name, "choices": choices},
    )


def port_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    where = f" {spec.port}" if spec else ""
    return (
        f"another process (maybe an older server) holds port{where}: stop it, or set "
        "port=<free port>.",
        {},
    )


def derived_len_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    want = int(m["want"])
    nums = re.findall(r"=(\d+(?:\.\d+)?)", m["derived"])
    limit = int(float(nums[0])) if nums else None
    details: dict[str, Any] = {"max_model_len": want, "model_limit": limit}
    head = f"set max_model_len <= {limit}" if limit else "lower max_model_len"
    return (
        f"the model's config allows {limit if limit else 'fewer'} positions, not {want}: {head}"
        " (or leave it unset: vLLM then takes the model's own limit). Only if the model's RoPE "
        "scaling really supports more, set env.VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
        details,
    )


def bad_argument_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    args = m["args"].strip()
    flags = [a for a in args.split() if a.startswith("-")]
    in_extra = bool(spec and any(a.split("=", 1)[0] in spec.extra_args for a in flags))
    where = "remove it from extra_args" if in_extra or spec is None else "remove it"
    return (
        f"this vLLM does not know {args!r}: {where}, or check the spelling against "
        "`vllm serve --help` for the installed version (flags differ between releases; "
        "brain doctor shows the version).",
        {"arguments": args, "flags": flags},
    )


def choice_list(text: str | None) -> list[str]:
    return [x for x in re.findall(r"'([^']*)'", text or "")] or [
        x for x in re.split(r"[\s,\[\]{}]+", text or "") if x
    ]


def invalid_choice_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    flag, value = m["flag"], m["value"]
    choices = choice_list(m["choices"])
    field_name = owned_flags(ServerSpec).get(flag, flag.lstrip("-").replace("-", "_"))
    return (
        f"{field_name}={value} is not a value this vLLM accepts: set {field_name} to one of "
        f"{', '.join(choices)}.",
        {"field": field_name, "value": value, "choices": choices},
    )


def config_value_remedy(field_name: str) -> Remedy:
    def remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
        value = m["value"]
        choices = choice_list(m.groupdict().get("choices"))
        listed = f" to one of {', '.join(choices)}" if choices else " to a value this vLLM lists"
        return (
            f"{field_name}={value} is refused when vLLM builds its engine config: set "
            f"{field_name}{listed}, or unset it to let vLLM choose.",
            {"field": field_name, "value": value, "choices": choices},
        )

    return remedy


def architecture_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    archs = re.findall(r"'([^']*)'", m["archs"])
    return (
        f"this vLLM has no implementation of {', '.join(archs) or m['archs']}: use a vLLM "
        "release that supports the model (a newer image tag, or upgrade the installed vllm), or "
        "add extra_args [--model-impl, transformers] to run it through the Transformers backend.",
        {"architectures": archs},
    )


def preload_budget_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    return (
        "the weights the preload daemon holds already use more than gpu_memory_utilization "
        "of the GPU: raise gpu_memory_utilization so it covers the daemon's weights and the "
        "KV cache (the budget counts both), or run the daemon and the server on a GPU with "
        "room for both.",
        {},
    )


def max_model_len_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    value = m["value"] or m["value2"]
    return (
        f"max_model_len={value} is not a context length: set it to the tokens one request may "
        "hold (e.g. max_model_len=32768), or auto (or unset it) for the model's own limit.",
        {"max_model_len": int(value) if value and value.lstrip("-").isdigit() else value},
    )


def seqs_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    tokens, seqs = int(m["tokens"]), int(m["seqs"])
    return (
        f"a step's token budget ({tokens}) must give each of the max_num_seqs={seqs} sequences "
        f"a token: set max_num_batched_tokens >= {seqs}, or max_num_seqs <= {tokens} (or unset "
        "max_num_seqs: vLLM then fits it to max_num_batched_tokens).",
        {"max_num_batched_tokens": tokens, "max_num_seqs": seqs},
    )


def window_budget_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    tokens, window = int(m["tokens"]), int(m["len"])
    return (
        f"with chunked prefill off a step must hold a whole prompt: set max_num_batched_tokens "
        f">= {window}, lower max_model_len to {tokens}, or set enable_chunked_prefill=true.",
        {"max_num_batched_tokens": tokens, "max_model_len": window},
    )


def mm_item_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    item, tokens = int(m["item"]), int(m["tokens"])
    return (
        f"this model takes an image (or other media item) whole, {item} tokens, in one step: "
        f"set max_num_batched_tokens >= {item} (or unset it), or turn the modality off with "
        "limit_mm_per_prompt (0 items).",
        {"max_tokens_per_mm_item": item, "max_num_batched_tokens": tokens},
    )


def load_format_remedy(m: re.Match[str], spec: ServerSpec | None) -> tuple[str, dict[str, Any]]:
    value = m["value"]
    known = sorted(vllm_choices.LOAD_FORMATS)
    return (
        f"load_format={value} is not a format this vLLM loads: unset load_format (auto) or set "
        f"it to one of {', '.join(known)} (vLLM {vllm_choices.VLLM_VERSION}'s).",
        {"field": "load_format", "value": value, "choices": known},
    )


# --------------------------------------------------------------------------- the table
