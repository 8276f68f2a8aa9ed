"""A model's calls as the loop records and answers them: ids, refusals, a result cut to fit.

Pure functions of the state and the phase: which call is refused without running (and with
what words), the events of a plain answer's calls, a long result cut to its share of the
window. The loop runs what is not refused and records it.
"""

from __future__ import annotations

import json
from typing import Any

from pilot import events as ev
from pilot.agent.result_cut import cut_file_page, cut_tool_output
from pilot.agent.seams import ToolExecutor
from pilot.model.types import ModelResponse
from pilot.workflow.plan import PhasePlan

READ_TOOL = "read_file"
"""The tool whose long result is cut to a page of the file (``cut_file_page``)."""

TOOL_RESULT_SHARE = 0.15
"""The largest share of the window one tool result may take in the conversation."""


def new_call_id(step: int, position: int) -> str:
    """Ids for calls the server sent without one (or that were recovered from text)."""
    return f"call-{step}-{position}"


def plain_calls(
    step: int, response: ModelResponse, arguments: list[dict[str, Any]]
) -> list[ev.ToolCall]:
    """The events of an answer whose calls were taken as they came (``Tactics.plain_calls``):
    the arguments written back as JSON, the server's text kept where it differs."""
    calls = []
    for position, (call, parsed) in enumerate(zip(response.tool_calls, arguments, strict=True)):
        text = json.dumps(parsed, ensure_ascii=False)
        calls.append(
            ev.ToolCall(
                id=call.id or new_call_id(step, position),
                name=call.name,
                arguments=text,
                raw_arguments=None if text == call.arguments else call.arguments,
            )
        )
    return calls


def answer_message(
    step: int,
    response: ModelResponse,
    calls: list[ev.ToolCall],
    content: str | None,
    repairs: list[str],
) -> ev.AssistantMessage:
    """The ``assistant_message`` of an answer: its calls and content as read, the rest as the
    server sent it."""
    return ev.AssistantMessage(
        step=step,
        content=content,
        reasoning=response.reasoning,
        tool_calls=calls,
        finish_reason=response.finish_reason,
        usage=response.usage,
        ttft_s=response.ttft_s,
        duration_s=response.duration_s,
        attempts=response.attempts,
        repairs=repairs,
        endpoint=response.endpoint,
    )


def refusal(
    call: ev.ToolCall,
    phase: PhasePlan,
    tools: ToolExecutor,
    *,
    answer_cut: str | None,
    failed_before: str | None,
) -> str | None:
    """Why ``call`` is answered with an error without running, or None to run it."""
    if answer_cut is not None:  # a cut answer's call never runs (``pilot.agent.cut``)
        return answer_cut
    if failed_before is not None:
        return (
            f"Error: not run: {failed_before}, called before it in the same answer, failed, "
            f"and this call counted on it. Fix {failed_before} first (read its error above), "
            "one call per answer."
        )
    if not tools.known(call.name):
        return (
            f"Error: there is no tool named {call.name!r}. Available tools in this phase: "
            f"{', '.join(phase.tools)}."
        )
    if call.name not in phase.tools:
        return (
            f"Error: the tool {call.name!r} is not available in phase {phase.name!r}. "
            f"Use one of: {', '.join(phase.tools)}."
        )
    if call.error is not None and call.error.startswith("Error:"):
        return call.error
    if call.error is not None:
        return (
            f"Error: the arguments of {call.name} are not valid JSON ({call.error}). "
            "Send the call again with a JSON object as arguments."
        )
    return None


def failed_in_this_answer(messages: list[dict[str, Any]]) -> str | None:
    """The tool name of a call of the current answer that already failed, if any: the
    calls after it were written counting on its result (a small model writes edit, run
    and finish at once), so a finish after a failed edit must not close the phase."""
    names: dict[str, str] = {}
    failed = None
    for message in reversed(messages):
        if message.get("role") == "tool":
            if str(message.get("content", "")).startswith("Error"):
                failed = message.get("tool_call_id")
            continue
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                names[call.get("id", "")] = call.get("function", {}).get("name", "?")
        break
    return None if failed is None else names.get(failed, "a call")


def fit_result(
    finished: ev.ToolFinished,
    call_id: str,
    window: int | None,
    tools: ToolExecutor,
    arguments: dict[str, Any] | None = None,
) -> ev.ToolFinished:
    """A tool result larger than its share of the window is cut before it enters the
    context; the full text stays readable as a file (see ToolExecutor.keep_full_output), or,
    for a file read, in the file itself from the next offset."""
    if not window:
        return finished
    budget = int(window * TOOL_RESULT_SHARE)
    if len(finished.output) <= budget * 3:  # cheap test first: under 3 chars a token
        return finished
    read = (arguments or {}).get("path")
    if finished.name == READ_TOOL and not finished.is_error and isinstance(read, str):
        text, cut = cut_file_page(finished.output, budget, read)
    else:
        kept = tools.keep_full_output(call_id, finished.output)
        text, cut = cut_tool_output(finished.output, budget, artifact=kept)
    if not cut:
        return finished
    return finished.model_copy(update={"output": text, "truncated": True})
