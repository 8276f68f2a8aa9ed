"""KV-aware admission: 128 queued runs against a simulated vLLM whose KV cache holds 16 of them.

Each point is one real ``pilot run --matrix`` (the CLI, in its own process: 128 rows, each its
own git workspace) of a one-phase workflow that reads a module a step (``bench.prefix_cache``'s
policy) and finishes, against ``brain.sim`` in its own process with vLLM's KV-block model
(``brain/sim/kv.py``, ``engine.py``: 16-token blocks, a prefix cache, admission by free blocks,
preemption with recompute) and ``max_num_seqs`` above 128, so the KV cache is the only limit.

A calibration run alone measures a run's peak context (prompt + answer, from its usage); the
sweep's sim then gets ``16 x`` that many tokens of KV cache (in whole blocks). The sweep runs
``--no-admission --parallel P`` for each P, and the largest P with the admission on, from a fresh
store (cold start) and from one holding the calibration run (the workflow's history), each
against a fresh sim; it reports the wall of the whole matrix, the server's preemptions and
prefix-cache hit rate, and the admission's wait lines.

    .venv/bin/python -m bench.admission                       # P = 8 12 16 20 24 32 64 128
    .venv/bin/python -m bench.admission --runs 32 --fit 4 --parallel 2 4 8 32

A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import markdown_table, write_json
from bench.prefix_cache import MODULES, metrics, module_text, start_sim

ROOT = Path(__file__).resolve().parent.parent

WORKFLOW = """version: 1
name: kv-fill
description: Read modules, one a step, for a run whose context grows to a known size.
params:
  repo: {{type: path, required: true}}
model:
  endpoint: {endpoint}
  max_tokens: 256
  server_wait: 120
workspace:
  path: "{{{{ params.repo }}}}"
  init: false
tools: [read_file, finish]
sandbox: none
system: |
  You survey the Python package at {{{{ run.workspace }}}}, one module a step, and never
  change anything. Say which step you are on before each call. When done, call finish.
limits:
  max_steps: {max_steps}
  max_no_progress_steps: 1000
  max_tokens: 1000000000
phases:
  - name: survey
    prompt: |
      Read the modules under src/ one a step, in order, steps={steps} in all. Then call finish.
"""


def make_repos(folder: Path, count: int) -> list[Path]:
    """``count`` small git repositories (one commit each), built with one git process each
    for init+add+commit through a shell."""
    names = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")
    env = {**os.environ, **dict.fromkeys(names, "bench")}
    repos = []
    for i in range(count):
        repo = folder / f"repo-{i:03d}"
        (repo / "src").mkdir(parents=True)
        for m in range(MODULES):
            (repo / "src" / f"mod_{m:03d}.py").write_text(module_text(m), encoding="utf-8")
        subprocess.run(
            "git init -q -b main && git add -A && git commit -qm modules",
            shell=True,
            cwd=repo,
            env=env,
            check=True,
            capture_output=True,
        )
        repos.append(repo)
    return repos


def sim_config(kv_tokens: int, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "model": "sim/kv-fill",
        "max_model_len": args.window,
        "kv_cache_tokens": kv_tokens,
        "max_num_seqs": 1024,
        "timing": {"ttft": args.ttft, "ttft_per_token": args.ttft_per_token, "itl": args.itl},
    }


def run_matrix(
    folder: Path,
    repos: list[Path],
    kv_tokens: int,
    parallel: int,
    admission: bool,
    args: Any,
    seed_db: Path | None = None,
) -> dict[str, Any]:
    """One ``pilot run --matrix`` of ``repos`` against a fresh sim; its figures. ``seed_db``: a
    store to start from (the calibration run's: the admission's history of the workflow)."""
    sim, urls = start_sim(**sim_config(kv_tokens, args))
    try:
        point = folder / f"p{parallel}-{'adm' if admission else 'fixed'}-{time.monotonic_ns()}"
        point.mkdir()
        workflow = point / "wf.yaml"
        workflow.write_text(
            WORKFLOW.format(
                endpoint=urls["base_url"], steps=args.steps, max_steps=args.steps * 2 + 10
            ),
            encoding="utf-8",
        )
        matrix = point / "matrix.yaml"
        matrix.write_text("".join(f"- {{repo: {r}}}\n" for r in repos), encoding="utf-8")
        if seed_db is not None:  # SQLite's backup: the calibration's WAL is not checkpointed
            with sqlite3.connect(seed_db) as src, sqlite3.connect(point / "runs.db") as dst:
                src.backup(dst)
        db = f"sqlite:///{point / 'runs.db'}"
        before = metrics(urls["root"])
        cmd = [sys.executable, "-m", "pilot", "run", str(workflow), "--matrix", str(matrix),
               "--parallel", str(parallel), "--db", db, "--json"]  # fmt: skip
        if not admission:
            cmd.append("--no-admission")
        env = {**os.environ, "MARATHON_HOME": str(point / "home")}
        t0 = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = metrics(urls["root"])
    finally:
        sim.kill()
        sim.wait()
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    finished = [e for e in events if e.get("type") == "run_finished"]
    ok = sum(1 for e in finished if e.get("status") == "succeeded")
    peaks = [
        (e["usage"]["prompt_tokens"] + e["usage"]["completion_tokens"])
        for e in events
        if e.get("type") == "assistant_message" and e.get("usage")
    ]
    waits = [
        json.loads(line)["admission"]
        for line in done.stderr.splitlines()
        if line.startswith('{"admission"')
    ]
    queries = after["queries"] - before["queries"]
    hits = after["hits"] - before["hits"]
    return {
        "parallel": parallel,
        "admission": admission,
        "history": seed_db is not None,
        "db": str(point / "runs.db"),
        "runs": len(repos),
        "succeeded": ok,
        "exit_code": done.returncode,
        "wall_s": wall,
        "preemptions": after["preemptions"] - before["preemptions"],
        "hit_rate": hits / queries if queries else None,
        "computed_prefill": queries - hits,
        "peak_context": max(peaks, default=0),
        "admission_lines": len(waits),
        "wait_lines": waits[:20],
        "stderr_tail": done.stderr[-400:] if done.returncode else "",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=128)
    parser.add_argument("--fit", type=int, default=16, help="Run contexts the KV cache holds.")
    parser.add_argument("--steps", type=int, default=16, help="Steps of each run.")
    parser.add_argument("--window", type=int, default=8192)
    parser.add_argument("--parallel", type=int, nargs="+", default=[8, 12, 16, 20, 24, 32, 64, 128])
    parser.add_argument("--ttft", type=float, default=0.01)
    parser.add_argument("--ttft-per-token", type=float, default=0.0001)
    parser.add_argument("--itl", type=float, default=0.005)
    parser.add_argument(
        "--history",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Also run the admission from a store holding the calibration run (its history).",
    )
    parser.add_argument("--repeat", type=int, default=1, help="Sittings of the whole set.")
    parser.add_argument("--json", type=Path, help="Write the figures as JSON.")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="bench-admission-"))
    t0 = time.perf_counter()
    repos = make_repos(folder, args.runs)
    print(f"{args.runs} repositories in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    calibration = run_matrix(folder, repos[:1], 1 << 24, 1, False, args)
    peak = calibration["peak_context"]
    blocks = -(-peak // 16)
    kv_tokens = args.fit * blocks * 16
    print(f"a run's peak context: {peak} tokens; KV cache: {kv_tokens} tokens", file=sys.stderr)
    rows = []
    for _ in range(args.repeat):  # each sitting: the sweep, then the admission, back to back
        for parallel in args.parallel:
            row = run_matrix(folder, repos, kv_tokens, parallel, False, args)
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)
        seeds = [None, Path(calibration["db"])] if args.history else [None]
        for seed in seeds:
            row = run_matrix(folder, repos, kv_tokens, max(args.parallel), True, args, seed)
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)
    headers = ["point", "ok", "wall s", "preemptions", "hit rate", "computed prefill", "waits"]
    table = [
        [
            (f"admission{' (history)' if r['history'] else ''}, " if r["admission"] else "")
            + f"--parallel {r['parallel']}",
            f"{r['succeeded']}/{r['runs']}",
            f"{r['wall_s']:.1f}",
            f"{r['preemptions']:.0f}",
            f"{r['hit_rate'] * 100:.1f}%" if r["hit_rate"] is not None else "-",
            f"{r['computed_prefill']:,.0f}",
            str(r["admission_lines"]),
        ]
        for r in rows
    ]
    print(f"peak context {peak} tokens, KV cache {kv_tokens} tokens ({args.fit} contexts)")
    print(markdown_table(headers, table))
    if args.json:
        write_json(str(args.json), {"peak": peak, "kv_tokens": kv_tokens, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
