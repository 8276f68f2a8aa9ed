"""``--validate``: every task can fail, can pass, and cannot be passed by deleting its tests.

For each task, with no agent:
- the starting tree: the visible test fails (a planted task; a task with no plant may pass
  its visible test from the start, which is shown) and the hidden check fails;
- a cheat on the starting tree: the planted doctest example deleted (a doctest task), or the
  task's test files deleted: the hidden check must fail;
- the solved tree (the plant undone, or the task's reference ``solution`` applied): the
  visible test and the hidden check pass;
- the solved tree with the task's test files deleted: the hidden check must still fail.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.tasks.hidden import CHECK_TIMEOUT_S, hidden_check
from bench.tasks.suite import SuiteError, Task, prepare, task_env


@dataclass(frozen=True)
class Verdict:
    task: str
    ok: bool
    lines: tuple[str, ...]


def visible_passes(task: Task, repo: Path) -> bool:
    try:
        proc = subprocess.run(
            task.test,
            shell=True,
            cwd=repo,
            env=task_env(task, repo),
            capture_output=True,
            timeout=CHECK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def solve(task: Task, repo: Path) -> None:
    """The reference solution on a starting tree: the plant undone, or ``solution``."""
    if task.solution:
        for edit in task.solution:
            edit.apply(repo, task=task.id)
        return
    if not task.plant:
        raise SuiteError(f"{task.id}: no plant and no reference solution: it cannot be shown")
    for plant in task.plant:
        plant.undo(repo)


def delete_tests(task: Task, repo: Path) -> None:
    for rel in task.tests:
        (repo / rel).unlink(missing_ok=True)


def cheat(task: Task, repo: Path) -> str:
    """What a try that deletes instead of fixing does; returns what it did."""
    if task.doctests:
        for plant in task.plant:
            target = repo / plant.file
            target.write_text(target.read_text().replace(plant.new, ""))
        return "planted doctest deleted"
    delete_tests(task, repo)
    return "test files deleted"


def validate_task(task: Task, cache: Path) -> Verdict:
    lines: list[str] = []
    ok = True

    def expect(what: str, got: bool, want: bool, detail: str = "") -> None:
        nonlocal ok
        good = got == want
        ok &= good
        mark = "ok " if good else "BAD"
        lines.append(f"  {mark} {what}: {'passes' if got else 'fails'}{detail}")

    with tempfile.TemporaryDirectory(prefix=f"validate-{task.id}-") as tmp:
        start = prepare(task, cache, Path(tmp) / "start")
        missing = [rel for rel in task.tests if not (start / rel).is_file()]
        if missing or not task.tests:
            ok = False
            what = f"{', '.join(missing)} not in the sdist" if missing else "none named (tests:)"
            lines.append(f"  BAD the task's test files: {what}")
        if task.plant:
            expect("visible test, planted", visible_passes(task, start), False)
        else:
            passes = visible_passes(task, start)
            note = " (no plant: the visible test cannot tell a change)" if passes else ""
            lines.append(f"  --  visible test at start: {'passes' if passes else 'fails'}{note}")
        check = hidden_check(task, start, cache)
        expect("hidden check, start", check.passed, False, f" ({check.reason})")
        cheated = Path(tmp) / "cheat"
        shutil.copytree(start, cheated)
        did = cheat(task, cheated)
        check = hidden_check(task, cheated, cache)
        expect(f"hidden check, {did}", check.passed, False, f" ({check.reason})")
        solve(task, start)
        expect("visible test, solved", visible_passes(task, start), True)
        check = hidden_check(task, start, cache)
        expect("hidden check, solved", check.passed, True, f" ({check.reason})")
        delete_tests(task, start)
        check = hidden_check(task, start, cache)
        expect("hidden check, solved but tests deleted", check.passed, False, f" ({check.reason})")
    return Verdict(task.id, ok, tuple(lines))


def validate(tasks: list[Task], cache: Path) -> int:
    """Print each task's verdict; 1 if any task is not sound."""
    bad = 0
    for task in tasks:
        verdict = validate_task(task, cache)
        bad += not verdict.ok
        print(f"{'ok ' if verdict.ok else 'BAD'} {task.id}", flush=True)
        for line in verdict.lines:
            print(line, flush=True)
    print(f"{len(tasks) - bad}/{len(tasks)} tasks sound")
    return 1 if bad else 0
