"""Run the task suite against an OpenAI-compatible endpoint: Marathon and/or the plain loop.

    python -m bench.tasks.run --endpoint http://127.0.0.1:8091/v1 --tries 3
    python -m bench.tasks.run --endpoint URL --agents plain --tasks semver-bump-patch
    python -m bench.tasks.run --report results.jsonl     # the tables again, from a file
    python -m bench.tasks.run --report results.jsonl --plot tasks.png

Each try starts from a fresh copy of the task's tree; success is the hidden check only.
Results are appended to ``--out`` (JSON lines) as each try ends, so a long sitting that is
stopped keeps what it measured; the tables (per task, and overall per agent: success rate,
steps, tokens, wall, failure reasons) are printed at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.tasks.agents import run_marathon, run_plain
from bench.tasks.suite import SuiteError, hidden_check, load_catalog, prepare

DEFAULT_CACHE = Path.home() / ".cache" / "marathon-bench" / "sdists"


def one_try(task: Any, agent: str, args: argparse.Namespace, cache: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"task-{task.id}-") as tmp:
        work = Path(tmp)
        repo = prepare(task, cache, work)
        try:
            if agent == "marathon":
                result = run_marathon(
                    task,
                    repo,
                    args.endpoint,
                    work,
                    max_steps=args.max_steps,
                    max_tokens=args.max_tokens,
                    context_window=args.context_window,
                )
            else:
                result = run_plain(
                    task,
                    repo,
                    args.endpoint,
                    max_steps=args.max_steps,
                    max_tokens=args.max_tokens,
                    transcript=work / "transcript.json",
                )
        except Exception as exc:  # an agent crash is a result to report, not the end
            return {
                "task": task.id,
                "kind": task.kind,
                "agent": agent,
                "success": False,
                "crashed": True,
                "reason": f"agent crashed: {type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-2000:],
                "steps": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "tokens_estimated": False,
                "wall_s": 0.0,
            }
        check = hidden_check(task, repo)
        if args.keep:
            keep = args.keep / f"{task.id}-{agent}-{int(time.time())}"
            keep.mkdir(parents=True, exist_ok=True)
            if (work / "runs.db").exists():  # the backup API: the WAL's events come too
                with (
                    sqlite3.connect(work / "runs.db") as src,
                    sqlite3.connect(keep / "runs.db") as dst,
                ):
                    src.backup(dst)
            if (work / "transcript.json").exists():
                shutil.copy(work / "transcript.json", keep / "transcript.json")
            diff = subprocess.run(["git", "diff"], cwd=repo, capture_output=True, text=True)
            (keep / "diff.patch").write_text(diff.stdout)
        reason = (
            check.reason if check.passed else f"{result.status}: {result.reason}; {check.reason}"
        )
        return {
            "task": task.id,
            "kind": task.kind,
            "agent": agent,
            "success": check.passed,
            "crashed": False,
            "agent_status": result.status,
            "reason": reason,
            "steps": result.steps,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "tokens_estimated": result.tokens_estimated,
            "wall_s": round(result.wall_s, 1),
        }


def tables(rows: list[dict[str, Any]]) -> str:
    """Per task and agent, then overall per agent, as Markdown."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by[(row["task"], row["agent"])].append(row)
    lines = [
        "| task | agent | success | mean steps | mean tokens | mean wall s | failures |",
        "|---|---|---|---|---|---|---|",
    ]
    for (task, agent), group in sorted(by.items()):
        ok = sum(r["success"] for r in group)
        steps = sum(r["steps"] for r in group) / len(group)
        tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in group) / len(group)
        wall = sum(r["wall_s"] for r in group) / len(group)
        est = "~" if any(r["tokens_estimated"] for r in group) else ""
        why = "; ".join(sorted({r["reason"][:90] for r in group if not r["success"]}))
        lines.append(
            f"| {task} | {agent} | {ok}/{len(group)} | {steps:.1f} | {est}{tokens:.0f} | "
            f"{wall:.0f} | {why} |"
        )
    lines += [
        "",
        "| agent | tries | success rate | crashes | mean steps | mean tokens |",
        "|---|---|---|---|---|---|",
    ]
    agents: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        agents[row["agent"]].append(row)
    for agent, group in sorted(agents.items()):
        ok = sum(r["success"] for r in group)
        crashes = sum(r.get("crashed", False) for r in group)
        steps = sum(r["steps"] for r in group) / len(group)
        tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in group) / len(group)
        lines.append(
            f"| {agent} | {len(group)} | {ok}/{len(group)} = {ok / len(group):.0%} | {crashes} | "
            f"{steps:.1f} | {tokens:.0f} |"
        )
    return "\n".join(lines)


def validate(tasks: list[Any], cache: Path) -> int:
    """Each task must be able to fail and (where a plant can be undone) to pass."""
    bad = 0
    for task in tasks:
        with tempfile.TemporaryDirectory() as tmp:
            repo = prepare(task, cache, Path(tmp))
            start = hidden_check(task, repo)
            undone = None
            for plant in task.plant:
                target = repo / plant.file
                target.write_text(target.read_text().replace(plant.new, plant.old))
            if task.plant:
                undone = hidden_check(task, repo)
        ok = not start.passed and (undone is None or undone.passed)
        bad += not ok
        solved = "n/a (no plant)" if undone is None else undone.reason
        print(f"{'ok ' if ok else 'BAD'} {task.id}: start -> {start.reason}; undone -> {solved}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="OpenAI base URL, e.g. http://127.0.0.1:8091/v1")
    parser.add_argument("--agents", default="marathon,plain", help="marathon,plain")
    parser.add_argument("--tasks", default="", help="comma-separated task ids (default: all)")
    parser.add_argument("--tries", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=15)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--context-window", type=int, default=None)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=Path("bench-tasks.jsonl"))
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep each try's trace here (Marathon's runs.db, the plain loop's transcript, "
        "the diff)",
    )
    parser.add_argument("--report", type=Path, help="print the tables of a results file")
    parser.add_argument("--plot", type=Path, help="with --report: also draw it as a PNG")
    parser.add_argument(
        "--validate",
        action="store_true",
        help="no agent: check each hidden check fails on the starting tree and, for planted "
        "tasks, passes once the plant is undone",
    )
    args = parser.parse_args(argv)
    if args.report:
        rows = [json.loads(line) for line in args.report.read_text().splitlines() if line]
        print(tables(rows))
        if args.plot:
            from bench.plots import plot_tasks

            plot_tasks(rows, args.plot)
            print(f"wrote {args.plot}")
        return 0
    tasks = load_catalog()
    if args.tasks:
        wanted = set(args.tasks.split(","))
        unknown = wanted - {t.id for t in tasks}
        if unknown:
            parser.error(f"unknown task(s): {', '.join(sorted(unknown))}")
        tasks = [t for t in tasks if t.id in wanted]
    if args.validate:
        return validate(tasks, args.cache)
    if not args.endpoint:
        parser.error("--endpoint is required (or --report / --prepare-only)")
    rows: list[dict[str, Any]] = []
    # Task by task within a try (both agents on a task, then the next), so a sitting stopped
    # early has compared the agents on the same tasks.
    for attempt in range(args.tries):
        for task in tasks:
            for agent in args.agents.split(","):
                try:
                    row = one_try(task, agent, args, args.cache)
                except SuiteError as exc:
                    print(f"error: {exc}", file=sys.stderr)
                    return 2
                row["try"] = attempt + 1
                rows.append(row)
                with args.out.open("a") as out:
                    out.write(json.dumps(row) + "\n")
                mark = "ok " if row["success"] else "FAIL"
                print(
                    f"{mark} {task.id} [{agent}] try {attempt + 1}: {row['steps']} steps, "
                    f"{row['wall_s']:.0f} s; {row['reason'][:150]}",
                    flush=True,
                )
    print(tables(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
