"""The call shapes a real small model wrote (Qwen2.5-Coder-0.5B under llama.cpp), recovered or
answered precisely. Each text is what the model really sent in issue 25's runs."""

from __future__ import annotations

import pytest

from pilot.tactics.dialects import extract_text_tool_calls
from pilot.tactics.fitting import call_shape, fit_arguments, resolve_tool_name
from tools.registry import default_registry

REGISTRY = default_registry()
PHASE = ["read_file", "list_dir", "find_files", "grep", "git_status", "finish"]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in REGISTRY.openai_tools(PHASE)}


def schemas_for(*names: str) -> dict:
    """The parameter schemas of ``names``, as the pilot reads calls against them."""
    return {
        t["function"]["name"]: t["function"]["parameters"]
        for t in REGISTRY.openai_tools(list(names))
    }


def test_flat_arguments_beside_the_name_in_a_fence_are_recovered() -> None:
    content = '```json\n{"name": "finish", "summary": "The survey is done: 3 modules."}\n```'
    result = extract_text_tool_calls(content, SCHEMAS)
    assert result.calls == [("finish", {"summary": "The survey is done: 3 modules."})]
    assert "finish: arguments given at the top level, beside the name" in result.repairs


def test_flat_arguments_need_the_schema() -> None:
    content = '```json\n{"name": "finish", "summary": "done"}\n```'
    assert extract_text_tool_calls(content, set(PHASE)).calls == []


def test_schema_keywords_copied_into_arguments_are_dropped() -> None:
    content = (
        'list_dir {"path": "toolz", "depth": 2, "required": [], "additionalProperties": false}'
    )
    result = extract_text_tool_calls(content, SCHEMAS)
    assert result.calls == [("list_dir", {"path": "toolz", "depth": 2})]
    assert any("JSON-Schema keywords dropped" in r and "required" in r for r in result.repairs)


def test_phase_name_used_as_a_tool_name_is_reported_not_run() -> None:
    content = '```json\n{"name": "survey", "arguments": {"path": "."}}\n```'
    result = extract_text_tool_calls(content, SCHEMAS)
    assert result.calls == []
    assert result.unknown_tools == ["survey"]
    title = '{"name": "Remove Duplicates and Tangled Logic", "arguments": {}}'
    assert extract_text_tool_calls(title, SCHEMAS).unknown_tools == [
        "Remove Duplicates and Tangled Logic"
    ]


def test_several_calls_in_one_message() -> None:
    content = (
        'First:\n```json\n{"name": "list_dir", "arguments": {"path": "."}}\n```\n'
        'then\n```json\n{"name": "read_file", "arguments": {"path": "setup.py"}}\n```'
    )
    result = extract_text_tool_calls(content, SCHEMAS)
    assert [name for name, _ in result.calls] == ["list_dir", "read_file"]


def test_close_argument_name_is_renamed_and_recorded() -> None:
    fit = fit_arguments("read_file", {"file_path": "a.py"}, SCHEMAS["read_file"])
    assert fit.arguments == {"path": "a.py"}
    assert fit.repairs == ["read_file: argument 'file_path' taken as 'path'"]


def test_unknown_argument_gets_the_exact_shape() -> None:
    fit = fit_arguments("read_file", {"path": "a.py", "colour": "red"}, SCHEMAS["read_file"])
    assert fit.arguments is None and fit.error is not None
    assert "'colour'" in fit.error
    assert '{"name": "read_file", "arguments": {"path": "a file path from the repository"}' in (
        fit.error
    )


def test_missing_required_argument_gets_the_exact_shape() -> None:
    fit = fit_arguments("finish", {}, SCHEMAS["finish"])
    assert fit.error is not None and "'summary'" in fit.error
    assert call_shape("finish", SCHEMAS["finish"]).startswith(
        '{"name": "finish", "arguments": {"summary": "what was done, naming the files'
    )


@pytest.mark.parametrize(
    ("written", "taken"),
    [("Read_File", "read_file"), ("readFile", "read_file"), ("list-dir", "list_dir")],
)
def test_tool_name_equal_but_for_case_and_separators(written: str, taken: str) -> None:
    assert resolve_tool_name(written, PHASE)[0] == taken


def test_close_tool_name_taken_only_when_unambiguous() -> None:
    assert resolve_tool_name("read_fiel", PHASE)[0] == "read_file"
    assert resolve_tool_name("survey", PHASE) == (None, None)
    # Two tools one edit away: refused, never guessed.
    assert resolve_tool_name("edit_fil", ["edit_file", "edit_fill"]) == (None, None)


def test_the_short_explicit_shape_still_works() -> None:
    content = '```json\n{"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}\n```'
    schemas = {
        t["function"]["name"]: t["function"]["parameters"]
        for t in REGISTRY.openai_tools(["write_file"])
    }
    assert extract_text_tool_calls(content, schemas).calls == [
        ("write_file", {"path": "a.txt", "content": "x"})
    ]


def test_prose_word_before_a_brace_is_not_a_call() -> None:
    content = 'The config {"path": "x"} is loaded by grep_config {"a": 1}.'
    assert extract_text_tool_calls(content, SCHEMAS).calls == []


def test_separators_between_calls_are_not_kept_as_text() -> None:
    content = (
        '{"name": "list_dir", "arguments": {"path": "."}}, '
        '{"name": "read_file", "arguments": {"path": "setup.py"}}, '
        '{"name": "finish", "arguments": {"summary": "done"}}'
    )
    result = extract_text_tool_calls(content, SCHEMAS)
    assert [name for name, _ in result.calls] == ["list_dir", "read_file", "finish"]
    assert result.remaining_content == ""


EDIT_PHASE = ["read_file", "edit_file", "write_file", "run", "finish"]
EDIT_SCHEMAS = {
    t["function"]["name"]: t["function"]["parameters"] for t in REGISTRY.openai_tools(EDIT_PHASE)
}


def test_a_file_named_as_the_tool_with_one_tools_arguments_is_that_tool() -> None:
    content = (
        '```json\n{\n  "name": "inflection.__init__.py",\n  "arguments": {\n'
        '    "path": "inflection/__init__.py",\n    "old": "-13",\n    "new": "13",\n'
        '    "replace_all": false\n  }\n}\n```'
    )
    result = extract_text_tool_calls(content, EDIT_SCHEMAS)
    assert result.calls == [
        (
            "edit_file",
            {"path": "inflection/__init__.py", "old": "-13", "new": "13", "replace_all": False},
        )
    ]
    assert result.unknown_tools == []
    assert any("its arguments fit 'edit_file' alone" in r for r in result.repairs)


def test_arguments_that_fit_two_tools_or_none_are_not_guessed() -> None:
    both = '{"name": "look", "arguments": {"path": "."}}'  # read_file and list_dir take it
    assert extract_text_tool_calls(both, SCHEMAS).calls == []
    assert extract_text_tool_calls(both, SCHEMAS).unknown_tools == ["look"]
    stray = '{"name": "fix", "arguments": {"path": "a.py", "colour": "red"}}'
    assert extract_text_tool_calls(stray, EDIT_SCHEMAS).calls == []


def test_code_written_as_text_is_told_to_use_edit_file_on_the_prompts_file() -> None:
    from pilot.tactics.feedback import example_path, no_call_feedback

    prompt = "The tests fail: `pytest -q tests/test_a.py`. Fix the bug in pkg/mod.py."
    path = example_path(prompt)
    assert path == "pkg/mod.py", "the file outside the `command` is the example"
    content = "Here is the fix:\n```python\ndef f():\n    return 1\n```"
    found = extract_text_tool_calls(content, EDIT_SCHEMAS)
    text = no_call_feedback(found, EDIT_SCHEMAS, content=content, path=path)
    assert "code in an answer changes no file" in text
    assert '{"name": "edit_file", "arguments": {"path": "pkg/mod.py", "old": "the exact' in text
    assert '"..."' not in text and "<" not in text, "no placeholder for the model to copy"


def test_an_example_call_holds_a_real_line_of_the_code_the_prompt_shows() -> None:
    from pilot.tactics.feedback import example_values, no_call_feedback

    prompt = (
        "Fix it.\n\nThe code of add (calc/ops.py, line 3):\n```python\ndef add(a, b):\n"
        "    return a - b\n```"
    )
    values = example_values(prompt, ["README.md"])
    assert values == {"path": "calc/ops.py", "old": "    return a - b"}
    found = extract_text_tool_calls("I think the bug is in add.", EDIT_SCHEMAS)
    text = no_call_feedback(found, EDIT_SCHEMAS, content="I think", values=values)
    assert '"path": "calc/ops.py"' in text and '"..."' not in text
    shape = call_shape("edit_file", EDIT_SCHEMAS["edit_file"], values=values)
    assert '"path": "calc/ops.py", "old": "    return a - b", "new": "the lines' in shape
    assert example_values("Survey the package.", ["pkg/core.py"]) == {"path": "pkg/core.py"}


DEFINITION_SCHEMAS = {
    t["function"]["name"]: t["function"]["parameters"]
    for t in REGISTRY.openai_tools(["read_file", "replace_definition", "edit_file", "finish"])
}


def test_a_python_block_with_one_definition_is_a_replace_definition_call() -> None:
    content = (
        "The bug is the `= 1`.\n```python\nfrom collections import defaultdict\n\n"
        "def frequencies(seq):\n    d = defaultdict(int)\n    for item in seq:\n"
        "        d[item] += 1\n    return dict(d)\n\nprint(frequencies('aab'))\n```"
    )
    result = extract_text_tool_calls(content, DEFINITION_SCHEMAS)
    [(name, arguments)] = result.calls
    assert name == "replace_definition"
    assert arguments["code"].startswith("from collections import defaultdict\n\ndef frequencies")
    assert "print(" not in arguments["code"]
    assert result.repairs == [
        "the fenced Python block defining frequencies taken as a replace_definition call "
        "(1 other top-level statement(s) of the block left out)"
    ]
    assert result.remaining_content == "The bug is the `= 1`."


@pytest.mark.parametrize(
    "content",
    [
        "```python\ndef a():\n    pass\n\ndef b():\n    pass\n```",  # two definitions
        "```python\ndef a():\n    pass\n```\n```python\ndef b():\n    pass\n```",  # two blocks
        "```python\ndef a(:\n```",  # not Python
        "```bash\ndef a():\n    pass\n```",  # not a Python block
    ],
)
def test_what_is_ambiguous_is_no_call(content: str) -> None:
    assert extract_text_tool_calls(content, DEFINITION_SCHEMAS).calls == []


def test_a_python_block_is_no_call_without_the_tool() -> None:
    content = "```python\ndef frequencies(seq):\n    return {}\n```"
    assert extract_text_tool_calls(content, SCHEMAS).calls == []


def test_a_new_definition_goes_to_the_file_the_prompt_names() -> None:
    from pilot.tactics.dialects import addition_target

    prompt = (
        "Add a function `count_if(pred, seq)` to toolz/itertoolz.py and a test "
        "`test_count_if` to toolz/tests/test_itertoolz.py."
    )
    function = "def count_if(pred, seq):\n    return sum(1 for x in seq if pred(x))"
    test = "def test_count_if():\n    assert count_if(bool, [0, 1]) == 1"
    assert addition_target(function, prompt) == "toolz/itertoolz.py"
    assert addition_target(test, prompt) == "toolz/tests/test_itertoolz.py"
    assert addition_target(function, "Add it to a.py or b.py.") is None, "two: no guess"
    assert addition_target("x = 1", prompt) is None


def test_a_method_written_with_its_class_indentation_is_a_call() -> None:
    """A model rewriting a method whole keeps the class's four spaces: dedented, it parses."""
    content = (
        "Fixed:\n```python\n    def popitem(self):\n        if not self.items:\n"
        "            raise KeyError('empty')\n        return self.items.pop()\n```"
    )
    [(name, arguments)] = extract_text_tool_calls(content, DEFINITION_SCHEMAS).calls
    assert name == "replace_definition"
    assert arguments["code"].startswith("def popitem(self):\n    if not self.items:")


def test_code_as_a_python_triple_quoted_string_in_json_is_taken_with_its_docstring() -> None:
    """Qwen2.5-Coder-1.5B (llama.cpp, the task suite, 2026-12-07) and the 0.5B on the GPU
    wrote a call's code as a Python triple-quoted string inside the JSON, docstring included:
    the value ends at the triple quote before the next key, not at the docstring's."""
    content = (
        '```json\n{\n    "name": "replace_definition",\n    "arguments": {\n'
        '        "code": """\n            def ordinal(number: int) -> str:\n'
        '                """\n                Return the suffix.\n\n'
        "                    >>> ordinal(1)\n                    'st'\n"
        '                """\n                number = abs(int(number))\n'
        "                if number % 100 in (11, 12, 13):\n"
        '                    return "th"\n                return {1: "st"}.get(number % 10, "th")\n'
        '        """,\n        "path": "inflection/__init__.py",\n'
        '        "line": 204\n    }\n}\n```'
    )
    schemas = schemas_for("replace_definition", "finish")
    result = extract_text_tool_calls(content, schemas)
    [(name, arguments)] = result.calls
    assert name == "replace_definition" and arguments["path"] == "inflection/__init__.py"
    code = arguments["code"]
    assert code.startswith('def ordinal(number: int) -> str:\n    """\n    Return the suffix.')
    assert code.endswith('return {1: "st"}.get(number % 10, "th")')
    compile(code, "<code>", "exec")
    # a JSON string holding an escaped docstring is left as it is
    plain = '{"name": "finish", "arguments": {"summary": "kept \\"\\"\\"as is\\"\\"\\""}}'
    assert extract_text_tool_calls(plain, schemas).calls == [
        ("finish", {"summary": 'kept """as is"""'})
    ]


@pytest.mark.parametrize("finish_first", [False, True])
def test_a_fix_shown_as_a_block_beside_finish_is_run_before_the_finish(finish_first: bool) -> None:
    """The 1.5B (llama.cpp, 2026-12-07) answered with its rewritten function as a Python block
    and a finish call: the block is the edit, run first, so the check judges it."""
    block = '```python\ndef ordinal(number):\n    return "th"\n```'
    finish = '```json\n{"name": "finish", "arguments": {"summary": "Fixed ordinal."}}\n```'
    content = f"{finish}\n\n{block}" if finish_first else f"Here is the fix:\n{block}\n{finish}"
    schemas = schemas_for("replace_definition", "finish")
    result = extract_text_tool_calls(content, schemas)
    assert [name for name, _ in result.calls] == ["replace_definition", "finish"]
    assert result.calls[0][1]["code"].startswith("def ordinal(number):")
    # without the tool the block stays text
    alone = {"finish": schemas["finish"]}
    assert [name for name, _ in extract_text_tool_calls(content, alone).calls] == ["finish"]


def test_a_fix_block_followed_by_a_test_block_is_the_fix() -> None:
    """The 1.5B (llama.cpp, 2026-12-07) showed its function, then "you can run the following
    test" in a second block: the test block is no second edit."""
    content = (
        '```python\ndef dasherize(word: str) -> str:\n    return word.replace("_", "-")\n```\n\n'
        "To verify it, run the following test:\n\n```python\nimport inflection\n\n"
        'def test_dasherize():\n    assert inflection.dasherize("a_b") == "a-b"\n\n'
        "test_dasherize()\n```"
    )
    schemas = schemas_for("replace_definition", "finish")
    [(name, arguments)] = extract_text_tool_calls(content, schemas).calls
    assert name == "replace_definition" and arguments["code"].startswith("def dasherize(")
    two_fixes = content.replace("def test_dasherize", "def other")
    assert extract_text_tool_calls(two_fixes.replace("test_dasherize()", ""), schemas).calls == []
