"""Run the task suite against OpenAI-compatible endpoints: Marathon, a plain loop, mini-swe-agent.

    python -m bench.tasks.run --endpoint http://127.0.0.1:8091/v1 --tries 3
    python -m bench.tasks.run --models q05=http://127.0.0.1:8000/v1,q15=http://127.0.0.1:8001/v1 \\
        --agents marathon,plain,mini --tries 10 --parallel 20 --max-steps 10 --out out.jsonl
    python -m bench.tasks.run --report out.jsonl [more.jsonl] --summary out.md --plot out.png
    python -m bench.tasks.run --validate            # no model: every task sound

Each try starts from a fresh copy of the task's tree, runs in a process of its own (at most
``--parallel`` at once) and is decided by the hidden check only. Rows are appended to
``--out`` (JSON lines) as each try ends, so a sitting that is stopped keeps what it measured;
the summary (``bench.tasks.report``) is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.tasks.report import load_rows, markdown
from bench.tasks.suite import SuiteError, Task, fetch, load_catalog
from bench.tasks.trial import AGENTS, TrySpec, run_in_subprocess
from bench.tasks.validate import validate

DEFAULT_CACHE = Path.home() / ".cache" / "marathon-bench" / "sdists"
CALL_MODES = ("auto", "native", "forced", "text")


class UsageError(Exception):
    """A command line the suite cannot run (the message says what to change)."""


def parse_models(models: str | None, endpoint: str | None) -> dict[str, str]:
    """``LABEL=URL,...`` (or one ``--endpoint``, labelled by its served model) -> {label: url}."""
    if models and endpoint:
        raise UsageError("give --models or --endpoint, not both")
    if endpoint:
        return {served_model(endpoint): endpoint}
    if not models:
        raise UsageError("--endpoint URL or --models LABEL=URL[,LABEL=URL] is required")
    out: dict[str, str] = {}
    for item in models.split(","):
        name, sep, url = item.partition("=")
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise UsageError(f"--models: {item!r} is not LABEL=http://HOST:PORT/v1")
        out[name] = url
    return out


def served_model(endpoint: str) -> str:
    import openai

    try:
        return (
            openai.OpenAI(base_url=endpoint, api_key="none", max_retries=1).models.list().data[0].id
        )
    except Exception as exc:
        raise UsageError(f"{endpoint}: cannot list its models ({exc}); is the server up?") from exc


def check_agents(agents: list[str]) -> list[str]:
    """The agents that can run here; mini-swe-agent is skipped, with the reason, when absent."""
    unknown = set(agents) - set(AGENTS)
    if unknown:
        raise UsageError(
            f"--agents: unknown {', '.join(sorted(unknown))} (known: {', '.join(AGENTS)})"
        )
    if "mini" in agents:
        from bench.tasks.mini import MiniMissing, find_mini

        try:
            print(f"mini-swe-agent: {find_mini()}")
        except MiniMissing as exc:
            print(f"skipping mini: {exc}", file=sys.stderr)
            agents = [a for a in agents if a != "mini"]
    if not agents:
        raise UsageError("no agent left to run")
    return agents


def check_call_mode(mode: str) -> None:
    """A pinned call mode needs a pilot whose workflow accepts ``model.tool_calls``."""
    if mode == "auto":
        return
    from pilot.workflow.schema import ModelSettings

    if "tool_calls" not in ModelSettings.model_fields:
        raise UsageError(
            f"--call-mode {mode}: this pilot has no model.tool_calls setting yet; run with "
            "--call-mode auto"
        )


def plan(args: argparse.Namespace, tasks: list[Task], models: dict[str, str]) -> list[TrySpec]:
    """Every try, in order: try 1 of every (task, model, agent) before try 2, so a sitting
    stopped early has compared the agents on the same tasks."""
    base = TrySpec(
        task="",
        agent="",
        model="",
        endpoint="",
        attempt=0,
        max_steps=args.max_steps,
        max_tokens=args.max_tokens,
        context_window=args.context_window,
        call_mode=args.call_mode,
        cache=str(args.cache),
        keep=str(args.keep) if args.keep else None,
        timeout_s=args.try_timeout,
        settings=tuple(args.set),
        variant=args.variant or " ".join(args.set),
    )
    return [
        replace(base, task=task.id, agent=agent, model=label, endpoint=url, attempt=attempt)
        for attempt in range(1, args.tries + 1)
        for task in tasks
        for label, url in models.items()
        for agent in args.agents
    ]


def run_all(
    specs: list[TrySpec], tasks: list[Task], out: Path, parallel: int
) -> list[dict[str, Any]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    by_id = {t.id: t for t in tasks}
    rows: list[dict[str, Any]] = []
    lock = threading.Lock()
    columns = (
        *Progress.get_default_columns()[:1],
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns) as progress, ThreadPoolExecutor(max_workers=parallel) as pool:
        bar = progress.add_task("tries", total=len(specs))
        futures = {pool.submit(run_in_subprocess, spec, by_id[spec.task]): spec for spec in specs}
        for future in as_completed(futures):
            spec, row = futures[future], future.result()
            with lock, out.open("a") as sink:
                sink.write(json.dumps(row) + "\n")
            rows.append(row)
            mark = "ok  " if row["success"] else ("FALSE" if row["false_success"] else "FAIL")
            progress.console.print(
                f"{mark} {spec.task} [{spec.agent} {spec.model}] try {spec.attempt}: "
                f"{row['steps']} steps, {row['wall_s']:.0f} s; {row['reason'][:140]}",
                markup=False,
                highlight=False,
            )
            progress.advance(bar)
    return rows


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--endpoint", help="one OpenAI base URL, e.g. http://127.0.0.1:8091/v1")
    p.add_argument(
        "--models", help="several: LABEL=URL[,LABEL=URL] (labels name the model in the results)"
    )
    p.add_argument(
        "--agents", default="marathon,plain", help=f"comma-separated, of {','.join(AGENTS)}"
    )
    p.add_argument("--tasks", default="", help="comma-separated task ids (default: all)")
    p.add_argument("--tries", type=int, default=1, help="tries per task, agent and model")
    p.add_argument("--parallel", type=int, default=1, help="tries at once (each its own process)")
    p.add_argument("--max-steps", type=int, default=15, help="model requests per try, every agent")
    p.add_argument("--max-tokens", type=int, default=512, help="completion tokens per answer")
    p.add_argument(
        "--context-window", type=int, default=None, help="Marathon's model.context_window"
    )
    p.add_argument(
        "--call-mode",
        "--tool-calls",
        dest="call_mode",
        choices=CALL_MODES,
        default="auto",
        help="pin Marathon's call mode (model.tool_calls)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="set a field of Marathon's workflow, as `pilot run --set` does "
        "(phases.0.retry_fresh=false); repeatable; the results name the variant",
    )
    p.add_argument("--variant", default="", help="the name the results give the --set fields")
    p.add_argument(
        "--try-timeout",
        type=float,
        default=1800,
        help="seconds a try may run: each agent stops there; its process is killed 600 s later",
    )
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the sdists are kept")
    p.add_argument("--out", type=Path, default=Path("bench-tasks.jsonl"), help="results, appended")
    p.add_argument(
        "--keep",
        type=Path,
        help="keep each try's trace here (runs.db, show.txt, transcript, trajectory, diff)",
    )
    p.add_argument("--report", type=Path, nargs="+", help="no run: summarize these results files")
    p.add_argument("--summary", type=Path, help="also write the summary as Markdown here")
    p.add_argument("--plot", type=Path, help="also draw the pass rates per task as a PNG")
    p.add_argument("--validate", action="store_true", help="no model: check every task is sound")
    p.add_argument(
        "--fetch-only", action="store_true", help="download the sdists into --cache, and stop"
    )
    return p


def _select(tasks: list[Task], wanted: str) -> list[Task]:
    if not wanted:
        return tasks
    ids = set(wanted.split(","))
    unknown = ids - {t.id for t in tasks}
    if unknown:
        raise UsageError(f"unknown task(s): {', '.join(sorted(unknown))}")
    return [t for t in tasks if t.id in ids]


def _summarize(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    text = markdown(rows)
    print(text)
    if args.summary:
        args.summary.write_text(text + "\n")
        print(f"wrote {args.summary}")
    if args.plot:
        from bench.plots import plot_tasks

        plot_tasks(rows, args.plot)
        print(f"wrote {args.plot}")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.report:
            _summarize(load_rows(args.report), args)
            return 0
        tasks = _select(load_catalog(), args.tasks)
        if args.fetch_only:
            for package in {t.package for t in tasks}:
                print(fetch(package, args.cache))
            return 0
        if args.validate:
            return validate(tasks, args.cache)
        if args.tries < 1 or args.parallel < 1:
            raise UsageError("--tries and --parallel must be at least 1")
        args.agents = check_agents(args.agents.split(","))
        check_call_mode(args.call_mode)
        models = parse_models(args.models, args.endpoint)
        for package in {t.package for t in tasks}:
            fetch(package, args.cache)  # once, before many tries want it at once
        rows = run_all(plan(args, tasks, models), tasks, args.out, args.parallel)
    except (SuiteError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _summarize(rows, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
