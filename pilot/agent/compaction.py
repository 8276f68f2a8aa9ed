"""Compaction: which older turns a summary replaces, the summary's request, and its fallback.

When the budget (``pilot.agent.context``) says the conversation must shrink, this module plans
which turns go (``plan_compaction``: never the system prompt, the phase prompt or the recent
turns), writes the request asking the model for a structured summary and checks its answer,
builds a summary from the turns themselves when the model cannot, and cuts a large tool
output before it enters the context.

Pure: no I/O, no events, no model calls. The loop owns those; it records what was decided.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pilot.agent.context import Message, content_text

SUMMARY_HEADER = "[Summary of earlier work]"
"""First line of the message that stands in for replaced turns (also how one is recognised)."""


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
    return message.get("role") == "user" and content_text(message.get("content")).startswith(
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
    text = content_text(message.get("content")).strip()
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
        text = content_text(message.get("content")).strip()
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
