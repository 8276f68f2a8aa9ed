"""The few lines printed when a run stops: outcome, phases, what changed, what to do next."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from pilot.environ import db_option
from pilot.front.lines import format_duration
from pilot.run.outcomes import RunOutcome
from pilot.store.event_store import EventStore
from pilot.workspace.snapshot import GitRepo, diff_snapshots


def print_outcome(console: Console, store: EventStore, outcome: RunOutcome) -> None:
    state = outcome.state
    style = {"succeeded": "bold green", "paused": "bold yellow"}.get(outcome.status, "bold red")
    console.print()
    console.print(f"[{style}]run {outcome.run_id} {outcome.status}[/] {outcome.reason}")
    for phase in state.phases_done:
        mark = "[green]✓[/]" if phase.outcome == "succeeded" else "[red]✗[/]"
        console.print(f"  {mark} {phase.name}: {phase.summary or phase.reason or phase.outcome}")
    estimated = " (estimated: the server sent no usage)" if state.usage_estimated else ""
    console.print(
        f"  steps {state.steps}, tokens {state.prompt_tokens} in / {state.completion_tokens} "
        f"out{estimated}, active {format_duration(state.active_seconds)}"
    )
    started = state.started
    if started and started.base_snapshot and state.snapshot:
        try:
            stat = diff_snapshots(
                GitRepo(Path(started.workspace)), started.base_snapshot, state.snapshot, stat=True
            )
        except Exception:  # the workspace may be gone; the outcome must still print
            stat = None
        if stat:
            console.print(f"  changes on branch {started.branch} in {started.workspace}:")
            for line in stat.splitlines():
                console.print(f"    {line.strip()}", highlight=False)
        elif stat is not None:
            console.print(f"  [bold]no change: this run changed no file in {started.workspace}[/]")
    db = db_option(store.url)
    if outcome.status == "paused":
        console.print(f"  resume with: [bold]pilot resume {outcome.run_id}{db}[/]")
    console.print(
        f"  timeline: pilot show {outcome.run_id}{db}   diff: pilot diff {outcome.run_id}{db}"
    )


def rollup(outcomes: Sequence[RunOutcome]) -> dict[str, Any]:
    """What a matrix or a worker's batch came to: runs, each status's count in a fixed order
    (succeeded first), tokens, and the exit code (the worst run's)."""
    counts = Counter(o.status for o in outcomes)
    order = ["succeeded", "failed", "limit", "cancelled", "paused"]
    statuses = {s: counts[s] for s in order if counts[s]}
    statuses |= {s: n for s, n in sorted(counts.items()) if s not in order}
    return {
        "runs": len(outcomes),
        "statuses": statuses,
        "steps": sum(o.state.steps for o in outcomes),
        "tokens_in": sum(o.state.prompt_tokens for o in outcomes),
        "tokens_out": sum(o.state.completion_tokens for o in outcomes),
        "exit_code": max((o.exit_code for o in outcomes), default=0),
    }


def rollup_line(outcomes: Sequence[RunOutcome]) -> str:
    """The last line of a matrix or worker batch: ``3 runs: 2 succeeded, 1 failed; 40 steps,
    tokens 9000 in / 800 out; exit 1``, so the batch's result is read without scrolling."""
    facts = rollup(outcomes)
    if not facts["runs"]:
        return "no run was driven; exit 0"
    said = ", ".join(f"{n} {status}" for status, n in facts["statuses"].items())
    return (
        f"{facts['runs']} run{'s' if facts['runs'] != 1 else ''}: {said}; {facts['steps']} "
        f"steps, tokens {facts['tokens_in']} in / {facts['tokens_out']} out; "
        f"exit {facts['exit_code']}"
    )
