"""The data the pilot exchanges with a model server, and the ``ModelClient`` seam.

Kept apart from ``pilot.model.client`` so the loop, the runner and tests can speak these types
without importing the OpenAI client. Plain data, one Protocol and the model-name check: no I/O here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from pilot.errors import ModelNotFound

__all__ = [
    "ChatRequest",
    "ModelClient",
    "ModelResponse",
    "RetryPolicy",
    "ServedModel",
    "ToolCallOut",
    "Usage",
    "WaitCallback",
    "WaitEvent",
    "resolve_model_name",
]


class ChatRequest(BaseModel):
    """One chat completion request, in OpenAI wire terms (messages and tools are plain dicts)."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Sent as-is alongside the standard fields (vLLM extras: top_k, chat_template_kwargs...)."""


class ToolCallOut(BaseModel):
    """A tool call as the server sent it. ``arguments`` is raw text: repair happens later."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str


class Usage(BaseModel):
    """The tokens of one answer, as the server counted them (or the pilot, ``estimated``);
    the same value is stored in the run's ``assistant_message`` events."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False
    """The server sent no usage (llama-cpp-python's streams): the pilot estimated the counts."""


class ModelResponse(BaseModel):
    """One assistant turn, assembled from the stream, with how long it took and how many tries."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallOut] = Field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    ttft_s: float | None = None
    """Seconds from sending the (successful) request to its first generated delta."""
    duration_s: float = 0.0
    """Seconds for the successful attempt, from send to the end of the stream."""
    attempts: int = 1
    endpoint: str | None = None
    """The base URL of the server that answered (several when ``model.endpoints`` routes)."""


class ServedModel(BaseModel):
    """A model the server serves, as ``GET /v1/models`` reports it."""

    id: str
    max_model_len: int | None = None
    window_source: str | None = None
    """Where the window was read, when not from ``/v1/models`` (see ``pilot.model.servers``)."""
    server: str | None = None
    """Which server said so ("vLLM", "llama.cpp", "Ollama"...), when its answers tell."""
    slots: int | None = None
    """llama-server's slots (``--parallel``): the window is one slot's."""


class WaitEvent(BaseModel):
    """Told to the caller when the server becomes unreachable and when it is back.

    ``kind="unavailable"``: the first transient failure of a request; ``error`` and ``attempt``
    say what happened. ``kind="back"``: the request succeeded after waiting ``waited_s`` seconds
    over ``attempts`` attempts. The run records these (``pilot.events.from_wait``).
    """

    kind: Literal["unavailable", "back"]
    error: str | None = None
    attempt: int = 1
    waited_s: float = 0.0
    attempts: int = 1


WaitCallback = Callable[[WaitEvent], Awaitable[None] | None]
"""Called (and awaited if it returns an awaitable) on :class:`WaitEvent`s."""


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried: exponential backoff with jitter, capped.

    The wait before retry n (from 0) is ``min(max_backoff, initial_backoff * 2**n + U(0, jitter))``.
    The total time spent waiting is bounded by the client's ``server_wait``; tests shrink all
    of these to keep every wait short.
    """

    initial_backoff: float = 1.0
    max_backoff: float = 60.0
    jitter: float = 1.0


@runtime_checkable
class ModelClient(Protocol):
    """The pilot's only way to the model: anything with these methods plugs in."""

    async def complete(
        self, request: ChatRequest, *, on_wait: WaitCallback | None = None
    ) -> ModelResponse:
        """Run one chat completion to its end, waiting out a server that is down."""
        ...

    async def list_models(self, *, on_wait: WaitCallback | None = None) -> list[ServedModel]:
        """The models the server serves, with their real context window when known."""
        ...

    async def count_tokens(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> int | None:
        """The prompt's token count as the server's tokenizer sees it; None if unsupported."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


async def resolve_model_name(
    client: ModelClient, configured: str, *, on_wait: WaitCallback | None = None
) -> ServedModel:
    """The served model to use: the first one for ``auto``, else the configured one if served.

    Here, not beside the HTTP client, so a run whose client needs no SDK never imports it.
    Raises :class:`ModelNotFound` (listing what is served) rather than letting the first
    completion fail with a 404 deep inside a run. ``on_wait`` hears about a server that is
    still down (so a run started before its server is up says why it waits).
    """
    served = await client.list_models(on_wait=on_wait)
    if configured == "auto":
        if not served:
            raise ModelNotFound("auto", [])
        return served[0]
    for model in served:
        if model.id == configured:
            return model
    raise ModelNotFound(configured, [m.id for m in served])
