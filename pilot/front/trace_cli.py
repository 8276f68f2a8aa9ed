"""``pilot trace``: a stored run as an OpenTelemetry trace, to a file or an endpoint.

``register(app)`` adds the command to the ``pilot`` app; the store, the spans and the SDK are
imported inside it, so ``pilot --help`` loads none of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from pilot.front.completion import run_id_argument

_DB_HELP = (
    "SQLAlchemy URL of the store (default: SQLite in the state directory, $MARATHON_HOME or "
    "~/.local/state/marathon)."
)


def register(app: typer.Typer) -> None:
    """Add ``trace`` to ``app``."""

    @app.command()
    def trace(
        run_id: str = run_id_argument(),
        out: Path | None = typer.Option(
            None,
            "--out",
            "-o",
            help="Write OTLP JSON lines to this file (default: RUN_ID.otlp.jsonl here); "
            "- writes them to stdout.",
        ),
        endpoint: str | None = typer.Option(
            None,
            "--endpoint",
            "--otlp",
            metavar="URL",
            help="Send the trace to this OTLP/HTTP receiver instead (e.g. "
            "http://127.0.0.1:4318). Nothing is sent anywhere unless you name it.",
        ),
        timeout: float = typer.Option(
            10.0, "--timeout", min=0.1, help="Seconds to wait for the endpoint to answer."
        ),
        db: str | None = typer.Option(None, "--db", envvar="MARATHON_DB", help=_DB_HELP),
    ) -> None:
        """Export a run as an OpenTelemetry trace: the run, its phases, model requests, tool
        calls and checks as spans with the GenAI semantic conventions' attributes.

        Built from the stored events only: a finished run exports the same trace every time,
        and a resumed one keeps the spans it had. Needs the extra: pip install
        'marathon\\[otel]'.
        """
        from rich.console import Console

        from pilot.errors import ConfigurationError
        from pilot.store.opening import open_store
        from pilot.store.queries import stored_events
        from pilot.trace import otlp
        from pilot.trace.spans import build_trace

        if out is not None and endpoint is not None:
            raise ConfigurationError("give --out FILE or --endpoint URL, not both")
        url = otlp.traces_url(endpoint) if endpoint is not None else None
        otlp.require_sdk()
        store = open_store(db, create=False)
        record = store.find_run(run_id)
        spans = build_trace(record.id, record.workflow_name, stored_events(store, record.id))
        if not spans.spans:
            raise ConfigurationError(
                f"run {record.id} has no events yet: there is nothing to trace"
            )
        notes = Console(stderr=True, highlight=False, soft_wrap=True)
        said = f"{len(spans.spans)} spans, trace id {spans.trace_id}"
        if url is not None:
            otlp.send(spans, url, timeout=timeout)
            notes.print(f"sent {said} to {url}")
        elif out is not None and str(out) == "-":
            otlp.write_json_lines(spans, sys.stdout)
        else:
            path = out or Path(f"{record.id}.otlp.jsonl")
            with path.open("w", encoding="utf-8") as stream:
                otlp.write_json_lines(spans, stream)
            notes.print(f"wrote {path} ({said})")
