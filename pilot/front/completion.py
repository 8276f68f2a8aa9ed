"""Shell completion of the pilot's values: run ids (from the store the command would open) and
the fixed choices of ``--format`` and ``--durability``.

Completion runs on every Tab press, so a function here never raises and never creates a store:
a missing or broken database completes to nothing, and the shell falls back to file names.
"""

from __future__ import annotations

import typer

RUN_ID_HELP = "Run id (any unambiguous prefix)."
RUN_COMPLETION_LIMIT = 500
"""The newest runs offered; an older one is still named by typing its prefix."""


def complete_run_id(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """The run ids starting with ``incomplete``, newest first, each with its workflow and
    status; read from the ``--db`` given on the line so far (else MARATHON_DB, else the
    default store), which is opened read-only and never created."""
    try:
        from pilot.store.opening import open_store

        store = open_store(ctx.params.get("db"), create=False)
        records = store.list_runs(limit=RUN_COMPLETION_LIMIT)
    except Exception:  # completion must never print a traceback into the user's shell
        return []
    return [(r.id, f"{r.workflow_name} {r.status}") for r in records if r.id.startswith(incomplete)]


def run_id_argument(default: object = ..., *, help: str = RUN_ID_HELP) -> typer.models.ArgumentInfo:
    """The RUN_ID argument every command that names a run takes, with its completion."""
    return typer.Argument(
        default, help=help, metavar="RUN_ID", autocompletion=complete_run_id, show_default=False
    )
