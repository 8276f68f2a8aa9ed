"""Exactly once, with real processes: the re-run window is one commit, every command gets a
stable MARATHON_CALL_ID, a run is resumable from its first event, its process's death is
visible, the user's checkout is never touched, and every wait honours a stop.

Each test drives real `pilot` subprocesses against the simulated vLLM server over loopback,
on a real git repository and SQLite file, and kills them with the failpoints of
``pilot.failpoints`` (a real SIGKILL at a named place).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pilot_harness import GIT_ENV, call, final_state, pilot_cmd, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot.store.event_store import EventStore

KEY = "exactly-once"


def make_repo(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "README.md").write_text("# demo\n")
    (root / "tracked.txt").write_text("")
    (root / ".gitignore").write_text("*.log\n")
    env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
    return root


def effect(outside: Path, mark: str) -> str:
    """A command with an effect outside the workspace, one in a git-ignored file, one tracked."""
    return (
        f'echo "{mark} $MARATHON_CALL_ID" >> {outside}; echo {mark} >> build.log; '
        f"echo {mark} >> tracked.txt"
    )


def turns(outside: Path) -> list[dict]:
    return [
        {"tool_calls": [call("run", command=effect(outside, "one"))]},
        {"tool_calls": [call("write_file", path="a.txt", content="a\n")]},
        {"tool_calls": [call("run", command=effect(outside, "two"))]},
        {"tool_calls": [call("finish", summary="done")]},
    ]


@pytest.fixture
def world(tmp_path: Path):
    outside = tmp_path / "outside.txt"
    script = write_script(tmp_path / "s.yaml", KEY, turns(outside))
    config = SimConfig(model="once-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(config) as sim:
        repo = make_repo(tmp_path / "repo")
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key=KEY,
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        yield {"sim": sim, "repo": repo, "workflow": workflow, "outside": outside, "tmp": tmp_path}


def pilot(
    world: dict, *args: str, failpoint: str | None = None, extra_env: dict | None = None
) -> subprocess.CompletedProcess:
    tmp = world["tmp"]
    env = {**os.environ, **GIT_ENV, "MARATHON_HOME": str(tmp / "home"), **(extra_env or {})}
    env.pop("MARATHON_FAILPOINT", None)
    if failpoint:
        env["MARATHON_FAILPOINT"] = failpoint
    return subprocess.run(
        pilot_cmd(*args, "--db", f"sqlite:///{tmp / 'm.db'}"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def store_of(world: dict) -> EventStore:
    return EventStore(f"sqlite:///{world['tmp'] / 'm.db'}")


def only_run(world: dict) -> str:
    runs = store_of(world).list_runs()
    assert len(runs) == 1
    return runs[0].id


def start(world: dict, failpoint: str | None = None) -> subprocess.CompletedProcess:
    return pilot(
        world,
        "run",
        str(world["workflow"]),
        "--param",
        f"repo={world['repo']}",
        failpoint=failpoint,
    )


def checkout_facts(repo: Path) -> dict:
    """The user's checkout, byte for byte: HEAD, the index file, status, branches, reflog."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "--no-optional-locks", *args], cwd=repo, capture_output=True, text=True
        ).stdout

    branches = [
        line for line in git("for-each-ref", "refs/heads").splitlines() if "marathon/" not in line
    ]
    return {
        "HEAD": (repo / ".git" / "HEAD").read_bytes(),
        "head": git("rev-parse", "HEAD"),
        "index": hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest(),
        "status": git("status", "--porcelain", "--ignored"),
        "branches": branches,
        "reflog": git("reflog", "show", "--format=%H %gs", "HEAD"),
        "files": {p.name: p.read_bytes() for p in repo.iterdir() if p.is_file()},
    }


def outside_lines(world: dict) -> list[str]:
    path = world["outside"]
    return path.read_text().splitlines() if path.exists() else []


def workspace(world: dict, run_id: str) -> Path:
    state = final_state(world["tmp"] / "m.db", run_id)
    return Path(state.started.workspace)


# -- 1. the re-run window is one commit -----------------------------------------------------


SLOW = pytest.mark.slow  # the same property at another point (also in bench/kill_matrix.py)


@pytest.mark.parametrize(
    "place",
    [
        "result_committed",
        pytest.param("snapshot_mid:2", marks=SLOW),
        pytest.param("snapshot_taken", marks=SLOW),
    ],
)
def test_a_tool_whose_result_is_committed_is_never_run_again(world: dict, place: str) -> None:
    killed = start(world, f"kill_at={place}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    run_id = only_run(world)
    types = [e.type for e in store_of(world).load_events(run_id)]
    assert types[-1] == "tool_finished", "killed after the result's commit, before its snapshot"
    assert outside_lines(world)[0].startswith("one ")

    done = pilot(world, "resume", run_id)
    assert done.returncode == 0, done.stderr
    events = store_of(world).load_events(run_id)
    types = [e.type for e in events]
    assert "workspace_restored" not in types, "a finished tool is snapshotted, not re-run"
    resumed_at = types.index("run_resumed")
    assert types[resumed_at + 1] == "workspace_snapshot", "the missing snapshot comes first"
    assert [line.split()[0] for line in outside_lines(world)] == ["one", "two"]
    work = workspace(world, run_id)
    assert (work / "tracked.txt").read_text() == "one\ntwo\n"
    assert (work / "build.log").read_text() == "one\ntwo\n"
    state = final_state(world["tmp"] / "m.db", run_id)
    assert state.finished.status == "succeeded"
    assert sum(m["role"] == "tool" for m in state.messages) == 4


def test_a_command_killed_before_its_result_commit_runs_again_with_the_same_call_id(
    world: dict,
) -> None:
    """The one window left: the command returned, its result is not committed. It runs again
    after the restore, and both runs carry the same MARATHON_CALL_ID. Git-ignored files are
    not restored: the first run's line stays in build.log (README, "What a run guarantees")."""
    killed = start(world, "kill_at=tool_returned")
    assert killed.returncode == -signal.SIGKILL
    run_id = only_run(world)
    assert [e.type for e in store_of(world).load_events(run_id)][-1] == "tool_started"
    done = pilot(world, "resume", run_id)
    assert done.returncode == 0, done.stderr
    lines = outside_lines(world)
    assert [line.split()[0] for line in lines] == ["one", "one", "two"]
    first, again, second = (line.split()[1] for line in lines)
    assert first == again, "a re-run carries the same MARATHON_CALL_ID"
    assert first != second and first.startswith(f"{run_id}:")
    work = workspace(world, run_id)
    assert (work / "tracked.txt").read_text() == "one\ntwo\n", "tracked files are restored"
    assert (work / "build.log").read_text() == "one\none\ntwo\n", "ignored files are left as is"
    types = [e.type for e in store_of(world).load_events(run_id)]
    assert "workspace_restored" in types


# -- 3. resumable from the first event; liveness ----------------------------------------------


@pytest.mark.parametrize(
    "place",
    [
        pytest.param("startup", marks=SLOW),
        "worktree_add",
        pytest.param("worktree_added", marks=SLOW),
    ],
)
def test_a_run_killed_in_start_up_is_interrupted_then_resumed(world: dict, place: str) -> None:
    killed = start(world, f"kill_at={place}")
    assert killed.returncode == -signal.SIGKILL
    run_id = only_run(world)
    assert store_of(world).load_events(run_id) == []
    listing = pilot(world, "runs")
    assert "interrupted" in listing.stdout and f"pilot resume {run_id}" in listing.stdout
    shown = pilot(world, "show", run_id)
    assert "interrupted" in shown.stdout and "Traceback" not in shown.stderr
    report = pilot(world, "report", run_id)
    assert "interrupted" in report.stdout, report.stdout + report.stderr

    done = pilot(world, "resume", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    state = final_state(world["tmp"] / "m.db", run_id)
    assert state.finished.status == "succeeded"
    assert [line.split()[0] for line in outside_lines(world)] == ["one", "two"]
    assert "succeeded" in pilot(world, "runs").stdout


def test_a_killed_run_shows_interrupted_with_its_resume_command(world: dict) -> None:
    killed = start(world, "kill_after_seq=4")
    assert killed.returncode == -signal.SIGKILL
    run_id = only_run(world)
    assert store_of(world).get_run(run_id).status == "running"  # the row cannot know
    for command in ("runs", "show"):
        out = pilot(world, command, *([run_id] if command == "show" else [])).stdout
        assert "interrupted" in out and f"pilot resume {run_id}" in out, out
    assert "interrupted" in pilot(world, "report", run_id).stdout


# -- 6. the user's checkout is never touched ---------------------------------------------------


def test_the_checkout_is_unchanged_by_run_kill_resume_and_gc(world: dict) -> None:
    repo = world["repo"]
    before = checkout_facts(repo)
    killed = start(world, "kill_at=tool_returned:2")
    assert killed.returncode == -signal.SIGKILL
    assert checkout_facts(repo) == before
    run_id = only_run(world)
    assert pilot(world, "resume", run_id).returncode == 0
    assert checkout_facts(repo) == before
    work = workspace(world, run_id)
    branch = f"marathon/run-{run_id}"
    assert work.is_dir() and not str(work).startswith(str(repo))
    diff = pilot(world, "diff", run_id)
    assert "a.txt" in diff.stdout and "tracked.txt" in diff.stdout
    gc = pilot(world, "gc", "--older-than", "0s")
    assert gc.returncode == 0, gc.stderr
    assert "worktree" in gc.stdout
    assert not work.exists(), "gc removes the worktree of an ended run"
    assert checkout_facts(repo) == before
    kept = subprocess.run(
        ["git", "rev-parse", "--verify", "-q", f"refs/heads/{branch}"], cwd=repo
    ).returncode
    assert kept == 0, "gc keeps the run's branch unless asked"
    listed = subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True)
    assert str(work) not in listed.stdout


def test_uncommitted_changes_are_refused_or_carried(world: dict, tmp_path: Path) -> None:
    repo = world["repo"]
    (repo / "tracked.txt").write_text("local edit\n")
    (repo / "new.txt").write_text("untracked\n")
    before = checkout_facts(repo)
    refused = start(world)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "uncommitted changes" in refused.stderr and "carry_changes" in refused.stderr
    assert "tracked.txt" in refused.stderr and "Traceback" not in refused.stderr
    assert store_of(world).list_runs() == [], "refused before anything is recorded"
    assert checkout_facts(repo) == before

    text = (
        world["workflow"]
        .read_text()
        .replace("path: '{{ params.repo }}'", "path: '{{ params.repo }}'\n  carry_changes: true")
    )
    assert "carry_changes" in text
    world["workflow"].write_text(text)
    carried = start(world)
    assert carried.returncode == 0, carried.stdout + carried.stderr
    run_id = next(r.id for r in store_of(world).list_runs() if r.status == "succeeded")
    work = workspace(world, run_id)
    assert (work / "tracked.txt").read_text() == "local edit\none\ntwo\n"
    assert (work / "new.txt").read_text() == "untracked\n"
    assert checkout_facts(repo) == before


def test_two_runs_on_one_repository_at_once(world: dict) -> None:
    repo = world["repo"]
    before = checkout_facts(repo)
    tmp = world["tmp"]
    env = {**os.environ, **GIT_ENV, "MARATHON_HOME": str(tmp / "home")}
    env.pop("MARATHON_FAILPOINT", None)
    args = ["run", str(world["workflow"]), "--param", f"repo={repo}", "--db"]
    procs = [
        subprocess.Popen(
            pilot_cmd(*args, f"sqlite:///{tmp / 'm.db'}"),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    assert [code for code, _o, _e in results] == [0, 0], results
    runs = store_of(world).list_runs()
    assert {r.status for r in runs} == {"succeeded"} and len(runs) == 2
    works = {workspace(world, r.id) for r in runs}
    assert len(works) == 2
    for work in works:
        assert (work / "tracked.txt").read_text() == "one\ntwo\n"
    assert checkout_facts(repo) == before


# -- 4. every wait honours a stop; database locks --------------------------------------------


def _wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_sigterm_while_waiting_for_the_server_pauses_at_once(world: dict) -> None:
    tmp = world["tmp"]
    workflow = write_workflow(
        tmp / "dead.yaml",
        key=KEY,
        endpoint="http://127.0.0.1:9/v1",
        phases=[{"name": "work", "prompt": "p"}],
        model={"server_wait": 600},
    )
    env = {**os.environ, **GIT_ENV, "MARATHON_HOME": str(tmp / "home")}
    db = tmp / "m.db"
    proc = subprocess.Popen(
        pilot_cmd(
            "run", str(workflow), "--param", f"repo={world['repo']}", "--db", f"sqlite:///{db}"
        ),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def waiting() -> bool:
        runs = store_of(world).list_runs()
        types = [e.type for e in store_of(world).load_events(runs[0].id)] if runs else []
        return "server_unavailable" in types

    _wait_for(waiting)
    time.sleep(1.5)  # well inside a backoff
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    took = time.monotonic() - signalled
    assert took < 3, f"took {took:.1f} s to pause"
    assert proc.returncode == 0, err
    run_id = only_run(world)
    record = store_of(world).get_run(run_id)
    assert record.status == "paused" and record.lease_owner is None
    assert f"pilot resume {run_id}" in out
    events = store_of(world).load_events(run_id)
    assert events[-1].type == "run_paused"
    # The resume line works as printed; --endpoint points it at a live server.
    done = pilot(world, "resume", run_id, "--endpoint", world["sim"].openai_base_url)
    assert done.returncode == 0, done.stderr


def test_resume_talks_to_the_endpoint_the_run_was_started_with(world: dict) -> None:
    tmp = world["tmp"]
    workflow = write_workflow(
        tmp / "elsewhere.yaml",
        key=KEY,
        endpoint="http://127.0.0.1:9/v1",  # nothing answers there
        phases=[{"name": "work", "prompt": "p"}],
        model={"server_wait": 3},
    )
    url = world["sim"].openai_base_url
    killed = pilot(
        world,
        "run",
        str(workflow),
        "--param",
        f"repo={world['repo']}",
        "--endpoint",
        url,
        failpoint="kill_at=tool_returned:2",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    run_id = only_run(world)
    done = pilot(world, "resume", run_id, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    events = store_of(world).load_events(run_id)
    answered = [e.endpoint for e in events if e.type == "assistant_message"]
    resumed_at = next(i for i, e in enumerate(events) if e.type == "run_resumed")
    assert all(e.endpoint == url for e in events[resumed_at:] if e.type == "assistant_message")
    assert len(answered) == 4


LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=60)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.rollback()
"""


def test_a_database_locked_by_another_process_pauses_without_a_traceback(world: dict) -> None:
    """A write lock held by another process for 40 s: the pilot waits it out for
    MARATHON_DB_LOCK_WAIT (2 s here), then stops with a clear message and exit 74; the run
    shows interrupted and resumes once the lock is gone."""
    tmp = world["tmp"]
    db = tmp / "m.db"
    hold = tmp / "hold"
    hold.touch()
    outside = world["outside"]
    script = write_script(
        tmp / "lock.yaml",
        "locked-db",
        [
            {"tool_calls": [call("run", command=f"echo one >> {outside}")]},
            {
                "tool_calls": [
                    call(
                        "run",
                        command=f"echo slow >> {outside}; while [ -e {hold} ]; do sleep 0.05; done",
                    )
                ]
            },
            {"tool_calls": [call("finish", summary="done")]},
        ],
    )
    config = SimConfig(model="lock-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(config) as sim:
        workflow = write_workflow(
            tmp / "lockwf.yaml",
            key="locked-db",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        env = {
            **os.environ,
            **GIT_ENV,
            "MARATHON_HOME": str(tmp / "home"),
            "MARATHON_DB_LOCK_WAIT": "2",
        }
        proc = subprocess.Popen(
            pilot_cmd(
                "run", str(workflow), "--param", f"repo={world['repo']}", "--db", f"sqlite:///{db}"
            ),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_for(lambda: outside.exists() and "slow" in outside.read_text())
        locker = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(db), "40"], stdout=subprocess.PIPE, text=True
        )
        try:
            assert locker.stdout.readline().strip() == "locked"
            hold.unlink()  # the tool returns; its result cannot be committed
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 74, out + err
            assert "Traceback" not in err and "locked by another process" in err
            assert "MARATHON_DB_LOCK_WAIT" in err
        finally:
            locker.kill()
            locker.wait()
        run_id = only_run(world)
        assert "interrupted" in pilot(world, "runs").stdout
        done = pilot(world, "resume", run_id)
        assert done.returncode == 0, done.stdout + done.stderr
    assert final_state(db, run_id).finished.status == "succeeded"


def test_sigterm_while_waiting_for_a_database_lock_pauses_at_once(world: dict) -> None:
    tmp = world["tmp"]
    db = tmp / "m.db"
    EventStore(f"sqlite:///{db}").close()  # the schema exists before the lock is taken
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(db), "40"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert locker.stdout.readline().strip() == "locked"
        env = {**os.environ, **GIT_ENV, "MARATHON_HOME": str(tmp / "home")}
        proc = subprocess.Popen(
            pilot_cmd(
                "run",
                str(world["workflow"]),
                "--param",
                f"repo={world['repo']}",
                "--db",
                f"sqlite:///{db}",
            ),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        note = proc.stderr.readline()  # waiting for the lock (600 s by default)
        assert "locked by another process" in note, note
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
        assert time.monotonic() - signalled < 3
        assert "Traceback" not in err and "stopped while the database was locked" in err, err
        assert proc.returncode != 130
    finally:
        locker.kill()
        locker.wait()
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from events").fetchone()[0] == 0


def test_json_events_name_the_snapshot_after_the_result(world: dict) -> None:
    done = pilot(world, "run", str(world["workflow"]), "--param", f"repo={world['repo']}", "--json")
    assert done.returncode == 0, done.stderr
    types = [json.loads(line)["type"] for line in done.stdout.splitlines() if line.startswith("{")]
    run_calls = [i for i, t in enumerate(types) if t == "tool_finished"]
    assert types[run_calls[0] + 1] == "workspace_snapshot"


def test_a_dry_run_resumes_as_a_dry_run_from_the_line_it_printed(tmp_path: Path) -> None:
    """The resume line of a dry run has no --dry-run; it still serves the simulated model
    again instead of waiting on the dead in-process one."""
    env = {**os.environ, **GIT_ENV, "MARATHON_HOME": str(tmp_path / "home")}
    env["MARATHON_FAILPOINT"] = "kill_after_seq=6"
    workflow = Path(__file__).resolve().parents[1] / "workflows" / "refactor_repo.yaml"
    killed = subprocess.run(
        pilot_cmd("run", str(workflow), "--dry-run", "--json"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    store = EventStore(f"sqlite:///{tmp_path / 'home' / 'marathon.db'}")
    (record,) = store.list_runs()
    env.pop("MARATHON_FAILPOINT")
    resumed = subprocess.run(
        pilot_cmd("resume", record.id), env=env, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "DRY RUN" in resumed.stdout
    assert store.get_run(record.id).status == "succeeded"


def test_a_conversation_event_deleted_behind_the_checkpoint_stops_the_resume_with_its_seq(
    world: dict,
) -> None:
    # The resume folds from the checkpoint without reading the conversation; the first request
    # reads it, finds the deleted answer missing and stops the run saying so, never sending a
    # request with a hole (nor a traceback).
    killed = start(world, "checkpoint_every=2,kill_at=snapshot_taken")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    run_id = only_run(world)
    store = store_of(world)
    answer = next(seq for seq, e in store.iter_events(run_id) if e.type == "assistant_message")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM events WHERE run_id = ? AND seq = ?", (run_id, answer))
    done = pilot(world, "resume", run_id)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    assert f"(seq {answer})" in done.stderr + done.stdout, done.stderr
    events = store_of(world).load_events(run_id)
    resumed = [e for e in events if e.type == "run_resumed"][-1]
    assert resumed.from_checkpoint is not None, "resumed from the checkpoint"
    assert events[-1].type == "run_finished" and f"(seq {answer})" in events[-1].reason
    assert not any(e.type == "model_request" for e in events[events.index(resumed) :])
