"""RunState = fold(events): what a run has done and what it must do next. Pure, no I/O.

The loop never keeps state of its own beyond this: after a crash, folding the stored events gives
back exactly the state the dead process had at its last committed event. ``apply`` is
incremental (O(1) per event), so a live run folds each event as it appends it. It is the one
place a run's totals are counted: the runner's ``runs`` row (``totals_with``) and the morning
report read them from here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pilot.agent import call_modes
from pilot.agent.compaction import apply_compaction
from pilot.agent.images import ImageRef, image_message, prompt_content
from pilot.agent.progress import FeedbackObs, ProgressLimits, ProgressTracker, Verdict
from pilot.events import (
    AnswerCut,
    AssistantMessage,
    AttemptRestarted,
    CheckBaseline,
    CheckFinished,
    CheckStarted,
    Compaction,
    Event,
    ImageFallback,
    LoopDetected,
    ModelRequest,
    ModelResolved,
    Nudge,
    PhaseFinished,
    PhaseStarted,
    Question,
    RunFinished,
    RunPaused,
    RunResumed,
    RunStarted,
    ToolCall,
    ToolFinished,
    ToolStarted,
    WorkspaceRestored,
    WorkspaceSnapshot,
)

CHECK_FAILED_PREFIX = "Check failed:"


def check_failed_message(
    command: str, exit_code: int | None, timed_out: bool, output: str, attempts_left: int
) -> str:
    """The user message a failed phase check becomes; the model sees the output and tries again."""
    status = "timed out" if timed_out else f"exit code {exit_code}"
    return (
        f"{CHECK_FAILED_PREFIX} `{command}` ({status}). The phase is not done until it "
        f"passes; {attempts_left} attempt(s) left. Fix the problem, then call finish again.\n\n"
        f"{output}"
    )


@dataclass
class PhaseProgress:
    index: int
    name: str
    started_at: datetime
    steps: int = 0
    tokens: int = 0
    check_attempts: int = 0
    finish_called: bool = False
    finish_summary: str = ""
    check_in_flight: CheckStarted | None = None
    check_passed: bool = False
    active_at_start: float = 0.0
    message_index: int = 0
    """Where the phase's prompt sits in ``messages`` (kept verbatim by compaction)."""
    tracker: ProgressTracker = field(default_factory=ProgressTracker)
    pending_verdict: Verdict | None = None
    """A loop or no-progress verdict the loop must act on (nudge or end the phase)."""
    compactions_in_a_row: int = 0
    edited: bool = False
    """A file edit succeeded since the last check (``check_after_edit`` runs it then)."""
    start_snapshot: str | None = None
    """The workspace snapshot when the phase started (``require_change`` compares with it)."""
    start_head: str | None = None
    failed_try: str | None = None
    """Why the current try failed (an edit refused, the check failed): ``retry_fresh`` then
    starts again from the phase's prompt."""
    restarts: int = 0
    baseline: CheckBaseline | None = None
    """The check as the phase started, before any change (``pilot.agent.evidence``)."""


MessageLoader = Callable[[list[Any]], None]
"""Fills in, in place, the messages a resumed state holds only as references (``None``)."""


class _Messages:
    """``RunState.messages``: a plain list of the chat messages.

    A state resumed from a checkpoint (``pilot.store.checkpoint``) knows where each of its
    messages is stored before it has read them: what to do next is decided from the rest of
    the state, and only a request to the model needs what was said. So the messages the
    checkpoint refers to stay ``None`` in the list, with a loader beside them that reads them
    all the first time anything reads ``messages``; the fold appends after them without that
    read (``RunState._message_list``). Every reader gets the whole list, read."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot, self.loader = f"_{name}", f"_{name}_loader"

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return ()  # the dataclass's default (a new empty list each, through __set__)
        values = instance.__dict__
        loader: MessageLoader | None = values.get(self.loader)
        if loader is not None:
            loader(values[self.slot])
            values[self.loader] = None
        return values[self.slot]

    def __set__(self, instance: Any, value: Any) -> None:
        instance.__dict__[self.loader] = None
        instance.__dict__[self.slot] = value if type(value) is list else list(value)


@dataclass
class RunState:
    """Everything the loop needs, derived from events only."""

    started: RunStarted | None = None
    model: str | None = None
    max_model_len: int | None = None
    endpoint: str | None = None
    """The server that gave the last answer (several servers: where the run's prefix is cached)."""
    messages: list[dict[str, Any]] = _Messages()  # type: ignore[assignment]
    message_seqs: list[int] = field(default_factory=list)
    """Per message, the seq of the event it was made from alone (an assistant message, a tool
    result), else 0: the state checkpoint refers to those stored events instead of keeping a
    second copy of the context."""
    phase: PhaseProgress | None = None
    phases_done: list[PhaseFinished] = field(default_factory=list)
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    files_read: list[str] = field(default_factory=list)
    """Files the run's successful calls named (read or changed): a survey's summary must name
    one of them (``pilot.agent.evidence``)."""
    answer_cut: str | None = None
    """The last answer was cut by the output limit: what each of its calls gets instead of a
    run (``pilot.agent.cut``)."""
    pending_calls: list[ToolCall] = field(default_factory=list)
    """Calls of the last assistant message not yet answered, in order."""
    started_call: ToolStarted | None = None
    """A tool that was started and not finished: it may have partly run."""
    snapshot: str | None = None
    head: str | None = None
    snapshot_due: str | None = None
    """A mutating tool's or a check's result is recorded, its workspace snapshot is not yet
    (the call id, or ``check-<phase>-<attempt>``): the loop takes it before anything else."""
    _held_call: tuple[str, str, str] | None = None
    """That tool's (name, arguments, output), observed by the progress tracker with its
    snapshot."""
    finished: RunFinished | None = None
    paused: bool = False
    active_seconds: float = 0.0
    _segment_start: datetime | None = None
    _last_at: datetime | None = None
    last_seq: int = 0
    progress_limits: ProgressLimits = field(default_factory=ProgressLimits)
    questions: int = 0
    usage_estimated: bool = False
    """Some token counts are estimates (the server sent no usage)."""
    images: dict[str, ImageRef] = field(default_factory=dict)
    """Every image the conversation refers to, by sha256 (see ``pilot.agent.images``)."""
    images_data_only: bool = False
    """The server refused a file:// image: every image travels as a data URL from now on."""
    images_refused: str | None = None
    """Why the server takes no images at all (they are left out of requests)."""
    images_dropped: dict[str, str] = field(default_factory=dict)
    """Images the server could not decode, by sha256, with why (left out of requests)."""
    _held_images: list[tuple[str, list[ImageRef]]] = field(default_factory=list)
    call_book: dict[str, Any] = field(default_factory=call_modes.new_book)
    """How each model's calls travel and the counts behind it (``pilot.agent.call_modes``)."""

    # -- derived --------------------------------------------------------------------------

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def last_at(self) -> datetime | None:
        """When the last event folded in happened (None before the first)."""
        return self._last_at

    @property
    def driven(self) -> bool:
        """A process was driving the run at its last event: a start or resume not yet
        followed by a pause or the end (at a new start, the previous process died)."""
        return self._segment_start is not None

    @property
    def next_phase_index(self) -> int:
        return len(self.phases_done)

    def elapsed_active(self, now: datetime) -> float:
        """Seconds the run has been worked on, across pauses and resumes (not while stopped)."""
        if self._segment_start is None:
            return self.active_seconds
        return self.active_seconds + max(0.0, (now - self._segment_start).total_seconds())

    # -- folding --------------------------------------------------------------------------

    def apply(self, ev: Event) -> None:
        self.last_seq += 1
        self._track_time(ev)
        if ev.type in call_modes.FOLDED:
            call_modes.fold(self.call_book, ev, self.model)
        match ev:
            case RunStarted():
                self.started = ev
                self.snapshot = ev.base_snapshot
                self.head = ev.base_head
                if ev.system:
                    self._add({"role": "system", "content": ev.system})
            case ModelResolved():
                self.model, self.max_model_len = ev.model, ev.max_model_len
            case PhaseStarted():
                self.phase = PhaseProgress(
                    index=ev.index,
                    name=ev.name,
                    started_at=ev.at,
                    active_at_start=self.elapsed_active(ev.at),
                    message_index=len(self._message_list()),
                    tracker=ProgressTracker(
                        self.progress_limits.for_phase(ev.index), snapshot=self.snapshot
                    ),
                    start_snapshot=self.snapshot,
                    start_head=self.head,
                )
                self.images.update((ref.sha256, ref) for ref in ev.images)
                self._add({"role": "user", "content": prompt_content(ev.prompt, ev.images)})
            case ModelRequest():
                pass
            case AssistantMessage():
                prompt, completion = tokens_of(ev)
                self.steps += 1
                self.prompt_tokens += prompt
                self.completion_tokens += completion
                if ev.endpoint is not None:
                    self.endpoint = ev.endpoint
                if self.phase is not None:
                    self.phase.steps += 1
                    self.phase.tokens += prompt + completion
                if ev.usage is not None:
                    self.usage_estimated = self.usage_estimated or ev.usage.estimated
                empty = not (ev.content or "").strip() and not ev.tool_calls
                if not empty:  # an empty turn is asked again, not kept
                    self._add(assistant_message_dict(ev), self.last_seq)
                self.pending_calls = list(ev.tool_calls)
                self.answer_cut = None
                if self.phase is not None:
                    self.phase.compactions_in_a_row = 0
                    self._verdict(self.phase.tracker.observe_turn(ev.content, bool(ev.tool_calls)))
            case ToolStarted():
                self.started_call = ev
            case ToolFinished():
                started = self.started_call
                self.started_call = None
                called = next((c for c in self.pending_calls if c.id == ev.call_id), None)
                self.pending_calls = [c for c in self.pending_calls if c.id != ev.call_id]
                arguments = called.arguments if called else ""
                snapshot_due = (
                    ev.snapshot is None
                    and ev.executed
                    and started is not None
                    and started.mutates
                    and started.call_id == ev.call_id
                )
                if snapshot_due:
                    self.snapshot_due = ev.call_id
                    self._held_call = (ev.name, arguments, ev.output)
                elif self.phase is not None:
                    self._verdict(
                        self.phase.tracker.observe_call(
                            ev.name, arguments, ev.output, ev.snapshot is not None, ev.snapshot
                        )
                    )
                self._add(tool_message(ev.call_id, ev.output), self.last_seq)
                if ev.images:
                    self.images.update((ref.sha256, ref) for ref in ev.images)
                    self._held_images.append((ev.name, list(ev.images)))
                if self._held_images and not self.pending_calls:  # after the turn's last result
                    self._add(image_message(self._held_images))
                    self._held_images = []
                if ev.snapshot:
                    self.snapshot = ev.snapshot
                if ev.head:
                    self.head = ev.head
                if (
                    self.phase is not None
                    and started is not None
                    and started.edits
                    and started.call_id == ev.call_id
                    and ev.executed
                ):
                    if ev.is_error:
                        self.phase.failed_try = f"{ev.name} was refused: {gist(ev.output)}"
                    else:
                        self.phase.edited = True
                if called and ev.executed and not ev.is_error:
                    for path in paths_of(arguments):
                        self._note_file(path)
                if ev.name == "finish" and not ev.is_error and self.phase is not None:
                    self.phase.finish_called = True
                    self.phase.finish_summary = (
                        summary_of(arguments) if called else _finish_summary(self, ev.call_id)
                    )
            case WorkspaceSnapshot():
                self.snapshot = ev.snapshot
                self.head = ev.head or self.head
                self.snapshot_due = None
                held, self._held_call = self._held_call, None
                if held is not None and self.phase is not None:
                    name, arguments, output = held
                    self._verdict(
                        self.phase.tracker.observe_call(name, arguments, output, True, ev.snapshot)
                    )
            case CheckBaseline():
                if ev.snapshot:
                    self.snapshot = ev.snapshot
                self.head = ev.head or self.head
                if self.phase is not None:
                    self.phase.baseline = ev
                    if ev.snapshot:
                        self.phase.start_snapshot = ev.snapshot
                        self.phase.start_head = self.head
            case CheckStarted():
                if self.phase is not None:
                    self.phase.check_in_flight = ev
            case CheckFinished():
                if ev.snapshot is None:
                    self.snapshot_due = f"check-{ev.phase}-{ev.attempt}"
                else:
                    self.snapshot = ev.snapshot
                if ev.head:
                    self.head = ev.head
                if self.phase is not None and ev.after_edit:
                    self.phase.check_in_flight = None
                    self.phase.edited = False
                    self.phase.check_passed = ev.passed
                    if not ev.passed:
                        self.phase.failed_try = (
                            f"`{ev.command}` failed after the edit: {check_gist(ev)}"
                        )
                        self._verdict(self.phase.tracker.observe(FeedbackObs(ev.output)))
                        if ev.feedback:
                            self._add({"role": "user", "content": ev.feedback})
                elif self.phase is not None:
                    self.phase.check_in_flight = None
                    self.phase.edited = False
                    self.phase.check_attempts = ev.attempt
                    self.phase.check_passed = ev.passed
                    if not ev.passed:
                        self.phase.failed_try = f"the check ({ev.command}) failed: {check_gist(ev)}"
                        self.phase.finish_called = False
                        self._verdict(self.phase.tracker.observe(FeedbackObs(ev.output)))
                        if ev.feedback:
                            self._add({"role": "user", "content": ev.feedback})
            case AnswerCut():
                if ev.calls:
                    self.answer_cut = ev.message
                elif ev.message:
                    self._add({"role": "user", "content": ev.message})
            case Nudge():
                if (
                    ev.reason == "no_tool_call"
                    and self.phase is not None
                    and self.snapshot == self.phase.start_snapshot
                ):
                    # A try with changes made is told to go on (a feature whose check passed
                    # from the start still needs its finish). Its words stay out: a compaction
                    # summary quotes the latest failure.
                    self.phase.failed_try = NO_CODE_REASON
                self._add({"role": "user", "content": ev.text})
            case Question():
                self.questions += 1
                self._add({"role": "user", "content": ev.reply})
            case LoopDetected():
                if self.phase is not None:
                    self.phase.pending_verdict = None
                if ev.action == "nudge" and ev.message:
                    self._add({"role": "user", "content": ev.message})
            case Compaction():
                seqs = self.message_seqs
                kept = len(seqs) == len(self.messages)
                self.messages = apply_compaction(
                    self.messages, ev.pinned, ev.replaced_to, ev.summary
                )
                if kept:  # the summary is made of many events: it is kept as it is
                    head = [seqs[i] for i in ev.pinned if i < ev.replaced_to]
                    self.message_seqs = [*head, 0, *seqs[ev.replaced_to :]]
                else:  # a state built by hand: nothing to refer to
                    self.message_seqs = [0] * len(self.messages)
                if self.phase is not None:
                    self.phase.compactions_in_a_row += 1
                    old = self.phase.message_index
                    if old in ev.pinned:
                        self.phase.message_index = ev.pinned.index(old)
                    elif old >= ev.replaced_to:
                        self.phase.message_index = old - ev.replaced_to + len(ev.pinned) + 1
            case PhaseFinished():
                self.phases_done.append(ev)
                self.phase = None
                self.pending_calls = []
                self._held_images = []
            case WorkspaceRestored():
                self.snapshot = ev.snapshot
                self.head = ev.head or self.head
                self.started_call = None
            case AttemptRestarted():
                if ev.snapshot:
                    self.snapshot = ev.snapshot
                self.head = ev.head or self.head
                if self.phase is not None:
                    phase = self.phase
                    keep = phase.message_index + 1  # the history up to the phase's prompt
                    self.messages = self.messages[:keep]
                    self.message_seqs = self.message_seqs[:keep]
                    # The try starts again from the prompt, told why the last one was undone:
                    # without it, the same answer came back (one try gave it 10 times).
                    self._add({"role": "user", "content": restart_note(ev.reason)})
                    phase.failed_try = None
                    phase.edited = False
                    phase.restarts += 1
                    phase.pending_verdict = None
                    phase.tracker = ProgressTracker(
                        phase.tracker.limits, snapshot=self.snapshot, step=phase.tracker.step
                    )
            case ImageFallback():
                if ev.action == "data_url":
                    self.images_data_only = True
                elif ev.images:
                    why = f"the server could not decode it ({ev.error})"
                    self.images_dropped.update((sha, why) for sha in ev.images)
                else:
                    self.images_refused = ev.error
            case RunPaused():
                self.paused = True
            case RunResumed():
                self.paused = False
            case RunFinished():
                self.finished = ev
            case _:
                pass

    def totals_with(self, ev: Event) -> dict[str, Any]:
        """The run's summary columns (the ``runs`` row) that ``ev`` changes, as they will be
        once it is folded in: the runner stores an event before the state takes it, and its
        totals are counted here, by the fold's own rule, not a second time."""
        if isinstance(ev, PhaseStarted):
            return {"phase": ev.name}
        if not isinstance(ev, AssistantMessage):
            return {}
        totals: dict[str, Any] = {"steps": self.steps + 1}
        if ev.usage is not None:
            prompt, completion = tokens_of(ev)
            totals["prompt_tokens"] = self.prompt_tokens + prompt
            totals["completion_tokens"] = self.completion_tokens + completion
        return totals

    def _note_file(self, path: str) -> None:
        """Add ``path`` to ``files_read`` once. Whether it is there already is asked of a set
        kept beside the list (not a field: checkpoints hold the list only), made again when the
        list was replaced: a run that reads a new file each step made each step scan them all
        (3,000 paths at step 3,000)."""
        seen: set[str] | None = self.__dict__.get("_files_seen")
        if seen is None or len(seen) != len(self.files_read):
            seen = self.__dict__["_files_seen"] = set(self.files_read)
        if path not in seen:
            seen.add(path)
            self.files_read.append(path)

    def _add(self, message: dict[str, Any], seq: int = 0) -> None:
        """Append a message; ``seq`` is the event it was made from alone (0: several, or
        none)."""
        self._message_list().append(message)
        self.message_seqs.append(seq)

    def _message_list(self) -> list[Any]:
        """The messages list as it is: appending to it or taking its length does not need
        the messages a resumed state has not read yet (``_Messages``)."""
        return self.__dict__["_messages"]  # type: ignore[no-any-return]

    def defer_messages(self, messages: list[Any], loader: MessageLoader) -> None:
        """Hold ``messages`` (``None`` where one is still in the store) and read those on first
        use with ``loader``; what is appended before then goes after them."""
        self.messages = messages
        self.__dict__["_messages_loader"] = loader

    def _verdict(self, verdict: Verdict) -> None:
        if verdict.action != "ok" and self.phase is not None:
            self.phase.pending_verdict = verdict

    def _track_time(self, ev: Event) -> None:
        self._clock(
            ev.at,
            starts=isinstance(ev, RunStarted | RunResumed),
            ends=isinstance(ev, RunPaused | RunFinished),
        )

    def note_time(self, at: datetime) -> None:
        """A stored event this version cannot read (a newer pilot's type) still happened at
        ``at``: the run's clock moves as for any event, nothing else does."""
        self._clock(at, starts=False, ends=False)

    def _clock(self, at: datetime, *, starts: bool, ends: bool) -> None:
        if starts:
            self._close_segment()
            self._segment_start = at
        elif ends:
            self._last_at = at
            self._close_segment()
            return
        elif self._segment_start is None and self._last_at is None:
            self._segment_start = at  # a run recorded without its start counts from here
        self._last_at = at

    def _close_segment(self) -> None:
        if self._segment_start is not None and self._last_at is not None:
            self.active_seconds += max(0.0, (self._last_at - self._segment_start).total_seconds())
        self._segment_start = None


def tokens_of(ev: AssistantMessage) -> tuple[int, int]:
    """The prompt and completion tokens one answer adds to the run's totals (none recorded:
    nothing)."""
    if ev.usage is None:
        return 0, 0
    return ev.usage.prompt_tokens, ev.usage.completion_tokens


def _finish_summary(state: RunState, call_id: str) -> str:
    for message in reversed(state.messages):
        for call in message.get("tool_calls") or ():
            if call["id"] == call_id:
                return summary_of(call["function"]["arguments"])
    return ""


GIST_CHARS = 400
"""How much of an error a restarted try is told (its first or last lines)."""


def gist(output: str, *, last: bool = False) -> str:
    """A tool's or a check's output in brief: its first (or last) non-empty lines."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    lines = lines[-4:] if last else lines[:4]
    if lines:
        lines[0] = lines[0].removeprefix("Error: ")
    return _brief(lines)


_FAILED_LINE = re.compile(r"^(?:FAILED|ERROR) \S+")


def check_gist(check: CheckFinished) -> str:
    """A failed check's output in brief: how it ended when it did not exit on its own (timed
    out, killed by a signal), then pytest's ``FAILED``/``ERROR`` summary lines (three at most)
    and its count, or doctest's first failed example with what it expected and got, else the
    last lines. Its last four lines were an assertion's diff markers (``?   ^``) on semver's
    tests, and a row of dots when a rewrite's endless loop got the check killed: a restarted
    try was told nothing it could use."""
    ended = ""
    if check.timed_out:
        ended = "timed out: "
    elif check.exit_code is not None and check.exit_code < 0:
        ended = f"killed by signal {-check.exit_code} (an endless loop or too much memory?): "
    lines = [line.strip() for line in check.output.splitlines() if line.strip()]
    failed = [line[:160] for line in lines if _FAILED_LINE.match(line)]
    if failed:
        body = _brief([*failed[:3], lines[-1]])
    elif "Failed example:" in lines:
        at = lines.index("Failed example:")
        body = _brief(lines[at : at + 6])
    else:
        body = gist(check.output, last=True)
    return f"{ended}{body}" if body else ended.removesuffix(": ")


def _brief(lines: list[str]) -> str:
    """Lines joined on one line, at most ``GIST_CHARS``."""
    text = " | ".join(lines)
    return text if len(text) <= GIST_CHARS else text[: GIST_CHARS - 1] + "…"


NO_CODE_REASON = "its answer had no tool call and no code"
"""Why a try ended on an answer that only described a change: in a phase that retries fresh,
the nudge conversation that followed drew the prompt's last line back, word for word, six
answers in a row (the 1.5B on humanize-apnumber-zero)."""


def restart_note(reason: str) -> str:
    """What a fresh try of a ``retry_fresh`` phase is told after its prompt. It asks for the
    wrong line first: told only "do not repeat", the 1.5B copied the function it was shown,
    unchanged, again and again; asked to name the line first, it changed the faulty one in
    some of its answers (bench/README.md, "What the 1.5B was shown")."""
    undone = (
        f"A previous try of this task was undone (the workspace is back as it was) because "
        f"{reason.rstrip().rstrip('.')}."
    )
    if reason.startswith(NO_CODE_REASON):
        return f"{undone} Answer with the change itself, as code, not a description of it."
    return (
        f"{undone} Do not repeat that answer: first say in one sentence which line is wrong "
        "and why, then make a different change."
    )


def paths_of(arguments: str) -> list[str]:
    """The file paths a call's JSON arguments name (``path``, ``paths``, ``file``)."""
    try:
        values = json.loads(arguments)
    except ValueError:
        return []
    if not isinstance(values, dict):
        return []
    found = []
    for key in ("path", "paths", "file", "files"):
        value = values.get(key)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item.strip() not in ("", ".", "./", "/"):
                found.append(item.strip())
    return found


def summary_of(arguments: str) -> str:
    """The ``summary`` of a finish call's JSON arguments ("" when it has none)."""
    try:
        return str(json.loads(arguments).get("summary", ""))
    except (ValueError, AttributeError):
        return ""


def assistant_message_dict(ev: AssistantMessage) -> dict[str, Any]:
    """The assistant message as the chat API wants it back (reasoning is kept out)."""
    return assistant_message(ev.content, [(c.id, c.name, c.arguments) for c in ev.tool_calls])


def assistant_message(content: str | None, calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    """An assistant message with its calls (``(id, name, arguments)``), as the fold makes it
    (a state checkpoint makes it again from the stored event)."""
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if calls:
        message["tool_calls"] = [
            {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}
            for id_, name, arguments in calls
        ]
    return message


def tool_message(call_id: str, output: str) -> dict[str, Any]:
    """A tool result as the fold makes it (a state checkpoint makes it again likewise)."""
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def fold(events: list[Event], *, progress_limits: ProgressLimits | None = None) -> RunState:
    state = RunState(progress_limits=progress_limits or ProgressLimits())
    for ev in events:
        state.apply(ev)
    return state
