"""The simulated server's settings: one pydantic model that CLI flags, YAML and tests all fill.

Everything the sim does that is not a pure function of the request comes from here: names and
limits it reports, the time model, speculative decoding and the faults to inject. It holds data
only; parsing the short ``--fault`` spec strings lives in ``faults.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

SIM_VLLM_VERSION = "0.33.0-sim"

VllmFlavour = Literal["0.26", "0.33"]
"""The vLLM release whose behaviour the sim copies where releases differ (see the README's
"Versions"): 0.33 clamps ``max_tokens`` to the room left in the window, 0.26 refuses the
request with its older "for a total of" 400; their startup lines differ too."""
DEFAULT_VLLM_FLAVOUR: VllmFlavour = "0.33"
VERSION_STRINGS: dict[str, str] = {"0.26": "0.26.0-sim", "0.33": SIM_VLLM_VERSION}

FaultKind = Literal[
    "refuse",  # close the listening socket for `seconds` (real ECONNREFUSED), drop open connections
    "http_503",  # answer 503 with vLLM's queue-full body
    "http_500",  # answer 500 with vLLM's internal-error body
    "stream_cut",  # close the connection after `after_chunks` SSE chunks, no [DONE]
    "stream_error",  # after `after_chunks` chunks, vLLM's error event (code 500), then [DONE]
    "stall",  # stop sending for `seconds` after `after_chunks` chunks (or before a JSON answer)
    "stall_headers",  # wait `seconds` before sending any header
    "malformed_arguments",  # first tool call's arguments become broken JSON
    "unknown_tool",  # first tool call names a tool that does not exist
    "empty_turn",  # no content, no tool calls, finish_reason "stop"
    "length",  # stop with finish_reason "length" mid tool call (truncated arguments)
    "engine_dead",  # /health 503 and every generation request 500 from now on
    "exit",  # the process exits (os._exit in CLI mode; the server stops in-thread)
]


class Timing(BaseModel):
    """The time model. Defaults are tiny so tests run fast; a dry run can make them realistic."""

    model_config = ConfigDict(extra="forbid")

    load_delay: float = Field(0.0, ge=0, description="Seconds before the port is bound.")
    ttft: float = Field(0.002, ge=0, description="Base time to first token, seconds.")
    ttft_per_token: float = Field(
        0.0,
        ge=0,
        description="Prefill seconds per computed prompt token; all requests' prefill tokens "
        "share one lane and lengthen the decode steps they are batched with (engine.py).",
    )
    itl: float = Field(0.001, ge=0, description="Seconds per decode step (inter-token latency).")
    itl_per_token: float = Field(
        0.0,
        ge=0,
        description="Seconds a decode step grows per token it verifies: each running request "
        "puts 1 + k tokens into the step (k = draft tokens), as vLLM's scheduler budgets them, "
        "so speculation costs more the more requests share the step.",
    )


class DraftMethod(BaseModel):
    """How well one draft method guesses and what drafting costs (``Speculative.methods``)."""

    model_config = ConfigDict(extra="forbid")

    acceptance: float = Field(0.7, ge=0, le=1, description="Per-position acceptance at depth 0.")
    draft_cost: float = Field(
        0.0, ge=0, description="Seconds each draft token adds to a step (an MTP head's pass)."
    )


class Speculative(BaseModel):
    """Speculative decoding (MTP): each decode step drafts k tokens and accepts a prefix of them."""

    model_config = ConfigDict(extra="forbid")

    num_tokens: int = Field(0, ge=0, description="Draft tokens per step (k); 0 = off.")
    acceptance: float = Field(0.7, ge=0, le=1, description="Per-position acceptance probability.")
    method: str = "mtp"
    draft_model: str | None = None
    acceptance_half_depth: int | None = Field(
        None,
        ge=1,
        description="Context tokens (prompt + generated) at which acceptance has halved: drafts "
        "guess worse deep in a long agent context; None keeps it flat.",
    )
    draft_cost: float = Field(
        0.0, ge=0, description="Seconds each draft token adds to a decode step."
    )
    methods: dict[str, DraftMethod] = Field(
        default_factory=dict,
        description="Per-method acceptance and draft cost (ngram, mtp, draft_model), used in "
        "place of acceptance / draft_cost for the method the server was started with.",
    )

    @property
    def enabled(self) -> bool:
        return self.num_tokens > 0

    def model_for(self) -> DraftMethod:
        """The started method's acceptance and cost."""
        return self.methods.get(self.method) or DraftMethod(
            acceptance=self.acceptance, draft_cost=self.draft_cost
        )

    def acceptance_at(self, depth: int) -> float:
        """Per-position acceptance at ``depth`` context tokens."""
        base = self.model_for().acceptance
        if self.acceptance_half_depth is None:
            return base
        return base * 0.5 ** (depth / self.acceptance_half_depth)


class FaultRule(BaseModel):
    """One fault and when it fires: at request numbers, every Nth request, or with a probability.

    Request numbers count POSTs to /v1/chat/completions, from 1. With none of `at`, `every`,
    `probability` set, the rule fires on every request. `times` caps how often it fires.
    """

    model_config = ConfigDict(extra="forbid")

    kind: FaultKind
    at: list[int] | None = None
    every: int | None = Field(None, ge=1)
    probability: float | None = Field(None, ge=0, le=1)
    times: int | None = Field(None, ge=1)
    seconds: float = Field(1.0, ge=0, description="Duration for refuse / stall / stall_headers.")
    after_chunks: int = Field(
        3, ge=0, description="Chunks sent before stream_cut / stream_error / stall."
    )
    exit_code: int = 1

    @field_validator("at", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, int) else value


class SimConfig(BaseModel):
    """Everything one simulated server needs. ``port=0`` picks a free port."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535)
    model: str = "sim/marathon-demo"
    served_model_names: list[str] = Field(default_factory=list)
    max_model_len: int = Field(8192, ge=16)
    policy: str = "demo"
    api_keys: list[str] = Field(default_factory=list)
    max_num_seqs: int = Field(16, ge=1)
    max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        description="vLLM's --max-num-batched-tokens: tokens one engine step computes, prefill "
        "chunks and decodes together (None: vLLM's chunked-prefill default, at least 2048 and "
        "at least max_model_len).",
    )
    max_queue: int | None = Field(
        None, ge=0, description="Waiting requests before 503 (None: unbounded)."
    )
    kv_cache_tokens: int = Field(
        262144,
        ge=16,
        description="GPU KV cache size in tokens: block_size-token blocks shared by the running "
        "requests; past it the scheduler waits or preempts, as vLLM's does.",
    )
    block_size: int = Field(16, ge=1, description="Tokens per KV block (vLLM's --block-size).")
    enable_prefix_caching: bool = Field(True, description="vLLM's --enable-prefix-caching.")
    vllm_version: VllmFlavour = Field(
        DEFAULT_VLLM_FLAVOUR,
        description="Which vLLM release to answer as where releases differ (0.26 or 0.33).",
    )
    enable_auto_tool_choice: bool = Field(
        True, description="vLLM's --enable-auto-tool-choice: without it tool_choice auto is 400."
    )
    tool_call_parser: str | None = Field(
        "hermes", description="vLLM's --tool-call-parser; None: required/named choice is 400."
    )
    timing: Timing = Field(default_factory=Timing)
    speculative: Speculative = Field(default_factory=Speculative)
    faults: list[FaultRule] = Field(default_factory=list)
    seed: int = 0
    version: str | None = Field(None, description="/version's answer (default: the flavour's).")
    fatal_log: str | None = Field(None, description="Print this line during load, then exit 1.")
    vision: bool = Field(True, description="False: a text-only model (images get vLLM's 400).")
    allowed_local_media_path: str | None = Field(
        None, description="Directory file:// images must lie under (vLLM's flag of that name)."
    )
    log_requests: bool = False
    flavour: Literal["vllm", "llama-cpp-python", "llama.cpp", "ollama", "lmstudio", "sglang"] = (
        Field(
            "vllm",
            description="Answer as this server does where it differs from vLLM (flavours.py); "
            "for llama.cpp, max_num_seqs is its slots and max_model_len one slot's window.",
        )
    )
    stream_interval: int = Field(
        1,
        ge=1,
        description="vLLM's --stream-interval: tokens batched into each streamed chunk (the "
        "first and the last are sent at once); a request's own stream_interval may raise it.",
    )

    @property
    def served_names(self) -> list[str]:
        """The names requests may use; the first is the metrics' model_name label."""
        return self.served_model_names or [self.model]

    @property
    def primary_name(self) -> str:
        return self.served_names[0]

    @property
    def version_string(self) -> str:
        """What /version and the startup lines report."""
        return self.version or VERSION_STRINGS[self.vllm_version]

    @property
    def batched_tokens(self) -> int:
        """The per-step token budget the scheduler uses and the startup line reports."""
        return self.max_num_batched_tokens or max(2048, self.max_model_len)

    @property
    def num_kv_blocks(self) -> int:
        return max(1, self.kv_cache_tokens // self.block_size)


def load_config_file(path: str | Path) -> SimConfig:
    """Read a YAML file holding SimConfig fields (unknown keys are an error, with their name)."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of SimConfig fields at the top level")
    return SimConfig.model_validate(data)
