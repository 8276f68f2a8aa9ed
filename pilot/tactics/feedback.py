"""What to tell a model whose turn held no call that could be run, and how hot to ask again.

A specific answer (the unknown name, the argument, the exact shape), never the same twice in a
row; a question answered with "nobody will reply"; an empty turn asked again, then nudged; a
repeated call sampled hotter. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pilot.tactics.dialects import DEFINITION_TOOL, PATH_RE, TextCallsResult
from pilot.tactics.fitting import call_shape

# --------------------------------------------------------------------------------------------
# Public: what to tell a model whose answer held no call that could be run
# --------------------------------------------------------------------------------------------


_TICKED_RE = re.compile(r"`[^`]*`")


_SHOWN_CODE_RE = re.compile(r"\(([^\s,()]+\.py), line \d+\):\n```python\n(.*?)\n```", re.DOTALL)


def example_values(prompt: str, files_read: Sequence[str] = ()) -> dict[str, str]:
    """Real values for example calls: the file and a line of the code the phase's prompt
    shows (``locate``), else the file the prompt names or the first one the run read."""
    shown = _SHOWN_CODE_RE.search(prompt)
    if shown:
        lines = [line for line in shown.group(2).splitlines() if line.strip()]
        return {"path": shown.group(1), "old": lines[-1] if lines else ""}
    path = example_path(prompt) or next(iter(files_read), None)
    return {"path": path} if path else {}


def example_path(prompt: str) -> str | None:
    """The file a phase's prompt names (outside `commands` first), for example calls."""
    outside = _TICKED_RE.sub(" ", prompt)
    for text in (outside, prompt):
        match = PATH_RE.search(text)
        if match:
            return match.group(1)
    return None


_CODE_FENCE_RE = re.compile(r"```[\w+-]*\n")


def no_call_feedback(
    found: TextCallsResult,
    schemas: Mapping[str, dict[str, Any] | None],
    previous: str | None = None,
    *,
    content: str = "",
    path: str | None = None,
    values: Mapping[str, str] | None = None,
) -> str:
    """A specific answer to a turn with text but no runnable call, never the same twice in a row.

    Names what was wrong when something call-shaped was seen (an unknown tool name, with the
    tools there are; an argument, with the exact shape expected), else says no call was found
    and shows the exact format with this phase's tools. When that text is what the model was
    told last time, an example call of another tool is given instead, so a model repeating
    itself is not answered with the same words.
    """
    tools = list(schemas)
    listed = ", ".join(tools)
    parts: list[str] = []
    for name in found.unknown_tools[:3]:
        parts.append(f"There is no tool named {name!r}. The tools in this phase are: {listed}.")
    parts.extend(found.errors[:3])
    wrote_code = bool(_CODE_FENCE_RE.search(content))
    if not parts and wrote_code and DEFINITION_TOOL in schemas:
        parts.append(
            "You wrote code in your answer, but it changed no file: a code block counts as "
            "an edit only when it holds exactly one whole function or class (then it replaces "
            "the definition of that name). Answer with just the one corrected function in one "
            "```python block, or call edit_file with the exact lines to replace (old) and "
            "their replacement (new)."
        )
    elif not parts and wrote_code and "edit_file" in schemas:
        parts.append(
            "You wrote code in your answer, but code in an answer changes no file. To change "
            "a file, call edit_file with the exact lines to replace (old) and their "
            "replacement (new)."
        )
    if not parts:
        parts.append(
            "No tool call was found in your answer, so nothing ran. This run is unattended: "
            "nobody will reply to text."
        )
    example = next((t for t in tools if t != "finish"), tools[0] if tools else "finish")
    if wrote_code and "edit_file" in schemas:
        example = "edit_file"
    done = (
        f", or {call_shape('finish', schemas.get('finish'))} when the phase is done."
        if "finish" in schemas
        else "."
    )
    parts.append(
        f"Answer with one tool call as JSON, for example "
        f"{call_shape(example, schemas.get(example), path=path, values=values)}{done}"
    )
    text = "\n".join(parts)
    if previous is not None and text.strip() == previous.strip():
        others = [t for t in tools if t not in (example, "finish")]
        alt = others[len(previous) % len(others)] if others else example
        shape = call_shape(alt, schemas.get(alt), path=path, values=values)
        text = (
            "Your answer again held no tool call that could be run. Write only the JSON of "
            f"the call, nothing else, e.g. {shape}. Tools: {listed}."
        )
    return text


HOTTER_STEP = 0.35
"""How much hotter each repeat of the same call with the same result is sampled."""


def hotter(temperature: float | None, repeats: int) -> float | None:
    """The temperature for the next request after the model made the same call with the same
    result ``repeats`` times in a row; None to keep the workflow's own.

    A model sampled cold answers the same prompt with the same tokens: told that its answer
    changed nothing, a small model writes it again, word for word, until the loop detector
    stops the phase. Each repeat samples hotter (up to 1.0), so the next answer can differ.
    Without a temperature in the workflow the server's default is kept as it is.
    """
    if temperature is None or repeats < 2 or temperature >= 1.0:
        return None
    return round(min(1.0, temperature + HOTTER_STEP * (repeats - 1)), 2)


# --------------------------------------------------------------------------------------------
# Questions and empty turns
# --------------------------------------------------------------------------------------------

QUESTION_REPLY = (
    "Nobody will answer: this run is unattended. Do not wait for a reply. Proceed on your best "
    "judgment: pick the most reasonable option, note the assumption you made (and say it again "
    "in your finish summary), and continue with a tool call."
)

_FENCED = re.compile(r"```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_URL = re.compile(r"\bhttps?://\S+")
_REQUEST = re.compile(
    r"\b(?:do you want me to|would you like(?: me)? to|would you prefer|do you prefer"
    r"|please (?:confirm|advise|let me know|clarify)|let me know (?:if|whether|how|what|which|when)"
    r"|(?:can|could) you (?:please )?(?:confirm|clarify|tell me|provide|share|specify)"
    r"|awaiting your|waiting for your (?:input|confirmation|reply|answer|approval)"
    r"|i need your (?:input|confirmation|approval))\b",
    re.IGNORECASE,
)
_ADDRESSED = re.compile(
    r"\b(?:should|shall|can|may|could) (?:i|we)\b|\b(?:you|your)\b"
    r"|\bis (?:it|that) (?:ok|okay|fine|alright)\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
_QUOTED = re.compile(r"^[ \t]*>.*$", re.MULTILINE)


def _mask(content: str) -> str:
    """``content`` with code, URLs and quoted lines blanked out, keeping every offset.

    Same length as the input, so a span found in the mask is the same span of the original.
    """

    def blank(match: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))

    def word(match: re.Match[str]) -> str:
        return "x" * len(match.group(0))

    text = _FENCED.sub(blank, content)
    text = _INLINE_CODE.sub(word, text)
    text = _URL.sub(word, text)
    return _QUOTED.sub(blank, text)


def _sentence_at(masked: str, original: str, position: int) -> str:
    for match in _SENTENCE.finditer(masked):
        if match.start() <= position < match.end():
            return original[match.start() : match.end()].strip()
    return original.strip()


def detect_question(content: str | None) -> str | None:
    """The question an unattended model asks instead of acting, or None.

    Two signals, both on prose only (code blocks, inline code, URLs and quotes blanked out, so
    ``a ? b : c`` or ``# why?`` never count): an explicit request for the user ("do you want me
    to", "would you like", "please confirm", "let me know if", "can you clarify"...) anywhere;
    or a last line ending with "?" that is addressed to someone ("should I", "you", "is it
    ok"). A model musing "Why does the test fail? Because..." is not asking. Returns the
    sentence as the model wrote it.
    """
    if not content or not content.strip():
        return None
    masked = _mask(content)
    request = _REQUEST.search(masked)
    if request:
        return _sentence_at(masked, content, request.start())
    lines = [m for m in re.finditer(r"[^\n]*\S[^\n]*", masked)]
    if not lines:
        return None
    last = lines[-1]
    if not last.group(0).rstrip(" *_)\"'").endswith("?"):
        return None
    sentences = [
        m for m in _SENTENCE.finditer(masked, last.start(), last.end()) if m.group(0).strip()
    ]
    if not sentences:
        return None
    question = sentences[-1]
    for candidate in reversed(sentences):
        if "?" in candidate.group(0):
            question = candidate
            break
    if not _ADDRESSED.search(question.group(0)):
        return None
    return content[question.start() : question.end()].strip().lstrip("-*# ").strip()


def empty_turn_action(
    consecutive_empty: int, *, retries: int = 1, nudges: int = 1
) -> Literal["retry", "nudge", "no_progress"]:
    """What to do after the ``consecutive_empty``-th empty turn in a row (no content, no calls).

    An empty turn is often a sampling accident: ask again (``retry``: nothing is added to the
    conversation), then tell the model (``nudge``), then count it as a step without progress
    (the tracker's no-progress limit ends the phase if it goes on).
    """
    if consecutive_empty <= retries:
        return "retry"
    if consecutive_empty <= retries + nudges:
        return "nudge"
    return "no_progress"


NUDGE_EMPTY = (
    "Your last answer was empty. Continue the task: call one of the tools, or call `finish` "
    "with a summary if this phase is done."
)
