"""End to end over loopback: workflow file -> pilot -> simulated vLLM -> tools -> git workspace."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from pilot_harness import (
    call,
    final_state,
    make_repo,
    run_in_process,
    write_script,
    write_workflow,
)

from brain.sim.config import FaultRule, SimConfig, Timing
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.run.launch import load_for_run, start_run
from pilot.run.outcomes import RunOutcome
from pilot.run.runner import Runner
from pilot.store.event_store import EventStore


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def sim_for(script: Path, **kw: object) -> SimConfig:
    return SimConfig(model="test-model", max_model_len=32768, policy=f"script:{script}", **kw)


def events_of(db: Path, run_id: str) -> list[ev.Event]:
    return EventStore(f"sqlite:///{db}").load_events(run_id)


def test_multi_phase_run_succeeds_and_changes_the_workspace_on_its_branch(
    tmp_path: Path, repo: Path
) -> None:
    script = write_script(
        tmp_path / "s.yaml",
        "e2e-multi",
        [
            {"content": "Reading.", "tool_calls": [call("read_file", path="app.py")]},
            {"tool_calls": [call("finish", summary="app.py holds VALUE")]},
            {
                "tool_calls": [
                    call("edit_file", path="app.py", old="VALUE = 1", new="VALUE = 2"),
                    call("write_file", path="notes/done.txt", content="ok\n"),
                ]
            },
            {"tool_calls": [call("git_commit", message="Bump VALUE")]},
            {"tool_calls": [call("finish", summary="bumped")]},
        ],
    )
    with running_sim(sim_for(script)) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="e2e-multi",
            endpoint=sim.openai_base_url,
            phases=[
                {"name": "look", "prompt": "Look around.", "tools": ["read_file", "finish"]},
                {"name": "change", "prompt": "Bump it.", "check": "grep -q 'VALUE = 2' app.py"},
            ],
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "succeeded", outcome.reason
    assert outcome.exit_code == 0
    state = outcome.state
    assert [p.outcome for p in state.phases_done] == ["succeeded", "succeeded"]
    assert [p.summary for p in state.phases_done] == ["app.py holds VALUE", "bumped"]
    work = Path(state.started.workspace)
    assert work != repo and state.started.repository == str(repo.resolve())
    assert (work / "app.py").read_text() == "VALUE = 2\n"
    assert (work / "notes" / "done.txt").read_text() == "ok\n"
    assert (repo / "app.py").read_text() == "VALUE = 1\n", "the user's checkout is untouched"
    branch = subprocess.run(
        ["git", "branch", "--show-current"], cwd=work, capture_output=True, text=True
    ).stdout.strip()
    assert branch == state.started.branch
    main_file = subprocess.run(
        ["git", "show", "main:app.py"], cwd=repo, capture_output=True, text=True
    ).stdout
    assert main_file == "VALUE = 1\n", "the user's branch is untouched"
    types = [e.type for e in events_of(tmp_path / "m.db", outcome.run_id)]
    assert types[:3] == ["run_started", "model_resolved", "phase_started"]
    assert types[-1] == "run_finished"
    assert types.count("check_finished") == 1
    # every executed call is bracketed by tool_started / tool_finished
    assert types.count("tool_started") == 6 and types.count("tool_finished") == 6


def test_failing_check_goes_back_to_the_model_with_its_output(tmp_path: Path, repo: Path) -> None:
    script = write_script(
        tmp_path / "s.yaml",
        "e2e-check",
        [
            {"tool_calls": [call("finish", summary="too early")]},
            {
                "when": "Check failed",
                "tool_calls": [call("write_file", path="flag.txt", content="done\n")],
            },
            {"tool_calls": [call("finish", summary="now really")]},
        ],
    )
    with running_sim(sim_for(script)) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="e2e-check",
            endpoint=sim.openai_base_url,
            phases=[
                {
                    "name": "work",
                    "prompt": "Create flag.txt.",
                    "check": "test -f flag.txt || { echo 'flag.txt is missing'; exit 3; }",
                }
            ],
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "succeeded", outcome.reason
    checks = [e for e in events_of(tmp_path / "m.db", outcome.run_id) if e.type == "check_finished"]
    assert [(c.passed, c.exit_code) for c in checks] == [(False, 3), (True, 0)]
    feedback = [m["content"] for m in outcome.state.messages if m["role"] == "user"]
    assert any("Check failed" in f and "flag.txt is missing" in f for f in feedback)


def test_check_failing_every_attempt_fails_the_run(tmp_path: Path, repo: Path) -> None:
    script = write_script(
        tmp_path / "s.yaml",
        "e2e-hopeless",
        [{"tool_calls": [call("finish", summary="done?")]} for _ in range(4)],
    )
    with running_sim(sim_for(script)) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="e2e-hopeless",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p", "check": "exit 1", "max_attempts": 2}],
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "failed"
    assert outcome.exit_code == 1
    assert "still failing after 2 attempt(s)" in outcome.reason


@pytest.mark.parametrize(
    ("limits", "phase_limits", "expected"),
    [
        ({"max_steps": 3}, None, "run step limit reached (3 steps)"),
        (None, {"max_steps": 2}, "phase step limit reached (2 steps)"),
        ({"max_tokens": 50}, None, "run token limit reached (50 tokens)"),
    ],
)
def test_each_limit_stops_the_run_with_its_status(
    tmp_path: Path,
    repo: Path,
    limits: dict | None,
    phase_limits: dict | None,
    expected: str,
) -> None:
    script = write_script(
        tmp_path / "s.yaml",
        "e2e-limit",
        [{"tool_calls": [call("read_file", path="app.py")]} for _ in range(10)],
    )
    phase: dict = {"name": "forever", "prompt": "Keep reading."}
    if phase_limits:
        phase["limits"] = phase_limits
    with running_sim(sim_for(script)) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="e2e-limit",
            endpoint=sim.openai_base_url,
            phases=[phase],
            limits=limits,
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "limit"
    assert outcome.exit_code == 3
    assert outcome.reason == expected


def test_the_wall_time_limit_stops_the_run_with_its_status(tmp_path: Path, repo: Path) -> None:
    script = write_script(
        tmp_path / "s.yaml",
        "e2e-wall",
        [{"tool_calls": [call("run", command="sleep 0.5")]} for _ in range(20)],
    )
    with running_sim(sim_for(script)) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="e2e-wall",
            endpoint=sim.openai_base_url,
            phases=[{"name": "forever", "prompt": "Keep waiting."}],
            limits={"max_wall_time": 1, "max_no_progress_steps": 50},
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "limit"
    assert outcome.reason == "run wall-time limit reached (1 s)"
    assert outcome.state.steps < 20


def run_limited(
    tmp_path: Path, repo: Path, key: str, tool_call: dict, phase: dict, wall_s: int
) -> tuple[RunOutcome, list[ev.Event]]:
    """One scripted call in a one-phase run limited to ``wall_s`` seconds of wall time."""
    script = write_script(tmp_path / "s.yaml", key, [{"tool_calls": [tool_call]}])
    with running_sim(sim_for(script)) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key=key,
            endpoint=sim.openai_base_url,
            phases=[phase],
            limits={"max_wall_time": wall_s},
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    return outcome, events_of(tmp_path / "m.db", outcome.run_id)


def test_a_hung_check_ends_at_the_wall_time_limit_not_at_its_own_timeout(
    tmp_path: Path, repo: Path
) -> None:
    """A check that hangs (the model's endless generator under pytest) gets the wall time
    the run has left, not its 600 s: the try ends inside its limit."""
    phase = {
        "name": "fix",
        "prompt": "Fix app.py.",
        "check": "test -f started && sleep 120; touch started; exit 1",
        "check_after_edit": True,
        "check_timeout": 600,
    }
    write = call("write_file", path="app.py", content="VALUE = 2\n")
    outcome, events = run_limited(tmp_path, repo, "e2e-hung-check", write, phase, 4)
    assert outcome.status == "limit", outcome.reason
    assert outcome.reason == "run wall-time limit reached (4 s)"
    # Killed: its own 600 s would have let the 120 s sleep end and the check fail normally.
    hung = [e for e in events if isinstance(e, ev.CheckFinished) and e.after_edit]
    assert hung and hung[0].timed_out, hung


def test_a_hung_command_ends_at_the_wall_time_limit_not_at_its_timeout(
    tmp_path: Path, repo: Path
) -> None:
    """`run` with a 600 s timeout gets the wall time the run has left."""
    wait = call("run", command="sleep 120", timeout=600)
    phase = {"name": "wait", "prompt": "Wait."}
    outcome, events = run_limited(tmp_path, repo, "e2e-hung-run", wait, phase, 3)
    assert outcome.status == "limit", outcome.reason
    ran = next(e for e in events if isinstance(e, ev.ToolFinished) and e.name == "run")
    assert ran.is_error and "the run's wall-time limit leaves no longer" in ran.output


def test_malformed_and_unknown_calls_go_back_as_errors(tmp_path: Path, repo: Path) -> None:
    script = write_script(
        tmp_path / "s.yaml",
        "e2e-bad-calls",
        [
            {"tool_calls": [{"name": "read_file", "raw_arguments": '{"path": "app.py",'}]},
            {"tool_calls": [call("delete_everything", path="/")]},
            {"tool_calls": [call("read_file", colour="app.py")]},
            {"tool_calls": [call("read_file", pth="app.py")]},
            {"tool_calls": [call("finish", summary="app.py holds VALUE")]},
        ],
    )
    with running_sim(sim_for(script)) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="e2e-bad-calls",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "succeeded"
    results = [e for e in events_of(tmp_path / "m.db", outcome.run_id) if e.type == "tool_finished"]
    repaired, unknown, invalid, renamed, _finish = results
    assert not repaired.is_error and "VALUE = 1" in repaired.output
    assert unknown.is_error and "no tool named 'delete_everything'" in unknown.output
    assert not unknown.executed
    # The wrong argument is named, with the exact shape expected; nothing ran.
    assert invalid.is_error and "'colour'" in invalid.output and not invalid.executed
    assert '{"name": "read_file", "arguments": {"path": "a file path from' in invalid.output
    # A near-miss argument name is taken as the real one, and recorded as a repair.
    assert not renamed.is_error and "VALUE = 1" in renamed.output
    messages = [
        e for e in events_of(tmp_path / "m.db", outcome.run_id) if e.type == "assistant_message"
    ]
    assert messages[0].repairs, "the broken JSON repair is recorded"
    assert messages[0].tool_calls[0].raw_arguments == '{"path": "app.py",'
    assert "read_file: argument 'pth' taken as 'path'" in messages[3].repairs


def test_length_cut_tool_call_is_not_executed(tmp_path: Path, repo: Path) -> None:
    script = write_script(
        tmp_path / "s.yaml",
        "e2e-length",
        [
            {
                "tool_calls": [call("write_file", path="big.txt", content="x" * 50)],
                "fault": "length",
            },
            {"tool_calls": [call("read_file", path="app.py")]},
            {"tool_calls": [call("finish", summary="app.py holds VALUE")]},
        ],
    )
    with running_sim(sim_for(script)) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="e2e-length",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "succeeded"
    assert not (Path(outcome.state.started.workspace) / "big.txt").exists()
    first = next(
        e for e in events_of(tmp_path / "m.db", outcome.run_id) if e.type == "tool_finished"
    )
    assert first.is_error and "cut off by the max_tokens limit" in first.output


def test_server_refusing_connections_is_waited_for_and_recorded(tmp_path: Path, repo: Path) -> None:
    script = write_script(
        tmp_path / "s.yaml",
        "e2e-refuse",
        [
            {"tool_calls": [call("read_file", path="app.py")]},
            {"tool_calls": [call("finish", summary="app.py holds VALUE")]},
        ],
    )
    config = sim_for(script, faults=[FaultRule(kind="refuse", at=[2], seconds=1.5)])
    with running_sim(config) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="e2e-refuse",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "succeeded", outcome.reason
    types = [e.type for e in events_of(tmp_path / "m.db", outcome.run_id)]
    assert "server_unavailable" in types and "server_back" in types
    assert types.index("server_unavailable") < types.index("server_back")


def test_unknown_model_name_fails_with_the_served_names(tmp_path: Path, repo: Path) -> None:
    script = write_script(tmp_path / "s.yaml", "e2e-404", [])
    with running_sim(sim_for(script)) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="e2e-404",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
            model={"name": "no-such-model"},
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "failed"
    assert "no-such-model" in outcome.reason and "test-model" in outcome.reason


def test_state_after_run_equals_fold_of_stored_events(tmp_path: Path, repo: Path) -> None:
    script = write_script(
        tmp_path / "s.yaml",
        "e2e-fold",
        [
            {"tool_calls": [call("run", command="echo hi > out.txt")]},
            {"tool_calls": [call("finish", summary="ok")]},
        ],
    )
    with running_sim(sim_for(script)) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="e2e-fold",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    folded = final_state(tmp_path / "m.db", outcome.run_id)
    assert folded.messages == outcome.state.messages
    assert folded.snapshot == outcome.state.snapshot


def test_server_that_never_answers_pauses_the_run_instead_of_failing(
    tmp_path: Path, repo: Path
) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    workflow = write_workflow(
        tmp_path / "wf.yaml",
        key="e2e-nobody",
        endpoint=f"http://127.0.0.1:{port}/v1",
        phases=[{"name": "work", "prompt": "p"}],
        model={"server_wait": 1.5},
    )
    outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "paused"
    assert outcome.exit_code == 75
    assert "unavailable" in outcome.reason
    types = [e.type for e in events_of(tmp_path / "m.db", outcome.run_id)]
    assert types[-2:] == ["server_unavailable", "run_paused"]


async def _run_until_a_model_request(
    tmp_path: Path, repo: Path, sim_url: str, stop: asyncio.Event
) -> tuple[asyncio.Task, Runner, str]:
    """A run started in this loop, returned once its first model request is stored (the
    sim takes minutes to answer it)."""
    workflow = write_workflow(
        tmp_path / "wf.yaml",
        key="e2e-slow-answer",
        endpoint=sim_url,
        phases=[{"name": "only", "prompt": "Do it.", "tools": ["read_file", "finish"]}],
        model={"idle_timeout": 600},
    )
    store = EventStore(f"sqlite:///{tmp_path / 'm.db'}")
    runner = Runner(store, stop=stop)
    task = asyncio.ensure_future(start_run(runner, load_for_run(workflow, [f"repo={repo}"])))
    for _ in range(300):
        await asyncio.sleep(0.05)
        runs = store.list_runs()
        if runs and any(e.type == "model_request" for e in store.load_events(runs[0].id)):
            return task, runner, runs[0].id
    raise AssertionError("no model_request stored within 15 s")


def test_a_stop_during_a_long_answer_pauses_the_run_at_once(tmp_path: Path, repo: Path) -> None:
    script = write_script(
        tmp_path / "s.yaml", "e2e-slow-answer", [{"tool_calls": [call("finish", summary="ok")]}]
    )

    async def scenario() -> tuple[RunOutcome, list[ev.Event]]:
        stop = asyncio.Event()
        with running_sim(sim_for(script, timing=Timing(ttft=300.0))) as sim:
            task, runner, run_id = await _run_until_a_model_request(
                tmp_path, repo, sim.openai_base_url, stop
            )
            stop.set()
            # The answer would take 300 s: the run can only end within this bound if the
            # stop cut the request.
            outcome = await asyncio.wait_for(task, 30)
            await runner.aclose()
            return outcome, runner.store.load_events(run_id)

    outcome, events = asyncio.run(scenario())
    assert outcome.status == "paused", outcome.reason
    assert not any(e.type == "assistant_message" for e in events)
    assert [e.type for e in events[-2:]] == ["model_request", "run_paused"]
    assert "stop requested" in events[-1].reason


def test_a_run_cancelled_from_outside_during_an_answer_is_not_taken_for_a_pause(
    tmp_path: Path, repo: Path
) -> None:
    script = write_script(
        tmp_path / "s.yaml", "e2e-slow-answer", [{"tool_calls": [call("finish", summary="ok")]}]
    )

    async def scenario() -> tuple[list[ev.Event], str]:
        with running_sim(sim_for(script, timing=Timing(ttft=300.0))) as sim:
            task, runner, run_id = await _run_until_a_model_request(
                tmp_path, repo, sim.openai_base_url, asyncio.Event()
            )
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 30)
            await runner.aclose()
            return runner.store.load_events(run_id), runner.store.get_run(run_id).status

    events, status = asyncio.run(scenario())
    assert events[-1].type == "model_request"  # no pause, no failure recorded
    assert status == "running"
