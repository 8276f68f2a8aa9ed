"""A run's durability is kept with it: ``pilot resume`` and ``pilot worker`` commit as the run
was started (``--durability full``: SQLite fsyncs each commit), ``resume --durability``
changes it for good. Proven on real processes by counting the fsyncs on the database's files
under strace (skipped without strace), and by the setting each records."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from pilot_harness import GIT_ENV, call, make_repo, pilot_cmd, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot.store.event_store import EventStore

KEY = "durable"
STRACE = shutil.which("strace")


def turns() -> list[dict]:
    return [
        {"tool_calls": [call("write_file", path=f"f{i}.txt", content=f"{i}\n")]} for i in range(6)
    ] + [{"tool_calls": [call("finish", summary="done")]}]


@pytest.fixture
def world(tmp_path: Path):
    script = write_script(tmp_path / "s.yaml", KEY, turns())
    config = SimConfig(model="durable-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(config) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key=KEY,
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        yield {"tmp": tmp_path, "workflow": workflow}


def pilot(
    world: dict, name: str, *args: str, failpoint: str | None = None, traced: Path | None = None
) -> subprocess.CompletedProcess:
    """``pilot ARGS`` on the database ``name``.db, under strace when ``traced`` (the trace)."""
    tmp = world["tmp"]
    env = {**os.environ, **GIT_ENV, "MARATHON_HOME": str(tmp / "home")}
    env.pop("MARATHON_FAILPOINT", None)
    if failpoint:
        env["MARATHON_FAILPOINT"] = failpoint
    command = pilot_cmd(*args, "--db", f"sqlite:///{tmp / name}.db")
    if traced is not None:
        assert STRACE is not None
        command = [STRACE, "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync", "-o", str(traced)]
        command += pilot_cmd(*args, "--db", f"sqlite:///{tmp / name}.db")
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)


def killed_run(world: dict, name: str, *durability: str) -> str:
    """A run started (with ``durability`` flags) and SIGKILLed after its 6th event."""
    repo = make_repo(world["tmp"] / f"repo-{name}")
    args = ("run", str(world["workflow"]), "--param", f"repo={repo}", *durability)
    died = pilot(world, name, *args, failpoint="kill_after_seq=6")
    assert died.returncode == -9, died.stdout + died.stderr
    (run,) = EventStore(f"sqlite:///{world['tmp'] / name}.db").list_runs()
    return run.id


def record(world: dict, name: str, run_id: str):
    return EventStore(f"sqlite:///{world['tmp'] / name}.db").get_run(run_id)


def db_fsyncs(trace: Path, name: str) -> int:
    """The fsync / fdatasync calls on the database's own files (-y names each fd's path)."""
    return sum(1 for line in trace.read_text().splitlines() if f"/{name}.db" in line)


def test_a_run_keeps_its_durability_and_resume_changes_it_only_when_told(world: dict) -> None:
    full = killed_run(world, "full", "--durability", "full")
    normal = killed_run(world, "normal")
    assert record(world, "full", full).launch.durability == "full"
    assert record(world, "normal", normal).launch.durability == "normal"
    # A plain resume keeps the run's own; a given --durability is kept with the run.
    done = pilot(world, "normal", "resume", normal, "--durability", "full")
    assert done.returncode == 0, done.stdout + done.stderr
    assert record(world, "normal", normal).launch.durability == "full"
    again = killed_run(world, "third", "--durability", "full")
    done = pilot(world, "third", "resume", again, "--durability", "normal")
    assert done.returncode == 0, done.stdout + done.stderr
    assert record(world, "third", again).launch.durability == "normal"
    done = pilot(world, "full", "resume", full)
    assert done.returncode == 0, done.stdout + done.stderr
    assert record(world, "full", full).launch.durability == "full"
    listed = pilot(world, "full", "runs", "--json")
    assert json.loads(listed.stdout.splitlines()[0])["durability"] == "full", listed.stdout


@pytest.mark.skipif(STRACE is None, reason="strace is not installed")
def test_resume_fsyncs_each_commit_of_a_full_run_and_not_of_a_normal_one(world: dict) -> None:
    """The same resume (a run killed after its 6th event, 7 more steps to go) fsyncs the
    database at each commit when the run was started with --durability full, though the
    resume is given no flag; a normal run's resume does not."""
    counts = {}
    for name, flags in (("full", ("--durability", "full")), ("normal", ())):
        run_id = killed_run(world, name, *flags)
        trace = world["tmp"] / f"{name}.trace"
        done = pilot(world, name, "resume", run_id, traced=trace)
        assert done.returncode == 0, done.stdout + done.stderr
        counts[name] = db_fsyncs(trace, name)
    print("fsyncs on the database, resume:", counts)
    assert counts["full"] >= 7, counts
    assert counts["normal"] * 3 < counts["full"], counts


@pytest.mark.skipif(STRACE is None, reason="strace is not installed")
def test_a_worker_commits_as_the_queued_run_asks(world: dict) -> None:
    """``queue add --durability full`` is kept with the run; a worker opened with no flag
    then fsyncs each of its commits, and one for a normal run does not."""
    counts = {}
    for name, flags in (("qfull", ("--durability", "full")), ("qnormal", ())):
        repo = make_repo(world["tmp"] / f"repo-{name}")
        added = pilot(
            world, name, "queue", "add", str(world["workflow"]), "-p", f"repo={repo}", *flags
        )
        assert added.returncode == 0, added.stdout + added.stderr
        trace = world["tmp"] / f"{name}.trace"
        done = pilot(world, name, "worker", "--exit-when-idle", traced=trace)
        assert done.returncode == 0, done.stdout + done.stderr
        (run,) = EventStore(f"sqlite:///{world['tmp'] / name}.db").list_runs()
        assert run.status == "succeeded" and run.launch.durability == (
            flags[1] if flags else "normal"
        )
        counts[name] = db_fsyncs(trace, name)
    print("fsyncs on the database, worker:", counts)
    assert counts["qfull"] >= 7, counts
    assert counts["qnormal"] * 3 < counts["qfull"], counts
