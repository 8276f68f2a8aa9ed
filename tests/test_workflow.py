"""Workflow files: the bundled workflow loads, and every mistake is reported at file:line:column.

Each error test writes the smallest workflow showing the mistake and asserts the exact
diagnostic a user would read, so a change in wording or position is a deliberate act.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from pilot.errors import MarathonError, WorkflowError, WorkflowErrors
from pilot.workflow import (
    DEFAULT_ENDPOINT,
    RunContext,
    Workflow,
    load_params_file,
    load_workflow,
    parse_param_assignments,
    parse_workflow_text,
    render_branch,
    render_check,
    render_phase_prompt,
    render_run,
    render_system,
    render_workspace_path,
)
from pilot.workflow.plan import build_plan

REPO_ROOT = Path(__file__).resolve().parents[1]
REFACTOR = REPO_ROOT / "workflows" / "refactor_repo.yaml"
TOOLS = [
    "read_file",
    "write_file",
    "edit_file",
    "replace_definition",
    "list_dir",
    "find_files",
    "grep",
    "run",
    "git_status",
    "git_diff",
    "git_commit",
    "finish",
]
F = "wf.yaml"

MINIMAL = """\
name: demo
params:
  repo: {type: path, required: true}
  steps: {type: integer, default: 5}
workspace:
  path: "{{ params.repo }}"
tools: [read_file, run, finish]
phases:
  - name: one
    prompt: Do {{ params.steps }} things in {{ run.workspace }}.
"""


def load(text: str, params: dict | None = None, **kw) -> object:
    """Parse ``text`` (dedented) as ``wf.yaml`` with repo set unless params are given."""
    return parse_workflow_text(
        textwrap.dedent(text), F, {"repo": "/tmp/r"} if params is None else params, **kw
    )


def error_of(text: str, params: dict | None = None, **kw) -> WorkflowError:
    with pytest.raises(WorkflowError) as info:
        load(text, params, **kw)
    return info.value


def messages(text: str, params: dict | None = None, **kw) -> list[str]:
    return [str(e) for e in error_of(text, params, **kw).errors]


# --------------------------------------------------------------------------- bundled workflow


def test_refactor_repo_loads_with_repo_param_and_real_tool_names(tmp_path: Path) -> None:
    loaded = load_workflow(REFACTOR, {"repo": str(tmp_path)}, tool_names=TOOLS)
    wf = loaded.workflow
    assert [p.name for p in wf.phases] == ["survey", "refactor", "review"]
    assert loaded.params == {
        "repo": str(tmp_path),
        "test_command": "python -m unittest discover -s tests",
        "goal": "Remove duplicated logic without changing behaviour",
    }
    assert wf.model.endpoint == "http://127.0.0.1:8000/v1"
    assert wf.model.name == "auto"
    assert wf.phase_tools(0) == [
        "read_file",
        "list_dir",
        "find_files",
        "grep",
        "git_status",
        "finish",
    ]
    assert wf.phases[1].check == "{{ params.test_command | raw }}"
    assert wf.phases[1].max_attempts == 3
    assert wf.tool_settings["run"].timeout == 300
    assert loaded.text == REFACTOR.read_text()
    run = RunContext(id="r1", workspace=str(tmp_path), branch="marathon/run-r1")
    assert render_check(loaded, 1, run) == "python -m unittest discover -s tests"
    assert render_check(loaded, 0, run) is None
    assert render_workspace_path(loaded, run) == tmp_path
    assert render_branch(loaded, run) == "marathon/run-r1"
    assert "Remove duplicated logic" in render_phase_prompt(loaded, 0, run)
    assert not render_phase_prompt(loaded, 0, run).startswith("Phase")
    assert str(tmp_path) in render_system(loaded, run)


def test_refactor_repo_prompts_stay_small_for_a_32k_context() -> None:
    loaded = load_workflow(REFACTOR, {"repo": "/tmp/r"})
    wf = loaded.workflow
    assert wf.model.max_tokens <= 4096
    assert all((p.limits.max_steps or 0) <= 60 for p in wf.phases)
    assert len(wf.system or "") + max(len(p.prompt) for p in wf.phases) < 2000


def test_path_params_are_expanded_and_made_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    loaded = load(MINIMAL, {"repo": "~/proj"})
    assert loaded.params["repo"] == str(tmp_path / "proj")
    monkeypatch.chdir(tmp_path)
    assert load(MINIMAL, {"repo": "sub/../proj"}).params["repo"] == str(tmp_path / "proj")


def test_params_are_typed_from_text() -> None:
    text = MINIMAL.replace(
        "  steps: {type: integer, default: 5}",
        "  steps: {type: integer, default: 5}\n"
        "  ratio: {type: number, default: 0.5}\n"
        "  fast: {type: boolean, default: false}\n"
        "  mode: {type: choice, choices: [quick, deep], default: quick}\n"
        "  files: {type: list, default: [a.py]}\n"
        "  note: {type: string}",
    )
    loaded = load(
        text,
        {"repo": "/r", "steps": "7", "ratio": "2", "fast": "yes", "mode": "deep", "files": "x,y"},
    )
    assert loaded.params == {
        "repo": "/r",
        "steps": 7,
        "ratio": 2.0,
        "fast": True,
        "mode": "deep",
        "files": ["x", "y"],
        "note": None,
    }


def test_yaml_1_1_booleans_stay_strings() -> None:
    text = MINIMAL.replace("tools:", "description: no\ntools:")
    assert load(text).workflow.description == "no"


def test_tools_may_be_a_mapping_of_settings() -> None:
    text = MINIMAL.replace(
        "tools: [read_file, run, finish]",
        "tools:\n  read_file:\n  run: {timeout: 5m, max_output_lines: 50}\n  finish: {}",
    )
    wf = load(text).workflow
    assert wf.tool_names == ["read_file", "run", "finish"]
    assert wf.tool_settings_dicts()["run"] == {"timeout": 300.0, "max_output_lines": 50}


def test_model_defaults_to_the_local_endpoint() -> None:
    assert load(MINIMAL).workflow.model.endpoint == DEFAULT_ENDPOINT


def test_durations_accept_units() -> None:
    text = MINIMAL + "limits: {max_wall_time: 1h30m, max_steps: 9}\n"
    assert load(text).workflow.limits.max_wall_time == 5400


def test_templates_see_phase_index_and_count() -> None:
    text = MINIMAL.replace("things in {{ run.workspace }}.", "{{ phase.index }}/{{ phase.count }}")
    loaded = load(text)
    assert render_phase_prompt(loaded, 0, RunContext(id="x")) == "Do 5 1/1"


# --------------------------------------------------------------------------- exact errors


def test_wrong_type_names_line_column_field_and_value() -> None:
    text = MINIMAL + "model:\n  max_tokens: ten\n"
    assert messages(text) == [
        "wf.yaml:12:15: model.max_tokens: expected an integer, got 'ten'",
    ]


def test_unknown_key_suggests_the_close_one() -> None:
    text = MINIMAL.replace("    prompt:", "    promt:")
    assert messages(text) == [
        'wf.yaml:10:5: phases[0].promt: unknown key "promt" (did you mean "prompt"?)',
    ]


def test_unknown_key_without_close_match_lists_allowed_keys() -> None:
    text = MINIMAL.replace("  path:", "  colour: red\n  path:")
    assert messages(text) == [
        'wf.yaml:6:3: workspace.colour: unknown key "colour"; allowed keys here: path, init, '
        "branch, in_place, carry_changes"
    ]


def test_missing_required_key_says_what_it_is_for() -> None:
    text = MINIMAL.replace("    prompt: Do {{ params.steps }} things in {{ run.workspace }}.\n", "")
    assert messages(text) == [
        'wf.yaml:9:5: phases[0].prompt: missing required key "prompt" '
        "(instructions to the model (Jinja: params, workflow, run, phase))",
    ]


def test_missing_required_param_says_how_to_pass_it() -> None:
    assert messages(MINIMAL, params={}) == [
        'wf.yaml:3:3: params.repo: missing required param "repo"; pass it with --param repo=PATH',
    ]


def test_bad_param_value_names_the_param_and_an_example() -> None:
    assert messages(MINIMAL, params={"repo": "/r", "steps": "ten"}) == [
        'wf.yaml:4:3: params.steps: bad value for param "steps": expected an integer '
        "(like 60), got 'ten'; pass it like --param steps=N",
    ]


def test_bad_choice_value_suggests_the_close_one() -> None:
    text = MINIMAL.replace(
        "  steps: {type: integer, default: 5}",
        "  mode: {type: choice, choices: [quick, deep], default: quick}",
    ).replace("{{ params.steps }}", "{{ params.mode }}")
    assert messages(text, params={"repo": "/r", "mode": "qiuck"}) == [
        'wf.yaml:4:3: params.mode: bad value for param "mode": expected one of quick, deep, '
        "got 'qiuck' (did you mean \"quick\"?); pass it like --param mode=quick|deep",
    ]


def test_unknown_param_suggests_the_close_one() -> None:
    assert messages(MINIMAL, params={"repo": "/r", "setps": "1"}) == [
        'wf.yaml:2:1: params: unknown param "setps" given with --param '
        '(did you mean "steps"?); this workflow takes: repo, steps',
    ]


def test_bad_param_default_is_a_schema_error() -> None:
    text = MINIMAL.replace("default: 5", "default: five")
    assert messages(text) == [
        "wf.yaml:4:10: params.steps: default: expected an integer (like 60), got 'five'",
    ]


def test_unknown_tool_lists_the_valid_names() -> None:
    text = MINIMAL.replace("[read_file, run, finish]", "[read_file, rnu, finish]")
    assert messages(text, tool_names=TOOLS) == [
        'wf.yaml:7:20: tools[1]: unknown tool "rnu" (did you mean "run"?); available tools: '
        "edit_file, find_files, finish, git_commit, git_diff, git_status, grep, list_dir, "
        "read_file, replace_definition, run, write_file",
    ]


def test_phase_tools_must_be_within_the_workflow_tools() -> None:
    text = MINIMAL + "    tools: [read_file, grep]\n"
    assert messages(text, tool_names=TOOLS) == [
        'wf.yaml:11:24: phases[0].tools[1]: tool "grep" is not in the workflow\'s `tools`; '
        "a phase may only use tools the workflow lists: read_file, run, finish",
    ]


def test_jinja_syntax_error_reports_the_file_line_inside_a_block() -> None:
    text = MINIMAL.replace(
        "    prompt: Do {{ params.steps }} things in {{ run.workspace }}.\n",
        "    prompt: |\n      First line.\n      Second {% if %} line.\n",
    )
    assert messages(text) == [
        "wf.yaml:12:7: phases[0].prompt: template syntax error: Expected an expression, "
        "got 'end of statement block'; Jinja uses {{ expression }} and {% tag %} ... "
        "{% endtag %}; write {{ '{{' }} for a literal '{{'",
    ]


def test_undefined_template_variable_is_caught_at_load_time_even_in_untaken_branch() -> None:
    text = MINIMAL.replace(
        "    prompt: Do {{ params.steps }} things in {{ run.workspace }}.\n",
        "    prompt: |\n      Fine.\n      {% if false %}{{ params.setps }}{% endif %}\n",
    )
    assert messages(text) == [
        'wf.yaml:12:7: phases[0].prompt: undefined variable "params.setps" '
        '(did you mean "params.steps"?); declare it under `params:` or fix the name; '
        "defined params: params.repo, params.steps",
    ]


def test_undefined_top_level_name_in_check() -> None:
    text = MINIMAL + '    check: "{{ parms.repo }}"\n'
    assert messages(text) == [
        'wf.yaml:11:13: phases[0].check: undefined variable "parms" (did you mean "params"?); '
        "this template can use: params, workflow, run, phase",
    ]


def test_render_error_is_located() -> None:
    text = MINIMAL + '    check: "{{ params.repo.nothing }}"\n'
    assert messages(text) == [
        "wf.yaml:11:13: phases[0].check: template refers to something undefined: "
        "'str object' has no attribute 'nothing'",
    ]


def test_invalid_branch_name_is_refused() -> None:
    text = MINIMAL.replace('  path: "{{ params.repo }}"', '  path: /w\n  branch: "my branch"')
    assert messages(text) == [
        "wf.yaml:7:12: workspace.branch: renders to 'my branch', which is not a valid git "
        "branch name (it contains ' '); use letters, digits, '-', '_', '.' and '/'",
    ]


def test_duplicate_yaml_keys_are_refused() -> None:
    text = MINIMAL.replace("name: demo\n", "name: demo\nname: other\n")
    assert messages(text) == [
        'wf.yaml:2:1: name: duplicate key "name" (first given on line 1); '
        "YAML keeps only one of them, so remove or rename the other",
    ]


def test_broken_yaml_reports_the_mark() -> None:
    error = error_of(MINIMAL.replace("  steps:", " steps:"))
    assert (error.file, error.line, error.column, error.field) == (F, 4, 2, None)
    assert error.message.startswith(
        "invalid YAML: bad indentation: keys of one mapping and items of one list must line up"
    )


def test_tabs_are_explained() -> None:
    assert messages(MINIMAL.replace("  path:", "\tpath:")) == [
        "wf.yaml:6:1: invalid YAML: a tab character; YAML does not allow tabs for "
        "indentation, indent with spaces",
    ]


def test_text_with_colon_gets_a_quoting_hint() -> None:
    error = error_of(MINIMAL.replace("name: demo", "description: Fix: things\nname: demo"))
    assert (error.line, error.column) == (1, 17)
    assert "quote it or use a block" in error.message


def test_unquoted_template_value_is_explained() -> None:
    text = MINIMAL + "    check: {{ params.repo }}\n"
    assert messages(text) == [
        "wf.yaml:11:13: phases[0].check: a value starting with '{{' must be quoted, "
        'or YAML reads it as a mapping: write check: "{{ ... }}"',
    ]


def test_duplicate_phase_names_are_refused() -> None:
    text = MINIMAL + "  - name: one\n    prompt: again\n"
    assert messages(text) == [
        "wf.yaml:11:11: phases[1].name: phase name 'one' is already used by phases[0]; "
        "phase names must be unique",
    ]


def test_empty_phases_are_refused() -> None:
    text = MINIMAL[: MINIMAL.index("phases:")] + "phases: []\n"
    assert messages(text) == [
        "wf.yaml:8:9: phases: a workflow needs at least one phase under `phases:`",
    ]


def test_empty_file_says_what_a_workflow_is() -> None:
    assert messages("") == [
        "wf.yaml:1:1: a workflow is a YAML mapping with at least `name`, `workspace`, `tools` "
        "and `phases`, got an empty file; start from workflows/refactor_repo.yaml",
    ]


def test_literal_choice_suggests_the_close_one() -> None:
    assert messages(MINIMAL + "sandbox: bwarp\n") == [
        "wf.yaml:11:10: sandbox: expected one of auto, bwrap, none, got 'bwarp' "
        '(did you mean "bwrap"?)',
    ]


def test_endpoint_and_profile_together_are_refused() -> None:
    text = MINIMAL + "model: {endpoint: 'http://h:1/v1', profile: p}\n"
    assert messages(text) == [
        "wf.yaml:11:8: model: give either `endpoint` (a running server) or `profile` "
        "(a brain profile to start), not both",
    ]


def test_several_errors_are_reported_together_in_file_order() -> None:
    text = (
        MINIMAL.replace("name: demo", "name: Demo Flow").replace("    prompt:", "    promt:")
        + "model:\n  max_tokens: ten\nsanbox: none\n"
    )
    error = error_of(text)
    assert isinstance(error, WorkflowErrors)
    assert [str(e) for e in error.errors] == [
        "wf.yaml:1:7: name: workflow name 'Demo Flow' must be a short slug: lowercase letters, "
        "digits, '-' or '_', starting with a letter or digit (like 'refactor-repo')",
        'wf.yaml:10:5: phases[0].promt: unknown key "promt" (did you mean "prompt"?)',
        "wf.yaml:12:15: model.max_tokens: expected an integer, got 'ten'",
        'wf.yaml:13:1: sanbox: unknown key "sanbox" (did you mean "sandbox"?)',
    ]
    assert str(error).splitlines()[0] == "4 problems in wf.yaml:"
    assert (error.line, error.field) == (1, "name")


def test_params_and_template_errors_are_reported_together() -> None:
    text = MINIMAL + '    check: "{{ params.nope }}"\n'
    error = error_of(text, params={})
    assert [e.field for e in error.errors] == ["params.repo", "phases[0].check"]


def test_workflow_error_is_a_marathon_error() -> None:
    assert issubclass(WorkflowErrors, WorkflowError)
    assert issubclass(WorkflowError, MarathonError)


def test_missing_file_is_a_workflow_error(tmp_path: Path) -> None:
    with pytest.raises(WorkflowError, match="no such file"):
        load_workflow(tmp_path / "nope.yaml")


# --------------------------------------------------------------------------- params helpers


def test_parse_param_assignments_splits_on_the_first_equals() -> None:
    assert parse_param_assignments(["repo=~/x", "cmd=a=b"]) == {"repo": "~/x", "cmd": "a=b"}


def test_parse_param_assignments_refuses_missing_value_and_repeats() -> None:
    with pytest.raises(WorkflowError) as info:
        parse_param_assignments(["repo", "a=1", "a=2"])
    assert [str(e) for e in info.value.errors] == [
        "params: --param 'repo' is not NAME=VALUE; write --param repo=VALUE",
        "params.a: --param \"a\" is given twice ('1' and '2'); give it once",
    ]


def test_load_params_file_reads_typed_values_and_refuses_duplicates(tmp_path: Path) -> None:
    good = tmp_path / "p.yaml"
    good.write_text("repo: /r\nsteps: 3\n")
    assert load_params_file(good) == {"repo": "/r", "steps": 3}
    assert load(MINIMAL, load_params_file(good)).params["steps"] == 3
    bad = tmp_path / "bad.yaml"
    bad.write_text("repo: /r\nrepo: /s\n")
    with pytest.raises(WorkflowError) as info:
        load_params_file(bad)
    assert str(info.value).startswith(f'{bad}:2:1: repo: duplicate key "repo"')


# --------------------------------------------------------------------------- schema


def test_json_schema_is_json_and_describes_phases() -> None:
    schema = json.loads(json.dumps(Workflow.json_schema()))
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert {"name", "workspace", "tools", "phases"} <= set(schema["required"])
    phase_ref = schema["properties"]["phases"]["items"]["$ref"]
    phase = schema["$defs"][phase_ref.rsplit("/", 1)[-1]]
    assert {"name", "prompt", "check", "max_attempts", "limits", "tools"} <= set(
        phase["properties"]
    )
    assert phase["additionalProperties"] is False
    for ref in _refs(schema):
        assert ref.rsplit("/", 1)[-1] in schema["$defs"], ref


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


# --------------------------------------------------------------------------- YAML features


def test_anchors_merge_keys_and_x_keys_work() -> None:
    text = (
        MINIMAL.replace(
            "tools: [read_file, run, finish]",
            "x-small: &small {max_steps: 5}\ntools: &all [read_file, run, finish]",
        )
        + "    tools: *all\n    limits: {<<: *small, max_wall_time: 10m}\n"
    )
    phase = load(text).workflow.phases[0]
    assert phase.tools == ["read_file", "run", "finish"]
    assert (phase.limits.max_steps, phase.limits.max_wall_time) == (5, 600)


def test_leading_zero_numbers_are_decimal_and_sexagesimal_is_text() -> None:
    text = MINIMAL + "limits: {max_steps: 0120}\n"
    assert load(text).workflow.limits.max_steps == 120
    assert messages(MINIMAL + "limits: {max_wall_time: 1:30}\n") == [
        "wf.yaml:11:25: limits.max_wall_time: expected a duration like 90, '90s', '30m', "
        "'8h' or '1h30m', got '1:30'",
    ]


def test_yaml_tags_are_refused() -> None:
    assert messages(MINIMAL + "system: !include prompt.txt\n") == [
        "wf.yaml:11:9: system: YAML tag !include is not supported here; workflow files are "
        "plain YAML without tags",
    ]


def test_recursive_alias_is_refused() -> None:
    assert messages("a: &x [*x]\n") == ["wf.yaml:1:4: an alias refers to itself"]


def test_newer_format_version_says_to_upgrade() -> None:
    assert messages("version: 2\n" + MINIMAL) == [
        "wf.yaml:1:10: version: this pilot reads workflow format version 1; a version 2 file "
        "needs a newer marathon (or set version: 1 if that was a typo)",
    ]


def test_programmatic_validation_still_runs_cross_checks() -> None:
    data = {
        "name": "x",
        "workspace": {"path": "/w"},
        "tools": ["read_file"],
        "phases": [
            {"name": "a", "prompt": "p", "tools": ["grep"]},
            {"name": "a", "prompt": "p"},
        ],
    }
    with pytest.raises(ValueError, match=r"phases\[0\]\.tools\[0\]: .*phases\[1\]\.name"):
        Workflow.model_validate(data)


def test_resolved_params_round_trip_for_resume(tmp_path: Path, monkeypatch) -> None:
    """A resume passes the stored text and resolved params back; nothing may drift."""
    loaded = load_workflow(REFACTOR, {"repo": "rel/repo"})
    monkeypatch.chdir(tmp_path)  # a resume may start elsewhere
    again = parse_workflow_text(loaded.text, "stored", loaded.params, base_dir=loaded.base_dir)
    assert again.params == loaded.params
    run = RunContext(id="r")
    assert render_workspace_path(again, run) == render_workspace_path(loaded, run)


def test_env_allowlist_takes_names_and_globs() -> None:
    assert load(MINIMAL + "env_allowlist: [HOME, PYTHON*]\n").workflow.env_allowlist == [
        "HOME",
        "PYTHON*",
    ]
    assert messages(MINIMAL + "env_allowlist: [FOO=1]\n") == [
        "wf.yaml:11:17: env_allowlist[0]: 'FOO=1' is not an environment variable name or glob "
        "(like HOME or PYTHON*)",
    ]


def test_param_names_must_be_identifiers() -> None:
    text = MINIMAL.replace("  steps:", "  max-steps:").replace("params.steps", "params.repo")
    assert messages(text) == [
        "wf.yaml:4:3: params.max-steps: param name 'max-steps' must be an identifier "
        "(letters, digits, '_'; not starting with a digit) so templates can say params.NAME",
    ]


def test_checking_without_params_skips_only_the_required_params() -> None:
    loaded = load(MINIMAL, params={}, require_params=False)
    assert loaded.params == {"repo": None, "steps": 5}
    text = MINIMAL.replace("    prompt:", "    promt:")
    assert [e.field for e in error_of(text, params={}, require_params=False).errors] == [
        "phases[0].promt"
    ]


def test_model_stream_interval_reaches_every_request_body() -> None:
    text = MINIMAL.replace(
        "tools: [read_file, run, finish]",
        "tools: [read_file, run, finish]\nmodel:\n  stream_interval: 8",
    )
    plan = build_plan(load(text), "r1", endpoint="http://127.0.0.1:9/v1")
    assert plan.model.stream_interval == 8
    assert plan.model.extra_body == {"stream_interval": 8}
    assert build_plan(load(MINIMAL), "r1", endpoint="http://127.0.0.1:9/v1").model.extra_body == {}
    assert "stream_interval" in " ".join(
        messages(text.replace("stream_interval: 8", "stream_interval: 0"))
    )


def test_a_huge_workflow_params_or_matrix_file_is_refused_before_it_is_read(
    tmp_path: Path,
) -> None:
    """A 60 MB workflow was accepted and stored with its run: the inputs are capped, with an
    error that names the file and says what to do."""
    from pilot.run.queue import load_matrix
    from pilot.workflow.load import load_params_file, load_workflow

    big = tmp_path / "big.yaml"
    big.write_text("name: w\n")
    os.truncate(big, 60 * 1024 * 1024)  # sparse: costs no disk
    for load in (load_workflow, load_params_file, load_matrix):
        with pytest.raises(WorkflowError) as info:
            load(big)
        assert "over 1024 KB" in str(info.value) and "big.yaml" in str(info.value), load


def test_a_matrix_alias_bomb_is_refused(tmp_path: Path) -> None:
    from pilot.run.queue import load_matrix

    lines = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        lines.append(f"{chr(ord('a') + i)}: &{chr(ord('a') + i)} [{', '.join(['*' + prev] * 10)}]")
    bomb = tmp_path / "matrix.yaml"
    bomb.write_text("- " + "\n  ".join(lines) + "\n")
    with pytest.raises(WorkflowError) as info:
        load_matrix(bomb)
    assert "too large" in str(info.value)


def test_a_run_renders_in_dependency_order_in_its_worktree():
    # The branch sees the worktree the run works in; the prompts see both; the source is
    # the rendered workspace.path (the checkout the worktree is made from).
    text = MINIMAL.replace(
        'workspace:\n  path: "{{ params.repo }}"\n',
        'workspace:\n  path: "{{ params.repo }}"\n  branch: "wt/{{ run.id }}"\n',
    ).replace(
        "things in {{ run.workspace }}.", "things in {{ run.workspace }} on {{ run.branch }}."
    )
    rendered = render_run(load(text), "r7", started_at="2026-01-01", workspace="/tmp/wt/r7")
    assert rendered.source == Path("/tmp/r")
    assert rendered.run == RunContext("r7", "2026-01-01", "/tmp/wt/r7", "wt/r7")
    assert [p.prompt for p in rendered.phases] == ["Do 5 things in /tmp/wt/r7 on wt/r7."]
    assert rendered.system == ""
    plan = build_plan(load(text), "r7", workspace="/tmp/wt/r7", endpoint="http://127.0.0.1:9/v1")
    assert (plan.workspace, plan.source, plan.branch) == ("/tmp/wt/r7", "/tmp/r", "wt/r7")
    assert plan.phases[0].prompt == rendered.phases[0].prompt


def test_a_text_without_template_syntax_renders_as_jinja_would_render_it() -> None:
    # Literal texts skip Jinja (a long prompt is mostly one); each renders to what Jinja
    # makes of it, and anything Jinja would change goes through Jinja.
    from pilot.workflow.templating import is_literal, make_environment

    env = make_environment()
    texts = [
        "Fix the bug.\n",
        "no newline at the end",
        "  leading spaces\n\n\ntrailing blank lines\n\n",
        "braces { alone } and }} closing and a lone %} and #}",
        'json {"a": {"b": 1}} and a dict {x: {y}}',
        "unicode: é ü 漢字 — and tabs\tin it\n",
        "",
    ]
    for text in texts:
        assert is_literal(text)
        assert env.from_string(text).render() == text
    for text in ("{{ params.x }}", "{% if x %}y{% endif %}", "a {# note #} b", "line\r\nend"):
        assert not is_literal(text)
    assert env.from_string("line\r\nend").render() != "line\r\nend"  # why \r goes to Jinja


def test_set_reaches_a_phase_by_its_index_and_names_the_valid_ones(tmp_path: Path) -> None:
    path = tmp_path / F
    path.write_text(MINIMAL)
    settings = ["phases.0.max_attempts=5", "model.temperature=0.4"]
    loaded = load_workflow(path, {"repo": "/tmp/r"}, tool_names=TOOLS, settings=settings)
    assert loaded.workflow.phases[0].max_attempts == 5
    assert loaded.workflow.model.temperature == 0.4
    for bad, said in (
        (
            "phases.1.max_attempts=5",
            "`phases` is a list of 1 in " + str(path) + "; index it with 0 to 0",
        ),
        ("phases.one.max_attempts=5", "`phases` is a list of 1"),
        ("name.x=1", "`name` is not a mapping in " + str(path) + ", so it has no field `x`"),
    ):
        with pytest.raises(WorkflowError, match="--set") as info:
            load_workflow(path, {"repo": "/tmp/r"}, tool_names=TOOLS, settings=[bad])
        assert said in str(info.value), str(info.value)
