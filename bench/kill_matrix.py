"""The kill matrix: SIGKILL a real `pilot` at every boundary and at random moments of a run
whose commands have effects outside the workspace, then resume it until it ends.

The workflow's commands each append a line ``<mark> $MARATHON_CALL_ID`` to a file outside the
workspace, a line to a git-ignored file inside it (``build.log``) and one to a tracked file;
a phase check does the same outside. Kills:

* ``startup``, ``worktree_add``, ``worktree_added``: in start-up, before and after the run's
  ``git worktree add`` (``pilot.failpoints`` ``kill_at``);
* ``tool_returned:N``: the N-th tool has returned (the command has exited), its result is not
  committed: the one-commit window, where a re-run is expected;
* ``result_committed:N``, ``snapshot_mid:N``, ``snapshot_taken:N``: after the result's commit,
  before, inside and after its snapshot: never a re-run;
* ``event:S``: right after event S is committed (``kill_after_seq``), for every S;
* ``random``: at a seeded random moment of the run's wall time (commands sleep a little, so
  some land while a command runs, before its exit).

Each killed run is resumed with `pilot resume` until it ends (5 tries) and compared with an
uninterrupted run. Counted: kills, resumed (succeeded), identical (transcript, tracked tree),
effects doubled outside the workspace, how many of those doubles carry one MARATHON_CALL_ID
and fall inside the one-commit window (the call's ``tool_started`` or ``check_started`` has no
result before the process died), ignored-file doubles, and unresumable runs (must be 0).

    python bench/kill_matrix.py                  # every boundary + 30 random kills
    python bench/kill_matrix.py --random 100 --seed 7
    python bench/kill_matrix.py --quick          # a few of each kind (what the tests run)
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from chaos_common import (
    integrity_ok,
    load_run,
    md_table,
    pilot_cmd,
    pilot_env,
    run_id_of,
    run_pilot,
    transcript,
    tree_hash,
    workspace_of,
)
from chaos_common import make_repo as chaos_repo

from brain.sim.config import SimConfig, Timing
from brain.sim.server import running_sim

KEY = "kill-matrix"
OUTSIDE = Path("../../outside.txt")
"""The file outside the workspace, from the run's worktree (``<case>/worktrees/<run id>``):
``<case>/outside.txt``."""
MUTATING_TOOLS = 8
"""Tools that may change the workspace (each is snapshotted): runs, writes, edits, commits."""


@dataclass
class Case:
    kind: str
    failpoint: str | None = None
    delay: float | None = None


@dataclass
class Outcome:
    case: Case
    killed: bool = False
    resumes: int = 0
    resumed: bool = False
    identical: bool = False
    doubled: int = 0
    doubled_same_id: int = 0
    doubled_in_window: int = 0
    ignored_doubled: int = 0
    integrity: bool = True
    error: str = ""


@dataclass
class Reference:
    transcript: list[dict[str, Any]]
    tree: str
    outside: list[str]
    ignored: list[str]
    events: int
    wall: float


def effect(outside: Path, mark: str, sleep: float = 0.15) -> str:
    return (
        f'echo "{mark} $MARATHON_CALL_ID" >> {outside}; echo {mark} >> build.log; '
        f"sleep {sleep}; echo {mark} >> ledger.txt"
    )


def conversation(outside: Path) -> list[dict[str, Any]]:
    def run(mark: str) -> dict[str, Any]:
        return {"tool_calls": [{"name": "run", "arguments": {"command": effect(outside, mark)}}]}

    def tool(name: str, **arguments: Any) -> dict[str, Any]:
        return {"tool_calls": [{"name": name, "arguments": arguments}]}

    return [
        run("r1"),
        tool("write_file", path="src/a.txt", content="a\n"),
        run("r2"),
        tool("git_commit", message="first"),
        tool("finish", summary="phase one"),
        run("r3"),
        tool("edit_file", path="src/app.py", old="VALUE = 1", new="VALUE = 2"),
        run("r4"),
        tool("write_file", path="src/b.txt", content="b\n"),
        run("r5"),
        tool("finish", summary="phase two"),
    ]


def write_files(root: Path, endpoint: str, outside: Path) -> tuple[Path, Path]:
    """The sim's script and the workflow (the endpoint filled in later)."""
    script = root / "script.yaml"
    script.write_text(
        yaml.safe_dump({"conversations": [{"key": KEY, "turns": conversation(outside)}]})
    )
    workflow = root / "wf.yaml"
    check = f'echo "check $MARATHON_CALL_ID" >> {outside}; grep -q r4 ledger.txt'
    workflow.write_text(
        yaml.safe_dump(
            {
                "name": "kill-matrix",
                "params": {"repo": {"type": "path", "required": True}},
                "model": {"endpoint": endpoint, "name": "auto", "server_wait": 60},
                "workspace": {"path": "{{ params.repo }}"},
                "tools": ["read_file", "write_file", "edit_file", "run", "git_commit", "finish"],
                "sandbox": "none",
                "system": f"Conversation {KEY}. Work with the tools.",
                "phases": [
                    {"name": "one", "prompt": "Do the first part."},
                    {"name": "two", "prompt": "Do the rest.", "check": check},
                ],
            },
            sort_keys=False,
        )
    )
    return script, workflow


def prepare(root: Path) -> Path:
    repo = chaos_repo(root / "repo")
    (repo / ".gitignore").write_text("*.log\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, capture_output=True)
    subprocess.run(
        ["git", "-c", "user.name=k", "-c", "user.email=k@x", "commit", "-qm", "ignore logs"],
        cwd=repo,
        check=True,
        capture_output=True,
    )
    return repo


def reference(base: Path, workflow_text: str) -> Reference:
    root = base / "reference"
    repo = prepare(root)
    workflow = root / "wf.yaml"
    workflow.write_text(workflow_text)
    db = root / "m.db"
    started = time.monotonic()
    done = run_pilot(["run", str(workflow), "--param", f"repo={repo}"], db)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"the uninterrupted run failed: {done.stdout[-1500:]}{done.stderr}")
    events, state = load_run(db, run_id_of(db))
    work = workspace_of(state)
    lines = (root / "outside.txt").read_text().splitlines()
    return Reference(
        transcript=transcript(state.messages),
        tree=tree_hash(work),
        outside=lines,
        ignored=(work / "build.log").read_text().splitlines(),
        events=len(events),
        wall=wall,
    )


def cases(
    ref: Reference,
    *,
    quick: bool,
    randoms: int,
    seed: int,
    event_stride: int = 1,
    per_point: int = MUTATING_TOOLS,
) -> list[Case]:
    named = ["startup", "worktree_add", "worktree_added"]
    points = {
        "tool_returned": range(1, per_point + 1),
        "result_committed": range(1, per_point + 1),
        "snapshot_mid": range(2, per_point + 2),  # the first is the run's base snapshot
        "snapshot_taken": range(1, per_point + 1),
    }
    if quick:
        points = {"tool_returned": [1], "result_committed": [1]}
        named = ["worktree_add"]
    out = [Case(name, f"kill_at={name}") for name in named]
    for place, counts in points.items():
        out += [Case(place, f"kill_at={place}:{n}") for n in counts]
    seqs = range(1, ref.events, event_stride) if not quick else ()
    out += [Case("event", f"kill_after_seq={seq}") for seq in seqs]
    rng = random.Random(seed)
    out += [Case("random", delay=rng.uniform(0.0, ref.wall)) for _ in range(randoms)]
    return out


def _has_run(db: Path) -> bool:
    try:
        run_id_of(db)
    except Exception:
        return False
    return True


def judge(ref: Reference, db: Path, outside: Path, out: Outcome) -> None:
    events, state = load_run(db, run_id_of(db))
    out.resumed = state.finished is not None and state.finished.status == "succeeded"
    if state.started is None:
        return
    work = workspace_of(state)
    out.identical = (
        out.resumed and transcript(state.messages) == ref.transcript and tree_hash(work) == ref.tree
    )
    lines = outside.read_text().splitlines() if outside.exists() else []
    ids: dict[str, set[str]] = {}
    marks = []
    for line in lines:
        mark, _, call_id = line.partition(" ")
        # The phase check runs before any change and at finish (two call ids, two effects):
        # a check is doubled when one of its runs is; a command when its mark is.
        key = line if mark == "check" else mark
        marks.append(key)
        ids.setdefault(key, set()).add(call_id)
    counts = Counter(marks)
    interrupted = _interrupted_calls(events)
    for mark, count in counts.items():
        if count > 1:
            out.doubled += count - 1
            if len(ids[mark]) == 1:
                out.doubled_same_id += count - 1
                call = next(iter(ids[mark])).partition(":")[2]
                if call in interrupted:
                    out.doubled_in_window += count - 1
    ignored = (work / "build.log").read_text().splitlines() if (work / "build.log").exists() else []
    out.ignored_doubled = sum(c - 1 for c in Counter(ignored).values() if c > 1)
    out.integrity = integrity_ok(db)


def _interrupted_calls(events: list[Any]) -> set[str]:
    """Calls (and checks, ``check-<phase>-<attempt>``) started by a process that died before
    their result: the only ones a resume runs again."""
    open_calls: dict[str, bool] = {}
    out: set[str] = set()
    for event in events:
        match event.type:
            case "tool_started":
                open_calls[event.call_id] = True
            case "tool_finished":
                open_calls.pop(event.call_id, None)
            case "check_started":
                open_calls[f"check-{event.phase}-{event.attempt}"] = True
            case "check_finished":
                open_calls.pop(f"check-{event.phase}-{event.attempt}", None)
            case "run_resumed" | "workspace_restored":
                out.update(open_calls)
                open_calls.clear()
    return out


def run_case(case: Case, ref: Reference, base: Path, workflow_text: str, index: int) -> Outcome:
    out = Outcome(case)
    root = base / f"case{index:03d}"
    outside = root / "outside.txt"
    try:
        repo = prepare(root)
        workflow = root / "wf.yaml"
        workflow.write_text(workflow_text)
        db = root / "m.db"
        args = ["run", str(workflow), "--param", f"repo={repo}"]
        if case.delay is None:
            first = run_pilot(args, db, failpoint=case.failpoint)
            code = first.returncode
        else:
            proc = subprocess.Popen(
                pilot_cmd(*args, "--db", f"sqlite:///{db}", "--json"),
                env=pilot_env(root / "home"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                code = proc.wait(timeout=case.delay)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                code = proc.wait()
        out.killed = code == -signal.SIGKILL
        if not out.killed and code != 0:
            out.error = f"first process exit {code}"
        if not db.exists() or not _has_run(db):
            # Killed before the run's row was committed: there is no run, nothing was done.
            out.resumed = out.identical = not outside.exists()
            out.error = "" if out.resumed else "effects without a run"
            return out
        if out.killed:
            for _ in range(5):
                out.resumes += 1
                resumed = run_pilot(["resume", run_id_of(db)], db)
                if resumed.returncode == 0:
                    break
                if resumed.returncode != -signal.SIGKILL:
                    out.error = (resumed.stdout + resumed.stderr)[-300:]
                    break
        judge(ref, db, outside, out)
    except Exception as exc:  # a harness failure is a result, not a crash of the bench
        out.error = f"{type(exc).__name__}: {exc}"
    finally:
        if out.resumed and out.identical and not out.error:
            shutil.rmtree(root, ignore_errors=True)
    return out


def matrix(
    *,
    quick: bool = False,
    randoms: int = 30,
    seed: int = 1,
    event_stride: int = 1,
    per_point: int = MUTATING_TOOLS,
    base: Path | None = None,
) -> tuple[Reference, list[Outcome]]:
    """The reference run, then every case; each case in its own directory (repository,
    database, worktrees and the outside file ``outside.txt``, two levels above the worktree:
    the commands name it relatively, so one script serves every case)."""
    base = Path(tempfile.mkdtemp(prefix="kill-matrix-", dir=base))
    script, workflow = write_files(base, "@ENDPOINT@", OUTSIDE)
    config = SimConfig(
        model="kill-model",
        max_model_len=32768,
        timing=Timing(ttft=0, itl=0),
        policy=f"script:{script}",
    )
    with running_sim(config) as sim:
        text = workflow.read_text().replace("@ENDPOINT@", sim.openai_base_url)
        ref = reference(base, text)
        results = [
            run_case(case, ref, base, text, index)
            for index, case in enumerate(
                cases(
                    ref,
                    quick=quick,
                    randoms=randoms,
                    seed=seed,
                    event_stride=event_stride,
                    per_point=per_point,
                )
            )
        ]
    shutil.rmtree(base, ignore_errors=True)
    return ref, results


def summarise(results: list[Outcome]) -> list[list[Any]]:
    rows = []
    kinds = sorted({r.case.kind for r in results}, key=_kind_order)
    for kind in [*kinds, "all"]:
        group = [r for r in results if kind in ("all", r.case.kind)]
        rows.append(
            [
                kind,
                len(group),
                sum(r.killed for r in group),
                sum(r.resumed for r in group),
                sum(r.identical for r in group),
                sum(r.doubled for r in group),
                sum(r.doubled_same_id for r in group),
                sum(r.doubled_in_window for r in group),
                sum(r.ignored_doubled for r in group),
                sum(not r.resumed for r in group),
            ]
        )
    return rows


_ORDER = [
    "startup",
    "worktree_add",
    "worktree_added",
    "tool_returned",
    "result_committed",
    "snapshot_mid",
    "snapshot_taken",
    "event",
    "random",
]


def _kind_order(kind: str) -> int:
    return _ORDER.index(kind) if kind in _ORDER else len(_ORDER)


HEADERS = [
    "kill at",
    "cases",
    "kills",
    "resumed",
    "identical",
    "outside doubled",
    "same call id",
    "in window",
    "ignored doubled",
    "unresumable",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few cases of each kind")
    parser.add_argument("--random", type=int, default=30, help="random-moment kills")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--event-stride", type=int, default=1, help="kill after every N-th event (1: all)"
    )
    parser.add_argument(
        "--per-point",
        type=int,
        default=MUTATING_TOOLS,
        help="kills at each named tool boundary: its 1st to N-th occurrence",
    )
    parser.add_argument("--json", type=Path, help="also write every case's outcome here")
    args = parser.parse_args()
    started = time.monotonic()
    ref, results = matrix(
        quick=args.quick,
        randoms=0 if args.quick else args.random,
        seed=args.seed,
        event_stride=args.event_stride,
        per_point=args.per_point,
    )
    print(
        f"reference run: {ref.events} events, {len(ref.outside)} effects outside the "
        f"workspace, {ref.wall:.1f} s"
    )
    print(md_table(HEADERS, summarise(results)))
    bad = [r for r in results if not r.resumed or r.doubled != r.doubled_in_window]
    for r in bad:
        print(f"  {r.case.kind} {r.case.failpoint or f'{r.case.delay:.2f}s'}: {r.error}")
    print(f"{len(results)} cases in {time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps([_as_dict(r) for r in results], indent=1))
    unresumable = sum(not r.resumed for r in results)
    outside_window = sum(r.doubled - r.doubled_in_window for r in results)
    return 1 if unresumable or outside_window else 0


def _as_dict(result: Outcome) -> dict[str, Any]:
    data = dict(vars(result))
    data["case"] = vars(result.case)
    return data


if __name__ == "__main__":
    sys.exit(main())
