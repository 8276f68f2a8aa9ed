"""The ``brain bench --replay`` side of the command: options in, report out."""

from __future__ import annotations

from pathlib import Path

from brain.bench.models import BenchError
from brain.bench.output import bad_options, run_and_report
from brain.bench.replay.models import ReplayConfig
from brain.bench.replay.run import run_replay, validate_replay_config


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
        bad_options(str(exc))
    run_and_report(
        lambda progress: run_replay(config, progress),
        report_module="brain.bench.replay.report",
        succeeded=lambda report: any(p.completed for ep in report.endpoints for p in ep.points),
        json_path=json_path,
        markdown=markdown,
        plot=plot,
        quiet=quiet,
    )
