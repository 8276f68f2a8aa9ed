"""How each answer's tool calls came: the call mode of every answer, from what a try recorded.

- ``native``: the server's tool-call parser gave the calls (``tool_calls`` in the answer);
- ``text``: the agent recovered them from the answer's text (the pilot's repair: its calls
  have ids starting ``text-``; the plain loop's bash block is always text);
- ``forced``: the request constrained the output to the tools (``tool_choice`` required or
  named). Marathon records each answer's mode itself (``assistant_message.call_mode``, and
  what its request asked for in ``asked``); older runs are read from their calls;
- ``none``: the answer held no call the agent could run.

A try's *requested* mode is what it asked the server for (``auto``: the model chooses, or
the agent's own protocol, ``text`` for the plain loop); the per-answer modes are what came.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

MODES = ("native", "text", "forced", "none")


def answer_mode(request: dict[str, Any] | None, answer: dict[str, Any]) -> str:
    """One Marathon answer's mode, from its ``assistant_message`` and the ``model_request``
    before it (payloads as stored)."""
    recorded = answer.get("call_mode") or (request or {}).get("call_mode")
    if recorded in MODES:
        return str(recorded)
    calls = answer.get("tool_calls") or []
    if not calls:
        return "none"
    choice = (request or {}).get("tool_choice")
    if choice == "required" or isinstance(choice, dict):
        return "forced"
    if any(str(call.get("id", "")).startswith("text-") for call in calls):
        return "text"
    return "native"


def marathon_modes(events: Iterable[dict[str, Any]]) -> Counter[str]:
    """Answers per mode over a run's events (each a payload with its ``type``)."""
    counts: Counter[str] = Counter()
    request: dict[str, Any] | None = None
    for event in events:
        if event.get("type") == "model_request":
            request = event
        elif event.get("type") == "assistant_message":
            counts[answer_mode(request, event)] += 1
    return counts


def plain_modes(messages: Iterable[dict[str, Any]], *, blocks: Any) -> Counter[str]:
    """The plain loop's answers: one bash block is a (text) call, anything else none.
    ``blocks`` finds the blocks of a text, as the loop does."""
    counts: Counter[str] = Counter()
    for message in messages:
        if message.get("role") == "assistant":
            found = blocks(message.get("content") or "")
            counts["text" if len(found) == 1 else "none"] += 1
    return counts


def mini_modes(messages: Iterable[dict[str, Any]]) -> Counter[str]:
    """mini-swe-agent's answers (its trajectory's messages): its default configuration
    takes calls only from the server's parser (native); an answer without one is a format
    error (none)."""
    counts: Counter[str] = Counter()
    for message in messages:
        response = (message.get("extra") or {}).get("response")
        if not isinstance(response, dict):
            continue
        choices = response.get("choices") or [{}]
        calls = (choices[0].get("message") or {}).get("tool_calls")
        counts["native" if calls else "none"] += 1
    return counts


def mini_usage(messages: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(prompt, completion) tokens over mini-swe-agent's answers, as the server counted."""
    prompt = completion = 0
    for message in messages:
        response = (message.get("extra") or {}).get("response")
        if isinstance(response, dict):
            usage = response.get("usage") or {}
            prompt += int(usage.get("prompt_tokens") or 0)
            completion += int(usage.get("completion_tokens") or 0)
    return prompt, completion


def cut_answers(events: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(answers cut at the output limit, calls of those answers that ran anyway) over a run's
    events: the second must be 0 (issue 38: no cut call is ever run)."""
    cut_steps = {e["step"] for e in events if e.get("type") == "answer_cut"}
    cut_calls = {
        call["id"]
        for e in events
        if e.get("type") == "assistant_message" and e.get("step") in cut_steps
        for call in e.get("tool_calls") or []
    }
    ran = sum(
        1
        for e in events
        if e.get("type") == "tool_finished" and e.get("call_id") in cut_calls and e.get("executed")
    )
    return len(cut_steps), ran


def counts_json(counts: Counter[str]) -> dict[str, int]:
    """Every mode, zeros included, in a fixed order (a results row's ``answers``)."""
    return {mode: int(counts.get(mode, 0)) for mode in MODES}
