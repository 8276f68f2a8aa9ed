"""A history of calls recovered from text goes back to the model as text, in the format it
should keep writing; native tool calls go back untouched."""

from __future__ import annotations

import json

from pilot.agent.state import assistant_message, tool_message
from pilot.tactics.text_turns import as_text_turns, has_text_calls, text_call_id


def test_text_calls_are_sent_back_as_the_text_the_model_should_write() -> None:
    code = "def add(a, b):\n    return a + b"
    block, call = text_call_id(1, 0), text_call_id(2, 0)
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "fix it"},
        assistant_message("", [(block, "replace_definition", json.dumps({"code": code}))]),
        tool_message(block, "Replaced function add in calc.py."),
        assistant_message("Now the tests.", [(call, "run", json.dumps({"command": "pytest"}))]),
        tool_message(call, "1 passed"),
    ]
    assert has_text_calls(messages)
    sent = as_text_turns(messages)
    assert sent[:2] == messages[:2]
    assert sent[2] == {"role": "assistant", "content": f"```python\n{code}\n```"}
    assert sent[3] == {
        "role": "user",
        "content": "Result of replace_definition:\nReplaced function add in calc.py.",
    }
    assert sent[4]["content"] == (
        'Now the tests.\n\n```json\n{"name": "run", "arguments": {"command": "pytest"}}\n```'
    )
    assert sent[5] == {"role": "user", "content": "Result of run:\n1 passed"}
    assert messages[2]["tool_calls"], "the state's messages are left as they are"


def test_native_calls_are_left_alone() -> None:
    messages = [
        {"role": "user", "content": "go"},
        assistant_message(None, [("chatcmpl-tool-1", "run", '{"command": "ls"}')]),
        tool_message("chatcmpl-tool-1", "a.py"),
    ]
    assert not has_text_calls(messages)
    assert as_text_turns(messages) == messages
