"""vLLM's error bodies and status codes, built in one place so every path answers alike.

Shape: ``{"error": {"message", "type", "param", "code"}}`` with HTTP status == code, except
the auth middleware's bare ``{"error": "Unauthorized"}`` and FastAPI's ``{"detail": "Not Found"}``
for unknown routes, both of which vLLM also sends as they are. Texts follow vLLM's source
(``vllm/entrypoints/serve/exception_handling``, ``vllm/exceptions.py``, ``renderers/params.py``).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import JSONResponse

if TYPE_CHECKING:
    from brain.sim.config import SimConfig

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


def check_served_model(config: SimConfig, name: str | None) -> None:
    """vLLM's model check: a request naming a model the server does not serve is a 404."""
    if name is not None and name not in config.served_names:
        raise model_not_found(name, config.served_names, config.vllm_version)


def model_not_found(name: str | None, served: list[str], flavour: str = "0.33") -> SimHTTPError:
    """vLLM's 404 (``serve/engine/serving.py``); 0.33 lists the served names, 0.26 did not."""
    message = f"The model `{name}` does not exist."
    if flavour != "0.26":
        message += f" Valid aliases: {', '.join(served)}."
    return SimHTTPError(404, message, "NotFoundError", "model")


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
