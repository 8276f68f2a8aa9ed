"""How a model client talks to its server, as one frozen value.

The same value is the client's constructor argument and, with the URL, the key under which a
process shares one client between its runs: a setting added here reaches both, and two runs
share a client only when they would have made the same one. Its defaults are the ones the
workflow schema's ``model.*`` fields of the same names take (``pilot.workflow.schema`` reads
them here), so each is written once and the model wing needs nothing of the workflow's.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["ClientSettings", "client_default"]


@dataclass(frozen=True)
class ClientSettings:
    """The model client's settings; every field but ``api_key`` is the workflow's
    ``model.<field>`` of the same name (:meth:`of` copies them by name)."""

    api_key: str | None = None
    """The bearer sent (``model.api_key_env``'s value); None sends a placeholder."""
    request_timeout: float = 600.0
    """Bounds one whole attempt (send to end of stream; also each network operation and the
    non-streamed calls): past it the attempt is abandoned and retried, so it must exceed the
    slowest legitimate generation (max_tokens at the server's worst speed)."""
    idle_timeout: float = 120.0
    """The stream's watchdog: no chunk for this long (from sending the request, so it must
    cover the prefill of a long prompt) and the stream is cut and the request retried."""
    server_wait: float = 1800.0
    """The total time one call may spend waiting for the server across retries before
    ``ServerUnavailable`` is raised."""

    @classmethod
    def of(cls, model: Any, api_key: str | None) -> ClientSettings:
        """The settings a workflow's ``model`` section asks for: each field but ``api_key``
        copied by name (``api_key``: its variable's value, read by the caller)."""
        named = {f.name: getattr(model, f.name) for f in fields(cls) if f.name != "api_key"}
        return cls(api_key=api_key, **named)


def client_default(name: str) -> Any:
    """``ClientSettings``' default for ``name``: the workflow schema's too."""
    return ClientSettings.__dataclass_fields__[name].default
