"""``pilot report`` and ``pilot gc``: thin commands over the report and ``store.retention``.

``register(app)`` adds both to the ``pilot`` typer app; the work is imported lazily inside each
command so ``pilot --help`` stays fast. Their arguments' durations and dates (``--since``,
``--older-than``) are read here.
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

import typer
from rich.console import Console

from pilot.front.completion import run_id_argument

if TYPE_CHECKING:
    from pilot.report.facts import Report

_DB_HELP = (
    "SQLAlchemy URL of the store (default: SQLite in the state directory, $MARATHON_HOME or "
    "~/.local/state/marathon)."
)


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or combinations (``1d12h``) -> timedelta."""
    parts = re.fullmatch(r"\s*((?:\d+(?:\.\d+)?\s*[wdhms]\s*)+)", text.lower())
    if not parts:
        raise ValueError(f"cannot read the duration {text!r}; write it like 30d, 12h, 90m or 1d12h")
    units = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
    seconds = sum(
        float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)\s*([wdhms])", text.lower())
    )
    return timedelta(seconds=seconds)


def parse_since(text: str, *, now: datetime | None = None) -> datetime:
    """A duration back from now (``12h``) or an ISO date/time (local time when no zone)."""
    try:
        return (now or datetime.now(UTC)) - parse_age(text)
    except ValueError:
        pass
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"cannot read --since {text!r}; give a duration (12h, 2d) or a date/time "
            "(2025-06-01 or 2025-06-01T20:00)"
        ) from None
    return value if value.tzinfo else value.astimezone()


ReportFormat = Literal["md", "html", "json"]
REPORT_FORMATS: tuple[str, ...] = get_args(ReportFormat)


def render(report: Report, fmt: str) -> str:
    """The report as ``md`` (Markdown), ``html`` (one self-contained page) or ``json`` (the
    versioned document of ``pilot.report.json_report``)."""
    if fmt == "md":
        from pilot.report.markdown import render_markdown

        return render_markdown(report)
    if fmt == "html":
        from pilot.report.html import render_html

        return render_html(report)
    if fmt == "json":
        from pilot.report.json_report import render_json

        return render_json(report)
    raise ValueError(f"unknown report format {fmt!r}; use md, html or json")


def _fail(message: str, code: int = 2) -> typer.Exit:
    from pilot.front.cli_errors import fail

    return fail(message, code)


def register(app: typer.Typer) -> None:
    """Add ``report`` and ``gc`` to ``app``."""

    @app.command()
    def report(
        run_id: str | None = run_id_argument(None),
        since: str | None = typer.Option(
            None, "--since", help="Every run active in this window: 12h, 2d, or a date/time."
        ),
        fmt: ReportFormat = typer.Option(
            "md",
            "--format",
            help="md (Markdown), html (one page) or json (a versioned document).",
        ),
        json_out: bool = typer.Option(False, "--json", help="The same as --format json."),
        output: Path | None = typer.Option(
            None, "--output", "-o", help="Write the report to this file instead of stdout."
        ),
        db: str | None = typer.Option(None, "--db", envvar="MARATHON_DB", help=_DB_HELP),
    ) -> None:
        """The morning report: outcomes, checks, tests, commits, server trouble, what to do next.

        Built only from the recorded events and git, never from the model's own account.
        """
        from pilot.errors import MarathonError
        from pilot.report.build import build_report
        from pilot.store.opening import open_store

        if json_out:
            fmt = "json"
        if (run_id is None) == (since is None):
            raise _fail("give either a RUN id or --since (e.g. --since 12h)")
        try:
            window = parse_since(since) if since is not None else None
            store = open_store(db, create=False)
            if window is not None:
                data = build_report(store, since=window)
            else:
                data = build_report(store, [run_id or ""])
            text = render(data, fmt)
        except (MarathonError, ValueError) as exc:
            raise _fail(str(exc)) from None
        if output is None:
            sys.stdout.write(text)
        else:
            output.write_text(text, encoding="utf-8")
            Console(stderr=True, highlight=False).print(f"wrote {output} ({len(data.runs)} run(s))")

    @app.command()
    def gc(
        older_than: str = typer.Option(
            ..., "--older-than", help="Remove finished runs last updated longer ago: 30d, 12h."
        ),
        keep_failed: bool = typer.Option(False, "--keep-failed", help="Keep failed runs."),
        include_paused: bool = typer.Option(
            False, "--include-paused", help="Also remove old paused runs (they cannot resume)."
        ),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Say what would be removed; change nothing."
        ),
        delete_branches: bool = typer.Option(
            False, "--delete-branches", help="Also delete the removed runs' branches."
        ),
        db: str | None = typer.Option(None, "--db", envvar="MARATHON_DB", help=_DB_HELP),
    ) -> None:
        """Remove old finished runs: events, artifacts, worktrees, snapshot refs (branches
        with --delete-branches); then vacuum the store."""
        from pilot.store.opening import open_store
        from pilot.store.retention import describe
        from pilot.store.retention import gc as collect

        try:
            age = parse_age(older_than)
        except ValueError as exc:
            raise _fail(str(exc)) from None
        result = collect(
            open_store(db, create=False),
            age,
            keep_failed=keep_failed,
            include_paused=include_paused,
            dry_run=dry_run,
            delete_branches=delete_branches,
        )
        for line in describe(result):
            typer.echo(line)
