"""The ``brain bench --replay`` side of the command: options in, report out."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from brain.bench import BenchError
from brain.bench_replay import ReplayConfig, run_replay, validate_replay_config

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def replay_command(
    *,
    url: str,
    compare: str | None,
    labels: tuple[str, str],
    model: str | None,
    compare_model: str | None,
    api_key: str | None,
    paths: list[Path],
    concurrency: list[int],
    runs: int | None,
    think: bool,
    max_tokens: int | None,
    salt: bool,
    temperature: float,
    ignore_eos: bool,
    seed: int,
    timeout: float,
    json_path: Path | None,
    markdown: Path | None,
    plot: Path | None,
    quiet: bool,
) -> None:
    """Run the replay and print / write its report; a bad option or file exits 2, no answer 1."""
    try:
        config = ReplayConfig(
            url=url,
            compare_url=compare,
            labels=labels,
            model=model,
            compare_model=compare_model,
            api_key=api_key,
            paths=paths,
            concurrency=concurrency,
            runs=runs,
            think=think,
            max_tokens=max_tokens,
            salt=salt,
            temperature=temperature,
            ignore_eos=ignore_eos,
            seed=seed,
            timeout=timeout,
        )
        validate_replay_config(config)
    except (ValueError, BenchError) as exc:
        err.print(f"[red]brain bench:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    try:
        if plot is not None:
            from brain.bench_plot import _pyplot

            _pyplot()  # fail before the run, not after it
        progress = None if quiet else (lambda msg: err.print(f"[dim]{escape(msg)}[/dim]"))
        report = asyncio.run(run_replay(config, progress))
    except BenchError as exc:
        err.print(f"[red]brain bench:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None

    from brain.bench_replay_report import print_report, render_markdown, write_json, write_plot

    print_report(report, out)
    if json_path is not None:
        write_json(report, json_path)
        err.print(f"wrote {json_path}")
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(render_markdown(report), encoding="utf-8")
        err.print(f"wrote {markdown}")
    if plot is not None:
        write_plot(report, plot)
        err.print(f"wrote {plot}")
    if not any(p.completed for ep in report.endpoints for p in ep.points):
        err.print("[red]brain bench:[/red] no request succeeded")
        raise typer.Exit(1)
