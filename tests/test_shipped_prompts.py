"""The shipped workflows' prompts say what to do, never how to write a call: the call syntax
belongs to the mode (the server's tool parser, or the pilot's feedback for text calls), and a
syntax in the prompt was copied placeholder and all (``"..."``, ``<file>``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

WORKFLOWS = sorted((Path(__file__).resolve().parents[1] / "workflows").glob("*.yaml"))
SYNTAX = ['{"name"', '"arguments"', "```", '"..."', "<file>", "<path>", "<tool_call>"]


def prompts(path: Path) -> list[tuple[str, str]]:
    data = yaml.safe_load(path.read_text())
    found = [("system", data.get("system") or "")]
    for phase in data.get("phases") or []:
        found.append((f"phase {phase['name']}", phase.get("prompt") or ""))
    return found


def test_there_are_shipped_workflows() -> None:
    assert len(WORKFLOWS) >= 3


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_a_shipped_prompt_says_nothing_about_call_syntax(path: Path) -> None:
    for where, text in prompts(path):
        for mark in SYNTAX:
            assert mark not in text, f"{path.name} {where} holds {mark!r}"


def survey_listing(root: Path, files: list[str]) -> list[str]:
    """What refactor_repo.yaml's survey context command lists in a git repository of
    ``files``."""
    import subprocess

    data = yaml.safe_load((WORKFLOWS[0].parent / "refactor_repo.yaml").read_text())
    [command] = next(p for p in data["phases"] if p["name"] == "survey")["context"]
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    return subprocess.run(
        command, shell=True, cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()


def test_the_survey_lists_the_package_before_licences_and_metadata(tmp_path: Path) -> None:
    files = ["AUTHORS.md", "LICENSE", "versioneer.py", "setup.py", "docs/conf.py",
             "inflection/__init__.py", "inflection/core.py", "tests/test_core.py"]  # fmt: skip
    listed = survey_listing(tmp_path, files)
    assert listed[:3] == ["inflection/__init__.py", "inflection/core.py", "tests/test_core.py"]
    assert sorted(listed) == sorted(files), "every file still listed, once"


def test_the_survey_lists_the_largest_package_first(tmp_path: Path) -> None:
    """toolz's sdist holds ``tlz/`` (3 modules) beside ``toolz/``: the 0.5B model on the GPU
    read ``tlz/__init__.py``, the first entry, until the loop guard stopped it."""
    files = ["LICENSE.txt", "setup.py", "tlz/__init__.py", "tlz/_build_tlz.py",
             "toolz/__init__.py", "toolz/dicttoolz.py", "toolz/itertoolz.py",
             "toolz/functoolz.py", "toolz/tests/test_itertoolz.py"]  # fmt: skip
    listed = survey_listing(tmp_path, files)
    assert listed[:6] == [
        "toolz/__init__.py", "toolz/dicttoolz.py", "toolz/functoolz.py", "toolz/itertoolz.py",
        "tlz/__init__.py", "tlz/_build_tlz.py",
    ]  # fmt: skip
    assert listed[6] == "toolz/tests/test_itertoolz.py"
    assert sorted(listed) == sorted(files), "every file still listed, once"


def test_the_task_suites_system_prompt_says_nothing_about_call_syntax() -> None:
    from bench.tasks.agents import SYSTEM_MARATHON

    for mark in SYNTAX:
        assert mark not in SYSTEM_MARATHON, mark
