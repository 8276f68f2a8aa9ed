"""The model wing: everything the pilot says to a model server and how it reads the answer.

Modules: ``types`` (the requests, responses and the ``ModelClient`` protocol, the seam the
loop depends on), ``settings`` (``ClientSettings``: how a client talks to its server, one
frozen value), ``client`` (the OpenAI-compatible client: streaming, retries while the server
is away), ``errors`` (which failures are waited out, and the one table mapping vLLM's error
answers to ``pilot.errors``), ``streaming`` (the wire, reassembled; its events are split by
``brain.sse``, the project's one event-stream reader), ``servers``
(what each local server tells about itself: its root, whether it is up, its window) and
``router`` (several servers of one model, one run pinned to one of them).

It must not decide anything about the conversation (compaction, repair, nudges): that is
the loop's. Importing this package imports nothing heavy: the loop and a resume only pay for
the OpenAI SDK when the first request is about to be sent.
"""

from __future__ import annotations

from pilot.model.types import (
    ChatRequest,
    ModelClient,
    ModelResponse,
    RetryPolicy,
    ServedModel,
    ToolCallOut,
    Usage,
    WaitEvent,
)

__all__ = [
    "ChatRequest",
    "ModelClient",
    "ModelResponse",
    "RetryPolicy",
    "ServedModel",
    "ToolCallOut",
    "Usage",
    "WaitEvent",
]
