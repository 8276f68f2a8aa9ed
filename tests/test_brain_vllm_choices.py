"""``--set`` values vLLM 0.33 refuses are refused before launch, naming the field and the fix
(the lists are vLLM's own: ``brain/vllm_choices.py``, compared with an installed vLLM by
``tests/conformance``'s optional test)."""

from __future__ import annotations

import pytest

from brain import vllm_choices
from brain.errors import SpecError
from brain.profiles import apply_overrides, load_profile
from brain.spec import ServerSpec

GEMMA = "gemma4-e4b-mtp"


def gemma(*overrides: str) -> ServerSpec:
    return apply_overrides(load_profile(GEMMA), list(overrides))


@pytest.mark.parametrize(
    ("override", "field", "vllm_text"),
    [
        ("dtype=float7", "dtype", "argument --dtype: invalid choice: 'float7'"),
        ("kv_cache_dtype=fp9", "kv_cache_dtype", "Invalid kv_cache_dtype: 'fp9'"),
        ("attention_backend=FOO", "attention_backend", "Unknown attention backend: 'FOO'"),
        ("quantization=bogus", "quantization", "Unknown quantization method: bogus"),
        ("speculative.method=bogus", "speculative.method", "literal_error"),
        ("reasoning_parser=nope", "reasoning_parser", "Reasoning parser 'nope' not found"),
    ],
)
def test_values_vllm_refuses_are_refused_before_launch(override, field, vllm_text):
    """Each of these starts and then dies in vLLM with ``vllm_text`` (the conformance
    findings, mismatch 5); the brain says so first, with the known names."""
    with pytest.raises(SpecError) as caught:
        gemma(override)
    text = str(caught.value)
    assert field in text and "vLLM 0.33.0 accepts" in text and "pick a known name" in text


@pytest.mark.parametrize(
    "override",
    [
        "dtype=bfloat16",
        "kv_cache_dtype=fp8_e4m3",
        "attention_backend=flash_attn",  # vLLM upper-cases the name
        "quantization=fp8",
        "speculative.method=ngram",
        "reasoning_parser=gemma4",
    ],
)
def test_values_vllm_accepts_pass(override):
    gemma(override)


def test_a_plugin_reasoning_parser_is_let_through():
    spec = gemma("reasoning_parser=mine", "extra_args=[--reasoning-parser-plugin, /opt/r.py]")
    assert spec.reasoning_parser == "mine"


def test_the_lists_are_one_vllm_version_and_the_tool_parsers_are_shared():
    assert vllm_choices.VLLM_VERSION == "0.33.0"
    assert {"auto", "bfloat16", "float16", "float32", "half", "float"} == vllm_choices.DTYPES
    assert "mtp" in vllm_choices.SPECULATIVE_METHODS
    assert "fp8" in vllm_choices.KV_CACHE_DTYPES and "FLASH_ATTN" in vllm_choices.ATTENTION_BACKENDS
