"""vLLM's error bodies and status codes, built in one place so every path answers alike.

Shape: ``{"error": {"message", "type", "param", "code"}}`` with HTTP status == code, except
the auth middleware's bare ``{"error": "Unauthorized"}`` and FastAPI's ``{"detail": "Not Found"}``
for unknown routes, both of which vLLM also sends as they are. Texts follow vLLM's source
(``vllm/entrypoints/serve/exception_handling``, ``vllm/exceptions.py``, ``renderers/params.py``).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
GENERATION_FAILED_MESSAGE = "Internal server error (simulated failure during generation)."
QUEUE_FULL_MESSAGE = (
    "The engine is currently busy and cannot accept new requests. "
    "Please try again later or on a different instance."
)


class SimHTTPError(Exception):
    """An error the sim answers with vLLM's JSON body; raised anywhere in a request handler."""

    def __init__(self, status: int, message: str, err_type: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.err_type, self.status, self.param)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def model_not_found(name: str | None) -> SimHTTPError:
    return SimHTTPError(404, f"The model `{name}` does not exist.", "NotFoundError", "model")


def context_overflow(max_model_len: int, max_tokens: int, prompt_tokens: int) -> SimHTTPError:
    """vLLM's 400 when prompt + requested output exceed the context.

    vLLM tokenizes at most (max_model_len - max_tokens + 1) prompt tokens, so the prompt size it
    reports is that lower bound ("at least"), never the true count; the sim does the same.
    """
    max_input = max_model_len - max_tokens
    reported = min(prompt_tokens, max_input + 1) if max_input >= 0 else prompt_tokens
    message = (
        f"This model's maximum context length is {max_model_len} tokens. However, you requested "
        f"{max_tokens} output tokens and your prompt contains at least {reported} input tokens, "
        f"for a total of at least {reported + max_tokens} tokens. Please reduce the length of the "
        f"input prompt or the number of requested output tokens. "
        f"(parameter=input_tokens, value={reported})"
    )
    return SimHTTPError(400, message, "BadRequestError", "input_tokens")


def bad_request(message: str, param: str | None = None) -> SimHTTPError:
    return SimHTTPError(400, message, "BadRequestError", param)


def queue_full() -> SimHTTPError:
    """vLLM's QueueOverflowError (a GracefulHTTPError: type is the status phrase)."""
    return SimHTTPError(503, QUEUE_FULL_MESSAGE, HTTPStatus.SERVICE_UNAVAILABLE.phrase)


def engine_dead() -> SimHTTPError:
    return SimHTTPError(500, ENGINE_DEAD_MESSAGE, "InternalServerError")


def internal_error(message: str = "Internal server error (simulated fault).") -> SimHTTPError:
    return SimHTTPError(500, message, "InternalServerError")


async def handle_sim_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SimHTTPError)
    return exc.response()


async def handle_validation_error(_request: Request, exc: Exception) -> JSONResponse:
    """Malformed requests: vLLM answers 400 (not FastAPI's 422) with type "Bad Request"."""
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    param = None
    if errors and errors[0].get("loc"):
        param = ".".join(str(part) for part in errors[0]["loc"])
    label = "error" if len(errors) == 1 else "errors"
    lines = [f"{len(errors)} validation {label}:"]
    for err in errors[:10]:
        brief = {key: err.get(key) for key in ("type", "loc", "msg") if key in err}
        lines.append(f"  {brief}")
    message = "\n".join(lines) if errors else "Validation error"
    body = error_body(message, HTTPStatus.BAD_REQUEST.phrase, 400, param)
    return JSONResponse(body, status_code=400)
