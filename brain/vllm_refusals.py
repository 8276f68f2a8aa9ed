"""Engine arguments vLLM refuses, and vLLM's own words for each refusal, in one place.

The brain's spec checks quote these texts before launch (``brain/spec_checks.py``), the
simulated vLLM prints them as vLLM does (``brain/sim/vllm_entry.py``) and the diagnosis
recognises them in a log (``brain/diagnose.py``; a test feeds it these texts). Each function
returns the text vLLM writes, or None when vLLM accepts the values. Where and how, identical in
vLLM 0.26.0 and 0.33.0:

* ``max_model_len``: ``ModelConfig.validate_model_config_after`` (``vllm/config/model.py``)
  refuses anything below 1 once ``-1`` (auto) is resolved; the field's ``Field(ge=-1)``
  refuses what is below -1 first. Both reach the API server as a pydantic ``ValidationError``
  for ``ModelConfig`` while the engine config is built: the server exits before any GPU work.
* ``max_num_batched_tokens``: ``SchedulerConfig.verify_max_model_len``
  (``vllm/config/scheduler.py``), in this order: below ``max_model_len`` with chunked prefill
  off, then below ``max_num_seqs``. Also a ``ValidationError``, for ``SchedulerConfig``. When
  ``max_num_seqs`` is not given, ``EngineArgs`` lowers its default to
  ``max_num_batched_tokens`` (``vllm/engine/arg_utils.py``), so only an explicit pair is
  refused.
* ``load_format``: the parser takes any string (``LoadFormats`` is ``str`` at run time in
  ``vllm/config/load.py``, which lower-cases it); ``get_model_loader``
  (``vllm/model_executor/model_loader/__init__.py``) raises ``ValueError`` when the engine
  core loads the model, and the engine dies ("Engine core initialization failed").
"""

from __future__ import annotations

from collections.abc import Collection

MODEL_CONFIG_ERROR = "pydantic_core._pydantic_core.ValidationError: 1 validation error for {}"
"""The first line of the API server's uncaught error when a config refuses a value."""


def max_model_len_refusal(value: int) -> str | None:
    """vLLM's text refusing ``--max-model-len value`` (-1 means auto and is accepted)."""
    if value >= 1 or value == -1:
        return None
    if value < -1:
        return "Input should be greater than or equal to -1"
    return (
        f"max_model_len must be a positive integer, got int: {value}. Example: max_model_len=2048"
    )


def batched_tokens_below_window(
    max_num_batched_tokens: int, max_model_len: int | None, chunked_prefill: bool | None
) -> str | None:
    """vLLM's text refusing a step budget below the window with chunked prefill off
    (``chunked_prefill`` None: vLLM's default, on for generative models)."""
    tokens = max_num_batched_tokens
    if max_model_len is None or chunked_prefill is not False or tokens >= max_model_len:
        return None
    return (
        f"max_num_batched_tokens ({tokens}) is smaller than max_model_len "
        f"({max_model_len}). This effectively limits the maximum sequence length to "
        "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
        "max_num_batched_tokens or decrease max_model_len."
    )


def batched_tokens_below_seqs(max_num_batched_tokens: int, max_num_seqs: int | None) -> str | None:
    """vLLM's text refusing a step budget below ``--max-num-seqs`` (None: not given, and
    vLLM lowers its default to fit)."""
    tokens = max_num_batched_tokens
    if max_num_seqs is None or tokens >= max_num_seqs:
        return None
    return (
        f"max_num_batched_tokens ({tokens}) must be greater than or equal to "
        f"max_num_seqs ({max_num_seqs})."
    )


def batched_tokens_refusal(
    max_num_batched_tokens: int,
    max_num_seqs: int | None,
    max_model_len: int | None,
    chunked_prefill: bool | None,
) -> str | None:
    """The first of the two refusals above, in vLLM's order."""
    return batched_tokens_below_window(
        max_num_batched_tokens, max_model_len, chunked_prefill
    ) or batched_tokens_below_seqs(max_num_batched_tokens, max_num_seqs)


def load_format_refusal(value: str, known: Collection[str]) -> str | None:
    """vLLM's text refusing ``--load-format value`` when ``known`` are the formats it loads."""
    name = value.lower()
    return None if name in known else f"Load format `{name}` is not supported"
