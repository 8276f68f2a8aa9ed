"""The event types of a run: the run's only truth.

Everything else (the messages sent to the model, the live view, ``pilot show``, the report) is
derived from these by folding. Events are appended, never rewritten; a new field must have a
default so that older rows still parse (that is how a run paused under an older version resumes
under a newer one).
"""

from __future__ import annotations

import functools
import typing
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from pilot.agent.images import ImageRef
from pilot.model.types import Usage, WaitEvent
from tools.base import Artifact


def utcnow() -> datetime:
    return datetime.now(UTC)


class _Event(BaseModel):
    # defer_build: a class's validator is built when first used, not at import; a resume
    # meets a handful of the event types, and a process start paid for all of them.
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    at: datetime = Field(default_factory=utcnow)


class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    workflow: str
    params: dict[str, Any] = {}
    workspace: str
    branch: str
    base_head: str | None = None
    base_snapshot: str | None = None
    endpoint: str
    endpoints: list[str] = []
    """Every endpoint the run may be routed to (``model.endpoints``); empty = ``endpoint`` only."""
    system: str
    phases: list[str]
    owner: str
    repository: str | None = None
    """The user's checkout the run's worktree was added from (None: the run works in place)."""
    sandbox: str = ""
    """How the agent's commands are confined, in words (``pilot.run.confinement``): ``bwrap``,
    or ``none`` and why; empty for a run recorded before it was said."""


class ModelResolved(_Event):
    """The served model name and the real context window, as the server reported them."""

    type: Literal["model_resolved"] = "model_resolved"
    model: str
    max_model_len: int | None = None
    window_source: str | None = None
    """Where the window came from when not ``/v1/models``: a server's own endpoint, the
    ``model.context_window`` setting, a context error; or why it is unknown."""


class PhaseStarted(_Event):
    type: Literal["phase_started"] = "phase_started"
    index: int
    name: str
    prompt: str
    images: list[ImageRef] = []
    """Images attached to the prompt (the phase's ``images:``)."""


class ModelRequest(_Event):
    type: Literal["model_request"] = "model_request"
    step: int
    messages: int
    max_tokens: int | None = None
    prompt_tokens: int | None = None
    prompt_bound: bool = False
    """``prompt_tokens`` is an upper bound, not a count: far from the window's limits the
    bound proves the request fits and no ``/tokenize`` round trip is made."""
    temperature: float | None = None
    """Set when the request was sampled hotter than the workflow's temperature, because the
    model repeated the same call with the same result (``pilot.tactics.feedback.hotter``)."""


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str
    """The arguments text as sent back to the model (after any repair)."""
    raw_arguments: str | None = None
    """What the server sent, when a repair changed it."""
    error: str | None = None
    """Why the arguments could not be read at all (the call is answered with this error)."""


class AssistantMessage(_Event):
    type: Literal["assistant_message"] = "assistant_message"
    step: int
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = []
    finish_reason: str | None = None
    usage: Usage | None = None
    ttft_s: float | None = None
    duration_s: float | None = None
    attempts: int = 1
    repairs: list[str] = []
    endpoint: str | None = None
    """The server that answered (base URL); None in events recorded before it was kept."""
    call_mode: str | None = None
    """How the answer's calls actually came: ``native`` (the server's parser), ``forced``
    (a constrained answer), ``text`` (recovered from the text), ``none`` (no call)."""
    asked: str | None = None
    """How its request asked for calls (``pilot.agent.call_modes``): ``native`` (tools,
    tool_choice auto), ``forced`` (required or named), ``text`` (no tools; the pilot states the
    syntax), ``code`` (the code a call lacks, asked for as a fenced block). Kept here, not on
    ``model_request``, which stays made of numbers (never screened for secrets)."""
    code_json: int = 0
    """Code arguments (``pilot.agent.call_modes.CODE_ARGUMENTS``) that came inside the JSON
    arguments and parse as Python."""
    code_json_unparsed: int = 0
    """Code arguments inside JSON that do not parse as Python (count against code in JSON)."""
    code_block: int = 0
    """Code arguments taken from a fenced block of the answer's text."""


class ToolStarted(_Event):
    type: Literal["tool_started"] = "tool_started"
    call_id: str
    name: str
    mutates: bool
    edits: bool = False
    """A file tool that writes only the paths it names (``known_writes``): its success is an
    edit, after which ``check_after_edit`` runs the phase's check."""


class ToolFinished(_Event):
    type: Literal["tool_finished"] = "tool_finished"
    call_id: str
    name: str
    output: str
    is_error: bool = False
    truncated: bool = False
    artifacts: list[Artifact] = []
    snapshot: str | None = None
    """Workspace snapshot commit taken after a mutating tool; the state to restore on resume."""
    head: str | None = None
    """The work branch's head after the tool (a ``git_commit`` moves it)."""
    duration_s: float = 0.0
    executed: bool = True
    """False when the call was answered without running (invalid, truncated, after finish)."""
    images: list[ImageRef] = []
    """Images the tool put into the conversation (shown after the call's result)."""


class WorkspaceSnapshot(_Event):
    """The workspace as a mutating tool or a check left it, recorded after its result: the
    result is committed the moment the tool returns, so a kill before this event costs a
    snapshot on resume, never a second run of the tool."""

    type: Literal["workspace_snapshot"] = "workspace_snapshot"
    call_id: str
    snapshot: str
    head: str | None = None


class CheckStarted(_Event):
    type: Literal["check_started"] = "check_started"
    phase: int
    attempt: int
    command: str
    after_edit: bool = False
    """Run because a file edit succeeded (``check_after_edit``), not by finish: it does not
    count as an attempt."""


class CheckFinished(_Event):
    type: Literal["check_finished"] = "check_finished"
    phase: int
    attempt: int
    command: str
    exit_code: int | None
    passed: bool
    output: str
    timed_out: bool = False
    duration_s: float = 0.0
    snapshot: str | None = None
    head: str | None = None
    feedback: str = ""
    """What the model is told when the check failed and it may try again."""
    after_edit: bool = False
    """Run after a file edit (``check_after_edit``); not an attempt."""


class AnswerCut(_Event):
    """The answer of ``step`` was cut by the output limit (``pilot.agent.cut``): none of its
    calls is run; each is answered with ``message``, or, with no call, the model is told."""

    type: Literal["answer_cut"] = "answer_cut"
    step: int
    reason: str
    finish_reason: str | None = None
    completion_tokens: int | None = None
    max_tokens: int | None = None
    calls: list[str] = []
    """The names of the calls not run."""
    message: str = ""


class CheckBaseline(_Event):
    """The phase's check, run once as the phase starts, before any change: whether it passed
    then decides what counts as evidence of success (``pilot.agent.evidence``)."""

    type: Literal["check_baseline"] = "check_baseline"
    phase: int
    command: str
    exit_code: int | None
    passed: bool
    output: str = ""
    timed_out: bool = False
    duration_s: float = 0.0
    snapshot: str | None = None
    """The workspace after the check: the phase's start from here on."""
    head: str | None = None


class PhaseEvidence(_Event):
    """What a phase's success was judged on, at its end: the rule applied, the facts from the
    events that meet it (``items``), and whether they did (``accepted``)."""

    type: Literal["phase_evidence"] = "phase_evidence"
    phase: int
    rule: str
    accepted: bool
    items: list[str] = []
    reason: str = ""

    def line(self) -> str:
        """One line for ``pilot show`` and the report."""
        verdict = "accepted" if self.accepted else "refused"
        why = f" -- {self.reason}" if self.reason else ""
        return f"{verdict} ({self.rule}): {'; '.join(self.items)}{why}"


class Nudge(_Event):
    """A user message the harness added (empty turn, text instead of a call, a question)."""

    type: Literal["nudge"] = "nudge"
    reason: str
    text: str


class Compaction(_Event):
    """Older turns replaced by a summary; the replaced messages stay in their own events."""

    type: Literal["compaction"] = "compaction"
    pinned: list[int]
    """Indices (before the compaction) kept verbatim ahead of the summary."""
    replaced_to: int
    """First index of the verbatim tail."""
    replaced_count: int
    summary: str
    summary_source: Literal["model", "fallback", "events"] = "model"
    """``events``: built from the replaced turns' calls and results (``pilot.agent.compaction``);
    ``model`` and ``fallback`` in runs recorded before."""
    summary_error: str | None = None
    tokens_before: int
    tokens_after: int
    reason: Literal["threshold", "no_room", "overflow"]
    harder: int = 0


class Question(_Event):
    """The model asked instead of acting; unattended, it is told to go on (see the report)."""

    type: Literal["question"] = "question"
    step: int
    text: str
    reply: str


class LoopDetected(_Event):
    type: Literal["loop_detected"] = "loop_detected"
    kind: str
    detail: str
    action: Literal["nudge", "stuck"]
    message: str = ""


class PhaseFinished(_Event):
    type: Literal["phase_finished"] = "phase_finished"
    index: int
    name: str
    outcome: Literal["succeeded", "failed", "limit", "stuck"]
    reason: str = ""
    summary: str = ""


class ServerAway(_Event):
    """The model server stopped answering a request; the client waits for it, up to
    ``model.server_wait`` (then the run pauses with the ``ServerUnavailable`` error). Stored
    as ``server_unavailable``, its name in databases written before the class was renamed."""

    type: Literal["server_unavailable"] = "server_unavailable"
    error: str
    attempt: int = 1


class ServerBack(_Event):
    """The server answered again after ``waited_s`` seconds and ``attempts`` attempts."""

    type: Literal["server_back"] = "server_back"
    waited_s: float
    attempts: int


def from_wait(wait: WaitEvent) -> ServerAway | ServerBack:
    """The event that records what the model client told about a wait (``on_wait``)."""
    if wait.kind == "unavailable":
        return ServerAway(error=wait.error or "", attempt=wait.attempt)
    return ServerBack(waited_s=wait.waited_s, attempts=wait.attempts)


class WorkspaceRestored(_Event):
    type: Literal["workspace_restored"] = "workspace_restored"
    snapshot: str
    head: str | None = None
    reason: str


class AttemptRestarted(_Event):
    """``retry_fresh``: the try that failed is undone (workspace back to the phase's start)
    and the model is asked again from the phase's prompt alone, sampled hotter."""

    type: Literal["attempt_restarted"] = "attempt_restarted"
    phase: int
    reason: str
    snapshot: str | None = None
    head: str | None = None


class ImageFallback(_Event):
    """The server refused the run's images: send data URLs from now on, or no images at all."""

    type: Literal["image_fallback"] = "image_fallback"
    error: str
    action: Literal["data_url", "drop"]
    images: list[str] = []
    """With ``drop``: the sha256 of the images left out (the server could not decode them);
    empty = every image."""


class RunPaused(_Event):
    type: Literal["run_paused"] = "run_paused"
    reason: str


class RunResumed(_Event):
    type: Literal["run_resumed"] = "run_resumed"
    owner: str
    note: str = ""
    from_checkpoint: int | None = None
    """The event the resumed state was checkpointed at (only later events were folded);
    None when every event was folded."""


class CallModeChosen(_Event):
    """How one model's calls travel from now on, chosen by the workflow (``model.tool_calls``)
    or by the pilot from what it measured (``pilot.agent.call_modes``)."""

    type: Literal["call_mode_chosen"] = "call_mode_chosen"
    model: str
    kind: Literal["calls", "code", "forcing"]
    """``calls``: how calls are asked for (native, forced, text); ``code``: how code travels
    (json, block); ``forcing``: whether the answer after one with no call is forced (on,
    off)."""
    mode: str
    by: Literal["workflow", "pilot"] = "pilot"
    reason: str = ""
    counts: dict[str, int] = {}
    """The measures behind the choice (answers by mode, code that did not parse, ...)."""


class CodeAsked(_Event):
    """A code-carrying call came without its code (or, where code travels as blocks, with
    code that does not parse): it is answered, not run, and the next answer's fenced block
    is taken as its code."""

    type: Literal["code_asked"] = "code_asked"
    call_id: str
    name: str
    arguments: str
    """The call's other arguments, as JSON."""
    argument: str
    """The argument the block fills (``code``, ``content``)."""


class RunFinished(_Event):
    type: Literal["run_finished"] = "run_finished"
    status: Literal["succeeded", "failed", "cancelled", "limit"]
    reason: str = ""


Event = Annotated[
    RunStarted
    | ModelResolved
    | PhaseStarted
    | ModelRequest
    | AssistantMessage
    | ToolStarted
    | ToolFinished
    | WorkspaceSnapshot
    | CheckStarted
    | CheckFinished
    | AnswerCut
    | CheckBaseline
    | PhaseEvidence
    | Nudge
    | Compaction
    | Question
    | LoopDetected
    | PhaseFinished
    | ServerAway
    | ServerBack
    | WorkspaceRestored
    | AttemptRestarted
    | ImageFallback
    | RunPaused
    | RunResumed
    | CallModeChosen
    | CodeAsked
    | RunFinished,
    Field(discriminator="type"),
]

_ADAPTER: TypeAdapter[Event] | None = None


def event_adapter() -> TypeAdapter[Event]:
    """The (cached) validator for stored event payloads; built lazily, not at import."""
    global _ADAPTER
    if _ADAPTER is None:
        _ADAPTER = TypeAdapter(Event)
    return _ADAPTER


_TYPE_KEY = '"type":"'


@functools.cache
def _classes_by_type() -> dict[str, type[_Event]]:
    members = typing.get_args(typing.get_args(Event)[0])
    return {cls.model_fields["type"].default: cls for cls in members}


def event_from_json(text: str | bytes) -> Event:
    """An event from its stored JSON. The type is read from the text (``at`` then ``type``
    come first, as ``event_to_json`` writes them) and that class validates it, so only the
    types a process meets get a validator built; anything else goes through the union."""
    if isinstance(text, str):
        at = text.find(_TYPE_KEY, 0, 96)
        if at != -1:
            start = at + len(_TYPE_KEY)
            cls = _classes_by_type().get(text[start : text.find('"', start)])
            if cls is not None:
                return cls.model_validate_json(text)  # type: ignore[return-value]
    return event_adapter().validate_json(text)


def event_to_json(event: Event) -> str:
    return event.model_dump_json(exclude_defaults=False)
