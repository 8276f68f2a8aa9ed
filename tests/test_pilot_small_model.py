"""A run against what a real 0.5B model writes (issue 25's texts), over loopback with the sim:
calls left as text in every shape it used are recovered and run; what cannot be run gets a
specific answer, never the same one twice in a row."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pilot_harness import final_state, make_repo, run_in_process, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.store.event_store import EventStore


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@localhost",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@localhost",
}


def events_of(db: Path, run_id: str) -> list[ev.Event]:
    return EventStore(f"sqlite:///{db}").load_events(run_id)


def test_the_shapes_a_small_model_writes_are_run(tmp_path: Path, repo: Path) -> None:
    turns = [
        {"content": '```json\n{"name": "survey", "arguments": {"path": "."}}\n```'},
        {"content": "I will now survey the repository."},
        {"content": "I will now survey the repository."},
        {"content": 'list_dir {"path": ".", "required": [], "additionalProperties": false}'},
        {"content": '```json\n{"name": "read_file", "arguments": {"file_path": "app.py"}}\n```'},
        {"content": '```json\n{"name": "finish", "summary": "Surveyed: one module, app.py."}\n```'},
    ]
    script = write_script(tmp_path / "s.yaml", "small-model", turns)
    with running_sim(
        SimConfig(model="test-model", max_model_len=32768, policy=f"script:{script}")
    ) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="small-model",
            endpoint=sim.openai_base_url,
            tools=["read_file", "list_dir", "finish"],
            phases=[{"name": "survey", "prompt": "Survey the repository."}],
            # Native: every answer is read as the model wrote it (auto would force the answer
            # after one with no call, test_call_modes.py).
            model={"tool_calls": "native"},
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "succeeded", outcome.reason
    events = events_of(tmp_path / "m.db", outcome.run_id)
    nudges = [e.text for e in events if isinstance(e, ev.Nudge)]
    assert len(nudges) == 3
    assert "no tool named 'survey'" in nudges[0] and "read_file, list_dir, finish" in nudges[0]
    assert nudges[1] != nudges[2], "the same answer twice in a row"
    assert all('"arguments"' in n for n in nudges), "every answer shows the exact format"
    ran = [e for e in events if isinstance(e, ev.ToolFinished)]
    assert [(e.name, e.is_error) for e in ran] == [
        ("list_dir", False),
        ("read_file", False),
        ("finish", False),
    ]
    repairs = [r for e in events if isinstance(e, ev.AssistantMessage) for r in e.repairs]
    assert any("JSON-Schema keywords dropped" in r for r in repairs)
    assert "read_file: argument 'file_path' taken as 'path'" in repairs
    assert "finish: arguments given at the top level, beside the name" in repairs


def test_no_progress_limit_fires_at_the_configured_count(tmp_path: Path, repo: Path) -> None:
    turns = [{"content": f"Let me think about step {i}."} for i in range(12)]
    script = write_script(tmp_path / "s.yaml", "idle-model", turns)
    with running_sim(
        SimConfig(model="test-model", max_model_len=32768, policy=f"script:{script}")
    ) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="idle-model",
            endpoint=sim.openai_base_url,
            tools=["read_file", "finish"],
            limits={"max_no_progress_steps": 5},
            phases=[{"name": "work", "prompt": "Do the work."}],
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "failed" and "stuck" in (outcome.reason or "")
    events = events_of(tmp_path / "m.db", outcome.run_id)
    turns_taken = [e for e in events if isinstance(e, ev.AssistantMessage)]
    assert len(turns_taken) == 5, "stuck after exactly max_no_progress_steps steps"


def test_a_phase_no_progress_limit_overrides_the_runs(tmp_path: Path, repo: Path) -> None:
    """``phases[].limits.max_no_progress_steps`` is the phase's own count: the run's 50 would
    let this idle model go on, the phase's 3 ends it."""
    turns = [{"content": f"Let me think about step {i}."} for i in range(12)]
    script = write_script(tmp_path / "s.yaml", "idle-phase", turns)
    with running_sim(
        SimConfig(model="test-model", max_model_len=32768, policy=f"script:{script}")
    ) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="idle-phase",
            endpoint=sim.openai_base_url,
            tools=["read_file", "finish"],
            limits={"max_no_progress_steps": 50},
            phases=[
                {"name": "work", "prompt": "Do the work.", "limits": {"max_no_progress_steps": 3}}
            ],
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "failed" and "stuck" in (outcome.reason or "")
    events = events_of(tmp_path / "m.db", outcome.run_id)
    assert len([e for e in events if isinstance(e, ev.AssistantMessage)]) == 3


def run_script(
    tmp_path: Path,
    repo: Path,
    key: str,
    turns: list,
    phase: dict,
    tools: list | None = None,
    **script: object,
) -> tuple:
    script_path = write_script(tmp_path / f"{key}.yaml", key, turns, **script)
    with running_sim(
        SimConfig(model="test-model", max_model_len=32768, policy=f"script:{script_path}")
    ) as sim:
        workflow = write_workflow(
            tmp_path / f"{key}-wf.yaml",
            key=key,
            endpoint=sim.openai_base_url,
            tools=tools,
            phases=[{"name": "change", "prompt": "Change the code.", **phase}],
        )
        outcome = run_in_process(workflow, repo, tmp_path / f"{key}.db")
    return outcome, events_of(tmp_path / f"{key}.db", outcome.run_id)


def commit_calc(repo: Path, source: str) -> None:
    """calc.py with ``source``, committed: the code a test's scripted model fixes."""
    (repo / "calc.py").write_text(source)
    subprocess.run(["git", "add", "calc.py"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "calc"], cwd=repo, check=True, env=GIT_ENV)


CALC_TEST = "python3 -c 'from calc import add; assert add(1, 2) == 3, add(1, 2)'"


READ_APP = {"tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]}


def finish(summary: str) -> dict:
    return {"tool_calls": [{"name": "finish", "arguments": {"summary": summary}}]}


def test_a_phase_that_must_change_code_fails_when_nothing_changed(
    tmp_path: Path, repo: Path
) -> None:
    outcome, events = run_script(
        tmp_path,
        repo,
        "lazy",
        [finish("done"), finish("done, really")],
        {"require_change": True, "check": "true", "max_attempts": 2},
    )
    assert outcome.status == "failed"
    assert "no change made to the workspace in 2 attempt(s)" in (outcome.reason or "")
    checks = [e for e in events if isinstance(e, ev.CheckFinished)]
    assert [c.passed for c in checks] == [False, False]
    assert "must change the code" in checks[0].feedback


def test_a_phase_that_must_change_code_passes_with_a_change(tmp_path: Path, repo: Path) -> None:
    write = {
        "tool_calls": [
            {"name": "write_file", "arguments": {"path": "NOTES.md", "content": "notes\n"}}
        ]
    }
    outcome, _ = run_script(
        tmp_path, repo, "busy", [write, finish("wrote notes")], {"require_change": True}
    )
    assert outcome.status == "succeeded", outcome.reason
    assert "changed no file" not in (outcome.reason or "")


def test_a_successful_run_that_changed_nothing_says_so(tmp_path: Path, repo: Path) -> None:
    read = {"tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]}
    outcome, _ = run_script(tmp_path, repo, "idle", [read, finish("app.py needs nothing")], {})
    assert outcome.status == "succeeded"
    assert outcome.reason == "all phases done; the run changed no file"


def test_context_commands_open_the_phase_with_their_output(tmp_path: Path, repo: Path) -> None:
    long = "python3 -c \"print('x' * 5000); print('LAST LINE'); raise SystemExit(3)\""
    outcome, events = run_script(
        tmp_path,
        repo,
        "context",
        [READ_APP, finish("read app.py")],
        {"context": ["echo tests failed: test_one", long]},
    )
    assert outcome.status == "succeeded", outcome.reason
    [started] = [e for e in events if isinstance(e, ev.PhaseStarted)]
    assert "`echo tests failed: test_one` (exit code 0):\ntests failed: test_one" in started.prompt
    assert "(exit code 3):\n[... start cut ...]" in started.prompt
    assert "LAST LINE\n\nYour task (as above): Change the code." in started.prompt
    assert len(started.prompt) < 4000


def test_calls_after_a_failed_one_in_the_same_answer_are_not_run(
    tmp_path: Path, repo: Path
) -> None:
    bad_edit = {"name": "edit_file", "arguments": {"path": "app.py", "old": "absent", "new": "x"}}
    all_at_once = {"tool_calls": [bad_edit, {"name": "finish", "arguments": {"summary": "ok"}}]}
    fixed = {"name": "edit_file", "arguments": {"path": "app.py", "old": "1", "new": "2"}}
    done = {"tool_calls": [fixed, {"name": "finish", "arguments": {"summary": "now really"}}]}
    outcome, events = run_script(
        tmp_path, repo, "eager", [all_at_once, done], {"check": "grep -q 2 app.py"}
    )
    assert outcome.status == "succeeded", outcome.reason
    ran = [(e.name, e.is_error, e.executed) for e in events if isinstance(e, ev.ToolFinished)]
    assert ran == [
        ("edit_file", True, True),
        ("finish", True, False),
        ("edit_file", False, True),
        ("finish", False, True),
    ]
    refused = [e for e in events if isinstance(e, ev.ToolFinished)][1]
    assert "not run: edit_file, called before it in the same answer, failed" in refused.output
    turns = [e for e in events if isinstance(e, ev.AssistantMessage)]
    assert len(turns) == 2, "the first answer's finish did not close the phase"


def test_locate_shows_the_function_a_failing_test_calls(tmp_path: Path, repo: Path) -> None:
    commit_calc(repo, "def add(a, b):\n    return a - b\n\n\nVALUE = 1\n")
    failing = "printf '>       assert add(1, 2) == 3\\nE   assert -1 == 3\\n'; exit 1"
    outcome, events = run_script(
        tmp_path,
        repo,
        "locate",
        [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "calc.py"}}]},
            finish("calc.py seen"),
        ],
        {"context": [failing], "locate": True},
    )
    assert outcome.status == "succeeded", outcome.reason
    [started] = [e for e in events if isinstance(e, ev.PhaseStarted)]
    shown = "The code of add (calc.py, line 1):\n```python\ndef add(a, b):\n    return a - b\n```"
    assert shown in started.prompt
    assert "VALUE" not in started.prompt


def test_locate_shows_the_method_the_prompt_names_before_the_failures_callees(
    tmp_path: Path, repo: Path
) -> None:
    """The prompt names `Stack.pop`; the failure's line calls only `size`, and another class
    defines a pop first: the named class's method is shown first, then the callee; names the
    workspace does not define (`__all__`) take no place of the three."""
    commit_calc(
        repo,
        "class Queue:\n    def pop(self):\n        return 0\n\n\n"
        "class Stack:\n    def pop(self):\n        return self.items.pop(0)\n\n\n"
        "def size(s):\n    return 0\n",
    )
    failing = "printf '>       assert size(s) == 1\\nE   assert 0 == 1\\n'; exit 1"
    outcome, events = run_script(
        tmp_path,
        repo,
        "locate-named",
        [finish("seen")],
        {
            "context": [failing],
            "locate": True,
            "prompt": "Keep `__all__` and `VALUE_X`; fix `Stack.pop` in calc.py.",
        },
    )
    assert outcome.status == "succeeded", outcome.reason
    [started] = [e for e in events if isinstance(e, ev.PhaseStarted)]
    named = "The code of Stack.pop (calc.py, line 7):\n```python\n    def pop(self):\n"
    assert named in started.prompt
    assert "return 0\n```" not in started.prompt.split("The code of size")[0], "not Queue's"
    assert started.prompt.index("Stack.pop") < started.prompt.index("The code of size")


def test_build_artefacts_alone_are_no_change(tmp_path: Path, repo: Path) -> None:
    subprocess.run(["git", "rm", "-q", ".gitignore"], cwd=repo, check=True)  # none, as in sdists
    subprocess.run(["git", "commit", "-qm", "no ignore"], cwd=repo, check=True, env=GIT_ENV)
    pyc = {
        "tool_calls": [
            {
                "name": "run",
                "arguments": {
                    "command": "mkdir -p pkg/__pycache__ && echo x > pkg/__pycache__/a.pyc"
                },
            }
        ]
    }
    outcome, _ = run_script(
        tmp_path,
        repo,
        "artefacts",
        [pyc, finish("ran the tests")],
        {"require_change": True, "max_attempts": 1},
    )
    assert outcome.status == "failed"
    assert "no change made to the workspace" in (outcome.reason or "")


def test_a_located_function_rewritten_in_a_python_block_is_the_fix(
    tmp_path: Path, repo: Path
) -> None:
    commit_calc(repo, "def add(a, b):\n    return a - b\n\n\nVALUE = 1\n")
    test = CALC_TEST
    failing = "printf '>       assert add(1, 2) == 3\\nE   assert -1 == 3\\n'; exit 1"
    rewrite = {"content": "Here is the fix:\n```python\ndef add(a, b):\n    return a + b\n```"}
    phase = {
        "context": [failing],
        "locate": True,
        "check": test,
        "require_change": True,
    }
    tools = ["read_file", "replace_definition", "edit_file", "finish"]
    outcome, events = run_script(
        tmp_path, repo, "rewrite", [rewrite, finish("fixed")], phase, tools
    )
    assert outcome.status == "succeeded", outcome.reason
    [started] = [e for e in events if isinstance(e, ev.PhaseStarted)]
    assert started.prompt.rstrip().endswith("in one ```python block.")
    [done] = [e for e in events if isinstance(e, ev.ToolFinished) and e.name != "finish"]
    assert done.name == "replace_definition" and not done.is_error, done.output
    assert "-    return a - b\n+    return a + b" in done.output  # in the run's worktree
    assert done.call_id.startswith("text-"), "sent back to the model as text"
    repairs = [r for e in events if isinstance(e, ev.AssistantMessage) for r in e.repairs]
    assert "the fenced Python block defining add taken as a replace_definition call" in repairs


def test_check_after_edit_ends_the_phase_at_the_edit_that_fixed_it(
    tmp_path: Path, repo: Path
) -> None:
    commit_calc(repo, "def add(a, b):\n    return a - b\n")
    test = CALC_TEST
    wrong = {"content": "```python\ndef add(a, b):\n    return a * b\n```"}
    right = {"content": "```python\ndef add(a, b):\n    return a + b\n```"}
    never = {"content": "```python\ndef add(a, b):\n    return 0\n```"}
    phase = {"check": test, "require_change": True, "check_after_edit": True, "max_attempts": 1}
    tools = ["read_file", "replace_definition", "finish"]
    outcome, events = run_script(tmp_path, repo, "autocheck", [wrong, right, never], phase, tools)
    assert outcome.status == "succeeded", outcome.reason
    checks = [e for e in events if isinstance(e, ev.CheckFinished)]
    assert [(c.after_edit, c.passed, c.attempt) for c in checks] == [
        (True, False, 0),
        (True, True, 0),
    ]
    assert (
        "After that edit, the check" in checks[0].feedback
        and "AssertionError: 2" in checks[0].feedback
    )
    assert len([e for e in events if isinstance(e, ev.AssistantMessage)]) == 2
    [done] = [e for e in events if isinstance(e, ev.PhaseFinished)]
    assert done.outcome == "succeeded" and "passed after the last edit" in done.summary


def test_check_after_edit_needs_a_check(tmp_path: Path) -> None:
    from pilot.errors import WorkflowError
    from pilot.workflow.load import load_workflow

    workflow = write_workflow(
        tmp_path / "wf.yaml",
        key="k",
        endpoint="http://127.0.0.1:9/v1",
        phases=[{"name": "fix", "prompt": "Fix it.", "check_after_edit": True}],
    )
    with pytest.raises(WorkflowError, match="check_after_edit runs the phase's check"):
        load_workflow(workflow, {"repo": str(tmp_path)})


def test_retry_fresh_undoes_a_failed_try_and_asks_again_from_the_prompt(
    tmp_path: Path, repo: Path
) -> None:
    commit_calc(repo, "def add(a, b):\n    return a - b\n")
    test = CALC_TEST
    wrong = {"content": "```python\ndef add(a, b):\n    return a * b\n```"}
    echo = {"content": "```python\ndef add(a, b):\n    return a - b\n```"}  # refused: no change
    right = {"content": "```python\ndef add(a, b):\n    return a + b\n```"}
    phase = {
        "check": test,
        "require_change": True,
        "check_after_edit": True,
        "retry_fresh": True,
        "max_attempts": 1,
    }
    tools = ["read_file", "replace_definition", "finish"]
    outcome, events = run_script(
        tmp_path, repo, "fresh", [wrong, echo, right], phase, tools, index_by="requests"
    )
    assert outcome.status == "succeeded", outcome.reason
    restarts = [e for e in events if isinstance(e, ev.AttemptRestarted)]
    assert restarts[0].reason.startswith(f"`{test}` failed after the edit: ")
    assert "AssertionError: 2" in restarts[0].reason, "the check's own words"
    assert restarts[1].reason.startswith("replace_definition was refused: ")
    requests = [e for e in events if isinstance(e, ev.ModelRequest)]
    assert [r.messages for r in requests] == [2, 3, 3], "each try: the prompt and why"
    state = final_state(tmp_path / "fresh.db", outcome.run_id)
    told = [m["content"] for m in state.messages if "was undone" in str(m["content"])]
    assert len(told) == 1 and "replace_definition was refused" in told[0]
    assert ".." not in told[0], "the refusal's own full stop is not doubled"
    assert told[0].endswith(
        "first say in one sentence which line is wrong and why, then make a different change."
    )
    edits = [e for e in events if isinstance(e, ev.ToolFinished) and e.name != "finish"]
    assert "nothing changed" in edits[1].output, "the first try's edit was undone"
    assert "-    return a - b\n+    return a + b" in edits[2].output


def test_a_long_function_is_shown_without_its_docstring_and_its_rewrite_keeps_it(
    tmp_path: Path, repo: Path
) -> None:
    """humanize's naturalsize (73 lines, 38 of docstring) copied whole was cut at a 512-token
    answer: shown without its docstring, rewritten without one, the file keeps it."""
    from pilot.tactics.locate import LONG_DEFINITION

    doc = "".join(f"    Line {i} of what add does.\n" for i in range(LONG_DEFINITION))
    commit_calc(repo, f'def add(a, b):\n    """Add.\n\n{doc}    """\n    return a - b\n')
    failing = "printf '>       assert add(1, 2) == 3\\nE   assert -1 == 3\\n'; exit 1"
    rewrite = {"content": "```python\ndef add(a, b):\n    return a + b\n```"}
    phase = {"context": [failing], "locate": True, "check": CALC_TEST, "require_change": True}
    tools = ["read_file", "replace_definition", "finish"]
    outcome, events = run_script(tmp_path, repo, "nodoc", [rewrite, finish("fixed")], phase, tools)
    assert outcome.status == "succeeded", outcome.reason
    [started] = [e for e in events if isinstance(e, ev.PhaseStarted)]
    assert "line 1; its docstring of" in started.prompt
    assert "```python\ndef add(a, b):\n    return a - b\n```" in started.prompt
    [done] = [e for e in events if isinstance(e, ev.ToolFinished) and e.name != "finish"]
    assert "(its docstring kept: the code sent had none)" in done.output, done.output
    assert "-    return a - b\n+    return a + b" in done.output
    assert '-    """Add.' not in done.output, "the docstring stays"


def test_a_restarted_try_is_told_the_failed_tests_not_an_assertion_diffs_markers() -> None:
    """semver's check ended in pytest's diff markers (``?   ^``): the last lines told a
    restarted try nothing; its FAILED lines and count, or doctest's example, are what failed;
    a check killed by a signal (an endless loop's memory) or timed out says so first."""
    from pilot.agent.state import check_gist

    def check(output: str, exit_code: int | None = 1, timed_out: bool = False) -> str:
        return check_gist(
            ev.CheckFinished(
                phase=0,
                attempt=1,
                command="pytest",
                exit_code=exit_code,
                passed=False,
                output=output,
                timed_out=timed_out,
            )
        )

    pytest_out = (
        "E   assert 1 == 2\n=== short test summary info ===\n"
        "FAILED tests/test_bump.py::test_bump_minor - AssertionError: assert Version(minor=5, "
        "patch=6) == Version(minor=5, patch=0)\n  \n  - Version(minor=5, patch=0)\n"
        "  ?                 ^\n  + Version(minor=5, patch=6)\n  ?                 ^\n"
        "1 failed, 22 passed in 0.23s\n"
    )
    assert check(pytest_out) == (
        "FAILED tests/test_bump.py::test_bump_minor - AssertionError: assert Version(minor=5, "
        "patch=6) == Version(minor=5, patch=0) | 1 failed, 22 passed in 0.23s"
    )
    doctest_out = (
        'File "inflection/__init__.py", line 190, in inflection.humanize\nFailed example:\n'
        "    humanize(\"employee_salary\")\nExpected:\n    'Employee Salary'\nGot:\n"
        "    'Employee salary'\n***Test Failed*** 1 failures.\n"
    )
    assert check(doctest_out) == (
        "Failed example: | humanize(\"employee_salary\") | Expected: | 'Employee Salary' | "
        "Got: | 'Employee salary'"
    )
    assert check("a\nb\nc\nd\ne\n") == "b | c | d | e"
    dots = "......................\n"
    assert check(dots, exit_code=-9).startswith(
        "killed by signal 9 (an endless loop or too much memory?): ....."
    )
    assert check("", exit_code=None, timed_out=True) == "timed out"


def test_a_fresh_try_phase_starts_again_after_an_answer_with_no_code(
    tmp_path: Path, repo: Path
) -> None:
    """On humanize-apnumber-zero the 1.5B described the change in prose; the nudge
    conversation that followed drew the prompt's last line back six answers in a row. In a
    phase that retries fresh, such an answer ends the try: the prompt again, told to answer
    with code."""
    commit_calc(repo, "def add(a, b):\n    return a - b\n")
    described = {"content": "The line `return a - b` must subtract less."}
    # The answer after one with no call is forced (native mode): the fix comes as a call.
    fixed = {"code": "def add(a, b):\n    return a + b\n"}
    right = {"tool_calls": [{"name": "replace_definition", "arguments": fixed}]}
    phase = {"check": CALC_TEST, "require_change": True, "check_after_edit": True}
    phase |= {"retry_fresh": True, "max_attempts": 1}
    tools = ["read_file", "replace_definition", "finish"]
    outcome, events = run_script(
        tmp_path, repo, "prose", [described, right], phase, tools, index_by="requests"
    )
    assert outcome.status == "succeeded", outcome.reason
    [restart] = [e for e in events if isinstance(e, ev.AttemptRestarted)]
    assert restart.reason == "its answer had no tool call and no code"
    requests = [e for e in events if isinstance(e, ev.ModelRequest)]
    assert [r.messages for r in requests] == [2, 3], "the prompt and why, not the nudge"
    state = final_state(tmp_path / "prose.db", outcome.run_id)
    [told] = [m["content"] for m in state.messages if "was undone" in str(m["content"])]
    assert told.endswith("Answer with the change itself, as code, not a description of it.")


def test_a_method_several_classes_define_is_shown_from_the_prompts_class_or_not_at_all(
    tmp_path: Path, repo: Path
) -> None:
    """cachetools-lru-getitem-touch: the failing test calls ``cache.popitem()`` on an LRUCache
    and no frame ran inside a popitem; grep's first was FIFOCache's, shown as "popitem", and
    the model edited FIFOCache.popitem. The prompt's class decides; with none, none is shown."""
    commit_calc(
        repo,
        "class Queue:\n    def pop(self):\n        return 0\n\n    def peek(self):\n"
        "        return 0\n\n\nclass Stack:\n    def pop(self):\n        return 1\n\n"
        "    def peek(self):\n        return self.items[0]\n",
    )
    failing = "printf '>       assert s.pop() == 2\\nE   assert 1 == 2\\n'; exit 1"
    for key, prompt, shown in (
        ("owner", "Fix `Stack.peek` in calc.py.", "The code of Stack.pop (calc.py, line 10):"),
        ("none", "Fix the stack in calc.py.", None),
    ):
        phase = {"context": [failing], "locate": True, "prompt": prompt}
        outcome, events = run_script(tmp_path, repo, key, [finish("seen")], phase)
        assert outcome.status == "succeeded", outcome.reason
        [started] = [e for e in events if isinstance(e, ev.PhaseStarted)]
        assert "The code of pop " not in started.prompt, "Queue's pop, shown as bare pop"
        if shown:
            assert shown in started.prompt, started.prompt
        else:
            assert "The code of" not in started.prompt, started.prompt


def test_a_try_with_its_change_made_is_nudged_on_for_its_finish_not_undone(
    tmp_path: Path, repo: Path
) -> None:
    """A check that passed from the start: the change made, the model says it is done in
    prose; the try is not undone (its change stays), it is told to finish."""
    commit_calc(repo, "def add(a, b):\n    return a + b\n")
    added = {"name": "write_file", "arguments": {"path": "sub.py", "content": "X = 1\n"}}
    turns = [
        {"tool_calls": [added]},
        {"content": "I added sub.py, the task is complete."},
        {"tool_calls": [{"name": "finish", "arguments": {"summary": "added sub.py"}}]},
    ]
    phase = {"check": CALC_TEST, "require_change": True, "check_after_edit": True}
    phase |= {"retry_fresh": True, "max_attempts": 1}
    tools = ["read_file", "write_file", "finish"]
    outcome, events = run_script(tmp_path, repo, "done-prose", turns, phase, tools)
    assert outcome.status == "succeeded", outcome.reason
    assert not [e for e in events if isinstance(e, ev.AttemptRestarted)]
    assert [e.reason for e in events if isinstance(e, ev.Nudge)] == ["no_tool_call"]
