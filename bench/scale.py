"""Scale-out: one batch of runs against 1, 2 and 4 model servers of fixed capacity.

For each N in 1, 2, 4, N simulated vLLM servers are started, each a process of its own with the
same fixed capacity: ``max_num_seqs`` C batch slots (a request beyond them waits in the
server's queue, ``vllm:num_requests_waiting``), a fixed TTFT and a fixed time per token. Then one
``pilot run --matrix --parallel R --endpoint URL1 --endpoint URL2 ...`` process drives R runs
at once (the real CLI: git workspaces, the event store in SQLite, the real tools), routed over
the N servers by ``pilot.model.router``. Each run makes S ``read_file`` steps (a different file
each), each answer A tokens long, then ``finish``.

One server cannot take R runs at once (R > C), so requests queue and the batch takes about
requests x (TTFT + A x ITL) / C; with N servers, ideally N times less. Reported per N: wall
time (from the first run's start to the last run's end, from the store's events), runs per
minute, requests per server (from the runs' ``assistant_message.endpoint``), the peak number of
requests waiting on the busiest server (sampled from ``/metrics``), the ideal wall time if the
servers' capacity were the only limit, and the speed-up over one server. A benchmark, not a
test.

    .venv/bin/python -m bench.scale                            # 64 runs, N = 1 2 4
    .venv/bin/python -m bench.scale --runs 32 --servers 1 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench._common import markdown_table
from bench.chaos_common import git_env
from brain.sim.process import SimProcess

ROOT = Path(__file__).resolve().parent.parent
KEY = "scale-bench"
FINISHED = ("succeeded", "failed", "cancelled", "limit", "paused")


# -- servers, workspaces, the workflow ---------------------------------------------------------


def write_script(path: Path, steps: int, answer_tokens: int) -> Path:
    answer = ("Reading the next file of the module. " * 64)[: answer_tokens * 4]  # 4 bytes/token
    turns: list[dict[str, Any]] = [
        {
            "content": answer,
            "tool_calls": [{"name": "read_file", "arguments": {"path": f"src/mod_{i}.py"}}],
        }
        for i in range(steps)
    ]
    # A survey's summary names what it read: its evidence (pilot/agent/evidence.py).
    summary = f"Read src/mod_0.py to src/mod_{steps - 1}.py." if steps else "Read nothing."
    turns.append({"tool_calls": [{"name": "finish", "arguments": {"summary": summary}}]})
    path.write_text(yaml.safe_dump({"conversations": [{"key": KEY, "turns": turns}]}))
    return path


def make_repos(folder: Path, runs: int, steps: int) -> list[Path]:
    repos = []
    for i in range(runs):
        root = folder / f"repo{i:03d}"
        (root / "src").mkdir(parents=True)
        (root / "README.md").write_text(f"# project {i}\n")
        for k in range(steps):
            (root / "src" / f"mod_{k}.py").write_text(f"VALUE_{k} = {i}\n")
        for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
            subprocess.run(["git", *args], cwd=root, env=git_env(), check=True, capture_output=True)
        repos.append(root)
    return repos


def write_workflow(path: Path) -> Path:
    data = {
        "name": "scale-bench",
        "params": {"repo": {"type": "path", "required": True}},
        "model": {"endpoint": "http://127.0.0.1:9/v1", "max_tokens": 512},  # --endpoint wins
        "workspace": {"path": "{{ params.repo }}"},
        "tools": ["read_file", "finish"],
        "sandbox": "none",
        "system": f"Conversation {KEY}. Work with the tools.",
        "phases": [{"name": "work", "prompt": "Read the project."}],
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# -- one point ---------------------------------------------------------------------------------


def sample_load(sims: list[SimProcess], peaks: dict[str, list[float]]) -> None:
    """Peak running and waiting requests per server, from its /metrics."""
    from brain.metrics import MetricsSnapshot

    for sim in sims:
        try:
            text = httpx.get(f"http://127.0.0.1:{sim.port}/metrics", timeout=2).text
        except httpx.HTTPError:
            continue
        snap = MetricsSnapshot.from_text(text)
        peak = peaks.setdefault(sim.url, [0.0, 0.0])
        peak[0] = max(peak[0], snap.requests_running or 0.0)
        peak[1] = max(peak[1], snap.requests_waiting or 0.0)


def run_point(servers: int, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    from pilot.store.event_store import EventStore

    sim_args = [
        "--model", "scale-model", "--max-model-len", "32768",
        "--max-num-seqs", str(args.capacity), "--ttft", str(args.ttft), "--itl", str(args.itl),
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        folder = Path(tmp)
        script = write_script(folder / "script.yaml", args.steps, args.answer_tokens)
        sim_args += ["--policy", f"script:{script}"]
        repos = make_repos(folder / "repos", args.runs, args.steps)
        matrix = folder / "matrix.yaml"
        matrix.write_text(yaml.safe_dump([{"repo": str(r)} for r in repos]))
        workflow = write_workflow(folder / "wf.yaml")
        db = folder / "runs.db"
        sims = [SimProcess(sim_args, folder / f"sim{i}.log").start() for i in range(servers)]
        try:
            for sim in sims:
                sim.wait_ready()
            endpoints = [option for sim in sims for option in ("--endpoint", sim.url)]
            argv = [sys.executable, "-m", "pilot", "run", str(workflow), "--matrix", str(matrix),
                    "--parallel", str(args.runs), "--db", f"sqlite:///{db}", "--json",
                    *endpoints]  # fmt: skip
            env = {**os.environ, **git_env(), "MARATHON_HOME": str(folder / "home")}
            peaks: dict[str, list[float]] = {}
            started = time.perf_counter()
            with open(folder / "pilot.log", "wb") as log:
                pilot = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=log)
            with Progress(
                TextColumn(f"[bold]{servers} server(s)"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            ) as progress:
                task = progress.add_task("runs", total=args.runs)
                while pilot.poll() is None:
                    time.sleep(0.5)
                    sample_load(sims, peaks)
                    if db.exists():
                        try:
                            statuses = [r.status for r in EventStore(f"sqlite:///{db}").list_runs()]
                        except Exception:  # the pilot is creating the schema
                            continue
                        progress.update(task, completed=sum(s in FINISHED for s in statuses))
            process_s = time.perf_counter() - started
            if pilot.returncode != 0:
                tail = (folder / "pilot.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"pilot exited {pilot.returncode}:\n{tail}")
            return summarize(EventStore(f"sqlite:///{db}"), sims, peaks, servers, process_s, args)
        finally:
            for sim in sims:
                sim.kill()


def summarize(
    store: Any,
    sims: list[SimProcess],
    peaks: dict[str, list[float]],
    servers: int,
    process_s: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    from pilot import events as ev

    per_server: Counter[str] = Counter()
    first, last = None, None
    statuses: Counter[str] = Counter()
    moved = 0
    for record in store.list_runs(limit=100_000):
        statuses[record.status] += 1
        events = store.load_events(record.id)
        answered = [e.endpoint for e in events if isinstance(e, ev.AssistantMessage)]
        per_server.update(answered)
        moved += len(set(answered)) > 1
        first = min(first or events[0].at, events[0].at)
        last = max(last or events[-1].at, events[-1].at)
    wall = (last - first).total_seconds() if first and last else process_s
    requests = sum(per_server.values())
    service = args.ttft + args.answer_tokens * args.itl
    return {
        "servers": servers,
        "runs": args.runs,
        "succeeded": statuses["succeeded"],
        "wall_s": wall,
        "process_s": process_s,
        "runs_per_min": args.runs / wall * 60,
        "requests": requests,
        "requests_per_server": [per_server[sim.url] for sim in sims],
        "runs_moved": moved,
        "peak_running": max((p[0] for p in peaks.values()), default=0.0),
        "peak_waiting": max((p[1] for p in peaks.values()), default=0.0),
        "ideal_s": requests * service / (servers * args.capacity),
    }


# -- the driver ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=64, help="runs in the batch")
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=5, help="read_file steps per run (+ finish)")
    parser.add_argument("--capacity", type=int, default=4, help="each server's max_num_seqs")
    parser.add_argument("--ttft", type=float, default=0.05, help="sim time to first token, s")
    parser.add_argument("--itl", type=float, default=0.02, help="sim seconds per token")
    parser.add_argument("--answer-tokens", type=int, default=40, help="tokens per answer")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    results = []
    for servers in args.servers:
        result = run_point(servers, args, console)
        results.append(result)
        console.print(
            f"  {servers} server(s): {result['wall_s']:.1f} s, "
            f"{result['runs_per_min']:.1f} runs/min, "
            f"{result['succeeded']}/{result['runs']} succeeded, "
            f"requests per server {result['requests_per_server']}"
        )
    base = results[0]["runs_per_min"]
    for r in results:
        r["speedup"] = r["runs_per_min"] / base
    print(
        f"\n{args.runs} runs at once, each {args.steps} read_file steps + finish; every server: "
        f"max_num_seqs {args.capacity}, TTFT {args.ttft * 1000:.0f} ms, "
        f"{args.itl * 1000:.0f} ms/token, {args.answer_tokens}-token answers\n"
    )
    print(
        markdown_table(
            [
                "servers",
                "wall s",
                "runs/min",
                f"vs {results[0]['servers']} server(s)",
                "requests per server",
                "peak waiting (busiest server)",
                "capacity-bound ideal s",
                "runs moved",
                "succeeded",
            ],
            [
                [
                    r["servers"],
                    r["wall_s"],
                    r["runs_per_min"],
                    f"{r['speedup']:.2f}x",
                    " / ".join(str(n) for n in r["requests_per_server"]),
                    int(r["peak_waiting"]),
                    r["ideal_s"],
                    r["runs_moved"],
                    f"{r['succeeded']}/{r['runs']}",
                ]
                for r in results
            ],
        )
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "results": results}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
