"""Runaway and stuck detection: notice a model that repeats itself, goes in circles or idles.

A small model left alone for hours will call the same tool with the same arguments over and
over, alternate between two calls, re-read files it has read, ask questions nobody answers or
answer with nothing. Peers either never notice (and burn millions of tokens) or only count
format errors. The :class:`ProgressTracker` watches calls, results and workspace snapshots and
says ``ok``, ``nudge`` (tell the model what it repeats) or ``stuck`` (the nudge was ignored:
end the phase with the reason).

Pure: no I/O, no clock, no events written. The tracker is a deterministic fold over
observations, so a resumed run rebuilds it from the stored events
(:func:`observations_from_events`) and reaches the very same verdicts.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any, Literal, NamedTuple

from pilot import events as ev
from pilot.workflow.plan import RunPlan
from pilot.workflow.schema import RunLimits

__all__ = [
    "CallObs",
    "FeedbackObs",
    "Observation",
    "ProgressLimits",
    "ProgressTracker",
    "TurnObs",
    "Verdict",
    "observations_from_events",
]

Kind = Literal["repeat", "alternation", "no_progress"]


@dataclass(frozen=True)
class ProgressLimits:
    """Thresholds; all configurable from the workflow (``limits.no_progress`` and friends)."""

    repeat: int = 3
    """Same call, same arguments, same result this many times in a row."""
    alternation: int = 3
    """A-B-A-B... cycles (A, B = call + arguments + result) before it counts as a loop."""
    no_progress: int = RunLimits.model_fields["max_no_progress_steps"].default
    """Model turns without a workspace change and without new information after which the
    phase is stuck (exactly this many: the nudge comes before)."""
    no_progress_grace: int = 3
    """How many turns before the no-progress limit the model is told (at most half of it)."""
    max_nudges: int = 3
    """Nudges per phase; a detector firing after that many is stuck at once."""
    phases: tuple[int | None, ...] = ()
    """Each phase's own ``no_progress`` (its ``limits.max_no_progress_steps``), None where the
    phase sets none and the run's applies."""

    def __post_init__(self) -> None:
        own = [n for n in self.phases if n is not None]
        if min(self.repeat, self.alternation, self.no_progress, *own) < 2:
            raise ValueError("repeat, alternation and no_progress must be at least 2")
        if self.no_progress_grace < 1 or self.max_nudges < 0:
            raise ValueError("no_progress_grace must be >= 1 and max_nudges >= 0")

    @classmethod
    def of_plan(cls, plan: RunPlan) -> ProgressLimits:
        """The run's ``limits.max_no_progress_steps``, and each phase's own where it sets one."""
        return cls(
            no_progress=max(2, plan.max_no_progress_steps),
            phases=tuple(
                None if phase.max_no_progress_steps is None else max(2, phase.max_no_progress_steps)
                for phase in plan.phases
            ),
        )

    def for_phase(self, index: int) -> ProgressLimits:
        """The limits phase ``index`` is watched with: its own ``no_progress`` if it has one."""
        own = self.phases[index] if index < len(self.phases) else None
        if own is None and not self.phases:
            return self
        return replace(self, no_progress=own or self.no_progress, phases=())


@dataclass(frozen=True)
class CallObs:
    """A finished tool call: what was asked, what came back, and the workspace after it."""

    name: str
    arguments: str
    result: str
    mutated: bool = False
    snapshot: str | None = None


@dataclass(frozen=True)
class TurnObs:
    """A model turn (observed before its calls)."""

    content: str | None
    had_calls: bool


@dataclass(frozen=True)
class FeedbackObs:
    """Information the harness gave the model (a failed check's output): new if not seen."""

    text: str


Observation = CallObs | TurnObs | FeedbackObs


@dataclass(frozen=True)
class Verdict:
    """What to do after an observation.

    ``nudge``: add ``message`` as a user message (a ``Nudge``/``LoopDetected`` event).
    ``stuck``: end the phase as stuck with ``message`` as the reason.
    """

    action: Literal["ok", "nudge", "stuck"]
    kind: Kind | None = None
    detail: str = ""
    message: str = ""


OK = Verdict("ok")

ERROR_PREFIX = "Error"


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()


DURATION_PATTERN = r"\b\d+(?:\.\d+)?\s*(?:ms|s|sec|secs|seconds)\b"
KEPT_OUTPUT_PATTERN = r"\.marathon/outputs/[\w.-]+\.txt"
"""Where a long result's whole text is kept: named by its call, so it differs every time."""


@functools.cache
def _duration_re() -> Any:
    """The durations' pattern as an RE2 automaton (google-re2): a linear scan, where ``re``
    tries the pattern at every character of every result (its word boundaries and digits
    are ASCII)."""
    import re2

    return re2.compile(DURATION_PATTERN)


@functools.cache
def _kept_re() -> Any:
    import re2

    return re2.compile(KEPT_OUTPUT_PATTERN)


def _untimed(result: str) -> str:
    """A result with what changes between identical calls blanked: its durations (a test run
    that fails the same way again says "1 failed in 0.12s" one time and "in 0.14s" the next)
    and the file its cut part is kept in (a long file read again and again is the same
    result: on the GPU a 1.5B read toolz/itertoolz.py 14 times unnoticed)."""
    if ".marathon/outputs/" in result:
        result = _kept_re().sub(".marathon/outputs/<kept>", result)
    return _duration_re().sub("<duration>", result)


def _canonical(arguments: str) -> str:
    """Arguments with key order and whitespace normalised (so ``{"a":1}`` == ``{ "a": 1 }``)."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except (ValueError, TypeError):
        return arguments.strip()


class _Sig(NamedTuple):
    """A call's identity for loop detection (a tuple: built and compared in C, every step)."""

    name: str
    arguments: str
    result: str  # digest

    def key(self) -> bytes:
        """What ``_seen`` keeps: 12 bytes whatever the arguments' size (a phase of a thousand
        ``write_file`` calls would otherwise keep every content written, and write it into
        every state checkpoint)."""
        text = f"{self.name}\0{self.arguments}\0{self.result}"
        return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=12).digest()

    def label(self, raw_arguments: str) -> str:
        shown = raw_arguments if len(raw_arguments) <= 120 else raw_arguments[:117] + "..."
        return f"{self.name}({shown})"


@dataclass
class ProgressTracker:
    """Feed it calls and turns as they happen; each observation returns a :class:`Verdict`.

    Progress is a workspace change (the snapshot id moved) or new information (a call and
    result never seen before in this phase, or new harness feedback). Reading the same file
    again and getting the same text is nothing new; error results are never new information.
    Use one tracker per phase.
    """

    limits: ProgressLimits = field(default_factory=ProgressLimits)
    snapshot: str | None = None
    """The workspace snapshot at the phase's start (or the last one seen)."""
    step: int = 0
    steps_since_progress: int = 0
    consecutive_empty: int = 0
    nudges: int = 0
    _last_progress_step: int = 0
    _nudged_at: dict[str, int] = field(default_factory=dict)
    _recent: deque[tuple[_Sig, str]] = field(default_factory=lambda: deque(maxlen=64))
    _seen: set[bytes | str] = field(default_factory=set)

    @classmethod
    def from_history(
        cls,
        observations: Iterable[Observation],
        limits: ProgressLimits | None = None,
        snapshot: str | None = None,
    ) -> ProgressTracker:
        """The tracker as it was after ``observations`` (a resume replays the phase's events)."""
        tracker = cls(limits=limits or ProgressLimits(), snapshot=snapshot)
        for observation in observations:
            tracker.observe(observation)
        return tracker

    def observe(self, observation: Observation) -> Verdict:
        match observation:
            case CallObs():
                return self._call(observation)
            case TurnObs():
                return self._turn(observation)
            case FeedbackObs():
                key = "feedback:" + _digest(observation.text)
                if key not in self._seen:
                    self._seen.add(key)
                    self._progress()
                return OK

    def observe_call(
        self,
        name: str,
        arguments_json: str,
        result_text: str,
        mutated: bool,
        workspace_snapshot: str | None,
    ) -> Verdict:
        return self.observe(CallObs(name, arguments_json, result_text, mutated, workspace_snapshot))

    def observe_turn(self, content: str | None, had_calls: bool) -> Verdict:
        return self.observe(TurnObs(content, had_calls))

    @property
    def repeats(self) -> int:
        """How many times in a row the last call was made with the same result (0: none)."""
        if not self._recent:
            return 0
        last = self._recent[-1][0]
        run = 0
        for sig, _ in reversed(self._recent):
            if sig != last:
                break
            run += 1
        return run

    # -- internals ------------------------------------------------------------------------

    def _progress(self) -> None:
        self.steps_since_progress = 0
        self._last_progress_step = self.step

    def _turn(self, turn: TurnObs) -> Verdict:
        self.step += 1
        self.steps_since_progress += 1
        empty = not turn.had_calls and not (turn.content or "").strip()
        self.consecutive_empty = self.consecutive_empty + 1 if empty else 0
        if turn.had_calls:
            return OK  # judged when its calls come back
        return self._no_progress_check()

    def _call(self, call: CallObs) -> Verdict:
        sig = _Sig(call.name, _canonical(call.arguments), _digest(_untimed(call.result)))
        changed = call.mutated and call.snapshot is not None and call.snapshot != self.snapshot
        if call.snapshot is not None:
            self.snapshot = call.snapshot
        key = sig.key()
        new_info = key not in self._seen and not call.result.lstrip().startswith(ERROR_PREFIX)
        self._seen.add(key)
        if changed or new_info:
            self._progress()
        self._recent.append((sig, call.arguments))
        return self._repeat_check() or self._alternation_check() or self._no_progress_check()

    def _repeat_check(self) -> Verdict | None:
        last, raw = self._recent[-1]
        run = self.repeats
        if run < self.limits.repeat:
            return None
        detail = f"{last.label(raw)} called {run} times in a row with the same result"
        message = (
            f"You have called {last.label(raw)} {run} times in a row and got the same result "
            "each time. Calling it again will not change anything. Use what the result says "
            "and do something different; if the phase is done, or cannot be done, call "
            "`finish` and say why in the summary."
        )
        return self._fire("repeat", detail, message)

    def _alternation_check(self) -> Verdict | None:
        need = 2 * self.limits.alternation
        if len(self._recent) < need:
            return None
        window = list(islice(reversed(self._recent), need))[::-1]  # not the whole deque
        a, b = window[-2][0], window[-1][0]
        if a == b:
            return None
        if any(sig != (a if i % 2 == 0 else b) for i, (sig, _) in enumerate(window)):
            return None
        cycles = self.limits.alternation
        label_a, label_b = a.label(window[-2][1]), b.label(window[-1][1])
        detail = f"alternating between {label_a} and {label_b} for {cycles} cycles"
        message = (
            f"You are going back and forth between {label_a} and {label_b} ({cycles} times) "
            "with the same results: this is a loop. Stop, decide what is really blocking you, "
            "and try a different approach; if you cannot, call `finish` and explain what "
            "blocks you in the summary."
        )
        return self._fire("alternation", detail, message)

    def _no_progress_check(self) -> Verdict:
        """Warn ``no_progress_grace`` steps before the limit, stop exactly at it.

        ``limits.no_progress`` is the number of steps without progress after which the phase
        ends as stuck, as the workflow's ``max_no_progress_steps`` says; the nudge comes early
        enough for the model to react within it (half the limit at most, for small limits).
        """
        steps = self.steps_since_progress
        limit = self.limits.no_progress
        warn_at = limit - min(self.limits.no_progress_grace, limit // 2)
        if steps < warn_at:
            return OK
        detail = f"{steps} steps without a workspace change or new information"
        nudged = self._nudged_at.get("no_progress")
        if (nudged is not None and self._last_progress_step <= nudged) or (
            self.nudges >= self.limits.max_nudges
        ):
            if steps < limit:
                return OK
            return Verdict(
                "stuck",
                "no_progress",
                detail,
                f"stuck: {detail} (the limit is {limit})",
            )
        self.nudges += 1
        self._nudged_at["no_progress"] = self.step
        message = (
            f"The last {steps} steps changed no file and brought no new information (the same "
            f"files and results again); after {limit} such steps this phase stops as stuck. "
            "Make a concrete change towards the goal now, or call `finish` with a summary if "
            "the phase is done or you are blocked."
        )
        return Verdict("nudge", "no_progress", detail, message)

    def _fire(self, kind: Kind, detail: str, message: str) -> Verdict:
        nudged = self._nudged_at.get(kind)
        if nudged is not None and self._last_progress_step <= nudged:
            grace = self.limits.no_progress_grace if kind == "no_progress" else 1
            if self.step < nudged + grace:
                return OK  # the model has not had its turn(s) to react yet
            return Verdict(
                "stuck",
                kind,
                detail,
                f"stuck: {detail}, and it went on after being told to change course",
            )
        if self.nudges >= self.limits.max_nudges:
            return Verdict(
                "stuck",
                kind,
                detail,
                f"stuck: {detail} (already nudged {self.nudges} times in this phase)",
            )
        self.nudges += 1
        self._nudged_at[kind] = self.step
        return Verdict("nudge", kind, detail, message)


def observations_from_events(events: Iterable[ev.Event]) -> list[Observation]:
    """The current phase's observations, from stored events (to rebuild a tracker on resume).

    Starts over at every ``phase_started``; a call's arguments come from the assistant message
    that made it; a failed check's feedback is new information for the model.
    """
    observations: list[Observation] = []
    arguments: dict[str, str] = {}
    for event in events:
        match event:
            case ev.PhaseStarted():
                observations, arguments = [], {}
            case ev.AssistantMessage():
                observations.append(TurnObs(event.content, bool(event.tool_calls)))
                arguments = {call.id: call.arguments for call in event.tool_calls}
            case ev.ToolFinished():
                observations.append(
                    CallObs(
                        event.name,
                        arguments.get(event.call_id, ""),
                        event.output,
                        mutated=event.snapshot is not None,
                        snapshot=event.snapshot,
                    )
                )
            case ev.CheckFinished() if not event.passed:
                observations.append(FeedbackObs(event.output))
            case _:
                pass
    return observations
