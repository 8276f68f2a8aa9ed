"""Crash safety with real processes: SIGKILL a `pilot` at every event boundary and inside a
running tool, resume, and compare with an uninterrupted run.

The kill chain: the first process dies right after committing event 1; each resume dies right
after committing the event two past what it found (one for its own `run_resumed`, one of real
progress), until a resume completes. So every boundary of the run is killed once, with one
process per boundary. Side effects are made visible: a `run` call appends a line to a file, so
a command applied twice would leave two lines.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pilot_harness import (
    call,
    final_state,
    make_repo,
    pilot_cmd,
    run_workspace,
    transcript,
    tree_hash,
    write_script,
    write_workflow,
)

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.store.event_store import EventStore

KEY = "crash-matrix"


def scripted_steps(pairs: int) -> list[dict]:
    """2 * pairs + 8 steps: writes and ledger appends, an edit, reads, commits, two finishes."""
    turns: list[dict] = []
    for i in range(1, pairs + 1):
        turns.append({"tool_calls": [call("write_file", path=f"f{i}.txt", content=f"v{i}\n")]})
        turns.append({"tool_calls": [call("run", command=f"echo step{i} >> ledger.txt")]})
    turns.append(
        {"tool_calls": [call("edit_file", path="app.py", old="VALUE = 1", new="VALUE = 7")]}
    )
    turns.append({"tool_calls": [call("read_file", path="ledger.txt")]})
    turns.append({"tool_calls": [call("git_commit", message="work")]})
    turns.append({"tool_calls": [call("finish", summary="phase one")]})
    turns.append({"tool_calls": [call("run", command="echo late >> ledger.txt")]})
    turns.append({"tool_calls": [call("read_file", path="app.py")]})
    turns.append({"tool_calls": [call("git_commit", message="more")]})
    turns.append({"tool_calls": [call("finish", summary="phase two")]})
    return turns


SHORT, FULL = 1, 6  # 10 steps in the default suite; the 20-step matrix runs with `-m slow`


def setup(tmp_path: Path, name: str, endpoint: str) -> tuple[Path, Path, Path]:
    repo = make_repo(tmp_path / f"repo-{name}")
    workflow = write_workflow(
        tmp_path / f"wf-{name}.yaml",
        key=KEY,
        endpoint=endpoint,
        phases=[
            {"name": "one", "prompt": "Do the first part."},
            {"name": "two", "prompt": "Do the rest.", "check": "grep -q late ledger.txt"},
        ],
    )
    return repo, workflow, tmp_path / f"{name}.db"


def pilot(args: list[str], db: Path, failpoint: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "MARATHON_HOME": str(db.parent / "home")}
    env.pop("MARATHON_FAILPOINT", None)
    if failpoint:
        env["MARATHON_FAILPOINT"] = failpoint
    return subprocess.run(
        pilot_cmd(*args, "--db", f"sqlite:///{db}", "--json"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def progress(store: EventStore, run_id: str) -> tuple:
    """Where the run stands, ignoring what a resume redoes (its own events, a re-request)."""
    state = final_state_from(store, run_id)
    phase = state.phase
    return (
        len(state.messages),
        len(state.phases_done),
        phase.check_attempts if phase else None,
        state.finished is not None,
    )


def final_state_from(store: EventStore, run_id: str):
    from pilot.agent.state import fold

    return fold(store.load_events(run_id))


def only_run_id(db: Path) -> str:
    (record,) = EventStore(f"sqlite:///{db}").list_runs()
    return record.id


@pytest.fixture(
    params=[SHORT, pytest.param(FULL, marks=pytest.mark.slow)], ids=["10-step", "20-step"]
)
def sim(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    pairs = request.param
    script = write_script(tmp_path_factory.mktemp("script") / "s.yaml", KEY, scripted_steps(pairs))
    config = SimConfig(model="crash-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(config) as server:
        server.steps = 2 * pairs + 8
        server.ledger = [f"step{i}" for i in range(1, pairs + 1)] + ["late"]
        yield server


@pytest.mark.timeout(1800)
def test_sigkill_at_every_event_boundary_then_resume_equals_uninterrupted_run(
    tmp_path: Path, sim
) -> None:
    repo, workflow, db = setup(tmp_path, "clean", sim.openai_base_url)
    done = pilot(["run", str(workflow), "--param", f"repo={repo}"], db)
    assert done.returncode == 0, done.stderr
    clean = final_state(db, only_run_id(db))
    assert clean.finished.status == "succeeded"
    assert clean.steps == sim.steps

    repo_k, workflow_k, db_k = setup(tmp_path, "killed", sim.openai_base_url)
    # A checkpoint after every event: each resume starts from the one its killed process wrote
    # last (a kill falls between an event and its checkpoint) and folds the events after it.
    first = pilot(
        ["run", str(workflow_k), "--param", f"repo={repo_k}"],
        db_k,
        "kill_after_seq=1,checkpoint_every=1",
    )
    assert first.returncode == -signal.SIGKILL
    run_id = only_run_id(db_k)
    store = EventStore(f"sqlite:///{db_k}")
    killed_after: list[str] = [store.load_events(run_id)[-1].type]
    extra = 0  # grows when a resume died before making progress (e.g. redoing a request)
    seen = progress(store, run_id)
    for _ in range(400):
        last = store.get_run(run_id).last_seq
        proc = pilot(
            ["resume", run_id], db_k, f"kill_after_seq={last + 2 + extra},checkpoint_every=1"
        )
        if proc.returncode != -signal.SIGKILL:
            assert proc.returncode == 0, proc.stderr
            break
        now = progress(store, run_id)
        extra = extra + 1 if now == seen else 0
        seen = now
        killed_after.append(store.load_events(run_id)[-1].type)
    else:
        pytest.fail("the run never completed")

    resumed = final_state(db_k, run_id)
    assert resumed.finished.status == "succeeded"
    assert transcript(resumed) == transcript(clean)
    work, work_k = run_workspace(db, only_run_id(db)), run_workspace(db_k, run_id)
    assert tree_hash(work_k) == tree_hash(work)
    ledger = (work_k / "ledger.txt").read_text().splitlines()
    assert ledger == sim.ledger, "no side effect twice"
    # Every kind of boundary was hit, including between tool_started and tool_finished. An
    # assistant message with calls is committed with its first tool_started, so no kill
    # falls between them.
    assert {
        "run_started",
        "phase_started",
        "model_request",
        "tool_started",
        "tool_finished",
        "check_started",
        "check_finished",
        "phase_finished",
    } <= set(killed_after)
    assert "assistant_message" not in killed_after
    resumes = [e for e in store.load_events(run_id) if isinstance(e, ev.RunResumed)]
    from_checkpoint = [e.from_checkpoint for e in resumes if e.from_checkpoint is not None]
    assert len(from_checkpoint) >= len(resumes) // 2, "most resumes start from a checkpoint"
    assert len(killed_after) >= 3 * sim.steps
    counts = {kind: killed_after.count(kind) for kind in sorted(set(killed_after))}
    print(
        f"\n{sim.steps}-step run: {len(killed_after)} SIGKILLs, all resumed; by boundary: {counts}"
    )


def test_sigkill_inside_a_running_tool_restores_the_workspace_and_runs_it_once(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "tool-started"
    hold = tmp_path / "hold"
    hold.touch()
    command = (
        f"echo before >> side.txt; touch {marker}; "
        f"while [ -e {hold} ]; do sleep 0.05; done; echo after >> side.txt"
    )
    script = write_script(
        tmp_path / "s.yaml",
        "crash-in-tool",
        [
            {"tool_calls": [call("write_file", path="a.txt", content="a\n")]},
            {"tool_calls": [call("run", command=command, timeout=60)]},
            {"tool_calls": [call("finish", summary="ok")]},
        ],
    )
    config = SimConfig(model="crash-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(config) as server:
        repo = make_repo(tmp_path / "repo")
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="crash-in-tool",
            endpoint=server.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        db = tmp_path / "m.db"
        env = {**os.environ, "MARATHON_HOME": str(tmp_path / "home")}
        proc = subprocess.Popen(
            pilot_cmd("run", str(workflow), "--param", f"repo={repo}", "--db", f"sqlite:///{db}"),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < deadline, "the tool never started"
            assert proc.poll() is None
            time.sleep(0.05)
        run_id = only_run_id(db)
        work = run_workspace(db, run_id)
        assert (work / "side.txt").read_text() == "before\n"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(0.3)  # the orphaned command must be gone (it dies with its parent)
        events = EventStore(f"sqlite:///{db}").load_events(run_id)
        assert events[-1].type == "tool_started"
        hold.unlink()  # the re-run of the command will not wait
        resumed = subprocess.run(
            pilot_cmd("resume", run_id, "--db", f"sqlite:///{db}", "--json"),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert resumed.returncode == 0, resumed.stderr
    state = final_state(db, run_id)
    types = [e.type for e in EventStore(f"sqlite:///{db}").load_events(run_id)]
    assert "workspace_restored" in types
    assert (work / "side.txt").read_text() == "before\nafter\n", "partial effect undone, then once"
    assert state.finished.status == "succeeded"
    results = [m for m in state.messages if m["role"] == "tool"]
    assert len(results) == 3, "the model sees exactly one result per call"
