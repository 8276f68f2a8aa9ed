"""Running a bench and writing its report: shared by ``brain bench`` and ``brain bench --replay``.

Both benches end the same way (print the report, write the JSON, Markdown and plot asked for,
exit 1 when no request succeeded); this module is that one ending, so the two CLIs differ only
in their options and their report's module.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from brain.bench.models import BenchError

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def bad_options(message: str) -> NoReturn:
    """Say what is wrong with the options and exit 2 (usage), before anything is sent."""
    err.print(f"[red]brain bench:[/red] {escape(message)}", soft_wrap=True)
    raise typer.Exit(2)


def run_and_report(
    run: Callable[[Callable[[str], None] | None], Awaitable[Any]],
    *,
    report_module: str,
    succeeded: Callable[[Any], bool],
    json_path: Path | None,
    markdown: Path | None,
    plot: Path | None,
    quiet: bool,
) -> None:
    """Run a bench (synthetic or replay), print its report and write the files asked for.

    ``report_module`` names the module with the report's ``print_report``, ``render_markdown``
    and ``write_plot``, imported only once the run is done (start-up stays
    light). A missing matplotlib fails before the run, not after it; a bench error exits 1,
    and so does a report in which no request succeeded.
    """
    try:
        if plot is not None:
            from brain.bench.plot import pyplot

            pyplot()
        progress = None if quiet else (lambda msg: err.print(f"[dim]{escape(msg)}[/dim]"))
        report = asyncio.run(run(progress))
    except BenchError as exc:
        err.print(f"[red]brain bench:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None

    writers = importlib.import_module(report_module)
    writers.print_report(report, out)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
        err.print(f"wrote {json_path}")
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(writers.render_markdown(report), encoding="utf-8")
        err.print(f"wrote {markdown}")
    if plot is not None:
        writers.write_plot(report, plot)
        err.print(f"wrote {plot}")
    if not succeeded(report):
        err.print("[red]brain bench:[/red] no request succeeded")
        raise typer.Exit(1)
