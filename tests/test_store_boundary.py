"""The store wing is the only place that speaks SQL, and the brain alone declares server_events.

Read from the source with ``ast`` (every import, also those inside functions), so a query
written outside ``pilot/store`` fails here before it spreads.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def sqlalchemy_outside_store(root: Path) -> list[str]:
    """``pilot`` modules outside ``pilot/store`` that import SQLAlchemy."""
    found = []
    for path in sorted((root / "pilot").rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[:2] == ("pilot", "store"):
            continue
        if any(m == "sqlalchemy" or m.startswith("sqlalchemy.") for m in imported_modules(path)):
            found.append(str(relative))
    return found


def server_events_declarations(root: Path) -> list[str]:
    """Where a ``server_events`` table is declared (``Table("server_events", ...)`` or an ORM
    class with that ``__tablename__``)."""
    found = []
    for path in sorted([*(root / "pilot").rglob("*.py"), *(root / "brain").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            named = (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Table"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "server_events"
            ) or (
                isinstance(node, ast.Assign)
                and any(getattr(t, "id", "") == "__tablename__" for t in node.targets)
                and isinstance(node.value, ast.Constant)
                and node.value.value == "server_events"
            )
            if named:
                found.append(str(path.relative_to(root)))
    return found


def test_only_the_store_imports_sqlalchemy() -> None:
    assert sqlalchemy_outside_store(ROOT) == []


def test_server_events_is_declared_once_by_the_brain() -> None:
    assert server_events_declarations(ROOT) == ["brain/events.py"]
