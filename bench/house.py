"""The house in figures: pilot/'s rooms and arrows, its largest modules, its import circles.

A room is one entry of ``pilot/``: a wing (a package) or a module at the top. An arrow is a
room importing another (imports inside functions count; those under ``TYPE_CHECKING`` are
counted apart, as the circles they would close). Read with ``ast`` from the source, so an
older tree can be measured too: ``python bench/house.py --root /path/to/checkout``.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path


def modules(root: Path, package: str = "pilot") -> dict[str, Path]:
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports(name: str, path: Path, known: dict[str, Path]) -> tuple[set[str], set[str]]:
    """The project modules ``name`` imports: at run time, and under ``TYPE_CHECKING``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    runtime: set[str] = set()
    typing_only: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        into = typing_only if _type_checking(node, parents) else runtime
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                into.add(target)
    return runtime, typing_only - runtime


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of modules that reach each other (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while (member := stack.pop()) != node:
                group.append(member)
            group.append(node)
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def measure(root: Path) -> dict[str, object]:
    known = modules(root)
    runtime, with_types = {}, {}
    for name, path in known.items():
        run, typed = imports(name, path, known)
        runtime[name] = {t for t in run if t.startswith("pilot")}
        with_types[name] = runtime[name] | {t for t in typed if t.startswith("pilot")}
    rooms = {room(m) for m in known if m != "pilot"}
    arrows = {
        (room(a), room(b))
        for a, targets in runtime.items()
        for b in targets
        if a != "pilot" and b != "pilot" and room(a) != room(b)
    }
    lines = {name: len(path.read_text().splitlines()) for name, path in known.items()}
    return {
        "modules": len(known),
        "lines": sum(lines.values()),
        "rooms": len(rooms),
        "loose_modules": sum(1 for r in rooms if known[r].name != "__init__.py"),
        "arrows": len(arrows),
        "module_arrows": sum(len(t) for t in runtime.values()),
        "circles": circles(runtime),
        "type_only_circles": [c for c in circles(with_types) if c not in circles(runtime)],
        "largest": sorted(lines.items(), key=lambda kv: -kv[1])[:8],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    print(json.dumps(measure(args.root), indent=1))


if __name__ == "__main__":
    main()
