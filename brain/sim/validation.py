"""vLLM 0.33's request validation, in the order it runs, with its exact texts.

Three layers, as in vLLM:

1. The request model's ``mode="before"`` validators (``entrypoints/openai/chat_completion/
   protocol.py``: ``check_tool_usage``, ``check_structured_outputs_count``, ``check_logprobs``,
   ``validate_stream_options``, ``validate_response_format``, run in that order). They
   raise a ``VLLMValidationError``, which is no ``ValueError``, so pydantic does not wrap it:
   it leaves the request model as it is, and vLLM's handler for its own errors answers 400
   ``BadRequestError`` with the error's text and parameter
   (``serve/exception_handling/register.py``, ``error_response.py``). Pydantic's own errors
   (a missing field, broken JSON) get the validation handler's 400 with type ``Bad Request``
   and the errors listed (``serve/exception_handling/handlers/validation.py``).
2. The renderer's checks (``renderers/online_renderer.py``: tool flags;
   ``renderers/params.py``: ``max_tokens`` above the window, a prompt over the window), then
   ``get_max_tokens`` (``serve/utils/api_utils.py``), which clamps ``max_tokens`` to the room
   left in the window (0.33; 0.26 refused prompt + max_tokens over the window instead).
3. ``SamplingParams._verify_args`` (``sampling_params.py``): n, penalties, temperature, top_p,
   top_k, min_p, max_tokens, stream_interval. These answer 400 ``BadRequestError`` with the
   error's text (``(parameter=..., value=...)`` appended when it names them).

The sim's own exception carries vLLM's class name and, like vLLM's, is no ``ValueError``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from brain.sim.errors import SimHTTPError, bad_request, error_body

MAX_N_SEQUENCES = 16384
"""``VLLM_MAX_N_SEQUENCES``'s default (``vllm/envs.py``)."""

EMPTY_CONVERSATION = (
    "Cannot apply chat template to an empty conversation. Provide at least one message."
)
"""transformers' ``apply_chat_template`` text, which vLLM answers with 400 (recorded from 0.26)."""


class VLLMValidationError(Exception):
    """vLLM's ``VLLMValidationError``: a message plus the parameter and value it is about.

    Not a ``ValueError`` (vLLM's derives from ``VLLMClientError(VLLMError(Exception))``), so a
    pydantic validator raising it is not turned into a validation error."""

    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None):
        super().__init__(message)
        self.parameter = parameter
        self.value = value

    def __str__(self) -> str:
        base = super().__str__()
        extras = []
        if self.parameter is not None:
            extras.append(f"parameter={self.parameter}")
        if self.value is not None:
            extras.append(f"value={self.value}")
        return f"{base} ({', '.join(extras)})" if extras else base

    def http(self) -> SimHTTPError:
        """The 400 the serving layer answers for it (``create_error_response``)."""
        return bad_request(str(self), self.parameter)


# ------------------------------------------------------------------ layer 1: the request model


def check_raw_chat(data: dict[str, Any]) -> dict[str, Any]:
    """The chat request model's before-validators; may set ``tool_choice`` to "auto".

    Pydantic runs a model's ``mode="before"`` validators last-defined first, so vLLM's run
    ``check_tool_usage``, ``check_structured_outputs_count``, ``check_logprobs``,
    ``validate_stream_options``, ``validate_response_format`` in that order: the first to
    fail answers."""
    _check_tool_usage(data)
    _check_structured_outputs_count(data)
    for name in ("prompt_logprobs", "top_logprobs"):
        value = data.get(name)
        if value is not None and not isinstance(value, int | float):
            raise VLLMValidationError(f"`{name}` must be an integer.", parameter=name, value=value)
    top = data.get("top_logprobs")
    if top is not None:
        if top < 0 and top != -1:
            raise VLLMValidationError(
                "`top_logprobs` must be a positive value or -1.",
                parameter="top_logprobs",
                value=top,
            )
        if (top == -1 or top > 0) and not data.get("logprobs"):
            raise VLLMValidationError(
                "when using `top_logprobs`, `logprobs` must be set to true.",
                parameter="top_logprobs",
            )
    if data.get("stream_options") and not data.get("stream"):
        raise VLLMValidationError(
            "Stream options can only be defined when `stream=True`.", parameter="stream_options"
        )
    _check_response_format(data)
    return data


def _check_response_format(data: dict[str, Any]) -> None:
    """``validate_response_format``: a json_schema format must carry its ``json_schema``."""
    response_format = data.get("response_format")
    if (
        isinstance(response_format, dict)
        and response_format.get("type") == "json_schema"
        and response_format.get("json_schema") is None
    ):
        raise VLLMValidationError(
            "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
            parameter="response_format",
        )


def _check_structured_outputs_count(data: dict[str, Any]) -> None:
    """``check_structured_outputs_count``: one kind of constraint, and none beside a named
    tool (``tool_choice`` is already "auto" when tools came without one)."""
    constraints = data.get("structured_outputs")
    if not isinstance(constraints, dict):
        return
    count = sum(constraints.get(k) is not None for k in ("json", "regex", "choice"))
    if count > 1:
        raise VLLMValidationError(
            "You can only use one kind of constraints for structured outputs "
            "('json', 'regex' or 'choice')."
        )
    if count > 0 and data.get("tool_choice", "none") not in ("none", "auto", "required"):
        raise VLLMValidationError(
            "You can only either use constraints for structured outputs or tools, not both."
        )


def _check_tool_usage(data: dict[str, Any]) -> None:
    if data.get("tools") == []:
        raise VLLMValidationError(
            "`tools` must not be an empty array. "
            "Either provide at least one tool or omit the field entirely.",
            parameter="tools",
        )
    if "tool_choice" not in data and data.get("tools"):
        data["tool_choice"] = "auto"
    choice = data.get("tool_choice")
    if choice is None or choice == "none":
        return
    if data.get("tools") is None:
        raise VLLMValidationError(
            "When using `tool_choice`, `tools` must be set.", parameter="tool_choice"
        )
    if choice not in ("auto", "required") and not isinstance(choice, dict):
        raise VLLMValidationError(
            f"Invalid value for `tool_choice`: {choice}! "
            'Only named tools, "none", "auto" or "required" are supported.',
            parameter="tool_choice",
        )
    if not isinstance(choice, dict):
        return
    usage = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'
    function = choice.get("function")
    if not isinstance(function, dict):
        raise VLLMValidationError(
            f"Invalid value for `function`: `{function}` in `tool_choice`! {usage}",
            parameter="tool_choice.function",
        )
    if "name" not in function:
        raise VLLMValidationError(
            f"Expected field `name` in `function` in `tool_choice`! {usage}",
            parameter="tool_choice.function.name",
        )
    name = function["name"]
    if not isinstance(name, str) or not name:
        raise VLLMValidationError(
            f"Invalid `name` in `function`: `{name}` in `tool_choice`! {usage}",
            parameter="tool_choice.function.name",
        )
    names = [((t or {}).get("function") or {}).get("name") for t in data.get("tools") or []]
    if name not in names:
        raise VLLMValidationError(
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
            parameter="tool_choice",
        )


# ------------------------------------------------------------- the validation handler's text

_BRACKETED = re.compile(r"[\[\]{}()]")
_INTERNAL_LOC = frozenset(
    [
        "function-wrap",
        "function-after",
        "function-before",
        "function-plain",
        "json-or-python",
        "lax-or-strict",
        "chain",
        "default",
        "nullable",
        "tagged-union",
        "union",
        "call",
        "arguments",
        "is-instance",
        "is-subclass",
        "callable",
        "str",
        "int",
        "float",
        "bool",
        "bytes",
        "bytearray",
        "list",
        "tuple",
        "dict",
        "set",
        "frozenset",
        "complex",
        "none",
        "nonetype",
    ]
)
_MAX_REPORTED = 10
_MAX_INPUT_CHARS = 200
_MAX_ERROR_CHARS = 1000


def clean_loc(loc: Sequence[Any]) -> str:
    """A pydantic ``loc`` as vLLM's dotted ``param``, without pydantic's internal markers."""
    parts = [
        str(p) for p in loc if not (_BRACKETED.search(str(p)) or str(p).lower() in _INTERNAL_LOC)
    ]
    return ".".join(parts) if parts else ".".join(str(p) for p in loc)


def _summarize(value: object) -> object:
    if isinstance(value, str):
        return value[:_MAX_INPUT_CHARS] + "...[truncated]" if len(value) > 200 else value
    if isinstance(value, bytes | bytearray):
        return f"<{type(value).__name__} of {len(value)} bytes>"
    if isinstance(value, list | tuple | set | frozenset | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = str(value)
    return text[:_MAX_INPUT_CHARS] + "...[truncated]" if len(text) > _MAX_INPUT_CHARS else text


def _format_error(err: object) -> str:
    if not isinstance(err, Mapping):
        return str(err)
    shown = dict(err)
    if "input" in shown:
        shown["input"] = _summarize(shown["input"])
    if isinstance(shown.get("loc"), tuple | list):
        shown["loc"] = clean_loc(tuple(shown["loc"]))
    text = str(shown)
    return text[:_MAX_ERROR_CHARS] + "...[truncated]" if len(text) > _MAX_ERROR_CHARS else text


def validation_answer(errors: Sequence[object]) -> tuple[str, str | None]:
    """(message, param) of vLLM's 400 for a request that failed its model's validation."""
    param = None
    for err in errors:
        ctx = err.get("ctx") if isinstance(err, Mapping) else None
        ctx_error = ctx.get("error") if isinstance(ctx, Mapping) else None
        if isinstance(ctx_error, VLLMValidationError):
            param = ctx_error.parameter
            break
    first = errors[0] if errors else None
    if param is None and isinstance(first, Mapping) and first.get("loc"):
        param = clean_loc(first["loc"])
    if not errors:
        return "Validation error", param
    label = "error" if len(errors) == 1 else "errors"
    shown = errors[:_MAX_REPORTED]
    message = f"{len(errors)} validation {label}:\n"
    message += "".join(f"  {_format_error(err)}\n" for err in shown)
    if len(errors) > len(shown):
        message += f"  ...and {len(errors) - len(shown)} more {label}\n"
    return message.rstrip(), param


# --------------------------------------------------------- layer 2: the renderer and the clamp


UNSUPPORTED_MEDIA_TYPE = "Unsupported Media Type: Only 'application/json' is allowed"
"""``validate_json_request`` (``serve/utils/api_utils.py``), a dependency of the generate routes."""


def tool_flags_error(
    tool_choice: Any, *, enable_auto_tool_choice: bool, tool_call_parser: str | None
) -> SimHTTPError | None:
    """``online_renderer.py``'s answer when the server's tool flags cannot serve the choice."""
    if tool_call_parser is not None or tool_choice in (None, "none"):
        return None
    if tool_choice == "auto":
        if enable_auto_tool_choice:
            return None
        return bad_request(
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        )
    if isinstance(tool_choice, dict):
        desc = f'function "{(tool_choice.get("function") or {}).get("name")}"'
    else:
        desc = f'"{tool_choice}"'
    return bad_request(f"tool_choice={desc} requires --tool-call-parser to be set")


def output_limit(
    *,
    flavour: str,
    max_model_len: int,
    prompt_tokens: int,
    max_tokens: int | None,
    max_completion_tokens: int | None,
) -> int:
    """The sampling ``max_tokens`` vLLM runs the request with, or its 400.

    0.33: ``max_tokens`` above the window and a prompt over the window alone are refused;
    otherwise ``max_tokens`` is clamped to the room left (``get_max_tokens``). 0.26 refused
    prompt + max_tokens over the window with the older sentence.
    """
    if max_completion_tokens is not None:
        requested, param = max_completion_tokens, "max_completion_tokens"
    else:
        requested, param = max_tokens, "max_tokens"
    if requested is not None and requested > max_model_len:
        total = "max_model_len" if flavour == "0.33" else "max_model_len=max_total_tokens"
        raise VLLMValidationError(
            f"{param}={requested} cannot be greater than {total}={max_model_len}. "
            "Please request fewer output tokens.",
            parameter=param,
            value=requested,
        )
    if flavour == "0.26":
        wanted = requested if requested is not None and requested > 0 else 0
        max_input = max_model_len - wanted
        if prompt_tokens > max_input:
            reported = min(prompt_tokens, max_input + 1)
            raise VLLMValidationError(
                f"This model's maximum context length is {max_model_len} tokens. However, you "
                f"requested {wanted} output tokens and your prompt contains at least {reported} "
                f"input tokens, for a total of at least {reported + wanted} tokens. Please reduce "
                "the length of the input prompt or the number of requested output tokens.",
                parameter="input_tokens",
                value=reported,
            )
    elif prompt_tokens > max_model_len:
        reported = min(prompt_tokens, max_model_len + 1)  # tokenized up to the limit + 1
        qualifier = "at least " if reported == max_model_len + 1 else ""
        raise VLLMValidationError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt contains {qualifier}{reported} input tokens, which exceeds this limit even "
            "without any output tokens. Please reduce the length of the input prompt.",
            parameter="input_tokens",
            value=reported,
        )
    room = max_model_len - prompt_tokens
    return room if requested is None else min(room, requested)


# --------------------------------------------------------------- layer 3: the sampling params


def check_sampling(body: Any, max_tokens: int) -> None:
    """``SamplingParams._verify_args`` on the request's values, in vLLM's order."""
    n = 1 if body.n is None else body.n
    if n < 1:
        raise VLLMValidationError(f"n must be at least 1, got {n}.")
    if n > MAX_N_SEQUENCES:
        raise VLLMValidationError(
            f"n must be at most {MAX_N_SEQUENCES}, got {n}. "
            "To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable."
        )
    presence = _float(body.presence_penalty, 0.0)
    frequency = _float(body.frequency_penalty, 0.0)
    repetition = _float(body.repetition_penalty, 1.0)
    temperature = _float(body.temperature, 1.0)
    top_p = _float(body.top_p, 1.0)
    if not -2.0 <= presence <= 2.0:
        raise VLLMValidationError(f"presence_penalty must be in [-2, 2], got {presence}.")
    if not -2.0 <= frequency <= 2.0:
        raise VLLMValidationError(f"frequency_penalty must be in [-2, 2], got {frequency}.")
    if not math.isfinite(repetition):
        raise VLLMValidationError(f"repetition_penalty must be a finite number, got {repetition}.")
    if repetition <= 0.0:
        raise VLLMValidationError(
            f"repetition_penalty must be greater than zero, got {repetition}."
        )
    for problem in (
        not math.isfinite(temperature)
        and f"temperature must be a finite number, got {temperature}.",
        temperature < 0.0 and f"temperature must be non-negative, got {temperature}.",
        temperature > 2.0 and f"temperature must be in [0, 2], got {temperature}.",
    ):
        if problem:
            raise VLLMValidationError(problem, parameter="temperature", value=temperature)
    if not 0.0 < top_p <= 1.0:
        raise VLLMValidationError(
            f"top_p must be in (0, 1], got {top_p}.", parameter="top_p", value=top_p
        )
    top_k = body.top_k
    if top_k is not None and top_k < -1:
        raise VLLMValidationError(f"top_k must be 0 (disable), or at least 1, got {top_k}.")
    min_p = _float(body.min_p, 0.0)
    if not 0.0 <= min_p <= 1.0:
        raise VLLMValidationError(f"min_p must be in [0, 1], got {min_p}.")
    if max_tokens < 1:
        raise VLLMValidationError(
            f"max_tokens must be at least 1, got {max_tokens}.",
            parameter="max_tokens",
            value=max_tokens,
        )
    interval = body.stream_interval
    if interval is not None and interval < 1:
        raise VLLMValidationError(
            f"stream_interval must be at least 1, got {interval}.",
            parameter="stream_interval",
            value=interval,
        )


def _float(value: Any, default: float) -> float:
    return default if value is None else float(value)


async def handle_validation_error(_request: Request, exc: Exception) -> JSONResponse:
    """Malformed requests: vLLM answers 400 (not FastAPI's 422) with type "Bad Request" and
    the errors listed as its handler formats them (``validation_answer``)."""
    assert isinstance(exc, RequestValidationError)
    message, param = validation_answer(list(exc.errors()))
    body = error_body(message, HTTPStatus.BAD_REQUEST.phrase, 400, param)
    return JSONResponse(body, status_code=400)
