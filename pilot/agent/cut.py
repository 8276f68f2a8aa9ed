"""An answer cut by the output limit: how it is told, and what the model hears instead of a run.

A server says ``finish_reason: "length"`` when generation stopped at ``max_tokens``, but not
always: vLLM 0.26's chat stream ends with ``"tool_calls"`` whenever its tool parser streamed a
call, one cut in the middle of its arguments included (``brain/sim/README.md`` and the
conformance case ``streamed_call_cut_at_max_tokens``). A cut call's JSON, completed by the
text repair, ran once this round and overwrote an 11 KB module with 102 bytes. So an answer is
taken as cut on either sign, the server's word or its completion tokens reaching the request's
``max_tokens``, and no call of a cut answer is ever run: each is answered with what happened.
"""

from __future__ import annotations

import json

from pilot import events as ev
from pilot.agent.calls import answer_message, new_call_id
from pilot.agent.seams import EventSink
from pilot.agent.state import RunState
from pilot.model.types import ModelResponse, Usage


def cut_reason(
    finish_reason: str | None, usage: Usage | None, max_tokens: int | None
) -> str | None:
    """Why the answer is cut, or None when it is whole.

    Counts the pilot estimated (a server that sent no usage) are not evidence of a cut: an
    estimate may pass ``max_tokens`` on a whole answer."""
    if finish_reason == "length":
        return "the server said finish_reason length"
    if usage is None or usage.estimated or not max_tokens:
        return None
    if usage.completion_tokens >= max_tokens:
        return (
            f"it used all {max_tokens} completion tokens; the server said finish_reason "
            f"{finish_reason!r}, but an answer that long was stopped by the limit"
        )
    return None


def cut_call_refusal(reason: str) -> str:
    """The result a call of a cut answer gets in place of running (its arguments may be half
    written: running a repaired half would write half a file)."""
    return (
        f"Error: not run: your answer was cut off by the max_tokens limit ({reason}) before "
        "this tool call was complete, so it was not run. Re-issue the call, with shorter "
        "arguments if needed (e.g. edit a file in smaller pieces with edit_file)."
    )


def cut_text_message(reason: str) -> str:
    """What the model hears after a cut answer that held no call (its text stopped mid-way)."""
    return (
        f"Your last answer was cut off by the max_tokens limit ({reason}). Nothing in it was "
        "run. Continue with one short tool call; write long content in smaller pieces."
    )


def record_cut(
    emit: EventSink, step: int, response: ModelResponse, reason: str, max_tokens: int | None
) -> None:
    """A cut answer: recorded with its calls as the server sent them (unrepaired), then
    ``answer_cut``, which answers each call without running it."""
    calls = [
        ev.ToolCall(
            id=call.id or new_call_id(step, position),
            name=call.name,
            arguments="{}",
            raw_arguments=call.arguments
            if isinstance(call.arguments, str)
            else json.dumps(call.arguments),
            error=cut_call_refusal(reason),
        )
        for position, call in enumerate(response.tool_calls)
    ]
    emit(answer_message(step, response, calls, response.content, []), commit=False)
    emit(
        ev.AnswerCut(
            step=step,
            reason=reason,
            finish_reason=response.finish_reason,
            completion_tokens=response.usage.completion_tokens if response.usage else None,
            max_tokens=max_tokens,
            calls=[c.name for c in calls],
            message=cut_call_refusal(reason) if calls else cut_text_message(reason),
        )
    )


def refuse_pending(emit: EventSink, state: RunState, reason: str) -> None:
    """Record each call of the last answer as not run, with ``reason`` (a limit)."""
    for call in list(state.pending_calls):
        emit(
            ev.ToolFinished(
                call_id=call.id,
                name=call.name,
                output=f"Error: not run: {reason}",
                is_error=True,
                executed=False,
            ),
            commit=False,
        )
