"""A run's spans, built from its stored events alone: plain data, no OpenTelemetry import.

The tree: the run (``invoke_agent {workflow}``) holds its phases (``phase {name}``); a phase
holds its model requests (``chat {model}``: from ``model_request`` to its
``assistant_message``), its tool calls (``execute_tool {name}``: ``tool_started`` to
``tool_finished``), its checks (``check {phase}``) and compactions. What has no duration
(a nudge, a loop detected, a pause, a resume, the server away and back, a snapshot) is a span
event on the span it happened in.

Every time is an event's own timestamp, so exporting a run twice gives the same spans, and a
span that was closed when a run paused is the same after the run is resumed. What the
stored events leave open (a running run, a phase in progress, a tool a kill interrupted) ends
at the last recorded event and says so (``marathon.span.open``); a request or a tool the run
stopped in the middle of ends where the run stopped, in error, never stretched over the gap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from pilot import events as ev
from pilot.store.queries import StoredEvent
from pilot.trace import semconv as sc
from pilot.trace.ids import RUN_KEY, hex_trace_id

AttributeValue = str | bool | int | float | list[str]

OPEN = "marathon.span.open"
"""Set (true) on a span the stored events leave open; its end is the last event's time."""

_TEXT_LIMIT = 300
"""Longest text kept in an attribute or a status (reasons, errors, a tool's failing line)."""


def _text(value: str) -> str:
    value = value.strip()
    return value if len(value) <= _TEXT_LIMIT else value[: _TEXT_LIMIT - 1] + "…"


@dataclass(frozen=True)
class SpanEvent:
    name: str
    at: datetime
    attributes: dict[str, AttributeValue] = field(default_factory=dict)


@dataclass
class TraceSpan:
    """One span: ``key`` is ``RUN_KEY`` or the seq (as text) of the event that opened it, the
    source of its id (``pilot.trace.ids``); ``parent`` is the parent's key."""

    key: str
    name: str
    start: datetime
    parent: str | None = None
    kind: Literal["internal", "client"] = "internal"
    end: datetime | None = None
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    error: str | None = None
    """The status description of a span that ended in error; None: the status stays unset."""


@dataclass(frozen=True)
class RunTrace:
    run_id: str
    trace_id: str
    spans: list[TraceSpan]
    """Parents before their children, each in the order its first event was recorded."""


def build_trace(run_id: str, workflow: str, stored: Sequence[StoredEvent]) -> RunTrace:
    """The run's spans from its stored events (an empty list for a run with no events)."""
    builder = _Builder(run_id, workflow)
    for row in stored:
        builder.add(row)
    return RunTrace(run_id, hex_trace_id(run_id), builder.finish())


class _Builder:
    def __init__(self, run_id: str, workflow: str) -> None:
        self.run_id = run_id
        self.workflow = workflow
        self.spans: list[TraceSpan] = []
        self.run: TraceSpan | None = None
        self.phase: TraceSpan | None = None
        self.chat: TraceSpan | None = None
        self.tools: dict[str, TraceSpan] = {}
        self.check: TraceSpan | None = None
        self.model: str | None = None
        self.endpoint: str | None = None
        """The run's one endpoint (None when it is routed over several)."""
        self.steps: dict[str, int] = {}
        """Each tool call's step."""
        self.tokens = [0, 0]
        self.status = "running"
        self.finished = False
        """The last event is the run's ``run_finished``."""
        self.last_at: datetime | None = None

    # -- spans ---------------------------------------------------------------------------------

    def open(self, key: str, name: str, at: datetime, **attributes: AttributeValue) -> TraceSpan:
        parent = self.phase or self.run
        span = TraceSpan(key, name, at, parent.key if parent else None, attributes=attributes)
        self.spans.append(span)
        return span

    def note(self, at: datetime, name: str, **attributes: AttributeValue) -> None:
        """A span event on the innermost phase or run span."""
        span = self.phase or self.run
        if span is not None:
            span.events.append(SpanEvent(name, at, dict(attributes)))

    def cut_short(self, at: datetime, why: str, error_type: str) -> None:
        """Close the request, tools and check left running (a pause, a stopped process)."""
        for span in (self.chat, *self.tools.values(), self.check):
            if span is not None:
                span.attributes[sc.ERROR_TYPE] = error_type
                _close(span, at, why)
        self.chat, self.check = None, None
        self.tools.clear()

    # -- events ----------------------------------------------------------------------------------

    def add(self, row: StoredEvent) -> None:
        at, event = row.at, row.event
        if self.run is None:
            self.run = TraceSpan(RUN_KEY, f"{sc.INVOKE_AGENT} {self.workflow}", at)
            self.spans.append(self.run)
        if event is None:
            unreadable = {"marathon.event.unreadable": True} if row.error else {}
            self.note(at, row.type, **unreadable)
        else:
            self.record(row.seq, at, event)
        self.finished = isinstance(event, ev.RunFinished)
        self.last_at = at

    def record(self, seq: int, at: datetime, event: ev.Event) -> None:
        key = str(seq)
        match event:
            case ev.RunStarted():
                self.started(event)
            case ev.ModelResolved():
                self.model = event.model
            case ev.PhaseStarted():
                if self.phase is not None:
                    _close(self.phase, at)
                    self.phase = None
                self.phase = self.open(
                    key,
                    f"phase {event.name}",
                    at,
                    **{"marathon.phase.index": event.index, "marathon.phase.name": event.name},
                )
            case ev.ModelRequest():
                if self.chat is not None:
                    self.chat.attributes[sc.ERROR_TYPE] = "no_answer"
                    _close(self.chat, at, "no answer was recorded for this request")
                self.chat = self.open(key, _chat_name(self.model), at, **self.request(event))
                self.chat.kind = "client"
            case ev.AssistantMessage():
                chat = self.chat
                if chat is None:  # no model_request before it: a span of no length
                    chat = self.open(key, _chat_name(self.model), at)
                    chat.kind = "client"
                self.answered(chat, event)
                _close(chat, at)
                self.chat = None
            case ev.ToolStarted():
                span = self.tool(key, at, event.call_id, event.name)
                span.attributes["marathon.tool.mutates"] = event.mutates
                self.tools[event.call_id] = span
            case ev.ToolFinished():
                span = self.tools.pop(event.call_id, None) or self.tool(
                    key, at, event.call_id, event.name
                )
                _tool_finished(span, event)
                _close(span, at, _first_line(event.output) if event.is_error else None)
            case ev.CheckStarted():
                phase = self.phase.attributes.get("marathon.phase.name") if self.phase else None
                self.check = self.open(
                    key,
                    f"check {phase}" if phase else "check",
                    at,
                    **{
                        "marathon.check.command": _text(event.command),
                        "marathon.check.attempt": event.attempt,
                        "marathon.check.after_edit": event.after_edit,
                    },
                )
            case ev.CheckFinished():
                span = self.check or self.open(key, "check", at)
                self.check = None
                _check_finished(span, event)
                _close(span, at, None if event.passed else _check_failure(event))
            case ev.Compaction():
                span = self.open(key, "compaction", self.last_at or at, **_compaction(event))
                _close(span, at)
            case ev.PhaseFinished():
                self.phase_finished(key, at, event)
            case ev.ServerAway() | ev.ServerBack():
                target = self.chat or self.phase or self.run
                if target is not None:
                    target.events.append(SpanEvent(event.type, at, _server_wait(event)))
            case ev.RunPaused():
                self.cut_short(at, f"the run paused: {_text(event.reason)}", "run_paused")
                self.note(at, event.type, **{"marathon.reason": _text(event.reason)})
                self.status = "paused"
            case ev.RunResumed():
                if self.last_at is not None:
                    self.cut_short(self.last_at, "the process stopped here", "process_stopped")
                self.note(at, event.type, **{"marathon.resumed.owner": event.owner})
                self.status = "running"
            case ev.RunFinished():
                self.run_finished(at, event)
            case _:
                self.note(at, event.type, **_event_details(event))

    def started(self, event: ev.RunStarted) -> None:
        assert self.run is not None
        routed = [url for url in event.endpoints if url] or [event.endpoint]
        self.endpoint = routed[0] if len(set(routed)) == 1 else None
        self.run.attributes.update(
            {
                "marathon.run.workspace": event.workspace,
                "marathon.run.branch": event.branch,
                "marathon.run.endpoints": sorted(set(routed)),
                "marathon.run.phases": list(event.phases),
            }
        )

    def request(self, event: ev.ModelRequest) -> dict[str, AttributeValue]:
        attributes: dict[str, AttributeValue] = {
            sc.OPERATION: sc.CHAT,
            sc.PROVIDER: sc.OPENAI,
            sc.CONVERSATION_ID: self.run_id,
            sc.REQUEST_STREAM: True,
            "marathon.step": event.step,
            "marathon.request.messages": event.messages,
        }
        if self.model:
            attributes[sc.REQUEST_MODEL] = self.model
        if event.max_tokens is not None:
            attributes[sc.REQUEST_MAX_TOKENS] = event.max_tokens
        if event.temperature is not None:
            attributes[sc.REQUEST_TEMPERATURE] = event.temperature
        if event.prompt_tokens is not None:
            attributes["marathon.request.prompt_tokens"] = event.prompt_tokens
            attributes["marathon.request.prompt_bound"] = event.prompt_bound
        return attributes

    def answered(self, span: TraceSpan, event: ev.AssistantMessage) -> None:
        attributes = span.attributes
        attributes["marathon.step"] = event.step
        server = sc.server_of(event.endpoint or self.endpoint)
        if server is not None:
            attributes[sc.SERVER_ADDRESS], attributes[sc.SERVER_PORT] = server
        if event.endpoint:
            attributes["marathon.endpoint"] = event.endpoint
        if event.finish_reason:
            attributes[sc.RESPONSE_FINISH_REASONS] = [event.finish_reason]
        if event.usage is not None:
            attributes[sc.USAGE_INPUT_TOKENS] = event.usage.prompt_tokens
            attributes[sc.USAGE_OUTPUT_TOKENS] = event.usage.completion_tokens
            attributes["marathon.usage.estimated"] = event.usage.estimated
            self.tokens[0] += event.usage.prompt_tokens
            self.tokens[1] += event.usage.completion_tokens
        if event.ttft_s is not None:
            attributes[sc.RESPONSE_TIME_TO_FIRST_CHUNK] = event.ttft_s
        if event.duration_s is not None:
            attributes["marathon.response.duration_s"] = event.duration_s
        attributes["marathon.response.attempts"] = event.attempts
        if event.tool_calls:
            attributes["marathon.tool_call.ids"] = [call.id for call in event.tool_calls]
        if event.repairs:
            attributes["marathon.repairs"] = [_text(repair) for repair in event.repairs]
        for call in event.tool_calls:
            self.steps[call.id] = event.step

    def tool(self, key: str, at: datetime, call_id: str, name: str) -> TraceSpan:
        span = self.open(
            key,
            f"{sc.EXECUTE_TOOL} {name}",
            at,
            **{
                sc.OPERATION: sc.EXECUTE_TOOL,
                sc.TOOL_NAME: name,
                sc.TOOL_CALL_ID: call_id,
                sc.TOOL_TYPE: "function",
            },
        )
        if call_id in self.steps:
            span.attributes["marathon.step"] = self.steps[call_id]
        return span

    def phase_finished(self, key: str, at: datetime, event: ev.PhaseFinished) -> None:
        span = self.phase or self.open(key, f"phase {event.name}", at)
        self.cut_short(at, "the phase ended", "phase_ended")
        span.attributes["marathon.phase.outcome"] = event.outcome
        if event.reason:
            span.attributes["marathon.phase.reason"] = _text(event.reason)
        failed = None if event.outcome == "succeeded" else f"{event.outcome}: {event.reason}"
        _close(span, at, failed)
        self.phase = None

    def run_finished(self, at: datetime, event: ev.RunFinished) -> None:
        self.cut_short(at, f"the run ended: {event.status}", "run_ended")
        failed = None if event.status == "succeeded" else f"{event.status}: {event.reason}"
        if self.phase is not None:
            _close(self.phase, at, failed)
            self.phase = None
        assert self.run is not None
        self.run.error = _text(failed) if failed else None
        self.status = event.status

    def finish(self) -> list[TraceSpan]:
        """Every span closed (the open ones at the last event, marked), the run's totals set."""
        if self.run is None or self.last_at is None:
            return []
        run = self.run.attributes
        run.update(
            {
                sc.OPERATION: sc.INVOKE_AGENT,
                sc.PROVIDER: sc.OPENAI,
                sc.AGENT_NAME: self.workflow,
                sc.CONVERSATION_ID: self.run_id,
                "marathon.run.id": self.run_id,
                "marathon.run.status": self.status,
                sc.USAGE_INPUT_TOKENS: self.tokens[0],
                sc.USAGE_OUTPUT_TOKENS: self.tokens[1],
            }
        )
        if self.model:
            run[sc.REQUEST_MODEL] = self.model
        self.run.end = self.last_at
        for span in self.spans:
            if span.end is None or (span is self.run and not self.finished):
                span.end = self.last_at
                span.attributes[OPEN] = True
        return self.spans


def _close(span: TraceSpan, at: datetime, error: str | None = None) -> None:
    span.end = at
    if error is not None:
        span.error = _text(error)


def _chat_name(model: str | None) -> str:
    return f"{sc.CHAT} {model}" if model else sc.CHAT


def _first_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return _text(lines[0]) if lines else "the tool reported an error"


def _tool_finished(span: TraceSpan, event: ev.ToolFinished) -> None:
    span.attributes.update(
        {
            "marathon.tool.executed": event.executed,
            "marathon.tool.duration_s": event.duration_s,
            "marathon.tool.output_chars": len(event.output),
            "marathon.tool.truncated": event.truncated,
        }
    )
    if event.is_error:
        span.attributes[sc.ERROR_TYPE] = "tool_error"


def _check_finished(span: TraceSpan, event: ev.CheckFinished) -> None:
    span.attributes.update(
        {
            "marathon.check.command": _text(event.command),
            "marathon.check.attempt": event.attempt,
            "marathon.check.passed": event.passed,
            "marathon.check.timed_out": event.timed_out,
            "marathon.check.duration_s": event.duration_s,
        }
    )
    if event.exit_code is not None:
        span.attributes["marathon.check.exit_code"] = event.exit_code
    if not event.passed:
        span.attributes[sc.ERROR_TYPE] = "timeout" if event.timed_out else "check_failed"


def _check_failure(event: ev.CheckFinished) -> str:
    if event.timed_out:
        return "the check timed out"
    return f"the check failed (exit code {event.exit_code})"


def _compaction(event: ev.Compaction) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        "marathon.compaction.reason": event.reason,
        "marathon.compaction.tokens_before": event.tokens_before,
        "marathon.compaction.tokens_after": event.tokens_after,
        "marathon.compaction.replaced_messages": event.replaced_count,
        "marathon.compaction.summary_source": event.summary_source,
    }
    if event.summary_error:
        attributes["marathon.compaction.summary_error"] = _text(event.summary_error)
    return attributes


def _server_wait(event: ev.ServerAway | ev.ServerBack) -> dict[str, AttributeValue]:
    if isinstance(event, ev.ServerAway):
        return {"marathon.error": _text(event.error), "marathon.attempt": event.attempt}
    return {"marathon.waited_s": event.waited_s, "marathon.attempts": event.attempts}


def _event_details(event: ev.Event) -> dict[str, AttributeValue]:
    """What a span event carries of the events shown as one: short fields only."""
    match event:
        case ev.Nudge():
            return {"marathon.reason": event.reason}
        case ev.Question():
            return {"marathon.step": event.step}
        case ev.LoopDetected():
            return {"marathon.loop.kind": event.kind, "marathon.loop.action": event.action}
        case ev.WorkspaceSnapshot():
            return {sc.TOOL_CALL_ID: event.call_id, "marathon.snapshot": event.snapshot}
        case ev.WorkspaceRestored() | ev.AttemptRestarted():
            return {"marathon.reason": _text(event.reason)}
        case ev.ImageFallback():
            return {"marathon.image.action": event.action}
    return {}
