"""A method that several classes define (cachetools' LRUCache.popitem and FIFOCache.popitem),
rewritten in a ```python block, lands in the class the failure was in: the block read as a
replace_definition call carries the qualified name the answer (or the prompt) gives, else the
file and line the located code showed; a method written inside its class line replaces that
method alone. Real parts: the sim over loopback, a git workspace, the pilot in process."""

from __future__ import annotations

import ast
from pathlib import Path

from pilot_harness import make_repo, run_in_process, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.store.event_store import EventStore
from pilot.tactics.dialects import definition_target, extract_text_tool_calls
from tools.base import ToolContext
from tools.definitions import qualified_definitions
from tools.registry import default_registry
from tools.workspace import Workspace

REGISTRY = default_registry()

CACHES = '''"""Two caches that both define popitem."""

import collections


class Cache:
    def __init__(self):
        self.data = {}
        self.order = collections.OrderedDict()

    def __setitem__(self, key, value):
        self.data[key] = value
        self.order[key] = None


class FIFOCache(Cache):
    """First in, first out."""

    def popitem(self):
        """Remove and return the (key, value) pair first inserted."""
        key = next(iter(self.order))
        del self.order[key]
        return (key, self.data.pop(key))


class LRUCache(Cache):
    """Least recently used."""

    def __getitem__(self, key):
        self.order.move_to_end(key)
        return self.data[key]

    def popitem(self):
        """Remove and return the (key, value) pair least recently used."""
        key = next(iter(self.order))
        return (key, self.data[key])
'''

FIXED = (
    "    def popitem(self):\n"
    '        """Remove and return the (key, value) pair least recently used."""\n'
    "        key = next(iter(self.order))\n"
    "        del self.order[key]\n"
    "        return (key, self.data.pop(key))\n"
)

CHECK = (
    "python3 -c 'from caches import LRUCache\n"
    "c = LRUCache()\nc[1] = 1\nc[2] = 2\nc[1]\n"
    "assert c.popitem() == (2, 2)\nassert c.data == {1: 1}, c.data'"
)

FAILING = (
    "printf '"
    + ">       assert c.popitem() == (2, 2)\\n\\ntest_caches.py:9: \\n"
    + ">       return (key, self.data[key])\\nE       AssertionError\\n\\n"
    + "caches.py:36: AssertionError\\n1 failed\\n'; exit 1"
)


def source_of(text: str, qualified: str) -> str:
    tree = ast.parse(text)
    node = next(d.node for d in qualified_definitions(tree) if d.name == qualified)
    return ast.get_source_segment(text, node, padded=True) or ""


def run_rewrite(tmp_path: Path, answer: str, phase: dict) -> tuple[Path, list[ev.Event]]:
    repo = make_repo(tmp_path / "repo", {"caches.py": CACHES})
    script = write_script(
        tmp_path / "s.yaml",
        "rewrite",
        [
            {"content": answer},
            {"tool_calls": [{"name": "finish", "arguments": {"summary": "fixed popitem"}}]},
        ],
    )
    with running_sim(
        SimConfig(model="test-model", max_model_len=32768, policy=f"script:{script}")
    ) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="rewrite",
            endpoint=sim.openai_base_url,
            tools=["read_file", "replace_definition", "edit_file", "finish"],
            phases=[{"name": "fix", "prompt": "Fix the failing test.", **phase}],
        )
        outcome = run_in_process(workflow, repo, tmp_path / "run.db")
    events = EventStore(f"sqlite:///{tmp_path / 'run.db'}").load_events(outcome.run_id)
    return repo, events


def edits(events: list[ev.Event]) -> list[ev.ToolFinished]:
    return [e for e in events if isinstance(e, ev.ToolFinished) and e.name == "replace_definition"]


def test_a_located_method_rewritten_with_its_class_indentation_lands_in_that_class(
    tmp_path: Path,
) -> None:
    """locate showed LRUCache.popitem (caches.py, line 33); the block names no class."""
    answer = f"Here is the fix:\n```python\n{FIXED}```"
    phase = {"context": [FAILING], "locate": True, "check": CHECK, "require_change": True}
    _, events = run_rewrite(tmp_path, answer, phase)
    [started] = [e for e in events if isinstance(e, ev.PhaseStarted)]
    assert "The code of popitem (caches.py, line 33):" in started.prompt
    [done] = edits(events)
    assert not done.is_error, done.output
    assert done.output.startswith("Replaced function LRUCache.popitem in caches.py."), done.output
    assert "-        return (key, self.data[key])" in done.output
    assert "FIFO" not in done.output.split("\n", 1)[1]
    ended = [e for e in events if isinstance(e, ev.PhaseFinished)]
    assert ended and ended[-1].outcome == "succeeded", ended


def test_the_class_the_answer_names_is_the_one_rewritten(tmp_path: Path) -> None:
    """No located code: the answer's 'LRUCache.popitem' names the class."""
    answer = f"The bug is in LRUCache.popitem:\n```python\n{FIXED}```"
    _, events = run_rewrite(tmp_path, answer, {"check": CHECK})
    [done] = edits(events)
    assert done.output.startswith("Replaced function LRUCache.popitem in caches.py."), done.output


def test_a_bare_method_with_nothing_to_choose_by_is_refused_with_the_names(
    tmp_path: Path,
) -> None:
    answer = f"Here is the fix:\n```python\n{FIXED}```"
    _, events = run_rewrite(tmp_path, answer, {"check": CHECK, "max_attempts": 1})
    [done, *_] = edits(events)
    assert done.is_error
    assert "FIFOCache.popitem (line 19), LRUCache.popitem (line 33)" in done.output, done.output


def test_definition_target_reads_the_located_code_then_the_answer_then_the_prompt() -> None:
    code = "def popitem(self):\n    return None"
    located = "The code of popitem (cachetools/__init__.py, line 118):\n```python\n..."
    where = {"path": "cachetools/__init__.py", "line": 118}
    assert definition_target(code, "Fixed LRUCache.popitem.", located) == where
    assert definition_target(code, "Fixed LRUCache.popitem.", "Fix it.") == {
        "qualified_name": "LRUCache.popitem"
    }
    assert definition_target(code, "cache.popitem() was wrong", "Fix it.") == {}, (
        "a lowercase qualifier is a call on an instance, not a class"
    )
    assert definition_target(code, "", "Fix Outer.Inner.popitem, see below.") == {
        "qualified_name": "Outer.Inner.popitem"
    }
    two = "LRUCache.popitem and FIFOCache.popitem differ."
    assert definition_target(code, two, "") == {}, "two classes: no guess"
    twice = located + "\nThe code of popitem (cachetools/fifo.py, line 9):\n"
    assert definition_target(code, "Fixed LRUCache.popitem.", twice) == {
        "qualified_name": "LRUCache.popitem"
    }, "two located: the answer's name decides"
    assert definition_target(code, "", twice) == {}, "two located and no name: no guess"
    assert definition_target("x = 1", "LRUCache.popitem", located) == {}
    # The header as locate writes it for a long method shown without its docstring, and by
    # its qualified name: the same place.
    noted = (
        "The code of LRUCache.popitem (cachetools/__init__.py, line 118; its docstring of 40 "
        "lines not shown: a rewrite without a docstring keeps it):\n```python\n..."
    )
    assert definition_target(code, "", noted) == where


def test_a_method_written_inside_its_class_line_replaces_that_method_alone(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "caches.py").write_text(CACHES)
    ctx = ToolContext(workspace=Workspace(root), artifacts_dir=tmp_path / "art", sandbox="none")
    content = f"```python\nclass LRUCache(Cache):\n{FIXED}```"
    [(name, arguments)] = extract_text_tool_calls(
        content,
        {
            t["function"]["name"]: t["function"]["parameters"]
            for t in REGISTRY.openai_tools(["replace_definition"])
        },
    ).calls
    result = REGISTRY.invoke(name, arguments, ctx)
    assert result.output.startswith(
        "Replaced method LRUCache.popitem (written in its class; the class's other members "
        "kept) in caches.py."
    ), result.output
    text = (root / "caches.py").read_text()
    assert source_of(text, "LRUCache.popitem") == FIXED.rstrip("\n")
    assert source_of(text, "LRUCache.__getitem__") == source_of(CACHES, "LRUCache.__getitem__")
    assert source_of(text, "FIFOCache.popitem") == source_of(CACHES, "FIFOCache.popitem")
    assert text.count('"""Least recently used."""') == 1
    # a class rewritten whole (every member given) is still taken as the class
    whole = "class FIFOCache(Cache):\n    def popitem(self):\n        return None\n"
    replaced = REGISTRY.invoke(name, {"code": whole}, ctx)
    assert replaced.output.startswith("Replaced class FIFOCache in caches.py."), replaced.output


def test_the_class_written_back_whole_changes_only_the_method_the_prompt_names(
    tmp_path: Path,
) -> None:
    """Asked to fix `LRUCache.popitem`, the 1.5B wrote the class back with __init__ rewritten
    too and broke it: the method the prompt names is taken from the class, the others are left
    as they are and the result says so."""
    broken_getitem = "    def __getitem__(self, key):\n        return None\n\n"
    answer = f"```python\nclass LRUCache(Cache):\n{broken_getitem}{FIXED}```"
    phase = {"check": CHECK, "prompt": "Fix `LRUCache.popitem` in caches.py."}
    _, events = run_rewrite(tmp_path, answer, phase)
    [done, *_] = edits(events)
    assert not done.is_error, done.output
    assert done.output.startswith(
        "Replaced function LRUCache.popitem (taken from the class written; its other methods, "
        "LRUCache.__getitem__, left as they are: qualified_name names LRUCache.popitem"
    ), done.output
    diff = done.output.split("\n", 1)[1]
    assert "+        del self.order[key]" in diff and "move_to_end" not in diff, diff
    ended = [e for e in events if isinstance(e, ev.PhaseFinished)]
    assert ended and ended[-1].outcome == "succeeded", ended
    # Without a prompt that names one of its methods, the class written is taken as before.
    code = f"class LRUCache(Cache):\n{broken_getitem}{FIXED}"
    assert definition_target(code, "", "Fix the cache.") == {}
    assert definition_target(code, "", "Fix `LRUCache.popitem`.") == {
        "qualified_name": "LRUCache.popitem"
    }


def test_a_tool_written_as_a_python_function_is_not_code_to_add() -> None:
    """The 1.5B wrote ``def finish(...)`` in a Python block, and it was added to the module it
    was fixing. A function named like one of the phase's tools, with that tool's parameters,
    is not taken as a replace_definition call; a project's own ``run(cmd, verbose)`` is."""
    schemas = {
        t["function"]["name"]: t["function"]["parameters"]
        for t in REGISTRY.openai_tools(["replace_definition", "finish", "run"])
    }

    def calls(block: str) -> list[str]:
        return [name for name, _ in extract_text_tool_calls(block, schemas).calls]

    assert calls("```python\ndef finish(summary):\n    return summary\n```") == []
    imitated = "```python\ndef replace_definition(code, path=None, add_to='t.py'):\n    pass\n```"
    assert calls(imitated) == []
    assert calls("```python\ndef run(cmd, verbose):\n    pass\n```") == ["replace_definition"]
    assert calls("```python\ndef add(a, b):\n    return a + b\n```") == ["replace_definition"]
