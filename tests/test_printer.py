"""A run's output when nobody's terminal shows it (a pipe, CI, a log file): plain lines, no
markup, every event in order before the outcome, written off the step's thread so a reader
that stops reading does not stop the run until the queue is full, and one that goes away
never stops it."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

from pilot_harness import call, make_repo, pilot_cmd, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.front.lines import plain_line
from pilot.front.printer import LinePrinter, plain_render
from pilot.front.ui import event_line


def test_a_piped_run_prints_plain_lines_in_order_then_its_outcome(tmp_path: Path) -> None:
    turns = [
        {"tool_calls": [call("run", command="echo one")]},
        {"tool_calls": [call("write_file", path="notes.txt", content="two\n")]},
        {"tool_calls": [call("finish", summary="done")]},
    ]
    script = write_script(tmp_path / "s.yaml", "pipe-run", turns)
    config = SimConfig(model="pipe-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(config) as sim:
        repo = make_repo(tmp_path / "repo")
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="pipe-run",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        env = {**os.environ, "MARATHON_HOME": str(tmp_path / "home"), "TERM": "xterm-256color"}
        env.pop("MARATHON_DB", None)
        env.pop("NO_COLOR", None)
        proc = subprocess.run(
            pilot_cmd("run", str(workflow), "-p", f"repo={repo}"),
            env=env,
            capture_output=True,  # stdout is a pipe, as in CI or `| tee`
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "\x1b[" not in out  # no colour or cursor codes in a pipe, even with TERM set
    lines = out.splitlines()
    order = [
        "run started: test-flow",
        "phase 1: work",
        "step 1: run",
        "  <- run: exit code: 0 one",
        "step 2: write_file",
        "step 3: finish",
        "phase work succeeded",
        "run succeeded",
    ]
    assert all(any(want in line for line in lines) for want in order), out
    found = [next(i for i, line in enumerate(lines) if want in line) for want in order]
    assert found == sorted(found), lines
    last_event = found[-1]
    # every event line (stamped HH:MM:SS) comes before what is printed after the run
    stamped = [i for i, line in enumerate(lines) if line[:2].isdigit() and line[2:3] == ":"]
    assert max(stamped) == last_event, lines
    assert len(lines) > last_event + 1, lines  # the outcome follows the events


def test_the_plain_line_says_what_the_styled_line_says() -> None:
    events = [
        ev.PhaseStarted(index=0, name="survey", prompt="p"),
        ev.ToolFinished(call_id="c", name="run", output="all 12 passed", is_error=False),
        ev.CheckFinished(
            phase=0, attempt=1, command="pytest", passed=False, exit_code=3, output="boom"
        ),
        ev.RunFinished(status="failed", reason="limits"),
    ]
    for event in events:
        assert plain_line(event) == event_line(event, width=100_000).plain


def test_a_reader_that_stops_reading_does_not_stop_the_steps(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    out = os.fdopen(write_fd, "w")
    printer = LinePrinter(out, plain_render(with_run_id=True), capacity=100)
    big = "x" * 10_000
    with printer:
        # 50 lines of 10 KB: far more than a pipe holds, and nobody reads it yet. The thread
        # blocks in its write; each step's put returns (the queue has room for 100).
        for seq in range(50):
            printer("r1", seq, ev.ToolFinished(call_id=str(seq), name="run", output=big), None)
        chunks: list[bytes] = []
        reader = threading.Thread(
            target=lambda: chunks.extend(iter(lambda: os.read(read_fd, 1 << 16), b""))
        )
        reader.start()
    out.close()
    reader.join(timeout=30)
    os.close(read_fd)
    lines = b"".join(chunks).decode().splitlines()
    assert len(lines) == 50
    assert all(line.startswith("r1 ") and line.endswith("x" * 50) for line in lines)


def test_a_reader_that_goes_away_never_fails_the_run() -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    out = os.fdopen(write_fd, "w")
    with LinePrinter(out, plain_render(with_run_id=False)) as printer:
        for seq in range(20):
            printer("r1", seq, ev.PhaseStarted(index=seq, name="p", prompt="p"), None)
    # the broken pipe ended the writing; every put returned and the exit did not hang
    try:
        out.close()
    except BrokenPipeError:
        pass
