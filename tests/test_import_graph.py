"""The house's import rules, read from the source with ``ast``: no loops, no arrow back up.

Bench sits over pilot over brain and tools; the brain never imports the pilot (it must run
alone on a GPU host), tools never import either (they are what the agent may do, nothing
more), and the pilot reaches the simulated server only through ``brain.sim``'s public
function, never its internals. Imports inside functions count too: a lazy import hides a
loop from Python's import machinery, not from a reader.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import house  # noqa: E402  (bench/house.py: the ast walk, shared with the house figures)

PACKAGES = ("pilot", "brain", "tools")


def all_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        found.update(house.modules(ROOT, package))
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports at run time, resolved to modules where a name is
    one (``bench/house.py`` reads them; ``TYPE_CHECKING`` imports apart)."""
    return house.imports(name, path, modules)[0]


def import_graph(*, type_only: bool = False) -> dict[str, set[str]]:
    """Every module's arrows; with ``type_only``, its ``TYPE_CHECKING`` imports too."""
    modules = all_modules()
    graph = {}
    for name, path in modules.items():
        runtime, typing_only = house.imports(name, path, modules)
        graph[name] = runtime | typing_only if type_only else runtime
    return graph


strongly_connected = house.circles


def forbidden(source: str, target: str) -> str | None:
    """Why the arrow ``source -> target`` breaks the layering, or None."""
    top, target_top = source.split(".")[0], target.split(".")[0]
    if top == "brain" and target_top == "pilot":
        return "the brain must not import the pilot"
    if top == "tools" and target_top in ("pilot", "brain"):
        return "tools must not import the pilot or the brain"
    if source.startswith("pilot.model.") and target.startswith("pilot.workflow."):
        return "the model wing takes values, not workflows (the workflow wing builds them)"
    if source.startswith("pilot.agent.") and target.startswith("pilot.tactics"):
        return "the agent asks the tactics through its Tactics seam, it imports none of them"
    if top == "pilot" and target.startswith("brain.sim."):
        return "the pilot reaches the simulated server only through brain.sim's public API"
    return None


def test_no_import_loops() -> None:
    loops = strongly_connected(import_graph())
    assert not loops, "import loops (each group reaches itself): " + "; ".join(
        " <-> ".join(group) for group in loops
    )


KNOWN_TYPE_ONLY_LOOPS = [["brain.spec", "brain.spec_checks", "brain.spec_paths"]]
"""The one left, counted: ``ServerSpec`` validates itself with the checks and paths that read
a ``ServerSpec`` (breaking it means the checks typed by a Protocol of the fields they read).
Three were here before: the sim's app and its completions route (now a Protocol of the state
the route reads) and the errors and the diagnosis (``Diagnosis`` now beside ``LaunchError``)."""


def test_no_import_loops_even_through_type_only_imports() -> None:
    """A ``TYPE_CHECKING`` import closes no loop at run time, but a reader still goes round
    it: the circles it would close are counted as loops too."""
    loops = strongly_connected(import_graph(type_only=True))
    assert loops == KNOWN_TYPE_ONLY_LOOPS, "loops through type-only imports: " + "; ".join(
        " <-> ".join(group) for group in loops
    )


def test_no_forbidden_arrows() -> None:
    bad = [
        f"{source} -> {target}: {reason}"
        for source, targets in sorted(import_graph().items())
        for target in sorted(targets)
        if (reason := forbidden(source, target))
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("graph", "loops"),
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set(), "c": {"b"}}, []),
    ],
)
def test_loop_finder_finds_loops(graph: dict[str, set[str]], loops: list[list[str]]) -> None:
    assert strongly_connected(graph) == loops


def test_graph_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pilot.run import runner\n"
        "def later():\n    from pilot.store import event_store\n"
        "from .. import events as ev\n"
    )
    modules = {
        "pilot.agent.loop": source,
        "pilot.store.event_store": source,
        "pilot.events": source,
    }
    modules["pilot.run.runner"] = source
    assert imports_of("pilot.agent.loop", source, modules) == {
        "pilot.store.event_store",
        "pilot.events",
    }
