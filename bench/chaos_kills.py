"""Section 1 of the chaos bench: SIGKILL a real `pilot` at seeded random moments, then resume.

Kinds of moment:

* ``event``: right after event N is committed (the ``kill_after_seq`` failpoint, exact);
* ``tool``: inside a slow `run` step that has already appended half its ledger lines;
* ``stream``: while a streamed answer is arriving (a slow sim: TTFT plus per-token latency);
* ``compaction``: while a compaction is made (the prompt counted, the summary built from the
  events; small window);
* ``snapshot``: between a mutating tool's start and its ``tool_finished``, which covers the
  tool's own work and the workspace snapshot taken after it.

The timed kinds watch the pilot's JSON lines, and once the event that opens the window is out,
sleep a random part of that window (measured on an uninterrupted run) and SIGKILL. Every killed
run is then resumed with `pilot resume` until it ends, and compared with the uninterrupted run.
"""

from __future__ import annotations

import itertools
import json
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos_common import (
    ChaosPolicy,
    duplicated_lines,
    integrity_ok,
    ledger_expected,
    load_run,
    make_repo,
    md_table,
    pilot_cmd,
    pilot_env,
    run_id_of,
    run_pilot,
    transcript,
    tree_hash,
    workspace_of,
    write_workflow,
)

from brain.sim.config import SimConfig, Timing
from brain.sim.server import running_sim

KINDS = ("event", "tool", "stream", "compaction", "snapshot")


def window_for(steps: int) -> int:
    """A context window small enough that the run compacts a few times."""
    return 8000 if steps >= 60 else 2600


SUMMARY_PADDING = 8
MUTATING = {"write_file", "edit_file", "run", "git_commit"}


@dataclass(frozen=True)
class Reference:
    """What an uninterrupted run looks like, and how long each event's window lasted."""

    steps: int
    transcript: list[dict[str, Any]]
    tree: str
    types: list[str]
    windows: list[float]
    """Seconds from event seq i+1 to the next one (index i), on the slow server."""
    slow_run_equal: bool
    names: list[str | None]
    """Tool name of each event, where it has one."""


@dataclass(frozen=True)
class KillCase:
    index: int
    kind: str
    seq: int
    delay: float
    slow: bool


@dataclass
class KillResult:
    case: KillCase
    killed: bool = False
    killed_after: str = ""
    resumes: int = 0
    completed: bool = False
    transcript_equal: bool = False
    tree_equal: bool = False
    duplicates: int = 0
    ledger_complete: bool = False
    integrity: bool = False
    error: str = ""
    seconds: float = 0.0


@dataclass
class Servers:
    fast: str
    slow: str


def _prepare(root: Path, endpoint: str, steps: int) -> tuple[Path, Path, Path]:
    repo = make_repo(root / "repo")
    workflow = write_workflow(root / "wf.yaml", endpoint=endpoint, steps=steps)
    return repo, workflow, root / "m.db"


def reference_run(servers: Servers, steps: int, base: Path) -> Reference:
    runs = {}
    for name, endpoint in (("fast", servers.fast), ("slow", servers.slow)):
        repo, workflow, db = _prepare(base / f"ref-{name}", endpoint, steps)
        done = run_pilot(["run", str(workflow), "--param", f"repo={repo}"], db)
        if done.returncode != 0:
            raise RuntimeError(f"the uninterrupted {name} run failed: {done.stderr[-2000:]}")
        events, state = load_run(db, run_id_of(db))
        runs[name] = (workspace_of(state), events, state)
    repo, events, state = runs["fast"]
    _srepo, slow_events, slow_state = runs["slow"]
    windows = [(b.at - a.at).total_seconds() for a, b in itertools.pairwise(slow_events)]
    return Reference(
        steps=steps,
        transcript=transcript(state.messages),
        tree=tree_hash(repo),
        types=[e.type for e in events],
        windows=[*windows, 0.0],
        slow_run_equal=transcript(slow_state.messages) == transcript(state.messages),
        names=[getattr(e, "name", None) for e in events],
    )


def plan_cases(ref: Reference, kills: int, seed: int) -> list[KillCase]:
    rng = random.Random(seed)
    seqs = range(1, len(ref.types) + 1)

    def of(pred: Callable[[int], bool]) -> list[int]:
        return [s for s in seqs if pred(s)]

    slow_tools = of(
        lambda s: (
            ref.types[s - 1] == "tool_started"
            and ref.names[s - 1] == "run"
            and ref.windows[s - 1] > 0.3
        )
    )
    targets = {
        "event": of(lambda s: s < len(ref.types)),
        "tool": slow_tools,
        "stream": of(lambda s: ref.types[s - 1] == "model_request"),
        "compaction": of(lambda s: s < len(ref.types) and ref.types[s] == "compaction"),
        "snapshot": of(
            lambda s: ref.types[s - 1] == "tool_started" and ref.names[s - 1] in MUTATING
        ),
    }
    cases = []
    for index in range(kills):
        kind = KINDS[index % len(KINDS)]
        if not targets[kind]:
            kind = "event"
        seq = rng.choice(targets[kind])
        delay = 0.0 if kind == "event" else rng.uniform(0.0, ref.windows[seq - 1])
        cases.append(KillCase(index, kind, seq, delay, slow=kind in ("stream", "compaction")))
    return cases


def _kill_when(proc: subprocess.Popen[str], seq: int, delay: float) -> str:
    """Read JSON lines until event ``seq`` is out, sleep ``delay``, SIGKILL. Returns the type
    of the last event seen before the kill ('' when the run ended first)."""
    last = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        last = event.get("type", "")
        if event.get("seq") == seq:
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            break
    # Drain what was printed before the signal landed (the last committed event).
    for line in proc.stdout:
        if line.startswith("{"):
            last = json.loads(line).get("type", last)
    proc.wait()
    return last


def run_case(case: KillCase, ref: Reference, servers: Servers, base: Path) -> KillResult:
    result = KillResult(case)
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix=f"kill{case.index:03d}-", dir=base))
    try:
        repo, workflow, db = _prepare(root, servers.fast, ref.steps)
        args = ["run", str(workflow), "--param", f"repo={repo}"]
        if case.kind == "event":
            proc = run_pilot(args, db, failpoint=f"kill_after_seq={case.seq}")
            result.killed = proc.returncode == -signal.SIGKILL
            lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
            result.killed_after = lines[-1]["type"] if lines else ""
        else:
            if case.slow:
                args += ["--endpoint", servers.slow]
            popen = subprocess.Popen(
                pilot_cmd(*args, "--db", f"sqlite:///{db}", "--json"),
                env=pilot_env(root / "home"),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            result.killed_after = _kill_when(popen, case.seq, case.delay)
            result.killed = popen.returncode == -signal.SIGKILL
        run_id = run_id_of(db)
        for _ in range(5):
            result.resumes += 1
            resumed = run_pilot(["resume", run_id], db)
            if resumed.returncode != -signal.SIGKILL:
                break
        _events, state = load_run(db, run_id)
        result.completed = (
            resumed.returncode == 0
            and state.finished is not None
            and state.finished.status == "succeeded"
        )
        if not result.completed:
            result.error = (resumed.stderr or "")[-400:]
        result.transcript_equal = transcript(state.messages) == ref.transcript
        work = workspace_of(state) if state.started else repo
        result.tree_equal = tree_hash(work) == ref.tree
        ledger = (work / "ledger.txt").read_text()
        result.duplicates = duplicated_lines(ledger)
        result.ledger_complete = ledger.splitlines() == ledger_expected(ref.steps)
        result.integrity = integrity_ok(db)
    except Exception as exc:  # a harness problem is a result too, never a lost case
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        result.seconds = time.monotonic() - started
        shutil.rmtree(root, ignore_errors=True)
    return result


@dataclass
class KillMatrix:
    ref: Reference
    results: list[KillResult] = field(default_factory=list)
    seconds: float = 0.0


def slow_timing() -> Timing:
    return Timing(ttft=0.03, itl=0.004)


def kill_matrix(
    *,
    steps: int,
    kills: int,
    seed: int,
    jobs: int,
    base: Path,
    progress: Callable[[KillResult], None] | None = None,
) -> KillMatrix:
    started = time.monotonic()
    policy = ChaosPolicy(steps, summary_padding=SUMMARY_PADDING)
    fast_config = SimConfig(
        model="chaos-model", max_model_len=window_for(steps), timing=Timing(ttft=0.0, itl=0.0)
    )
    slow_config = SimConfig(
        model="chaos-model", max_model_len=window_for(steps), timing=slow_timing()
    )
    with (
        running_sim(fast_config, policy=policy) as fast,
        running_sim(slow_config, policy=policy) as slow,
    ):
        servers = Servers(fast.openai_base_url, slow.openai_base_url)
        ref = reference_run(servers, steps, base)
        matrix = KillMatrix(ref)
        cases = plan_cases(ref, kills, seed)
        lock = threading.Lock()
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(run_case, case, ref, servers, base) for case in cases]
            for future in as_completed(futures):
                outcome = future.result()
                with lock:
                    matrix.results.append(outcome)
                if progress is not None:
                    progress(outcome)
    matrix.results.sort(key=lambda r: r.case.index)
    matrix.seconds = time.monotonic() - started
    return matrix


def kill_table(matrix: KillMatrix) -> str:
    rows = []
    groups = [(kind, [r for r in matrix.results if r.case.kind == kind]) for kind in KINDS]
    groups.append(("**all**", matrix.results))
    for kind, results in groups:
        if not results:
            continue
        rows.append(
            [
                kind,
                len(results),
                sum(r.killed for r in results),
                sum(r.completed for r in results),
                sum(r.transcript_equal for r in results),
                sum(r.tree_equal for r in results),
                sum(r.duplicates for r in results),
                sum(not r.ledger_complete for r in results),
                sum(not r.integrity for r in results),
            ]
        )
    return md_table(
        [
            "moment",
            "cases",
            "SIGKILLed",
            "resumes completed",
            "transcript = clean",
            "tree hash = clean",
            "side effects twice",
            "ledger incomplete",
            "integrity failures",
        ],
        rows,
    )


def killed_after_table(matrix: KillMatrix) -> str:
    counts: dict[str, int] = {}
    for r in matrix.results:
        if r.killed:
            counts[r.killed_after or "(before any event)"] = (
                counts.get(r.killed_after or "(before any event)", 0) + 1
            )
    rows = [[k, v] for k, v in sorted(counts.items(), key=lambda kv: -kv[1])]
    return md_table(["last committed event at the kill", "kills"], rows)
