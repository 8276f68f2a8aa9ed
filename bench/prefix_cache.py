"""The pilot's prefix-cache hit rate over a long run with compactions, against the simulated vLLM.

One real ``pilot run`` (the CLI, in its own process, with a real git workspace and the real
``read_file`` tool) of a one-phase workflow that reads a module a step for ``--steps`` steps and
then finishes, against ``brain.sim`` in its own process with its block prefix cache (16-token
blocks, vLLM's hashing and eviction rules; ``brain/sim/kv.py``) and a window small enough that
the run compacts several times. The model is a policy of this bench: each step says which step
it is ("Step 57: ...") and reads the next module; a summary request gets a structured summary.

The hit rate is the server's: ``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries`` over
the run (every prompt token the pilot sent, the summary requests included), read from the sim's
``/metrics`` before and after. ``--replay PATH`` also writes the run as a replay file
(``pilot replay-export``) for ``brain bench --replay``, which gives the same figure per request
depth.

    .venv/bin/python -m bench.prefix_cache                   # 200 steps, window 32768
    .venv/bin/python -m bench.prefix_cache --steps 60 --window 8192 --replay out.jsonl.gz

A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import write_json

ROOT = Path(__file__).resolve().parent.parent
MODULES = 40
STEP = re.compile(r"^Step (\d+):")

SUMMARY = """## Goal
- Read every module of the package once and report what each one does.
## Progress
- {done} steps done: modules read in order, one a step; nothing changed.
## Decisions
- Read in file order; no edits (the task is a survey).
## Files
- read: src/mod_000.py .. src/mod_{last:03d}.py (in order, wrapping around)
## Open problems
- None.
## Next step
- Step {next}: read the next module in order."""


def module_text(index: int) -> str:
    """A small Python module of about 1.2 KB, different for every index."""
    lines = [f'"""Module {index}: helpers of part {index % 7} of the pipeline."""', ""]
    for f in range(5):
        name = f"step_{index}_{f}"
        lines += [
            f"def {name}(values, scale={f + 1}):",
            f'    """Scale the values of stage {f} and drop the ones under {index % 10}."""',
            f"    kept = [v * scale for v in values if v >= {index % 10}]",
            f"    return sorted(kept)[: {10 + f}]",
            "",
        ]
    return "\n".join(lines) + "\n"


# -- the simulated server (its own process) ---------------------------------------------------


def sim_child(ready_file: str, config_json: str) -> None:
    """Serve the sim (``SimConfig`` fields as JSON) with this bench's policy until killed."""
    from brain.sim.config import SimConfig
    from brain.sim.policy import SimChatRequest, SimTurn
    from brain.sim.server import running_sim

    class LongRunPolicy:
        """Step k reads module k mod MODULES; the step number is in the last answer's text,
        so the count survives compactions (the last turn is always kept)."""

        def respond(self, request: SimChatRequest) -> SimTurn:
            system = request.messages[0].text if request.messages else ""
            if system.startswith("You write the working notes"):
                log = request.messages[-1].text
                done = max((int(n) for n in re.findall(r"Step (\d+):", log)), default=0)
                return SimTurn(content=SUMMARY.format(done=done, last=MODULES - 1, next=done + 1))
            first_user = next(m.text for m in request.messages if m.role == "user")
            steps = int(first_user.rsplit("steps=", 1)[1].split()[0])
            done = 0
            for message in reversed(request.messages):
                if message.role == "assistant" and (match := STEP.match(message.text)):
                    done = int(match.group(1))
                    break
            if done < steps:
                step = done + 1
                path = f"src/mod_{(step - 1) % MODULES:03d}.py"
                return SimTurn(
                    content=f"Step {step}: reading {path} to see what it does.",
                    tool_calls=(("read_file", json.dumps({"path": path})),),
                )
            # A survey's summary names what it read: its evidence (pilot/agent/evidence.py).
            summary = json.dumps({"summary": f"Read {steps} modules, mod_000.py first."})
            return SimTurn(content="All modules read.", tool_calls=(("finish", summary),))

    config = SimConfig.model_validate_json(config_json)
    with running_sim(config, policy=LongRunPolicy()) as sim:
        write_json(ready_file, {"base_url": sim.openai_base_url, "root": sim.base_url})
        while True:
            time.sleep(3600)


def start_sim(**config: Any) -> tuple[subprocess.Popen, dict[str, str]]:
    """The sim in its own process (so its CPU is not the pilot's), with ``SimConfig`` fields."""
    folder = tempfile.mkdtemp(prefix="bench-prefix-sim-")
    ready = Path(folder) / "ready.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.prefix_cache", "_sim", str(ready), json.dumps(config)],
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the simulated server did not start")
        time.sleep(0.05)
    time.sleep(0.05)
    return proc, json.loads(ready.read_text())


def metrics(root: str) -> dict[str, float]:
    import httpx

    from brain.metrics import MetricsSnapshot

    snap = MetricsSnapshot.from_text(httpx.get(f"{root}/metrics", timeout=10).text)
    return {
        "queries": snap.prefix_cache_queries or 0.0,
        "hits": snap.prefix_cache_hits or 0.0,
        "prompt_tokens": snap.prompt_tokens or 0.0,
        "preemptions": snap.preemptions or 0.0,
    }


# -- the run ----------------------------------------------------------------------------------


def make_repo(folder: Path) -> Path:
    repo = folder / "repo"
    (repo / "src").mkdir(parents=True)
    for i in range(MODULES):
        (repo / "src" / f"mod_{i:03d}.py").write_text(module_text(i), encoding="utf-8")
    names = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")
    env = {**os.environ, **dict.fromkeys(names, "bench")}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "modules"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return repo


WORKFLOW = """version: 1
name: long-survey
description: Read every module, one a step, for a long run with compactions.
model:
  endpoint: {endpoint}
  max_tokens: 512
workspace:
  path: {repo}
  init: false
tools: [read_file, finish]
system: |
  You survey a Python package, one module a step, and never change anything.
  Say which step you are on before each call. When done, call finish with a summary.
limits:
  max_steps: {max_steps}
  max_no_progress_steps: 1000
  max_tokens: 1000000000
phases:
  - name: survey
    prompt: |
      Read the modules under src/ one a step, in order, wrapping around, steps={steps} in all.
      Then call finish.
"""


def run_once(steps: int, window: int, kv_tokens: int, replay: Path | None) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-prefix-"))
    repo = make_repo(folder)
    sim, urls = start_sim(
        model="sim/long-run",
        max_model_len=window,
        kv_cache_tokens=kv_tokens,
        timing={"ttft": 0.002, "itl": 0.0005},
    )
    try:
        workflow = folder / "long.yaml"
        workflow.write_text(
            WORKFLOW.format(
                endpoint=urls["base_url"], repo=repo, steps=steps, max_steps=steps * 2 + 20
            ),
            encoding="utf-8",
        )
        db = f"sqlite:///{folder / 'runs.db'}"
        before = metrics(urls["root"])
        t0 = time.perf_counter()
        env = {**os.environ, "MARATHON_HOME": str(folder / "home")}
        done = subprocess.run(
            [sys.executable, "-m", "pilot", "run", str(workflow), "--db", db, "--json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
        after = metrics(urls["root"])
    finally:
        sim.kill()
        sim.wait()
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not events:
        last = json.dumps(events[-1]) if events else ""
        raise RuntimeError(f"pilot run failed ({done.returncode}): {done.stderr[-2000:]} {last}")
    run_id = events[0]["run_id"]
    compactions = [e for e in events if e["type"] == "compaction"]
    requests = sum(1 for e in events if e["type"] == "model_request")
    queries = after["queries"] - before["queries"]
    hits = after["hits"] - before["hits"]
    figures: dict[str, Any] = {
        "steps": steps,
        "window": window,
        "kv_cache_tokens": kv_tokens,
        "run": run_id,
        "status": events[-1].get("status"),
        "model_requests": requests,
        "compactions": len(compactions),
        "compaction_sources": [c.get("summary_source") for c in compactions],
        "prompt_tokens": queries,
        "cached_tokens": hits,
        "computed_tokens": queries - hits,
        "hit_rate": hits / queries if queries else None,
        "preemptions": after["preemptions"] - before["preemptions"],
        "wall_s": wall,
    }
    if replay is not None:
        from pilot.front.replay_export import export_run, write_replay
        from pilot.store.event_store import EventStore

        lines = export_run(
            EventStore(db),
            run_id,
            source=f"bench.prefix_cache: {steps} steps, window {window}, brain sim",
        )
        write_replay(lines, replay)
        figures["replay"] = str(replay)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--window", type=int, default=32768, help="The sim's max_model_len.")
    parser.add_argument("--kv-tokens", type=int, default=262144, help="The sim's KV cache.")
    parser.add_argument("--replay", type=Path, help="Also write the run as a replay file.")
    parser.add_argument("--json", type=Path, help="Write the figures as JSON.")
    args = parser.parse_args(argv)
    figures = run_once(args.steps, args.window, args.kv_tokens, args.replay)
    print(json.dumps(figures, indent=2))
    if args.json:
        write_json(str(args.json), figures)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_sim":
        sim_child(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(main())
