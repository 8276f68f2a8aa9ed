"""A script says what the model writes when a call is forced, and the sim answers forced calls
and structured outputs as vLLM 0.33 does (the table's cases are in tests/conformance; these are
the script's side, over HTTP with the official openai client)."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from brain.sim.config import SimConfig
from brain.sim.server import running_sim

EDIT = {
    "type": "function",
    "function": {
        "name": "edit_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "new": {"type": "string"}},
            "required": ["path", "new"],
        },
    },
}
READ = {
    "type": "function",
    "function": {
        "name": "read_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}
SCRIPT = """
conversations:
  - key: "forced-task"
    turns:
      - content: "I would change app.py so that it prints the total."
        forced_tool_calls:
          - {name: edit_file, arguments: {path: app.py, new: "print(total)  # the sum, é"}}
  - key: "broken-task"
    turns:
      - tool_calls: [{name: read_file, raw_arguments: '{"path": "app.py",'}]
"""


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory):
    path: Path = tmp_path_factory.mktemp("s") / "script.yaml"
    path.write_text(SCRIPT)
    with running_sim(SimConfig(model="m", policy=f"script:{path}")) as sim:
        yield openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)


def ask(client: openai.OpenAI, key: str, **kwargs):
    messages = [{"role": "system", "content": key}, {"role": "user", "content": "go"}]
    return client.chat.completions.create(
        model="m", messages=messages, tools=[EDIT, READ], **kwargs
    )


def test_the_script_answers_unforced_with_text_and_forced_with_its_forced_call(client):
    auto = ask(client, "forced-task").choices[0]
    assert auto.message.tool_calls is None and auto.finish_reason == "stop"
    assert auto.message.content.startswith("I would change app.py")

    required = ask(client, "forced-task", tool_choice="required").choices[0]
    assert required.finish_reason == "tool_calls" and required.message.content == ""
    (call,) = required.message.tool_calls
    assert call.function.name == "edit_file"
    # re-serialized as vLLM's parsers do: json.dumps(..., ensure_ascii=False)
    assert call.function.arguments == '{"path": "app.py", "new": "print(total)  # the sum, é"}'

    named = ask(
        client, "forced-task", tool_choice={"type": "function", "function": {"name": "edit_file"}}
    ).choices[0]
    assert named.finish_reason == "stop" and named.message.tool_calls[0].function.name == (
        "edit_file"
    )


def test_a_named_tool_the_script_does_not_call_gets_its_required_properties(client):
    named = ask(
        client, "forced-task", tool_choice={"type": "function", "function": {"name": "read_file"}}
    ).choices[0]
    (call,) = named.message.tool_calls
    assert call.function.name == "read_file" and json.loads(call.function.arguments) == {"path": ""}


def test_forced_arguments_are_json_even_when_the_script_wrote_them_broken(client):
    """Constrained decoding cannot write broken JSON: the schema's required properties go out."""
    auto = ask(client, "broken-task").choices[0]
    assert auto.message.tool_calls is None and "<tool_call>" in auto.message.content
    forced = ask(client, "broken-task", tool_choice="required").choices[0]
    assert json.loads(forced.message.tool_calls[0].function.arguments) == {"path": ""}


def test_a_forced_call_cut_at_max_tokens_streams_its_piece_and_says_length(client):
    full = ask(client, "forced-task", tool_choice="required")
    limit = full.usage.completion_tokens - 2
    stream = ask(
        client,
        "forced-task",
        tool_choice="required",
        max_tokens=limit,
        stream=True,
        stream_options={"include_usage": True},
    )
    arguments, finish, usage = "", None, None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                arguments += delta.function.arguments or ""
    assert finish == "length" and usage.completion_tokens == limit
    assert arguments.startswith('{"path": "app.py"')
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)
    whole = ask(client, "forced-task", tool_choice="required", max_tokens=limit).choices[0]
    assert whole.finish_reason == "length" and whole.message.tool_calls is None
    assert whole.message.content.startswith('<tool_call>\n{"name": "edit_file", "arguments": {')


def test_a_json_format_holds_the_scripted_text_to_the_schema(client):
    schema = EDIT["function"]["parameters"]
    answer = client.chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": "forced-task"}, {"role": "user", "content": "go"}],
        response_format={"type": "json_schema", "json_schema": {"name": "e", "schema": schema}},
    ).choices[0]
    assert json.loads(answer.message.content) == {"path": "", "new": ""}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "go"}],
            extra_body={"structured_outputs": {"regex": "a+", "json": schema}},
        )
    assert "only use one kind of constraints" in refused.value.body["message"]
