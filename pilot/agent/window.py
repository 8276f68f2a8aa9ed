"""The conversation kept inside the served window: the budget of a request, its count, and
the compaction that makes room when it does not fit.

``pilot.agent.context`` counts and budgets, ``pilot.agent.compaction`` plans and summarises;
this module does it for the loop's next request and records a compaction as one event, so the
full history stays in the store.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pilot import events as ev
from pilot.agent.compaction import (
    PhaseFacts,
    events_summary,
    plan_compaction,
    recent_allowance,
    summary_chars,
)
from pilot.agent.context import (
    Budget,
    PromptCount,
    ServerCounts,
    TokenCounter,
)
from pilot.agent.endings import end_phase
from pilot.agent.seams import EventSink, ToolExecutor
from pilot.agent.state import RunState
from pilot.model.servers import estimate_completion_tokens, estimate_prompt_tokens
from pilot.model.types import ModelClient, ModelResponse, Usage
from pilot.workflow.plan import PhasePlan, RunPlan

MAX_COMPACTIONS_IN_A_ROW = 3
"""Compactions without a model answer in between before the phase is given up (no doom loop)."""


@dataclass
class Window:
    """One run's window: its budget, its token counter, its compactions."""

    plan: RunPlan
    state: RunState
    emit: EventSink
    client: ModelClient
    tools: ToolExecutor
    stoppable: Callable[[Awaitable[Any]], Awaitable[Any]]
    request_messages: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
    server_counts: ServerCounts | None = None
    """The server's tokenizer facts, shared with the process's other runs against it."""
    counter: TokenCounter | None = None

    def budget(self) -> Budget | None:
        """The context budget from the server's real window (None when it did not say)."""
        window = self.state.max_model_len
        if not window:
            return None
        model = self.plan.model
        return Budget(
            max_model_len=window,
            max_tokens_wanted=min(model.max_tokens, max(window // 2, 1)),
            margin=min(model.context_margin, window // 8),
        )

    def token_counter(self, model: str) -> TokenCounter:
        if self.counter is None:
            self.counter = TokenCounter(self.client.count_tokens, model, shared=self.server_counts)
        return self.counter

    async def count(self, model: str, messages: list[dict[str, Any]], tools: Any) -> PromptCount:
        return await self.stoppable(self.token_counter(model).count(messages, tools))

    async def fits_without_counting(
        self, budget: Budget, model: str, messages: list[dict[str, Any]], tools: Any
    ) -> PromptCount | None:
        """An upper bound on the prompt, when it alone proves the request fits: below the
        compaction threshold and with all the output the workflow wants. None when only a
        real count can tell (near the limits, or with images)."""
        bound = await self.stoppable(self.token_counter(model).upper_bound(messages, tools))
        if (
            bound is None
            or budget.needs_compaction(bound)
            or budget.room(bound) < budget.max_tokens_wanted
        ):
            return None
        return PromptCount(
            total=bound, per_message=(), tools=0, overhead=0, exact=False, bounded=True
        )

    async def compact(
        self,
        phase: PhasePlan,
        budget: Budget,
        count: PromptCount,
        *,
        reason: str,
        harder: int = 0,
    ) -> None:
        """Replace older turns by a summary built from what they record (the calls, their
        results, the checks: ``events_summary``, never the model's words), keeping the system
        prompt, the phase prompt and as many recent turns as leave the prompt under
        ``AFTER_FRACTION`` of the window; recorded as one event, so the full history stays in
        the store."""
        state = self.state
        progress = state.phase
        assert progress is not None
        plan = None
        limit = summary_chars(budget.max_model_len)
        if progress.compactions_in_a_row < MAX_COMPACTIONS_IN_A_ROW:
            messages = state.messages
            pins = {progress.message_index} | (
                {0} if messages and messages[0].get("role") == "system" else set()
            )
            per = count.per_message
            fixed = count.total - sum(per) + sum(per[i] for i in pins if i < len(per))
            plan = plan_compaction(
                messages,
                per,
                keep_recent_tokens=recent_allowance(
                    budget.max_model_len, budget.keep_recent_tokens(), fixed, limit
                ),
                phase_start=progress.message_index,
                harder=harder,
            )
        if plan is None:
            why = (
                f"the context window ({budget.max_model_len} tokens) is exhausted: the system "
                "prompt, the phase prompt and the last turn no longer fit, even after "
                f"{progress.compactions_in_a_row} compaction(s)"
            )
            end_phase(self.emit, state, "failed", reason=why)
            return
        baseline = progress.baseline
        facts = PhaseFacts(
            goal=phase.prompt,
            check=phase.check,
            baseline=(baseline.passed, baseline.exit_code, baseline.output) if baseline else None,
            check_passed=progress.check_passed,
            failed_try=progress.failed_try,
            edited=progress.edited,
        )
        mutating = [name for name in self.plan.tools if self.tools.mutates(name)]
        summary = events_summary(
            plan.replaced_messages(state.messages),
            facts,
            mutating_tools=mutating,
            max_chars=limit,
        )
        after = plan.apply(state.messages, summary)
        tools = self.tools.schemas(phase.tools) or None
        counted = await self.token_counter(state.model or self.plan.model.name).count(
            self.request_messages(after), tools
        )
        self.emit(
            ev.Compaction(
                pinned=list(plan.pinned),
                replaced_to=plan.replaced_to,
                replaced_count=len(plan.replaced),
                summary=summary,
                summary_source="events",
                tokens_before=count.total,
                tokens_after=counted.total,
                reason=reason,  # type: ignore[arg-type]
                harder=harder,
            )
        )


def estimated_usage(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    count: PromptCount | None,
    response: ModelResponse,
) -> Usage:
    """Usage for an answer the server sent none for: the prompt's exact count when the budget
    made one, else an estimate; the answer's estimated. Marked estimated either way, so the
    run's token limits still fire and the report says the counts are not the server's."""
    prompt = count.total if count is not None and count.exact else None
    if prompt is None:
        prompt = estimate_prompt_tokens(messages, tools)
    calls = [
        (c.name, c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments))
        for c in response.tool_calls
    ]
    completion = estimate_completion_tokens(response.content, calls)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, estimated=True)
