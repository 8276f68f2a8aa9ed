"""The pilot's tactics, as the agent loop asks for them (``pilot.agent.seams.Tactics``).

One object answering each question with the modules of this wing: arguments repaired
(``arguments``), calls written as text read (``dialects``), calls fitted to the tools'
schemas (``fitting``), what to say to a turn with no call (``feedback``), the history of a
model that writes its calls as text (``text_turns``), the code a failing test points at
(``locate``). It holds no state: every answer comes from what it is asked with.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from typing import Any

from pilot import events as ev
from pilot.agent.call_modes import block_argument
from pilot.agent.calls import new_call_id
from pilot.agent.phase_start import output_end
from pilot.agent.seams import CheckOutcome, Reading, RunCommand, Schemas
from pilot.model.types import ModelResponse
from pilot.tactics import code_blocks, feedback, locate, text_turns
from pilot.tactics.arguments import repair_arguments
from pilot.tactics.code_blocks import call_syntax as code_blocks_text
from pilot.tactics.dialects import (
    DEFINITION_TOOL,
    addition_target,
    definition_target,
    extract_text_tool_calls,
)
from pilot.tactics.fitting import fit_arguments, resolve_tool_name


class SmallModelTactics:
    """The tactics for models that do not call tools cleanly (see the module)."""

    def __init__(self) -> None:
        self._located: dict[str, str] = {}
        """Phase prompt -> the located code shown with it: where a method that several
        classes define was shown, for a Python block that rewrites it (not kept over a
        resume: there the tool's refusal lists the qualified names)."""

    def plain_calls(self, response: ModelResponse, schemas: Schemas) -> list[dict] | None:
        if not response.tool_calls:
            return None
        out = []
        for call in response.tool_calls:
            if call.name not in schemas:
                return None
            fixed = repair_arguments(call.arguments)
            if fixed.arguments is None or fixed.repairs:
                return None
            fit = fit_arguments(call.name, fixed.arguments, schemas[call.name])
            if fit.arguments is None or fit.repairs:
                return None
            out.append(fit.arguments)
        return out

    def read_answer(
        self,
        step: int,
        response: ModelResponse,
        schemas: Schemas,
        prompt: str,
        known: Callable[[str], bool],
    ) -> Reading:
        repairs: list[str] = []
        calls: list[ev.ToolCall] = []
        content = response.content
        blocks: set[str] = set()
        schemas = code_blocks.relaxed(schemas)  # code may come as a block, or be asked for
        for position, call in enumerate(response.tool_calls):
            name, renamed = call.name, None
            if name not in schemas and not known(name):
                resolved, renamed = resolve_tool_name(name, list(schemas))
                name = resolved or name
            fixed = repair_arguments(call.arguments)
            text = "{}"
            error = fixed.error if fixed.arguments is None else None
            call_id = call.id or new_call_id(step, position)
            missing = code_blocks.lacks_code(name, fixed.arguments)
            found_block = code_blocks.code_block(content or "") if missing else None
            if missing and found_block is not None and fixed.arguments is not None:
                fixed.arguments[missing] = block_argument(name, found_block[0])
                content = found_block[1] or None
                blocks.add(call_id)
                repairs.append(f"{name}: `{missing}` taken from the answer's fenced block")
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
                    id=call_id,
                    name=name,
                    arguments=text,
                    raw_arguments=None if text == call.arguments else call.arguments,
                    error=error,
                )
            )
        reading = Reading(calls, content, repairs, code_blocks=blocks)
        if calls or not content:
            return reading
        found = extract_text_tool_calls(content, schemas)
        reading.seen = found
        if not found.calls:
            return reading
        remaining = found.remaining_content
        for position, (name, arguments) in enumerate(found.calls):
            call_id = text_turns.text_call_id(step, position)
            if name == DEFINITION_TOOL and not {"path", "qualified_name"} & arguments.keys():
                # which of several same-named methods: the qualified name, or where located
                code = str(arguments.get("code", ""))
                shown = f"{prompt}\n{self._located.get(prompt, '')}"
                arguments = {**definition_target(code, content, shown), **arguments}
            if name == DEFINITION_TOOL and "path" not in arguments:
                target = addition_target(arguments.get("code", ""), prompt)
                if target is not None:
                    arguments = {**arguments, "add_to": target}
            missing = code_blocks.lacks_code(name, arguments)
            found_block = code_blocks.code_block(remaining) if missing else None
            if missing and found_block is not None:
                arguments = {**arguments, missing: block_argument(name, found_block[0])}
                remaining = found_block[1]
                repairs.append(f"{name}: `{missing}` taken from the answer's fenced block")
                blocks.add(call_id)
            elif any("fenced Python block" in r for r in found.repairs):
                blocks.add(call_id)  # the block itself was taken as the call
            calls.append(
                ev.ToolCall(
                    id=call_id,
                    name=name,
                    arguments=json.dumps(arguments, ensure_ascii=False),
                    raw_arguments=content,
                )
            )
        repairs.extend(found.repairs or ["tool call written as text in content"])
        reading.content = remaining or None
        reading.from_text = True
        return reading

    def no_call_turn(
        self,
        step: int,
        content: str | None,
        reading: Reading,
        schemas: Schemas,
        *,
        empties: int,
        previous: str | None,
        prompt: str,
    ) -> ev.Nudge | ev.Question | None:
        if not (content or "").strip():
            if feedback.empty_turn_action(empties) == "nudge":
                return ev.Nudge(reason="empty_turn", text=feedback.NUDGE_EMPTY)
            return None  # "retry": asked again as is; past that, the tracker counts no progress
        question = feedback.detect_question(content or "")
        if question is not None:
            return ev.Question(step=step, text=question, reply=feedback.QUESTION_REPLY)
        seen = reading.seen or extract_text_tool_calls(content or "", schemas)
        text = feedback.no_call_feedback(
            seen,
            schemas,
            previous=previous,
            content=content or "",
            path=feedback.example_path(prompt),
            values=feedback.example_values(prompt),
        )
        return ev.Nudge(reason="no_tool_call", text=text)

    def writes_calls_as_text(self, messages: list[dict[str, Any]]) -> bool:
        return text_turns.has_text_calls(messages)

    def as_text_turns(
        self, messages: list[dict[str, Any]], *, every: bool = False
    ) -> list[dict[str, Any]]:
        return text_turns.as_text_turns(messages, every=every)

    def call_syntax(self, schemas: list[dict[str, Any]], *, text: bool, code_blocks: bool) -> str:
        return code_blocks_text(schemas, text=text, code_blocks=code_blocks)

    def code_block(self, content: str) -> tuple[str, str] | None:
        return code_blocks.code_block(content)

    def temperature(self, base: float | None, repeats: int) -> float | None:
        return feedback.hotter(base, repeats)

    async def code_to_show(
        self, output: str, prompt: str, tools: list[str], run: RunCommand
    ) -> tuple[list[str], list[str]]:
        """The source of the definitions the phase's prompt names, then of the functions the
        failures in ``output`` call (``locate``; those the prompt mentions when it mentions
        any); and what to say after the task."""
        sections = []
        shown_lines = 0
        docs_asked = locate.about_docs(prompt) or locate.about_docs(output)
        named = locate.prompt_names(prompt)
        failing = locate.focus(locate.failing_names(output), prompt)
        bare = {n.rpartition(".")[2] for n in named}
        names = (named + [n for n in failing if n not in bare])[: locate.MAX_SEARCHES]
        for k, name in enumerate(names):
            if len(sections) == locate.MAX_NAMES:
                break  # a name the workspace does not define (`__all__`) takes no place
            cls, _, short = name.rpartition(".")
            if cls:
                found = await run(locate.method_search(cls, short), 60, f"locate-{k}")
                hit = locate.method_hit(found.output, cls, short)
            else:
                found = await run(locate.definition_search(name), 60, f"locate-{k}")
                hit = locate.frame_hit(output, found.output)
                method = locate.called_as_method(output, name)
                if hit is None and method and locate.methods_found(found.output) > 1:
                    # Several classes define it and no frame ran in one: the prompt's class
                    # decides, or nothing is shown (FIFOCache.popitem, shown for a failure in
                    # an LRUCache, drew an edit of FIFOCache's).
                    for owner in locate.prompt_classes(named):
                        found = await run(locate.method_search(owner, name), 60, f"locate-{k}")
                        hit = locate.method_hit(found.output, owner, name)
                        if hit is not None:
                            name = f"{owner}.{name}"
                            break
                    if hit is None:
                        continue
                hit = hit or locate.first_hit(found.output, method=method)
            if hit is None:
                continue
            path, line = hit
            shown = await run(
                f"sed -n '{line},{line + locate.MAX_LINES}p' {shlex.quote(path)}", 60, f"show-{k}"
            )
            block = locate.definition_block(shown.output)
            left_out = 0
            if not docs_asked:
                block, left_out = locate.without_long_docstring(block)
            size = len(block.splitlines())
            if not block or (sections and shown_lines + size > locate.TOTAL_LINES):
                continue  # the first is shown whole; a later one only where it fits
            shown_lines += size
            notes = [f"its first {size} lines"] if size >= locate.MAX_LINES else []
            if left_out:
                notes.append(
                    f"its docstring of {left_out} lines not shown: a rewrite without a "
                    "docstring keeps it"
                )
            header = locate.located_header(name, path, line, notes)
            sections.append(f"{header}\n```python\n{block}\n```")
        self._located[prompt] = "\n".join(sections)
        last = []
        if sections and DEFINITION_TOOL in tools:
            # Shown a function, a small model fixes it by rewriting it whole; told so last,
            # it answers with that rewrite (replace_definition takes the block as its call).
            last.append(
                "To change a function shown above, answer with the whole corrected function "
                "in one ```python block."
            )
        return sections, last

    def after_edit_feedback(self, command: str, outcome: CheckOutcome) -> str:
        status = "timed out" if outcome.timed_out else f"exit code {outcome.exit_code}"
        return (
            f"After that edit, the check `{command}` still fails ({status}); it runs "
            f"again after each edit.\n\n{output_end(outcome.output.strip())}"
        )
