"""ServerSpec's fields carry their vLLM flags: the argv and the owned-flag list both come from them.

The ``Flag`` on a field is the one place a flag is named. These tests keep the two views that
are derived from it honest: every flagged field reaches the ``vllm serve`` argv when it is set
(and the ``vllm preload`` argv unless it is a serve-only flag), every spelling vLLM accepts for
it is refused in ``extra_args``, and the owned list does not silently lose a spelling.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from brain.command import vllm_preload_argv, vllm_serve_argv
from brain.spec import ServerSpec
from brain.spec_flags import field_value, flag_fields, owned_flags

# A value other than the default for every flagged field (dotted path -> value); the spec
# built from it is valid, so each flag shows up in the argv.
SET_ALL: dict[str, object] = {
    "model": "Qwen/Qwen3-32B",
    "served_model_name": "qwen",
    "host": "10.0.0.1",
    "port": 9000,
    "api_key": "k",
    "tensor_parallel_size": 2,
    "distributed.pipeline_parallel_size": 2,
    "distributed.backend": "ray",
    "max_model_len": 4096,
    "gpu_memory_utilization": 0.8,
    "max_num_seqs": 4,
    "max_num_batched_tokens": 8192,
    "max_num_queued_reqs": 16,
    "stream_interval": 8,
    "dtype": "bfloat16",
    "quantization": "fp8",
    "kv_cache_dtype": "fp8",
    "enable_chunked_prefill": False,
    "enable_prefix_caching": True,
    "enforce_eager": True,
    "attention_backend": "FLASH_ATTN",
    "trust_remote_code": True,
    "generation_config": "vllm",
    "load_format": "ipc_cache",
    "preload": {"socket_dir": "/tmp/wc"},
    "speculative": {"method": "ngram", "num_speculative_tokens": 3},
    "reasoning_parser": "qwen3",
    "limit_mm_per_prompt": {"image": 2},
    "allowed_local_media_path": "/media",
    "enable_auto_tool_choice": True,
    "tool_call_parser": "hermes",
    "chat_template": "/srv/template.jinja",
}


def _spec_setting_every_flag() -> ServerSpec:
    data: dict = {"name": "all", "backend": "process"}
    for path, value in SET_ALL.items():
        *sections, leaf = path.split(".")
        target = data
        for section in sections:
            target = target.setdefault(section, {})
        target[leaf] = value
    data["distributed"].update({"nodes": 2, "gpus_per_node": 2, "head_address": "10.0.0.1"})
    return ServerSpec.model_validate(data)


def test_the_test_spec_sets_every_flagged_field():
    """A new flagged field must be added to SET_ALL, so the next test covers it."""
    assert [f.path for f in flag_fields(ServerSpec)] == list(SET_ALL)


@pytest.mark.parametrize("field", flag_fields(ServerSpec), ids=lambda f: f.path)
def test_every_flagged_field_reaches_the_argv_when_set(field):
    spec = _spec_setting_every_flag()
    serve, preload = vllm_serve_argv(spec), vllm_preload_argv(spec)
    value = field_value(spec, field.path)
    token = field.negative if value is False else field.flag.name
    if field.flag.serve_positional:
        assert serve[0] == value
    else:
        assert token in serve
    if field.flag.serve_only:
        assert token not in preload
    else:
        assert token in preload


def test_a_false_tristate_is_the_negative_flag_and_unset_leaves_vllm_its_default():
    base = {"name": "t", "backend": "process", "model": "m"}
    argv = vllm_serve_argv(ServerSpec(**base, enable_chunked_prefill=False))
    assert "--no-enable-chunked-prefill" in argv
    argv = vllm_serve_argv(ServerSpec(**base))
    assert not any("chunked-prefill" in a or "enforce-eager" in a for a in argv)


def test_every_flag_the_argv_gives_is_owned():
    spec = _spec_setting_every_flag()
    flags = {a for a in vllm_serve_argv(spec) if a.startswith("-")}
    assert flags <= set(owned_flags(ServerSpec))


# The list that was written by hand next to the argv builder, plus the spellings vLLM 0.33 also
# accepts and the hand list missed: -q (engine/arg_utils.py registers "--quantization", "-q")
# and the --no- form of every boolean (BooleanOptionalAction).
EXPECTED_OWNED = {
    "--model": "model",
    "--served-model-name": "served_model_name",
    "--host": "host",
    "--port": "port",
    "--api-key": "api_key",
    "--tensor-parallel-size": "tensor_parallel_size",
    "-tp": "tensor_parallel_size",
    "--pipeline-parallel-size": "distributed.pipeline_parallel_size",
    "-pp": "distributed.pipeline_parallel_size",
    "--distributed-executor-backend": "distributed.backend",
    "--max-model-len": "max_model_len",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--max-num-queued-reqs": "max_num_queued_reqs",
    "--stream-interval": "stream_interval",
    "--dtype": "dtype",
    "--quantization": "quantization",
    "-q": "quantization",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--enable-chunked-prefill": "enable_chunked_prefill",
    "--no-enable-chunked-prefill": "enable_chunked_prefill",
    "--enable-prefix-caching": "enable_prefix_caching",
    "--no-enable-prefix-caching": "enable_prefix_caching",
    "--enforce-eager": "enforce_eager",
    "--no-enforce-eager": "enforce_eager",
    "--attention-backend": "attention_backend",
    "--trust-remote-code": "trust_remote_code",
    "--no-trust-remote-code": "trust_remote_code",
    "--generation-config": "generation_config",
    "--load-format": "load_format",
    "--model-loader-extra-config": "preload",
    "--speculative-config": "speculative",
    "--reasoning-parser": "reasoning_parser",
    "--limit-mm-per-prompt": "limit_mm_per_prompt",
    "--allowed-local-media-path": "allowed_local_media_path",
    "--enable-auto-tool-choice": "enable_auto_tool_choice",
    "--no-enable-auto-tool-choice": "enable_auto_tool_choice",
    "--tool-call-parser": "tool_call_parser",
    "--chat-template": "chat_template",
}


def test_the_owned_flags_are_derived_from_the_fields_and_lose_no_spelling():
    assert owned_flags(ServerSpec) == EXPECTED_OWNED


@pytest.mark.parametrize("spelling", sorted(EXPECTED_OWNED))
def test_an_owned_flag_in_extra_args_is_refused_naming_the_field(spelling):
    field = EXPECTED_OWNED[spelling]
    for extra in ([spelling, "1"], [f"{spelling}=1"]):
        with pytest.raises(ValidationError) as ei:
            ServerSpec(name="t", backend="process", model="m", extra_args=extra)
        assert f"extra_args: {spelling} is a spec field" in str(ei.value)
        assert f"Fix: set {field} instead" in str(ei.value)


def test_a_flag_no_field_owns_passes_through_extra_args():
    spec = ServerSpec(name="t", backend="process", model="m", extra_args=["--block-size", "256"])
    assert vllm_serve_argv(spec)[-2:] == ["--block-size", "256"]


def test_the_serve_only_extra_args_list_names_no_field_flag():
    """Flags with a field are left out of the daemon by their Flag, not by a second list."""
    from brain.command import _SERVE_ONLY_FLAGS

    assert set(_SERVE_ONLY_FLAGS).isdisjoint(owned_flags(ServerSpec))
