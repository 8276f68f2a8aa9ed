"""Policies are deterministic, scripts are easy to write, and the demo agent really refactors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import openai

from brain.sim.config import SimConfig
from brain.sim.demo import DemoPolicy, sample_repo_path
from brain.sim.policies import load_policy
from brain.sim.policy import SimChatRequest
from brain.sim.server import running_sim

TOOL_NAMES = ("read_file", "write_file", "edit_file", "list_dir", "find_files", "grep", "run")
TOOL_NAMES += ("git_status", "git_diff", "git_commit", "finish")
TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in TOOL_NAMES
]

SCRIPT_YAML = """
conversations:
  - key: "alpha-task"
    turns:
      - content: "Let me look."
        tool_calls: [{name: read_file, arguments: {path: README.md}}]
      - when: "# Title"
        reasoning: "thinking..."
        tool_calls: [{name: finish, arguments: {summary: "done"}}]
    replies:
      - when: "Check failed"
        content: "Fixing it."
        tool_calls: [{name: run, raw_arguments: '{"command": "make'}]
    after_end: {content: "Nothing more to do."}
default: {content: "no script"}
"""


def test_script_policy_turns_when_replies_and_default(tmp_path):
    path = tmp_path / "script.yaml"
    path.write_text(SCRIPT_YAML)
    policy = load_policy(f"script:{path}")
    base = [
        {"role": "system", "content": "You do the alpha-task."},
        {"role": "user", "content": "go"},
    ]

    def turn(messages):
        return policy.respond(SimChatRequest.model_validate({"messages": messages}))

    assert turn(base).tool_calls == (("read_file", '{"path": "README.md"}'),)
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    after = [*base, {"role": "assistant", "content": "", "tool_calls": [call]}]
    assert (
        turn([*after, {"role": "tool", "tool_call_id": "c1", "content": "# Title\n"}]).reasoning
        == "thinking..."
    )
    assert (
        turn([*after, {"role": "tool", "tool_call_id": "c1", "content": "other"}]).content
        == "Nothing more to do."
    )
    failed = turn([*after, {"role": "user", "content": "Check failed: exit 1"}])
    assert failed.tool_calls == (("run", '{"command": "make'),)
    assert turn([{"role": "user", "content": "unrelated"}]).content == "no script"


def test_same_messages_same_answer_on_a_new_server():
    messages = [{"role": "user", "content": "Phase 1/3: survey\nLook around."}]

    def ask() -> tuple:
        with running_sim(SimConfig(model="m")) as sim:
            client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
            message = (
                client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
                .choices[0]
                .message
            )
            return message.content, [
                (c.id, c.function.name, c.function.arguments) for c in message.tool_calls
            ]

    assert ask() == ask()


def test_demo_policy_over_http_with_hand_made_tool_results():
    with running_sim(SimConfig(model="m")) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        messages: list[dict] = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Phase 1/3: survey\nDescribe the repository."},
        ]
        results = {"list_dir": "billing/\ntests/\nREADME.md", "read_file": "Error: no such file"}
        names = []
        for _ in range(6):
            message = (
                client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
                .choices[0]
                .message
            )
            call = message.tool_calls[0]
            names.append(call.function.name)
            if call.function.name == "finish":
                break
            messages.append(message.model_dump(exclude_none=True))
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": results[call.function.name]}
            )
        assert names == ["list_dir", "read_file", "read_file", "finish"]  # errors skipped, no loop
        summary = json.loads(call.function.arguments)["summary"]
        assert "format_amount" in summary


def _execute(workspace: Path, name: str, args: dict) -> str:
    """A minimal stand-in for the pilot's tools, enough for the demo's plans."""
    if name == "list_dir":
        return "\n".join(
            sorted(
                str(p.relative_to(workspace)) for p in workspace.rglob("*") if ".git" not in p.parts
            )
        )
    if name == "read_file":
        target = workspace / args["path"]
        return target.read_text() if target.exists() else f"Error: {args['path']} does not exist"
    if name == "edit_file":
        target = workspace / args["path"]
        text = target.read_text()
        if args["old"] not in text:
            return "Error: old text not found"
        target.write_text(text.replace(args["old"], args["new"], 1))
        return "edited"
    if name == "run":
        done = subprocess.run(
            args["command"].split(), cwd=workspace, capture_output=True, text=True
        )
        return f"exit {done.returncode}\n{done.stdout}{done.stderr}"
    if name == "git_commit":
        return "Error: not a git repository"
    if name == "git_diff":
        return "+def format_amount(amount):\n-    cents = round(amount * 100)\n"
    return f"Error: unknown tool {name}"


def test_demo_policy_refactors_the_sample_repo_for_real(tmp_path):
    workspace = tmp_path / "repo"
    shutil.copytree(sample_repo_path(), workspace)
    policy = DemoPolicy()
    messages: list[dict] = [{"role": "system", "content": "agent"}]
    summaries = []
    for index, phase in enumerate(("survey", "refactor", "review"), start=1):
        messages.append({"role": "user", "content": f"Phase {index}/3: {phase}\nDo the {phase}."})
        for step in range(12):
            request = SimChatRequest.model_validate({"messages": messages, "tools": TOOLS})
            turn = policy.respond(request)
            (name, arguments), *_ = turn.tool_calls
            call_id = f"call-{index}-{step}"
            messages.append(
                {
                    "role": "assistant",
                    "content": turn.content,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": arguments},
                        }
                    ],
                }
            )
            if name == "finish":
                summaries.append(json.loads(arguments)["summary"])
                break
            result = _execute(workspace, name, json.loads(arguments))
            messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        else:
            raise AssertionError(f"phase {phase} never finished")
    code = (workspace / "billing" / "lines.py").read_text()
    assert code.count("def format_amount(amount):") == 1
    assert code.count("cents = round(amount * 100)") == 1
    assert code.count("text = format_amount(amount)") == 3
    tests = subprocess.run(
        [sys.executable, "-m", "unittest", "discover", "-s", "tests"],
        cwd=workspace,
        capture_output=True,
        text=True,
    )
    assert tests.returncode == 0, tests.stderr
    assert "4 of 4 edits applied" in summaries[1] and "unit tests pass" in summaries[1]
    assert "1 lines added, 1 removed" in summaries[2]


def test_demo_policy_unknown_phase_and_no_tools():
    policy = DemoPolicy()
    other = SimChatRequest.model_validate(
        {"messages": [{"role": "user", "content": "Phase 1/1: deploy"}], "tools": TOOLS}
    )
    assert policy.respond(other).tool_calls[0][0] == "finish"
    plain = SimChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    turn = policy.respond(plain)
    assert turn.content and not turn.tool_calls
