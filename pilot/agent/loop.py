"""The agent loop: from the folded state, decide the next thing to do, do it, record it.

Every action is recorded as events *before* the next action begins, and every decision is
taken from ``RunState`` alone, so a loop started on a freshly folded state (a resume) continues
exactly where a dead one stopped. The loop does no I/O but through its seams
(``pilot.agent.seams``): the event sink, the model client, the tool executor, the workspace,
and the tactics, which it asks how to read an imperfect answer and what to say to it.

The life of one step: ``model_request`` -> ``assistant_message`` -> for each call
``tool_started`` -> run -> ``tool_finished`` -> ``workspace_snapshot`` (after a tool that may
change the workspace). A phase opens with ``phase_started`` (``pilot.agent.phase_start``) and
ends when the model calls ``finish`` and the phase's check (if any) passes
(``pilot.agent.checks``), or at a limit, a loop or a full window (``pilot.agent.endings``,
``pilot.agent.window``). ARCHITECTURE.md says which events share a transaction.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from pilot import events as ev
from pilot.agent import call_modes
from pilot.agent import calls as call_rules
from pilot.agent.checks import PhaseChecks, workspace_changed
from pilot.agent.conclude import baseline_due, run_baseline
from pilot.agent.context import PromptCount, ServerCounts
from pilot.agent.cut import cut_reason, record_cut, refuse_pending
from pilot.agent.endings import (
    bounded_timeout,
    end_phase,
    limit_reason,
    stopped_by,
    success_reason,
    wall_left,
    wall_time_reason,
)
from pilot.agent.images import Materializer
from pilot.agent.media import image_fallback, place_images, request_messages
from pilot.agent.phase_start import phase_prompt
from pilot.agent.seams import (
    EventSink,
    Reading,
    StopRequested,
    Tactics,
    ToolExecutor,
    WorkspaceOps,
)
from pilot.agent.state import RunState
from pilot.agent.stopping import StopGuard
from pilot.agent.window import Window, estimated_usage
from pilot.errors import (
    BadRequest,
    ConfigurationError,
    ContextOverflow,
    ForcedCallsRefused,
    ServerToolsOff,
    ServerUnavailable,
)
from pilot.model.types import ChatRequest, ModelClient, ModelResponse, WaitEvent
from pilot.workflow.plan import Limits, PhasePlan, RunPlan

__all__ = ["AgentLoop"]

_T = TypeVar("_T")


class AgentLoop:
    """One run's agent loop: each ``advance()`` does the one next thing its folded state calls
    for, through the seams it is given (event sink, model client, tools, workspace, tactics)."""

    def __init__(
        self,
        plan: RunPlan,
        state: RunState,
        emit: EventSink,
        client: ModelClient,
        tools: ToolExecutor,
        workspace: WorkspaceOps,
        *,
        tactics: Tactics,
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
        self.tactics = tactics
        self.guard = StopGuard(stop or asyncio.Event())
        self.stop = self.guard.stop
        self.clock = clock
        self.media = Materializer()
        self.window = Window(
            plan,
            state,
            emit,
            client,
            tools,
            stoppable=self.stoppable,
            request_messages=self.request_messages,
            server_counts=server_counts,
        )
        self.checks = PhaseChecks(
            state,
            emit,
            tools,
            workspace,
            tactics,
            take_due_snapshot=self.take_due_snapshot,
            time_left=self.wall_left,
        )
        self._fitted: tuple[Any, Any, dict[str, dict[str, Any] | None]] | None = None
        """The last phase's tool names and schema list, and the schemas by name built of them."""
        self._text_mode: bool | None = None

    # -- the driver -----------------------------------------------------------------------

    async def run(self) -> RunState:
        """Advance until the run finishes or a stop is requested; returns the final state."""
        try:
            self.recover()
            while self.state.finished is None:
                if self.stop.is_set():
                    raise StopRequested
                await self.advance()
        except (StopRequested, ServerUnavailable, ConfigurationError) as exc:
            if self.state.finished is None:
                self.emit(stopped_by(exc))
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
            late = wall_time_reason(phase.limits, self.plan.limits, state, self.clock())
            if late is not None:
                refuse_pending(self.emit, state, late)
                return
            await self.answer_call(phase, state.pending_calls[0])
            return
        if self.limit_hit(self.plan.limits, scope="run"):
            return
        if state.phase is None:
            await self.start_phase(state.next_phase_index)
            return
        phase = self.plan.phases[state.phase.index]
        if baseline_due(state.phase, phase):
            await run_baseline(self.checks, phase)
            return
        if phase.check_after_edit and phase.check and state.phase.edited:
            await self.checks.check_edit(phase)
            return
        if phase.retry_fresh and state.phase.failed_try is not None:
            await self.checks.restart_try()
            return
        if state.phase.finish_called:
            await self.checks.close_phase(phase)
            return
        if state.phase.pending_verdict is not None:
            self.act_on_verdict()
            return
        if self.limit_hit(phase.limits, scope="phase"):
            return
        await self.ask_model(phase)

    async def start_phase(self, index: int) -> None:
        """Open phase ``index`` (its prompt built once, into its event), or end the run."""
        if index >= len(self.plan.phases):
            started = self.state.started
            base, now = (started.base_snapshot if started else None), self.state.snapshot
            unchanged = bool(base and now and not workspace_changed(self.workspace, base, now))
            self.emit(ev.RunFinished(status="succeeded", reason=success_reason(unchanged)))
            return
        phase = self.plan.phases[index]
        prompt, images = await phase_prompt(
            self.plan,
            index,
            self.state,
            self.tools,
            self.tactics,
            timeout=bounded_timeout(phase.check_timeout, self.wall_left(phase)),
        )
        self.emit(ev.PhaseStarted(index=index, name=phase.name, prompt=prompt, images=images))

    def act_on_verdict(self) -> None:
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
            end_phase(
                self.emit, self.state, "stuck", reason=f"stuck: {verdict.detail or verdict.message}"
            )

    def limit_hit(self, limits: Limits, *, scope: str) -> bool:
        """Whether the run or its phase is at one of ``limits``: then it is ended, here."""
        reason = limit_reason(limits, self.state, self.clock(), scope=scope)
        if reason is None:
            return False
        if self.state.phase is not None:
            end_phase(self.emit, self.state, "limit", reason=reason)
        else:
            self.emit(ev.RunFinished(status="limit", reason=reason))
        return True

    # -- the model ------------------------------------------------------------------------

    async def ask_model(self, phase: PhasePlan) -> None:
        """One request: counted into the window (compacting first when it does not fit),
        recorded as ``model_request``, and its answer recorded."""
        state, window = self.state, self.window
        model = state.model or self.plan.model.name
        setting = self.plan.model.tool_calls
        for choice in call_modes.due_choices(state.call_book, model, setting):
            self.emit(choice, commit=False)
        asking = call_modes.ask(state.call_book, model, setting, phase.tools)
        shaped = call_modes.shape_request(
            state.messages,
            self.tools.schemas(phase.tools) or None,
            asking,
            self.tactics,
            text_mode=self.text_mode(),
            as_sent=self.request_messages,
        )
        messages, tools = shaped.messages, shaped.tools
        count: PromptCount | None = None
        max_tokens = self.plan.model.max_tokens
        budget = window.budget()
        if budget is not None:
            count = await window.fits_without_counting(budget, model, messages, tools)
            if count is not None:
                max_tokens = budget.max_tokens_wanted
        if budget is not None and count is None:
            count = await window.count(model, messages, tools)
            if budget.needs_compaction(count.total):
                await window.compact(phase, budget, count, reason="threshold")
                return
            try:
                max_tokens = budget.request_max_tokens(count.total)
            except ContextOverflow:
                await window.compact(phase, budget, count, reason="no_room")
                return
        step = state.steps + 1
        sampling = self.plan.model.sampling
        temperature = self.temperature(sampling.get("temperature"))
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
            tool_choice=shaped.tool_choice,
            **sampling,
            max_tokens=max_tokens,
            extra_body=self.plan.model.extra_body,
        )
        try:
            response = await self.call_model(request)
        except ContextOverflow as exc:
            if budget is not None and (count is None or count.bounded):
                count = await window.token_counter(model).count(messages, tools)
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
            await window.compact(phase, budget, count, reason="overflow", harder=harder)
            return
        except BadRequest as exc:
            fallback = image_fallback(exc, state)
            if fallback is None:
                if self.forcing_refused(request, setting, model, exc):
                    return
                raise
            self.emit(fallback)
            return
        except ForcedCallsRefused as exc:
            if self.forcing_refused(request, setting, model, exc):
                return
            raise
        except ServerToolsOff as exc:
            if setting != "auto" or not request.tools:
                raise
            # The server cannot parse calls: the model writes them as text, which the pilot
            # reads (forcing is left to be tried: a server with a parser but without
            # --enable-auto-tool-choice still forces).
            for choice in call_modes.server_without_tools(
                model, self.endpoint(), str(exc)[:300], self.state.call_book
            ):
                self.emit(choice)
            return
        if response.usage is None:
            response = response.model_copy(
                update={"usage": estimated_usage(messages, tools, count, response)}
            )
        self.record_response(step, phase, response, max_tokens, asking)

    def forcing_refused(
        self, request: ChatRequest, setting: str, model: str, exc: Exception
    ) -> bool:
        """A forced request the server refused, under ``auto``: forcing stops for the model
        (recorded, with why) and the answer is asked again unforced. A pinned ``forced``
        keeps the error: the workflow asked for it."""
        if setting != "auto" or not call_modes.is_forced(request.tool_choice):
            return False
        self.emit(
            call_modes.forcing_refused(model, self.endpoint(), str(exc)[:300], self.state.call_book)
        )
        return True

    def endpoint(self) -> str:
        """The server this run talks to now (the one it stuck to, or the workflow's)."""
        return self.state.endpoint or self.plan.model.endpoint

    def wall_left(self, phase: PhasePlan | None = None) -> float | None:
        """Seconds the run's and the current (or given) phase's wall-time limits leave."""
        if phase is None and self.state.phase is not None:
            phase = self.plan.phases[self.state.phase.index]
        return wall_left(
            phase.limits if phase is not None else None, self.plan.limits, self.state, self.clock()
        )

    def temperature(self, base: float | None) -> float | None:
        """The request's temperature: the workflow's own (None), unless the model repeats
        itself or tries the phase afresh, when the tactics say how hot."""
        progress = self.state.phase
        repeats = progress.tracker.repeats if progress else 0
        if progress is not None and progress.restarts:
            # A fresh try of the same prompt: each one sampled hotter than the last.
            repeats = max(repeats, progress.restarts + 1)
        if repeats < 2:
            return None
        return self.tactics.temperature(base, repeats)

    async def call_model(self, request: ChatRequest) -> ModelResponse:
        async def on_wait(wait: WaitEvent) -> None:
            self.emit(ev.from_wait(wait))

        return await self.stoppable(self.client.complete(request, on_wait=on_wait))

    async def stoppable(self, awaitable: Awaitable[_T]) -> _T:
        """Await ``awaitable``, raising ``StopRequested`` the moment a stop is asked for."""
        return await self.guard.stoppable(awaitable)

    def release_stop_waiter(self) -> None:
        self.guard.release()

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

    def read_calls(
        self,
        step: int,
        phase: PhasePlan,
        response: ModelResponse,
        schemas: dict[str, dict[str, Any] | None],
    ) -> Reading:
        """The answer's calls: a plain answer past one check, else as the tactics read it."""
        plain = self.tactics.plain_calls(response, schemas)
        if plain is not None:
            return Reading(call_rules.plain_calls(step, response, plain), response.content)
        reading = self.tactics.read_answer(step, response, schemas, phase.prompt, self.tools.known)
        if reading.from_text:
            self._text_mode = True
        return reading

    def record_response(
        self,
        step: int,
        phase: PhasePlan,
        response: ModelResponse,
        max_tokens: int | None = None,
        asking: call_modes.Ask | None = None,
    ) -> None:
        """Record the answer with its calls; an answer without one is answered (nudge,
        question) as the tactics say. A plain answer is read here, past one check; a cut one
        is recorded as sent and none of it runs. Each answer records how its calls came."""
        cut = cut_reason(response.finish_reason, response.usage, max_tokens)
        if cut is not None:
            record_cut(self.emit, step, response, cut, max_tokens)
            return
        schemas = self.phase_schemas(phase)
        reading = self.asked_code(step, response)
        if reading is None:
            reading = self.read_calls(step, phase, response, schemas)
        calls = reading.calls
        message = call_rules.answer_message(step, response, calls, reading.content, reading.repairs)
        if asking is not None:
            message = message.model_copy(update=call_modes.answer_fields(reading, asking))
        # With calls, it waits for the first transaction its calls need: a mutating call's
        # tool_started, or the next step's model_request when every call is read-only.
        self.emit(message, commit=not calls)
        if calls:
            return
        progress = self.state.phase
        reply = self.tactics.no_call_turn(
            step,
            reading.content,
            reading,
            schemas,
            empties=progress.tracker.consecutive_empty if progress else 1,
            previous=self.last_nudge(),
            prompt=self.started_prompt(phase),
        )
        if reply is not None:
            self.emit(reply)

    def asked_code(self, step: int, response: ModelResponse) -> Reading | None:
        """The code a call came without, asked for (``code_asked``): the answer's one fenced
        block, taken as that argument of that call. None: nothing asked, or the answer gave no
        single block (then it is read as any answer)."""
        asked = self.state.call_book.get("code_asked")
        if not asked or response.tool_calls or not response.content:
            return None
        found = self.tactics.code_block(response.content)
        if found is None:
            return None
        code, remaining = found
        code = call_modes.block_argument(asked["name"], code)
        arguments = {**json.loads(asked["arguments"]), asked["argument"]: code}
        call = ev.ToolCall(
            id=call_rules.new_call_id(step, 0),
            name=asked["name"],
            arguments=json.dumps(arguments, ensure_ascii=False),
        )
        repair = f"{asked['name']}: `{asked['argument']}` taken from the fenced block asked for"
        return Reading([call], remaining or None, [repair], code_blocks={call.id})

    def started_prompt(self, phase: PhasePlan) -> str:
        """The phase's prompt as it started (its ``context:`` output and located code in it),
        for feedback built from the workspace's own paths and lines."""
        progress, messages = self.state.phase, self.state.messages
        if progress is not None and progress.message_index < len(messages):
            content = messages[progress.message_index].get("content")
            if isinstance(content, str):
                return content
        return phase.prompt

    def text_mode(self) -> bool:
        """Whether the model writes its calls as text (any call so far was recovered from
        text): its history is then sent back as text. Asked of the tactics once per process
        (on a resume), then kept up to date by ``record_response``."""
        if self._text_mode is None:
            messages = self.state.messages
            answered = any(m.get("role") == "assistant" for m in messages)
            self._text_mode = answered and self.tactics.writes_calls_as_text(messages)
        return self._text_mode

    def last_nudge(self) -> str | None:
        """The text of the last message the harness added as the user, if it was the last."""
        for message in reversed(self.state.messages[-4:]):
            if message.get("role") == "user":
                content = message.get("content")
                return content if isinstance(content, str) else None
        return None

    def request_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages as sent: image placeholders replaced by their URLs."""
        return request_messages(self.state, messages, self.media)

    # -- tools ----------------------------------------------------------------------------

    async def answer_call(self, phase: PhasePlan, call: ev.ToolCall) -> None:
        """Run one pending call (or answer it with an error without running it, or ask for
        the code it came without)."""
        failed_before = call_rules.failed_in_this_answer(self.state.messages)
        refusal = call_rules.refusal(
            call,
            phase,
            self.tools,
            answer_cut=self.state.answer_cut,
            failed_before=failed_before,
        )
        asked = self.state.call_book.get("code_asked")
        if asked and self.state.answer_cut is None:
            refusal = (
                f"Error: not run: the code of {asked['name']} was asked for first (above); "
                "one call per answer."
            )
        elif (
            failed_before is None
            and self.state.answer_cut is None
            and call.name in phase.tools
            and self.ask_for_code(call)
        ):
            return
        if refusal is not None:
            # Nothing ran: lost to a kill, the same refusal is given again on resume.
            self.emit(
                ev.ToolFinished(
                    call_id=call.id, name=call.name, output=refusal, is_error=True, executed=False
                ),
                commit=False,
            )
            return
        arguments = json.loads(call.arguments)
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
        left = self.wall_left()
        if self.tools.blocks(call.name):
            finished = await asyncio.to_thread(
                self.tools.invoke, call.name, arguments, call.id, left
            )
        else:
            finished = self.tools.invoke(call.name, arguments, call.id, left)
        finished = call_rules.fit_result(
            finished, call.id, self.state.max_model_len, self.tools, arguments
        )
        finished = place_images(finished, self.state, self.plan.media)
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

    def ask_for_code(self, call: ev.ToolCall) -> bool:
        """A code-carrying call that came without its code (or, where the model's code
        travels as blocks, with code that does not parse) is not run: it is answered with a
        request for the code as one fenced block, and the next answer's block is taken as it
        (``asked_code``). Whether it was."""
        model = self.state.model or self.plan.model.name
        item = self.state.call_book.get("models", {}).get(model) or {}
        argument = call_modes.needs_code(call, item.get("code") == "block")
        found = call_modes.code_of(call)
        if argument is None or found is None:
            return False
        others = {k: v for k, v in found[2].items() if k != argument}
        text = json.dumps(others, ensure_ascii=False)
        self.emit(
            ev.CodeAsked(call_id=call.id, name=call.name, arguments=text, argument=argument),
            commit=False,
        )
        self.emit(
            ev.ToolFinished(
                call_id=call.id,
                name=call.name,
                output=call_modes.code_request(call.name, argument, others),
                executed=False,
            ),
            commit=False,
        )
        return True

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
