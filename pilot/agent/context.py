"""The context budget and compaction planning: keep every request inside the served window.

A 4B model with a 32K window overflows it within an hour of tool use. This module decides, from
token counts, how much the model may generate (``Budget``), when older turns must be replaced
by a summary and which ones (``plan_compaction``), what the summary request and the message
standing in for the replaced turns look like, and how a large tool output is cut before it
enters the context. The window is the server's real ``max_model_len``, never a guessed default.

Pure: no I/O but through the async ``count_tokens`` callable passed to :class:`TokenCounter`,
no events, no model calls. The loop owns those; it records what this module decided.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pilot.errors import BadRequest, ContextOverflow

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD",
    "SUMMARY_HEADER",
    "SUMMARY_MAX_TOKENS",
    "Budget",
    "CompactionPlan",
    "CountTokens",
    "PromptCount",
    "TokenCounter",
    "accept_summary",
    "apply_compaction",
    "cut_tool_output",
    "estimate_message_tokens",
    "estimate_tools_tokens",
    "fallback_summary",
    "is_summary_message",
    "message_key",
    "plan_compaction",
    "summary_message",
    "summary_request",
]

Message = dict[str, Any]
CountTokens = Callable[[str, list[Message], list[Message] | None], Awaitable[int | None]]
"""``ModelClient.count_tokens``: (model, messages, tools) -> prompt tokens, None if unsupported."""

CHARS_PER_TOKEN = 3.5
"""Estimate when the server cannot count: code and English run 3.5-4.5 characters a token for
the tokenizers we serve, so 3.5 leans high (an overestimate only compacts a little early)."""
MESSAGE_OVERHEAD = 8
"""Estimated tokens a message costs beyond its text (role markers, separators, call framing)."""
BOUND_MESSAGE_SLACK = 32
"""Tokens a chat template may add around one message (role markers, separators), bounded high."""
BOUND_CALL_FACTOR = 2
"""A tool call's JSON may be re-serialized by the template with spaces: at most twice its bytes."""
IDENTITY_CACHE = 4096
"""Messages remembered by identity (each entry keeps its dict alive): more than a context
window holds, few enough that compacted-away tool output is not kept for the whole run. A
message evicted while still in the history is found again by its content key."""
SUMMARY_MAX_TOKENS = 1024
"""Output budget of the summary request; the summary itself must stay small to be worth it."""
SUMMARY_HEADER = "[Summary of earlier work]"
"""First line of the message that stands in for replaced turns (also how one is recognised)."""


# --------------------------------------------------------------------------------------------
# Counting
# --------------------------------------------------------------------------------------------


def message_key(message: Mapping[str, Any]) -> str:
    """A stable hash of a message dict (key order does not matter): the token cache's key."""
    text = json.dumps(
        message, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
    )
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            str(part.get("text", "")) if isinstance(part, Mapping) else str(part)
            for part in content
        )
    return str(content)


def estimate_message_tokens(message: Mapping[str, Any]) -> int:
    """Tokens of one message without a tokenizer: characters / 3.5 plus a fixed overhead."""
    chars = len(_content_text(message.get("content")))
    tokens = MESSAGE_OVERHEAD
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        chars += len(str(function.get("name") or "")) + len(str(function.get("arguments") or ""))
        tokens += MESSAGE_OVERHEAD
    return tokens + math.ceil(chars / CHARS_PER_TOKEN)


def estimate_tools_tokens(tools: Sequence[Mapping[str, Any]] | None) -> int:
    """Tokens the tool schemas add to every request, estimated from their JSON text."""
    if not tools:
        return 0
    return math.ceil(len(json.dumps(list(tools), ensure_ascii=False)) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class PromptCount:
    """A request's prompt size, split so compaction can see what each message costs.

    ``total = overhead + sum(per_message) + tools``. ``exact`` is False when any part is an
    estimate (no /tokenize, or the template refused a message on its own).
    """

    total: int
    per_message: tuple[int, ...]
    tools: int
    overhead: int
    exact: bool
    bounded: bool = False
    """``total`` is only an upper bound (:meth:`TokenCounter.upper_bound`): per_message is empty."""


PROBE: Message = {"role": "user", "content": ""}
"""An empty user turn: the pilot never sends /tokenize an empty conversation (vLLM's chat
template, transformers' ``apply_chat_template``, answers 400 "Cannot apply chat template to an
empty conversation"), so a request's fixed cost is read from one and two probes:
``overhead = 2 * count([PROBE]) - count([PROBE, PROBE])``."""
_PROBE_SYSTEM: Message = {"role": "system", "content": ""}
"""The probe for a conversation that starts with a system message (no default one added)."""


class ServerCounts:
    """What a server's tokenizer says that is the same for every run of a process against it:
    the cost of an empty request and of each tool set, per model. Each is asked once, and
    runs that need it meanwhile wait for that one answer (128 runs starting together made 256
    identical ``/tokenize`` requests). A failed ask is forgotten, so the next one asks again.
    """

    def __init__(self) -> None:
        self._answers: dict[tuple[str, str], asyncio.Future[tuple[int | None, bool | None]]] = {}

    async def once(
        self, model: str, key: str, ask: Callable[[], Awaitable[tuple[int | None, bool | None]]]
    ) -> tuple[int | None, bool | None]:
        """``ask()``'s answer for (``model``, ``key``): (the count, whether the server counts)."""
        answer = self._answers.get((model, key))
        if answer is None:
            answer = self._answers[(model, key)] = asyncio.ensure_future(ask())
            answer.add_done_callback(lambda done: self._forget_failed(model, key, done))
        return await asyncio.shield(answer)

    def _forget_failed(self, model: str, key: str, done: asyncio.Future[Any]) -> None:
        if done.cancelled() or done.exception() is not None:
            self._answers.pop((model, key), None)


class TokenCounter:
    """Prompt sizes from the server's tokenizer, cached per message.

    Counting the whole history on every step would send the whole history to /tokenize on
    every step; instead each message is counted once, alone (``[message]`` minus the request's
    fixed cost), and a step only pays for its new messages. The fixed cost is measured as
    ``2 * count([probe]) - count([probe, probe])``: vLLM refuses an empty conversation (the
    chat template cannot render one), and templates add a default system prompt only when the
    first message is not a system message, so a system message has its own fixed cost. Tool
    schemas are counted once per distinct tool set. The sum differs from a whole-request count
    by a token or so per message (tokens merge across message boundaries): that is what
    ``Budget.margin`` is for. When the server has no /tokenize, a documented estimate is used
    (:func:`estimate_message_tokens`).

    A message the chat template refuses on its own (a strict template wanting a user turn
    first) is estimated; probes that are refused give a fixed cost of 0, which makes every
    per-message count a few tokens high, never low.
    """

    def __init__(
        self,
        count_tokens: CountTokens,
        model: str,
        *,
        concurrency: int = 8,
        max_cache: int = 65536,
        shared: ServerCounts | None = None,
    ) -> None:
        self._count_tokens = count_tokens
        self.model = model
        self._shared = shared
        self._cache: dict[str, tuple[int, bool]] = {}
        self._tools: dict[str, tuple[int, bool]] = {}
        self._tools_seen: tuple[list[Message], tuple[int, bool]] | None = None
        """The last tool list and its cost: the registry sends one shared list per tool set,
        so a step finds it by identity instead of hashing its JSON again (the list is kept, so
        its id cannot be reused)."""
        self._tools_bytes: tuple[list[Message], int] | None = None
        self._overhead: int | None = None
        self._overhead_system: int | None = None
        self._probe_counts: dict[str, int | None] = {}
        self._server: bool | None = None  # None: not yet known; False: no /tokenize
        self._limit = asyncio.Semaphore(concurrency)
        self._max_cache = max_cache
        self._by_identity: dict[int, tuple[Message, tuple[int, bool]]] = {}
        self._bounds: dict[int, tuple[Message, int | None]] = {}
        self.server_calls = 0
        """How many times the server was asked (tests and benchmarks watch this)."""

    @property
    def uses_server(self) -> bool | None:
        """True once the server counted, False if it cannot, None before the first count."""
        return self._server

    async def _ask(self, messages: list[Message], tools: list[Message] | None) -> int | None:
        """One server count; None if the server cannot count or refused this request."""
        if self._server is False:
            return None
        async with self._limit:
            self.server_calls += 1
            try:
                count = await self._count_tokens(self.model, messages, tools)
            except (BadRequest, ContextOverflow):
                return None
        if count is None:
            self._server = False
        else:
            self._server = True
        return count

    async def _ask_shared(
        self, key: str, messages: list[Message], tools: list[Message] | None
    ) -> int | None:
        """A fixed request counted: once per process when ``shared``."""
        if self._shared is None:
            return await self._ask(messages, tools)

        async def ask() -> tuple[int | None, bool | None]:
            return await self._ask(messages, tools), self._server

        count, server = await self._shared.once(self.model, key, ask)
        if server is not None:
            self._server = server
        return count

    async def _fixed_cost(self, probe: Message, key: str) -> int:
        """What a request costs beyond its messages: 2 x [probe] - [probe, probe]."""
        one = await self._ask_shared(f"{key}:1", [probe], None)
        self._probe_counts[key] = one
        if one is None:
            return 0
        two = await self._ask_shared(f"{key}:2", [probe, probe], None)
        return max(2 * one - two, 0) if two is not None else 0

    async def overhead(self) -> int:
        """A request's fixed tokens (BOS, a template's default system prompt, the generation
        prompt) when its first message is not a system message: measured once."""
        if self._overhead is None:
            self._overhead = await self._fixed_cost(PROBE, "overhead")
        return self._overhead

    async def overhead_system(self) -> int:
        """The fixed tokens when the first message is a system message (no default one)."""
        if self._overhead_system is None:
            self._overhead_system = await self._fixed_cost(_PROBE_SYSTEM, "overhead-system")
        return self._overhead_system

    async def _base(self, first: Message | None) -> int:
        if first is not None and first.get("role") == "system":
            return await self.overhead_system()
        return await self.overhead()

    async def count_message(self, message: Message) -> int:
        """One message's tokens (cached by :func:`message_key`)."""
        return (await self._message(message))[0]

    def _remember(self, table: dict[int, Any], message: Message, value: Any) -> None:
        """Cache by identity: the history's dicts are never mutated once appended, so a step
        finds its old messages without hashing them (hashing is O(history) per step). The
        entry holds the dict, so its id cannot be reused while the entry lives."""
        if len(table) >= IDENTITY_CACHE:
            table.pop(next(iter(table)))  # the oldest: most likely compacted away by now
        table[id(message)] = (message, value)

    async def _message(self, message: Message) -> tuple[int, bool]:
        known = self._by_identity.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        key = message_key(message)
        hit = self._cache.get(key)
        if hit is not None:
            self._remember(self._by_identity, message, hit)
            return hit
        overhead = await self._base(message)
        count = await self._ask([message], None)
        if count is None:
            value = (estimate_message_tokens(message), False)
        else:
            value = (max(count - overhead, 1), True)
        if len(self._cache) >= self._max_cache:
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = value
        self._remember(self._by_identity, message, value)
        return value

    def _message_bound(self, message: Message) -> int | None:
        """Tokens one message can never exceed, without a tokenizer; None with images.

        Every tokenizer we serve (byte-level BPE, SentencePiece with byte fallback) spends at
        least one byte of UTF-8 per token, so the text's bytes bound its tokens; the template
        adds at most :data:`BOUND_MESSAGE_SLACK` around it. An image costs hundreds of tokens
        that its URL does not show, so a message with one has no cheap bound.
        """
        known = self._by_identity.get(id(message))
        if known is not None and known[0] is message and known[1][1]:
            return known[1][0]
        cached = self._bounds.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1]
        content = message.get("content")
        bound: int | None = BOUND_MESSAGE_SLACK
        if isinstance(content, str):
            bound += len(content.encode("utf-8"))
        elif content is not None:
            bound = None
        if bound is not None:
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                text = str(function.get("name") or "") + str(function.get("arguments") or "")
                bound += BOUND_CALL_FACTOR * len(text.encode("utf-8")) + BOUND_MESSAGE_SLACK
        self._remember(self._bounds, message, bound)
        return bound

    async def upper_bound(
        self, messages: Sequence[Message], tools: list[Message] | None = None
    ) -> int | None:
        """A prompt size the real one cannot exceed, asking the server at most once per run
        (the fixed overhead and the tool schemas); None when no cheap bound exists.

        Far from the window's limits a bound answers "does it fit?" as well as a count, and it
        costs no request: counting every new message on every step would be two ``/tokenize``
        round trips a step (figures in bench/README.md, ``bench/parallel.py``).
        Messages already counted exactly add their exact count.
        """
        total = await self.overhead() + BOUND_MESSAGE_SLACK
        total += await self._tools_bound(tools)
        for message in messages:
            bound = self._message_bound(message)
            if bound is None:
                return None
            total += bound
        return total

    async def _tools_bound(self, tools: list[Message] | None) -> int:
        tools_cost, exact = await self._tools_cost(tools)
        if exact:
            return tools_cost
        seen = self._tools_bytes
        if seen is None or seen[0] is not tools:
            # templates may pretty-print the schemas: 4x their compact bytes
            size = 4 * len(json.dumps(tools, separators=(",", ":")).encode("utf-8"))
            seen = self._tools_bytes = (tools, size)
        return seen[1]

    async def _tools_cost(self, tools: list[Message] | None) -> tuple[int, bool]:
        if not tools:
            return 0, True
        seen = self._tools_seen
        if seen is not None and seen[0] is tools:
            return seen[1]
        hit = await self._tools_cost_of(tools)
        self._tools_seen = (tools, hit)
        return hit

    async def _tools_cost_of(self, tools: list[Message]) -> tuple[int, bool]:
        key = message_key({"tools": tools})
        hit = self._tools.get(key)
        if hit is None:
            await self.overhead()
            without = self._probe_counts.get("overhead")
            count = await self._ask_shared(f"tools:{key}", [PROBE], tools)
            if count is None or without is None:
                hit = (estimate_tools_tokens(tools), False)
            else:
                hit = (max(count - without, 0), True)
            self._tools[key] = hit
        return hit

    async def count(
        self, messages: Sequence[Message], tools: list[Message] | None = None
    ) -> PromptCount:
        """The prompt size of ``messages`` (+ ``tools``); only uncached messages hit the server."""
        overhead = await self._base(messages[0] if messages else None)
        tools_cost, tools_exact = await self._tools_cost(tools)
        parts = await asyncio.gather(*(self._message(m) for m in messages))
        per_message = tuple(n for n, _ in parts)
        exact = bool(self._server) and tools_exact and all(ok for _, ok in parts)
        return PromptCount(
            total=overhead + tools_cost + sum(per_message),
            per_message=per_message,
            tools=tools_cost,
            overhead=overhead,
            exact=exact,
        )


# --------------------------------------------------------------------------------------------
# The budget
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """What fits in the served window: output room per request and when to compact.

    ``max_model_len`` is the server's window; ``max_tokens_wanted`` the workflow's output cap;
    ``margin`` covers counting error (per-message sums vs the real template); ``compact_at``
    is the fraction of the window at which compaction starts; below ``min_output_tokens`` of
    room a request is not worth sending (a tool call with a file edit needs a few hundred
    tokens), so compaction is required instead.
    """

    max_model_len: int
    max_tokens_wanted: int
    margin: int = 256
    compact_at: float = 0.75
    min_output_tokens: int = 256
    keep_recent_fraction: float = 0.3
    """Share of the window the verbatim recent turns may take after a compaction."""

    def __post_init__(self) -> None:
        if not 0.0 < self.compact_at <= 1.0:
            raise ValueError(f"compact_at must be in (0, 1], got {self.compact_at}")
        if not 0.0 < self.keep_recent_fraction < self.compact_at:
            raise ValueError("keep_recent_fraction must be in (0, compact_at)")
        if self.max_tokens_wanted < 1 or self.margin < 0:
            raise ValueError("max_tokens_wanted must be >= 1 and margin >= 0")
        if self.max_model_len - self.margin < self.floor:
            raise ValueError(
                f"a window of {self.max_model_len} tokens minus a margin of {self.margin} leaves "
                f"no room for {self.floor} output tokens"
            )

    @property
    def floor(self) -> int:
        """The least output a request may be given (never more than the workflow wants)."""
        return min(self.min_output_tokens, self.max_tokens_wanted)

    def room(self, prompt_tokens: int) -> int:
        """Output tokens the window leaves after ``prompt_tokens`` and the margin."""
        return self.max_model_len - self.margin - prompt_tokens

    def request_max_tokens(self, prompt_tokens: int) -> int:
        """``max_tokens`` for a request: prompt + it never exceeds window - margin.

        Raises :class:`ContextOverflow` when the room is below :attr:`floor`: the caller
        compacts (the same path as the server's own 400), it does not send a starved request.
        """
        room = self.room(prompt_tokens)
        if room < self.floor:
            raise ContextOverflow(
                f"the prompt has about {prompt_tokens} tokens, leaving {max(room, 0)} of the "
                f"{self.max_model_len}-token window for output (at least {self.floor} needed)",
                max_model_len=self.max_model_len,
                prompt_tokens=prompt_tokens,
                max_tokens=self.floor,
            )
        return min(self.max_tokens_wanted, room)

    def needs_compaction(self, prompt_tokens: int) -> bool:
        """True at ``compact_at`` of the window, or sooner if the output room gets too small."""
        return (
            prompt_tokens >= self.compact_at * self.max_model_len
            or self.room(prompt_tokens) < self.floor
        )

    def keep_recent_tokens(self) -> int:
        """Tokens of recent turns kept verbatim by a normal compaction."""
        return int(self.max_model_len * self.keep_recent_fraction)

    def summary_input_tokens(self, summary_max_tokens: int = SUMMARY_MAX_TOKENS) -> int:
        """How much of the old transcript a summary request may carry and still fit."""
        return max(self.max_model_len - self.margin - summary_max_tokens - 512, 256)


# --------------------------------------------------------------------------------------------
# Compaction planning
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactionPlan:
    """Which messages a compaction replaces.

    After it, the conversation is ``[messages[i] for i in pinned] + [summary] +
    messages[replaced_to:]``: ``pinned`` (the system prompt, the current phase's first user
    message) are kept verbatim in place, every other message before ``replaced_to`` is
    ``replaced``, and the tail from ``replaced_to`` on is kept verbatim.
    """

    pinned: tuple[int, ...]
    replaced_to: int
    replaced: tuple[int, ...]
    tokens_replaced: int
    tokens_kept: int
    harder: int = 0

    def replaced_messages(self, messages: Sequence[Message]) -> list[Message]:
        return [messages[i] for i in self.replaced]

    def apply(self, messages: Sequence[Message], summary_text: str) -> list[Message]:
        return apply_compaction(messages, self.pinned, self.replaced_to, summary_text)

    def new_index(self, old: int) -> int | None:
        """Where message ``old`` sits after the compaction (None if it was replaced)."""
        if old in self.pinned:
            return self.pinned.index(old)
        if old >= self.replaced_to:
            return old - self.replaced_to + len(self.pinned) + 1
        return None


def apply_compaction(
    messages: Sequence[Message], pinned: Sequence[int], replaced_to: int, summary_text: str
) -> list[Message]:
    """The conversation after a compaction; also what the fold does with a compaction event."""
    replaced = replaced_to - sum(1 for i in pinned if i < replaced_to)
    head = [messages[i] for i in pinned if i < replaced_to]
    return [*head, summary_message(summary_text, replaced), *messages[replaced_to:]]


def _valid_cuts(messages: Sequence[Message]) -> list[bool]:
    """``ok[c]``: the tail ``messages[c:]`` holds no tool result whose call is before ``c``.

    A cut is a turn boundary: not at a tool message, and not between an assistant message and
    any of its results (results that arrive late, after another message, included).
    """
    n = len(messages)
    blocked = [0] * (n + 2)  # difference array over cut positions
    caller: dict[str, int] = {}
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            for call in message.get("tool_calls") or ():
                if call.get("id"):
                    caller[str(call["id"])] = i
        elif role == "tool":
            start = caller.get(str(message.get("tool_call_id")), i - 1)
            blocked[start + 1] += 1
            blocked[i + 1] -= 1
    ok, running = [], 0
    for c in range(n + 1):
        running += blocked[c]
        ok.append(running == 0)
    return ok


def plan_compaction(
    messages: Sequence[Message],
    counts: Sequence[int],
    *,
    keep_recent_tokens: int,
    phase_start: int | None = None,
    harder: int = 0,
    min_replaced: int = 2,
) -> CompactionPlan | None:
    """Choose the older turns to replace by a summary, or None if there is nothing to gain.

    Kept verbatim: message 0 when it is the system prompt, ``phase_start`` (the current
    phase's first user message) and the most recent turns that fit ``keep_recent_tokens``
    (always at least the last turn). ``harder`` (after the server still said "maximum context
    length", bounded by the caller) halves that allowance per level; from level 3 only the last
    turn is kept. The tail starts at a turn boundary, so no tool result loses its call.
    """
    n = len(messages)
    if len(counts) != n:
        raise ValueError(f"{len(counts)} counts for {n} messages")
    pins = set()
    if n and messages[0].get("role") == "system":
        pins.add(0)
    if phase_start is not None and 0 <= phase_start < n:
        pins.add(phase_start)
    allowance = 0 if harder >= 3 else keep_recent_tokens >> max(harder, 0)
    ok = _valid_cuts(messages)
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + counts[i]
    cuts = [c for c in range(1, n) if ok[c]]  # keep at least one message: the last turn

    def replaceable(c: int) -> int:
        return c - sum(1 for p in pins if p < c)

    candidates = [c for c in cuts if replaceable(c) >= min_replaced]
    if not candidates:
        return None
    fitting = [c for c in candidates if suffix[c] <= allowance]
    cut = fitting[0] if fitting else candidates[-1]
    pinned = tuple(sorted(p for p in pins if p < cut))
    replaced = tuple(i for i in range(cut) if i not in pins)
    return CompactionPlan(
        pinned=pinned,
        replaced_to=cut,
        replaced=replaced,
        tokens_replaced=sum(counts[i] for i in replaced),
        tokens_kept=sum(counts[i] for i in pinned) + suffix[cut],
        harder=harder,
    )


# --------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------

SUMMARY_HEADINGS = ("Goal", "Progress", "Decisions", "Files", "Open problems", "Next step")

_SUMMARY_SYSTEM = (
    "You write the working notes of a coding agent. Its older messages are about to be deleted; "
    "your notes replace them, so the agent can continue without them. Be factual and specific: "
    "file paths, function names, commands, error messages, numbers. Never invent anything that "
    "is not in the log. Do not call tools. Answer with the notes only."
)

_SUMMARY_FORMAT = (
    "Write the notes now, with exactly these six headings, each followed by short bullet "
    "points:\n\n"
    "## Goal\n(what the agent is trying to achieve)\n"
    "## Progress\n(what is done so far, and what was verified, e.g. tests passing)\n"
    "## Decisions\n(choices made and why)\n"
    "## Files\n(read: paths; changed: paths with what changed)\n"
    "## Open problems\n(errors not yet solved, failing tests, doubts)\n"
    "## Next step\n(the very next thing to do)\n\n"
    "Keep it under 400 words. If an older summary is in the log, merge it into your notes: "
    "keep everything in it that still matters."
)


def is_summary_message(message: Mapping[str, Any]) -> bool:
    """True for a message made by :func:`summary_message` (an earlier compaction)."""
    return message.get("role") == "user" and _content_text(message.get("content")).startswith(
        SUMMARY_HEADER
    )


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[-tail:]}"


def _call_names(messages: Sequence[Message]) -> dict[str, str]:
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            names[str(call.get("id"))] = str((call.get("function") or {}).get("name") or "?")
    return names


def _render_entry(message: Message, names: Mapping[str, str], per_message_chars: int) -> str:
    role = message.get("role")
    text = _content_text(message.get("content")).strip()
    if is_summary_message(message):
        return f"[older summary]\n{_clip(text, per_message_chars * 4)}"
    if role == "tool":
        name = names.get(str(message.get("tool_call_id")), "tool")
        return f"[result of {name}]\n{_clip(text, per_message_chars)}"
    if role == "assistant":
        lines = [f"[agent]\n{_clip(text, per_message_chars)}"] if text else ["[agent]"]
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            arguments = _clip(str(function.get("arguments") or ""), per_message_chars // 2)
            lines.append(f"-> called {function.get('name')}({arguments})")
        return "\n".join(lines)
    return f"[{role}]\n{_clip(text, per_message_chars)}"


def summary_request(
    messages_to_replace: Sequence[Message],
    *,
    task: str | None = None,
    max_input_tokens: int = 6000,
    per_message_chars: int = 1500,
) -> list[Message]:
    """The messages that ask the model for a structured summary of ``messages_to_replace``.

    The old turns go in as one plain-text log inside a user message (not as chat turns: a small
    model then summarises instead of carrying on the conversation), with the format asked for
    after the log, where a 4B model still sees it. Send it without tools. The log is clipped
    per message and, if still too long for ``max_input_tokens``, its middle is dropped (the
    start holds the goal and any older summary, the end the latest state).
    """
    names = _call_names(messages_to_replace)
    entries = [_render_entry(m, names, per_message_chars) for m in messages_to_replace]
    budget_chars = max(int(max_input_tokens * 3), 1000)  # 3 chars a token: leans safe
    if task:
        budget_chars -= min(len(task), 2000)
    total = sum(len(e) + 2 for e in entries)
    if total > budget_chars:
        head: list[str] = []
        used = 0
        for entry in entries:
            if used + len(entry) > budget_chars // 3:
                break
            head.append(entry)
            used += len(entry) + 2
        tail: list[str] = []
        for entry in reversed(entries[len(head) :]):
            if used + len(entry) > budget_chars:
                break
            tail.append(entry)
            used += len(entry) + 2
        dropped = len(entries) - len(head) - len(tail)
        entries = [*head, f"[... {dropped} messages omitted ...]", *reversed(tail)]
    task_part = (
        f"The agent's task (it keeps this text, do not copy it):\n{_clip(task, 2000)}\n\n"
        if task
        else ""
    )
    log = "\n\n".join(entries)
    user = f"{task_part}The agent's older work log:\n<log>\n{log}\n</log>\n\n{_SUMMARY_FORMAT}"
    return [{"role": "system", "content": _SUMMARY_SYSTEM}, {"role": "user", "content": user}]


_THINK_RE = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)


def accept_summary(text: str | None, *, max_chars: int = 8000) -> str | None:
    """The model's summary cleaned up, or None if it is unusable (then use the fallback)."""
    if not text:
        return None
    cleaned = _THINK_RE.sub("", text).strip()
    if cleaned.startswith("```") and cleaned.endswith("```"):
        cleaned = cleaned.strip("`").removeprefix("markdown").strip()
    if len(cleaned) < 40 or sum(h.lower() in cleaned.lower() for h in SUMMARY_HEADINGS) < 2:
        return None
    return _clip(cleaned, max_chars)


def summary_message(summary_text: str, replaced_count: int) -> Message:
    """The user message standing in for ``replaced_count`` replaced messages."""
    return {
        "role": "user",
        "content": (
            f"{SUMMARY_HEADER} {replaced_count} earlier messages of this run were replaced by "
            "this summary to save room; they are kept in the run's history. Continue the task "
            f"from here; do not redo what it says is done.\n\n{summary_text.strip()}"
        ),
    }


_CHANGE_WORDS = ("write", "edit", "create", "delete", "remove", "move", "rename", "patch", "apply")
_PATH_KEYS = re.compile(r"path|file|dir|target|src|dst|dest", re.IGNORECASE)


def _paths(arguments: str) -> list[str]:
    try:
        value = json.loads(arguments)
    except (ValueError, TypeError):
        return []
    if not isinstance(value, dict):
        return []
    found: list[str] = []
    for key, item in value.items():
        if not _PATH_KEYS.search(str(key)):
            continue
        for path in item if isinstance(item, list) else [item]:
            if isinstance(path, str) and path and len(path) < 300:
                found.append(path)
    return found


def fallback_summary(
    messages: Sequence[Message],
    *,
    mutating_tools: Collection[str] | None = None,
    max_chars: int = 4000,
) -> str:
    """A summary built from the messages alone, for when the model's summary fails or is empty.

    Same headings as the model's: the tools called (with counts), files read and changed (from
    the calls' arguments), commands run, the last results' first lines, error results, and any
    older summary carried over (clipped, so repeated fallbacks stay bounded in size).
    """
    names = _call_names(messages)

    def changes(name: str) -> bool:
        if mutating_tools is not None:
            return name in mutating_tools
        return any(word in name.lower() for word in _CHANGE_WORDS)

    calls: dict[str, int] = {}
    read: dict[str, None] = {}
    changed: dict[str, None] = {}
    commands: list[str] = []
    older: list[str] = []
    prompts: list[str] = []
    results: list[tuple[str, str]] = []
    for message in messages:
        role = message.get("role")
        text = _content_text(message.get("content")).strip()
        if is_summary_message(message):
            older.append(_clip(text.split("\n\n", 1)[-1], max_chars // 2))
        elif role == "user" and text:
            prompts.append(text.splitlines()[0][:200])
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")), "tool")
            results.append((name, text))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            name = str(function.get("name") or "?")
            arguments = str(function.get("arguments") or "")
            calls[name] = calls.get(name, 0) + 1
            for path in _paths(arguments):
                (changed if changes(name) else read)[path] = None
            try:
                command = json.loads(arguments).get("command")
            except (ValueError, TypeError, AttributeError):
                command = None
            if isinstance(command, str):
                commands.append(command.strip().splitlines()[0][:120] if command.strip() else "")
    errors = [(n, t) for n, t in results if t.startswith("Error")][-3:]

    def first_line(text: str) -> str:
        lines = [line for line in text.splitlines() if line.strip()]
        return (lines[0][:160] if lines else "(empty)") + (" ..." if len(lines) > 1 else "")

    lines = ["(Written by the harness from the log: the model's summary was not available.)"]
    if older:
        lines += ["", "## Older summary", *older]
    lines += ["", "## Goal", "- See the task above."]
    lines += [f"- Earlier instruction: {p}" for p in prompts[-3:]]
    lines += ["", "## Progress", f"- {len(messages)} messages replaced."]
    if calls:
        lines.append("- Tools called: " + ", ".join(f"{k} x{v}" for k, v in calls.items()))
    if commands:
        lines.append("- Last commands: " + "; ".join(f"`{c}`" for c in commands[-5:]))
    lines += ["", "## Decisions", "- Not recorded (see the files changed)."]
    lines += ["", "## Files"]
    lines.append("- read: " + (", ".join(list(read)[-30:]) or "none"))
    lines.append("- changed: " + (", ".join(list(changed)[-30:]) or "none"))
    lines += ["", "## Open problems"]
    lines += [f"- {n}: {first_line(t)}" for n, t in errors] or ["- None recorded."]
    lines += ["", "## Last results"]
    lines += [f"- {n}: {first_line(t)}" for n, t in results[-3:]] or ["- None."]
    lines += ["", "## Next step", "- Check the current state of the files, then continue."]
    return _clip("\n".join(lines), max_chars)


# --------------------------------------------------------------------------------------------
# Tool output
# --------------------------------------------------------------------------------------------


def _cost(text: str) -> float:
    """Token cost of text for cutting: UTF-8 bytes / 3 (safe for code, prose and CJK alike)."""
    return len(text.encode("utf-8")) / 3


def cut_tool_output(
    text: str, budget_tokens: int, *, artifact: str | None = None
) -> tuple[str, bool]:
    """Cut a tool output to about ``budget_tokens`` before it enters the context.

    Keeps whole lines from the head (40%) and the tail (60%: errors and test summaries come
    last) and puts in their place a note saying what was left out and, when the full text is
    kept as ``artifact`` (a path read_file can open), the read_file call that shows it. Returns
    ``(text, truncated)``.
    """
    if _cost(text) <= budget_tokens:
        return text, False
    lines = text.splitlines(keepends=True)
    note_reserve = 120
    usable = max(budget_tokens - note_reserve, 16)
    head: list[str] = []
    used = 0.0
    for line in lines:
        if used + _cost(line) > usable * 0.4:
            break
        head.append(line)
        used += _cost(line)
    tail: list[str] = []
    for line in reversed(lines[len(head) :]):
        if used + _cost(line) > usable:
            break
        tail.append(line)
        used += _cost(line)
    tail.reverse()
    first_hidden = len(head) + 1
    last_hidden = len(lines) - len(tail)
    hidden = "".join(lines[len(head) : last_hidden])
    if not head and not tail:  # one giant line: cut by characters instead
        chars = int(usable * 3)
        head, tail = [text[: chars * 2 // 5]], [text[-(chars * 3 // 5) :]]
        hidden = text[len(head[0]) : len(text) - len(tail[0])]
        where = f"{len(hidden):,} characters in the middle not shown"
    else:
        where = (
            f"lines {first_hidden}-{last_hidden} of {len(lines)} "
            f"({len(hidden):,} characters) not shown"
        )
    if artifact:
        how = (
            f"The full output is kept as {artifact}: read the hidden part with read_file "
            f'(path="{artifact}", offset={first_hidden}, limit=200), then higher offsets.'
        )
    else:
        how = "The full output was not kept: narrow the command (grep, head, tail) to see a part."
    body_head = "".join(head)
    if body_head and not body_head.endswith("\n"):
        body_head += "\n"
    return f"{body_head}[... {where}. {how}]\n{''.join(tail)}", True
