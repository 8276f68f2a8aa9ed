"""Marathon's pilot against LangGraph on the durable-loop workload, side by side, one sitting.

The workload is exactly ``shared/reference/bench-workload.md``: one run of N steps, each an
assistant message (1,200 chars, one tool call) and a 2,048-char tool result, the model and the
tools no-I/O lookups. Each repeat of a config runs two fresh processes:

1. **run**: opens a fresh database, runs steps 1..N, and at the entry of model call N+1 writes
   its figures and SIGKILLs itself (no cleanup, no flush of anything still queued);
2. **resume**: a fresh interpreter opens the same database, loads the latest state, runs step
   N+1 and the final answer, and exits.

Marathon goes through the path ``pilot run`` and ``pilot resume`` take: the CLI's module
imported, ``pilot.run.launch``'s ``start_run`` / ``resume_run`` on the real ``Runner`` (lease,
git workspace, the default registry's 12 tools with their argument validation, the workflow's
durability), the CLI's own printer for a non-terminal output (``pilot.front.printer``: CI, a
log file, ``--detach``) writing every event to a log file, and the real model client made as
``Runner`` makes it, whose SDK is imported and whose SDK client is made at the model check
before the loop, as the real first request (``GET /v1/models``) does; the workload's answers
come from a no-I/O stand-in behind the ``ModelClient`` protocol instead of the HTTP round
trip, and ``read_file`` / ``write_file`` answer without I/O. What it leaves out is printed
with the figures (``LEFT_OUT``).
LangGraph is the canonical ReAct graph (agent node with a ``BaseChatModel`` subclass,
prebuilt ``ToolNode`` + ``tools_condition``) on ``SqliteSaver`` with ``durability="sync"``;
``lg-delta`` declares the messages channel as the beta ``DeltaChannel(_messages_delta_reducer)``.

Configs alternate inside each repeat, so every ratio is taken from runs made minutes apart.
Run from the repository root::

    .venv/bin/python -m bench.vs_langgraph                  # N = 100, 1000, 3000
    .venv/bin/python -m bench.vs_langgraph --plot vs-langgraph.png
    .venv/bin/python -m bench.vs_langgraph --n 1000 --repeats 3
    .venv/bin/python -m bench.vs_langgraph profile --n 3000 # where the pilot's time goes

A benchmark, not a test: it asserts nothing (``tests/test_bench_smoke.py`` runs it tiny).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    Workload,
    checkpoint_and_size,
    decile_ms,
    ensure_bytecode,
    markdown_table,
    median,
    peak_rss_mib,
    write_json,
)

ROOT = Path(__file__).resolve().parent.parent
RUN_ID = "bench0001"
THREAD = {"configurable": {"thread_id": "bench-thread"}, "recursion_limit": 10_000_000}


@dataclass(frozen=True)
class Config:
    name: str
    framework: str  # "marathon" | "langgraph"
    synchronous: str  # SQLite synchronous: "normal" | "full" | "off"
    variant: str = ""  # langgraph: "delta" | "default"
    max_n: int | None = None  # not run above this N (lg-default grows quadratically)


CONFIGS = {
    c.name: c
    for c in (
        Config("marathon", "marathon", "normal"),
        Config("marathon-full", "marathon", "full"),
        Config("marathon-off", "marathon", "off"),
        Config("lg-delta-sync", "langgraph", "full", "delta"),
        Config("lg-delta-off", "langgraph", "off", "delta"),
        Config("lg-default-sync", "langgraph", "full", "default", max_n=100),
        Config("lg-default-off", "langgraph", "off", "default", max_n=100),
    )
}
DEFAULT_CONFIGS = (
    "marathon",
    "lg-delta-sync",
    "marathon-full",
    "marathon-off",
    "lg-delta-off",
    "lg-default-sync",
)


class Clock:
    """Entries of every model call (wall and CPU), and the time spent inside model and tools."""

    def __init__(self, expected: int) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.model_s = 0.0
        self.tool_s = 0.0
        self.wall_reserve = expected

    def enter(self) -> None:
        self.wall.append(time.perf_counter())
        self.cpu.append(time.process_time())


def run_figures(clock: Clock, n: int, opened: float, first_call: float) -> dict[str, Any]:
    """What the run process reports at the entry of model call N+1, before it is killed."""
    wall, cpu = clock.wall, clock.cpu
    return {
        "n": n,
        "ms_per_step": (wall[n] - wall[0]) / n * 1000,
        "cpu_ms_per_step": (cpu[n] - cpu[0]) / n * 1000,
        "first_decile_ms": decile_ms(wall[: n + 1], first=True),
        "last_decile_ms": decile_ms(wall[: n + 1], first=False),
        "open_to_first_model_call_ms": (first_call - opened) * 1000,
        "model_s": clock.model_s,
        "tool_s": clock.tool_s,
        "peak_rss_mib": peak_rss_mib(),
    }


def die(out: str, figures: dict[str, Any]) -> None:
    """The crash at model call N+1: figures on disk, then SIGKILL (nothing else runs)."""
    write_json(out, figures)
    os.kill(os.getpid(), signal.SIGKILL)


# -- Marathon ---------------------------------------------------------------------------------


def child_setup(mode: str, n: int) -> tuple[Workload, int, Clock, dict[str, float]]:
    """What both frameworks' children start with: the pre-generated steps they will run
    (1..N+1 for ``run``, N+1 for ``resume``), a clock for the model calls, and marks."""
    workload = Workload()
    first_step = 1 if mode == "run" else n + 1
    workload.prepare(first_step, n + 1)
    return workload, first_step, Clock(n + 2), {}


WORKFLOW = """\
version: 1
name: bench
description: the durable-loop workload of shared/reference/bench-workload.md
model:
  endpoint: http://127.0.0.1:9/v1
  name: workload
workspace:
  path: "{workspace}"
  init: true
  branch: "bench/{{{{ run.id }}}}"
tools: [{tools}]
sandbox: none
limits:
  max_steps: {max_steps}
  max_tokens: {max_tokens}
  max_wall_time: 24h
system: |
{system}
phases:
  - name: work
    prompt: |
{user}
"""
"""The workload as a workflow file: every default tool offered, the system prompt and task of
the workload, limits that never stop it (``pilot run`` loads the same kind of file)."""

LEFT_OUT = (
    "the HTTP round trip and the request's JSON body (the answers come from a no-I/O "
    "ModelClient; the real client is made, its SDK imported and built at the model check)",
    "read_file's and write_file's file I/O and write_file's snapshot (the tools do no I/O, as "
    "the workload says; they keep the real names, descriptions and argument models, so the "
    "registry validates every call; snapshot cost: python -m bench.snapshots)",
    "the CLI's argument parsing (its module, typer and rich are imported) and the live view: "
    "the output is not a terminal, so the CLI's printer writes plain lines to a log file",
)
"""What the Marathon configs do not run of a real ``pilot run``, printed with the figures."""


def workflow_text(workload: Workload, workspace: Path, names: list[str], n: int) -> str:
    def block(text: str, indent: int) -> str:
        return "\n".join(" " * indent + line for line in text.splitlines())

    return WORKFLOW.format(
        workspace=workspace,
        tools=", ".join(names),
        max_steps=10 * n + 100,
        max_tokens=10_000 * n + 100_000,
        system=block(workload.system, 2),
        user=block(workload.user, 6),
    )


def workload_registry(workload: Workload, clock: Clock) -> Any:
    """The default tool set, with read_file and write_file answering from the workload: same
    names, descriptions and argument models (so ``ToolRegistry.invoke`` validates each call),
    no I/O, nothing to snapshot."""
    from tools.base import ToolResult
    from tools.registry import ToolRegistry, default_registry

    class WorkloadTool:
        mutates = False  # nothing is written: the workload's tools do no I/O
        blocks = False  # so they run on the loop, as `finish` does

        def __init__(self, real: Any) -> None:
            self.name, self.description = real.name, real.description
            self.args_model = real.args_model

        def run(self, args: Any, ctx: Any) -> ToolResult:
            t = time.perf_counter()
            result = ToolResult.ok(workload.result_for(args.path))
            clock.tool_s += time.perf_counter() - t
            return result

    defaults = default_registry()
    return ToolRegistry(
        WorkloadTool(defaults.get(name)) if name in ("read_file", "write_file") else
        defaults.get(name)
        for name in defaults.names()
    )  # fmt: skip


def marathon_child(
    mode: str,
    db: Path,
    n: int,
    synchronous: str,
    out: str,
    on_first_call: Callable[[], None] | None = None,
) -> None:
    """One Marathon process: ``run`` (``start_run``, steps 1..N, killed at call N+1) or
    ``resume`` (``resume_run`` in a fresh process), through the real ``Runner``.
    ``on_first_call`` runs at the entry of model call 1 (``profile`` starts its profiler)."""
    started = time.perf_counter()
    import asyncio

    import pilot.front.cli  # noqa: F401 (what `pilot run` / `pilot resume` import first)
    import pilot.run.runner as runner_module
    from pilot.front.printer import LinePrinter, plain_render
    from pilot.heap import settle_startup_heap
    from pilot.model.client import OpenAIModelClient
    from pilot.model.types import ChatRequest, ModelResponse, ServedModel, ToolCallOut, Usage
    from pilot.run.launch import load_for_run, resume_run, start_run
    from pilot.run.runner import Runner
    from pilot.store.event_store import EventStore

    imported = time.perf_counter()
    workload, first_step, clock, marks = child_setup(mode, n)
    registry = workload_registry(workload, clock)
    settle_startup_heap()  # as `pilot run` and `pilot resume` do before their loop starts

    class WorkloadModel:
        """The workload's model behind ``ModelClient``: step i's answer, or the final one.

        The loop's ``ModelClient`` seam with no I/O and no copy of the request kept (the
        tests' ``ScriptedModelClient`` keeps every request, which a long run must not).
        """

        def __init__(self, first: int) -> None:
            self.next_step = first
            self.real: OpenAIModelClient | None = None  # made as Runner makes it

        async def complete(self, request: ChatRequest, *, on_wait: Any = None) -> ModelResponse:
            clock.enter()
            i = self.next_step
            self.next_step += 1
            if i == 1 and on_first_call is not None:
                on_first_call()
            if mode == "run" and i == n + 1:
                figures = run_figures(clock, n, marks["opened"], marks["first_call"])
                die(out, {**figures, "mode": mode, "run_id": marks["run_id"],
                          "tools_sent": len(request.tools or [])})  # fmt: skip
            if mode == "resume" and i == n + 2:
                marks["step_durable"] = time.perf_counter()
            marks.setdefault("first_call", time.perf_counter())
            t = time.perf_counter()
            if i == n + 2:
                answer = ModelResponse(
                    content=workload.final,
                    tool_calls=[
                        ToolCallOut(
                            id="call_final",
                            name="finish",
                            arguments=json.dumps({"summary": "done"}),
                        )
                    ],
                    finish_reason="tool_calls",
                    usage=Usage(prompt_tokens=400, completion_tokens=200),
                )
            else:
                step = workload.step(i)
                answer = ModelResponse(
                    content=step.text,
                    tool_calls=[
                        ToolCallOut(id=step.call_id, name=step.tool, arguments=step.arguments_json)
                    ],
                    finish_reason="tool_calls",
                    usage=Usage(prompt_tokens=400, completion_tokens=300),
                )
            clock.model_s += time.perf_counter() - t
            return answer

        async def list_models(self, *, on_wait: Any = None) -> list[ServedModel]:
            # A run's and a resume's first request (the model check before the loop) imports
            # the SDK and makes its client: that work here, without the round trip.
            if self.real is not None:
                t = time.perf_counter()
                sdk_was_imported = "openai" in sys.modules
                self.real._client  # noqa: B018
                marks["sdk_ms"] = marks.get("sdk_ms", 0.0) + (time.perf_counter() - t) * 1000
                marks["sdk_imported_here"] = not sdk_was_imported
                self.real = None
            return [ServedModel(id="workload", max_model_len=None)]

        async def count_tokens(self, model: str, messages: Any, tools: Any) -> int | None:
            return None

        async def aclose(self) -> None:
            pass

    client = WorkloadModel(first_step)

    def client_for(plan: Any) -> WorkloadModel:
        marks["run_id"] = plan.branch.rsplit("/", 1)[-1]
        client.real = OpenAIModelClient(plan.model.endpoint, plan.model.client)
        return client

    real_load = runner_module.load_run_state

    def timed_load(*args: Any, **kwargs: Any) -> Any:  # the bench's stopwatch around the load
        marks["loading"] = time.perf_counter()
        loaded = real_load(*args, **kwargs)
        marks["loaded"] = time.perf_counter()
        marks["durable_steps"] = sum(1 for m in loaded[0].messages if m["role"] == "tool")
        return loaded

    runner_module.load_run_state = timed_load
    import pilot.store.checkpoint as checkpoint_module

    real_loader = checkpoint_module._message_loader

    def timed_loader(*args: Any, **kwargs: Any) -> Any:  # the conversation's read, timed
        load = real_loader(*args, **kwargs)

        def timed(messages: list[Any]) -> None:
            t = time.perf_counter()
            load(messages)
            marks["read_ms"] = marks.get("read_ms", 0.0) + (time.perf_counter() - t) * 1000

        return timed

    checkpoint_module._message_loader = timed_loader
    folder = db.parent

    async def drive() -> dict[str, Any]:
        figures: dict[str, Any] = {"mode": mode, "import_s": imported - started}
        opened = marks["opened"] = time.perf_counter()
        store = EventStore(f"sqlite:///{db}", durability=synchronous)
        runner = Runner(store=store, registry=registry, client_factory=client_for)
        runner.observers.append(printer)
        if mode == "run":
            workspace = folder / "ws"
            workspace.mkdir()
            path = folder / "bench.yaml"
            path.write_text(workflow_text(workload, workspace, registry.names(), n))
            loaded = load_for_run(path, [])
            outcome = await start_run(runner, loaded)
            raise AssertionError(f"the run process must be killed at call N+1: {outcome}")
        record = store.find_run((folder / "run_id").read_text())
        outcome = await resume_run(runner, record)
        done = time.perf_counter()
        state = outcome.state
        figures.update(
            load_state_ms=(marks["loaded"] - marks["loading"]) * 1000,
            open_to_state_loaded_ms=(marks["loaded"] - opened) * 1000,
            durable_steps=marks["durable_steps"],
            open_to_first_model_call_ms=(marks["first_call"] - opened) * 1000,
            sdk_ms=marks.get("sdk_ms", 0.0),
            conversation_read_ms=marks.get("read_ms", 0.0),
            open_to_step_durable_ms=(marks["step_durable"] - opened) * 1000,
            open_to_done_ms=(done - opened) * 1000,
            status=outcome.status,
            answer_ok=any(m.get("content") == workload.final for m in state.messages[-3:]),
            openai_imported="openai" in sys.modules,
            peak_rss_mib=peak_rss_mib(),
        )
        return figures

    # The CLI's printer when stdout is not a terminal: plain lines, written off the step.
    with (
        open(folder / f"{mode}.log", "w") as log,
        LinePrinter(log, plain_render(with_run_id=False)) as printer,
    ):
        figures = asyncio.run(drive())
    write_json(out, figures)


# -- LangGraph --------------------------------------------------------------------------------


def langgraph_child(mode: str, db: Path, n: int, synchronous: str, variant: str, out: str) -> None:
    started = time.perf_counter()
    import sqlite3
    from typing import Annotated, TypedDict

    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    imported = time.perf_counter()
    workload, first_step, clock, marks = child_setup(mode, n)
    counter = {"next": first_step}

    class WorkloadChat(BaseChatModel):
        """The workload's model as a LangChain chat model: step i's answer, or the final one."""

        @property
        def _llm_type(self) -> str:
            return "workload"

        def bind_tools(self, tools: Any, **kwargs: Any) -> WorkloadChat:
            return self

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any):
            clock.enter()
            i = counter["next"]
            counter["next"] += 1
            if mode == "run" and i == n + 1:
                die(
                    out,
                    {**run_figures(clock, n, marks["opened"], marks["first_call"]), "mode": mode},
                )
            if mode == "resume" and i == n + 2:
                marks["step_durable"] = time.perf_counter()
            marks.setdefault("first_call", time.perf_counter())
            t = time.perf_counter()
            if i == n + 2:
                message = AIMessage(content=workload.final, id="ai_final")
            else:
                step = workload.step(i)
                message = AIMessage(
                    content=step.text,
                    id=f"ai_{i:06d}",
                    tool_calls=[{"name": step.tool, "args": step.arguments, "id": step.call_id}],
                )
            clock.model_s += time.perf_counter() - t
            return ChatResult(generations=[ChatGeneration(message=message)])

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        t = time.perf_counter()
        result = workload.result_for(path)
        clock.tool_s += time.perf_counter() - t
        return result

    @tool
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        t = time.perf_counter()
        result = workload.result_for(path)
        clock.tool_s += time.perf_counter() - t
        return result

    if variant == "delta":
        from langgraph.channels.delta import DeltaChannel
        from langgraph.graph.message import _messages_delta_reducer

        state_schema: Any = TypedDict(  # functional form: annotations are not strings here
            "DeltaState", {"messages": Annotated[list, DeltaChannel(_messages_delta_reducer)]}
        )
    else:
        state_schema = MessagesState

    model = WorkloadChat().bind_tools([read_file, write_file])
    system = SystemMessage(content=workload.system)

    def agent(state: Any) -> dict[str, Any]:
        return {"messages": [model.invoke([system, *state["messages"]])]}

    opened = marks["opened"] = time.perf_counter()
    conn = sqlite3.connect(db, check_same_thread=False)
    if synchronous == "off":
        conn.execute("PRAGMA synchronous=OFF")
    saver = SqliteSaver(conn)
    builder = StateGraph(state_schema)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([read_file, write_file]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=saver)
    figures: dict[str, Any] = {"mode": mode, "import_s": imported - started}
    if mode == "run":
        graph.invoke(
            {"messages": [HumanMessage(content=workload.user, id="user_0")]},
            THREAD,
            durability="sync",
        )
        raise AssertionError("the run process must be killed at model call N+1")
    loading = time.perf_counter()
    snapshot = graph.get_state(THREAD)
    loaded = time.perf_counter()
    messages = snapshot.values.get("messages", [])
    figures["load_state_ms"] = (loaded - loading) * 1000
    figures["open_to_state_loaded_ms"] = (loaded - opened) * 1000
    figures["durable_steps"] = sum(1 for m in messages if isinstance(m, ToolMessage))
    result = graph.invoke(None, THREAD, durability="sync")
    done = time.perf_counter()
    figures.update(
        open_to_first_model_call_ms=(marks["first_call"] - opened) * 1000,
        open_to_step_durable_ms=(marks["step_durable"] - opened) * 1000,
        open_to_done_ms=(done - opened) * 1000,
        status="succeeded",
        answer_ok=result["messages"][-1].content == workload.final,
        peak_rss_mib=peak_rss_mib(),
    )
    conn.close()
    write_json(out, figures)


# -- the driver -------------------------------------------------------------------------------


def child_argv(config: Config, mode: str, db: Path, n: int, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bench.vs_langgraph",
        "_child",
        config.name,
        mode,
        str(db),
        str(n),
        str(out),
    ]


def one_repeat(config: Config, n: int, workdir: Path) -> dict[str, Any]:
    """Run (killed at call N+1), measure the files, resume in a fresh process, measure again."""
    folder = Path(tempfile.mkdtemp(prefix=f"{config.name}-{n}-", dir=workdir))
    db = folder / "bench.db"
    run_out, resume_out = folder / "run.json", folder / "resume.json"
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("MARATHON_FAILPOINT", None)
    proc = subprocess.run(child_argv(config, "run", db, n, run_out), cwd=ROOT, env=env, text=True,
                          capture_output=True, check=False)  # fmt: skip
    if proc.returncode != -signal.SIGKILL or not run_out.exists():
        raise RuntimeError(f"{config.name} run at N={n} did not crash as planned:\n{proc.stderr}")
    run = json.loads(run_out.read_text())
    if "run_id" in run:
        (folder / "run_id").write_text(run["run_id"])
    side = side_files_bytes(folder)
    t, cpu = time.perf_counter(), children_cpu_s()
    proc = subprocess.run(child_argv(config, "resume", db, n, resume_out), cwd=ROOT, env=env,
                          text=True, capture_output=True, check=False)  # fmt: skip
    resume_wall, resume_cpu = time.perf_counter() - t, children_cpu_s() - cpu
    if proc.returncode != 0:
        raise RuntimeError(f"{config.name} resume at N={n} failed:\n{proc.stderr}")
    resume = json.loads(resume_out.read_text())
    size = checkpoint_and_size(db)
    return {
        "config": config.name,
        "n": n,
        **{k: v for k, v in run.items() if k != "mode"},
        "run_peak_rss_mib": run["peak_rss_mib"],
        "resume_peak_rss_mib": resume["peak_rss_mib"],
        "db_bytes": size,
        "db_bytes_per_step": size / n,
        **side,
        "storage_bytes_per_step": (size + side["checkpoint_bytes_at_kill"]) / n,
        "load_state_ms": resume["load_state_ms"],
        "open_to_state_loaded_ms": resume["open_to_state_loaded_ms"],
        "resume_open_to_first_model_call_ms": resume["open_to_first_model_call_ms"],
        # the same span less the SDK's import and client (at the model check), and less that
        # and the conversation's read (the messages the checkpoint refers to): what is left
        # must not grow with N (issue 35)
        "resume_sdk_ms": resume.get("sdk_ms", 0.0),
        "resume_conversation_read_ms": resume.get("conversation_read_ms", 0.0),
        "resume_first_call_less_sdk_ms": resume["open_to_first_model_call_ms"]
        - resume.get("sdk_ms", 0.0),
        "resume_first_call_less_sdk_read_ms": resume["open_to_first_model_call_ms"]
        - resume.get("sdk_ms", 0.0)
        - resume.get("conversation_read_ms", 0.0),
        "resume_open_to_step_durable_ms": resume["open_to_step_durable_ms"],
        "resume_open_to_done_ms": resume["open_to_done_ms"],
        "resume_import_s": resume["import_s"],
        "resume_proc_wall_s": resume_wall,
        "resume_proc_cpu_s": resume_cpu,
        "durable_steps": resume["durable_steps"],
        "resume_ok": resume["status"] == "succeeded" and resume["answer_ok"],
        "resume_imported_openai": resume.get("openai_imported", False),
    }


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished children: a whole resume
    process, interpreter start and imports included."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def side_files_bytes(folder: Path) -> dict[str, int]:
    """What a Marathon run keeps beside its database at the kill: the state checkpoint (under
    ``checkpoints/``), the tools' artifacts and the workspace's git objects (its start commit
    and snapshot)."""

    def total(path: Path) -> int:
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0

    return {
        "checkpoint_bytes_at_kill": total(folder / "checkpoints") + total(folder / "artifacts"),
        "git_bytes_at_kill": total(folder / "ws" / ".git"),
    }


def langgraph_available() -> str | None:
    """None if LangGraph and its SQLite saver import, else why not."""
    try:
        import langgraph.checkpoint.sqlite
        import langgraph.graph  # noqa: F401
    except ImportError as exc:
        return f"LangGraph is not installed ({exc}); pip install -e '.[bench]'"
    return None


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median over repeats per (config, N)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["config"], r["n"]), []).append(r)
    rows = []
    for (name, n), items in groups.items():
        row: dict[str, Any] = {"config": name, "n": n, "repeats": len(items)}
        for key, value in items[0].items():
            if isinstance(value, int | float) and not isinstance(value, bool) and key != "n":
                row[key] = median([i[key] for i in items])
        row["durable_steps"] = min(i["durable_steps"] for i in items)
        row["resume_ok"] = all(i["resume_ok"] for i in items)
        rows.append(row)
    return rows


def print_tables(rows: list[dict[str, Any]], raw_per_step: dict[int, float]) -> str:
    main = markdown_table(
        [
            "config",
            "N",
            "ms/step",
            "CPU ms/step",
            "first 10%",
            "last 10%",
            "last/first",
            "DB KB/step",
            "DB / raw payload",
            "checkpoint KB/step",
            "load state ms",
            "open→state ms",
            "open→first call ms",
            "of which SDK ms",
            "of which read ms",
            "open→step N+1 committed ms",
            "resume proc wall s",
            "peak RSS run/resume MiB",
            "durable at kill",
        ],
        [
            [
                r["config"],
                r["n"],
                r["ms_per_step"],
                r["cpu_ms_per_step"],
                r["first_decile_ms"],
                r["last_decile_ms"],
                r["last_decile_ms"] / r["first_decile_ms"],
                r["db_bytes_per_step"] / 1000,
                r["db_bytes_per_step"] / raw_per_step[r["n"]],
                r["checkpoint_bytes_at_kill"] / r["n"] / 1000
                if "checkpoint_bytes_at_kill" in r
                else None,
                r["load_state_ms"],
                r["open_to_state_loaded_ms"],
                r["resume_open_to_first_model_call_ms"],
                r.get("resume_sdk_ms"),
                r.get("resume_conversation_read_ms"),
                r["resume_open_to_step_durable_ms"],
                r["resume_proc_wall_s"],
                f"{r['run_peak_rss_mib']:.0f} / {r['resume_peak_rss_mib']:.0f}",
                f"{r['durable_steps']} / {r['n']}" + ("" if r["resume_ok"] else " (resume FAILED)"),
            ]
            for r in sorted(rows, key=lambda r: (r["n"], r["config"]))
        ],
    )
    return main


def headline(rows: list[dict[str, Any]]) -> str:
    """The targets, from figures taken in this sitting: like with like first (fsync per commit
    on both sides), the default durability beside it. Each names its span: "per step" is the
    run process from the entry of model call 1 to the entry of call N+1 (the CLI's printer
    on, non-terminal); "resume process" is a whole fresh process (interpreter, imports, open,
    load, step N+1, the final answer, exit) as the parent's rusage counts it."""
    by = {(r["config"], r["n"]): r for r in rows}
    lines = []
    for n in sorted({r["n"] for r in rows}):
        m, mf, mo = (by.get((c, n)) for c in ("marathon", "marathon-full", "marathon-off"))
        lg, lgo = by.get(("lg-delta-sync", n)), by.get(("lg-delta-off", n))
        items = []
        if lg:
            for row, label in ((mf, "fsync per commit (marathon-full)"), (m, "default (marathon)")):
                if row:
                    items.append(
                        f"ms/step {label} / lg-delta-sync = {row['ms_per_step']:.3f} / "
                        f"{lg['ms_per_step']:.2f} = {row['ms_per_step'] / lg['ms_per_step']:.3f}"
                        + (" (per step, printer on; target <= 0.12)" if row is mf else "")
                    )
        if mo:
            items.append(f"CPU ms/step marathon-off = {mo['cpu_ms_per_step']:.3f} (target <= 0.30)")
            if lgo:
                items.append(
                    f"CPU-only ratio marathon-off / lg-delta-off = "
                    f"{mo['ms_per_step'] / lgo['ms_per_step']:.3f}"
                )
        for row in (mo, m):
            if row:
                items.append(
                    f"{row['config']} last/first 10% = "
                    f"{row['last_decile_ms'] / row['first_decile_ms']:.2f} (target <= 1.1)"
                )
                break
        if m:
            items.append(
                f"open->state loaded (marathon) = {m['open_to_state_loaded_ms']:.1f} ms "
                f"(load_run_state {m['load_state_ms']:.1f} ms; target <= 10)"
            )
            items.append(
                f"storage (marathon) = DB {m['db_bytes_per_step'] / 1000:.2f} + checkpoint "
                f"{m['checkpoint_bytes_at_kill'] / n / 1000:.2f} = "
                f"{m['storage_bytes_per_step'] / 1000:.2f} KB/step (target <= 5)"
            )
        if m and lg:
            items.append(
                f"resume process CPU marathon / lg-delta-sync = {m['resume_proc_cpu_s']:.2f} / "
                f"{lg['resume_proc_cpu_s']:.2f} s = "
                f"{m['resume_proc_cpu_s'] / lg['resume_proc_cpu_s']:.2f} (whole process; "
                "target <= 0.5)"
            )
            items.append(
                f"resume wall marathon / lg-delta-sync = {m['resume_proc_wall_s']:.2f} / "
                f"{lg['resume_proc_wall_s']:.2f} s = "
                f"{m['resume_proc_wall_s'] / lg['resume_proc_wall_s']:.2f}"
            )
        if items:
            lines.append(f"N={n}:\n  " + "\n  ".join(items))
    for key, label in (
        ("resume_open_to_first_model_call_ms", "resume open -> first model call"),
        ("resume_first_call_less_sdk_ms", "  the same less the SDK's import and client"),
        (
            "resume_first_call_less_sdk_read_ms",
            "  the same less the SDK and the conversation's read",
        ),
        ("resume_conversation_read_ms", "  the conversation's read alone"),
    ):
        firsts = {n: r[key] for (c, n), r in by.items() if c == "marathon" and key in r}
        if len(firsts) > 1 and min(firsts.values()) > 0:
            lo, hi = min(firsts), max(firsts)
            lines.append(
                f"{label} (marathon), N={lo} .. N={hi}: "
                + " / ".join(f"{firsts[n]:.1f}" for n in sorted(firsts))
                + f" ms = {firsts[hi] / firsts[lo]:.2f}x"
                + (" (target: flat, within 1.3x)" if "read alone" not in label else "")
            )
    return "\n".join(lines)


def run_bench(
    ns: list[int], names: list[str], repeats: int, out: Path | None, plot: Path | None = None
) -> list[dict]:
    missing = langgraph_available()
    configs = [CONFIGS[name] for name in names]
    if missing:
        print(f"skipping LangGraph configs: {missing}", file=sys.stderr)
        configs = [c for c in configs if c.framework != "langgraph"]
    results: list[dict[str, Any]] = []
    ensure_bytecode(ROOT)
    with tempfile.TemporaryDirectory(prefix="bench-vs-lg-") as tmp:
        for n in ns:
            for repeat in range(repeats):
                for config in configs:
                    if config.max_n is not None and n > config.max_n:
                        continue
                    t = time.perf_counter()
                    result = one_repeat(config, n, Path(tmp))
                    results.append(result)
                    print(
                        f"  N={n} #{repeat + 1} {config.name:16s} "
                        f"{result['ms_per_step']:7.3f} ms/step  "
                        f"cpu {result['cpu_ms_per_step']:7.3f}  "
                        f"{result['db_bytes_per_step'] / 1000:7.2f} KB/step  "
                        f"resume {result['resume_proc_wall_s']:.2f} s  "
                        f"durable {result['durable_steps']}/{n}  "
                        f"({time.perf_counter() - t:.1f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
    rows = summarize(results)
    workload = Workload()
    raw = {n: workload.raw_bytes_per_step(n) for n in ns}
    print("\nraw payload per step: " + ", ".join(f"N={n}: {v:.0f} B" for n, v in raw.items()))
    print(print_tables(rows, raw))
    print()
    print(headline(rows))
    if any(CONFIGS[name].framework == "marathon" for name in names):
        print("\nLeft out of the Marathon configs (each a part of a real `pilot run`):")
        print("\n".join(f"- {item}" for item in LEFT_OUT))
    if out is not None:
        out.write_text(json.dumps({"results": results, "summary": rows, "raw": raw}, indent=1))
    if plot is not None:
        from bench.plots import plot_vs_langgraph

        plot_vs_langgraph(rows, raw, plot)
        print(f"\nplot: {plot}")
    return rows


# -- profiling --------------------------------------------------------------------------------


def profile(n: int, synchronous: str, tool: str) -> None:
    """Run the Marathon run process in this interpreter under a profiler, from model call 1 to
    model call N+1 (the steps only: no imports, no start; the crash is replaced by a stop)."""
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        db = Path(tmp) / "bench.db"
        out = Path(tmp) / "run.json"
        real_kill = os.kill

        class Stop(BaseException):
            pass

        def stop_instead(pid: int, sig: int) -> None:
            if pid == os.getpid() and sig == signal.SIGKILL:
                raise Stop
            real_kill(pid, sig)

        os.kill = stop_instead  # type: ignore[assignment]
        try:
            if tool == "pyinstrument":
                from pyinstrument import Profiler

                profiler = Profiler(interval=0.0005)
                try:
                    marathon_child("run", db, n, synchronous, str(out), profiler.start)
                except Stop:
                    pass
                profiler.stop()
                print(profiler.output_text(unicode=True, color=False, show_all=False))
            else:
                import cProfile
                import pstats

                prof = cProfile.Profile(time.thread_time)  # CPU: other processes stay out
                try:
                    marathon_child("run", db, n, synchronous, str(out), prof.enable)
                except Stop:
                    pass
                prof.disable()
                pstats.Stats(prof).sort_stats(
                    os.environ.get("BENCH_PROFILE_SORT", "cumulative")
                ).print_stats(45)
        finally:
            os.kill = real_kill  # type: ignore[assignment]
        print(json.loads(out.read_text()))


OPEN_STEPS = ("EventStore()", "find_run", "load_stored", "acquire_lease", "build_plan", "get_run")
"""What ``open-profile`` times between opening the store and the loaded state."""


def open_profile_child(db: Path, run_id: str) -> dict[str, float]:
    """A fresh resume process, stopped at its loaded state: ms in each part of the way from
    opening the store (``resume_run`` as ``pilot resume`` calls it), and the imports before."""
    started = time.perf_counter()
    import asyncio

    import pilot.run.launch as launch
    import pilot.run.runner as runner_module
    from pilot.heap import settle_startup_heap
    from pilot.run.runner import Runner
    from pilot.store.event_store import EventStore
    from tools.registry import default_registry

    marks: dict[str, float] = {"imports": (time.perf_counter() - started) * 1000}
    registry = default_registry()  # built before the open, as the bench's children do
    settle_startup_heap()

    class Loaded(BaseException):
        pass

    def timed(owner: Any, name: str, *, stop: bool = False) -> None:
        real = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            result = real(*args, **kwargs)
            marks[name] = marks.get(name, 0.0) + (time.perf_counter() - t) * 1000
            if stop:
                raise Loaded
            return result

        setattr(owner, name, wrapper)

    for name in ("find_run", "acquire_lease", "get_run"):
        timed(EventStore, name)
    timed(launch, "load_stored")
    timed(launch, "build_plan")
    timed(runner_module, "load_run_state", stop=True)

    async def resume() -> None:
        opened = time.perf_counter()
        store = EventStore(f"sqlite:///{db}")
        marks["EventStore()"] = (time.perf_counter() - opened) * 1000
        try:
            await launch.resume_run(Runner(store=store, registry=registry), store.find_run(run_id))
        except Loaded:
            marks["open→state"] = (time.perf_counter() - opened) * 1000

    asyncio.run(resume())
    return marks


def open_profile(n: int, repeats: int) -> None:
    """Where a resume's open → state goes: one run of N steps (killed at call N+1), then
    ``repeats`` fresh resume processes, each stopped at its loaded state; medians."""
    ensure_bytecode(ROOT)
    with tempfile.TemporaryDirectory(prefix="bench-open-") as tmp:
        folder = Path(tmp) / "run"
        folder.mkdir()
        db, out = folder / "bench.db", folder / "run.json"
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(child_argv(CONFIGS["marathon"], "run", db, n, out), cwd=ROOT, env=env,
                       capture_output=True, check=False)  # fmt: skip
        run_id = json.loads(out.read_text())["run_id"]
        samples = []
        for repeat in range(repeats):
            # Each resume opens a copy of the killed run's files as the kill left them (its
            # WAL not checkpointed): the first resume's exit would checkpoint the original.
            copy = Path(tmp) / f"resume-{repeat}"
            shutil.copytree(folder, copy, symlinks=True)
            try:
                proc = subprocess.run(
                    [sys.executable, "-m", "bench.vs_langgraph", "_open", str(copy / db.name),
                     run_id],
                    cwd=ROOT, env=env, capture_output=True, text=True, check=True,
                )  # fmt: skip
            finally:
                shutil.rmtree(copy, ignore_errors=True)
            samples.append(json.loads(proc.stdout))
    keys = ["imports", *OPEN_STEPS, "load_run_state", "open→state"]
    print(f"resume at N={n}, ms, median of {repeats} fresh processes:")
    for key in keys:
        values = [sample.get(key, 0.0) for sample in samples]
        print(f"  {key:16s} {median(values):8.1f}   ({', '.join(f'{v:.1f}' for v in values)})")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_open":
        print(json.dumps(open_profile_child(Path(argv[1]), argv[2])))
        return
    if argv and argv[0] == "_child":
        name, mode, db, n, out = argv[1:6]
        config = CONFIGS[name]
        if config.framework == "marathon":
            marathon_child(mode, Path(db), int(n), config.synchronous, out)
        else:
            langgraph_child(mode, Path(db), int(n), config.synchronous, config.variant, out)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    prof = sub.add_parser("profile", help="profile the pilot's run process")
    prof.add_argument("--n", type=int, default=3000)
    prof.add_argument("--synchronous", default="off", choices=("off", "normal", "full"))
    prof.add_argument("--tool", default="cprofile", choices=("cprofile", "pyinstrument"))
    opening = sub.add_parser("open-profile", help="where a resume's open -> state goes")
    opening.add_argument("--n", type=int, default=1000)
    opening.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, nargs="+", default=[100, 1000, 3000])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS),
                        choices=sorted(CONFIGS))  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--plot", type=Path, help="also draw the figures (PNG; needs matplotlib)")
    args = parser.parse_args(argv)
    if args.command == "profile":
        profile(args.n, args.synchronous, args.tool)
        return
    if args.command == "open-profile":
        open_profile(args.n, args.repeats)
        return
    run_bench(args.n, args.configs, args.repeats, args.json, args.plot)


if __name__ == "__main__":
    main()
