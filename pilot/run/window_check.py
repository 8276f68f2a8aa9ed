"""The run's first check against its server: does every phase's first request fit the window?

A window below what the workflow needs is refused when the run resolves its model, with the
server's own fix (``pilot.model.window_fit``), never discovered mid-run.
"""

from __future__ import annotations

from pilot.model.types import ModelClient, ServedModel
from pilot.model.window_fit import Schemas, check_window_fits, window_need
from pilot.workflow.plan import RunPlan


async def refuse_small_window(
    client: ModelClient, served: ServedModel, plan: RunPlan, schemas: Schemas
) -> None:
    """The run's check at its start: ``served`` (with the window the run budgets with) against
    every phase of ``plan``; raises :class:`ConfigurationError` with the fix when one cannot
    fit. The margin is the loop's (``model.context_margin``, at most an eighth of the window)."""
    window = served.max_model_len
    if window is None:
        return
    model = plan.model
    need = await window_need(
        client,
        served.id,
        plan.system,
        [(phase.name, phase.prompt, phase.tools) for phase in plan.phases],
        schemas,
        model.max_tokens,
        min(model.context_margin, window // 8),
    )
    check_window_fits(served, window, need, model.endpoint)
