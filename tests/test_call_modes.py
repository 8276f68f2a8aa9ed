"""Call modes (``model.tool_calls``), pinned and chosen by measure, through the real openai client
against the simulated vLLM: what each mode sends (the request the sim received), how each answer's
calls came, code that travels as a fenced block, the choices recorded as events and kept by a
resume, and ``pilot show`` / the report listing them. Real parts: the sim over loopback, a git
workspace, a SQLite store, ``pilot`` subprocesses for the resume.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pilot_harness import (
    GIT_ENV,
    call,
    make_repo,
    pilot_cmd,
    run_in_process,
    run_workspace,
    write_script,
)
from pilot_harness import write_workflow as harness_workflow

from brain.bench.replay.files import load_replay
from brain.sim.config import SimConfig
from brain.sim.policy import SimChatRequest, SimTurn
from brain.sim.script_policy import ScriptPolicy
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.agent import call_modes
from pilot.errors import WorkflowError
from pilot.front.replay_export import export_run, write_replay
from pilot.model.errors import SAME_500_LIMIT
from pilot.store.event_store import EventStore
from pilot.workflow import load_workflow

KEY = "call-modes"
TOOLS = ["read_file", "replace_definition", "run", "finish"]
BROKEN = "def add(a, b):\n    return a + b\n  x = ("
FIXED = 'def add(a, b):\n    """Add two numbers."""\n    return a + b'
SYNTAX = "You call a tool by writing"


class Recording:
    """A script policy that keeps every request it answered."""

    def __init__(self, script: Path) -> None:
        self.inner = ScriptPolicy.from_file(script)
        self.requests: list[SimChatRequest] = []

    def respond(self, request: SimChatRequest) -> SimTurn:
        self.requests.append(request)
        return self.inner.respond(request)

    @property
    def choices(self) -> list[Any]:
        return [r.tool_choice for r in self.requests]


def system_of(request: SimChatRequest) -> str:
    return next((m.text for m in request.messages if m.role == "system"), "")


def events_of(db: Path, run_id: str) -> list[ev.Event]:
    return EventStore(f"sqlite:///{db}").load_events(run_id)


def answers(events: list[ev.Event]) -> list[str | None]:
    return [e.call_mode for e in events if isinstance(e, ev.AssistantMessage)]


def chosen(events: list[ev.Event]) -> list[tuple[str, str, str]]:
    return [(e.kind, e.mode, e.by) for e in events if isinstance(e, ev.CallModeChosen)]


def workflow(path: Path, url: str, mode: str | None, tools: list[str] | None = None) -> Path:
    return harness_workflow(
        path,
        key=KEY,
        endpoint=url,
        tools=tools or TOOLS,
        model={"tool_calls": mode} if mode else None,
        phases=[
            {"name": "fix", "prompt": "Fix add in calc.py.", "check": "grep -q 'a + b' calc.py"}
        ],
    )


NO_TOOL_FLAGS = SimConfig(
    model="test-model", max_model_len=32768, enable_auto_tool_choice=False, tool_call_parser=None
)
"""vLLM served without ``--enable-auto-tool-choice --tool-call-parser``."""


def run_turns(
    tmp_path: Path,
    turns: list[dict[str, Any]],
    mode: str | None,
    tools: list[str] | None = None,
    config: SimConfig | None = None,
) -> tuple[Any, Recording, list[ev.Event]]:
    repo = make_repo(tmp_path / "repo", {"calc.py": "def add(a, b):\n    return a - b\n"})
    policy = Recording(write_script(tmp_path / "s.yaml", KEY, turns))
    config = config or SimConfig(model="test-model", max_model_len=32768)
    with running_sim(config, policy=policy) as sim:
        flow = workflow(tmp_path / "wf.yaml", sim.openai_base_url, mode, tools)
        outcome = run_in_process(flow, repo, tmp_path / "m.db")
    return outcome, policy, events_of(tmp_path / "m.db", outcome.run_id)


FIX_TURNS = [
    {"tool_calls": [call("read_file", path="calc.py")]},
    {"tool_calls": [call("replace_definition", code=FIXED)]},
    {"tool_calls": [call("finish", summary="Fixed add in calc.py.")]},
]


# -- the setting ----------------------------------------------------------------------------


def test_the_setting_takes_the_four_modes_and_refuses_others(tmp_path: Path) -> None:
    params = {"repo": str(tmp_path)}
    path = workflow(tmp_path / "wf.yaml", "http://127.0.0.1:9/v1", None)
    assert load_workflow(path, params).workflow.model.tool_calls == "auto"
    for mode in ("native", "forced", "text", "auto"):
        path = workflow(tmp_path / f"wf-{mode}.yaml", "http://127.0.0.1:9/v1", mode)
        assert load_workflow(path, params).workflow.model.tool_calls == mode
    path = workflow(tmp_path / "wf-bad.yaml", "http://127.0.0.1:9/v1", "json")
    with pytest.raises(WorkflowError) as caught:
        load_workflow(path, params)
    message = str(caught.value)
    assert "tool_calls" in message and "forced" in message and "text" in message, message


# -- pinned modes: what is sent, how answers came -------------------------------------------


def test_native_sends_tools_with_auto_and_records_native_answers(tmp_path: Path) -> None:
    outcome, policy, events = run_turns(tmp_path, FIX_TURNS, "native")
    assert outcome.status == "succeeded", outcome.reason
    assert policy.choices == ["auto", "auto", "auto"]
    assert all(r.tool_names() == TOOLS for r in policy.requests)
    assert all(SYNTAX not in system_of(r) for r in policy.requests)
    assert answers(events) == ["native", "native", "native"]
    assert ("calls", "native", "workflow") in chosen(events)
    asked = [e.asked for e in events if isinstance(e, ev.AssistantMessage)]
    assert asked == ["native"] * 3
    assert [e.code_json for e in events if isinstance(e, ev.AssistantMessage)] == [0, 1, 0]


def test_forced_sends_required_and_records_forced_answers(tmp_path: Path) -> None:
    outcome, policy, events = run_turns(tmp_path, FIX_TURNS, "forced")
    assert outcome.status == "succeeded", outcome.reason
    assert policy.choices == ["required"] * 3
    assert all(SYNTAX not in system_of(r) for r in policy.requests)
    assert answers(events) == ["forced", "forced", "forced"]
    assert ("calls", "forced", "workflow") in chosen(events)


def test_forced_with_one_tool_names_it(tmp_path: Path) -> None:
    turns = [{"tool_calls": [call("finish", summary="Nothing to do in calc.py.")]}]
    repo = make_repo(tmp_path / "repo", {"calc.py": "x = 1\n"})
    policy = Recording(write_script(tmp_path / "s.yaml", KEY, turns))
    with running_sim(SimConfig(model="test-model", max_model_len=32768), policy=policy) as sim:
        flow = harness_workflow(
            tmp_path / "wf.yaml",
            key=KEY,
            endpoint=sim.openai_base_url,
            tools=["read_file", "finish"],
            model={"tool_calls": "forced"},
            phases=[{"name": "done", "prompt": "Say you are done.", "tools": ["finish"]}],
        )
        outcome = run_in_process(flow, repo, tmp_path / "m.db")
    assert outcome.status == "succeeded", outcome.reason
    assert policy.choices == [{"type": "function", "function": {"name": "finish"}}]


def test_text_sends_no_tools_states_the_syntax_and_reads_the_text(tmp_path: Path) -> None:
    turns = [
        {"content": '```json\n{"name": "read_file", "arguments": {"path": "calc.py"}}\n```'},
        {
            "content": '```json\n{"name": "replace_definition", "arguments": {"path": '
            f'"calc.py"}}}}\n```\n\n```python\n{FIXED}\n```'
        },
        {"content": '```json\n{"name": "finish", "arguments": {"summary": "Fixed calc.py."}}\n```'},
    ]
    outcome, policy, events = run_turns(tmp_path, turns, "text")
    assert outcome.status == "succeeded", outcome.reason
    assert all(r.tools is None and r.tool_choice in (None, "none") for r in policy.requests)
    assert all(SYNTAX in system_of(r) for r in policy.requests)
    assert "replace_definition(" in system_of(policy.requests[0])
    said = system_of(policy.requests[0])
    assert '"..."' not in said and "<file>" not in said, "no placeholder to copy"
    assert answers(events) == ["text", "text", "text"]
    assert chosen(events)[:2] == [("calls", "text", "workflow"), ("code", "block", "workflow")]
    message = [e for e in events if isinstance(e, ev.AssistantMessage)][1]
    assert message.code_block == 1 and message.code_json == 0
    # The history goes back as text: the call names the target, the code follows as a block.
    sent = policy.requests[2].message_dicts()
    assert not any(m.get("tool_calls") for m in sent)
    assert any(f"```python\n{FIXED}" in str(m.get("content")) for m in sent)
    assert (
        '"""Add two numbers."""'
        in (run_workspace(tmp_path / "m.db", outcome.run_id) / "calc.py").read_text()
    )


# -- auto -----------------------------------------------------------------------------------


def test_auto_forces_only_the_answer_after_one_with_no_call(tmp_path: Path) -> None:
    turns = [
        {"tool_calls": [call("read_file", path="calc.py")]},
        {"content": "I see the bug: add subtracts."},
        {"tool_calls": [call("replace_definition", code=FIXED)]},
        {"tool_calls": [call("finish", summary="Fixed add in calc.py.")]},
    ]
    outcome, policy, events = run_turns(tmp_path, turns, None)
    assert outcome.status == "succeeded", outcome.reason
    assert policy.choices == ["auto", "auto", "required", "auto"]
    assert answers(events) == ["native", "none", "forced", "native"]
    assert chosen(events)[0] == ("calls", "native", "pilot")


def test_auto_moves_to_text_when_calls_only_ever_come_as_text(tmp_path: Path) -> None:
    read = '```json\n{"name": "read_file", "arguments": {"path": "calc.py"}}\n```'
    turns = [{"content": read}] * call_modes.TEXT_SWITCH_AFTER + [
        {"content": "The bug is in add."},
        {"tool_calls": [call("replace_definition", code=FIXED)]},
        {"content": '```json\n{"name": "finish", "arguments": {"summary": "Fixed calc.py."}}\n```'},
    ]
    outcome, policy, events = run_turns(tmp_path, turns, None)
    assert outcome.status == "succeeded", outcome.reason
    switch = call_modes.TEXT_SWITCH_AFTER
    # Native until the switch; then no tools and the syntax stated, except the one answer
    # after an answer with no call, which is forced (its tools sent for that request).
    assert policy.choices == ["auto"] * switch + [None, "required", None]
    assert [r.tools is None for r in policy.requests[switch:]] == [True, False, True]
    assert SYNTAX in system_of(policy.requests[switch])
    assert SYNTAX not in system_of(policy.requests[0])
    forced = policy.requests[switch + 1].message_dicts()
    assert not any(m.get("tool_calls") for m in forced), "the history still goes back as text"
    text = [e for e in events if isinstance(e, ev.CallModeChosen) and e.mode == "text"]
    assert len(text) == 1 and text[0].counts["text"] == switch and "native" not in text[0].counts
    assert answers(events) == ["text"] * switch + ["none", "forced", "text"]
    assert ("code", "block", "pilot") in chosen(events), "in text mode code travels as blocks"


def test_replay_export_rebuilds_each_request_as_its_call_mode_sent_it(tmp_path: Path) -> None:
    """``pilot replay-export`` (for ``brain bench --replay``) gives, request by request, what
    the server received: native with tools, then text mode's syntax and text history and no
    tools, and the one forced request's tools and ``tool_choice``."""
    read = '```json\n{"name": "read_file", "arguments": {"path": "calc.py"}}\n```'
    turns = [{"content": read}] * call_modes.TEXT_SWITCH_AFTER + [
        {"content": "The bug is in add."},
        {"tool_calls": [call("replace_definition", code=FIXED)]},
        {"content": '```json\n{"name": "finish", "arguments": {"summary": "Fixed calc.py."}}\n```'},
    ]
    outcome, policy, _ = run_turns(tmp_path, turns, None)
    assert outcome.status == "succeeded", outcome.reason
    path = tmp_path / "replay.jsonl"
    write_replay(export_run(EventStore(f"sqlite:///{tmp_path / 'm.db'}"), outcome.run_id), path)
    replayed = [r for r in load_replay(path).requests if r.kind == "step"]
    assert len(replayed) == len(policy.requests)

    def strip(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in m.items() if v is not None} for m in messages]

    for got, sent in zip(replayed, policy.requests, strict=True):
        assert strip(got.messages) == sent.message_dicts()
        assert (got.tools is None) == (sent.tools is None)
        if sent.tools is not None:
            assert got.tool_choice == sent.tool_choice
    assert [r.tool_choice for r in replayed if r.tools] == ["auto"] * 3 + ["required"]


def test_auto_stops_forcing_a_server_that_refuses_it(tmp_path: Path) -> None:
    turns = [
        {"content": "Let me think about calc.py first."},
        {"tool_calls": [call("replace_definition", code=FIXED)]},
        {"tool_calls": [call("finish", summary="Fixed add in calc.py.")]},
    ]
    repo = make_repo(tmp_path / "repo", {"calc.py": "def add(a, b):\n    return a - b\n"})
    policy = Refusing(write_script(tmp_path / "s.yaml", KEY, turns))
    with running_sim(SimConfig(model="test-model", max_model_len=32768), policy=policy) as sim:
        flow = workflow(tmp_path / "wf.yaml", sim.openai_base_url, None)
        outcome = run_in_process(flow, repo, tmp_path / "m.db")
    events = events_of(tmp_path / "m.db", outcome.run_id)
    assert outcome.status == "succeeded", outcome.reason
    off = [e for e in events if isinstance(e, ev.CallModeChosen) and e.kind == "forcing"]
    assert len(off) == 1 and off[0].mode == "off", off
    assert "refused a forced tool choice" in off[0].reason and "HTTP 500" in off[0].reason
    # Forced once (a 500 is tried again, as any 500, until it is seen to be the request's),
    # then the same answer asked unforced, and never forced again.
    assert policy.choices == ["auto", *["required"] * SAME_500_LIMIT, "auto", "auto"]


def test_auto_moves_to_text_on_a_server_without_tool_flags_and_stops_forcing_on_its_400(
    tmp_path: Path,
) -> None:
    """vLLM served without ``--enable-auto-tool-choice --tool-call-parser`` answers 400 to a
    request that sends tools with ``auto`` and to a forced one: under ``auto`` the run goes on
    in text mode, and the forcing after an answer with no call is dropped at its 400."""
    turns = [
        {"content": '```json\n{"name": "read_file", "arguments": {"path": "calc.py"}}\n```'},
        {"content": "The bug is in add."},
        {
            "content": '```json\n{"name": "replace_definition", "arguments": {"path": '
            f'"calc.py"}}}}\n```\n\n```python\n{FIXED}\n```'
        },
        {"content": '```json\n{"name": "finish", "arguments": {"summary": "Fixed calc.py."}}\n```'},
    ]
    outcome, policy, events = run_turns(tmp_path, turns, None, config=NO_TOOL_FLAGS)
    assert outcome.status == "succeeded", outcome.reason
    # The refused requests never reach the model: every answered request sent no tools.
    assert all(r.tools is None for r in policy.requests), policy.choices
    assert len(policy.requests) == len(turns)
    assert SYNTAX in system_of(policy.requests[0])
    assert chosen(events) == [
        ("calls", "native", "pilot"),
        ("calls", "text", "pilot"),
        ("code", "block", "pilot"),
        ("forcing", "off", "pilot"),
    ]
    text, _, off = [e for e in events if isinstance(e, ev.CallModeChosen)][1:]
    assert "enable-auto-tool-choice" in text.reason and "refused tools" in text.reason
    assert "tool_choice" in off.reason and "requires --tool-call-parser" in off.reason
    assert answers(events) == ["text", "none", "text", "text"]
    assert "a + b" in (run_workspace(tmp_path / "m.db", outcome.run_id) / "calc.py").read_text()


def test_a_pinned_mode_on_a_server_without_tool_flags_stops_with_the_flags_to_add(
    tmp_path: Path,
) -> None:
    outcome, policy, _ = run_turns(tmp_path, FIX_TURNS, "native", config=NO_TOOL_FLAGS)
    assert outcome.status == "failed"
    assert "--enable-auto-tool-choice --tool-call-parser" in outcome.reason
    assert policy.requests == []


class Refusing(Recording):
    """A server that answers a forced tool choice with HTTP 500, as vLLM 0.26 does without
    the structured-output wheels it needs (lm-format-enforcer)."""

    def respond(self, request: SimChatRequest) -> SimTurn:
        if request.tool_choice == "required":
            self.requests.append(request)
            raise RuntimeError("forced tool choice: no guided decoding backend")
        return super().respond(request)


# -- code travels as code -------------------------------------------------------------------


def test_a_forced_call_without_its_code_gets_it_as_a_block_next_turn(tmp_path: Path) -> None:
    turns = [
        {"tool_calls": [call("replace_definition", path="calc.py")]},
        {"content": f"Here it is:\n```python\n{FIXED}\n```"},
        {"tool_calls": [call("finish", summary="Fixed add in calc.py.")]},
    ]
    outcome, policy, events = run_turns(tmp_path, turns, "forced")
    assert outcome.status == "succeeded", outcome.reason
    assert policy.choices == ["required", "none", "required"]
    asked = [e for e in events if isinstance(e, ev.CodeAsked)]
    assert [(a.name, a.argument) for a in asked] == [("replace_definition", "code")]
    assert "```python" in next(e for e in events if isinstance(e, ev.ToolFinished)).output
    assert answers(events) == ["forced", "text", "forced"]
    text = (run_workspace(tmp_path / "m.db", outcome.run_id) / "calc.py").read_text()
    assert '"""Add two numbers."""' in text and "a + b" in text


def test_a_native_call_takes_its_code_from_the_same_answers_block(tmp_path: Path) -> None:
    turns = [
        {
            "content": f"```python\n{FIXED}\n```",
            "tool_calls": [call("replace_definition", path="calc.py")],
        },
        {"tool_calls": [call("finish", summary="Fixed add in calc.py.")]},
    ]
    outcome, _policy, events = run_turns(tmp_path, turns, "native")
    assert outcome.status == "succeeded", outcome.reason
    message = next(e for e in events if isinstance(e, ev.AssistantMessage))
    assert message.call_mode == "native" and message.code_block == 1
    assert not [e for e in events if isinstance(e, ev.CodeAsked)]


def code_switch_turns() -> list[dict[str, Any]]:
    return [
        {"tool_calls": [call("replace_definition", code=BROKEN)]},
        {"tool_calls": [call("replace_definition", code=BROKEN)]},
        {"tool_calls": [call("replace_definition", code=BROKEN)]},
        {"content": f"```python\n{FIXED}\n```"},
        {"tool_calls": [call("finish", summary="Fixed add in calc.py.")]},
    ]


def test_code_in_json_that_fails_to_parse_twice_moves_the_models_code_to_blocks(
    tmp_path: Path,
) -> None:
    outcome, policy, events = run_turns(tmp_path, code_switch_turns(), "forced")
    assert outcome.status == "succeeded", outcome.reason
    code = [e for e in events if isinstance(e, ev.CallModeChosen) and e.kind == "code"]
    assert [(c.mode, c.counts["code_json_unparsed"]) for c in code] == [("block", 2)]
    # From then on the code argument is optional in the schemas sent and the prompt says so;
    # the third broken code is not run but asked for as a block.
    third = policy.requests[2]
    schema = next(t for t in third.tools or [] if t["function"]["name"] == "replace_definition")
    assert "code" not in schema["function"]["parameters"]["required"]
    assert "fenced block" in system_of(third)
    assert "fenced block" not in system_of(policy.requests[1])
    assert len([e for e in events if isinstance(e, ev.CodeAsked)]) == 1
    assert policy.choices[3] == "none"
    text = (run_workspace(tmp_path / "m.db", outcome.run_id) / "calc.py").read_text()
    assert '"""Add two numbers."""' in text


# -- kept by a resume; listed by show and the report ----------------------------------------


def test_the_choice_survives_a_resume_and_show_and_report_list_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc.py": "def add(a, b):\n    return a - b\n"})
    policy = Recording(write_script(tmp_path / "s.yaml", KEY, code_switch_turns()))
    env = {**os.environ, **GIT_ENV, "MARATHON_HOME": str(tmp_path / "home")}
    db = ["--db", f"sqlite:///{tmp_path / 'm.db'}"]
    with running_sim(SimConfig(model="test-model", max_model_len=32768), policy=policy) as sim:
        flow = workflow(tmp_path / "wf.yaml", sim.openai_base_url, "forced")
        killed = subprocess.run(
            pilot_cmd("run", str(flow), "--param", f"repo={repo}", *db),
            env={**env, "MARATHON_FAILPOINT": "kill_at=result_committed:3,checkpoint_every=1"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert killed.returncode != 0, killed.stdout + killed.stderr
        run_id = EventStore(f"sqlite:///{tmp_path / 'm.db'}").list_runs()[0].id
        before = len(policy.requests)
        resumed = subprocess.run(
            pilot_cmd("resume", run_id, *db), env=env, capture_output=True, text=True, timeout=120
        )
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        shown = subprocess.run(
            pilot_cmd("show", run_id, *db), env=env, capture_output=True, text=True, timeout=60
        )
        report = subprocess.run(
            pilot_cmd("report", run_id, *db), env=env, capture_output=True, text=True, timeout=60
        )
    events = events_of(tmp_path / "m.db", run_id)
    code = [e for e in events if isinstance(e, ev.CallModeChosen) and e.kind == "code"]
    assert len(code) == 1, "the choice is made once"
    # Killed after the second broken code: the counts came back with the resumed state (its
    # checkpoint), and the resumed process made the choice from them.
    kinds = [e.type for e in events]
    assert kinds.index("run_resumed") < events.index(code[0])
    assert before == 2
    # After the resume, the requests still carry the block mode (the code argument optional).
    after = policy.requests[before:]
    assert after and all("fenced block" in system_of(r) for r in after)
    assert [e for e in events if isinstance(e, ev.RunResumed)]
    assert shown.returncode == 0, shown.stderr
    assert "call mode" in shown.stdout and "code as block" in shown.stdout, shown.stdout
    assert "forced" in shown.stdout
    assert report.returncode == 0, report.stderr
    assert "code as block" in report.stdout and "by workflow" in report.stdout, report.stdout


def test_pilot_run_set_pins_the_mode_and_refuses_a_bad_one(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc.py": "def add(a, b):\n    return a - b\n"})
    policy = Recording(write_script(tmp_path / "s.yaml", KEY, FIX_TURNS))
    env = {**os.environ, **GIT_ENV, "MARATHON_HOME": str(tmp_path / "home")}
    db = ["--db", f"sqlite:///{tmp_path / 'm.db'}"]
    with running_sim(SimConfig(model="test-model", max_model_len=32768), policy=policy) as sim:
        flow = workflow(tmp_path / "wf.yaml", sim.openai_base_url, None)
        bad = subprocess.run(
            pilot_cmd(
                "run", str(flow), "--param", f"repo={repo}", "--set", "model.tool_calls=json", *db
            ),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert bad.returncode == 2, bad.stdout + bad.stderr
        assert "model.tool_calls" in bad.stderr and "forced" in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr
        assert not policy.requests
        done = subprocess.run(
            pilot_cmd(
                "run", str(flow), "--param", f"repo={repo}", "--set", "model.tool_calls=forced", *db
            ),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert policy.choices == ["required"] * 3
    store = EventStore(f"sqlite:///{tmp_path / 'm.db'}")
    (record,) = store.list_runs()
    assert "tool_calls: forced" in record.workflow_text, "kept with the run, for a resume"
    assert ("calls", "forced", "workflow") in chosen(store.load_events(record.id))


def test_which_calls_get_their_code_asked_for() -> None:
    def tool_call(name: str, **arguments: Any) -> ev.ToolCall:
        return ev.ToolCall(id="c", name=name, arguments=json.dumps(arguments))

    assert call_modes.needs_code(tool_call("replace_definition"), False) == "code"
    assert call_modes.needs_code(tool_call("replace_definition", code=FIXED), True) is None
    assert call_modes.needs_code(tool_call("replace_definition", code=BROKEN), False) is None
    assert call_modes.needs_code(tool_call("replace_definition", code=BROKEN), True) == "code"
    assert call_modes.needs_code(tool_call("write_file", path="a.py"), False) == "content"
    # Without its path a block has no target: the call is refused as it came.
    assert call_modes.needs_code(tool_call("write_file"), False) is None
    assert call_modes.needs_code(tool_call("edit_file", path="a.py", old="x"), False) == "new"
    assert call_modes.needs_code(tool_call("read_file", path="a.py"), True) is None
    # A non-Python file's content is never checked as Python.
    assert (
        call_modes.needs_code(tool_call("write_file", path="a.md", content="x = ("), True) is None
    )


def test_a_dry_run_refuses_text_mode_its_demo_agent_cannot_answer(tmp_path: Path) -> None:
    """The dry run's demo agent calls tools only natively: text mode would fail every phase."""
    env = {**os.environ, **GIT_ENV, "MARATHON_HOME": str(tmp_path / "home")}
    shipped = Path(__file__).resolve().parent.parent / "workflows" / "refactor_repo.yaml"
    refused = subprocess.run(
        pilot_cmd("run", str(shipped), "--dry-run", "--set", "model.tool_calls=text"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "model.tool_calls: text cannot be rehearsed" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "run started" not in refused.stdout, "refused before any run is recorded"
