"""The conformance table: what vLLM answers, case by case, with where in vLLM it comes from.

Each case is a request (or a server argv, or the server's log or metrics) and the answer vLLM
gives: status, error type, ``param``, message, the keys of the body, finish_reason. Sources
are paths inside the vLLM 0.33.0 package (``vllm/...``); a case marked ``recorded`` is also
checked against a real exchange with vLLM 0.26.0 on an H200 (``recorded_026/``), and
``versions`` says which releases answer so (the sim is run in each listed flavour,
``SimConfig.vllm_version``). A case the sim deliberately answers otherwise carries
``not_followed`` with the reason; the test then checks that it still differs, so the mark
cannot go stale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ANY: Any = object()
"""``param`` not checked."""

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
FINISH = {
    "type": "function",
    "function": {
        "name": "finish",
        "description": "End the task with a summary",
        "parameters": {
            "type": "object",
            "properties": {"summary": {"type": "string"}},
            "required": ["summary"],
        },
    },
}
"""The tool the sim's demo agent calls when a request has tools and no phase prompt."""
HI = [{"role": "user", "content": "hi"}]
CHAT_KEYS = [
    "id",
    "object",
    "created",
    "model",
    "choices",
    "service_tier",
    "system_fingerprint",
    "usage",
    "prompt_logprobs",
    "prompt_token_ids",
    "prompt_text",
    "kv_transfer_params",
    "ec_transfer_params",
    "metrics",
]
CHOICE_KEYS = [
    "index",
    "message",
    "logprobs",
    "finish_reason",
    "stop_reason",
    "token_ids",
    "routed_experts",
    "weight_versions",
]
MESSAGE_KEYS = ["role", "content", "refusal", "annotations", "audio", "function_call", "reasoning"]
USAGE_KEYS = [
    "prompt_tokens",
    "total_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "completion_tokens_details",
]
COMPLETION_KEYS = [
    "id",
    "object",
    "created",
    "model",
    "choices",
    "service_tier",
    "system_fingerprint",
    "usage",
    "kv_transfer_params",
    "ec_transfer_params",
    "metrics",
]

METRIC_FAMILIES = [
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_requests_waiting_by_reason",
    "vllm:engine_sleep_state",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:external_prefix_cache_queries",
    "vllm:external_prefix_cache_hits",
    "vllm:mm_cache_queries",
    "vllm:mm_cache_hits",
    "vllm:num_preemptions",
    "vllm:prompt_tokens",
    "vllm:prompt_tokens_by_source",
    "vllm:prompt_tokens_cached",
    "vllm:prompt_tokens_cached_by_source",
    "vllm:generation_tokens",
    "vllm:request_success",
    "vllm:admission_rejections",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:iteration_tokens_total",
    "vllm:request_max_num_generation_tokens",
    "vllm:request_params_n",
    "vllm:request_params_max_tokens",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_num_preemptions",
    "vllm:request_prefill_kv_computed_tokens",
    "vllm:cache_config_info",
]
"""The families ``v1/metrics/loggers.py`` registers with its default settings (no LoRA, no KV
connector, no watermark, KV-block sampling off), ``cache_config_info`` included."""
SPEC_FAMILIES = [
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
]
"""``v1/spec_decode/metrics.py``, when speculative decoding is on."""

SERVERS: dict[str, dict[str, Any]] = {
    "default": {"model": "smol", "max_model_len": 4096},
    "no_tool_flags": {
        "model": "smol",
        "max_model_len": 4096,
        "enable_auto_tool_choice": False,
        "tool_call_parser": None,
    },
    "spec": {"model": "smol", "max_model_len": 4096, "speculative": {"num_tokens": 2}},
    "json_schema_parser": {"model": "smol", "max_model_len": 4096, "tool_call_parser": "pythonic"},
}
"""The sim's settings per case (a SimConfig's fields); "smol" is the recordings' served name."""


@dataclass(frozen=True)
class Expect:
    """The answer: every field that is not None is checked."""

    status: int
    type: str | None = None
    param: Any = ANY
    message: str | None = None
    message_contains: str | None = None
    keys: tuple[str, ...] | list[str] | None = None
    choice_keys: tuple[str, ...] | list[str] | None = None
    message_keys: tuple[str, ...] | list[str] | None = None
    usage_keys: tuple[str, ...] | list[str] | None = None
    finish_reason: str | None = None
    check: str | None = None
    """An extra check, by name, in ``test_conformance.CHECKS``."""


@dataclass(frozen=True)
class Case:
    id: str
    source: str
    expect: Expect
    body: dict[str, Any] | None = None
    raw: str | None = None
    method: str = "POST"
    path: str = "/v1/chat/completions"
    content_type: str = "application/json"
    server: str = "default"
    versions: tuple[str, ...] = ("0.33",)
    recorded: str | None = None
    """A 0.26 recording (``recorded_026/NAME``) whose answer this case's expectation matches."""
    not_followed: str | None = None
    kind: str = "http"  # http | metrics | log | argv
    vllm: bool = False
    """The optional test recomputes the answer with an installed vLLM's own code."""
    extra: dict[str, Any] = field(default_factory=dict)


def _chat(**fields: Any) -> dict[str, Any]:
    return {"model": "smol", "messages": HI, **fields}


def _vllm_error(message: str, param: str) -> Expect:
    """A request model validator's VLLMValidationError: it is no ValueError, so pydantic lets it
    through and vLLM's error handler answers it (``serve/exception_handling/register.py:32``)."""
    return Expect(400, "BadRequestError", param, f"{message} (parameter={param})")


PROTO = "vllm/entrypoints/openai/chat_completion/protocol.py"
TOOLS_UTILS = "vllm/entrypoints/serve/utils/tool_calls_utils.py"
ASSEMBLY = "vllm/entrypoints/openai/chat_completion/message_assembly.py"
MISSING_WHEELS = (
    "a failure of that server's install, not of vLLM: its bundle lacked the structured-output "
    "wheels (lm-format-enforcer, interegular, outlines_core; 0.26's "
    "SamplingParams._validate_structured_outputs loads those backends for every constrained "
    "request); with them 0.26 answered forced calls (GPU sitting 2026-12-06), so the sim "
    "answers as the source does in every flavour"
)
SAMPLING = "vllm/sampling_params.py"
PARAMS = "vllm/renderers/params.py"

CASES: list[Case] = [
    # ---------------------------------------------------- the request model's validators
    Case(
        "stream_options_without_stream",
        f"{PROTO}:858 validate_stream_options; handlers/validation.py",
        _vllm_error("Stream options can only be defined when `stream=True`.", "stream_options"),
        body=_chat(stream_options={"include_usage": True}),
        vllm=True,
    ),
    Case(
        "top_logprobs_without_logprobs",
        f"{PROTO}:871 check_logprobs",
        _vllm_error("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs"),
        body=_chat(top_logprobs=2),
        vllm=True,
    ),
    Case(
        "tool_choice_without_tools",
        f"{PROTO}:972 check_tool_usage",
        _vllm_error("When using `tool_choice`, `tools` must be set.", "tool_choice"),
        body=_chat(tool_choice="required"),
        vllm=True,
    ),
    Case(
        "named_tool_not_in_tools",
        f"{PROTO}:1045 check_tool_usage",
        _vllm_error(
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
            "tool_choice",
        ),
        body=_chat(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}),
        vllm=True,
    ),
    Case(
        "tools_empty_array",
        f"{PROTO}:980 check_tool_usage",
        _vllm_error(
            "`tools` must not be an empty array. Either provide at least one tool or omit "
            "the field entirely.",
            "tools",
        ),
        body=_chat(tools=[]),
        vllm=True,
    ),
    Case(
        "tool_choice_unknown_word",
        f"{PROTO}:1008 check_tool_usage",
        Expect(
            400,
            "BadRequestError",
            "tool_choice",
            message_contains='Invalid value for `tool_choice`: sometimes! Only named tools, "none"',
        ),
        body=_chat(tools=[WEATHER], tool_choice="sometimes"),
        vllm=True,
    ),
    Case(
        "missing_messages",
        "vllm/entrypoints/serve/exception_handling/handlers/validation.py:149",
        Expect(
            400,
            "Bad Request",
            "body.messages",
            "1 validation error:\n  {'type': 'missing', 'loc': 'body.messages', 'msg': 'Field "
            "required', 'input': '<dict of 1 items>'}",
        ),
        body={"model": "smol"},
        vllm=True,
    ),
    Case(
        "missing_messages_026",
        "recorded: 0.26 printed loc as a tuple and the input whole",
        Expect(
            400,
            "Bad Request",
            "body.messages",
            "1 validation error:\n  {'type': 'missing', 'loc': ('body', 'messages'), 'msg': "
            "'Field required', 'input': {'model': 'smol'}}",
        ),
        body={"model": "smol"},
        versions=("0.26",),
        recorded="missing_messages.txt",
        not_followed="the sim formats validation errors as 0.33 does in every flavour (the "
        "status, type and param agree; only the message's rendering of loc and input differs)",
    ),
    Case(
        "malformed_json",
        "vllm/entrypoints/serve/exception_handling/handlers/validation.py:149",
        Expect(
            400,
            "Bad Request",
            "body.63",
            "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.63', 'msg': 'JSON decode "
            "error', 'input': '<dict of 0 items>', 'ctx': {'error': \"Expecting ',' delimiter\"}}",
        ),
        raw='{"model": "smol", "messages": [{"role": "user", "content": "hi"',
        vllm=True,
    ),
    Case(
        "wrong_content_type",
        "vllm/entrypoints/serve/utils/api_utils.py:309 validate_json_request",
        Expect(
            400,
            "Bad Request",
            None,
            "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
        ),
        body=_chat(),
        content_type="text/plain",
        vllm=True,
    ),
    # ------------------------------------------------------------ the sampling parameters
    Case(
        "temperature_negative",
        f"{SAMPLING}:663",
        Expect(
            400,
            "BadRequestError",
            "temperature",
            "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)",
        ),
        body=_chat(max_tokens=8, temperature=-1),
        versions=("0.26", "0.33"),
        recorded="temperature_neg.txt",
        vllm=True,
    ),
    Case(
        "temperature_above_two",
        f"{SAMPLING}:669",
        Expect(
            400,
            "BadRequestError",
            "temperature",
            "temperature must be in [0, 2], got 3.0. (parameter=temperature, value=3.0)",
        ),
        body=_chat(temperature=3),
        vllm=True,
    ),
    Case(
        "top_p_two",
        f"{SAMPLING}:675",
        Expect(
            400,
            "BadRequestError",
            "top_p",
            "top_p must be in (0, 1], got 2.0. (parameter=top_p, value=2.0)",
        ),
        body=_chat(top_p=2),
        vllm=True,
    ),
    Case(
        "presence_penalty_five",
        f"{SAMPLING}:639",
        Expect(400, "BadRequestError", None, "presence_penalty must be in [-2, 2], got 5.0."),
        body=_chat(presence_penalty=5),
        vllm=True,
    ),
    Case(
        "frequency_penalty_minus_three",
        f"{SAMPLING}:643",
        Expect(400, "BadRequestError", None, "frequency_penalty must be in [-2, 2], got -3.0."),
        body=_chat(frequency_penalty=-3),
        vllm=True,
    ),
    Case(
        "repetition_penalty_zero",
        f"{SAMPLING}:652",
        Expect(
            400, "BadRequestError", None, "repetition_penalty must be greater than zero, got 0.0."
        ),
        body=_chat(repetition_penalty=0),
        vllm=True,
    ),
    Case(
        "min_p_two",
        f"{SAMPLING}:690",
        Expect(400, "BadRequestError", None, "min_p must be in [0, 1], got 2.0."),
        body=_chat(min_p=2),
        vllm=True,
    ),
    Case(
        "top_k_minus_five",
        f"{SAMPLING}:682",
        Expect(400, "BadRequestError", None, "top_k must be 0 (disable), or at least 1, got -5."),
        body=_chat(top_k=-5),
        vllm=True,
    ),
    Case(
        "n_zero",
        f"{SAMPLING}:55 _verify_num_sequences",
        Expect(400, "BadRequestError", None, "n must be at least 1, got 0."),
        body=_chat(n=0),
        vllm=True,
    ),
    Case(
        "max_tokens_zero",
        f"{SAMPLING}:692",
        Expect(
            400,
            "BadRequestError",
            "max_tokens",
            "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
        ),
        body=_chat(max_tokens=0),
        vllm=True,
    ),
    Case(
        "max_tokens_negative",
        f"{SAMPLING}:692",
        Expect(
            400,
            "BadRequestError",
            "max_tokens",
            "max_tokens must be at least 1, got -1. (parameter=max_tokens, value=-1)",
        ),
        body=_chat(max_tokens=-1),
        vllm=True,
    ),
    Case(
        "n_two_served",
        f"{SAMPLING}:49 (n up to VLLM_MAX_N_SEQUENCES=16384)",
        Expect(200, check="two_choices"),
        body=_chat(n=2, max_tokens=4),
        vllm=True,
    ),
    # ------------------------------------------------------ the renderer and the clamp
    Case(
        "max_tokens_above_window",
        f"{PARAMS}:272",
        Expect(
            400,
            "BadRequestError",
            "max_tokens",
            "max_tokens=5000 cannot be greater than max_model_len=4096. Please request fewer "
            "output tokens. (parameter=max_tokens, value=5000)",
        ),
        body=_chat(max_tokens=5000),
        vllm=True,
    ),
    Case(
        "max_tokens_above_window_026",
        "recorded (0.26's TokenizeParams named the limit max_model_len=max_total_tokens)",
        Expect(
            400,
            "BadRequestError",
            "max_tokens",
            "max_tokens=5000 cannot be greater than max_model_len=max_total_tokens=4096. Please "
            "request fewer output tokens. (parameter=max_tokens, value=5000)",
        ),
        body=_chat(max_tokens=5000),
        versions=("0.26",),
        recorded="max_tokens_too_large.txt",
    ),
    Case(
        "max_tokens_above_window_streamed_026",
        "recorded: the same 400 before any stream starts",
        Expect(400, "BadRequestError", "max_tokens", message_contains="max_tokens=5000 cannot"),
        body=_chat(max_tokens=5000, stream=True),
        versions=("0.26", "0.33"),
        recorded="max_tokens_too_large_stream.txt",
    ),
    Case(
        "max_completion_tokens_above_window",
        f"{PARAMS}:272; chat_completion/protocol.py:684 build_tok_params",
        Expect(
            400,
            "BadRequestError",
            "max_completion_tokens",
            "max_completion_tokens=5000 cannot be greater than max_model_len=4096. Please request "
            "fewer output tokens. (parameter=max_completion_tokens, value=5000)",
        ),
        body=_chat(max_completion_tokens=5000),
        vllm=True,
    ),
    Case(
        "prompt_plus_max_tokens_over_window_is_clamped",
        f"{PARAMS}:225 max_input_tokens; vllm/entrypoints/serve/utils/api_utils.py:234 "
        "get_max_tokens",
        Expect(200, check="clamped"),
        body={"model": "smol", "messages": [{"role": "user", "content": "word " * 2400}]}
        | {"max_tokens": 2000},
        vllm=True,
    ),
    Case(
        "prompt_plus_max_tokens_over_window_026",
        "recorded: 0.26 refused prompt + max_tokens over the window",
        Expect(
            400,
            "BadRequestError",
            "input_tokens",
            message_contains="for a total of at least 4097 tokens. Please reduce the length of "
            "the input prompt or the number of requested output tokens. (parameter=input_tokens, "
            "value=1097)",
        ),
        body={"model": "smol", "messages": [{"role": "user", "content": "word " * 2400}]}
        | {"max_tokens": 3000},
        versions=("0.26",),
        recorded="prompt_plus_max_tokens_over.txt",
        extra={"recorded_contains": "for a total of at least 4097 tokens."},
    ),
    Case(
        "prompt_alone_over_window",
        f"{PARAMS}:537 _token_len_check",
        Expect(
            400,
            "BadRequestError",
            "input_tokens",
            "This model's maximum context length is 4096 tokens. However, your prompt contains "
            "at least 4097 input tokens, which exceeds this limit even without any output "
            "tokens. Please reduce the length of the input prompt. (parameter=input_tokens, "
            "value=4097)",
        ),
        body={"model": "smol", "messages": [{"role": "user", "content": "word " * 4000}]},
        vllm=True,
    ),
    Case(
        "prompt_alone_over_window_026",
        "recorded: 0.26 reported prompt + max_tokens, with its lower bound",
        Expect(
            400,
            "BadRequestError",
            "input_tokens",
            message_contains="However, you requested 16 output tokens and your prompt contains "
            "at least 4081 input tokens, for a total of at least 4097 tokens.",
        ),
        body={"model": "smol", "messages": [{"role": "user", "content": "word " * 4000}]}
        | {"max_tokens": 16},
        versions=("0.26",),
        recorded="too_long.txt",
    ),
    # ------------------------------------------------------------------- tool flags
    Case(
        "auto_tool_choice_without_flags",
        "vllm/renderers/online_renderer.py:278",
        Expect(
            400,
            "BadRequestError",
            None,
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be '
            "set",
        ),
        body=_chat(tools=[WEATHER], tool_choice="auto", max_tokens=64, temperature=0),
        server="no_tool_flags",
        versions=("0.26", "0.33"),
        recorded="noflags_tools_auto.txt",
    ),
    Case(
        "tools_without_choice_mean_auto",
        f"{PROTO}:988 (tool_choice defaults to auto when tools are given)",
        Expect(400, "BadRequestError", None, message_contains='"auto" tool choice requires'),
        body=_chat(tools=[WEATHER]),
        server="no_tool_flags",
        versions=("0.26", "0.33"),
    ),
    Case(
        "required_tool_choice_without_parser",
        "vllm/renderers/online_renderer.py:283",
        Expect(
            400,
            "BadRequestError",
            None,
            'tool_choice="required" requires --tool-call-parser to be set',
        ),
        body=_chat(tools=[WEATHER], tool_choice="required", max_tokens=64, temperature=0),
        server="no_tool_flags",
        versions=("0.26", "0.33"),
        recorded="noflags_tools_required.txt",
    ),
    Case(
        "named_tool_choice_without_parser",
        "vllm/renderers/online_renderer.py:283",
        Expect(
            400,
            "BadRequestError",
            None,
            'tool_choice=function "get_weather" requires --tool-call-parser to be set',
        ),
        body=_chat(
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=64,
            temperature=0,
        ),
        server="no_tool_flags",
        versions=("0.26", "0.33"),
        recorded="noflags_tools_named.txt",
    ),
    Case(
        "plain_chat_without_tool_flags_is_served",
        "vllm/renderers/online_renderer.py:270 (no tool_choice, nothing to check)",
        Expect(200, keys=CHAT_KEYS),
        body=_chat(max_tokens=8),
        server="no_tool_flags",
    ),
    # ----------------------------------------------------------------- forced tool calls
    # With the hermes parser (and every parser whose class sets `structural_tag_model`), 0.26
    # and 0.33 force a call with an xgrammar structural tag in the parser's own format
    # (parser/abstract_parser.py DelegatingParser._apply_structural_tag;
    # tool_parsers/abstract_tool_parser.py ToolParser.__init_subclass__ turns
    # supports_required_and_named off) and read it back with the parser's auto extraction
    # (DelegatingParser._extract_tool_calls). Other parsers get get_json_schema_from_tools'
    # schema (tool_parsers/utils.py) from ToolParser.adjust_request.
    Case(
        "named_tool_choice_finishes_with_stop",
        f"{TOOLS_UTILS}:41 resolve_finish_reason (a named tool reports `stop`); "
        f'{ASSEMBLY} assemble_chat_message_fields (`content or ""`)',
        Expect(200, finish_reason="stop", check="forced_call"),
        body=_chat(
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=64,
        ),
        versions=("0.26", "0.33"),
    ),
    Case(
        "named_tool_choice_026",
        "recorded: 0.26 answered 500 to forced tool choice on this server (dummy and real "
        "weights alike)",
        Expect(500, "InternalServerError", None, ""),
        body=_chat(
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=64,
            temperature=0,
        ),
        versions=("0.26",),
        recorded="tools_named.txt",
        not_followed=MISSING_WHEELS,
    ),
    Case(
        "required_tool_choice_calls_an_offered_tool",
        f"{TOOLS_UTILS}:41 resolve_finish_reason; {ASSEMBLY} assemble_chat_message_fields",
        Expect(200, finish_reason="tool_calls", check="forced_call"),
        body=_chat(tools=[WEATHER], tool_choice="required", max_tokens=64),
        versions=("0.26", "0.33"),
    ),
    Case(
        "required_tool_choice_026",
        "recorded: 0.26 answered 500 to tool_choice required on this server",
        Expect(500, "InternalServerError", None, ""),
        body=_chat(tools=[WEATHER], tool_choice="required", max_tokens=64, temperature=0),
        versions=("0.26",),
        recorded="tools_required.txt",
        not_followed=MISSING_WHEELS,
    ),
    Case(
        "required_tool_choice_streamed",
        "0.33: chat_completion/stream_processor.py ChatStreamProcessor.step -> "
        f"{TOOLS_UTILS}:41 resolve_finish_reason; 0.26: chat_completion/serving.py "
        "chat_completion_stream_generator (`tools_streamed` and no named tool: tool_calls)",
        Expect(200, check="forced_stream"),
        body=_chat(tools=[WEATHER], tool_choice="required", max_tokens=64, stream=True),
        versions=("0.26", "0.33"),
        extra={"finish_reason": {"0.26": "tool_calls", "0.33": "tool_calls"}},
    ),
    Case(
        "named_tool_choice_streamed",
        "as required_tool_choice_streamed; a named tool keeps the engine's `stop` in both",
        Expect(200, check="forced_stream"),
        body=_chat(
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=64,
            stream=True,
        ),
        versions=("0.26", "0.33"),
        extra={"finish_reason": {"0.26": "stop", "0.33": "stop"}},
    ),
    Case(
        "streamed_call_cut_at_max_tokens",
        "0.26: entrypoints/openai/chat_completion/serving.py chat_completion_stream_generator, "
        '`"tool_calls"` when `tools_streamed[i] and not tool_choice_function_name`; '
        f"0.33: {TOOLS_UTILS}:41 resolve_finish_reason keeps `length`",
        Expect(200, check="stream_cut_call"),
        body=_chat(
            tools=[FINISH],
            tool_choice="auto",
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        ),
        versions=("0.26", "0.33"),
        extra={"finish_reason": {"0.26": "tool_calls", "0.33": "length"}, "max_tokens": 12},
    ),
    Case(
        "streamed_required_call_cut_at_max_tokens",
        "as streamed_call_cut_at_max_tokens: 0.26 says `tool_calls` for required too",
        Expect(200, check="stream_cut_call"),
        body=_chat(
            tools=[FINISH],
            tool_choice="required",
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        ),
        versions=("0.26", "0.33"),
        extra={"finish_reason": {"0.26": "tool_calls", "0.33": "length"}, "max_tokens": 12},
    ),
    Case(
        "streamed_named_call_cut_at_max_tokens",
        "as streamed_call_cut_at_max_tokens: a named tool keeps the engine's `length` in both",
        Expect(200, check="stream_cut_call"),
        body=_chat(
            tools=[FINISH],
            tool_choice={"type": "function", "function": {"name": "finish"}},
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        ),
        versions=("0.26", "0.33"),
        extra={"finish_reason": {"0.26": "length", "0.33": "length"}, "max_tokens": 12},
    ),
    Case(
        "required_call_cut_at_max_tokens",
        "tool_parsers/hermes_tool_parser.py Hermes2ProToolParser.extract_tool_calls: json.loads "
        "fails on the cut call, the output comes back as content, no tool_calls",
        Expect(200, finish_reason="length", check="cut_call_as_content"),
        body=_chat(tools=[FINISH], tool_choice="required", max_tokens=12),
        versions=("0.26", "0.33"),
    ),
    Case(
        "named_call_cut_at_max_tokens",
        "as required_call_cut_at_max_tokens (the structural-tag path reads named calls alike)",
        Expect(200, finish_reason="length", check="cut_call_as_content"),
        body=_chat(
            tools=[FINISH],
            tool_choice={"type": "function", "function": {"name": "finish"}},
            max_tokens=12,
        ),
    ),
    Case(
        "required_cut_on_a_json_schema_parser",
        "parser/abstract_parser.py DelegatingParser._extract_tool_calls: "
        "TypeAdapter(list[FunctionDefinition]) fails on the cut array, no call; "
        f'{ASSEMBLY}: content `""`',
        Expect(200, finish_reason="length", check="no_call_empty_content"),
        body=_chat(tools=[FINISH], tool_choice="required", max_tokens=12),
        server="json_schema_parser",
    ),
    Case(
        "named_cut_on_a_json_schema_parser",
        "parser/abstract_parser.py DelegatingParser._extract_tool_calls: a named tool's "
        "arguments are the output as it stands",
        Expect(200, finish_reason="length", check="cut_named_call"),
        body=_chat(
            tools=[FINISH],
            tool_choice={"type": "function", "function": {"name": "finish"}},
            max_tokens=12,
        ),
        server="json_schema_parser",
    ),
    Case(
        "forced_tool_choice_overrides_response_format",
        "tool_parsers/abstract_tool_parser.py ToolParser.adjust_request and "
        "DelegatingParser._apply_structural_tag set `response_format = None`",
        Expect(200, finish_reason="stop", check="forced_call"),
        body=_chat(
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            response_format={"type": "json_object"},
            max_tokens=64,
        ),
    ),
    # ------------------------------------------------------------- structured outputs
    Case(
        "response_format_json_schema",
        "generate/base/protocol.py structured_outputs_from_response_format: json_schema -> "
        "StructuredOutputsParams(json=schema)",
        Expect(200, finish_reason="stop", check="content_fits_weather"),
        body=_chat(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "weather", "schema": WEATHER["function"]["parameters"]},
            },
            max_tokens=64,
        ),
        versions=("0.26", "0.33"),
    ),
    Case(
        "response_format_json_object",
        "generate/base/protocol.py structured_outputs_from_response_format: json_object",
        Expect(200, finish_reason="stop", check="content_is_json_object"),
        body=_chat(response_format={"type": "json_object"}, max_tokens=64),
        versions=("0.26", "0.33"),
    ),
    Case(
        "response_format_cut_at_max_tokens",
        "the constraint holds the tokens, not their number: `length`, JSON cut",
        Expect(200, finish_reason="length", check="content_not_whole_json"),
        body=_chat(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "weather", "schema": WEATHER["function"]["parameters"]},
            },
            max_tokens=2,
        ),
    ),
    Case(
        "structured_outputs_json",
        f"{PROTO}:397 structured_outputs (vLLM's own field)",
        Expect(200, finish_reason="stop", check="content_fits_weather"),
        body=_chat(structured_outputs={"json": WEATHER["function"]["parameters"]}, max_tokens=64),
    ),
    Case(
        "structured_outputs_choice",
        f"{PROTO}:397 structured_outputs; sampling_params.py StructuredOutputsParams.choice",
        Expect(200, finish_reason="stop", check="content_is_a_choice"),
        body=_chat(structured_outputs={"choice": ["yes", "no"]}, max_tokens=8),
    ),
    Case(
        "response_format_json_schema_without_schema",
        f"{PROTO}:827 validate_response_format",
        _vllm_error(
            "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
            "response_format",
        ),
        body=_chat(response_format={"type": "json_schema"}),
        vllm=True,
    ),
    Case(
        "structured_outputs_two_constraints",
        f"{PROTO}:931 check_structured_outputs_count",
        Expect(
            400,
            "BadRequestError",
            None,
            "You can only use one kind of constraints for structured outputs ('json', 'regex' "
            "or 'choice').",
        ),
        body=_chat(structured_outputs={"regex": "[a-z]+", "choice": ["a"]}),
        vllm=True,
    ),
    Case(
        "structured_outputs_with_a_named_tool",
        f"{PROTO}:931 check_structured_outputs_count",
        Expect(
            400,
            "BadRequestError",
            None,
            "You can only either use constraints for structured outputs or tools, not both.",
        ),
        body=_chat(
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            structured_outputs={"choice": ["a"]},
        ),
        vllm=True,
    ),
    Case(
        "tool_usage_is_checked_first",
        "pydantic runs before-validators last-defined first: check_tool_usage (974) before "
        "validate_stream_options (860)",
        _vllm_error("When using `tool_choice`, `tools` must be set.", "tool_choice"),
        body=_chat(tool_choice="required", stream_options={"include_usage": True}),
        vllm=True,
    ),
    Case(
        "auto_tool_choice_with_flags_is_served",
        "recorded: 200 (the dummy model wrote text, no call)",
        Expect(200, keys=CHAT_KEYS),
        body=_chat(tools=[WEATHER], tool_choice="auto", max_tokens=64, temperature=0),
        versions=("0.26", "0.33"),
        recorded="tools_auto.txt",
    ),
    # ------------------------------------------------------------------ model names
    Case(
        "unknown_model",
        "vllm/entrypoints/serve/engine/serving.py:78",
        Expect(
            404,
            "NotFoundError",
            "model",
            "The model `no-such-model` does not exist. Valid aliases: smol.",
        ),
        body={"model": "no-such-model", "messages": HI, "max_tokens": 8},
    ),
    Case(
        "unknown_model_026",
        "recorded: 0.26 did not list the served names",
        Expect(404, "NotFoundError", "model", "The model `no-such-model` does not exist."),
        body={"model": "no-such-model", "messages": HI, "max_tokens": 8},
        versions=("0.26",),
        recorded="unknown_model.txt",
    ),
    Case(
        "tokenize_unknown_model",
        "vllm/entrypoints/serve/engine/serving.py:78",
        Expect(
            404, "NotFoundError", "model", "The model `nope` does not exist. Valid aliases: smol."
        ),
        body={"model": "nope", "prompt": "x"},
        path="/tokenize",
    ),
    Case(
        "tokenize_unknown_model_026",
        "recorded",
        Expect(404, "NotFoundError", "model", "The model `nope` does not exist."),
        body={"model": "nope", "prompt": "x"},
        path="/tokenize",
        versions=("0.26",),
        recorded="tokenize_unknown_model.txt",
    ),
    # --------------------------------------------------------------------- tokenize
    Case(
        "tokenize_empty_messages",
        "recorded in logs/serve-dummy-ngram.log: transformers' apply_chat_template refuses an "
        "empty conversation, vLLM answers 400",
        Expect(
            400,
            "BadRequestError",
            message="Cannot apply chat template to an empty conversation. Provide at least one "
            "message.",
        ),
        body={"model": "smol", "messages": []},
        path="/tokenize",
        versions=("0.26", "0.33"),
    ),
    Case(
        "tokenize_prompt",
        "vllm/entrypoints/serve/tokenize/protocol.py TokenizeResponse",
        Expect(200, keys=["count", "max_model_len", "tokens", "token_strs"], check="sane_ids"),
        body={"model": "smol", "prompt": "Hello world, this is a test."},
        path="/tokenize",
        versions=("0.26", "0.33"),
        recorded="tokenize_prompt.txt",
    ),
    # -------------------------------------------------------------------- bodies
    Case(
        "chat_body_keys",
        "vllm/entrypoints/openai/chat_completion/protocol.py:143 (model_dump of the response)",
        Expect(
            200,
            keys=CHAT_KEYS,
            choice_keys=CHOICE_KEYS,
            message_keys=MESSAGE_KEYS,
            usage_keys=USAGE_KEYS,
        ),
        body=_chat(max_tokens=32, temperature=0),
        vllm=True,
    ),
    Case(
        "chat_body_keys_026",
        "recorded: 0.26 had no weight_versions and no completion_tokens_details",
        Expect(
            200,
            keys=CHAT_KEYS,
            choice_keys=[k for k in CHOICE_KEYS if k != "weight_versions"],
            message_keys=MESSAGE_KEYS,
            usage_keys=[k for k in USAGE_KEYS if k != "completion_tokens_details"],
        ),
        body=_chat(max_tokens=32, temperature=0),
        versions=("0.26",),
        recorded="chat.txt",
        not_followed="the sim sends 0.33's keys in every flavour; the two extra keys are null",
    ),
    Case(
        "unknown_field_is_accepted",
        "recorded: extra fields are allowed (OpenAIBaseModel logs and ignores them)",
        Expect(200, keys=CHAT_KEYS),
        body=_chat(max_tokens=4, stream_interval=8, no_such_field=1),
        versions=("0.26", "0.33"),
        recorded="unknown_field.txt",
    ),
    Case(
        "completions_route",
        "vllm/entrypoints/openai/completion/protocol.py:705 CompletionResponse",
        Expect(200, keys=COMPLETION_KEYS, finish_reason="length"),
        body={"model": "smol", "prompt": "The capital of France is", "max_tokens": 16},
        path="/v1/completions",
        versions=("0.26", "0.33"),
        recorded="completions.txt",
    ),
    Case(
        "models_route",
        "vllm/entrypoints/serve/models/protocol.py ModelCard",
        Expect(200, keys=["object", "data"], check="model_card"),
        method="GET",
        path="/v1/models",
        versions=("0.26", "0.33"),
        recorded="models.txt",
    ),
    Case(
        "no_route",
        "FastAPI's 404",
        Expect(404, check="not_found_detail"),
        method="GET",
        path="/v2/nothing",
        versions=("0.26", "0.33"),
        recorded="no_route.txt",
    ),
    Case(
        "stream_with_usage",
        "vllm/entrypoints/openai/chat_completion/serving.py:902 (usage chunk: choices [])",
        Expect(200, check="stream_usage"),
        body=_chat(max_tokens=8, stream=True, stream_options={"include_usage": True}),
        versions=("0.26", "0.33"),
        recorded="chat_stream.txt",
    ),
    # ----------------------------------------------------------------- metrics and logs
    Case(
        "metric_families",
        "vllm/v1/metrics/loggers.py:520-1140",
        Expect(200, check="metric_families"),
        method="GET",
        path="/metrics",
        kind="metrics",
    ),
    Case(
        "spec_decode_metric_families",
        "vllm/v1/spec_decode/metrics.py:200-260",
        Expect(200, check="spec_families"),
        method="GET",
        path="/metrics",
        server="spec",
        kind="metrics",
    ),
    Case(
        "finish_reasons_of_request_success",
        "vllm/v1/engine/__init__.py:63 FinishReason",
        Expect(200, check="finish_reasons"),
        method="GET",
        path="/metrics",
        kind="metrics",
    ),
    Case(
        "kv_cache_line_033",
        "vllm/v1/core/kv_cache_utils.py:1148 (one line)",
        Expect(0, check="kv_line_033"),
        kind="log",
    ),
    Case(
        "kv_cache_lines_026",
        "recorded (startup_lines.log): two lines",
        Expect(0, check="kv_lines_026"),
        kind="log",
        versions=("0.26",),
        recorded="startup_lines.log",
    ),
    Case(
        "listening_line",
        "vllm/entrypoints/launchers/api_server/entry.py:139; recorded 0.26 api_server.py:677",
        Expect(0, check="listening_line"),
        kind="log",
        versions=("0.26", "0.33"),
        recorded="startup_lines.log",
    ),
    Case(
        "argv_without_tool_flags_refuses_auto",
        "vllm/renderers/online_renderer.py:278, with the server made from a vllm serve argv",
        Expect(400, "BadRequestError", None, message_contains='"auto" tool choice requires'),
        body=_chat(tools=[WEATHER]),
        kind="argv",
        extra={"argv": ["serve", "smol", "--max-model-len", "4096"]},
        versions=("0.26", "0.33"),
    ),
    Case(
        "argv_auto_tool_choice_needs_a_parser",
        "vllm/entrypoints/common/cli_args.py:554",
        Expect(2, check="argv_refused"),
        kind="argv",
        extra={"argv": ["serve", "smol", "--enable-auto-tool-choice"]},
        versions=("0.26", "0.33"),
    ),
]
