"""replace_definition on a real temporary workspace: found by name, re-indented, imports
added, and every refusal leaves the file as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.base import ToolContext, ToolResult
from tools.registry import default_registry
from tools.workspace import Workspace

REGISTRY = default_registry()

MODULE = '''"""A module."""

import collections


def count(seq):
    d = collections.defaultdict(int)
    for item in seq:
        d[item] = 1
    return dict(d)


class Box:
    @staticmethod
    def size(x):
        return x - 1
'''


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "core.py").write_text(MODULE)
    (root / "tests").mkdir()
    (root / "tests" / "test_core.py").write_text("def count():\n    pass\n")
    return ToolContext(
        workspace=Workspace(root), artifacts_dir=tmp_path / "artifacts", sandbox="none"
    )


def call(ctx: ToolContext, **args: object) -> ToolResult:
    return REGISTRY.invoke("replace_definition", args, ctx)


def core(ctx: ToolContext) -> str:
    return (ctx.workspace.root / "pkg" / "core.py").read_text()


def test_the_one_defining_file_outside_the_tests_is_found_and_imports_added(
    ctx: ToolContext,
) -> None:
    code = (
        "```python\nfrom collections import defaultdict\n\ndef count(seq):\n"
        "    d = defaultdict(int)\n    for item in seq:\n        d[item] += 1\n"
        "    return dict(d)\n```"
    )
    result = call(ctx, code=code)
    assert not result.is_error, result.output
    assert result.output.startswith("Replaced function count in pkg/core.py.")
    namespace: dict = {}
    exec(compile(core(ctx), "core.py", "exec"), namespace)
    assert namespace["count"](["a", "a", "b"]) == {"a": 2, "b": 1}
    assert core(ctx).index("from collections import defaultdict") < core(ctx).index("def count")
    assert (ctx.workspace.root / "tests" / "test_core.py").read_text() == "def count():\n    pass\n"
    assert ctx.workspace.written == ["pkg/core.py"]


def test_a_method_keeps_its_indentation_and_decorator(ctx: ToolContext) -> None:
    code = "@staticmethod\ndef size(x):\n    return x + 1\n"
    result = call(ctx, code=code, path="pkg/core.py")
    assert not result.is_error, result.output
    assert "class Box:\n    @staticmethod\n    def size(x):\n        return x + 1\n" in core(ctx)
    assert core(ctx).count("@staticmethod") == 1


def test_a_new_name_is_added_at_the_end_of_the_file_given(ctx: ToolContext) -> None:
    result = call(ctx, code="def twice(x):\n    return 2 * x", path="pkg/core.py")
    assert result.output.startswith("Added function twice in pkg/core.py."), result.output
    assert core(ctx).endswith("        return x - 1\n\n\ndef twice(x):\n    return 2 * x\n")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"code": "def count(seq):\n    return ("}, "not valid Python (line 2"),
        ({"code": "def a():\n    pass\n\ndef b():\n    pass"}, "exactly one function or class"),
        ({"code": "x = 1"}, "it holds a assign statement (line 1)"),
        ({"code": "def nowhere():\n    pass"}, "no Python file in the workspace defines nowhere"),
        ({"code": "def size(x):\n    return x", "path": "pkg/missing.py"}, "no such file"),
        ({"code": MODULE.split("\n\n\n")[1], "path": "pkg/core.py"}, "nothing changed"),
        (
            {"code": "def count(seq):\n    return 1", "path": "../out.py"},
            "climb above the workspace root",
        ),
    ],
)
def test_refusals_say_why_and_change_nothing(
    ctx: ToolContext, args: dict[str, str], says: str
) -> None:
    result = call(ctx, **args)
    assert result.is_error and says in result.output, result.output
    assert core(ctx) == MODULE


def test_an_ambiguous_name_is_refused(ctx: ToolContext) -> None:
    (ctx.workspace.root / "pkg" / "other.py").write_text("def count():\n    return 0\n")
    result = call(ctx, code="def count(seq):\n    return 0")
    assert result.is_error and "count is defined in 2 files" in result.output
    assert core(ctx) == MODULE


def test_a_file_that_does_not_parse_is_left_alone(ctx: ToolContext) -> None:
    broken = MODULE.replace("def count(seq):", "def count(seq:")
    (ctx.workspace.root / "pkg" / "core.py").write_text(broken)
    result = call(ctx, code="def size(x):\n    return x\n", path="pkg/core.py")
    assert result.is_error and "does not parse now (line 6" in result.output, result.output
    assert core(ctx) == broken


def test_crlf_files_stay_crlf(ctx: ToolContext) -> None:
    path = ctx.workspace.root / "pkg" / "win.py"
    path.write_bytes(b"def f():\r\n    return 1\r\n")
    result = call(ctx, code="def f():\n    return 2\n", path="pkg/win.py")
    assert not result.is_error, result.output
    assert path.read_bytes() == b"def f():\r\n    return 2\r\n"


def test_a_method_goes_to_the_class_not_to_a_function_of_the_same_name(
    ctx: ToolContext,
) -> None:
    (ctx.workspace.root / "pkg" / "old.py").write_text("def size(version):\n    return 0\n")
    # ... and in core.py itself, a module-level size beside Box.size
    with open(ctx.workspace.root / "pkg" / "core.py", "a") as fh:
        fh.write("\n\ndef size(version):\n    return 0\n")
    result = call(ctx, code="def size(self):\n    return 42")
    assert result.output.startswith("Replaced function Box.size in pkg/core.py."), result.output
    assert "    def size(self):\n        return 42\n" in core(ctx)
    assert core(ctx).endswith("def size(version):\n    return 0\n")


def test_a_link_out_of_the_workspace_is_neither_read_nor_written(
    ctx: ToolContext, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("def secret():\n    return 1\n")
    (ctx.workspace.root / "pkg" / "link.py").symlink_to(outside)
    searched = call(ctx, code="def secret():\n    return 2")
    assert searched.is_error and "no Python file in the workspace defines secret" in searched.output
    given = call(ctx, code="def secret():\n    return 2", path="pkg/link.py")
    assert given.is_error and "refused" in given.output, given.output
    assert outside.read_text() == "def secret():\n    return 1\n"


def test_add_to_is_used_only_when_no_file_defines_the_name(ctx: ToolContext) -> None:
    added = call(ctx, code="def twice(x):\n    return 2 * x", add_to="pkg/core.py")
    assert added.output.startswith("Added function twice in pkg/core.py."), added.output
    replaced = call(ctx, code="def count(seq):\n    return {}", add_to="pkg/other.py")
    assert replaced.output.startswith("Replaced function count in pkg/core.py."), replaced.output
    assert not (ctx.workspace.root / "pkg" / "other.py").exists()


CACHES = '''"""Two caches that both define popitem, like cachetools' LRUCache and FIFOCache."""

import collections


class Cache:
    def __init__(self):
        self.data = {}


class FIFOCache(Cache):
    """First in, first out."""

    def __init__(self):
        super().__init__()
        self.order = collections.OrderedDict()

    def popitem(self):
        """Remove and return the (key, value) pair first inserted."""
        key = next(iter(self.order))
        return (key, self.data.pop(key))


class LRUCache(Cache):
    """Least recently used."""

    def __init__(self):
        super().__init__()
        self.order = collections.OrderedDict()

    def popitem(self):
        """Remove and return the (key, value) pair least recently used."""
        key = next(iter(self.order))
        return (key, self.data[key])

    class Stats:
        def popitem(self):
            return None
'''

NEW_LRU_POPITEM = '''@staticmethod
def popitem(self):
    """Remove and return the (key, value) pair least recently used."""
    key = next(iter(self.order))
    del self.order[key]
    return (key, self.data.pop(key))
'''


@pytest.fixture
def caches(ctx: ToolContext) -> Path:
    path = ctx.workspace.root / "pkg" / "caches.py"
    path.write_text(CACHES)
    return path


def _method(source: str, qualified: str) -> str:
    import ast

    from tools.definitions import qualified_definitions

    tree = ast.parse(source)
    node = next(d.node for d in qualified_definitions(tree) if d.name == qualified)
    return ast.get_source_segment(source, node, padded=True) or ""


def test_a_qualified_name_replaces_that_method_and_no_other(ctx: ToolContext, caches: Path) -> None:
    result = call(ctx, code=NEW_LRU_POPITEM, qualified_name="LRUCache.popitem")
    assert result.output.startswith("Replaced function LRUCache.popitem in pkg/caches.py."), (
        result.output
    )
    text = caches.read_text()
    compile(text, "caches.py", "exec")  # still parses
    assert _method(text, "FIFOCache.popitem") == _method(CACHES, "FIFOCache.popitem")
    assert _method(text, "LRUCache.Stats.popitem") == _method(CACHES, "LRUCache.Stats.popitem")
    # at the class's indentation, decorator and docstring as given
    assert (
        "    @staticmethod\n    def popitem(self):\n"
        '        """Remove and return the (key, value) pair least recently used."""\n'
        "        key = next(iter(self.order))\n        del self.order[key]\n"
        "        return (key, self.data.pop(key))\n\n    class Stats:\n"
    ) in text
    assert text.count("def popitem") == 3


def test_a_bare_name_several_classes_define_is_refused_with_the_qualified_names(
    ctx: ToolContext, caches: Path
) -> None:
    result = call(ctx, code="def popitem(self):\n    return None\n", path="pkg/caches.py")
    assert result.is_error
    assert (
        "popitem is defined 3 times in pkg/caches.py: FIFOCache.popitem (line 18), "
        "LRUCache.popitem (line 31), LRUCache.Stats.popitem (line 37)"
    ) in result.output, result.output
    assert 'qualified_name="FIFOCache.popitem"' in result.output
    # without path the file is found, and the refusal is the same
    found = call(ctx, code="def popitem(self):\n    return None\n")
    assert "popitem is defined 3 times in pkg/caches.py" in found.output, found.output
    assert caches.read_text() == CACHES


def test_a_nested_qualified_name_and_a_method_written_with_its_class_indentation(
    ctx: ToolContext, caches: Path
) -> None:
    indented = "    def popitem(self):\n        return ('stats', 0)\n"
    result = call(ctx, code=indented, qualified_name="LRUCache.Stats.popitem")
    assert result.output.startswith("Replaced function LRUCache.Stats.popitem"), result.output
    text = caches.read_text()
    assert "    class Stats:\n        def popitem(self):\n            return ('stats', 0)\n" in text
    assert _method(text, "LRUCache.popitem") == _method(CACHES, "LRUCache.popitem")
    # the inner class's own name is enough when it ends one qualified name
    again = call(ctx, code="def popitem(self):\n    return 1\n", qualified_name="Stats.popitem")
    assert again.output.startswith("Replaced function LRUCache.Stats.popitem"), again.output


def test_name_given_as_the_class_and_a_new_method_goes_to_that_class(
    ctx: ToolContext, caches: Path
) -> None:
    result = call(ctx, code="def popitem(self):\n    return 7\n", qualified_name="FIFOCache")
    assert result.output.startswith("Replaced function FIFOCache.popitem"), result.output
    added = call(ctx, code="def clear(self):\n    self.data.clear()\n", qualified_name="LRUCache")
    assert added.output.startswith("Added function LRUCache.clear in pkg/caches.py."), added.output
    text = caches.read_text()
    assert "        return (key, self.data[key])\n\n    def clear(self):\n" not in text
    assert "            return None\n\n    def clear(self):\n        self.data.clear()\n" in text
    compile(text, "caches.py", "exec")


def test_a_qualified_name_the_file_lacks_is_refused_with_what_it_has(
    ctx: ToolContext, caches: Path
) -> None:
    missing = call(
        ctx, code="def popitem(self):\n    return 0\n", qualified_name="LFUCache.popitem"
    )
    assert missing.is_error
    assert "no Python file in the workspace defines LFUCache.popitem" in missing.output
    given = call(
        ctx,
        code="def popitem(self):\n    return 0\n",
        qualified_name="LFUCache",
        path="pkg/caches.py",
    )
    assert "pkg/caches.py has no class LFUCache for LFUCache.popitem" in given.output
    assert "FIFOCache.popitem (line 18)" in given.output, given.output
    bad = call(ctx, code="def popitem(self):\n    return 0\n", qualified_name="LRU Cache")
    assert bad.is_error and "not a qualified name" in bad.output, bad.output
    assert caches.read_text() == CACHES


def test_a_new_method_with_no_class_named_is_refused_not_added_at_module_level(
    ctx: ToolContext, caches: Path
) -> None:
    """Qwen2.5-Coder-1.5B (2026-12-07) wrote `def __popitem(self)` for cachetools: added at
    the module's end it fixed nothing and broke nothing the check could see."""
    before = caches.read_text()
    result = call(ctx, code="def __popitem(self):\n    return None\n", path="pkg/caches.py")
    assert result.is_error
    assert "__popitem takes self or cls first: it is a method" in result.output
    assert "LRUCache" in result.output and "FIFOCache" in result.output
    assert caches.read_text() == before
    # with its class named it goes into that class
    added = call(ctx, code="def __popitem(self):\n    return None\n", qualified_name="LRUCache")
    assert added.output.startswith("Added function LRUCache.__popitem"), added.output


DOCUMENTED = '''class Size:
    def natural(
        self,
        value: int,
    ) -> str:
        """Format a size.

        >>> Size().natural(3000)
        '3.0 kB'
        """
        # the base
        base = 100
        return f"{value / base:.1f} kB"
'''


def test_a_rewrite_without_a_docstring_keeps_the_one_it_replaces(ctx: ToolContext) -> None:
    """A long function shown or cut without its docstring comes back without it: the rewrite
    keeps the file's docstring (and its doctest), and says so; one with a docstring of its own
    replaces it."""
    path = ctx.workspace.root / "pkg" / "size.py"
    path.write_text(DOCUMENTED)
    fixed = (
        "def natural(\n    self,\n    value: int,\n) -> str:\n\n    # the base\n"
        '    base = 1000\n    return f"{value / base:.1f} kB"\n'
    )
    result = call(ctx, code=fixed, qualified_name="Size.natural")
    assert not result.is_error, result.output
    assert "(its docstring kept: the code sent had none)" in result.output.splitlines()[0]
    text = path.read_text()
    signature_end = text.index(") -> str:\n") + len(") -> str:\n")
    assert text[signature_end:].startswith('        """Format a size.\n\n        >>> Size()'), text
    assert text.index('\'3.0 kB\'\n        """') < text.index("# the base") < text.index("= 1000")
    namespace: dict = {}
    exec(compile(text, "size.py", "exec"), namespace)
    assert namespace["Size"]().natural(3000) == "3.0 kB"
    assert namespace["Size"].natural.__doc__.startswith("Format a size.")
    own = 'def natural(self, value):\n    """Its own."""\n    return "x"\n'
    replaced = call(ctx, code=own, qualified_name="Size.natural")
    assert "docstring kept" not in replaced.output and '"""Its own."""' in path.read_text()
    assert "Format a size" not in path.read_text()
