"""What ``pilot trace`` costs: milliseconds per 1000 stored events, stage by stage.

For each size, a run of that many events is written into a fresh SQLite store (steps of a
model request, its answer with one tool call, the tool's start and result of 2 KiB, a snapshot
every fifth step, a phase every 50 steps), then exported as ``pilot trace`` does: the events
read (``store.queries.stored_events``), the spans built (``pilot.trace.spans``), the SDK's spans
encoded as OTLP JSON lines and written to a file (``pilot.trace.otlp``). Each stage is timed
``--repeat`` times in this process (the median is kept); then the command itself runs once in a
fresh process (imports included). Needs the ``otel`` extra; ``--plot`` needs matplotlib::

    .venv/bin/python -m bench.trace_export                          # 1k, 5k, 20k events
    .venv/bin/python -m bench.trace_export --events 1000 --repeat 5 --json out.json
    .venv/bin/python -m bench.trace_export --plot bench/figures/trace-export.png
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench._common import markdown_table, words, write_json
from pilot import events as ev
from pilot.model.types import Usage
from pilot.store.event_store import EventStore
from pilot.store.queries import stored_events
from pilot.trace import otlp
from pilot.trace.spans import build_trace

STAGES = ("read", "build", "encode+write")


def synthetic_run(store: EventStore, events: int, seed: int = 7) -> str:
    """A run of about ``events`` events, shaped like a tool-calling agent's."""
    rng = random.Random(seed)
    run_id = store.create_run(
        workflow_name="bench-trace",
        workflow_path="wf.yaml",
        workflow_text="",
        params={},
        workspace="/w",
        owner=None,
    )
    at = datetime(2026, 1, 1, tzinfo=UTC)
    timed: list[ev.Event] = [
        ev.RunStarted(
            workflow="bench-trace",
            workspace="/w",
            branch="marathon/bench",
            endpoint="http://127.0.0.1:8000/v1",
            system="",
            phases=["work"],
            owner="bench",
        ),
        ev.ModelResolved(model="bench-model", max_model_len=32768),
    ]
    step = 0
    while len(timed) < events - 1:
        if step % 50 == 0:
            if step:
                timed.append(ev.PhaseFinished(index=step // 50 - 1, name="p", outcome="succeeded"))
            timed.append(ev.PhaseStarted(index=step // 50, name=f"p{step // 50}", prompt="go"))
        step += 1
        call = ev.ToolCall(id=f"call-{step}", name="read_file", arguments='{"path": "a.py"}')
        timed += [
            ev.ModelRequest(step=step, messages=2 * step, max_tokens=1024, prompt_tokens=900),
            ev.AssistantMessage(
                step=step,
                content=words(rng, 200),
                tool_calls=[call],
                finish_reason="tool_calls",
                usage=Usage(prompt_tokens=900 + step, completion_tokens=40),
                ttft_s=0.05,
                duration_s=0.4,
                endpoint="http://127.0.0.1:8000/v1",
            ),
            ev.ToolStarted(call_id=call.id, name="read_file", mutates=False),
            ev.ToolFinished(call_id=call.id, name="read_file", output=words(rng, 2048)),
        ]
        if step % 5 == 0:
            timed.append(ev.WorkspaceSnapshot(call_id=call.id, snapshot=f"{step:040x}"))
    timed.append(ev.RunFinished(status="succeeded"))
    stamped = [
        (seq, event.model_copy(update={"at": at + timedelta(milliseconds=100 * seq)}), None)
        for seq, event in enumerate(timed, start=1)
    ]
    for start in range(0, len(stamped), 1000):
        store.append_many(run_id, stamped[start : start + 1000], totals={})
    return run_id


def _timed(action: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    seconds, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = action()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def measure(events: int, repeat: int, workdir: Path) -> dict[str, Any]:
    db = workdir / f"trace-{events}.db"
    store = EventStore(f"sqlite:///{db}")
    run_id = synthetic_run(store, events)
    read_s, stored = _timed(lambda: stored_events(store, run_id), repeat)
    build_s, trace = _timed(lambda: build_trace(run_id, "bench-trace", stored), repeat)
    out = workdir / f"trace-{events}.jsonl"

    def encode_and_write() -> int:
        with out.open("w", encoding="utf-8") as stream:
            return otlp.write_json_lines(trace, stream)

    write_s, _ = _timed(encode_and_write, repeat)
    command = [sys.executable, "-m", "pilot", "trace", run_id, "--db", f"sqlite:///{db}"]
    start = time.perf_counter()
    subprocess.run([*command, "--out", str(out)], check=True, capture_output=True)
    cli_s = time.perf_counter() - start
    per_k = 1000 / len(stored)
    return {
        "events": len(stored),
        "spans": len(trace.spans),
        "read_ms_per_1k": read_s * 1000 * per_k,
        "build_ms_per_1k": build_s * 1000 * per_k,
        "encode+write_ms_per_1k": write_s * 1000 * per_k,
        "total_ms_per_1k": (read_s + build_s + write_s) * 1000 * per_k,
        "command_s": cli_s,
        "file_bytes_per_event": out.stat().st_size / len(stored),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, nargs="+", default=[1000, 5000, 20000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="Write the rows here.")
    parser.add_argument("--plot", type=Path, help="Draw the figure here (PNG; needs matplotlib).")
    args = parser.parse_args(argv)
    otlp.require_sdk()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as tmp:
        for events in args.events:
            rows.append(measure(events, args.repeat, Path(tmp)))
            print(f"{events} events done", file=sys.stderr)
    headers = ["events", "spans", *(f"{s} ms/1k" for s in STAGES), "total ms/1k", "command s"]
    table = [
        [
            r["events"],
            r["spans"],
            *(round(r[f"{s}_ms_per_1k"], 1) for s in STAGES),
            round(r["total_ms_per_1k"], 1),
            round(r["command_s"], 2),
        ]
        for r in rows
    ]
    print(markdown_table(headers, table))
    print(f"\nload average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    if args.json:
        write_json(args.json, {"rows": rows})
    if args.plot:
        from bench.plots import plot_trace_export

        plot_trace_export(rows, STAGES, args.plot)


if __name__ == "__main__":
    main()
