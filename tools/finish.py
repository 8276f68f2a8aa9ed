"""The finish tool: the agent's way to say the current phase is done.

It only acknowledges; the loop decides what follows (a check command, the next phase, or the
end of the run). Must not import ``pilot`` or ``brain``.
"""

from __future__ import annotations

from pydantic import Field

from tools.base import ToolArgs, ToolContext, ToolError, ToolResult


class FinishArgs(ToolArgs):
    summary: str = Field(description="What you did and how you checked it, in a few sentences.")


class Finish:
    """Acknowledge that the agent considers the phase done."""

    name = "finish"
    description = (
        "Call this when the current task is complete, with a short summary of what you did "
        "and how you verified it. Do not call it while work or failing checks remain."
    )
    args_model = FinishArgs
    mutates = False
    blocks = False  # checks its argument and answers: no I/O

    def run(self, args: FinishArgs, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        if not args.summary.strip():
            raise ToolError("the summary is empty; say in a few sentences what you did.")
        return ToolResult.ok(
            "Finish recorded. The harness will check the work and say what follows."
        )
