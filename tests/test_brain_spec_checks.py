"""Every rule in ``brain.spec_checks`` refuses what it is named for, and only that.

Each check is run on its own: on a valid profile it finds nothing, and on the same profile
with one thing broken it names the field and a fix. The spec is broken with ``model_copy``,
which skips validation, so the check under test is the one that speaks (building the spec
would stop at the first refusal of any rule).
"""

from __future__ import annotations

from typing import Any

import pytest

from brain.profiles import load_profile
from brain.spec import ServerSpec, SpeculativeSpec
from brain.spec_checks import STRUCTURAL_CHECKS, structural_problems

GEMMA, RAY, DSPARK = "gemma4-e4b-mtp", "qwen3-32b-2node-ray", "deepseek-v4-flash-dspark"
PRELOAD = {"preload.enabled": True, "preload.socket_dir": "/tmp/wc"}

# check name -> (profile, what to break, the field the problem names)
BREAKS: dict[str, tuple[str, dict[str, Any], str]] = {
    "gpu_memory_is_a_fraction": (GEMMA, {"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    "gpus_listed_for_every_rank": (GEMMA, {"gpus": []}, "gpus"),
    "max_model_len_positive": (GEMMA, {"max_model_len": 0}, "max_model_len"),
    "batched_tokens_hold_a_whole_prompt": (
        GEMMA,
        {"max_num_batched_tokens": 100, "enable_chunked_prefill": False},
        "max_num_batched_tokens",
    ),
    "batched_tokens_cover_max_num_seqs": (
        GEMMA,
        {"max_num_batched_tokens": 10, "max_num_seqs": 16},
        "max_num_batched_tokens",
    ),
    "load_format_known": (GEMMA, {"load_format": "bogus"}, "load_format"),
    "one_rank_per_gpu_across_nodes": (RAY, {"tensor_parallel_size": 1}, "distributed"),
    "head_gpus_match_gpus_per_node": (RAY, {"gpus": [0]}, "gpus"),
    "head_reachable_from_workers": (
        RAY,
        {"distributed.head_address": "127.0.0.1"},
        "distributed.head_address",
    ),
    "no_weight_cache_across_nodes": (RAY, {"preload.enabled": True}, "preload.enabled"),
    "nodes_share_the_host_network": (RAY, {"docker.network_host": False}, "docker.network_host"),
    "no_adaptive_verification_with_pipeline": (
        RAY,
        {"speculative": SpeculativeSpec(method="ngram", enable_adaptive_verification=True)},
        "speculative.enable_adaptive_verification",
    ),
    "speculative_tokens_positive": (
        GEMMA,
        {"speculative.num_speculative_tokens": 0},
        "speculative.num_speculative_tokens",
    ),
    "adaptive_verification_needs_cuda_graphs": (
        DSPARK,
        {"enforce_eager": True},
        "speculative.enable_adaptive_verification",
    ),
    "something_drafts": (GEMMA, {"speculative.model": None}, "speculative.model"),
    "speculative_extra_repeats_no_field": (
        GEMMA,
        {"speculative.extra": {"method": "mtp"}},
        "speculative.extra.method",
    ),
    "draft_model_is_a_container_path": (
        GEMMA,
        {"speculative.model": "~/marathon/media/draft"},
        "speculative.model",
    ),
    "values_vllm_accepts": (GEMMA, {"dtype": "float7"}, "dtype"),
    "auto_tool_choice_needs_a_parser": (
        GEMMA,
        {"tool_call_parser": None},
        "enable_auto_tool_choice",
    ),
    "tool_call_parser_registered": (GEMMA, {"tool_call_parser": "nosuch"}, "tool_call_parser"),
    "weight_cache_loads_ipc_cache": (GEMMA, {**PRELOAD, "load_format": "pt"}, "load_format"),
    "weight_cache_quantization": (GEMMA, {**PRELOAD, "quantization": "awq"}, "quantization"),
    "weight_cache_kv_cache_dtype": (
        GEMMA,
        {**PRELOAD, "kv_cache_dtype": "bfloat16"},
        "kv_cache_dtype",
    ),
    "weight_cache_socket_dir_shared": (GEMMA, {"preload.enabled": True}, "preload.socket_dir"),
    "files_are_container_paths": (
        GEMMA,
        {"chat_template": "~/marathon/media/t.jinja"},
        "chat_template",
    ),
    "media_path_is_mounted": (
        GEMMA,
        {"allowed_local_media_path": "/data"},
        "allowed_local_media_path",
    ),
    "extra_args_repeat_no_field": (GEMMA, {"extra_args": ["-tp", "2"]}, "extra_args"),
}


def broken(spec: ServerSpec, updates: dict[str, Any]) -> ServerSpec:
    """``spec`` with dotted fields replaced, unvalidated."""
    for path, value in updates.items():
        head, _, rest = path.partition(".")
        if rest:
            value = broken(getattr(spec, head), {rest: value})
        spec = spec.model_copy(update={head: value})
    return spec


def test_every_check_has_a_break():
    assert list(BREAKS) == [check.__name__ for check in STRUCTURAL_CHECKS]


@pytest.mark.parametrize("check", STRUCTURAL_CHECKS, ids=lambda c: c.__name__)
def test_each_check_refuses_what_it_is_named_for(check):
    profile, updates, field = BREAKS[check.__name__]
    spec = load_profile(profile)
    assert check(spec) == []
    problems = check(broken(spec, updates))
    assert [f for f, _m, _h in problems] == [field]
    _field, message, fix = problems[0]
    assert message and fix
    assert problems[0] in structural_problems(broken(spec, updates))
