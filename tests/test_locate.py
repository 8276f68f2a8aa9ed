"""pilot.tactics.locate over real pytest and doctest output: the functions a failure calls, found by
their def outside the tests, shown as they are in the file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pilot.tactics.locate import (
    called_as_method,
    definition_block,
    definition_search,
    failing_names,
    first_hit,
    focus,
    frame_hit,
    method_hit,
    method_search,
    prompt_names,
)

MODULE = '''def double(x):
    """Twice x.

    >>> double(2)
    5
    """
    return x * 3


def other():
    return 1
'''
TEST = """from pkg.mod import double


def test_double():
    assert double(2) == 4
"""


def project(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text(MODULE)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mod.py").write_text(TEST + "\n\ndef double(x):\n    pass\n")
    return tmp_path


def sh(command: str, cwd: Path) -> str:
    return subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True).stdout


def test_a_pytest_failure_leads_to_the_function_it_calls(tmp_path: Path) -> None:
    root = project(tmp_path)
    out = sh(f"{sys.executable} -m pytest -q -p no:cacheprovider tests/test_mod.py", root)
    assert failing_names(out) == ["double"]
    hit = first_hit(sh(definition_search("double"), root))
    assert hit == ("pkg/mod.py", 1), "the def in the tests is not taken"
    block = definition_block(sh(f"sed -n '{hit[1]},{hit[1] + 40}p' {hit[0]}", root))
    assert block.startswith("def double(x):") and block.endswith("return x * 3")
    assert "other" not in block


def test_a_doctest_failure_names_the_function_of_its_example(tmp_path: Path) -> None:
    root = project(tmp_path)
    out = sh(f"{sys.executable} -m doctest pkg/mod.py", root)
    assert "Failed example:" in out
    assert failing_names(out) == ["double"]


def test_only_python_names_are_searched() -> None:
    try:
        definition_search("x; rm -rf /")
    except ValueError as exc:
        assert "not a Python name" in str(exc)
    else:
        raise AssertionError("a name that is not an identifier reached the shell")


def test_a_method_call_prefers_the_method() -> None:
    grep = (
        "./src/pkg/_deprecated.py:10:def bump_patch(version):\n"
        "./src/pkg/version.py:200:    def bump_patch(self):\n"
    )
    output = ">       assert Version.parse('1.2.3').bump_patch() == v"
    assert called_as_method(output, "bump_patch")
    assert first_hit(grep, method=True) == ("src/pkg/version.py", 200)
    assert first_hit(grep) == ("src/pkg/_deprecated.py", 10)
    assert not called_as_method(">       assert bump_patch('1.2.3') == v", "bump_patch")


def test_the_names_the_prompt_mentions_come_alone() -> None:
    names = ["first", "rest", "interpose"]
    assert focus(names, "Fix `interpose` in toolz/itertoolz.py.") == ["interpose"]
    assert focus(names, "The tests fail.") == names
    assert focus(["rest"], "see toolz.rest_of_it") == ["rest"], "no mention: all of them"


CACHES = """class FIFOCache:
    def __init__(self):
        self.items = []

    def popitem(self):
        return self.items.pop(0)


class LRUCache:
    def __init__(self):
        self.items = []

    def popitem(self):
        if not self.items:
            raise KeyError("empty")
        return self.items.pop(-1)
"""
CACHE_TEST = """from pkg.caches import LRUCache


def test_popitem_of_an_empty_cache():
    cache = LRUCache()
    assert cache.popitem() is None
"""


def test_a_method_several_classes_define_is_taken_where_the_failure_ran(tmp_path: Path) -> None:
    """grep meets FIFOCache.popitem first; the traceback ran in LRUCache.popitem."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "caches.py").write_text(CACHES)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_caches.py").write_text(CACHE_TEST)
    out = sh(f"{sys.executable} -m pytest -q -p no:cacheprovider tests", tmp_path)
    assert failing_names(out)[0] == "popitem"
    found = sh(definition_search("popitem"), tmp_path)
    assert first_hit(found, method=True) == ("pkg/caches.py", 5), "grep's first: FIFOCache's"
    assert frame_hit(out, found) == ("pkg/caches.py", 13)
    block = definition_block(sh("sed -n '13,53p' pkg/caches.py", tmp_path))
    assert 'raise KeyError("empty")' in block
    assert frame_hit("no traceback here", found) is None


def test_the_prompt_names_definitions_in_backticks_and_as_class_dot_method() -> None:
    prompt = (
        "A full LRUCache evicts the wrong item. Fix `LRUCache.popitem` in src/x.py; add "
        "`count_if(pred, seq)` beside `dasherize`, then Version.parse. Keep `test_peek` and "
        "run `python -m pytest -q`; os.path stays."
    )
    assert prompt_names(prompt) == ["LRUCache.popitem", "count_if", "dasherize", "Version.parse"]
    example = 'Version.parse("1.2.3").bump_minor() must be 1.3.0. Fix the bug in version.py.'
    assert prompt_names(example) == [], "a call in an example is how to reach the bug"


def test_a_method_the_prompt_names_is_found_in_its_class_not_the_first_of_its_name(
    tmp_path: Path,
) -> None:
    """grep meets FIFOCache.popitem first; the prompt names LRUCache.popitem, and with no
    failure calling it (cachetools' tests fail in __getitem__), its class decides."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "caches.py").write_text(CACHES + "\n\nclass Other:\n    pass\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_caches.py").write_text(
        "class LRUCache:\n    def popitem(self):\n        pass\n"
    )
    found = sh(method_search("LRUCache", "popitem"), tmp_path)
    assert method_hit(found, "LRUCache", "popitem") == ("pkg/caches.py", 13)
    assert method_hit(found, "FIFOCache", "popitem") == ("pkg/caches.py", 5)
    assert method_hit(found, "Other", "popitem") is None
    assert method_hit(found, "LRUCache", "clear") is None
    with pytest.raises(ValueError):
        method_search("LRU Cache", "popitem")


BLACK_STYLE = '''def naturalsize(
    value: float | str,
    binary: bool = False,
    gnu: bool = False,
) -> str:
    """Format a number of bytes like a human-readable filesize.

Examples written at column 0 stay in the docstring.
    """
    if gnu:
        pair = (1,
2)
    base = 1024 if gnu else 1000
    return f"{value / base:.1f}"
# a comment after it


@decorated
def other():
    pass
'''


def test_a_black_style_signature_and_strings_at_column_0_stay_in_the_definition(
    tmp_path: Path,
) -> None:
    """humanize's naturalsize on the GPU: its `) -> str:` at column 0 ended the block after
    the signature, so the model was shown 5 lines and rewrote the body it never saw."""
    (tmp_path / "size.py").write_text(BLACK_STYLE)
    block = definition_block(sh("sed -n '1,121p' size.py", tmp_path))
    assert block.startswith("def naturalsize(\n") and block.endswith('return f"{value / base:.1f}"')
    assert "base = 1024 if gnu else 1000" in block and "@decorated" not in block
    method = "    def m(\n        self,\n    ) -> int:\n        return 1\n\n    def n(self):\n"
    assert definition_block(method) == "    def m(\n        self,\n    ) -> int:\n        return 1"
    assert definition_block("def f(): return 1\ndef g(): pass\n") == "def f(): return 1"


def test_a_definition_longer_than_the_lines_read_is_shown_as_far_as_it_was_read() -> None:
    from pilot.tactics.locate import MAX_LINES

    long = "def f():\n" + "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES * 2))
    assert len(definition_block(long).splitlines()) == MAX_LINES
    cut_in_a_string = 'def f():\n    s = """never closed\n    more'
    assert definition_block(cut_in_a_string) == cut_in_a_string


def test_a_long_functions_docstring_is_left_out_unless_the_task_is_about_docstrings() -> None:
    from pilot.tactics.locate import LONG_DEFINITION, about_docs, without_long_docstring

    doc = "".join(f"    line {i} of the docstring\n" for i in range(LONG_DEFINITION))
    long = f'    def size(self):\n        """Size.\n{doc}        """\n        return 1\n'
    shown, left_out = without_long_docstring(long)
    assert shown == "    def size(self):\n        return 1" and left_out == LONG_DEFINITION + 2
    short = 'def size():\n    """Size.\n\n    >>> size()\n    1\n    """\n    return 1'
    assert without_long_docstring(short) == (short, 0), "a short one keeps its examples"
    assert about_docs("one example in the docstring of humanize shows the wrong output")
    assert about_docs("Failed example:\n    intword(12400)") and not about_docs("Fix `size`.")
