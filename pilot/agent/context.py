"""The context budget: count a request's tokens and keep it inside the served window.

A 4B model with a 32K window overflows it within an hour of tool use. This module counts a
prompt (``TokenCounter``: the server's own count, cached per message, or a bound) and decides
from the counts how much the model may generate and when older turns must be replaced
(``Budget``; which ones and by what: ``pilot.agent.compaction``). The window is the server's
real ``max_model_len``, never a guessed default.

Pure: no I/O but through the async ``count_tokens`` callable passed to :class:`TokenCounter`,
no events, no model calls. The loop owns those; it records what this module decided.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pilot.errors import BadRequest, ContextOverflow

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD",
    "SUMMARY_MAX_TOKENS",
    "Budget",
    "CountTokens",
    "PromptCount",
    "TokenCounter",
    "estimate_message_tokens",
    "estimate_tools_tokens",
    "message_key",
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


# --------------------------------------------------------------------------------------------
# Counting
# --------------------------------------------------------------------------------------------


def message_key(message: Mapping[str, Any]) -> str:
    """A stable hash of a message dict (key order does not matter): the token cache's key."""
    text = json.dumps(
        message, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
    )
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def content_text(content: Any) -> str:
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
    chars = len(content_text(message.get("content")))
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
