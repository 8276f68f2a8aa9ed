"""How a run's commands are confined is a choice the run states: the pilot's state is not in
the sandbox, a workspace holding it is refused, and a run without the sandbox says so at its
start, in `pilot show` and in its report (SECURITY.md, "What the sandbox modes protect")."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from pilot_harness import _closing, call, make_repo, pilot_cmd, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.run.launch import load_for_run, start_run
from pilot.run.runner import Runner
from pilot.store.event_store import EventStore
from tools.base import ToolContext
from tools.sandbox import bwrap_status
from tools.shell import run_command
from tools.workspace import Workspace


def test_inside_the_sandbox_the_pilots_state_is_not_there(tmp_path: Path) -> None:
    """The database and the checkpoint folder exist outside (not under /tmp, which the
    sandbox replaces anyway); inside, the folder is empty and the database unreadable:
    nothing to read, nothing to forge."""
    if not bwrap_status().available and not os.environ.get("MARATHON_REQUIRE_SANDBOX"):
        pytest.skip(f"no working bwrap: {bwrap_status().reason}")
    home = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="marathon-hidden-"))
    try:
        checkpoints = home / "checkpoints"
        (checkpoints / "r1").mkdir(parents=True)
        (checkpoints / "r1" / "state.json").write_text("{}")
        database = home / "marathon.db"
        database.write_text("SQLite format 3 and the run's events")
        (home / "other.txt").write_text("not the pilot's")
        workspace = tmp_path / "ws"
        workspace.mkdir()
        ctx = ToolContext(
            workspace=Workspace(workspace),
            artifacts_dir=tmp_path / "artifacts",
            sandbox="bwrap",
            hidden=[checkpoints, database],
        )
        script = (
            f"echo entries=$(ls -A {checkpoints} | wc -l); cat {database}; "
            f"touch {checkpoints}/r1/state.json; cat {home}/other.txt"
        )
        result = run_command(script, ctx, timeout=30)
        assert result.sandboxed
        assert "entries=0" in result.output, result.output
        assert "SQLite" not in result.output, result.output
        assert "not the pilot's" in result.output, "only the state is hidden"
        assert database.read_text().startswith("SQLite"), "the real file is untouched"
        assert (checkpoints / "r1" / "state.json").read_text() == "{}"
        # Without the sandbox the same command reaches it all (SECURITY.md says so).
        bare = run_command(script, replace(ctx, sandbox="none"), timeout=30)
        assert not bare.sandboxed and "SQLite" in bare.output
        assert "entries=1" in bare.output
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_workspace_that_holds_the_state_directory_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    workflow = write_workflow(
        tmp_path / "wf.yaml",
        key="unused",
        endpoint="http://127.0.0.1:9/v1",
        phases=[{"name": "work", "prompt": "p"}],
    )
    store = EventStore(f"sqlite:///{repo / '.state' / 'marathon.db'}")
    runner = Runner(store)
    outcome = asyncio.run(
        _closing(runner, start_run(runner, load_for_run(workflow, [f"repo={repo}"])))
    )
    assert outcome.status == "failed"
    assert "holds Marathon's state" in outcome.reason and str(repo) in outcome.reason


FAKE_BWRAP = "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"


def test_auto_without_a_working_sandbox_is_said_at_start_in_show_and_in_the_report(
    tmp_path: Path,
) -> None:
    """Where bubblewrap cannot run (a bwrap that fails first on PATH), `sandbox: auto` runs
    commands unconfined, and says so: in run_started, the live view, `pilot show` and the
    report."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bwrap").write_text(FAKE_BWRAP)
    (bin_dir / "bwrap").chmod(0o755)
    home, repo = tmp_path / "home", make_repo(tmp_path / "repo")
    script = write_script(
        tmp_path / "s.yaml", "auto", [{"tool_calls": [call("finish", summary="done")]}]
    )
    env = {**os.environ, "MARATHON_HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("MARATHON_DB", None)
    env.pop("MARATHON_REQUIRE_SANDBOX", None)
    with running_sim(SimConfig(model="m", max_model_len=32768, policy=f"script:{script}")) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="auto",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        workflow.write_text(workflow.read_text().replace("sandbox: none", "sandbox: auto"))
        done = subprocess.run(
            [*pilot_cmd(), "run", str(workflow), "-p", f"repo={repo}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    said = "sandbox: none: sandbox: auto and bwrap does not work here"
    assert said in " ".join(done.stdout.split()), done.stdout
    store = EventStore(f"sqlite:///{home / 'marathon.db'}")
    run_id = store.list_runs()[0].id
    started = store.load_events(run_id)[0]
    assert isinstance(started, ev.RunStarted)
    assert started.sandbox.startswith("none: sandbox: auto and bwrap does not work here")
    shown = subprocess.run(
        [*pilot_cmd(), "show", run_id], env=env, capture_output=True, text=True, timeout=60
    )
    assert said in " ".join(shown.stdout.split()), shown.stdout
    report = subprocess.run(
        [*pilot_cmd(), "report", run_id], env=env, capture_output=True, text=True, timeout=60
    )
    assert "- Sandbox: none: sandbox: auto and bwrap does not work here" in report.stdout
