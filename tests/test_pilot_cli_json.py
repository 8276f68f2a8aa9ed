"""The pilot CLI's last rough edges (issue 37), through the real ``pilot`` executable: ``--json``
on ``logs`` and ``report`` (a versioned document), shell completion of run ids and of the
``--format`` / ``--durability`` choices, the choices and ``NAME=VALUE`` in the help, and the
roll-up line that ends a matrix or a worker's batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
import yaml
from pilot_harness import call, make_repo, pilot_cmd, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot.front.cli import Durability
from pilot.report.json_report import SCHEMA
from pilot.store.event_store import EventStore
from pilot.store.opening import DURABILITIES

KEY = "cli-json"
PILOT = Path(sys.executable).with_name("pilot")


@pytest.fixture(scope="module")
def sim():
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    turns = [{"tool_calls": [call("run", command="echo hi")]}]
    turns.append({"tool_calls": [call("finish", summary="done")]})
    script = write_script(folder / f"{KEY}-{os.getpid()}.yaml", KEY, turns)
    config = SimConfig(model="q-model", max_model_len=32768, policy=f"script:{script}")
    with running_sim(config) as server:
        yield server
    script.unlink()


def env_for(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "MARATHON_HOME": str(tmp_path / "home")}
    env.pop("MARATHON_DB", None)
    return env


def pilot(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pilot_cmd(*args), env=env_for(tmp_path), capture_output=True, text=True, timeout=180
    )


def flow(tmp_path: Path, endpoint: str) -> Path:
    return write_workflow(
        tmp_path / "wf.yaml", key=KEY, endpoint=endpoint, phases=[{"name": "work", "prompt": "p"}]
    )


@pytest.fixture
def finished(tmp_path: Path, sim) -> tuple[str, str]:
    """A run that succeeded, in its own store: (run id, store URL)."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    repo = make_repo(tmp_path / "repo")
    wf = flow(tmp_path, sim.openai_base_url)
    done = pilot(tmp_path, "run", str(wf), "--param", f"repo={repo}", "--db", url)
    assert done.returncode == 0, done.stdout + done.stderr
    (record,) = EventStore(url).list_runs()
    return record.id, url


def test_logs_json_gives_each_event_as_a_json_line_in_order(tmp_path: Path, finished) -> None:
    run_id, url = finished
    proc = pilot(tmp_path, "logs", run_id[:8], "--json", "--db", url)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    seqs = [line["seq"] for line in lines]
    assert seqs == sorted(seqs) and len(seqs) == len(list(EventStore(url).iter_events(run_id)))
    assert {line["run_id"] for line in lines} == {run_id}
    assert lines[0]["type"] == "run_started" and lines[-1]["type"] == "run_finished"


def test_report_json_is_a_versioned_document_of_the_runs_facts(tmp_path: Path, finished) -> None:
    run_id, url = finished
    proc = pilot(tmp_path, "report", run_id, "--json", "--db", url)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == SCHEMA == "marathon.report/1"
    (run,) = doc["runs"]
    assert (run["run_id"], run["status"], run["phases_succeeded"]) == (run_id, "succeeded", 1)
    assert run["test_runs"] == "-" and run["steps"] >= 2
    assert run["phases"][0]["name"] == "work" and run["tools"]
    # Version 1's keys: removing or renaming one must raise the version.
    assert {"generated_at", "since", "runs"} < doc.keys()
    v1 = {"workflow", "git", "checks", "tests", "prompt_tokens", "completion_tokens", "wall_s"}
    assert v1 < run.keys()
    same = pilot(tmp_path, "report", run_id, "--format", "json", "--db", url)
    assert json.loads(same.stdout)["runs"][0]["run_id"] == run_id


def test_report_format_not_among_the_choices_is_refused_naming_them(tmp_path: Path) -> None:
    proc = pilot(tmp_path, "report", "abc", "--format", "pdf")
    assert proc.returncode == 2
    said = " ".join(proc.stderr.replace("│", " ").split())
    assert "'pdf' is not one of 'md', 'html', 'json'" in said


def complete(tmp_path: Path, line: str, **env: str) -> list[str]:
    """What bash gets from ``pilot`` for ``line`` (the word after its last space)."""
    words = line.split(" ")
    comp = {
        "_PILOT_COMPLETE": "complete_bash",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(words) - 1),
    }
    done = subprocess.run(
        [PILOT],
        env={**env_for(tmp_path), **comp, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert not done.stderr
    return done.stdout.split()


def test_completion_offers_run_ids_and_the_choices(tmp_path: Path, finished) -> None:
    run_id, url = finished
    for command in ("show", "logs", "resume", "report", "trace", "diff", "cancel"):
        assert complete(tmp_path, f"pilot {command} ", MARATHON_DB=url) == [run_id], command
    assert complete(tmp_path, f"pilot show --db {url} {run_id[:4]}") == [run_id]
    assert complete(tmp_path, f"pilot show {run_id[:4]}zz", MARATHON_DB=url) == []
    assert complete(tmp_path, "pilot report --format ") == ["md", "html", "json"]
    assert complete(tmp_path, "pilot run wf.yaml --durability ") == ["normal", "full"]


def test_completion_without_a_store_offers_nothing_and_creates_none(tmp_path: Path) -> None:
    assert complete(tmp_path, "pilot show ") == []
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (["run"], ["<normal|full>", "NAME=VALUE"]),
        (["queue", "add"], ["NAME=VALUE"]),
        (["validate"], ["NAME=VALUE"]),
        (["report"], ["<md|html|json>", "--json", "RUN_ID"]),
        (["logs"], ["--json", "RUN_ID"]),
    ],
)
def test_help_shows_choices_and_what_a_value_looks_like(
    tmp_path: Path, command: list[str], shown: list[str]
) -> None:
    proc = subprocess.run(
        pilot_cmd(*command, "--help"),
        env={**env_for(tmp_path), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    for text in shown:
        assert text in proc.stdout, (text, proc.stdout)


def test_the_durability_choices_are_the_stores() -> None:
    assert get_args(Durability) == DURABILITIES


def test_a_matrix_ends_with_a_roll_up_line(tmp_path: Path, sim) -> None:
    repos = [make_repo(tmp_path / f"repo{i}") for i in range(2)]
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump([{"repo": str(r)} for r in repos]))
    url = f"sqlite:///{tmp_path / 'm.db'}"
    wf = str(flow(tmp_path, sim.openai_base_url))
    proc = pilot(tmp_path, "run", wf, "--matrix", str(matrix), "-j", "2", "--db", url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    steps = sum(r.steps for r in EventStore(url).list_runs())
    assert last.startswith(f"2 runs: 2 succeeded; {steps} steps, tokens ")
    assert last.endswith("; exit 0")


def test_a_worker_batch_ends_with_a_roll_up_line_and_json_on_stderr(tmp_path: Path, sim) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    wf = str(flow(tmp_path, sim.openai_base_url))
    repo = make_repo(tmp_path / "repo")
    assert pilot(tmp_path, "queue", "add", wf, "-p", f"repo={repo}", "--db", url).returncode == 0
    proc = pilot(tmp_path, "worker", "--exit-when-idle", "--json", "--db", url)
    assert proc.returncode == 0, proc.stderr
    for line in proc.stdout.splitlines():
        assert "rollup" not in json.loads(line)  # stdout stays the events
    rolled = [json.loads(line) for line in proc.stderr.splitlines() if '"rollup"' in line]
    assert [r["rollup"]["runs"] for r in rolled] == [1]
    assert rolled[0]["rollup"]["statuses"] == {"succeeded": 1}
    assert rolled[0]["rollup"]["exit_code"] == 0
