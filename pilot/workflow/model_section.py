"""The workflow file's ``model`` section: which server and model answer, how to sample, how long
to wait. A section of ``pilot.workflow.schema`` (which names it), apart for its size.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    field_validator,
    model_validator,
)

from pilot.model.settings import client_default
from pilot.workflow.fields import DEFAULT_ENDPOINT, IDENT, Duration, Strict

# --------------------------------------------------------------------------- model


def check_endpoint_url(value: str) -> str:
    """An OpenAI base URL (``http(s)://host[:port]/...``), without its trailing slash."""
    if "{{" in value or "{%" in value:
        raise ValueError(
            f"endpoint {value!r} is not a template (only prompts, checks, system, workspace and "
            "images are); write the URL itself, or give it with `pilot run --endpoint URL`"
        )
    if not re.match(r"^https?://[^\s/]+", value):
        raise ValueError(f"endpoint {value!r} must be an http(s) URL like {DEFAULT_ENDPOINT!r}")
    from urllib.parse import urlsplit

    try:
        urlsplit(value).port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ValueError(
            f"endpoint {value!r} has a port that is not a number; write it like "
            f"{DEFAULT_ENDPOINT!r}"
        ) from None
    return value.rstrip("/")


EndpointURL = Annotated[str, AfterValidator(check_endpoint_url)]


class ModelSettings(Strict):
    """Which server and model answer, how to sample, and how long to wait for it."""

    endpoint: str | None = Field(
        None,
        description=(
            "OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1. "
            "At most one of endpoint/endpoints/profile; none means " + DEFAULT_ENDPOINT + "."
        ),
    )
    endpoints: list[EndpointURL] | None = Field(
        None,
        json_schema_extra={"minItems": 1},
        description=(
            "Several OpenAI-compatible base URLs serving the same model, instead of "
            "endpoint/profile. Each run sticks to one of them (the least loaded when it "
            "starts) while that server answers, and moves to another when it dies."
        ),
    )
    profile: str | None = Field(
        None, description="A brain profile name (e.g. gemma4-e4b-mtp); the pilot starts it."
    )
    fleet: str | None = Field(
        None,
        description="A running brain fleet (`brain up PROFILE --replicas N`): its replicas' "
        "endpoints, routed like `endpoints`.",
    )
    name: str = Field("auto", description="Served model name, or auto = first from /v1/models.")
    api_key_env: str | None = Field(
        None, description="Environment variable holding the API key, if the server wants one."
    )
    temperature: float = Field(0.2, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus sampling; null = server.")
    seed: int | None = Field(None, description="Sampling seed, for reproducible runs.")
    max_tokens: int = Field(2048, gt=0, description="Completion tokens per request.")
    request_timeout: Duration = Field(
        client_default("request_timeout"), description="Seconds for a whole request."
    )
    idle_timeout: Duration = Field(
        client_default("idle_timeout"),
        description="Seconds without a streamed byte before the stream is cut and retried.",
    )
    server_wait: Duration = Field(
        client_default("server_wait"),
        description="How long to keep waiting for a dead or restarting server.",
    )
    context_window: int | None = Field(
        None,
        ge=256,
        description="The served context window in tokens, overriding what the server says. "
        "For servers that report none (llama-cpp-python, LM Studio, Ollama before a model "
        "is loaded): set it to the server's --n_ctx / num_ctx so requests are budgeted from "
        "the first step.",
    )
    context_margin: int = Field(
        256, ge=0, description="Tokens kept free below the served max_model_len, for safety."
    )
    stream_interval: int | None = Field(
        None,
        ge=1,
        description="Tokens vLLM batches into each streamed chunk (its request field "
        "stream_interval, vLLM >= 0.33; the first and last chunks still come at once). 8-16 "
        "cuts the per-token HTTP work of server and pilot when many runs share a server; "
        "null = the server's --stream-interval (1 by default).",
    )
    vision: bool | None = Field(
        None,
        description="Whether the model takes images (view_image, phase images); null = ask "
        "the server profile, else try and learn from the server's answer.",
    )

    tool_calls: Literal["auto", "native", "forced", "text"] = Field(
        "auto",
        description="How the model's tool calls travel. auto: chosen per model from what the "
        "run measures (starts native, forces the answer after one with no call, moves to text "
        "when calls only ever come as text, and code to fenced blocks when code in JSON fails "
        "to parse). native: tools sent with tool_choice auto, calls read from the server's "
        "tool_calls. forced: the server constrains each answer to the phase's tools "
        "(tool_choice required, or named when one tool is allowed). text: no tools sent; the "
        "pilot states the call syntax in the system prompt and reads calls from the text.",
    )

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return check_endpoint_url(value) if value is not None else value

    @field_validator("endpoints")
    @classmethod
    def _not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError(
                "list at least one server, like [http://127.0.0.1:8000/v1, "
                "http://127.0.0.1:8001/v1]; or leave `endpoints` out"
            )
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not IDENT.match(value):
            raise ValueError(
                f"api_key_env {value!r} must be the *name* of an environment variable "
                "(like OPENAI_API_KEY), not the key itself"
            )
        return value

    @model_validator(mode="after")
    def _one_target(self) -> ModelSettings:
        # The targets are exclusive: endpoint, endpoints, fleet or profile (a fleet becomes
        # endpoints in pilot.workflow.plan.model_targets, when the run starts).
        if self.fleet is not None:
            other = next(
                (
                    key
                    for key in ("endpoint", "endpoints", "profile")
                    if getattr(self, key) is not None
                ),
                None,
            )
            if other is not None:
                raise ValueError(
                    f"give either `fleet` (a running brain fleet) or `{other}`, not both"
                )
            return self
        if self.endpoints is not None:
            other = next(
                (key for key in ("endpoint", "profile") if getattr(self, key) is not None), None
            )
            if other is not None:
                raise ValueError(
                    f"give either `endpoints` (several servers of one model) or `{other}`, not both"
                )
            return self
        if self.endpoint is not None and self.profile is not None:
            raise ValueError(
                "give either `endpoint` (a running server) or `profile` (a brain profile "
                "to start), not both"
            )
        if self.endpoint is None and self.profile is None:
            object.__setattr__(self, "endpoint", DEFAULT_ENDPOINT)
        return self
