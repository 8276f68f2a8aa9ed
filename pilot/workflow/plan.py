"""RunPlan: what the loop needs from a workflow, rendered for one run, and ``build_plan``.

The loop depends on this small plain structure, not on the YAML schema, so the workflow format
can grow without touching the loop, and tests and benchmarks can build plans directly. The
plan's defaults are read from the schema, so each default is written once.

``build_plan`` is the one place a loaded workflow becomes a plan: it renders the templates
once (``render_run``), reads the brain profile at most once (for the endpoint and for what
the server accepts as images) and resolves the endpoints (command line, workflow, fleet or
profile). It starts nothing and writes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from pilot.agent.images import MediaPlan
from pilot.errors import ConfigurationError
from pilot.model.settings import ClientSettings
from pilot.workflow.load import LoadedWorkflow
from pilot.workflow.render import render_run
from pilot.workflow.schema import (
    ModelSettings,
    NotifySettings,
    Phase,
    RunLimits,
    Workflow,
    check_endpoint_url,
)

if TYPE_CHECKING:
    from brain.spec import ServerSpec

EndpointOverride = str | Sequence[str] | None
"""Endpoints given on the command line instead of the workflow's (see :func:`split_endpoints`)."""

DEFAULT_SYSTEM = (
    "You are a careful software engineer working alone, unattended, in a git repository. "
    "Work only through the tools. Keep each step small and verify it. Nobody will answer "
    "questions: when unsure, choose the safest reasonable option, note the assumption, and "
    "go on. When the current phase's task is done, call `finish` with a short summary."
)


def schema_default(section: type[BaseModel], name: str) -> Any:
    """The workflow schema's default for ``<section>.<name>``: the one place each default
    lives (a default factory's value, as a tuple where the plan keeps a tuple)."""
    value = section.model_fields[name].get_default(call_default_factory=True)
    return tuple(value) if isinstance(value, list) else value


def _model_default(name: str) -> Any:
    return schema_default(ModelSettings, name)


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
    check_timeout: float = schema_default(Phase, "check_timeout")
    max_attempts: int = schema_default(Phase, "max_attempts")
    max_no_progress_steps: int | None = None
    """The phase's own ``limits.max_no_progress_steps``; None: the run's applies."""
    images: tuple[str, ...] = ()
    """Workspace paths of images attached to the prompt (rendered ``images:``)."""
    context: tuple[str, ...] = ()
    """Rendered ``context:`` commands, run as the phase starts; their output goes in its
    prompt."""
    locate: bool = schema_default(Phase, "locate")
    """Show the functions the context commands' failures call (see ``pilot.tactics.locate``)."""
    require_change: bool = schema_default(Phase, "require_change")
    """The phase is done only if the workspace differs from the phase's start (and the check
    passes): a phase whose job is to change code cannot succeed by doing nothing."""
    check_after_edit: bool = schema_default(Phase, "check_after_edit")
    """Run the check after each successful file edit too; the phase ends once it passes."""
    retry_fresh: bool = schema_default(Phase, "retry_fresh")
    """A refused edit or a failed check undoes the try and asks again from the prompt."""


@dataclass(frozen=True)
class ModelPlan:
    """The workflow's ``model`` settings for one run. Sampling fields left None are not sent
    (the server's own defaults apply)."""

    endpoint: str
    name: str = "auto"
    client: ClientSettings = field(default_factory=ClientSettings)
    """How the client carrying this plan's requests talks to the server (the key, timeouts,
    ``server_wait``); with the endpoints, what a process's client cache keys on."""
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    max_tokens: int = _model_default("max_tokens")
    context_margin: int = _model_default("context_margin")
    context_window: int | None = None
    """``model.context_window``: the window to budget with, whatever the server says."""
    stream_interval: int | None = None
    """Tokens per streamed chunk asked of vLLM (None: the server's setting)."""
    tool_calls: str = "auto"
    """``model.tool_calls``: the call mode pinned by the workflow, or auto (measured per model,
    ``pilot.agent.call_modes``)."""
    endpoints: tuple[str, ...] = ()
    """Several servers of one model, routed per run (``pilot.model.router``); ``endpoint`` is then
    the first of them. Empty: ``endpoint`` is the only one."""

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
    """The command run when a run ends (``pilot.run.notify``), and for which endings."""

    command: str
    on: tuple[str, ...] = schema_default(NotifySettings, "on")
    timeout: float = schema_default(NotifySettings, "timeout")


@dataclass(frozen=True)
class RunPlan:
    workflow_name: str
    system: str
    phases: list[PhasePlan]
    tools: list[str]
    model: ModelPlan
    workspace: str
    """Where the run works: its own worktree (``pilot.workspace.snapshot.add_worktree``) or, in
    place, the checkout itself."""
    branch: str
    init_workspace: bool = False
    source: str = ""
    """The user's checkout the run's worktree is made from ("": ``workspace`` itself)."""
    in_place: bool = False
    carry_changes: bool = False
    tool_settings: dict[str, dict] = field(default_factory=dict)
    env_allowlist: list[str] = field(default_factory=list)
    sandbox: Literal["auto", "bwrap", "none"] = schema_default(Workflow, "sandbox")
    limits: Limits = Limits()
    max_no_progress_steps: int = schema_default(RunLimits, "max_no_progress_steps")
    redact: list[str] = field(default_factory=list)
    """The workflow's own redaction regexes, on top of pilot.redact's defaults."""
    media: MediaPlan = field(default_factory=MediaPlan)
    """How images reach the server (see ``pilot.agent.images``)."""
    notify: NotifyPlan | None = None
    """The workflow's end-of-run command; None: the user's ``$MARATHON_NOTIFY``, if any."""

    def phase_header(self, index: int) -> str:
        return f"Phase {index + 1}/{len(self.phases)}: {self.phases[index].name}"


# -- building ---------------------------------------------------------------------------------


def build_plan(
    loaded: LoadedWorkflow,
    run_id: str,
    *,
    started_at: str = "",
    endpoint: EndpointOverride = None,
    workspace: str | None = None,
    check_env: bool = True,
) -> RunPlan:
    """Render everything the run needs from the workflow, once its id is known.

    ``endpoint``: the command line's endpoints, instead of the workflow's; ``workspace``:
    where the run works when not in the rendered ``workspace.path`` (its worktree);
    ``check_env=False``: an API key variable not set here is not an error (``pilot validate``).
    """
    wf = loaded.workflow
    model = wf.model
    rendered = render_run(loaded, run_id, started_at=started_at, workspace=workspace)
    api_key = None
    if model.api_key_env:
        api_key = os.environ.get(model.api_key_env)
        if not api_key and check_env:
            raise ConfigurationError(
                f"model.api_key_env names {model.api_key_env}, which is not set; export it "
                "with the server's API key"
            )
    # The profile describes the server only when the command line names none.
    given = split_endpoints(endpoint)
    server = _load_profile(model.profile) if model.profile and not given else None
    targets = model_targets(model, endpoint, server)
    phases = [
        PhasePlan(
            name=phase.name,
            prompt=text.prompt,
            tools=wf.phase_tools(index),
            limits=Limits(
                max_steps=phase.limits.max_steps,
                max_wall_time=phase.limits.max_wall_time,
                max_tokens=phase.limits.max_tokens,
            ),
            check=text.check,
            check_timeout=phase.check_timeout,
            max_attempts=phase.max_attempts,
            max_no_progress_steps=phase.limits.max_no_progress_steps,
            images=text.images,
            context=text.context,
            locate=phase.locate,
            require_change=phase.require_change,
            check_after_edit=phase.check_after_edit,
            retry_fresh=phase.retry_fresh,
        )
        for index, (phase, text) in enumerate(zip(wf.phases, rendered.phases, strict=True))
    ]
    settings = {name: s.model_dump(exclude_none=True) for name, s in wf.tool_settings.items() if s}
    return RunPlan(
        workflow_name=wf.name,
        system=rendered.system or DEFAULT_SYSTEM,
        phases=phases,
        tools=wf.tool_names,
        model=ModelPlan(
            endpoint=targets[0],
            endpoints=targets if len(targets) > 1 else (),
            name=model.name,
            client=ClientSettings.of(model, api_key),
            temperature=model.temperature,
            top_p=model.top_p,
            seed=model.seed,
            max_tokens=model.max_tokens,
            context_margin=model.context_margin,
            context_window=model.context_window,
            stream_interval=model.stream_interval,
            tool_calls=model.tool_calls,
        ),
        workspace=rendered.run.workspace,
        branch=rendered.run.branch,
        init_workspace=wf.workspace.init,
        source=str(rendered.source),
        in_place=wf.workspace.in_place,
        carry_changes=wf.workspace.carry_changes,
        tool_settings=settings,
        env_allowlist=list(wf.env_allowlist),
        sandbox=wf.sandbox,
        limits=Limits(
            max_steps=wf.limits.max_steps,
            max_wall_time=wf.limits.max_wall_time,
            max_tokens=wf.limits.max_tokens,
        ),
        max_no_progress_steps=wf.limits.max_no_progress_steps,
        redact=list(wf.redact),
        notify=(
            NotifyPlan(wf.notify.command, tuple(wf.notify.on), wf.notify.timeout)
            if wf.notify is not None
            else None
        ),
        media=media_plan(model.vision, server),
    )


def media_plan(vision: bool | None, server: ServerSpec | None) -> MediaPlan:
    """What the run knows about images: the workflow's ``model.vision``, else the profile's
    (``limit_mm_per_prompt: {image: 0}`` means none); the ServerSpec when the brain manages
    the server, so file:// paths can be mapped into it (see ``pilot.agent.images``)."""
    if server is None:
        return MediaPlan(vision=vision)
    limits = server.limit_mm_per_prompt or {}
    if vision is None and limits.get("image") == 0:
        vision = False
    return MediaPlan(vision=vision, server=server)


def split_endpoints(value: EndpointOverride) -> list[str]:
    """``--endpoint`` values: given several times, comma-separated, or both."""
    items = [value] if isinstance(value, str) else list(value or ())
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def model_targets(
    model: ModelSettings, override: EndpointOverride = None, server: ServerSpec | None = None
) -> tuple[str, ...]:
    """The endpoints a run may use: the command line's, else the workflow's ``endpoint`` or
    ``endpoints``, else the running replicas of its brain ``fleet``, else its brain profile's
    (``server``, when already loaded). Two or more are routed (``pilot.model.router``).
    """
    given = split_endpoints(override)
    if given:
        try:
            urls = [check_endpoint_url(url) for url in given]
        except ValueError as exc:
            raise ConfigurationError(f"--endpoint: {exc}") from None
        return tuple(dict.fromkeys(urls))
    if model.endpoints:
        return tuple(model.endpoints)
    if model.fleet:
        return _fleet_endpoints(model.fleet)
    if model.endpoint:
        return (model.endpoint,)
    if model.profile is None:
        raise ConfigurationError("the workflow's model section names no endpoint or profile")
    spec = server or _load_profile(model.profile)
    host = "127.0.0.1" if spec.host in ("0.0.0.0", "::") else spec.host
    return (f"http://{host}:{spec.port}/v1",)


def _fleet_endpoints(name: str) -> tuple[str, ...]:
    from brain.errors import BrainError
    from brain.fleet.plan import fleet_endpoints

    try:
        return tuple(fleet_endpoints(name))
    except BrainError as exc:
        raise ConfigurationError(f"model.fleet {name!r}: {exc}") from None


def _load_profile(profile: str) -> ServerSpec:
    from brain.profiles import load_profile

    return load_profile(profile)
