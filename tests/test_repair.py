"""Deterministic repair of tool calls: what local models really send, and what we make of it."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pilot.tactics.arguments import parse_gemma4_arguments, repair_arguments
from pilot.tactics.dialects import extract_text_tool_calls

D = '<|"|>'

# (raw arguments, expected object, repairs that must be named)
REPAIRED = [
    pytest.param('{"path": "a.py"}', {"path": "a.py"}, [], id="valid-json-untouched"),
    pytest.param("", {}, ["empty arguments taken as {}"], id="empty-string"),
    pytest.param(
        '{"path": "src/app.py", "limit": 50,}',
        {"path": "src/app.py", "limit": 50},
        ["trailing commas removed"],
        id="trailing-comma-object",
    ),
    pytest.param(
        '{"paths": ["a.py", "b.py",],}',
        {"paths": ["a.py", "b.py"]},
        ["trailing commas removed"],
        id="trailing-comma-nested",
    ),
    pytest.param(
        '```json\n{"command": "pytest -q"}\n```',
        {"command": "pytest -q"},
        ["code fence removed"],
        id="json-fence",
    ),
    pytest.param(
        '```\n{"command": "ls"}\n```', {"command": "ls"}, ["code fence removed"], id="bare-fence"
    ),
    pytest.param(
        "{'path': 'README.md', 'recursive': True, 'glob': None}",
        {"path": "README.md", "recursive": True, "glob": None},
        [
            "single quotes replaced by double quotes",
            "Python literals (True/False/None) converted to JSON",
        ],
        id="python-dict-repr",
    ),
    pytest.param(
        "{'message': 'say \"hi\"', 'n': 1}",
        {"message": 'say "hi"', "n": 1},
        ["single quotes replaced by double quotes"],
        id="single-quoted-with-inner-double-quotes",
    ),
    pytest.param(
        "{'msg': \"it's fine\", 'x': False,}",
        {"msg": "it's fine", "x": False},
        ["trailing commas removed", "single quotes replaced by double quotes"],
        id="apostrophe-inside-double-quotes-kept",
    ),
    pytest.param(
        '{"text": "True or False", "flag": True}',
        {"text": "True or False", "flag": True},
        ["Python literals (True/False/None) converted to JSON"],
        id="literals-inside-strings-untouched",
    ),
    pytest.param(
        '{"path": "a.py", "content": "x = 1\\n"',
        {"path": "a.py", "content": "x = 1\n"},
        ["unbalanced brackets or braces closed"],
        id="hermes-dropped-closing-brace-vllm-22885",
    ),
    pytest.param(
        '{"edits": [{"old": "a", "new": "b"}',
        {"edits": [{"old": "a", "new": "b"}]},
        ["unbalanced brackets or braces closed"],
        id="unclosed-array-and-object",
    ),
    pytest.param(
        '{"a": [1, 2}',
        {"a": [1, 2]},
        ["unbalanced brackets or braces closed"],
        id="mismatched-closer",
    ),
    pytest.param(
        '{"a": 1}}', {"a": 1}, ["unbalanced brackets or braces closed"], id="extra-closer"
    ),
    pytest.param(
        json.dumps(json.dumps({"path": "a.py", "n": 2})),
        {"path": "a.py", "n": 2},
        ["arguments were double-encoded as a JSON string"],
        id="double-encoded",
    ),
    pytest.param(
        json.dumps('{"path": "a.py",}'),
        {"path": "a.py"},
        ["arguments were double-encoded as a JSON string", "trailing commas removed"],
        id="double-encoded-and-broken",
    ),
    pytest.param(
        f'{{"path": {D}src/main.py{D}, "line": 3}}',
        {"path": "src/main.py", "line": 3},
        ['Gemma <|"|> string delimiters replaced by quotes'],
        id="gemma-delimiters-as-quotes",
    ),
    pytest.param(
        f'{{"path": "{D}notes.txt{D}"}}',
        {"path": "notes.txt"},
        ['Gemma <|"|> string delimiters replaced by quotes'],
        id="gemma-delimiters-inside-json-quotes",
    ),
    pytest.param(
        json.dumps({"command": f"{D}ls -la{D}"}),
        {"command": "ls -la"},
        ['Gemma <|"|> string delimiters removed from values'],
        id="gemma-delimiters-leaked-into-value-vllm-39468",
    ),
    pytest.param(
        f'{{content:{D}print("hi")\nprint(1){D},line:4}}',
        {"content": 'print("hi")\nprint(1)', "line": 4},
        ['Gemma <|"|> string delimiters replaced by quotes', "unquoted keys quoted"],
        id="gemma-native-args-in-arguments",
    ),
    pytest.param({"path": "x"}, {"path": "x"}, ["arguments given as an object"], id="dict"),
]


@pytest.mark.parametrize(("raw", "expected", "repairs"), REPAIRED)
def test_repair_arguments_repairs_real_broken_outputs(raw, expected, repairs):
    result = repair_arguments(raw)
    assert result.error is None
    assert result.arguments == expected
    for name in repairs:
        assert name in result.repairs
    if not repairs:
        assert result.repairs == []


REPORTED = [
    # A string cut off mid-way is never closed: the call would run with half its value.
    pytest.param('{"command": "echo hello', "Unterminated string", id="unterminated-string"),
    pytest.param("[1, 2, 3]", "got an array", id="array"),
    pytest.param('"just a string"', "got a string", id="string"),
    pytest.param("42", "got a number", id="number"),
    pytest.param("null", "got null", id="null"),
    pytest.param("I will read the file now.", "not valid JSON", id="prose"),
    pytest.param('{"a":', "not valid JSON", id="truncated-after-colon"),
    pytest.param('{"a" 1}', "not valid JSON", id="missing-colon"),
]


@pytest.mark.parametrize(("raw", "message"), REPORTED)
def test_repair_arguments_reports_what_cannot_be_repaired(raw, message):
    result = repair_arguments(raw)
    assert result.arguments is None
    assert result.error is not None and message in result.error


def test_repair_error_quotes_the_text_so_the_model_can_see_it():
    result = repair_arguments("read the file please")
    assert "read the file please" in (result.error or "")


def test_dict_arguments_are_copied_not_aliased():
    given_args = {"a": 1}
    result = repair_arguments(given_args)
    assert result.arguments == given_args and result.arguments is not given_args


# -- properties --------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**9), max_value=10**9)
    | st.text(alphabet=string.ascii_letters + string.digits + " _-./:'\"\\\n{}[],", max_size=20)
)
keys = st.text(string.ascii_letters + "_", min_size=1, max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(keys, json_values, max_size=5)


def _with_trailing_commas(text: str) -> str:
    """Insert a comma before every closer that ends a non-empty container, outside strings."""
    out: list[str] = []
    in_str = False
    escaped = False
    for c in text:
        if in_str:
            out.append(c)
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_str = False
            continue
        if c == '"':
            in_str = True
        elif c in "}]" and out and out[-1] not in "{[":
            out.append(",")
        out.append(c)
    return "".join(out)


def _python_repr(value: object) -> str:
    """Python's own repr: single quotes, True/False/None (what small models imitate)."""
    return repr(value)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(obj=json_objects, style=st.sampled_from(["commas", "fence", "python", "double", "all"]))
def test_broken_renderings_of_any_object_repair_back_to_it(obj, style):
    text = json.dumps(obj)
    if style == "commas":
        text = _with_trailing_commas(text)
    elif style == "fence":
        text = f"```json\n{text}\n```"
    elif style == "python":
        text = _python_repr(obj)
    elif style == "double":
        text = json.dumps(text)
    else:
        text = "```json\n" + _with_trailing_commas(text) + "\n```"
    result = repair_arguments(text)
    assert result.error is None, (text, result)
    assert result.arguments == obj


@settings(max_examples=300)
@given(st.text())
def test_repair_arguments_never_raises_on_arbitrary_text(text):
    result = repair_arguments(text)
    assert (result.arguments is None) == (result.error is not None)
    if result.arguments is not None:
        assert isinstance(result.arguments, dict)


@settings(max_examples=300)
@given(st.text(alphabet="{}[]\"',:\\ aTFN<|>` \n", max_size=40))
def test_repair_arguments_never_raises_on_bracket_soup(text):
    result = repair_arguments(text)
    assert (result.arguments is None) == (result.error is not None)


@settings(max_examples=200)
@given(st.text(), st.lists(st.sampled_from(["read_file", "run"]), max_size=2))
def test_extract_text_tool_calls_never_raises(text, known):
    result = extract_text_tool_calls(text, known)
    assert all(name in known for name, _ in result.calls)


# -- tool calls written as text ----------------------------------------------------------------

TOOLS = {"read_file", "write_file", "run", "get-weather"}


def test_bare_json_call_in_content():
    content = 'I will read it.\n{"name": "read_file", "arguments": {"path": "README.md"}}'
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == [("read_file", {"path": "README.md"})]
    assert result.remaining_content == "I will read it."
    assert result.repairs


def test_bare_json_with_parameters_key_and_string_arguments():
    content = '{"name": "run", "parameters": "{\\"command\\": \\"ls\\"}"}'
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == [("run", {"command": "ls"})]
    assert result.remaining_content == ""


def test_list_of_calls():
    content = json.dumps(
        [
            {"name": "read_file", "arguments": {"path": "a"}},
            {"name": "read_file", "arguments": {"path": "b"}},
        ]
    )
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == [("read_file", {"path": "a"}), ("read_file", {"path": "b"})]


def test_hermes_tool_call_tags_qwen():
    content = (
        "Let me check.\n<tool_call>\n"
        '{"name": "read_file", "arguments": {"path": "setup.py"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "run", "arguments": {"command": "pytest"}}\n</tool_call>'
    )
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == [("read_file", {"path": "setup.py"}), ("run", {"command": "pytest"})]
    assert result.remaining_content == "Let me check."


def test_hermes_tag_with_missing_close_and_missing_brace():
    content = '<tool_call>\n{"name": "run", "arguments": {"command": "make"}'
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == [("run", {"command": "make"})]
    assert any("unbalanced" in r for r in result.repairs)


def test_qwen3_coder_xml_inside_tool_call():
    content = (
        "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/x.py\n</parameter>\n"
        "<parameter=content>\nprint('hi')\n</parameter>\n</function>\n</tool_call>"
    )
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == [("write_file", {"path": "src/x.py", "content": "print('hi')"})]


def test_gemma4_native_call():
    content = (
        f"Reading now.<|tool_call>call:read_file{{path:{D}src/a.py{D},limit:40,"
        f"exact:true}}<tool_call|>"
    )
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == [("read_file", {"path": "src/a.py", "limit": 40, "exact": True})]
    assert result.remaining_content == "Reading now."


def test_gemma4_two_calls_nested_values_and_braces_in_strings():
    content = (
        f'<|tool_call>call:write_file{{path:{D}a.json{D},content:{D}{{"k": [1]}}{D}}}'
        f"<tool_call|><|tool_call>call:get-weather{{where:{{city:{D}Paris{D}}},"
        f"days:[1,2],units:{D}c{D}}}<tool_call|>"
    )
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == [
        ("write_file", {"path": "a.json", "content": '{"k": [1]}'}),
        ("get-weather", {"where": {"city": "Paris"}, "days": [1, 2], "units": "c"}),
    ]


def test_gemma4_malformed_call_without_keyword_vllm_53431():
    content = f"<|tool_call>:run{{command:{D}ls{D}}}<tool_call|>"
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == [("run", {"command": "ls"})]
    assert any("missing 'call'" in r for r in result.repairs)


def test_gemma4_quoted_keys_and_null():
    assert parse_gemma4_arguments(f"{D}path{D}:{D}x{D},n:null,f:1.5") == {
        "path": "x",
        "n": None,
        "f": 1.5,
    }


def test_fenced_json_call():
    content = (
        'Here is the call:\n```json\n{"name": "run", "arguments": {"command": "ls",}}\n```\nDone.'
    )
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == [("run", {"command": "ls"})]
    assert result.remaining_content == "Here is the call:\n\nDone."
    assert any("trailing commas" in r for r in result.repairs)


def test_openai_shaped_call_in_text():
    content = json.dumps(
        {"type": "function", "function": {"name": "run", "arguments": '{"command": "pwd"}'}}
    )
    assert extract_text_tool_calls(content, TOOLS).calls == [("run", {"command": "pwd"})]


def test_unknown_tool_names_stay_in_content():
    content = '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == []
    assert result.remaining_content == content


def test_json_that_is_not_a_call_is_left_alone():
    content = 'The config is {"name": "read_file", "version": 2} as you can see.'
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == []
    assert result.remaining_content == content


def test_plain_prose_is_untouched():
    content = "All done. The tests pass."
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == [] and result.remaining_content == content and result.repairs == []


def test_call_with_non_object_arguments_is_not_taken():
    content = '{"name": "run", "arguments": [1, 2]}'
    result = extract_text_tool_calls(content, TOOLS)
    assert result.calls == [] and result.remaining_content == content
