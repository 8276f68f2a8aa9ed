"""A policy read from a YAML script: the easiest way for a test to say what the model does.

Format::

    conversations:
      - key: "alpha-task"        # substring of the system prompt or the first user message
        turns:                   # turn i answers the request holding i assistant messages
          - content: "Let me look."
            tool_calls: [{name: read_file, arguments: {path: README.md}}]
          - reasoning: "thinking..."
            tool_calls: [{name: finish, arguments: {summary: "done"}}]
          - fault: stream_cut    # a per-turn fault (any FaultKind), on top of what the turn says
          - tool_calls: [{name: read_file, raw_arguments: '{"path": "x",'}]   # sent verbatim
          - content: "I would edit app.py."       # what the model says unforced ...
            forced_tool_calls: [{name: edit_file, arguments: {path: app.py}}]  # ... and forced
        replies:                 # checked first: a `when` substring of the last user/tool message
          - when: "Check failed"
            content: "Fixing it."
            tool_calls: [{name: run, arguments: {command: "make test"}}]
        after_end: {content: "Nothing more to do."}   # past the last turn (default: a short stop)
        index_by: requests       # optional: turn i answers the i-th request of this
                                 # conversation (a harness that restarts a try from its
                                 # prompt sends the same messages again)
    default: {content: "No script for this conversation."}   # when no key matches

A turn may hold ``content``, ``reasoning``, ``tool_calls`` (each ``name`` plus ``arguments``, a
mapping dumped as JSON, or ``raw_arguments``, text sent as is), ``forced_tool_calls`` (the same,
answered instead when the request forces a call with ``tool_choice`` required or named; without
them a forced answer takes the turn's calls to the allowed tools, else a call to the first allowed
tool with its schema's required properties), ``finish_reason`` and ``fault``. A forced call's
arguments are JSON, as constrained decoding makes them (``raw_arguments`` that are not a JSON
object give way to the schema's required properties); a forced answer cut at ``max_tokens``
(``fault: length``, or a small ``max_tokens``) still comes out cut.
A turn may also carry ``when``: it then answers only if its text is in the last user/tool
message; otherwise ``after_end`` answers for that turn number. Replies count as assistant
messages like any other turn, so the turn index keeps counting after them. Conversations are
tried in order; the first key found wins.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from brain.sim.policy import SimChatRequest, SimTurn, assistant_count, last_input_text


class ScriptToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] | None = None
    raw_arguments: str | None = None

    def arguments_text(self) -> str:
        if self.raw_arguments is not None:
            return self.raw_arguments
        return json.dumps(self.arguments or {}, ensure_ascii=False)


class ScriptTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    when: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ScriptToolCall] = Field(default_factory=list)
    forced_tool_calls: list[ScriptToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    fault: str | None = None

    def to_turn(self) -> SimTurn:
        return SimTurn(
            content=self.content,
            reasoning=self.reasoning,
            tool_calls=tuple((c.name, c.arguments_text()) for c in self.tool_calls),
            forced_calls=tuple((c.name, c.arguments_text()) for c in self.forced_tool_calls),
            finish_reason=self.finish_reason,
            fault=self.fault,
        )


class ScriptConversation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    turns: list[ScriptTurn] = Field(default_factory=list)
    replies: list[ScriptTurn] = Field(default_factory=list)
    after_end: ScriptTurn = Field(default_factory=lambda: ScriptTurn(content="Nothing more to do."))
    index_by: Literal["assistant_messages", "requests"] = "assistant_messages"

    @model_validator(mode="after")
    def _replies_need_when(self) -> ScriptConversation:
        for reply in self.replies:
            if not reply.when:
                raise ValueError(f"conversation {self.key!r}: every reply needs a 'when'")
        return self


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    conversations: list[ScriptConversation] = Field(default_factory=list)
    default: ScriptTurn = Field(
        default_factory=lambda: ScriptTurn(content="(sim) No script matches this conversation.")
    )


class ScriptPolicy:
    """Answers from a Script; a pure function of the request's messages (or, for a
    conversation with ``index_by: requests``, of how many requests it has had)."""

    def __init__(self, script: Script):
        self.script = script
        self._requests: dict[str, int] = {}

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptPolicy:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        return cls(Script.model_validate(data))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScriptPolicy:
        return cls(Script.model_validate(data))

    def _conversation(self, request: SimChatRequest) -> ScriptConversation | None:
        system = next((m.text for m in request.messages if m.role in ("system", "developer")), "")
        first_user = next((m.text for m in request.messages if m.role == "user"), "")
        for conversation in self.script.conversations:
            if conversation.key in system or conversation.key in first_user:
                return conversation
        return None

    def respond(self, request: SimChatRequest) -> SimTurn:
        conversation = self._conversation(request)
        if conversation is None:
            return self.script.default.to_turn()
        last = last_input_text(request.messages)
        for reply in conversation.replies:
            if reply.when and reply.when in last:
                return reply.to_turn()
        if conversation.index_by == "requests":
            index = self._requests.get(conversation.key, 0)
            self._requests[conversation.key] = index + 1
        else:
            index = assistant_count(request.messages)
        if index < len(conversation.turns):
            turn = conversation.turns[index]
            if turn.when is None or turn.when in last:
                return turn.to_turn()
        return conversation.after_end.to_turn()
