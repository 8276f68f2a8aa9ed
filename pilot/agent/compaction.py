"""Compaction: which older turns a summary replaces, and the summary built from the run's
events (a single long tool result is cut in ``pilot.agent.result_cut``).

When the budget (``pilot.agent.context``) says the conversation must shrink, this module plans
which turns go (``plan_compaction``: never the system prompt, the phase prompt or the recent
turns; ``recent_allowance``: few enough that the prompt ends well under half the window, so
the next compaction is many steps away) and builds the summary that stands in for them from
what the run recorded (``events_summary``): the tools called and what came back, the edits and
the checks, the phase's goal and what still fails. The model's own words are not in it: a
small model's summary of its own work said "verified that all test cases are passing" on a run
with no edit and failing tests, and that fiction then steered the rest of the run.

Pure: no I/O, no events, no model calls. The loop owns those; it records what was decided.
``summary_request`` (the model-written summary of runs recorded before) is kept for
``pilot replay-export``, which rebuilds the requests those runs sent.
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
_ERROR = "Error: "

CHECK_FAILED = "Check failed:"
"""How the fold's message for a failed phase check starts (``pilot.agent.state``)."""


AFTER_FRACTION = 0.4
"""A compaction brings the prompt to at most this share of the window (more than half of it
free): with compaction at 0.75 of it, the next one is at least 0.35 of the window of new turns
away, not two steps (what a summary as large as the turns it replaced gave)."""

SUMMARY_CHARS = (600, 4000)
"""Bounds on the summary's size in characters; within them, a tenth of the window."""

EARLIER_ITEMS = {"Edits": 12, "Checks": 6, "Commands run": 8, "Other calls": 6, "Refused": 6}
"""How many of a section's lines a summary keeps (the latest), before any cut for size."""


@dataclass(frozen=True)
class PhaseFacts:
    """What the run's events say about the current phase, for the summary's head."""

    goal: str
    check: str | None = None
    """The phase's check command (None: the phase has none)."""
    baseline: tuple[bool, int | None, str] | None = None
    """The check as the phase started, before any change: (passed, exit code, output)."""
    check_passed: bool = False
    """The latest check run (after an edit or at finish) passed."""
    failed_try: str | None = None
    """The latest failure the run recorded (a failed check, a refused edit), in one line."""
    edited: bool = False
    """A file was changed since the latest check."""


def summary_chars(max_model_len: int) -> int:
    """The summary's size limit for a window of ``max_model_len`` tokens."""
    low, high = SUMMARY_CHARS
    return max(low, min(high, int(max_model_len * 0.1 * 3)))


def summary_tokens(max_chars: int) -> int:
    """Tokens a summary of ``max_chars`` characters may cost (3 a token, with its header)."""
    return max_chars // 3 + 64


def recent_allowance(
    max_model_len: int, keep_recent_tokens: int, fixed_tokens: int, summary_chars_: int
) -> int:
    """Tokens of recent turns a compaction keeps verbatim: what ``AFTER_FRACTION`` of the window
    leaves beside ``fixed_tokens`` (the template, the tool schemas and the pinned messages) and
    the summary, and never more than ``keep_recent_tokens``; 0 keeps the last turn alone."""
    room = int(max_model_len * AFTER_FRACTION) - fixed_tokens - summary_tokens(summary_chars_)
    return max(0, min(keep_recent_tokens, room))


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


def _argument(arguments: str, key: str) -> str | None:
    try:
        value = json.loads(arguments).get(key)
    except (ValueError, TypeError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _first_line(text: str, limit: int = 160) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "(empty)"
    line = lines[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _last_lines(text: str, count: int = 3, limit: int = 300) -> str:
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    tail = " | ".join(line.strip() for line in lines[-count:])
    return tail if len(tail) <= limit else "..." + tail[-(limit - 3) :]


def _exit_code(output: str) -> tuple[int | None, str]:
    """A ``run`` result's exit code and the output after its status line."""
    match = re.match(r"exit code: (-?\d+)[^\n]*\n?", output)
    if match is None:
        return None, output
    return int(match.group(1)), output[match.end() :]


def _older_sections(text: str) -> dict[str, list[str]]:
    """The item lines of an earlier events summary, by section (its head is made anew)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is not None and line.startswith("- "):
            current.append(line)
    return sections


def events_summary(
    messages: Sequence[Message],
    facts: PhaseFacts,
    *,
    mutating_tools: Collection[str] | None = None,
    max_chars: int = 4000,
) -> str:
    """The summary of ``messages`` from what they record: each call and its result in short.

    Edits (the file and the definition changed, or the refusal), checks (pass or fail, the
    last lines of a failure), commands (the exit code, the last lines of a failure), files
    read, other calls, calls refused; an earlier summary's lines are carried over (latest
    kept); the head says the phase's goal and where its check stands. No text the model
    wrote is kept (a finish summary or a claim in prose is not evidence); a call's arguments
    appear only as what was asked (a path, a command). Bounded by ``max_chars``.
    """

    def changes(name: str) -> bool:
        if mutating_tools is not None:
            return name in mutating_tools
        return any(word in name.lower() for word in _CHANGE_WORDS)

    calls: dict[str, tuple[str, str]] = {}
    items: dict[str, list[str]] = {key: [] for key in EARLIER_ITEMS}
    read: dict[str, None] = {}
    notes: list[str] = []
    for message in messages:
        role = message.get("role")
        text = content_text(message.get("content")).strip()
        if is_summary_message(message):
            older = _older_sections(text)
            for key in items:
                items[key] += older.get(key, [])
            for line in older.get("Files read", []):
                read.update(dict.fromkeys(p.strip() for p in line[2:].split(",") if p.strip()))
            continue
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            calls[str(call.get("id"))] = (
                str(function.get("name") or "?"),
                str(function.get("arguments") or ""),
            )
        if role == "user" and text.startswith(CHECK_FAILED):
            items["Checks"].append(f"- {_check_line(text)}")
        elif role == "user" and (after := _AFTER_EDIT.search(text.split("\n", 1)[0])):
            body = text.split("\n\n", 1)[1] if "\n\n" in text else ""
            items["Checks"].append(
                f"- `{after.group(1)}` failed after an edit ({after.group(2)}): {_last_lines(body)}"
            )
        elif role == "user" and text.startswith("Phase ") and "\n" in text:
            notes.append(f"- an earlier phase: {_first_line(text)}")
        elif role == "tool":
            name, arguments = calls.get(str(message.get("tool_call_id")), ("tool", ""))
            _result_item(name, arguments, text, changes(name), items, read)
    lines = [
        "(Built by the harness from the run's recorded calls and results; it states only what "
        "they show. Read a file again before changing it: this does not show its content.)",
        "",
        "## Goal",
        f"- {_first_line(facts.goal, 300)}",
        *notes[-3:],
        "",
        "## Check",
        *_check_state(facts),
    ]
    shown = dict(EARLIER_ITEMS)
    while True:
        body = list(lines)
        for key, heading in (
            ("Edits", "Edits"),
            ("Checks", "Checks"),
            ("Commands run", "Commands run"),
            ("Refused", "Refused"),
            ("Other calls", "Other calls"),
        ):
            entries = items[key]
            if key == "Edits" and not entries:
                body += ["", "## Edits", "- none: no file was changed in these turns."]
                continue
            if not entries:
                continue
            kept = entries[-shown[key] :] if shown[key] else []
            body += ["", f"## {heading}"]
            if len(entries) > len(kept):
                body.append(f"({len(entries) - len(kept)} earlier left out)")
            body += kept
        paths = list(read)
        if paths:
            body += [
                "",
                "## Files read",
                "- " + ", ".join(paths[-max(shown["Other calls"] * 5, 5) :]),
            ]
        text = "\n".join(body)
        if len(text) <= max_chars or not any(shown.values()):
            return _clip(text, max_chars)
        shown = {key: count // 2 for key, count in shown.items()}


_AFTER_EDIT = re.compile(r"the check `([^`]*)` still fails \(([^)]*)\)")
"""The tactics' word for a check run after an edit that still fails."""
_DEFINITION_LINE = re.compile(r"^[ +-]\s*(?:async\s+)?(?:def|class)\s+(\w+)")


def _diff_gist(output: str) -> str:
    """Where a diff in a tool's result changed the file: the first changed line, the first
    removed and added lines, and the def or class the diff shows around them."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("@@ ")), None)
    if start is None:
        return ""
    hunk, lines = lines[start], lines[start + 1 :]
    at = re.match(r"@@ -\d+(?:,\d+)? \+(\d+)", hunk)
    removed = next(
        (ln[1:].strip() for ln in lines if ln.startswith("-") and not ln.startswith("---")), None
    )
    added = next(
        (ln[1:].strip() for ln in lines if ln.startswith("+") and not ln.startswith("+++")), None
    )
    names = [m.group(1) for ln in lines if (m := _DEFINITION_LINE.match(ln))]
    parts = [f"at line {at.group(1)}" if at else "a change"]
    if names:
        parts.append(f"in {names[0]}")
    if removed is not None or added is not None:
        parts.append(f"`{(removed or '')[:80]}` -> `{(added or '')[:80]}`")
    return " (" + ", ".join(parts) + ")"


def _check_line(text: str) -> str:
    head = _first_line(text, 200)
    match = re.match(r"Check failed: (`[^`]*`) \(([^)]*)\)", head)
    body = text.split("\n\n", 1)[1] if "\n\n" in text else ""
    what = f"{match.group(1)} failed ({match.group(2)})" if match else head
    return f"{what}: {_last_lines(body)}" if body.strip() else what


def _check_state(facts: PhaseFacts) -> list[str]:
    lines = []
    if facts.check is None:
        lines.append("- This phase has no check command.")
    elif facts.baseline is not None:
        passed, code, output = facts.baseline
        if passed:
            lines.append(f"- At the phase's start, before any change, `{facts.check}` passed.")
        else:
            lines.append(
                f"- At the phase's start, before any change, `{facts.check}` FAILED "
                f"(exit code {code}): {_last_lines(output)}"
            )
    if facts.check is not None and facts.check_passed:
        after = "files were changed after it" if facts.edited else "nothing was changed after it"
        lines.append(f"- Its latest run passed; {after}.")
    elif facts.check is not None:
        failed = facts.baseline is not None and not facts.baseline[0]
        last = facts.failed_try or ""
        if failed or last.startswith((f"`{facts.check}`", "the check")):
            lines.append(f"- `{facts.check}` has not passed in this phase since: still failing.")
        else:
            lines.append(f"- `{facts.check}` has not run again in this phase.")
    if facts.failed_try and not facts.check_passed:
        lines.append(f"- Latest failure recorded: {_first_line(facts.failed_try, 300)}")
    return lines


def _result_item(
    name: str,
    arguments: str,
    output: str,
    mutating: bool,
    items: dict[str, list[str]],
    read: dict[str, None],
) -> None:
    """One tool result as a line of its section: a call with a command is a command (``run``
    mutates, but what it did is its exit code), a mutating call on files an edit (a commit is
    not one), a refusal, a read, or another call."""
    paths = _paths(arguments)
    where = f" {', '.join(paths)}" if paths else ""
    refused = output.startswith(_ERROR)
    command = _argument(arguments, "command")
    if command is not None:
        shown = _first_line(command, 120)
        if refused:
            items["Commands run"].append(f"- `{shown}`: {_first_line(output[len(_ERROR) :])}")
            return
        code, rest = _exit_code(output)
        if code is None:
            items["Commands run"].append(f"- `{shown}`: {_first_line(output)}")
        elif code == 0:
            items["Commands run"].append(f"- `{shown}`: exit code 0")
        else:
            items["Commands run"].append(f"- `{shown}`: exit code {code}: {_last_lines(rest)}")
        return
    if mutating and not name.startswith("git_"):
        if refused:
            items["Edits"].append(
                f"- {name}{where}: REFUSED, nothing changed: {_first_line(output[len(_ERROR) :])}"
            )
        else:
            items["Edits"].append(f"- {name}{where}: {_first_line(output)}{_diff_gist(output)}")
        return
    if refused:
        items["Refused"].append(f"- {name}{where}: {_first_line(output[len(_ERROR) :])}")
        return
    if name == "finish":
        return  # its summary is the model's claim; what it led to is the check's line
    if paths and (name in ("read_file", "view_image") or name.startswith("read")):
        read.update(dict.fromkeys(paths))
        return
    items["Other calls"].append(f"- {name}{where}: {_first_line(output, 120)}")
