"""``brain tune PROFILE``: the command. Thin: options into a TuneConfig, the tune, the table
printed, the evidence, plot and tuned profile written beside the profile."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from pydantic import ValidationError

from brain.cli_common import err, expected_errors, out, say
from brain.tune.candidates import TuneError


def _ints(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"expected integers like 1,4,8, got {text!r}", param_hint=option
        ) from None
    if not values:
        raise typer.BadParameter("give at least one value", param_hint=option)
    return values


@expected_errors
def tune_command(
    profile: str = typer.Argument(..., help="The profile to tune (name or YAML file)."),
    replay: list[Path] = typer.Option(
        [], "--replay", "-r", help="Replay file or directory (pilot replay-export); repeatable."
    ),
    concurrency: str = typer.Option("1", "-c", "--concurrency", help="Runs at once: 1,4,8."),
    candidates: str = typer.Option(
        "off,ngram:1-4",
        "-C",
        "--candidates",
        help="off, ngram:K, mtp:K (models with MTP layers), draft:K (the profile's draft "
        "model); K is 2, 1-4 or 2|3. off is always measured.",
    ),
    depths: str = typer.Option(
        "2048,8192,16384,32768", "--depths", help="Context-depth bucket edges (prompt tokens)."
    ),
    budget_s: float = typer.Option(480.0, "--budget-s", help="Seconds of measuring, at most."),
    wall_s: float = typer.Option(
        None, "--wall-s", help="The whole tune's seconds, starts included (budget shrinks to fit)."
    ),
    max_rounds: int = typer.Option(12, "--max-rounds", help="Rounds at most (at least 2 run)."),
    requests_per_run: int = typer.Option(
        None, "--requests-per-run", help="Requests per recorded run, evenly spaced (all: unset)."
    ),
    runs: int = typer.Option(None, "--runs", help="Runs per point (default: max(c, files))."),
    max_tokens: int = typer.Option(
        None, "--max-tokens", help="Answer length of every request (default: the recorded one)."
    ),
    choose_at: int = typer.Option(
        None, "--choose-at", help="The concurrency the profile is tuned for (default: highest)."
    ),
    base_port: int = typer.Option(8100, "--base-port", help="Candidate i serves on this + i."),
    no_share_gpu: bool = typer.Option(
        False, "--no-share-gpu", help="Give each candidate the profile's whole memory share."
    ),
    start_only: bool = typer.Option(
        False,
        "--start-only",
        help="Start the candidates' servers, report the start costs, "
        "leave them up (the next tune reuses them).",
    ),
    keep: bool = typer.Option(False, "--keep", help="Leave the servers up after the tune."),
    apply: bool = typer.Option(
        False, "--apply", help="Write the tuned settings into the profile (keeps NAME.yaml.orig)."
    ),
    out_dir: Path = typer.Option(
        None, "--out", help="Evidence folder (default: PROFILE.tune beside the profile)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the evidence JSON."),
    set_: list[str] = typer.Option(
        [], "--set", help="key=value override of the profile for the measured servers."
    ),
) -> None:
    """Choose the speculative-decoding setting (off, ngram, MTP, draft model; k) on recorded
    agent traffic, per concurrency and context depth, with intervals; write a tuned profile."""
    from brain.profiles import profile_path
    from brain.tune.models import TuneConfig
    from brain.tune.run import evidence_dir, tune

    try:
        config = TuneConfig(
            profile=profile,
            replay=replay,
            concurrency=_ints(concurrency, "-c"),
            candidates=candidates,
            depth_edges=sorted(set(_ints(depths, "--depths"))),
            budget_s=budget_s,
            wall_s=wall_s,
            max_rounds=max(2, max_rounds),
            requests_per_run=requests_per_run,
            runs=runs,
            max_tokens=max_tokens,
            choose_at=choose_at,
            base_port=base_port,
            share_gpu=not no_share_gpu,
            sets=set_,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        err.print(f"error: {where}: {first['msg']}", markup=False)
        raise typer.Exit(2) from None
    if not start_only and not replay:
        err.print("error: --replay FILE|DIR is needed (pilot replay-export writes one)")
        raise typer.Exit(2)
    if choose_at is not None and choose_at not in config.concurrency:
        err.print(f"error: --choose-at {choose_at} is not one of -c {concurrency}")
        raise typer.Exit(2)
    path = profile_path(profile)
    try:
        report = tune(config, say, start_only=start_only, keep=keep)
    except TuneError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    if start_only:
        for s in report.starts:
            start = "reused" if s.reused else f"{s.start_s:.1f} s"
            out.print(f"{s.candidate}: {s.server} on port {s.port}, start {start}", markup=False)
        return
    from brain.tune.profile_out import write_tuned
    from brain.tune.report import markdown, write_plot

    folder = out_dir or evidence_dir(path)
    folder.mkdir(parents=True, exist_ok=True)
    evidence = folder / "evidence.json"
    evidence.write_text(report.model_dump_json(indent=1), encoding="utf-8")
    text = markdown(report)
    (folder / "table.md").write_text(text, encoding="utf-8")
    try:
        write_plot(report, folder / "tune.png")
    except Exception as exc:  # a missing matplotlib must not lose the result
        say(f"no plot: {exc}")
    target = write_tuned(path, report, evidence, apply=apply)
    if json_out:
        out.print(json.dumps(report.model_dump(mode="json")), markup=False, soft_wrap=True)
        return
    out.print(text, markup=False, soft_wrap=True)
    out.print(f"tuned profile: {target}\nevidence: {folder}", markup=False)


def register(app: typer.Typer) -> None:
    """Add ``tune`` to the ``brain`` app."""
    app.command("tune", help="Tune speculative decoding on recorded agent traffic.")(tune_command)
