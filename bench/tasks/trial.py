"""One try: a fresh copy of the task's tree, one agent on one model, the hidden check, a row.

``python -m bench.tasks.trial SPEC_JSON`` runs one try in a process of its own and prints its
row as the last line (``bench.tasks.run`` runs many at once that way: the pilot's run sets
the task's environment in its process, and a try that hangs is killed alone).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.tasks.agents import AgentResult, run_marathon, run_plain
from bench.tasks.hidden import hidden_check
from bench.tasks.suite import Task, load_catalog, prepare

AGENTS = ("marathon", "plain", "mini")
# What each agent asks the server for (a try's call mode; bench.tasks.callmodes).
REQUESTED_MODE = {"plain": "text", "mini": "auto"}


@dataclass(frozen=True)
class TrySpec:
    task: str
    agent: str
    model: str
    """The model's label in the results (``--models LABEL=URL``)."""
    endpoint: str
    attempt: int
    max_steps: int
    max_tokens: int
    context_window: int | None
    call_mode: str
    cache: str
    keep: str | None = None
    timeout_s: float = 1800
    settings: tuple[str, ...] = ()
    """Marathon's workflow fields set for this try (``pilot run --set FIELD=VALUE``)."""
    variant: str = ""
    """The name the results give those settings (a group of its own in the report)."""


def _run_agent(task: Task, spec: TrySpec, repo: Path, work: Path) -> AgentResult:
    budget = {"max_steps": spec.max_steps, "max_tokens": spec.max_tokens}
    if spec.agent == "marathon":
        return run_marathon(
            task,
            repo,
            spec.endpoint,
            work,
            context_window=spec.context_window,
            call_mode=spec.call_mode,
            wall_s=spec.timeout_s,
            settings=spec.settings,
            **budget,
        )
    if spec.agent == "mini":
        from bench.tasks.mini import run_mini

        return run_mini(task, repo, spec.endpoint, work, timeout_s=spec.timeout_s, **budget)
    transcript = work / "transcript.json"
    return run_plain(
        task, repo, spec.endpoint, transcript=transcript, wall_s=spec.timeout_s, **budget
    )


def _keep(spec: TrySpec, work: Path, repo: Path) -> None:
    keep = Path(spec.keep or ".") / spec.model / f"{spec.task}.{spec.agent}.{spec.attempt}"
    keep.mkdir(parents=True, exist_ok=True)
    if (work / "runs.db").exists():  # the backup API: the WAL's events come too
        with sqlite3.connect(work / "runs.db") as src, sqlite3.connect(keep / "runs.db") as dst:
            src.backup(dst)
    for name in ("transcript.json", "trajectory.json", "mini.log"):
        if (work / name).exists():
            shutil.copy(work / name, keep / name)
    diff = subprocess.run(["git", "diff"], cwd=repo, capture_output=True, text=True)
    (keep / "diff.patch").write_text(diff.stdout)
    if (keep / "runs.db").exists():
        (keep / "show.txt").write_text(timeline(keep / "runs.db"))


def timeline(db: Path) -> str:
    """The run's timeline as ``pilot show`` prints it (160 columns): small beside its database,
    so a sitting can bring every try's back when the databases stay on the device."""
    from pilot.front.ui import event_line
    from pilot.store.event_store import EventStore

    store = EventStore(f"sqlite:///{db}")
    lines = [
        event_line(event, width=160).plain
        for record in store.list_runs()
        for _seq, event in store.iter_events(record.id)
    ]
    return "\n".join(lines) + "\n"


def base_row(spec: TrySpec, task: Task) -> dict[str, Any]:
    return {
        "task": task.id,
        "kind": task.kind,
        "agent": spec.agent,
        "model": spec.model,
        "call_mode": REQUESTED_MODE.get(spec.agent, spec.call_mode),
        "try": spec.attempt,
        **({"variant": spec.variant} if spec.variant and spec.agent == "marathon" else {}),
    }


def failed_row(spec: TrySpec, task: Task, reason: str, **extra: Any) -> dict[str, Any]:
    """A try that produced no agent result (a crash, a kill): a failure, never a success."""
    return {
        **base_row(spec, task),
        "success": False,
        "claimed": False,
        "false_success": False,
        "crashed": True,
        "agent_status": "crashed",
        "reason": reason,
        "steps": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "tokens_estimated": False,
        "wall_s": 0.0,
        "answers": {},
        **extra,
    }


def one_try(spec: TrySpec, task: Task) -> dict[str, Any]:
    cache = Path(spec.cache)
    with tempfile.TemporaryDirectory(prefix=f"task-{task.id}-") as tmp:
        work = Path(tmp)
        repo = prepare(task, cache, work)
        try:
            result = _run_agent(task, spec, repo, work)
        except Exception as exc:  # an agent crash is a result to report, not the end
            return failed_row(
                spec,
                task,
                f"agent crashed: {type(exc).__name__}: {exc}",
                traceback=traceback.format_exc()[-2000:],
            )
        check = hidden_check(task, repo, cache)
        if spec.keep:
            _keep(spec, work, repo)
    reason = check.reason if check.passed else f"{result.status}: {result.reason}; {check.reason}"
    return {
        **base_row(spec, task),
        "success": check.passed,
        "claimed": result.claimed,
        "false_success": result.claimed and not check.passed,
        "crashed": False,
        "agent_status": result.status,
        "reason": reason,
        "steps": result.steps,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "tokens_estimated": result.tokens_estimated,
        "wall_s": round(result.wall_s, 1),
        "answers": result.answers,
        **({"cut": list(result.cut)} if result.cut is not None else {}),
    }


def run_in_subprocess(spec: TrySpec, task: Task) -> dict[str, Any]:
    """``one_try`` in a child process, killed (and reported as failed) past its timeout plus
    the time its hidden check may take."""
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.tasks.trial", json.dumps(asdict(spec))],
            capture_output=True,
            text=True,
            timeout=spec.timeout_s + 600,
        )
    except subprocess.TimeoutExpired:
        return failed_row(
            spec, task, f"try killed after {spec.timeout_s + 600:.0f} s", timed_out=True
        )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])[-400:]
        return failed_row(
            spec,
            task,
            f"try process exited {proc.returncode}: {tail}",
            wall_s=round(time.monotonic() - started, 1),
        )
    row: dict[str, Any] = json.loads(lines[-1])
    return row


def main(argv: list[str] | None = None) -> int:
    fields = json.loads((argv or sys.argv[1:])[0])
    spec = TrySpec(**{**fields, "settings": tuple(fields.get("settings", ()))})
    [task] = [t for t in load_catalog() if t.id == spec.task]
    print(json.dumps(one_try(spec, task)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
