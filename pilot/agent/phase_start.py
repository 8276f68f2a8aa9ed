"""A phase's opening prompt: its header and text, its images, its ``context:`` commands' output
and the code the tactics show for it.

All of it is written into the phase's ``phase_started`` event, so a resumed run sees the very
same prompt (nothing here runs again once that event is stored).
"""

from __future__ import annotations

import asyncio

from pilot.agent.images import PHASE_IMAGE_TOOL, ImageRef, choose_transport
from pilot.agent.media import vision_refusal
from pilot.agent.seams import CheckOutcome, Tactics, ToolExecutor
from pilot.agent.state import RunState
from pilot.workflow.plan import PhasePlan, RunPlan

CONTEXT_OUTPUT_CHARS = 2000
"""How much of a ``context:`` command's output opens a phase (its end): room for a test run's
failures without filling a small model's window."""


def output_end(output: str) -> str:
    """A command's output for the prompt: its end, where a test run's summary and last failure
    are, when it is longer than ``CONTEXT_OUTPUT_CHARS``."""
    if len(output) <= CONTEXT_OUTPUT_CHARS:
        return output
    return "[... start cut ...]\n" + output[-CONTEXT_OUTPUT_CHARS:]


async def phase_prompt(
    plan: RunPlan,
    index: int,
    state: RunState,
    tools: ToolExecutor,
    tactics: Tactics,
    *,
    timeout: float | None = None,
) -> tuple[str, list[ImageRef]]:
    """The prompt phase ``index`` opens with, and the images attached to it; ``timeout``:
    each context command's (the phase's ``check_timeout`` cut to the wall time left)."""
    phase = plan.phases[index]
    prompt = f"{plan.phase_header(index)}\n\n{phase.prompt}"
    images, notes = await phase_images(plan, index, state, tools)
    notes += await phase_context(index, phase, tools, tactics, timeout=timeout)
    return "\n\n".join([prompt, *notes]), images


async def phase_context(
    index: int,
    phase: PhasePlan,
    tools: ToolExecutor,
    tactics: Tactics,
    *,
    timeout: float | None = None,
) -> list[str]:
    """The phase's ``context:`` commands, run now; each one's status and output (its end:
    a test run's summary and last failure are there) as a section of the prompt."""
    sections = []
    outputs = []
    for k, command in enumerate(phase.context):
        outcome = await asyncio.to_thread(
            tools.run_check, command, timeout or phase.check_timeout, f"phase-{index}-context-{k}"
        )
        status = "timed out" if outcome.timed_out else f"exit code {outcome.exit_code}"
        output = outcome.output.strip() or "(no output)"
        outputs.append(output)
        sections.append(f"`{command}` ({status}):\n{output_end(output)}")
    last: list[str] = []
    if phase.locate:

        async def run(command: str, timeout: float, call_id: str) -> CheckOutcome:
            return await asyncio.to_thread(
                tools.run_check, command, timeout, f"phase-{index}-{call_id}"
            )

        located, last = await tactics.code_to_show(
            "\n".join(outputs), phase.prompt, phase.tools, run
        )
        sections += located
    if sections:  # the task again, last: a small model follows what it read last
        sections.append(f"Your task (as above): {phase.prompt.strip()}")
    return sections + last


async def phase_images(
    plan: RunPlan, index: int, state: RunState, tools: ToolExecutor
) -> tuple[list[ImageRef], list[str]]:
    """The phase's ``images:``, loaded like view_image calls; a problem becomes a note in
    the prompt (the phase still starts)."""
    images: list[ImageRef] = []
    notes: list[str] = []
    reason = vision_refusal(state, plan.media)
    for k, path in enumerate(plan.phases[index].images):
        if reason is not None:
            notes.append(f"[image {path} not attached: {reason}]")
            continue
        if not tools.known(PHASE_IMAGE_TOOL):
            notes.append(f"[image {path} not attached: no {PHASE_IMAGE_TOOL} tool]")
            continue
        finished = await asyncio.to_thread(
            tools.invoke, PHASE_IMAGE_TOOL, {"path": path}, f"phase-{index}-image-{k}"
        )
        if finished.is_error or not finished.images:
            why = finished.output.removeprefix("Error: ") or "no image"
            notes.append(f"[image {path} not attached: {why}]")
            continue
        images += [choose_transport(ref, plan.media) for ref in finished.images]
    return images, notes
