"""Many runs at once in one pilot process, against a simulated vLLM with a fixed token latency.

For each K in 1, 8, 32, 128, 256, a fresh pilot process drives K runs side by side on one event
loop, one EventStore (SQLite, the default durability) and one shared HTTP client
(``OpenAIModelClient``, as ``Runner`` shares one per endpoint), each run S steps of one tool call
and then ``finish``. The model is ``brain.sim`` in its own process (so its CPU is not the
pilot's), with a fixed TTFT and per-token latency and ``max_num_seqs`` above K, so the server
never queues: ideally K runs take as long as one. The tools are the real
registry's (``RegistryExecutor``: the 12 default tools' schemas in every request, every call
validated), with ``read_file`` answering a fixed short text without I/O; nothing mutates, so no
git snapshots. The figure is the pilot's own overhead: the loop, the event store, the registry,
the token counting and the HTTP client. Runs go through ``pilot.run.runner``'s ``RunSession.emit``
(append, committed, then fold) and ``AgentLoop``, like ``pilot run``, minus git workspace setup
and the lease-renewal task (``LEFT_OUT``, printed with the figures).

    .venv/bin/python -m bench.parallel                       # K = 1 8 32 128 256, 10 steps
    .venv/bin/python -m bench.parallel --runs 1 128 --steps 20 --itl 0.02
    .venv/bin/python -m bench.parallel --runs 1 128 --repeats 10  # median and range of 10 sweeps

Figures: wall time for all K runs relative to one run (target: 128 runs within 1.25x), pilot
CPU time per step (``process_time`` of the pilot process / steps), peak RSS of the pilot
process. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import markdown_table, peak_rss_mib, write_json

ROOT = Path(__file__).resolve().parent.parent
LEFT_OUT = (
    "read_file's file I/O: it keeps its name, description and argument model (the registry "
    "sends the 12 default tools' schemas and validates every call) but answers a fixed text",
    "the git workspace: no set-up, no snapshot (bench.snapshots measures snapshots)",
    "Runner.start / Runner.resume and the lease-renewal task: the runs go through RunSession.emit "
    "and AgentLoop directly",
)
"""What this bench does not run of a real ``pilot run --parallel``, printed with its figures."""
ASSISTANT_TEXT = "Reading the next module."


# -- the simulated server (its own process) ---------------------------------------------------


def sim_child(ready_file: str, ttft: float, itl: float, max_num_seqs: int) -> None:
    """Serve the sim until killed; write its base URL to ``ready_file`` once it answers."""
    from brain.sim.config import SimConfig, Timing
    from brain.sim.policy import SimChatRequest, SimTurn, assistant_count
    from brain.sim.server import running_sim

    class StepsPolicy:
        """Step k of a run reads a file; after ``steps`` steps (from the prompt) it finishes."""

        def respond(self, request: SimChatRequest) -> SimTurn:
            done = assistant_count(request.messages)
            first_user = next(m.text for m in request.messages if m.role == "user")
            steps = int(first_user.rsplit("steps=", 1)[1].split()[0])
            if done < steps:
                args = json.dumps({"path": f"src/mod_{done:03d}.py"})
                return SimTurn(content=ASSISTANT_TEXT, tool_calls=(("read_file", args),))
            return SimTurn(content="Done.", tool_calls=(("finish", '{"summary": "done"}'),))

    config = SimConfig(
        timing=Timing(ttft=ttft, itl=itl),
        max_num_seqs=max_num_seqs,
        max_model_len=32768,
    )
    with running_sim(config, policy=StepsPolicy()) as sim:
        write_json(ready_file, {"base_url": sim.openai_base_url})
        while True:
            time.sleep(3600)


def start_sim(ttft: float, itl: float, max_num_seqs: int) -> tuple[subprocess.Popen, str]:
    folder = tempfile.mkdtemp(prefix="bench-sim-")
    ready = Path(folder) / "ready.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.parallel", "_sim", str(ready), str(ttft), str(itl),
         str(max_num_seqs)],
        cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the simulated server did not start")
        time.sleep(0.05)
    time.sleep(0.05)
    return proc, json.loads(ready.read_text())["base_url"]


# -- the pilot process ------------------------------------------------------------------------


def pilot_child(
    runs: int, steps: int, base_url: str, db: str, out: str, stream_interval: int | None = None
) -> None:
    from pilot import events as ev
    from pilot.agent.context import ServerCounts
    from pilot.agent.loop import AgentLoop
    from pilot.agent.progress import ProgressLimits
    from pilot.agent.state import RunState
    from pilot.heap import settle_startup_heap
    from pilot.model.client import OpenAIModelClient
    from pilot.model.settings import ClientSettings
    from pilot.run.runner import Runner, RunSession
    from pilot.store.event_store import EventStore
    from pilot.tactics.small_models import SmallModelTactics
    from pilot.workflow.plan import ModelPlan, PhasePlan, RunPlan
    from pilot.workspace.executor import RegistryExecutor
    from tools.base import ToolResult
    from tools.registry import ToolRegistry, default_registry

    class NoIORead:
        """read_file as the model sees it (name, description, argument model: the registry
        validates every call), answering a fixed short text without touching the disk."""

        mutates = False
        blocks = False  # no I/O: run on the loop, as the real finish tool is

        def __init__(self, real: Any) -> None:
            self.name, self.description, self.args_model = real.name, real.description, (
                real.args_model
            )  # fmt: skip

        def run(self, args: Any, ctx: Any) -> ToolResult:
            return ToolResult.ok(f"contents of {args.path}: 42")

    class NoSnapshots:
        """WorkspaceOps: nothing mutates (read_file and finish only), so nothing to snapshot."""

        def snapshot(self, message: str) -> tuple[str, str | None]:
            raise AssertionError("nothing mutates")

        def restore(self, snapshot: str, head: str | None) -> None:
            raise AssertionError("nothing mutates")

    defaults = default_registry()
    registry = ToolRegistry(
        NoIORead(defaults.get(n)) if n == "read_file" else defaults.get(n) for n in defaults.names()
    )
    names = registry.names()  # every default tool's schema goes out with each request

    async def main() -> dict[str, Any]:
        store = EventStore(f"sqlite:///{db}")
        runner = Runner(store=store, registry=registry)
        client = OpenAIModelClient(
            base_url, ClientSettings(request_timeout=600, idle_timeout=120, server_wait=60)
        )
        tools = RegistryExecutor(
            registry=registry,
            workspace_root=Path(db).parent,
            artifacts_dir=Path(db).parent / "artifacts",
            settings={},
            env_allowlist=[],
            sandbox="none",
            work_branch=None,
        )
        workspace_ops = NoSnapshots()
        counts = ServerCounts()
        folder = str(Path(db).parent)

        def plan_for(k: int) -> RunPlan:
            return RunPlan(
                workflow_name="parallel",
                system="You are a careful coding agent.",
                phases=[
                    PhasePlan(name="work", prompt=f"Task {k}: steps={steps} go", tools=list(names))
                ],
                tools=list(names),
                model=ModelPlan(
                    endpoint=base_url,
                    name="auto",
                    max_tokens=256,
                    stream_interval=stream_interval,
                ),
                workspace=folder,
                branch=f"run-{k}",
            )

        async def one(k: int) -> tuple[str, int]:
            plan = plan_for(k)
            run_id = store.create_run(
                workflow_name="parallel",
                workflow_path="parallel",
                workflow_text="",
                params={},
                workspace=f"{folder}/ws-{k}",
                owner=runner.owner,
            )
            run = RunSession(
                runner, run_id, plan, RunState(progress_limits=ProgressLimits.of_plan(plan))
            )
            run.emit(
                ev.RunStarted(
                    workflow="parallel",
                    workspace=f"{folder}/ws-{k}",
                    branch=plan.branch,
                    endpoint=base_url,
                    system=plan.system,
                    phases=["work"],
                    owner=runner.owner,
                )
            )
            await run._resolve_model(client)
            loop = AgentLoop(
                plan,
                run.state,
                run.emit,
                client,
                tools,
                workspace_ops,
                tactics=SmallModelTactics(),
                stop=asyncio.Event(),
                server_counts=counts,  # shared by the runs, as the Runner does
            )
            state = await loop.run()
            store.release_lease(run_id, runner.owner)
            return (state.finished.status if state.finished else "unfinished"), state.steps

        cpu0, wall0 = time.process_time(), time.perf_counter()
        results = await asyncio.gather(*(one(k) for k in range(runs)))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        await client.aclose()
        total_steps = sum(s for _, s in results)
        return {
            "runs": runs,
            "steps_per_run": steps,
            "wall_s": wall,
            "cpu_s": cpu,
            "total_steps": total_steps,
            "cpu_ms_per_step": cpu / total_steps * 1000,
            "succeeded": sum(1 for status, _ in results if status == "succeeded"),
            "peak_rss_mib": peak_rss_mib(),
        }

    settle_startup_heap()  # as `pilot run` does before its loop starts
    write_json(out, asyncio.run(main()))


# -- the driver -------------------------------------------------------------------------------


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc), 0 where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_bench(
    runs_list: list[int],
    steps: int,
    ttft: float,
    itl: float,
    json_out: Path | None,
    stream_interval: int | None = None,
    repeats: int = 1,
    plot: Path | None = None,
) -> list[dict]:
    sim, base_url = start_sim(ttft, itl, max(max(runs_list), 16) * 2)
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-parallel-") as tmp:
            for repeat, runs in ((r, k) for r in range(repeats) for k in runs_list):
                db = Path(tmp) / f"r{repeat}-k{runs}.db"
                out = Path(tmp) / f"r{repeat}-k{runs}.json"
                argv = [sys.executable, "-m", "bench.parallel", "_pilot", str(runs), str(steps),
                        base_url, str(db), str(out), str(stream_interval or "-")]  # fmt: skip
                sim_cpu = process_cpu_s(sim.pid)
                proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    raise RuntimeError(f"pilot with {runs} runs failed:\n{proc.stderr}")
                result = json.loads(out.read_text())
                result["sim_cpu_s"] = process_cpu_s(sim.pid) - sim_cpu
                result["repeat"] = repeat
                results.append(result)
                print(
                    f"  {runs:4d} runs: {result['wall_s']:6.2f} s wall, "
                    f"{result['cpu_ms_per_step']:.2f} ms CPU/step, "
                    f"{result['peak_rss_mib']:.0f} MiB, "
                    f"{result['succeeded']}/{runs} succeeded",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        sim.kill()
        sim.wait()
    for repeat in range(repeats):
        sweep = [r for r in results if r["repeat"] == repeat]
        one = next((r["wall_s"] for r in sweep if r["runs"] == 1), sweep[0]["wall_s"])
        for r in sweep:
            r["wall_vs_one"] = r["wall_s"] / one  # against the same sweep's one run
    print(
        f"\nsim: ttft {ttft * 1000:.0f} ms, itl {itl * 1000:.0f} ms/token, "
        f"max_num_seqs {max(max(runs_list), 16) * 2}; {steps} steps + finish per run; "
        f"stream_interval {stream_interval or 'the server default (1)'}\n"
    )
    print(
        markdown_table(
            [
                "runs at once",
                "wall s",
                "wall / one run",
                "steps",
                "pilot CPU ms/step",
                "pilot CPU s",
                "sim CPU s",
                "peak RSS MiB",
                "succeeded",
            ],
            [
                [
                    r["runs"],
                    r["wall_s"],
                    r["wall_vs_one"],
                    r["total_steps"],
                    r["cpu_ms_per_step"],
                    r["cpu_s"],
                    r["sim_cpu_s"],
                    r["peak_rss_mib"],
                    f"{r['succeeded']}/{r['runs']}",
                ]
                for r in results
            ],
        )
    )
    if repeats > 1:
        print(f"\n{repeats} sweeps, K in order within each; wall / one run per sweep:\n")
        print(markdown_table(["runs at once", "median wall / one run", "min", "max",
                              "median pilot CPU ms/step", "each sweep"],
                             [_spread(runs, [r for r in results if r["runs"] == runs])
                              for runs in runs_list]))  # fmt: skip
    print("\nLeft out of each run (each a part of a real `pilot run --parallel`):")
    print("\n".join(f"- {item}" for item in LEFT_OUT))
    if json_out is not None:
        json_out.write_text(json.dumps(results, indent=1))
    if plot is not None:
        from bench.plots import plot_parallel

        plot_parallel(results, plot)
        print(f"\nplot: {plot}")
    return results


def _spread(runs: int, sweeps: list[dict]) -> list[Any]:
    """One K's row over the sweeps: the machine's speed moves between them, so the median
    and the range say more than any one sweep."""
    ratios = [r["wall_vs_one"] for r in sweeps]
    return [
        runs,
        statistics.median(ratios),
        min(ratios),
        max(ratios),
        statistics.median(r["cpu_ms_per_step"] for r in sweeps),
        " ".join(f"{ratio:.2f}" for ratio in ratios),
    ]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_sim":
        sim_child(argv[1], float(argv[2]), float(argv[3]), int(argv[4]))
        return
    if argv and argv[0] == "_pilot":
        interval = int(argv[6]) if len(argv) > 6 and argv[6] != "-" else None
        pilot_child(int(argv[1]), int(argv[2]), argv[3], argv[4], argv[5], interval)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 8, 32, 128, 256])
    parser.add_argument("--steps", type=int, default=10, help="tool steps per run (+ finish)")
    parser.add_argument("--ttft", type=float, default=0.1, help="sim time to first token, s")
    parser.add_argument("--itl", type=float, default=0.03, help="sim seconds per token")
    parser.add_argument(
        "--stream-interval",
        type=int,
        default=None,
        help="the runs' model.stream_interval (tokens per streamed chunk; default: the server's)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="sweeps in a row against the same sim; the summary gives each K's median and range",
    )
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--plot", type=Path, help="also draw the figures (PNG; needs matplotlib)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    run_bench(
        args.runs,
        args.steps,
        args.ttft,
        args.itl,
        args.json,
        args.stream_interval,
        args.repeats,
        args.plot,
    )


if __name__ == "__main__":
    main()
