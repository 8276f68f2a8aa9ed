"""The end-of-run notification: the workflow's ``notify`` command, else ``$MARATHON_NOTIFY``.

Real runs against the simulated server, real shell commands writing what they were given.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pilot_harness import call, make_repo, run_in_process, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot.errors import WorkflowError
from pilot.run.notify import notify_queue_end
from pilot.workflow import parse_workflow_text

KEY = "notify-flow"
RECORD = (
    'printf "%s %s %s\\n" "$MARATHON_EVENT" "$MARATHON_RUN_STATUS" "$MARATHON_RUN_ID" >> {log}; '
    "cat > {payload}"
)


@pytest.fixture
def sim(tmp_path: Path):
    script = write_script(
        tmp_path / "script.yaml", KEY, [{"tool_calls": [call("finish", summary="done")]}]
    )
    with running_sim(SimConfig(model="m", policy=f"script:{script}")) as server:
        yield server


def workflow(tmp_path: Path, sim, notify: object | None) -> Path:
    path = write_workflow(
        tmp_path / "wf.yaml",
        key=KEY,
        endpoint=sim.openai_base_url,
        phases=[{"name": "work", "prompt": "p"}],
    )
    if notify is not None:
        import yaml

        data = yaml.safe_load(path.read_text())
        data["notify"] = notify
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_run_that_ends_runs_the_workflows_command_with_the_run_on_stdin(
    tmp_path: Path, sim, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MARATHON_NOTIFY", raising=False)
    log, payload = tmp_path / "notify.log", tmp_path / "payload.json"
    wf = workflow(tmp_path, sim, RECORD.format(log=log, payload=payload))
    outcome = run_in_process(wf, make_repo(tmp_path / "repo"), tmp_path / "m.db")
    assert outcome.status == "succeeded"
    assert log.read_text() == f"run_ended succeeded {outcome.run_id}\n"
    sent = json.loads(payload.read_text())
    assert sent["run_id"] == outcome.run_id and sent["status"] == "succeeded"
    assert sent["workflow"] == "test-flow" and sent["steps"] == 1
    assert sent["show"] == f"pilot show {outcome.run_id}" and "resume" not in sent


def test_a_failing_notify_command_never_changes_the_run(
    tmp_path: Path, sim, capfd: pytest.CaptureFixture[str]
) -> None:
    wf = workflow(tmp_path, sim, {"command": "echo no route to host >&2; exit 3"})
    outcome = run_in_process(wf, make_repo(tmp_path / "repo"), tmp_path / "m.db")
    assert outcome.status == "succeeded" and outcome.exit_code == 0
    err = capfd.readouterr().err
    assert "the notify command exited 3: no route to host" in err
    assert "the run itself is unaffected" in err


def test_only_the_endings_asked_for_notify(tmp_path: Path, sim) -> None:
    log = tmp_path / "notify.log"
    wf = workflow(tmp_path, sim, {"command": f"echo x >> {log}", "on": ["failed", "paused"]})
    outcome = run_in_process(wf, make_repo(tmp_path / "repo"), tmp_path / "m.db")
    assert outcome.status == "succeeded" and not log.exists()


def test_without_notify_in_the_workflow_the_users_command_is_used_and_a_batch_gets_one_line(
    tmp_path: Path, sim, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, payload = tmp_path / "notify.log", tmp_path / "payload.json"
    monkeypatch.setenv("MARATHON_NOTIFY", RECORD.format(log=log, payload=payload))
    wf = workflow(tmp_path, sim, None)
    outcomes = [
        run_in_process(wf, make_repo(tmp_path / f"repo{i}"), tmp_path / "m.db") for i in (1, 2)
    ]
    notify_queue_end(outcomes)
    lines = log.read_text().splitlines()
    assert lines[:2] == [f"run_ended succeeded {o.run_id}" for o in outcomes]
    assert lines[2] == "queue_done 2 succeeded "
    batch = json.loads(payload.read_text())
    assert batch["runs"] == 2 and batch["by_status"] == {"succeeded": 2}


def test_a_notify_with_an_unknown_ending_names_the_file_line_and_field(tmp_path: Path) -> None:
    text = (
        "name: x\nworkspace: {path: .}\ntools: [finish]\n"
        "notify:\n  command: echo hi\n  on: [sometimes]\n"
        "phases:\n  - name: a\n    prompt: p\n"
    )
    with pytest.raises(WorkflowError) as err:
        parse_workflow_text(text, "wf.yaml")
    assert "wf.yaml:6:" in str(err.value) and "notify.on" in str(err.value)
    shorthand = text.replace(
        "notify:\n  command: echo hi\n  on: [sometimes]\n", "notify: echo hi\n"
    )
    assert parse_workflow_text(shorthand, "wf.yaml").workflow.notify.command == "echo hi"
