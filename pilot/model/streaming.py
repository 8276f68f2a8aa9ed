"""Reassemble one streamed chat completion from its chunks; pure, no I/O.

vLLM streams tool calls as deltas keyed by ``index``: the first delta of a call carries its
``id`` and ``function.name``, later ones only ``function.arguments`` fragments, which must be
concatenated. Some servers (and some vLLM versions, #42696) repeat or omit fields, so nothing
beyond that is assumed: an ``id`` is never expected to repeat, a repeated name is not appended
twice, and a delta without ``index`` continues the latest call.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from pilot.model.types import ToolCallOut, Usage

__all__ = ["StreamAccumulator"]


def _as_dict(chunk: Any) -> dict[str, Any]:
    """A chunk as plain JSON: the client reads dicts; an SDK object (tests, other clients) is
    dumped once, extras (``reasoning``) included."""
    if isinstance(chunk, dict):
        return chunk
    dump = getattr(chunk, "model_dump", None)
    return dump() if dump is not None else dict(vars(chunk))


@dataclass
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAccumulator:
    """Fold ``ChatCompletionChunk``s (SDK objects or dicts) into one assistant turn.

    ``first_delta`` becomes True with the first chunk that carries generated output (content,
    reasoning or a tool call), which is when the caller stops its time-to-first-token clock.
    """

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    chunks: int = 0
    received_chars: int = 0
    first_delta: bool = False
    _calls: dict[int, _PartialCall] = field(default_factory=dict)
    _last_index: int | None = None

    def add(self, chunk: Any) -> bool:
        """Take one chunk; returns True if it carried generated output."""
        chunk = _as_dict(chunk)
        self.chunks += 1
        usage = chunk.get("usage")
        if usage:
            prompt = usage.get("prompt_tokens")
            completion = usage.get("completion_tokens")
            if prompt is not None or completion is not None:
                self.usage = Usage(
                    prompt_tokens=int(prompt or 0), completion_tokens=int(completion or 0)
                )
        produced = False
        for choice in chunk.get("choices") or ():
            if choice.get("index") or 0:
                continue  # n > 1 is never requested; ignore stray choices
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                self.content.append(text)
                self.received_chars += len(text)
                produced = True
            thought = delta.get("reasoning") or delta.get("reasoning_content")
            if thought:
                self.reasoning.append(thought)
                self.received_chars += len(thought)
                produced = True
            for tool_delta in delta.get("tool_calls") or ():
                self._add_tool_delta(tool_delta)
                produced = True
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = str(reason)
        if produced:
            self.first_delta = True
        return produced

    def _add_tool_delta(self, tool_delta: dict[str, Any]) -> None:
        index = tool_delta.get("index")
        call_id = tool_delta.get("id")
        if index is None:
            # No index: a new id starts a new call, anything else continues the latest one.
            known = self._calls.get(self._last_index) if self._last_index is not None else None
            if known is None or (call_id and known.id and call_id != known.id):
                index = len(self._calls)
            else:
                index = self._last_index
        index = int(index)
        call = self._calls.setdefault(index, _PartialCall())
        self._last_index = index
        if call_id and not call.id:
            call.id = str(call_id)
        function = tool_delta.get("function") or {}
        name = function.get("name")
        if name and not call.name:
            call.name = str(name)
        fragment = function.get("arguments")
        if fragment:
            call.arguments.append(str(fragment))
            self.received_chars += len(fragment)

    @property
    def text(self) -> str | None:
        """The content, or None when the model produced no content at all."""
        return "".join(self.content) if self.content else None

    @property
    def reasoning_text(self) -> str | None:
        return "".join(self.reasoning) if self.reasoning else None

    def tool_calls(self) -> list[ToolCallOut]:
        """The calls in index order; a call the server sent without an id gets a fresh one."""
        return [
            ToolCallOut(
                id=call.id or f"call_{uuid.uuid4().hex[:24]}",
                name=call.name,
                arguments="".join(call.arguments),
            )
            for _, call in sorted(self._calls.items())
        ]
