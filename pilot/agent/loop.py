"""The agent loop: from the folded state, decide the next thing to do, do it, record it.

Every action is recorded as events *before* the next action begins, and every decision is
taken from ``RunState`` alone, so a loop started on a freshly folded state (a resume) continues
exactly where a dead one stopped. The loop does no I/O but through its seams: the event sink,
the model client, the tool executor and the workspace.

Order of one step: ``model_request`` -> ``assistant_message`` -> for each call
``tool_started`` -> run -> ``tool_finished`` -> ``workspace_snapshot`` (after a tool that may
change the workspace). A phase ends when the model calls ``finish`` and the phase's check (if
any) passes.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from pilot import events as ev
from pilot.agent.conclude import (
    baseline_due,
    conclude,
    conclude_after_edit,
    failed_attempt,
    run_baseline,
)
from pilot.agent.context import (
    SUMMARY_MAX_TOKENS,
    Budget,
    PromptCount,
    ServerCounts,
    TokenCounter,
    accept_summary,
    cut_tool_output,
    fallback_summary,
    plan_compaction,
    summary_request,
)
from pilot.agent.cut import cut_call_refusal, cut_reason, cut_text_message
from pilot.agent.images import (
    PHASE_IMAGE_TOOL,
    Materializer,
    choose_transport,
    classify_media_error,
    has_images,
    refused_output,
    undecodable,
)
from pilot.agent.progress import QUESTION_REPLY, detect_question, empty_turn_action, hotter
from pilot.agent.state import RunState, check_failed_message
from pilot.errors import (
    BadRequest,
    ConfigurationError,
    ContextOverflow,
    ModelNotFound,
    ServerUnavailable,
)
from pilot.model.servers import estimate_completion_tokens, estimate_prompt_tokens
from pilot.model.types import ChatRequest, ModelClient, ModelResponse, Usage, WaitEvent
from pilot.tactics.locate import (
    MAX_LINES,
    called_as_method,
    definition_block,
    definition_search,
    failing_names,
    first_hit,
    focus,
    frame_hit,
)
from pilot.tactics.repair import (
    DEFINITION_TOOL,
    addition_target,
    example_path,
    example_values,
    extract_text_tool_calls,
    fit_arguments,
    no_call_feedback,
    repair_arguments,
    resolve_tool_name,
)
from pilot.tactics.text_turns import as_text_turns, has_text_calls, text_call_id
from pilot.workflow.plan import Limits, PhasePlan, RunPlan

_T = TypeVar("_T")

MAX_COMPACTIONS_IN_A_ROW = 3
"""Compactions without a model answer in between before the phase is given up (no doom loop)."""
TOOL_RESULT_SHARE = 0.15
"""The largest share of the window one tool result may take in the conversation."""

CONTEXT_OUTPUT_CHARS = 2000
"""How much of a ``context:`` command's output opens a phase (its end): room for a test run's
failures without filling a small model's window."""
NUDGE_EMPTY = (
    "Your last answer was empty. Continue the task: call one of the tools, or call `finish` "
    "with a summary if this phase is done."
)
NOTHING_CHANGED = "the run changed no file"
"""Said in the outcome of a run that ends with the workspace as it started."""
NO_CHANGE_CHECK = "a change to the workspace"
"""The check's label when a ``require_change`` phase is closed on an unchanged tree."""
NO_CHANGE_OUTPUT = "No file differs from the phase's start; this phase must change the code."


class EventSink(Protocol):
    def __call__(self, event: ev.Event, *, commit: bool = True) -> None:
        """Record ``event``; it is durable on return. ``commit=False`` lets it wait for the
        next event's transaction, or until the loop has waited a moment on something (a slow
        read-only tool, a request), whichever comes first; the state has it at once."""
        ...


@dataclass(frozen=True)
class CheckOutcome:
    exit_code: int | None
    output: str
    timed_out: bool


class ToolExecutor(Protocol):
    """The tools as the loop sees them (implemented over ``tools.ToolRegistry``)."""

    def schemas(self, names: list[str]) -> list[dict[str, Any]]: ...
    def known(self, name: str) -> bool: ...
    def mutates(self, name: str) -> bool: ...
    def edits(self, name: str) -> bool:
        """Whether a call is a file edit (a tool that writes only the paths it names)."""
        ...

    def blocks(self, name: str) -> bool:
        """Whether a call may block (I/O): it then runs in a worker thread, otherwise on the
        event loop, where it costs less than the hop to a thread."""
        ...

    def invoke(self, name: str, arguments: dict[str, Any], call_id: str) -> ev.ToolFinished: ...
    def run_check(self, command: str, timeout: float, call_id: str) -> CheckOutcome: ...
    def keep_full_output(self, call_id: str, text: str) -> str | None:
        """Keep a long result where the model can page through it; returns its path."""
        ...


class WorkspaceOps(Protocol):
    def snapshot(self, message: str) -> tuple[str, str | None]: ...
    def restore(self, snapshot: str, head: str | None) -> None: ...


class StopRequested(Exception):
    """Raised inside the loop when a pause was asked for; caught by the loop itself."""


class AgentLoop:
    """One run's agent loop: each ``advance()`` does the one next thing its folded state calls
    for, through the seams it is given (event sink, model client, tools, workspace)."""

    def __init__(
        self,
        plan: RunPlan,
        state: RunState,
        emit: EventSink,
        client: ModelClient,
        tools: ToolExecutor,
        workspace: WorkspaceOps,
        *,
        stop: asyncio.Event | None = None,
        clock: Callable[[], datetime] = ev.utcnow,
        server_counts: ServerCounts | None = None,
    ) -> None:
        self.plan = plan
        self.state = state
        self.emit = emit
        self.client = client
        self.tools = tools
        self.workspace = workspace
        self.stop = stop or asyncio.Event()
        self.clock = clock
        self.counter: TokenCounter | None = None
        self.server_counts = server_counts
        """The server's tokenizer facts, shared with the process's other runs against it."""
        self._stop_waiter: asyncio.Future[Any] | None = None
        self._fitted: tuple[Any, Any, dict[str, dict[str, Any] | None]] | None = None
        """The last phase's tool names and schema list, and the schemas by name built of them."""
        self._text_mode: bool | None = None
        self.media = Materializer()

    # -- the driver -----------------------------------------------------------------------

    async def run(self) -> RunState:
        """Advance until the run finishes or a stop is requested; returns the final state."""
        try:
            self.recover()
            while self.state.finished is None:
                if self.stop.is_set():
                    raise StopRequested
                await self.advance()
        except StopRequested:
            if self.state.finished is None:
                self.emit(ev.RunPaused(reason="stop requested (signal); resume to continue"))
        except ServerUnavailable as exc:
            self.emit(ev.RunPaused(reason=f"model server unavailable: {exc}"))
        except (ModelNotFound, ConfigurationError) as exc:
            self.emit(ev.RunFinished(status="failed", reason=str(exc)))
        finally:
            self.release_stop_waiter()
        return self.state

    def recover(self) -> None:
        """A tool or check that started and never finished may have partly run: undo it."""
        started = self.state.started_call
        in_check = self.state.phase.check_in_flight if self.state.phase else None
        interrupted = (started is not None and started.mutates) or in_check is not None
        if interrupted and self.state.snapshot:
            what = f"tool {started.name}" if started else "phase check"
            self.workspace.restore(self.state.snapshot, self.state.head)
            self.emit(
                ev.WorkspaceRestored(
                    snapshot=self.state.snapshot,
                    head=self.state.head,
                    reason=f"{what} was interrupted; restoring the last snapshot before "
                    "running it again",
                )
            )

    async def advance(self) -> None:
        """Do exactly one thing, chosen from the state."""
        state = self.state
        if state.snapshot_due is not None:
            await self.take_due_snapshot()
            return
        if state.pending_calls and state.phase is not None:
            # An answer already received (paid for) runs before a step or token limit stops
            # the run; past the wall time, its calls are recorded as not run, with why.
            phase = self.plan.phases[state.phase.index]
            late = self.wall_time_over(phase.limits, self.plan.limits)
            if late is not None:
                self.refuse_pending(late)
                return
            await self.answer_call(phase, state.pending_calls[0])
            return
        if self.limit_hit(self.plan.limits, scope="run"):
            return
        if state.phase is None:
            index = state.next_phase_index
            if index >= len(self.plan.phases):
                self.emit(ev.RunFinished(status="succeeded", reason=self.success_reason()))
                return
            phase = self.plan.phases[index]
            prompt = f"{self.plan.phase_header(index)}\n\n{phase.prompt}"
            images, notes = await self.phase_images(index, phase)
            notes += await self.phase_context(index, phase)
            prompt = "\n\n".join([prompt, *notes])
            self.emit(ev.PhaseStarted(index=index, name=phase.name, prompt=prompt, images=images))
            return
        phase = self.plan.phases[state.phase.index]
        if baseline_due(self, phase):
            await run_baseline(self, phase)
            return
        if phase.check_after_edit and phase.check and state.phase.edited:
            await self.check_edit(phase)
            return
        if phase.retry_fresh and state.phase.failed_try is not None:
            await self.restart_try(phase)
            return
        if state.phase.finish_called:
            await self.close_phase(phase)
            return
        if state.phase.pending_verdict is not None:
            self.act_on_verdict(phase)
            return
        if self.limit_hit(phase.limits, scope="phase"):
            return
        await self.ask_model(phase)

    def success_reason(self) -> str:
        """Why a run succeeded, saying plainly when it left every file as it found it."""
        started = self.state.started
        base = started.base_snapshot if started else None
        now = self.state.snapshot
        if base and now and not self.workspace_changed(base, now):
            return f"all phases done; {NOTHING_CHANGED}"
        return "all phases done"

    def act_on_verdict(self, phase: PhasePlan) -> None:
        """A loop or no progress was seen: nudge the model once, then end the phase as stuck."""
        progress = self.state.phase
        assert progress is not None and progress.pending_verdict is not None
        verdict = progress.pending_verdict
        self.emit(
            ev.LoopDetected(
                kind=verdict.kind or "loop",
                detail=verdict.detail,
                action="stuck" if verdict.action == "stuck" else "nudge",
                message=verdict.message,
            )
        )
        if verdict.action == "stuck":
            reason = f"stuck: {verdict.detail or verdict.message}"
            self.emit(
                ev.PhaseFinished(
                    index=progress.index, name=phase.name, outcome="stuck", reason=reason
                )
            )
            self.emit(ev.RunFinished(status="failed", reason=f"phase {phase.name} {reason}"))

    # -- limits ---------------------------------------------------------------------------

    def wall_time_over(self, phase_limits: Limits, run_limits: Limits) -> str | None:
        """Why the phase's or the run's wall time is spent, or None."""
        state, now = self.state, self.clock()
        progress = state.phase
        elapsed = state.elapsed_active(now)
        for scope, limits, used in (
            ("run", run_limits, elapsed),
            ("phase", phase_limits, elapsed - (progress.active_at_start if progress else 0.0)),
        ):
            if limits.max_wall_time is not None and used >= limits.max_wall_time:
                return f"{scope} wall-time limit reached ({limits.max_wall_time:.0f} s)"
        return None

    def refuse_pending(self, reason: str) -> None:
        """Record each call of the last answer as not run, with ``reason`` (a limit)."""
        for call in list(self.state.pending_calls):
            self.emit(
                ev.ToolFinished(
                    call_id=call.id,
                    name=call.name,
                    output=f"Error: not run: {reason}",
                    is_error=True,
                    executed=False,
                ),
                commit=False,
            )

    def limit_hit(self, limits: Limits, *, scope: str) -> bool:
        state = self.state
        now = self.clock()
        phase = state.phase
        if scope == "run":
            used = (state.steps, state.elapsed_active(now), state.total_tokens)
        elif phase is not None:
            used = (phase.steps, state.elapsed_active(now) - phase.active_at_start, phase.tokens)
        else:
            return False
        reason = None
        if limits.max_steps is not None and used[0] >= limits.max_steps:
            reason = f"{scope} step limit reached ({limits.max_steps} steps)"
        elif limits.max_wall_time is not None and used[1] >= limits.max_wall_time:
            reason = f"{scope} wall-time limit reached ({limits.max_wall_time:.0f} s)"
        elif limits.max_tokens is not None and used[2] >= limits.max_tokens:
            reason = f"{scope} token limit reached ({limits.max_tokens} tokens)"
        if reason is None:
            return False
        if phase is not None:
            self.emit(
                ev.PhaseFinished(index=phase.index, name=phase.name, outcome="limit", reason=reason)
            )
        self.emit(ev.RunFinished(status="limit", reason=reason))
        return True

    # -- the model ------------------------------------------------------------------------

    async def ask_model(self, phase: PhasePlan) -> None:
        state = self.state
        model = state.model or self.plan.model.name
        tools = self.tools.schemas(phase.tools) or None
        count: PromptCount | None = None
        max_tokens = self.plan.model.max_tokens
        budget = self.budget()
        history = state.messages
        if self.text_mode(history):
            history = as_text_turns(history)
        messages = self.request_messages(history)
        if budget is not None:
            count = await self.fits_without_counting(budget, model, messages, tools)
            if count is not None:
                max_tokens = budget.max_tokens_wanted
        if budget is not None and count is None:
            count = await self.stoppable(self.token_counter(model).count(messages, tools))
            if budget.needs_compaction(count.total):
                await self.compact(phase, budget, count, reason="threshold")
                return
            try:
                max_tokens = budget.request_max_tokens(count.total)
            except ContextOverflow:
                await self.compact(phase, budget, count, reason="no_room")
                return
        step = state.steps + 1
        sampling = self.plan.model.sampling
        repeats = state.phase.tracker.repeats if state.phase else 0
        if state.phase is not None and state.phase.restarts:
            # A fresh try of the same prompt: each one sampled hotter than the last.
            repeats = max(repeats, state.phase.restarts + 1)
        temperature = hotter(sampling.get("temperature"), repeats)
        if temperature is not None:
            sampling = {**sampling, "temperature": temperature}
        self.emit(
            ev.ModelRequest(
                step=step,
                messages=len(state.messages),
                max_tokens=max_tokens,
                prompt_tokens=count.total if count else None,
                prompt_bound=bool(count and count.bounded),
                temperature=temperature,
            )
        )
        # model_construct: these fields are built here with the right types; validating would
        # copy every message dict of the history on every step (O(history) per step).
        request = ChatRequest.model_construct(
            model=model,
            messages=messages,
            tools=tools,
            tool_choice="auto" if phase.tools else None,
            **sampling,
            max_tokens=max_tokens,
            extra_body=self.plan.model.extra_body,
        )
        try:
            response = await self.call_model(request)
        except ContextOverflow as exc:
            if budget is not None and (count is None or count.bounded):
                count = await self.token_counter(model).count(messages, tools)
            if budget is None and exc.max_model_len:
                # The server named its window only now (llama-cpp-python does so in its
                # context error): budget with it from here on, and ask again.
                self.emit(
                    ev.ModelResolved(
                        model=model,
                        max_model_len=exc.max_model_len,
                        window_source="the server's context-length error",
                    )
                )
                return
            if budget is None or count is None:
                raise ConfigurationError(
                    f"{exc} The server did not report its max_model_len, so Marathon cannot "
                    "budget the context; serve it with vLLM or set a smaller model.max_tokens."
                ) from exc
            harder = (state.phase.compactions_in_a_row if state.phase else 0) + 1
            await self.compact(phase, budget, count, reason="overflow", harder=harder)
            return
        except BadRequest as exc:
            if not self.image_fallback(exc):
                raise
            return
        if response.usage is None:
            response = response.model_copy(
                update={"usage": estimated_usage(messages, tools, count, response)}
            )
        self.record_response(step, phase, response, max_tokens)

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

    async def compact(
        self,
        phase: PhasePlan,
        budget: Budget,
        count: PromptCount,
        *,
        reason: str,
        harder: int = 0,
    ) -> None:
        """Replace older turns by a structured summary written by the model (or built from
        the turns when the model cannot), keeping the system prompt, the phase prompt and the
        recent turns verbatim; recorded as one event, so the full history stays in the store."""
        state = self.state
        progress = state.phase
        assert progress is not None
        plan = None
        if progress.compactions_in_a_row < MAX_COMPACTIONS_IN_A_ROW:
            plan = plan_compaction(
                state.messages,
                count.per_message,
                keep_recent_tokens=budget.keep_recent_tokens(),
                phase_start=progress.message_index,
                harder=harder,
            )
        if plan is None:
            why = (
                f"the context window ({budget.max_model_len} tokens) is exhausted: the system "
                "prompt, the phase prompt and the last turn no longer fit, even after "
                f"{progress.compactions_in_a_row} compaction(s)"
            )
            self.emit(
                ev.PhaseFinished(
                    index=progress.index, name=phase.name, outcome="failed", reason=why
                )
            )
            self.emit(ev.RunFinished(status="failed", reason=f"phase {phase.name}: {why}"))
            return
        replaced = plan.replaced_messages(state.messages)
        summary, source, error = None, "model", None
        try:
            answer = await self.call_model(
                ChatRequest(
                    model=state.model or self.plan.model.name,
                    messages=summary_request(
                        replaced,
                        task=phase.prompt,
                        max_input_tokens=budget.summary_input_tokens(),
                    ),
                    **self.plan.model.sampling,
                    max_tokens=SUMMARY_MAX_TOKENS,
                    extra_body=self.plan.model.extra_body,
                )
            )
            summary = accept_summary(answer.content)
            if summary is None:
                error = "the model's summary was empty or unstructured"
        except (BadRequest, ContextOverflow, ConfigurationError) as exc:
            error = str(exc)
        if summary is None:
            source = "fallback"
            mutating = [name for name in self.plan.tools if self.tools.mutates(name)]
            summary = fallback_summary(replaced, mutating_tools=mutating)
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
                summary_source=source,  # type: ignore[arg-type]
                summary_error=error,
                tokens_before=count.total,
                tokens_after=counted.total,
                reason=reason,  # type: ignore[arg-type]
                harder=harder,
            )
        )

    async def call_model(self, request: ChatRequest) -> ModelResponse:
        async def on_wait(wait: WaitEvent) -> None:
            self.emit(ev.from_wait(wait))

        return await self.stoppable(self.client.complete(request, on_wait=on_wait))

    async def stoppable(self, awaitable: Awaitable[_T]) -> _T:
        """Await ``awaitable`` (a request, its retries and backoffs while the server is away),
        raising ``StopRequested`` the moment a stop is asked for.

        It runs in this task; a stop cancels it where it waits. (A task per request raced
        against a waiter on the stop event cost two tasks and three turns of the event loop a
        step.)"""
        if self.stop.is_set():
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()  # a coroutine never awaited
            raise StopRequested
        task = asyncio.current_task()
        assert task is not None
        interrupted = waiting = False

        def interrupt(_waiter: object) -> None:
            nonlocal interrupted
            if waiting:  # not a callback scheduled just before this request ended
                interrupted = True
                task.cancel()

        waiter = self.stop_waiter()
        waiter.add_done_callback(interrupt)
        waiting = True
        try:
            result = await awaitable
        except asyncio.CancelledError:
            if interrupted and task.uncancel() == 0:
                raise StopRequested from None
            raise
        finally:
            waiting = False
            waiter.remove_done_callback(interrupt)
        if interrupted:  # the awaited code swallowed the cancellation
            task.uncancel()
            raise StopRequested
        return result

    def release_stop_waiter(self) -> None:
        if self._stop_waiter is not None:
            self._stop_waiter.cancel()
            self._stop_waiter = None

    def stop_waiter(self) -> asyncio.Future[Any]:
        """One waiter on the stop event for the loop's life (``run`` cancels it)."""
        if self._stop_waiter is None:
            self._stop_waiter = asyncio.ensure_future(self.stop.wait())
        return self._stop_waiter

    def phase_schemas(self, phase: PhasePlan) -> dict[str, dict[str, Any] | None]:
        """The phase's tools and their parameter schemas, to fit calls to (read only; built
        again only when the phase or the schema list, shared per tool set, changes)."""
        schemas = self.tools.schemas(phase.tools)
        fitted = self._fitted
        if fitted is not None and fitted[0] is phase.tools and fitted[1] is schemas:
            return fitted[2]
        out: dict[str, dict[str, Any] | None] = {name: None for name in phase.tools}
        for tool in schemas:
            function = tool.get("function", {}) if isinstance(tool, dict) else {}
            if function.get("name") in out:
                out[function["name"]] = function.get("parameters")
        self._fitted = (phase.tools, schemas, out)
        return out

    def record_response(
        self, step: int, phase: PhasePlan, response: ModelResponse, max_tokens: int | None = None
    ) -> None:
        repairs: list[str] = []
        calls: list[ev.ToolCall] = []
        schemas = self.phase_schemas(phase)
        cut = cut_reason(response.finish_reason, response.usage, max_tokens)
        if cut is not None:  # recorded as sent, never repaired: none of it runs
            self.record_cut(step, response, cut, max_tokens)
            return
        for position, call in enumerate(response.tool_calls):
            name, renamed = call.name, None
            if name not in schemas and not self.tools.known(name):
                resolved, renamed = resolve_tool_name(name, list(schemas))
                name = resolved or name
            fixed = repair_arguments(call.arguments)
            text = "{}"
            error = fixed.error if fixed.arguments is None else None
            if fixed.arguments is not None:
                arguments = fixed.arguments
                repairs.extend(f"{name}: {r}" for r in fixed.repairs)
                if renamed:
                    repairs.append(renamed)
                if name in schemas:
                    fit = fit_arguments(name, arguments, schemas[name])
                    repairs.extend(fit.repairs)
                    if fit.arguments is None:
                        error = fit.error
                    else:
                        arguments = fit.arguments
                text = json.dumps(arguments, ensure_ascii=False)
            calls.append(
                ev.ToolCall(
                    id=call.id or new_call_id(step, position),
                    name=name,
                    arguments=text,
                    raw_arguments=None if text == call.arguments else call.arguments,
                    error=error,
                )
            )
        content = response.content
        found = None
        if not calls and content:
            found = extract_text_tool_calls(content, schemas)
            if found.calls:
                for position, (name, arguments) in enumerate(found.calls):
                    if name == DEFINITION_TOOL and "path" not in arguments:
                        target = addition_target(arguments.get("code", ""), phase.prompt)
                        if target is not None:
                            arguments = {**arguments, "add_to": target}
                    calls.append(
                        ev.ToolCall(
                            id=text_call_id(step, position),
                            name=name,
                            arguments=json.dumps(arguments, ensure_ascii=False),
                            raw_arguments=content,
                        )
                    )
                repairs.extend(found.repairs or ["tool call written as text in content"])
                self._text_mode = True
                content = found.remaining_content or None
        usage = response.usage
        # With calls, it waits for the first transaction its calls need: a mutating call's
        # tool_started, or the next step's model_request when every call is read-only.
        self.emit(
            ev.AssistantMessage(
                step=step,
                content=content,
                reasoning=response.reasoning,
                tool_calls=calls,
                finish_reason=response.finish_reason,
                usage=usage,
                ttft_s=response.ttft_s,
                duration_s=response.duration_s,
                attempts=response.attempts,
                repairs=repairs,
                endpoint=response.endpoint,
            ),
            commit=not calls,
        )
        if calls:
            return
        if not (content or "").strip():
            progress = self.state.phase
            empties = progress.tracker.consecutive_empty if progress else 1
            if empty_turn_action(empties) == "nudge":
                self.emit(ev.Nudge(reason="empty_turn", text=NUDGE_EMPTY))
            return  # "retry": asked again as is; past that, the tracker counts no progress
        question = detect_question(content or "")
        if question is not None:
            self.emit(ev.Question(step=step, text=question, reply=QUESTION_REPLY))
        else:
            seen = found or extract_text_tool_calls(content or "", schemas)
            text = no_call_feedback(
                seen,
                schemas,
                previous=self.last_nudge(),
                content=content or "",
                path=example_path(phase.prompt),
                values=example_values(self.started_prompt(phase), self.state.files_read),
            )
            self.emit(ev.Nudge(reason="no_tool_call", text=text))

    def record_cut(
        self, step: int, response: ModelResponse, reason: str, max_tokens: int | None
    ) -> None:
        """A cut answer: recorded with its calls as the server sent them (unrepaired), then
        ``answer_cut``, which answers each call without running it (``pilot.agent.cut``)."""
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
        self.emit(
            ev.AssistantMessage(
                step=step,
                content=response.content,
                reasoning=response.reasoning,
                tool_calls=calls,
                finish_reason=response.finish_reason,
                usage=response.usage,
                ttft_s=response.ttft_s,
                duration_s=response.duration_s,
                attempts=response.attempts,
                endpoint=response.endpoint,
            ),
            commit=False,
        )
        self.emit(
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

    def started_prompt(self, phase: PhasePlan) -> str:
        """The phase's prompt as it started (its ``context:`` output and located code in it)."""
        progress = self.state.phase
        messages = self.state.messages
        if progress is not None and progress.message_index < len(messages):
            content = messages[progress.message_index].get("content")
            if isinstance(content, str):
                return content
        return phase.prompt

    def text_mode(self, messages: list[dict[str, Any]]) -> bool:
        """Whether the model writes its calls as text (any call so far was recovered from
        text): its history is then sent back as text (``pilot.tactics.text_turns``). Scanned
        once per process, then kept up to date by ``record_response``."""
        if self._text_mode is None:
            self._text_mode = has_text_calls(messages)
        return self._text_mode

    def last_nudge(self) -> str | None:
        """The text of the last message the harness added as the user, if it was the last."""
        for message in reversed(self.state.messages[-4:]):
            if message.get("role") == "user":
                content = message.get("content")
                return content if isinstance(content, str) else None
        return None

    # -- tools ----------------------------------------------------------------------------

    async def answer_call(self, phase: PhasePlan, call: ev.ToolCall) -> None:
        """Run one pending call (or answer it with an error without running it)."""
        refusal = None
        arguments: dict[str, Any] = {}
        failed = self.failed_in_this_answer()
        if self.state.answer_cut is not None:  # a cut answer's call never runs
            refusal = self.state.answer_cut
        elif failed is not None:
            refusal = (
                f"Error: not run: {failed}, called before it in the same answer, failed, and "
                f"this call counted on it. Fix {failed} first (read its error above), one call "
                "per answer."
            )
        elif not self.tools.known(call.name):
            refusal = (
                f"Error: there is no tool named {call.name!r}. Available tools in this phase: "
                f"{', '.join(phase.tools)}."
            )
        elif call.name not in phase.tools:
            refusal = (
                f"Error: the tool {call.name!r} is not available in phase {phase.name!r}. "
                f"Use one of: {', '.join(phase.tools)}."
            )
        elif call.error is not None and call.error.startswith("Error:"):
            refusal = call.error
        elif call.error is not None:
            refusal = (
                f"Error: the arguments of {call.name} are not valid JSON ({call.error}). "
                "Send the call again with a JSON object as arguments."
            )
        else:
            arguments = json.loads(call.arguments)
        if refusal is not None:
            # Nothing ran: lost to a kill, the same refusal is given again on resume.
            self.emit(
                ev.ToolFinished(
                    call_id=call.id, name=call.name, output=refusal, is_error=True, executed=False
                ),
                commit=False,
            )
            return
        if self.stop.is_set():
            raise StopRequested
        mutates = self.tools.mutates(call.name)
        # A mutating call is durable before it runs (a resume that finds it unfinished restores
        # the workspace and runs it again). A read-only call, its result and the answer that
        # asked for it are committed together, with the next step's model_request: lost to a
        # kill, they cost asking the model again and re-running a read. A read-only step is
        # one transaction.
        edits = mutates and self.tools.edits(call.name)
        self.emit(
            ev.ToolStarted(call_id=call.id, name=call.name, mutates=mutates, edits=edits),
            commit=mutates,
        )
        started = time.monotonic()
        if self.tools.blocks(call.name):
            finished = await asyncio.to_thread(self.tools.invoke, call.name, arguments, call.id)
        else:
            finished = self.tools.invoke(call.name, arguments, call.id)
        finished = self.fit_result(finished, call.id)
        finished = self.place_images(finished)
        # A read-only call's result is committed with the next event (the next step's
        # model_request, most often), or once the loop has waited a moment on something.
        # A mutating call's is committed the moment it returns, before its
        # snapshot (its own event, next): the window in which its effect is done but not
        # recorded (undone and re-run on resume) is that one commit.
        self.emit(
            finished.model_copy(
                update={"duration_s": time.monotonic() - started, "at": self.clock()}
            ),
            commit=mutates,
        )
        if mutates:
            await self.take_due_snapshot()

    def failed_in_this_answer(self) -> str | None:
        """The tool name of a call of the current answer that already failed, if any: the
        calls after it were written counting on its result (a small model writes edit, run
        and finish at once), so a finish after a failed edit must not close the phase."""
        names: dict[str, str] = {}
        failed = None
        for message in reversed(self.state.messages):
            if message.get("role") == "tool":
                if str(message.get("content", "")).startswith("Error"):
                    failed = message.get("tool_call_id")
                continue
            if message.get("role") == "assistant":
                for call in message.get("tool_calls") or []:
                    names[call.get("id", "")] = call.get("function", {}).get("name", "?")
            break
        return None if failed is None else names.get(failed, "a call")

    async def take_due_snapshot(self) -> None:
        """Record the workspace as the last mutating tool or check left it (``snapshot_due``):
        right after its result, or first thing on a resume that found the result without it."""
        due = self.state.snapshot_due
        if due is None:
            return
        snapshot, head = await asyncio.to_thread(self.workspace.snapshot, f"after {due}")
        # Held for the next event's transaction: lost to a kill, it is taken again on resume
        # (nothing can change the workspace before the next event is committed).
        self.emit(ev.WorkspaceSnapshot(call_id=due, snapshot=snapshot, head=head), commit=False)

    def fit_result(self, finished: ev.ToolFinished, call_id: str) -> ev.ToolFinished:
        """A tool result larger than its share of the window is cut before it enters the
        context; the full text stays readable as a file (see ToolExecutor.keep_full_output)."""
        window = self.state.max_model_len
        if not window:
            return finished
        budget = int(window * TOOL_RESULT_SHARE)
        if len(finished.output) <= budget * 3:  # cheap test first: under 3 chars a token
            return finished
        path = self.tools.keep_full_output(call_id, finished.output)
        text, cut = cut_tool_output(finished.output, budget, artifact=path)
        if not cut:
            return finished
        return finished.model_copy(update={"output": text, "truncated": True})

    # -- images ---------------------------------------------------------------------------

    def request_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages as sent: image placeholders replaced by their URLs (pilot.agent.images)."""
        if not self.state.images or not has_images(messages):  # no image yet: skip the scan
            return list(messages)
        state = self.state
        refused = state.images_refused
        return self.media.materialize(
            messages,
            state.images,
            data_only=state.images_data_only,
            refused=None if refused is None else f"the server refused images ({refused})",
            dropped=state.images_dropped,
        )

    def vision_refusal(self) -> str | None:
        """Why this run cannot show images to the model, or None."""
        if self.state.images_refused is not None:
            return f"the server said: {self.state.images_refused}"
        if self.plan.media.vision is False:
            return "the workflow or the server profile says the model has no vision"
        return None

    def place_images(self, finished: ev.ToolFinished) -> ev.ToolFinished:
        """Decide how a tool's images travel, or refuse them when the model cannot see."""
        if not finished.images:
            return finished
        reason = self.vision_refusal()
        if reason is not None:
            sources = ", ".join(ref.source for ref in finished.images)
            return finished.model_copy(
                update={"output": refused_output(sources, reason), "is_error": True, "images": []}
            )
        images = [choose_transport(ref, self.plan.media) for ref in finished.images]
        return finished.model_copy(update={"images": images})

    async def phase_context(self, index: int, phase: PhasePlan) -> list[str]:
        """The phase's ``context:`` commands, run now; each one's status and output (its end:
        a test run's summary and last failure are there) as a section of the prompt. Written
        into the phase's start event, so a resumed run sees the very same prompt."""
        sections = []
        outputs = []
        for k, command in enumerate(phase.context):
            outcome = await asyncio.to_thread(
                self.tools.run_check, command, phase.check_timeout, f"phase-{index}-context-{k}"
            )
            status = "timed out" if outcome.timed_out else f"exit code {outcome.exit_code}"
            output = outcome.output.strip() or "(no output)"
            outputs.append(output)
            sections.append(f"`{command}` ({status}):\n{output_end(output)}")
        located: list[str] = []
        if phase.locate:
            located = await self.located_code(index, "\n".join(outputs), phase.prompt)
            sections += located
        if sections:  # the task again, last: a small model follows what it read last
            sections.append(f"Your task (as above): {phase.prompt.strip()}")
        if located and DEFINITION_TOOL in phase.tools:
            # Shown a function, a small model fixes it by rewriting it whole; told so last,
            # it answers with that rewrite (replace_definition takes the block as its call).
            sections.append(
                "To change a function shown above, answer with the whole corrected function "
                "in one ```python block."
            )
        return sections

    async def located_code(self, index: int, output: str, prompt: str) -> list[str]:
        """The source of each function the failures in ``output`` call (``pilot.tactics.locate``),
        those the phase's prompt names when it names any."""
        sections = []
        for k, name in enumerate(focus(failing_names(output), prompt)):
            found = await asyncio.to_thread(
                self.tools.run_check, definition_search(name), 60, f"phase-{index}-locate-{k}"
            )
            hit = frame_hit(output, found.output) or first_hit(
                found.output, method=called_as_method(output, name)
            )
            if hit is None:
                continue
            path, line = hit
            shown = await asyncio.to_thread(
                self.tools.run_check,
                f"sed -n '{line},{line + MAX_LINES}p' {shlex.quote(path)}",
                60,
                f"phase-{index}-show-{k}",
            )
            block = definition_block(shown.output)
            if block:
                sections.append(
                    f"The code of {name} ({path}, line {line}):\n```python\n{block}\n```"
                )
        return sections

    async def phase_images(self, index: int, phase: PhasePlan) -> tuple[list, list[str]]:
        """The phase's ``images:``, loaded like view_image calls; a problem becomes a note in
        the prompt (the phase still starts)."""
        images: list = []
        notes: list[str] = []
        reason = self.vision_refusal()
        for k, path in enumerate(phase.images):
            if reason is not None:
                notes.append(f"[image {path} not attached: {reason}]")
                continue
            if not self.tools.known(PHASE_IMAGE_TOOL):
                notes.append(f"[image {path} not attached: no {PHASE_IMAGE_TOOL} tool]")
                continue
            finished = await asyncio.to_thread(
                self.tools.invoke, PHASE_IMAGE_TOOL, {"path": path}, f"phase-{index}-image-{k}"
            )
            if finished.is_error or not finished.images:
                why = finished.output.removeprefix("Error: ") or "no image"
                notes.append(f"[image {path} not attached: {why}]")
                continue
            images += [choose_transport(ref, self.plan.media) for ref in finished.images]
        return images, notes

    def image_fallback(self, exc: BadRequest) -> bool:
        """vLLM's media errors: file:// refused -> data URLs from now on (once); bytes it cannot
        decode (or any 400 while some image does not decode here) -> those images left out;
        images refused at all -> left out of requests. Recorded as an event; False for any
        other error."""
        state = self.state
        message = str(exc).split("): ", 1)[-1]
        kind = classify_media_error(message)
        if not has_images(state.messages):
            return False
        if kind in (None, "image_data") and state.images_refused is None:
            # Pillow's texts for bad bytes are many ("Truncated File Read", ...): whatever the
            # 400 says, images that do not decode here either are what the server refused.
            kept = [r for sha, r in state.images.items() if sha not in state.images_dropped]
            if bad := undecodable(kept):
                self.emit(ev.ImageFallback(error=message, action="drop", images=bad))
                return True
        if kind is None:
            return False
        if kind == "local_path" and not state.images_data_only:
            self.emit(ev.ImageFallback(error=message, action="data_url"))
            return True
        if state.images_refused is None:
            self.emit(ev.ImageFallback(error=message, action="drop"))
            return True
        return False

    # -- phase end ------------------------------------------------------------------------

    def workspace_changed(self, since: str | None, now: str) -> bool:
        """Whether the workspace at snapshot ``now`` differs from ``since`` (the phase start)."""
        if since is None:
            return True  # no snapshot at the start: nothing to compare with, nothing refused
        if since == now:
            return False
        changed = getattr(self.workspace, "changed", None)
        return True if changed is None else bool(changed(since, now))

    async def close_phase(self, phase: PhasePlan) -> None:
        progress = self.state.phase
        assert progress is not None
        if phase.require_change and not progress.check_passed:
            snapshot, head = await asyncio.to_thread(
                self.workspace.snapshot, f"before closing phase {phase.name}"
            )
            if not self.workspace_changed(progress.start_snapshot, snapshot):
                self.refuse_unchanged(phase, snapshot, head)
                return
        if not phase.check or progress.check_passed:
            await conclude(self, phase, progress.finish_summary, check_passed=bool(phase.check))
            return
        attempt = progress.check_attempts + 1
        outcome, duration = await self.run_phase_check(
            phase, attempt, f"check-{progress.index}-{attempt}", after_edit=False
        )
        passed = outcome.exit_code == 0 and not outcome.timed_out
        attempts_left = phase.max_attempts - attempt
        feedback = ""
        if not passed and attempts_left > 0:
            feedback = check_failed_message(
                phase.check, outcome.exit_code, outcome.timed_out, outcome.output, attempts_left
            )
        self.emit(
            ev.CheckFinished(
                phase=progress.index,
                attempt=attempt,
                command=phase.check,
                exit_code=outcome.exit_code,
                passed=passed,
                output=outcome.output,
                timed_out=outcome.timed_out,
                duration_s=duration,
                feedback=feedback,
            )
        )
        await self.take_due_snapshot()
        if passed:
            await conclude(self, phase, progress.finish_summary, check_passed=True)
        elif attempts_left <= 0:
            reason = f"check `{phase.check}` still failing after {phase.max_attempts} attempt(s)"
            self.emit(
                ev.PhaseFinished(
                    index=progress.index, name=phase.name, outcome="failed", reason=reason
                )
            )
            self.emit(ev.RunFinished(status="failed", reason=f"phase {phase.name}: {reason}"))

    async def check_edit(self, phase: PhasePlan) -> None:
        """``check_after_edit``: the phase's check, run after a file edit succeeded. Passing on
        a changed tree ends the phase; failing sends its output back at once. Not an attempt
        (``max_attempts`` counts the checks that finish asks for)."""
        progress = self.state.phase
        assert progress is not None and phase.check is not None
        command, attempt = phase.check, progress.check_attempts
        outcome, duration = await self.run_phase_check(
            phase, attempt, f"check-{progress.index}-edit-{progress.steps}", after_edit=True
        )
        passed = outcome.exit_code == 0 and not outcome.timed_out
        if passed and phase.require_change and self.state.snapshot:
            passed = self.workspace_changed(progress.start_snapshot, self.state.snapshot)
        feedback = ""
        if not passed:
            status = "timed out" if outcome.timed_out else f"exit code {outcome.exit_code}"
            feedback = (
                f"After that edit, the check `{command}` still fails ({status}); it runs "
                f"again after each edit.\n\n{output_end(outcome.output.strip())}"
            )
        self.emit(
            ev.CheckFinished(
                phase=progress.index,
                attempt=attempt,
                command=command,
                exit_code=outcome.exit_code,
                passed=passed,
                output=outcome.output,
                timed_out=outcome.timed_out,
                duration_s=duration,
                feedback=feedback,
                after_edit=True,
            )
        )
        await self.take_due_snapshot()
        if passed:
            summary = progress.finish_summary or f"`{command}` passed after the last edit"
            await conclude_after_edit(self, phase, summary)

    async def run_phase_check(
        self, phase: PhasePlan, attempt: int, call_id: str, *, after_edit: bool
    ) -> tuple[CheckOutcome, float]:
        """Record the phase's check as started, run it; its outcome and how long it took."""
        progress = self.state.phase
        assert progress is not None and phase.check is not None
        self.emit(
            ev.CheckStarted(
                phase=progress.index, attempt=attempt, command=phase.check, after_edit=after_edit
            )
        )
        started = time.monotonic()
        outcome = await asyncio.to_thread(
            self.tools.run_check, phase.check, phase.check_timeout, call_id
        )
        return outcome, time.monotonic() - started

    def phase_succeeded(self, phase: PhasePlan, summary: str) -> None:
        progress = self.state.phase
        assert progress is not None
        self.emit(
            ev.PhaseFinished(
                index=progress.index, name=phase.name, outcome="succeeded", summary=summary
            )
        )

    async def restart_try(self, phase: PhasePlan) -> None:
        """``retry_fresh``: undo the failed try and start again from the phase's prompt. The
        restore is idempotent and the decision comes from the state, so a kill before the
        event is recorded makes the same restart on resume."""
        progress = self.state.phase
        assert progress is not None and progress.failed_try is not None
        snapshot, head = progress.start_snapshot, progress.start_head
        if snapshot and snapshot != self.state.snapshot:
            await asyncio.to_thread(self.workspace.restore, snapshot, head)
        self.emit(
            ev.AttemptRestarted(
                phase=progress.index, reason=progress.failed_try, snapshot=snapshot, head=head
            )
        )

    def refuse_unchanged(self, phase: PhasePlan, snapshot: str, head: str | None) -> None:
        """``require_change`` and nothing changed: a failed attempt, told like a failed check."""
        failed_attempt(
            self,
            phase,
            label=NO_CHANGE_CHECK
            if not phase.check
            else f"{NO_CHANGE_CHECK}, then `{phase.check}`",
            output=NO_CHANGE_OUTPUT,
            feedback=lambda left: (
                f"The phase is not done: it must change the code, and no file differs from "
                f"when it started. {left} attempt(s) left. Make the change with the "
                "tools (write_file or edit_file), check it, then call finish again."
            ),
            final=f"no change made to the workspace in {phase.max_attempts} attempt(s)",
            snapshot=snapshot,
            head=head,
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


def output_end(output: str) -> str:
    """A command's output for the prompt: its end, where a test run's summary and last failure
    are, when it is longer than ``CONTEXT_OUTPUT_CHARS``."""
    if len(output) <= CONTEXT_OUTPUT_CHARS:
        return output
    return "[... start cut ...]\n" + output[-CONTEXT_OUTPUT_CHARS:]


def new_call_id(step: int, position: int) -> str:
    """Ids for calls the server sent without one (or that were recovered from text)."""
    return f"call-{step}-{position}"
