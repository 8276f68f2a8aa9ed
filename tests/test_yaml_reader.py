"""One YAML reader for the files people write (workflows, params, matrices, profiles, presets,
fleet files): ``brain.yaml_source``. A second ``yaml.safe_load`` would read ``no`` as False
where the first reads "no", and report its errors without a line."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READERS = {"safe_load", "load", "full_load", "unsafe_load", "safe_load_all", "load_all", "compose"}
# The simulated server's own config and script files (test fixtures, read by the sim alone).
SIM_FILES = {"brain/sim/config.py", "brain/sim/script_policy.py"}


def yaml_reads(source: str) -> list[int]:
    """Lines of ``source`` that call PyYAML's readers directly (``yaml.safe_load(...)``)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "yaml"
        and node.func.attr in READERS
    ]


def test_hand_written_files_are_read_by_the_one_reader() -> None:
    found = [
        f"{name}:{line}"
        for folder in ("pilot", "brain", "tools")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (name := str(path.relative_to(ROOT))) not in SIM_FILES | {"brain/yaml_source.py"}
        for line in yaml_reads(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "read YAML with brain.yaml_source.parse_yaml:\n" + "\n".join(found)


def test_the_check_sees_a_direct_read() -> None:
    source = "import yaml\nx = yaml.safe_load('a: 1')\ny = yaml.safe_dump({})\nyaml.compose('')\n"
    assert yaml_reads(source) == [2, 4]
