"""How a model client talks to its server, as one frozen value.

The same value is the client's constructor argument and, with the URL, the key under which a
process shares one client between its runs: a setting added here reaches both, and two runs
share a client only when they would have made the same one. The defaults are the workflow
schema's (``model.*``), read from it, so each is written once.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from pilot.workflow.schema import ModelSettings

__all__ = ["ClientSettings"]


def _schema_default(name: str) -> Any:
    return ModelSettings.model_fields[name].default


@dataclass(frozen=True)
class ClientSettings:
    """The model client's settings; every field but ``api_key`` is the workflow's
    ``model.<field>`` of the same name (:meth:`of` copies them by name)."""

    api_key: str | None = None
    """The bearer sent (``model.api_key_env``'s value); None sends a placeholder."""
    request_timeout: float = _schema_default("request_timeout")
    """Bounds one whole attempt (send to end of stream; also each network operation and the
    non-streamed calls): past it the attempt is abandoned and retried, so it must exceed the
    slowest legitimate generation (max_tokens at the server's worst speed)."""
    idle_timeout: float = _schema_default("idle_timeout")
    """The stream's watchdog: no chunk for this long (from sending the request, so it must
    cover the prefill of a long prompt) and the stream is cut and the request retried."""
    server_wait: float = _schema_default("server_wait")
    """The total time one call may spend waiting for the server across retries before
    ``ServerUnavailable`` is raised."""

    @classmethod
    def of(cls, model: ModelSettings, api_key: str | None) -> ClientSettings:
        """The settings a workflow's ``model`` section asks for (``api_key``: its variable's
        value, read by the caller)."""
        named = {f.name: getattr(model, f.name) for f in fields(cls) if f.name != "api_key"}
        return cls(api_key=api_key, **named)
