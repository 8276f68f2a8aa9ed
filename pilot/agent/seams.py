"""What the agent loop is given, as types: the event sink, the tools, the workspace, the tactics.

The loop does no I/O but through these. They are Protocols, so the loop imports none of
their implementations (the store, ``pilot.workspace``, ``pilot.tactics``): the run wing
builds them and hands them over, and a test can hand over its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pilot import events as ev
from pilot.model.types import ModelResponse

Schemas = Mapping[str, dict[str, Any] | None]
"""A phase's tools by name, each with its parameter schema (None: the tool takes any)."""


class EventSink(Protocol):
    def __call__(self, event: ev.Event, *, commit: bool = True) -> None:
        """Record ``event``; it is durable on return. ``commit=False`` lets it wait for the
        next event's transaction, or until the loop has waited a moment on something (a slow
        read-only tool, a request), whichever comes first; the state has it at once."""
        ...


@dataclass(frozen=True)
class CheckOutcome:
    exit_code: int | None
    output: str
    timed_out: bool


class ToolExecutor(Protocol):
    """The tools as the loop sees them (implemented over ``tools.ToolRegistry``)."""

    def schemas(self, names: list[str]) -> list[dict[str, Any]]: ...
    def known(self, name: str) -> bool: ...
    def mutates(self, name: str) -> bool: ...
    def edits(self, name: str) -> bool:
        """Whether a call is a file edit (a tool that writes only the paths it names)."""
        ...

    def blocks(self, name: str) -> bool:
        """Whether a call may block (I/O): it then runs in a worker thread, otherwise on the
        event loop, where it costs less than the hop to a thread."""
        ...

    def invoke(
        self,
        name: str,
        arguments: dict[str, Any],
        call_id: str,
        time_left: float | None = None,
    ) -> ev.ToolFinished:
        """Run one call; ``time_left``: the wall time the run has left (a command waits no
        longer)."""
        ...

    def run_check(self, command: str, timeout: float, call_id: str) -> CheckOutcome: ...
    def keep_full_output(self, call_id: str, text: str) -> str | None:
        """Keep a long result where the model can page through it; returns its path."""
        ...


class WorkspaceOps(Protocol):
    def snapshot(self, message: str) -> tuple[str, str | None]: ...
    def restore(self, snapshot: str, head: str | None) -> None: ...


class StopRequested(Exception):
    """Raised inside the loop when a pause was asked for; caught by the loop itself."""


RunCommand = Callable[[str, float, str], Awaitable[CheckOutcome]]
"""Runs a read-only command in the workspace (command, timeout, id) for a tactic that needs
to look (the loop lends it; nothing it runs is an event)."""


@dataclass
class Reading:
    """An answer read into calls by the tactics: the calls (``ev.ToolCall``, ids given), the
    content left once calls written as text are taken out, and what was repaired."""

    calls: list[ev.ToolCall]
    content: str | None
    repairs: list[str] = field(default_factory=list)
    from_text: bool = False
    """Some call was recovered from the text: the history goes back to the model as text."""
    seen: Any = None
    """What the text reading found (for the answer to a turn with no runnable call)."""
    code_blocks: set[str] = field(default_factory=set)
    """Ids of the calls whose code was taken from a fenced block of the text (not JSON)."""


class Tactics(Protocol):
    """The decisions the loop asks of the tactics for imperfect models (``pilot.tactics``).

    The loop keeps every act and every event; a tactic only answers. A run whose model
    calls its tools cleanly enters here through ``plain_calls`` alone: every other method is
    asked only once that check, the state or a workflow option says a tactic is needed.
    """

    def plain_calls(self, response: ModelResponse, schemas: Schemas) -> list[dict] | None:
        """The one check on every answer: each call's arguments, when every call names a
        tool of the phase with a JSON object its schema takes as it is; else None (then
        ``read_answer`` reads it)."""
        ...

    def read_answer(
        self,
        step: int,
        response: ModelResponse,
        schemas: Schemas,
        prompt: str,
        known: Callable[[str], bool],
    ) -> Reading:
        """Read an answer that is not plain into calls: repaired arguments, near names (of
        a tool not ``known``), calls written as text in the content."""
        ...

    def no_call_turn(
        self,
        step: int,
        content: str | None,
        reading: Reading,
        schemas: Schemas,
        *,
        empties: int,
        previous: str | None,
        prompt: str,
    ) -> ev.Nudge | ev.Question | None:
        """What to say to an answer with no call (None: ask again as it is)."""
        ...

    def writes_calls_as_text(self, messages: list[dict[str, Any]]) -> bool:
        """Whether an earlier call in ``messages`` was recovered from text (asked once, on a
        resume)."""
        ...

    def as_text_turns(
        self, messages: list[dict[str, Any]], *, every: bool = False
    ) -> list[dict[str, Any]]:
        """The history as sent to a model that writes its calls as text (``every``: native
        calls too, for a request that sends no tools)."""
        ...

    def call_syntax(self, schemas: list[dict[str, Any]], *, text: bool, code_blocks: bool) -> str:
        """What the system prompt adds for a call mode: the tools and the call syntax (text
        mode), how code travels as a fenced block (``code_blocks``)."""
        ...

    def code_block(self, content: str) -> tuple[str, str] | None:
        """The one fenced block of an answer that is not a JSON call, and the text around it
        (the code a call came without, asked for); None when there is not exactly one."""
        ...

    def temperature(self, base: float | None, repeats: int) -> float | None:
        """How hot to sample after ``repeats`` equal calls in a row or fresh tries (None: the
        workflow's own)."""
        ...

    async def code_to_show(
        self, output: str, prompt: str, tools: list[str], run: RunCommand
    ) -> tuple[list[str], list[str]]:
        """Prompt sections showing the code a failing ``output`` points at (``locate``), and
        those to put after the task (said last)."""
        ...

    def after_edit_feedback(self, command: str, outcome: CheckOutcome) -> str:
        """What the model is told when the check run after its edit still fails."""
        ...
