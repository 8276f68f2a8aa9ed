"""RunPlan: what the loop needs from a workflow, rendered for one run.

The loop depends on this small plain structure, not on the YAML schema, so the workflow format
can grow without touching the loop, and tests and benchmarks can build plans directly. The
plan's defaults are read from the schema, so each default is written once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pilot.images import MediaPlan
from pilot.workflow.schema import ModelSettings


def _schema_default(name: str) -> Any:
    """The workflow schema's default for ``model.<name>``: the one place each default lives."""
    return ModelSettings.model_fields[name].default


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
    require_change: bool = False
    """The phase is done only if the workspace differs from the phase's start (and the check
    passes): a phase whose job is to change code cannot succeed by doing nothing."""


@dataclass(frozen=True)
class ClientSettings:
    """How a model client talks to its server: its constructor's keywords (``kwargs``) and,
    with the URL, the key under which a process shares one client between runs. One frozen
    value, so a setting added here reaches both the client and the key."""

    api_key: str | None = None
    request_timeout: float = _schema_default("request_timeout")
    idle_timeout: float = _schema_default("idle_timeout")
    server_wait: float = _schema_default("server_wait")

    def kwargs(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ModelPlan:
    """The workflow's ``model`` settings for one run. Sampling fields left None are not sent
    (the server's own defaults apply)."""

    endpoint: str
    name: str = "auto"
    api_key: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    max_tokens: int = _schema_default("max_tokens")
    request_timeout: float = _schema_default("request_timeout")
    idle_timeout: float = _schema_default("idle_timeout")
    server_wait: float = _schema_default("server_wait")
    context_margin: int = _schema_default("context_margin")
    context_window: int | None = None
    """``model.context_window``: the window to budget with, whatever the server says."""
    stream_interval: int | None = None
    """Tokens per streamed chunk asked of vLLM (None: the server's setting)."""
    endpoints: tuple[str, ...] = ()
    """Several servers of one model, routed per run (``pilot.model.router``); ``endpoint`` is then
    the first of them. Empty: ``endpoint`` is the only one."""

    @property
    def client(self) -> ClientSettings:
        """The settings of the client that carries this plan's requests."""
        return ClientSettings(
            api_key=self.api_key,
            request_timeout=self.request_timeout,
            idle_timeout=self.idle_timeout,
            server_wait=self.server_wait,
        )

    @property
    def sampling(self) -> dict[str, Any]:
        """The OpenAI-standard sampling fields of every request (``ChatRequest`` keywords)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}

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
    """Where the run works: its own worktree (``pilot.snapshot.add_worktree``) or, in place,
    the checkout itself."""
    branch: str
    init_workspace: bool = False
    source: str = ""
    """The user's checkout the run's worktree is made from ("": ``workspace`` itself)."""
    in_place: bool = False
    carry_changes: bool = False
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
