"""The house's import rules, read from the source with ``ast``: no loops, no arrow back up.

Bench sits over pilot over brain and tools; the brain never imports the pilot (it must run
alone on a GPU host), tools never import either (they are what the agent may do, nothing
more), and the pilot reaches the simulated server only through ``brain.sim``'s public
function, never its internals. Imports inside functions count too: a lazy import hides a
loop from Python's import machinery, not from a reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pilot", "brain", "tools")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def _in_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports, resolved to modules where a name is one."""
    tree = ast.parse(path.read_text(), filename=str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if _in_type_checking(node, parents):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from package import submodule`` is an arrow to the submodule alone.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            if target.split(".")[0] not in PACKAGES:
                continue
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the groups of modules that reach each other (loops)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def forbidden(source: str, target: str) -> str | None:
    """Why the arrow ``source -> target`` breaks the layering, or None."""
    top, target_top = source.split(".")[0], target.split(".")[0]
    if top == "brain" and target_top == "pilot":
        return "the brain must not import the pilot"
    if top == "tools" and target_top in ("pilot", "brain"):
        return "tools must not import the pilot or the brain"
    if source.startswith("pilot.model.") and target.startswith("pilot.workflow."):
        return "the model wing takes values, not workflows (the workflow wing builds them)"
    if top == "pilot" and target.startswith("brain.sim."):
        return "the pilot reaches the simulated server only through brain.sim's public API"
    return None


def test_no_import_loops() -> None:
    loops = strongly_connected(import_graph())
    assert not loops, "import loops (each group reaches itself): " + "; ".join(
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
