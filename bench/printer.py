"""What printing a run's events costs when the output is not a terminal (CI, a log, a pipe).

The events of ``--steps`` workload steps (four a step: the request, the answer with its call,
the tool started and finished, the sizes of ``shared/reference/bench-workload.md``) go to a
log file three ways, each in a fresh child process, CPU of the whole process (the printer's
thread included) over the events only:

- ``rich``: the observer before issue 35, a rich ``Console`` printing each styled line and
  flushing it, on the step's thread;
- ``printer``: ``pilot.front.printer.LinePrinter``: the step puts the event on a queue, a side
  thread writes plain lines in batches;
- ``none``: no observer (the floor: building the events only).

Run from the repository root::

    .venv/bin/python -m bench.printer                 # 2,000 steps
    .venv/bin/python -m bench.printer --steps 500

A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import markdown_table

ROOT = Path(__file__).resolve().parent.parent
MODES = ("none", "rich", "printer")


def workload_events(steps: int) -> list[Any]:
    from pilot import events as ev
    from pilot.model.types import Usage

    events: list[Any] = []
    for i in range(1, steps + 1):
        call = ev.ToolCall(id=f"c{i}", name="read_file", arguments='{"path": "src/m.py"}')
        events += [
            ev.ModelRequest(step=i, messages=2 * i + 2),
            ev.AssistantMessage(
                step=i,
                content="x" * 1200,
                tool_calls=[call],
                usage=Usage(prompt_tokens=400, completion_tokens=300),
                endpoint="http://127.0.0.1:8000/v1",
            ),
            ev.ToolStarted(call_id=f"c{i}", name="read_file", mutates=False),
            ev.ToolFinished(call_id=f"c{i}", name="read_file", output="y" * 2048),
        ]
    return events


def child(mode: str, steps: int, log: Path) -> dict[str, float]:
    """One process: the events made first, then shown through ``mode``; CPU and wall of that."""
    from rich.console import Console

    from pilot.front.printer import LinePrinter, plain_render
    from pilot.front.ui import event_line, line_width

    events = workload_events(steps)
    with open(log, "w") as out:
        cpu, wall = time.process_time(), time.perf_counter()
        if mode == "rich":
            console = Console(file=out, highlight=False, soft_wrap=True)
            width = line_width(console)
            for event in events:
                console.print(event_line(event, width=width))
                console.file.flush()
        elif mode == "printer":
            with LinePrinter(out, plain_render(with_run_id=False)) as printer:
                step_cpu = time.process_time()
                for seq, event in enumerate(events):
                    printer("run", seq, event, None)
                on_step = time.process_time() - step_cpu
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    figures = {"cpu_ms_per_step": cpu * 1000 / steps, "wall_ms_per_step": wall * 1000 / steps}
    if mode == "printer":
        figures["on_step_cpu_ms_per_step"] = on_step * 1000 / steps
    figures["lines"] = len(log.read_text().splitlines())
    return figures


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_child":
        print(json.dumps(child(argv[1], int(argv[2]), Path(argv[3]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args(argv)
    rows: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="bench-printer-") as tmp:
        for _ in range(args.repeats):
            for mode in MODES:  # alternated: the machine's noise falls on every mode alike
                proc = subprocess.run(
                    [sys.executable, "-m", "bench.printer", "_child", mode, str(args.steps),
                     str(Path(tmp) / f"{mode}.log")],
                    cwd=ROOT, capture_output=True, text=True, check=True,
                )  # fmt: skip
                rows[mode].append(json.loads(proc.stdout))

    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))

    def med(mode: str, key: str) -> float:
        values = sorted(r.get(key, 0.0) for r in rows[mode])
        return values[len(values) // 2]

    print(
        markdown_table(
            ["observer", "process CPU ms/step", "on the step's thread ms/step", "lines"],
            [
                [
                    mode,
                    f"{med(mode, 'cpu_ms_per_step'):.3f}",
                    f"{med(mode, 'on_step_cpu_ms_per_step'):.3f}" if mode == "printer" else "-",
                    int(med(mode, "lines")),
                ]
                for mode in MODES
            ],
        )
    )


if __name__ == "__main__":
    main()
