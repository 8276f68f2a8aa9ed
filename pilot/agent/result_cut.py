"""A tool result too long for its share of the window, cut before it enters the context.

A command's output keeps its head and its tail (errors and test summaries come last) and says
where the whole text is kept; a file read keeps its first lines and says the offset to read
on in the file itself (a head and tail of a file read, to a small model, as a file it has not
seen yet). Pure text functions: ``pilot.agent.calls.fit_result`` decides which applies.
"""

from __future__ import annotations

import json
import re


def _cost(text: str) -> float:
    """Token cost of text for cutting: UTF-8 bytes / 3 (safe for code, prose and CJK alike)."""
    return len(text.encode("utf-8")) / 3


_NUMBERED_LINE = re.compile(r"^\s*(\d+)\t")


def cut_file_page(text: str, budget_tokens: int, path: str) -> tuple[str, bool]:
    """A ``read_file`` result cut to about ``budget_tokens``: its first whole lines, and how to
    read on in the file itself (the next offset). A head and tail with the middle kept in
    another file reads, to a small model, as a file it has not seen yet: it read the same
    file again and again. Falls back to :func:`cut_tool_output` when the lines are not
    numbered."""
    if _cost(text) <= budget_tokens:
        return text, False
    lines = text.splitlines(keepends=True)
    usable = max(budget_tokens - 60, 16)
    shown: list[str] = []
    used = 0.0
    for line in lines:
        if used + _cost(line) > usable:
            break
        shown.append(line)
        used += _cost(line)
    numbers = [int(m.group(1)) for line in lines if (m := _NUMBERED_LINE.match(line))]
    last_shown = next(
        (int(m.group(1)) for line in reversed(shown) if (m := _NUMBERED_LINE.match(line))), None
    )
    if not shown or last_shown is None or not numbers:
        return cut_tool_output(text, budget_tokens)
    body = "".join(shown)
    if not body.endswith("\n"):
        body += "\n"
    quoted = json.dumps(path)
    return (
        f"{body}[... lines {last_shown + 1}-{max(numbers)} of this read not shown (too long "
        f"for the context): read on with read_file (path={quoted}, offset={last_shown + 1}), "
        "or grep for what you look for.]\n",
        True,
    )


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
