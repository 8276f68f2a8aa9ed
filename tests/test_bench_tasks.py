"""The task suite's catalog and runner pieces that need no model and no download: the
catalog's shape, the plain loop over loopback (sim), the tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pilot_harness import write_script

from brain.sim.config import SimConfig
from brain.sim.server import running_sim

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/ is run from the root
from bench.tasks.agents import run_plain
from bench.tasks.run import tables
from bench.tasks.suite import Package, Task, load_catalog


def test_catalog_has_twelve_tasks_of_several_kinds_on_pinned_sdists() -> None:
    tasks = load_catalog()
    assert len(tasks) >= 12
    assert len({t.kind for t in tasks}) >= 5
    assert len({t.id for t in tasks}) == len(tasks)
    for task in tasks:
        assert len(task.package.sha256) == 64 and task.package.version
        assert task.hidden.strip() and task.test.strip()
        assert all(p.old != p.new for p in task.plant)


def test_plain_loop_runs_one_command_per_answer_and_stops_on_submit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    turns = [
        {"content": "Let me look.\n```bash\necho hello > out.txt\n```"},
        {"content": "two blocks\n```bash\nls\n```\n```bash\nls\n```"},
        {"content": "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
    ]
    script = write_script(tmp_path / "s.yaml", "plain-loop", turns)
    task = Task(
        id="t",
        kind="k",
        package=Package(name="p", version="1", sha256="0" * 64),
        prompt="Conversation plain-loop.",
        test="true",
        hidden="pass",
    )
    config = SimConfig(model="m", max_model_len=8192, policy=f"script:{script}")
    with running_sim(config) as sim:
        result = run_plain(task, repo, sim.openai_base_url, max_steps=5)
    assert (result.status, result.steps) == ("submitted", 3)
    assert (repo / "out.txt").read_text() == "hello\n"
    assert result.prompt_tokens > 0 and not result.tokens_estimated


def test_tables_give_per_task_and_overall_rates() -> None:
    row = {
        "task": "a",
        "agent": "plain",
        "success": False,
        "reason": "limit: step limit; hidden check: AssertionError",
        "steps": 8,
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "tokens_estimated": False,
        "wall_s": 3.0,
    }
    text = tables([row, {**row, "success": True, "reason": "ok"}])
    assert "| a | plain | 1/2 |" in text and "1/2 = 50%" in text


def test_marathons_changes_are_where_the_hidden_check_looks(tmp_path: Path) -> None:
    from bench.tasks.agents import run_marathon
    from bench.tasks.suite import GIT_ENV, hidden_check

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("start\n")
    env = {**__import__("os").environ, **GIT_ENV}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "start"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    write = {"name": "write_file", "arguments": {"path": "fixed.txt", "content": "ok\n"}}
    turns = [
        {"tool_calls": [write]},
        {"tool_calls": [{"name": "finish", "arguments": {"summary": "wrote it"}}]},
    ]
    script = write_script(tmp_path / "s.yaml", "marathon-in-place", turns)
    task = Task(
        id="t",
        kind="k",
        package=Package(name="p", version="1", sha256="0" * 64),
        prompt="Conversation marathon-in-place.",
        test="test -f fixed.txt",
        hidden="import os\nassert os.path.exists('fixed.txt')",
    )
    work = tmp_path / "work"
    work.mkdir()
    config = SimConfig(model="m", max_model_len=8192, policy=f"script:{script}")
    with running_sim(config) as sim:
        result = run_marathon(task, repo, sim.openai_base_url, work, max_steps=5)
    assert result.status == "succeeded", result.reason
    assert hidden_check(task, repo).passed, "the run's change is in the checked repository"


def test_the_suite_results_draw_as_a_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="plots need the bench extra (matplotlib)")
    from bench.plots import plot_tasks

    rows = [
        {"task": "a", "agent": "marathon", "success": True},
        {"task": "a", "agent": "plain", "success": False},
        {"task": "b", "agent": "marathon", "success": False},
        {"task": "b", "agent": "plain", "success": False},
    ]
    plot_tasks(rows, tmp_path / "tasks.png")
    assert (tmp_path / "tasks.png").read_bytes().startswith(b"\x89PNG")
