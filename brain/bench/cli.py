"""``brain bench``: the command. Thin: parse options into a BenchConfig, run, print, write files.

``register(app)`` adds the command to the ``brain`` typer app.
"""

from __future__ import annotations

import math
from pathlib import Path

import typer

from brain.bench.drivers import run_bench, validate_config
from brain.bench.models import BenchConfig, BenchError
from brain.bench.output import bad_options, run_and_report


def _ints(text: str | None, option: str) -> list[int]:
    if not text:
        return []
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"expected comma-separated integers, got {text!r}", param_hint=option
        ) from None


def _floats(text: str | None, option: str) -> list[float]:
    if not text:
        return []
    try:
        return [
            math.inf if v.strip().lower() == "inf" else float(v)
            for v in text.split(",")
            if v.strip()
        ]
    except ValueError:
        raise typer.BadParameter(
            f"expected comma-separated numbers or inf, got {text!r}", param_hint=option
        ) from None


def bench_command(
    url: str = typer.Argument(..., help="Endpoint, e.g. http://127.0.0.1:8000 (or .../v1)."),
    compare: str | None = typer.Option(
        None, "--compare", help="Second endpoint: same load, point by point; ratios first/second."
    ),
    labels: str = typer.Option(
        "A,B", "--labels", help="Names of the two endpoints, e.g. mtp,base."
    ),
    model: str | None = typer.Option(
        None, "--model", help="Model name (default: first of /v1/models)."
    ),
    compare_model: str | None = typer.Option(
        None, "--compare-model", help="Model name on --compare."
    ),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="OPENAI_API_KEY", help="Bearer key."
    ),
    concurrency: str | None = typer.Option(
        None, "--concurrency", "-c", help="Fixed-concurrency sweep, e.g. 1,4,16 (default 1)."
    ),
    request_rate: str | None = typer.Option(
        None, "--request-rate", help="Poisson request-rate sweep in req/s, e.g. 1,2,inf."
    ),
    max_concurrency: int | None = typer.Option(
        None, "--max-concurrency", help="Cap on requests in flight in --request-rate mode."
    ),
    num_prompts: int | None = typer.Option(
        None,
        "--num-prompts",
        "-n",
        help="Requests per point (default max(16, 4 x c); 64 for rates).",
    ),
    input_len: int = typer.Option(
        512, "--input-len", help="Prompt tokens per request (random prompts)."
    ),
    output_len: int = typer.Option(128, "--output-len", help="max_tokens per request."),
    dataset: Path | None = typer.Option(
        None, "--dataset", help='JSONL prompts: {"prompt": ...} or {"messages": [...]} per line.'
    ),
    depth: str | None = typer.Option(
        None, "--depth", help="Context-depth sweep for a single request, e.g. 0,4096,16384."
    ),
    runs: int = typer.Option(3, "--runs", help="Requests per depth."),
    warmup: int = typer.Option(1, "--warmup", help="Warm-up requests per endpoint, not counted."),
    temperature: float = typer.Option(0.0, "--temperature"),
    ignore_eos: bool = typer.Option(
        True, "--ignore-eos/--no-ignore-eos", help="Ask vLLM to always produce max_tokens."
    ),
    tokenize: bool = typer.Option(
        True, "--tokenize/--no-tokenize", help="Size prompts with the server's /tokenize."
    ),
    seed: int = typer.Option(0, "--seed"),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds per request (read timeout)."),
    json_path: Path | None = typer.Option(None, "--json", help="Write the full report as JSON."),
    plot: Path | None = typer.Option(None, "--plot", help="Write a PNG plot (needs matplotlib)."),
    markdown: Path | None = typer.Option(None, "--markdown", help="Write the tables as Markdown."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
    replay: list[Path] = typer.Option(
        [],
        "--replay",
        help="Replay recorded runs (files from `pilot replay-export`, or directories of them, "
        "e.g. bench/replays): -c is then the runs replayed at once.",
    ),
    replay_runs: int | None = typer.Option(
        None, "--replay-runs", help="Runs replayed per point (recordings cycled; default all)."
    ),
    think: bool = typer.Option(
        False, "--think/--no-think", help="Wait the recorded think time between requests."
    ),
    replay_max_tokens: int | None = typer.Option(
        None,
        "--replay-max-tokens",
        help="Answer length of every replayed request (default: recorded).",
    ),
    salt: bool = typer.Option(
        True, "--salt/--no-salt", help="Tag each replayed run so no two share their prefix."
    ),
) -> None:
    """Load-test an OpenAI-compatible endpoint: TTFT, TPOT, ITL, E2E, throughput, MTP acceptance."""
    names = [s.strip() for s in labels.split(",")]
    if len(names) != 2 or not all(names):
        raise typer.BadParameter("expected two names, e.g. mtp,base", param_hint="--labels")
    if replay:
        from brain.bench.replay.cli import replay_command

        stray = [
            name
            for name, given in (
                ("--request-rate", request_rate),
                ("--depth", depth),
                ("--dataset", dataset),
                ("--num-prompts", num_prompts),
            )
            if given is not None
        ]
        if stray:
            bad_options(
                f"{', '.join(stray)} do(es) not apply to --replay: a replay sends the recorded "
                "requests; -c sets how many runs go at once"
            )

        replay_command(
            url=url,
            compare=compare,
            labels=(names[0], names[1]),
            model=model,
            compare_model=compare_model,
            api_key=api_key,
            paths=replay,
            concurrency=_ints(concurrency, "--concurrency") or [1],
            runs=replay_runs,
            think=think,
            max_tokens=replay_max_tokens,
            salt=salt,
            temperature=temperature,
            ignore_eos=ignore_eos,
            seed=seed,
            timeout=timeout,
            json_path=json_path,
            markdown=markdown,
            plot=plot,
            quiet=quiet,
        )
        return
    try:
        config = BenchConfig(
            url=url,
            compare_url=compare,
            labels=(names[0], names[1]),
            model=model,
            compare_model=compare_model,
            api_key=api_key,
            concurrency=_ints(concurrency, "--concurrency"),
            request_rates=_floats(request_rate, "--request-rate"),
            max_concurrency=max_concurrency,
            num_prompts=num_prompts,
            input_len=input_len,
            output_len=output_len,
            dataset=dataset,
            depths=_ints(depth, "--depth"),
            depth_runs=runs,
            warmup=warmup,
            temperature=temperature,
            ignore_eos=ignore_eos,
            use_tokenize=tokenize,
            seed=seed,
            timeout=timeout,
        )
        validate_config(config)
    except (ValueError, BenchError) as exc:  # pydantic's ValidationError is a ValueError
        bad_options(str(exc))
    run_and_report(
        lambda progress: run_bench(config, progress),
        report_module="brain.bench.report",
        succeeded=lambda report: (
            any(p.completed for ep in report.endpoints for p in ep.points)
            or any(d.runs > d.failed for ep in report.endpoints for d in ep.depths)
        ),
        json_path=json_path,
        markdown=markdown,
        plot=plot,
        quiet=quiet,
    )


def register(app: typer.Typer) -> None:
    """Add ``bench`` to the ``brain`` app."""
    app.command("bench", help="Load-test an OpenAI-compatible endpoint (TTFT, TPOT, ITL, MTP).")(
        bench_command
    )
