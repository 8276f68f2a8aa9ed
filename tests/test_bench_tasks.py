"""The task suite's catalog and runner pieces that need no model and no download: the
catalog's shape, the hidden check against a try that deletes or weakens tests (a small sdist
made here), the agents over loopback (sim), the report."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from pilot_harness import write_script

from brain.sim.config import SimConfig
from brain.sim.server import running_sim

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/ is run from the root
from bench.tasks.agents import run_plain
from bench.tasks.report import load_rows, markdown, pass_hat
from bench.tasks.suite import Package, Task, load_catalog


def _bare_task(prompt: str, *, test: str = "true", hidden: str = "pass") -> Task:
    """A task on no package: for the agents' runs over the sim."""
    package = Package(name="p", version="1", sha256="0" * 64)
    return Task(id="t", kind="k", package=package, prompt=prompt, test=test, hidden=hidden)


def test_catalog_tasks_on_five_pinned_sdists_each_with_its_tests_named() -> None:
    tasks = load_catalog()
    assert len(tasks) >= 21 and len({t.package.name for t in tasks}) >= 5
    assert len({t.kind for t in tasks}) >= 5
    assert len({t.id for t in tasks}) == len(tasks)
    for task in tasks:
        assert len(task.package.sha256) == 64 and task.package.version
        assert task.hidden.strip() and task.test.strip()
        assert all(p.old != p.new for p in task.plant)
        assert task.tests, f"{task.id}: its test files are restored before the hidden check"
        assert task.plant or task.solution, f"{task.id}: --validate must be able to solve it"
        if "doctest" in task.kind:
            assert task.doctests, f"{task.id}: a deleted doctest must not pass"
        if "feature" in task.kind:
            assert task.new_tests, f"{task.id}: the test it asks for is checked"


def test_a_catalog_typo_is_refused_with_the_known_keys(tmp_path: Path) -> None:
    from bench.tasks.suite import SuiteError

    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "packages: {p: {version: '1', sha256: x}}\n"
        "tasks: [{id: t, kind: k, package: p, prompt: x, test: x, hidden: x, doctest: []}]\n"
    )
    with pytest.raises(SuiteError, match=r"task 't' has unknown key\(s\) doctest \(known: "):
        load_catalog(catalog)


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
    task = _bare_task("Conversation plain-loop.", test="true", hidden="pass")
    config = SimConfig(model="m", max_model_len=8192, policy=f"script:{script}")
    with running_sim(config) as sim:
        result = run_plain(task, repo, sim.openai_base_url, max_steps=5)
    assert (result.status, result.steps) == ("submitted", 3)
    assert (repo / "out.txt").read_text() == "hello\n"
    assert result.claimed and result.answers == {"native": 0, "text": 2, "forced": 0, "none": 1}
    assert result.prompt_tokens > 0 and not result.tokens_estimated


def test_marathons_changes_are_where_the_hidden_check_looks(tmp_path: Path) -> None:
    from bench.tasks.agents import run_marathon
    from bench.tasks.hidden import hidden_check

    write = {"name": "write_file", "arguments": {"path": "fixed.txt", "content": "ok\n"}}
    turns = [
        {"tool_calls": [write]},
        {"tool_calls": [{"name": "finish", "arguments": {"summary": "wrote it"}}]},
    ]
    task, repo, work, config = _marathon_try(
        tmp_path,
        "marathon-in-place",
        turns,
        test="test -f fixed.txt",
        hidden="import os\nassert os.path.exists('fixed.txt')",
    )
    with running_sim(config) as sim:
        result = run_marathon(task, repo, sim.openai_base_url, work, max_steps=5)
    assert result.status == "succeeded", result.reason
    assert result.claimed and result.answers["native"] == 1, "done at the edit that passes"
    assert hidden_check(task, repo, tmp_path / "cache").passed, "the change is where it looks"


def test_a_marathon_try_pins_its_call_mode_and_counts_its_answers_by_mode(tmp_path: Path) -> None:
    """``--tool-calls forced`` (alias of ``--call-mode``) reaches the workflow's
    ``model.tool_calls``; the try's answers are counted by how their calls came."""
    from bench.tasks.agents import run_marathon
    from bench.tasks.run import parser

    assert parser().parse_args(["--tool-calls", "forced"]).call_mode == "forced"
    # The forced answer names the file; its content comes as a block on the unforced turn.
    turns = [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "fixed.txt"}}]},
        {"content": "```\nok\n```"},
        {"tool_calls": [{"name": "finish", "arguments": {"summary": "wrote fixed.txt"}}]},
    ]
    task, repo, work, config = _marathon_try(
        tmp_path, "marathon-forced", turns, test="test -f fixed.txt"
    )
    with running_sim(config) as sim:
        result = run_marathon(
            task, repo, sim.openai_base_url, work, max_steps=5, call_mode="forced"
        )
    assert result.status == "succeeded", result.reason
    assert (repo / "fixed.txt").read_text() == "ok\n"
    assert result.answers["forced"] == 1 and result.answers["text"] == 1, result.answers


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


# A small package made here, served from the sdist cache as the registry's would be.
CALC = '''def add(a, b):
    """Add two numbers.

    >>> add(2, 3)
    5
    """
    return a + b
'''
CALC_TESTS = """from calc import add


def test_add():
    assert add(2, 3) == 5


def test_add_negative():
    assert add(-1, 1) == 0
"""


def _sdist(cache: Path, name: str, version: str, files: dict[str, str]) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    with tarfile.open(cache / f"{name}-{version}.tar.gz", "w:gz") as archive:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{rel}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def _package(cache: Path, name: str, version: str) -> Package:
    digest = hashlib.sha256((cache / f"{name}-{version}.tar.gz").read_bytes()).hexdigest()
    return Package(name=name, version=version, sha256=digest)


def _marathon_try(
    tmp_path: Path, key: str, turns: list[dict], *, test: str, hidden: str = "pass"
) -> tuple[Task, Path, Path, SimConfig]:
    """A committed one-file repo, a task on a one-file sdist, a work dir and a sim config
    answering ``turns`` for the prompt ``Conversation {key}.``: one Marathon try over the
    sim."""
    from bench.tasks.suite import GIT_ENV

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("start\n")
    env = {**__import__("os").environ, **GIT_ENV}
    for git in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "start"]):
        subprocess.run(["git", *git], cwd=repo, check=True, env=env)
    script = write_script(tmp_path / "s.yaml", key, turns)
    task = _bare_task(f"Conversation {key}.", test=test, hidden=hidden)
    cache = tmp_path / "cache"
    _sdist(cache, "p", "1", {"README": "start\n"})
    task = dataclasses.replace(task, package=_package(cache, "p", "1"))
    work = tmp_path / "work"
    work.mkdir()
    return task, repo, work, SimConfig(model="m", max_model_len=8192, policy=f"script:{script}")


@pytest.fixture
def calc(tmp_path: Path) -> tuple[Task, Path]:
    from bench.tasks.suite import Plant

    cache = tmp_path / "cache"
    _sdist(cache, "calc", "1.0", {"calc.py": CALC, "tests/test_calc.py": CALC_TESTS})
    task = Task(
        id="calc-add",
        kind="planted bug",
        package=_package(cache, "calc", "1.0"),
        prompt="Fix add.",
        test="python -m pytest -q -p no:cacheprovider tests/test_calc.py",
        hidden="from calc import add\nassert add(4, 4) == 8",
        hidden_tests="python -m pytest -q -p no:cacheprovider tests",
        plant=(Plant("calc.py", "return a + b", "return a - b"),),
        tests=("tests/test_calc.py",),
    )
    return task, cache


def _start(task: Task, cache: Path, where: Path) -> Path:
    from bench.tasks.suite import prepare

    where.mkdir()
    return prepare(task, cache, where)


def test_a_deleted_test_fails_the_hidden_check_even_with_the_code_fixed(
    calc: tuple[Task, Path], tmp_path: Path
) -> None:
    from bench.tasks.hidden import hidden_check

    task, cache = calc
    repo = _start(task, cache, tmp_path / "w")
    assert not hidden_check(task, repo, cache).passed, "the planted bug fails"
    (repo / "calc.py").write_text(CALC)  # the fix
    tests = repo / "tests" / "test_calc.py"
    tests.write_text(CALC_TESTS.split("\n\n\ndef test_add_negative")[0] + "\n")
    check = hidden_check(task, repo, cache)
    assert not check.passed
    assert "deleted or renamed tests/test_calc.py: test_add_negative" in check.reason
    tests.write_text(CALC_TESTS + "def broken(:\n")
    assert "tests/test_calc.py (it no longer parses)" in hidden_check(task, repo, cache).reason
    tests.unlink()
    assert "test_add" in hidden_check(task, repo, cache).reason
    tests.write_text(CALC_TESTS)
    assert hidden_check(task, repo, cache).passed, "fixed, tests whole: passes"


def test_a_weakened_test_or_a_skipping_conftest_is_undone_before_the_check(
    calc: tuple[Task, Path], tmp_path: Path
) -> None:
    from bench.tasks.hidden import hidden_check

    task, cache = calc
    task = dataclasses.replace(task, hidden="pass")  # only the restored tests decide
    repo = _start(task, cache, tmp_path / "w")
    weakened = CALC_TESTS.replace("== 5", "== -1").replace("== 0", "!= 0")
    (repo / "tests" / "test_calc.py").write_text(weakened)
    visible = subprocess.run(task.test, shell=True, cwd=repo, capture_output=True)
    assert visible.returncode == 0, "the weakened tests pass on the bug in the agent's tree"
    check = hidden_check(task, repo, cache)
    assert not check.passed and check.reason.startswith("package tests fail"), check.reason
    (repo / "tests" / "test_calc.py").write_text(CALC_TESTS)
    (repo / "tests" / "conftest.py").write_text(
        "import pytest\n\ndef pytest_collection_modifyitems(items):\n"
        "    for item in items:\n        item.add_marker(pytest.mark.skip)\n"
    )
    assert not hidden_check(task, repo, cache).passed, "the agent's conftest is not run"


def test_a_deleted_doctest_fails_the_hidden_check(calc: tuple[Task, Path], tmp_path: Path) -> None:
    from bench.tasks.hidden import hidden_check
    from bench.tasks.suite import Plant

    task, cache = calc
    task = dataclasses.replace(
        task,
        kind="docstring fix (doctest)",
        plant=(Plant("calc.py", "    >>> add(2, 3)\n    5", "    >>> add(2, 3)\n    6"),),
        doctests=("calc.py:add",),
        test="python -m pytest -q -p no:cacheprovider --doctest-modules calc.py",
    )
    repo = _start(task, cache, tmp_path / "w")
    source = repo / "calc.py"
    source.write_text(source.read_text().replace("    >>> add(2, 3)\n    6\n", ""))
    visible = subprocess.run(task.test, shell=True, cwd=repo, capture_output=True)
    assert visible.returncode == 5, "pytest finds no doctest left, and fails nothing"
    check = hidden_check(task, repo, cache)
    assert not check.passed
    assert "doctest example 'add(2, 3)' of add is gone or changed" in check.reason
    source.write_text(CALC)
    assert hidden_check(task, repo, cache).passed


def test_a_test_the_task_asks_for_must_be_written_and_pass(
    calc: tuple[Task, Path], tmp_path: Path
) -> None:
    from bench.tasks.hidden import hidden_check
    from bench.tasks.suite import NewTest

    task, cache = calc
    task = dataclasses.replace(
        task,
        kind="small feature with tests",
        plant=(),
        hidden="from calc import sub\nassert sub(5, 3) == 2",
        new_tests=(NewTest(file="tests/test_calc.py", name="test_sub"),),
    )
    repo = _start(task, cache, tmp_path / "w")
    (repo / "calc.py").write_text(CALC + "\n\ndef sub(a, b):\n    return a - b\n")
    check = hidden_check(task, repo, cache)
    assert not check.passed and "test_sub is not in tests/test_calc.py" in check.reason
    tests = repo / "tests" / "test_calc.py"
    tests.write_text(CALC_TESTS.replace("from calc import add", "from calc import add, sub"))
    tests.write_text(tests.read_text() + "\n\ndef test_sub():\n    assert sub(5, 3) == 3\n")
    check = hidden_check(task, repo, cache)
    assert not check.passed and check.reason.startswith("the agent's new tests fail"), check.reason
    tests.write_text(tests.read_text().replace("== 3\n", "== 2\n"))
    assert hidden_check(task, repo, cache).passed


def test_validate_shows_a_task_can_fail_pass_and_not_be_passed_by_deleting(
    calc: tuple[Task, Path],
) -> None:
    from bench.tasks.validate import validate_task

    task, cache = calc
    verdict = validate_task(task, cache)
    assert verdict.ok, verdict.lines
    assert any("test files deleted: fails" in line for line in verdict.lines)
    broken = dataclasses.replace(task, hidden="pass", hidden_tests=None)
    verdict = validate_task(broken, cache)
    assert not verdict.ok, "a hidden check that passes the planted bug is reported"
    assert any("BAD hidden check, start: passes" in line for line in verdict.lines)


def test_toolz_doctest_last_deleted_doctest_is_no_fix(tmp_path: Path) -> None:
    """The real case of issue 38: deleting the doctest "succeeded" 10/10."""
    from bench.tasks.hidden import hidden_check
    from bench.tasks.run import DEFAULT_CACHE
    from bench.tasks.suite import SuiteError, prepare

    [task] = [t for t in load_catalog() if t.id == "toolz-doctest-last"]
    try:
        repo = prepare(task, DEFAULT_CACHE, tmp_path)
    except SuiteError as exc:
        pytest.skip(f"the toolz sdist cannot be had here: {exc}")
    source = repo / "toolz" / "itertoolz.py"
    source.write_text(source.read_text().replace("    >>> last('ABC')\n    'A'\n", ""))
    visible = subprocess.run(task.test, shell=True, cwd=repo, capture_output=True, text=True)
    assert visible.returncode == 0, "the visible test passes once the doctest is gone"
    check = hidden_check(task, repo, DEFAULT_CACHE)
    assert not check.passed and "last('ABC')" in check.reason


def _row(**fields: object) -> dict[str, object]:
    row = {
        "task": "a",
        "agent": "marathon",
        "model": "m",
        "call_mode": "auto",
        "try": 1,
        "success": False,
        "claimed": False,
        "false_success": False,
        "crashed": False,
        "reason": "limit: step limit; hidden check: AssertionError",
        "steps": 8,
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "tokens_estimated": False,
        "wall_s": 3.0,
        "answers": {"native": 1, "text": 2, "forced": 0, "none": 1},
    }
    return {**row, **fields}


def test_pass_hat_k_is_the_chance_that_k_tries_all_pass() -> None:
    assert pass_hat(3, 3, 3) == 1.0 and pass_hat(2, 3, 3) == 0.0
    assert pass_hat(2, 4, 1) == 0.5 and pass_hat(3, 4, 2) == 0.5
    assert pass_hat(1, 2, 3) is None


def test_the_report_gives_pass_rates_false_successes_and_call_modes(tmp_path: Path) -> None:
    rows = [
        _row(**{"try": 1, "success": True, "claimed": True}),
        _row(**{"try": 2, "success": True, "claimed": True}),
        _row(**{"try": 3, "claimed": True, "false_success": True}),
        _row(task="b", **{"try": 1, "success": True, "claimed": True}),
        _row(task="b", **{"try": 2, "success": True, "claimed": True}),
        _row(task="b", **{"try": 3, "success": True, "claimed": True}),
        _row(agent="plain", call_mode="text", answers={"text": 5, "none": 2}),
    ]
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = markdown(load_rows([results]))
    # marathon: a 2/3, b 3/3 -> pass@1 (2/3 + 1)/2 = 83%, pass^3 (0 + 1)/2 = 50%
    assert (
        "| marathon | m | auto | 6 | 5 | 83% | 50% | 50% (3) | 1 of 6 claims | 0 | 6/12/0/6 |"
        in (text)
    )
    assert "| plain | m | text | 1 | 0 | 0% | - | 0% (1) | 0 of 0 claims | 0 | 0/5/0/2 |" in text
    assert "| a | 2/3 (1 false) | 0/1 |" in text


def test_older_results_rows_are_read_with_defaults(tmp_path: Path) -> None:
    old = {k: v for k, v in _row(agent="plain", agent_status="submitted").items()}
    for key in ("model", "call_mode", "claimed", "false_success", "answers"):
        old.pop(key)
    results = tmp_path / "old.jsonl"
    results.write_text(json.dumps(old) + "\n")
    [row] = load_rows([results])
    assert (row["model"], row["call_mode"], row["claimed"], row["false_success"]) == (
        "-",
        "text",
        True,
        True,
    )


def test_call_modes_are_read_from_marathons_events() -> None:
    from bench.tasks.callmodes import marathon_modes

    events = [
        {"type": "model_request"},
        {"type": "assistant_message", "tool_calls": [{"id": "call_1", "name": "run"}]},
        {"type": "model_request"},
        {"type": "assistant_message", "tool_calls": [{"id": "text-3-0", "name": "run"}]},
        {"type": "model_request"},
        {"type": "assistant_message", "content": "no call"},
        {"type": "model_request", "tool_choice": "required"},
        {"type": "assistant_message", "tool_calls": [{"id": "call_2", "name": "finish"}]},
    ]
    assert marathon_modes(events) == {"native": 1, "text": 1, "none": 1, "forced": 1}


def test_mini_swe_agents_exit_statuses_map_to_the_suites() -> None:
    from bench.tasks.mini import outcome

    answer = {
        "extra": {
            "response": {
                "choices": [{"message": {"tool_calls": [{"id": "x"}]}}],
                "usage": {"prompt_tokens": 50, "completion_tokens": 5},
            }
        }
    }
    bad = {"extra": {"response": {"choices": [{"message": {"content": "hm"}}]}}}
    trajectory = {
        "info": {"exit_status": "Submitted", "model_stats": {"api_calls": 2}},
        "messages": [answer, bad],
    }
    result = outcome(trajectory, 1.0)
    assert (result.status, result.claimed, result.steps) == ("submitted", True, 2)
    assert result.answers == {"native": 1, "text": 0, "forced": 0, "none": 1}
    assert (result.prompt_tokens, result.completion_tokens) == (50, 5)
    for mini_status, ours in [
        ("LimitsExceeded", "limit"),
        ("RepeatedFormatError", "format_errors"),
        ("APIConnectionError", "error"),
    ]:
        trajectory["info"]["exit_status"] = mini_status
        result = outcome(trajectory, 1.0)
        assert result.status == ours and not result.claimed


def test_mini_swe_agent_runs_as_it_ships_against_the_sim(tmp_path: Path) -> None:
    from bench.tasks.mini import MiniMissing, find_mini, run_mini

    try:
        find_mini()
    except MiniMissing as exc:
        pytest.skip(str(exc))
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    turns = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo fixed > out.txt"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo $PYTHONPATH"}}]},
        {
            "tool_calls": [
                {
                    "name": "bash",
                    "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
                }
            ]
        },
    ]
    script = write_script(tmp_path / "s.yaml", "mini-probe", turns)
    task = _bare_task("Conversation mini-probe.", test="true", hidden="pass")
    work = tmp_path / "work"
    work.mkdir()
    config = SimConfig(
        model="m",
        max_model_len=8192,
        policy=f"script:{script}",
        enable_auto_tool_choice=True,
        tool_call_parser="hermes",
    )
    with running_sim(config) as sim:
        result = run_mini(task, repo, sim.openai_base_url, work, max_steps=2)
    assert (result.status, result.steps) == ("limit", 2), result.reason
    assert (repo / "out.txt").read_text() == "fixed\n"
    messages = json.loads((work / "trajectory.json").read_text())["messages"]
    assert any(str(repo) in str(m.get("content")) for m in messages), "PYTHONPATH reached"
    assert result.answers["native"] == 2 and not result.claimed


def test_models_are_given_as_labels_and_urls() -> None:
    from bench.tasks.run import UsageError, parse_models

    assert parse_models("q05=http://127.0.0.1:8000/v1,q15=http://127.0.0.1:8001/v1", None) == {
        "q05": "http://127.0.0.1:8000/v1",
        "q15": "http://127.0.0.1:8001/v1",
    }
    with pytest.raises(UsageError, match=r"'q05' is not LABEL=http://HOST:PORT/v1"):
        parse_models("q05", None)
    with pytest.raises(UsageError, match="not both"):
        parse_models("a=http://x/v1", "http://x/v1")


def test_mini_swe_agent_is_skipped_with_the_reason_when_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.tasks.run import check_agents, main

    monkeypatch.setenv("MARATHON_BENCH_MINI", str(tmp_path / "nowhere" / "mini"))
    assert check_agents(["marathon", "mini"]) == ["marathon"]
    err = capsys.readouterr().err
    assert "skipping mini: MARATHON_BENCH_MINI=" in err and "mini-requirements.txt" in err
    assert main(["--agents", "mini", "--endpoint", "http://127.0.0.1:9/v1"]) == 2
    assert "error: no agent left to run" in capsys.readouterr().err


def test_marathons_check_adds_the_package_tests_a_doctest_command_leaves_out() -> None:
    """A docstring "fixed" by rewriting the code it documents passed the doctests and broke
    the package's tests (the 1.5B on the GPU): Marathon's check runs both."""
    from bench.tasks.agents import marathon_check

    tasks = {t.id: t for t in load_catalog()}
    doctest = tasks["toolz-doctest-last"]
    assert marathon_check(doctest) == (
        f"{doctest.test} && python -m pytest -q -p no:cacheprovider toolz/tests/test_itertoolz.py"
    )
    plain = tasks["toolz-frequencies-count"]
    assert marathon_check(plain) == plain.test


def test_a_kept_try_has_its_timeline_beside_its_database(tmp_path: Path) -> None:
    """A sitting brings every try's ``show.txt`` back (its databases stay on the device)."""
    from pilot_harness import call, make_repo, run_in_process, write_script, write_workflow

    from bench.tasks.trial import timeline
    from brain.sim.config import SimConfig
    from brain.sim.server import running_sim

    repo = make_repo(tmp_path / "repo", {"a.py": "x = 1\n"})
    turns = [{"tool_calls": [call("finish", summary="a.py holds x.")]}]
    script = write_script(tmp_path / "s.yaml", "keep", turns)
    with running_sim(SimConfig(model="m", max_model_len=8192, policy=f"script:{script}")) as sim:
        flow = write_workflow(
            tmp_path / "wf.yaml",
            key="keep",
            endpoint=sim.openai_base_url,
            phases=[{"name": "look", "prompt": "Look at a.py."}],
        )
        outcome = run_in_process(flow, repo, tmp_path / "runs.db")
    text = timeline(tmp_path / "runs.db")
    assert f"run-{outcome.run_id}" in text and "phase 1: look" in text
    assert "-> finish" in text and text.count("\n") >= 5


def test_the_summary_counts_cut_answers_and_their_calls_run(tmp_path: Path) -> None:
    rows = [_row(cut=[2, 0]), _row(task="b", cut=[1, 0]), _row(agent="mini", call_mode="auto")]
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = markdown(load_rows([results]))
    assert "| 3 (0 run) |" in text
    mini = next(line for line in text.splitlines() if line.startswith("| mini |"))
    assert "| - |" in mini, "an agent that records no cut says so"


def test_a_variants_settings_reach_the_try_and_the_report_keeps_it_apart(tmp_path: Path) -> None:
    """``--set FIELD=VALUE`` reaches Marathon's workflow as ``pilot run --set`` does (here a
    step limit of 1 stops a two-step script), and the report groups the variant's tries on
    their own."""
    from bench.tasks.agents import run_marathon
    from bench.tasks.run import parser, plan

    args = parser().parse_args(
        ["--set", "limits.max_steps=1", "--set", "phases.0.retry_fresh=false", "--tries", "1"]
    )
    [spec] = plan(args, [_bare_task("x")], {"m": "http://127.0.0.1:1/v1"})[:1]
    assert spec.settings == ("limits.max_steps=1", "phases.0.retry_fresh=false")
    assert spec.variant == "limits.max_steps=1 phases.0.retry_fresh=false"
    write = {"name": "write_file", "arguments": {"path": "a.txt", "content": "a\n"}}
    again = {"name": "write_file", "arguments": {"path": "b.txt", "content": "b\n"}}
    turns = [{"tool_calls": [write]}, {"tool_calls": [again]}]
    task, repo, work, config = _marathon_try(tmp_path, "variant", turns, test="test -f b.txt")
    with running_sim(config) as sim:
        result = run_marathon(
            task, repo, sim.openai_base_url, work, max_steps=5, settings=spec.settings
        )
    assert result.status == "limit" and result.steps == 1, result.reason
    rows = [_row(), _row(variant="low temperature", success=True)]
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = markdown(load_rows([results]))
    assert "| marathon | m | auto | 1 | 0 |" in text, text
    assert "| marathon | m | auto [low temperature] | 1 | 1 |" in text, text
