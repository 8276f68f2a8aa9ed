"""RunPlan: what the loop needs from a workflow, rendered for one run.

The loop depends on this small plain structure, not on the YAML schema, so the workflow format
can grow without touching the loop, and tests and benchmarks can build plans directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pilot.images import MediaPlan


@dataclass(frozen=True)
class Limits:
    max_steps: int | None = None
    max_wall_time: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class PhasePlan:
    name: str
    prompt: str
    tools: list[str]
    limits: Limits = Limits()
    check: str | None = None
    check_timeout: float = 600.0
    max_attempts: int = 3
    images: tuple[str, ...] = ()
    """Workspace paths of images attached to the prompt (rendered ``images:``)."""


@dataclass(frozen=True)
class ModelPlan:
    endpoint: str
    name: str = "auto"
    api_key: str | None = None
    temperature: float | None = None
    max_tokens: int = 2048
    request_timeout: float = 600.0
    idle_timeout: float = 120.0
    server_wait: float = 1800.0
    context_margin: int = 256
    stream_interval: int | None = None
    """Tokens per streamed chunk asked of vLLM (None: the server's setting)."""
    endpoints: tuple[str, ...] = ()
    """Several servers of one model, routed per run (``pilot.router``); ``endpoint`` is then
    the first of them. Empty: ``endpoint`` is the only one."""

    @property
    def extra_body(self) -> dict[str, Any]:
        """Request fields beyond the OpenAI API's own (vLLM's)."""
        return {"stream_interval": self.stream_interval} if self.stream_interval else {}

    @property
    def targets(self) -> tuple[str, ...]:
        """Every endpoint the run may use, in order."""
        return self.endpoints or (self.endpoint,)


@dataclass(frozen=True)
class NotifyPlan:
    """The command run when a run ends (``pilot.notify``), and for which endings."""

    command: str
    on: tuple[str, ...] = ("succeeded", "failed", "limit", "cancelled", "paused")
    timeout: float = 30.0


@dataclass(frozen=True)
class RunPlan:
    workflow_name: str
    system: str
    phases: list[PhasePlan]
    tools: list[str]
    model: ModelPlan
    workspace: str
    branch: str
    init_workspace: bool = False
    tool_settings: dict[str, dict] = field(default_factory=dict)
    env_allowlist: list[str] = field(default_factory=list)
    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    limits: Limits = Limits()
    max_no_progress_steps: int | None = None
    redact: list[str] = field(default_factory=list)
    """The workflow's own redaction regexes, on top of pilot.redact's defaults."""
    media: MediaPlan = field(default_factory=MediaPlan)
    """How images reach the server (see ``pilot.images``)."""
    notify: NotifyPlan | None = None
    """The workflow's end-of-run command; None: the user's ``$MARATHON_NOTIFY``, if any."""

    def phase_header(self, index: int) -> str:
        return f"Phase {index + 1}/{len(self.phases)}: {self.phases[index].name}"
