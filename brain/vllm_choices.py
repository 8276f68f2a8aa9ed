"""The values vLLM 0.33.0 accepts for the ``--set`` fields it checks, in one place, with their
source, so the brain refuses before launch what vLLM would refuse at parse or engine-config time.

Taken from the installed vLLM 0.33.0 package (the lite recipe of the reference ``env.md``):

* ``dtype``: ``ModelDType`` in ``vllm/config/model.py`` (the parser's ``--dtype`` choices);
* ``kv_cache_dtype``: ``CacheDType`` in ``vllm/config/cache.py`` ("Invalid kv_cache_dtype");
* ``attention_backend``: ``AttentionBackendEnum`` in ``vllm/v1/attention/backends/registry.py``
  (matched upper-cased, "Unknown attention backend");
* ``quantization``: ``QUANTIZATION_METHODS`` in ``vllm/model_executor/layers/quantization/
  __init__.py`` ("Unknown quantization method"; a plugin may register more);
* ``speculative.method``: ``SpeculativeMethod`` in ``vllm/config/speculative.py`` (a Literal:
  pydantic's ``literal_error``), deprecated per-model MTP names included;
* ``reasoning_parser``: ``ReasoningParserManager.list_registered()`` (``vllm/reasoning``;
  "Reasoning parser ... not found"; ``--reasoning-parser-plugin`` may register more);
* ``tool_call_parser``: ``ToolParserManager.list_registered()`` (``vllm/tool_parsers``);
* ``load_format``: ``_LOAD_FORMAT_TO_MODEL_LOADER`` in ``vllm/model_executor/model_loader/
  __init__.py`` ("Load format `x` is not supported", raised when the engine loads the model).
  0.26.0 loaded one format 0.33 dropped (``bitsandbytes``) and lacked ``ipc_cache``:
  :data:`LOAD_FORMATS_026`, so a spec may name a format of either release and
  ``brain.vllm_versions`` refuses it for the release that lacks it.

A newer vLLM may accept more: refresh these lists from its package
(``tests/conformance/vllm_lists.py`` prints them; the optional conformance test compares them
with these) and bump :data:`VLLM_VERSION`.
"""

from __future__ import annotations

from collections.abc import Iterable

VLLM_VERSION = "0.33.0"

DTYPES: frozenset[str] = frozenset(
    {
        "auto",
        "half",
        "float16",
        "bfloat16",
        "float",
        "float32",
    }
)

KV_CACHE_DTYPES: frozenset[str] = frozenset(
    {
        "auto",
        "float16",
        "bfloat16",
        "fp8",
        "fp8_e4m3",
        "fp8_e5m2",
        "fp8_inc",
        "fp8_ds_mla",
        "nvfp4_ds_mla",
        "turboquant_k8v4",
        "turboquant_4bit_nc",
        "turboquant_k3v4_nc",
        "turboquant_3bit_nc",
        "octave_k3v4",
        "octave_k3v3",
        "octave_k3v3_compact",
        "ultraquant_4bit",
        "int4_per_token_head",
        "int8_per_token_head",
        "fp8_per_token_head",
        "nvfp4",
        "nvfp4_4over6",
    }
)

ATTENTION_BACKENDS: frozenset[str] = frozenset(
    {
        "FLASH_ATTN",
        "FLASH_ATTN_DIFFKV",
        "TRITON_ATTN",
        "TRITON_ATTN_DIFFKV",
        "TRITON_FLASH_ATTN",
        "ROCM_ATTN",
        "ROCM_SEGMENTED_ATTN",
        "ROCM_AITER_MLA",
        "ROCM_AITER_TRITON_MLA",
        "ROCM_AITER_FA",
        "ROCM_AITER_MLA_SPARSE",
        "XPU_MLA_SPARSE",
        "TORCH_SDPA",
        "FLASHINFER",
        "TRITON_FLASHINFER",
        "FLASHINFER_MLA",
        "TOKENSPEED_MLA",
        "FLASHINFER_MLA_SPARSE",
        "FLASHINFER_MLA_SPARSE_SM120",
        "FLASHINFER_MLA_SPARSE_SM90",
        "TRITON_MLA",
        "CUTLASS_MLA",
        "FLASHMLA",
        "FLASHMLA_SPARSE",
        "FLASHMLA_SPARSE_DSV4",
        "FLASHINFER_MLA_SPARSE_DSV4",
        "ROCM_FLASHMLA_SPARSE_DSV4",
        "FLASHMLA_SPARSE_DSV41",
        "FLASHINFER_MLA_SPARSE_DSV41",
        "ROCM_FLASHMLA_SPARSE_DSV41",
        "FLASHMLA_MEGA_ATTN_DSV41",
        "B12X",
        "FLASH_ATTN_MLA",
        "FLASH_ATTN_MLA_SPARSE",
        "FLASH_ATTN_MLA_SPARSE_FA4",
        "MINIMAX_M3_SPARSE",
        "CUTLASS_MSA",
        "TRITON_MSA",
        "STEP5_DSA",
        "NO_ATTENTION",
        "FLEX_ATTENTION",
        "HPC_ATTN",
        "ROCM_AITER_UNIFIED_ATTN",
        "CPU_ATTN",
        "CPU_MLA",
        "AMX_MLA",
        "TURBOQUANT",
        "ROCM_OCTAVE",
        "ULTRAQUANT",
        "CUSTOM",
    }
)

QUANTIZATION_METHODS: frozenset[str] = frozenset(
    {
        "awq",
        "auto_awq",
        "fp8",
        "fbgemm_fp8",
        "fp_quant",
        "modelopt",
        "modelopt_fp4",
        "modelopt_mxfp8",
        "modelopt_mixed",
        "auto_gptq",
        "gptq",
        "gptq_marlin",
        "awq_marlin",
        "humming",
        "compressed-tensors",
        "experts_int8",
        "quark",
        "moe_wna16",
        "torchao",
        "inc",
        "mxfp4",
        "gpt_oss_mxfp4",
        "deepseek_v4_fp8",
        "online",
        "fp8_per_tensor",
        "fp8_per_block",
        "fp8_per_channel",
        "int8_per_channel_weight_only",
        "nvfp4_per_token",
        "mxfp8",
    }
)

SPECULATIVE_METHODS: frozenset[str] = frozenset(
    {
        "ngram",
        "draft_model",
        "suffix",
        "custom_class",
        "eagle",
        "eagle3",
        "extract_hidden_states",
        "deepseek_mtp",
        "dots3_note_mtp",
        "mimo_mtp",
        "mimo_v2_mtp",
        "glm4_moe_mtp",
        "glm4_moe_lite_mtp",
        "glm_ocr_mtp",
        "ernie_mtp",
        "nemotron_h_mtp",
        "exaone_moe_mtp",
        "exaone4_5_mtp",
        "qwen3_next_mtp",
        "qwen4_exp_mtp",
        "qwen3_5_mtp",
        "longcat_flash_mtp",
        "bailing_hybrid_v3_mtp",
        "minimax_m3_mtp",
        "bailing_hybrid_mtp",
        "mtp",
        "kimi_k3_mtp",
        "pangu_ultra_moe_mtp",
        "step3p5_mtp",
        "step5_mtp",
        "hy_v3_mtp",
        "hy_v4_mtp",
        "gemma4_mtp",
        "inkling_mtp",
        "glm5_next_mtp",
        "dflash",
        "ngram_gpu",
        "dspark",
    }
)

REASONING_PARSERS: frozenset[str] = frozenset(
    {
        "beam",
        "cohere_command3",
        "cohere_command4",
        "deepseek_r1",
        "deepseek_v3",
        "deepseek_v4",
        "deepseek_v41",
        "ernie45",
        "gemma4",
        "glm45",
        "glm47",
        "granite",
        "granite_thinking_parser",
        "hf",
        "holo2",
        "hunyuan_a13b",
        "hy_v3",
        "hy_v4",
        "inkling",
        "k2_horizon",
        "kimi_k2",
        "kimi_k3",
        "ling3",
        "mimo",
        "minicpmv",
        "minimax_m2",
        "minimax_m2_append_think",
        "minimax_m3",
        "mistral",
        "muse",
        "muse_glimmer",
        "musespark1x",
        "nemotron_v3",
        "olmo3",
        "openai_gptoss",
        "plamo3",
        "poolside_v1",
        "qwen3",
        "seed_oss",
        "step3",
        "step3p5",
        "step5",
    }
)

TOOL_CALL_PARSERS: frozenset[str] = frozenset(
    {
        "apertus",
        "beam",
        "cohere_command3",
        "cohere_command4",
        "deepseek_v3",
        "deepseek_v31",
        "deepseek_v32",
        "deepseek_v4",
        "deepseek_v41",
        "dots",
        "ernie45",
        "functiongemma",
        "gemma4",
        "gigachat3",
        "glm45",
        "glm47",
        "granite",
        "granite-20b-fc",
        "granite4",
        "hermes",
        "hf",
        "hunyuan_a13b",
        "hy_v3",
        "hy_v4",
        "inkling",
        "internlm",
        "jamba",
        "k2_horizon",
        "kimi_k2",
        "kimi_k3",
        "lfm2",
        "ling3",
        "llama3_json",
        "llama4_json",
        "llama4_pythonic",
        "longcat",
        "mimo",
        "minicpm5",
        "minimax_m2",
        "minimax_m3",
        "mistral",
        "muse",
        "muse_glimmer",
        "musespark1x",
        "olmo3",
        "openai",
        "phi4_mini_json",
        "plamo3",
        "poolside_v1",
        "pythonic",
        "qwen3_coder",
        "qwen3_json",
        "qwen3_xml",
        "seed_oss",
        "step3",
        "step3p5",
        "step5",
        "xlam",
    }
)


LOAD_FORMATS: frozenset[str] = frozenset(
    {
        "auto",
        "hf",
        "dummy",
        "fastsafetensors",
        "instanttensor",
        "ipc_cache",
        "mistral",
        "modelexpress",
        "npcache",
        "pt",
        "runai_streamer",
        "runai_streamer_sharded",
        "safetensors",
        "sharded_state",
        "tensorizer",
    }
)

LOAD_FORMATS_026: frozenset[str] = (LOAD_FORMATS - {"ipc_cache"}) | {"bitsandbytes"}
"""``_LOAD_FORMAT_TO_MODEL_LOADER`` of vLLM 0.26.0."""


def choice_problem(
    field: str, value: str | None, known: Iterable[str], *, upper: bool = False, plugin: str = ""
) -> tuple[str, str, str] | None:
    """``(field, problem, fix)`` when ``value`` is not one vLLM 0.33 accepts, else None."""
    if value is None:
        return None
    names = frozenset(known)
    if (value.upper() if upper else value) in names:
        return None
    how = f", or load one with extra_args: [{plugin}, /path/in/container.py]" if plugin else ""
    return (
        field,
        f"{value!r} is not a value vLLM {VLLM_VERSION} accepts "
        f"(known: {', '.join(sorted(names))}).",
        f"pick a known name{how}",
    )
