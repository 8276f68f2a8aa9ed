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
    """A ``read_file`` result cut to about ``budget_tokens``: its first whole lines, how to
    read on in the file itself (the next offset), and the definitions in the lines not shown
    with their line numbers, so a model looking for one reads from there. A head and tail
    with the middle kept in another file reads, to a small model, as a file it has not seen
    yet: it read the same file again and again; with only the next offset, the 1.5B read the
    first page of a 700-line module four times and never reached the method it was to fix.
    Falls back to :func:`cut_tool_output` when the lines are not numbered."""
    if _cost(text) <= budget_tokens:
        return text, False
    lines = text.splitlines(keepends=True)
    numbered = [(int(m.group(1)), line) for line in lines if (m := _NUMBERED_LINE.match(line))]
    if not numbered:
        return cut_tool_output(text, budget_tokens)
    outline_budget = budget_tokens / 3
    python = path.endswith((".py", ".pyi"))
    usable = max(budget_tokens - 60 - (outline_budget if python else 0), 16)
    shown: list[str] = []
    used = 0.0
    for line in lines:
        if used + _cost(line) > usable:
            break
        shown.append(line)
        used += _cost(line)
    last_shown = next(
        (int(m.group(1)) for line in reversed(shown) if (m := _NUMBERED_LINE.match(line))), None
    )
    if not shown or last_shown is None:
        return cut_tool_output(text, budget_tokens)
    body = "".join(shown)
    if not body.endswith("\n"):
        body += "\n"
    quoted = json.dumps(path)
    outline = (
        definitions_outline(numbered, after=last_shown, budget_tokens=outline_budget)
        if python
        else ""
    )
    further = (
        f" Definitions further on (name: line), to read from with offset=LINE: {outline}."
        if outline
        else ""
    )
    return (
        f"{body}[... lines {last_shown + 1}-{numbered[-1][0]} of this read not shown (too "
        f"long for the context): read on with read_file (path={quoted}, "
        f"offset={last_shown + 1}), or grep for what you look for.{further}]\n",
        True,
    )


_DEFINITION = re.compile(r"^(\s*)(?:async\s+def|def|class)\s+([A-Za-z_]\w*)")


def definitions_outline(
    numbered: list[tuple[int, str]], *, after: int, budget_tokens: float
) -> str:
    """``name: line`` for each ``def`` and ``class`` of numbered Python lines past line
    ``after``, a method named with its class (``Version.bump_minor: 280``), as many as
    ``budget_tokens`` holds, then how many more."""
    classes: list[tuple[int, str]] = []  # (indent, name) of the classes a line is inside
    entries: list[str] = []
    for number, line in numbered:
        code = _NUMBERED_LINE.sub("", line, count=1)
        m = _DEFINITION.match(code)
        if m is None:
            continue
        indent = len(m.group(1).expandtabs())
        while classes and classes[-1][0] >= indent:
            classes.pop()
        name = ".".join([c for _, c in classes] + [m.group(2)])
        if code.lstrip().startswith("class"):
            classes.append((indent, m.group(2)))
        if number > after:
            entries.append(f"{name}: {number}")
    kept: list[str] = []
    used = 0.0
    for entry in entries:
        if used + _cost(entry) + 1 > budget_tokens:
            break
        kept.append(entry)
        used += _cost(entry) + 1
    more = len(entries) - len(kept)
    return ", ".join(kept) + (f" and {more} more" if more else "")


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
