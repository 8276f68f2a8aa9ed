"""Tasks on real open-source code: fetch by pinned version and sha256, plant, prepare.

The sdists come from the package registry through pip (``pip download --no-deps
--no-binary :all:``) into a cache, and are refused if their sha256 is not the pinned one, so
every machine runs the very same code. A task's starting tree is the sdist plus its planted
edits, committed as the first commit of a fresh git repository (no .gitignore: the agent's
tools must keep build artefacts out on their own). Success is decided only by the hidden
check (``bench.tasks.hidden``), run after the agent stops, outside anything the agent could
read, against the original sdist's tests.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CATALOG = Path(__file__).with_name("catalog.yaml")
CHECK_TIMEOUT_S = 300
GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


class SuiteError(Exception):
    """A task cannot be prepared (download, checksum, a plant that does not apply)."""


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    sha256: str
    pythonpath: str = "."


@dataclass(frozen=True)
class Plant:
    """An exact text replacement in one file: ``old`` must occur once, or at least once
    with ``all`` (every occurrence replaced)."""

    file: str
    old: str
    new: str
    all: bool = False

    def apply(self, root: Path, *, task: str) -> None:
        target = root / self.file
        text = target.read_text()
        found = text.count(self.old)
        if found == 0 or (found > 1 and not self.all):
            raise SuiteError(
                f"{task}: the edit's text occurs {found} times in {self.file} (must be "
                f"{'at least once' if self.all else 'once'})"
            )
        target.write_text(text.replace(self.old, self.new))

    def undo(self, root: Path) -> None:
        target = root / self.file
        target.write_text(target.read_text().replace(self.new, self.old))


@dataclass(frozen=True)
class NewTest:
    """A test the task asks the agent to write: in ``file``, named ``name`` or, without a
    name, any test the original file does not have whose source mentions ``mentions``."""

    file: str
    name: str | None = None
    mentions: str | None = None


@dataclass(frozen=True)
class Task:
    id: str
    kind: str
    package: Package
    prompt: str
    test: str
    hidden: str
    hidden_tests: str | None = None
    plant: tuple[Plant, ...] = field(default_factory=tuple)
    tests: tuple[str, ...] = ()
    """The task's test files (repository paths): restored from the original sdist before the
    hidden check runs, and each of their tests must still be in the agent's tree."""
    tests_after: tuple[Plant, ...] = ()
    """Edits that turn the original tests into the ones the finished task must pass (a
    rename that reaches the tests)."""
    doctests: tuple[str, ...] = ()
    """``path:qualname`` of objects whose original doctest examples must all still be in
    the agent's docstring, and pass."""
    new_tests: tuple[NewTest, ...] = ()
    solution: tuple[Plant, ...] = ()
    """A reference solution for ``--validate`` (tasks with a plant are solved by undoing it)."""


_TASK_KEYS = frozenset(
    {
        "id",
        "kind",
        "package",
        "prompt",
        "test",
        "hidden",
        "hidden_tests",
        "plant",
        "tests",
        "tests_after",
        "doctests",
        "new_tests",
        "solution",
    }
)


def load_catalog(path: Path = CATALOG) -> list[Task]:
    """The tasks of ``path``, each with its package resolved."""
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    packages = {
        name: Package(name=name, **{k: str(v) for k, v in spec.items()})
        for name, spec in data["packages"].items()
    }
    tasks = []
    for raw in data["tasks"]:
        unknown = set(raw) - _TASK_KEYS
        if unknown:
            raise SuiteError(
                f"{path}: task {raw.get('id')!r} has unknown key(s) {', '.join(sorted(unknown))}"
                f" (known: {', '.join(sorted(_TASK_KEYS))})"
            )
        tasks.append(
            Task(
                id=raw["id"],
                kind=raw["kind"],
                package=packages[raw["package"]],
                prompt=raw["prompt"].strip(),
                test=raw["test"],
                hidden=raw["hidden"],
                hidden_tests=raw.get("hidden_tests"),
                plant=tuple(Plant(**p) for p in raw.get("plant") or []),
                tests=tuple(raw.get("tests") or ()),
                tests_after=tuple(Plant(**p) for p in raw.get("tests_after") or []),
                doctests=tuple(raw.get("doctests") or ()),
                new_tests=tuple(NewTest(**t) for t in raw.get("new_tests") or []),
                solution=tuple(Plant(**p) for p in raw.get("solution") or []),
            )
        )
    return tasks


def _norm(name: str) -> str:
    return name.lower().replace("-", "_")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(package: Package, cache: Path) -> Path:
    """The package's sdist in ``cache``, downloaded with pip if missing, sha256-checked."""
    cache.mkdir(parents=True, exist_ok=True)
    stem = f"{package.name}-{package.version}".lower().replace("-", "_")

    def cached() -> list[Path]:
        return [p for p in cache.glob("*.tar.gz") if _norm(p.name).startswith(stem + ".tar")]

    found = cached()
    if not found:
        spec = f"{package.name}=={package.version}"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                spec,
                "-d",
                str(cache),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        found = cached()
        if proc.returncode != 0 or not found:
            errors = [ln for ln in proc.stderr.splitlines() if not ln.startswith("WARNING")]
            raise SuiteError(f"pip could not download {spec}: {' '.join(errors)[-400:]}")
    sdist = found[0]
    digest = _sha256(sdist)
    if digest != package.sha256:
        raise SuiteError(
            f"{sdist.name}: sha256 {digest} is not the pinned {package.sha256}; delete it from "
            f"{cache} to download it again, or fix the pin in the catalog"
        )
    return sdist


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, env={**os.environ, **GIT_ENV}
    )


def unpack(package: Package, cache: Path, dest: Path) -> Path:
    """The package's original sdist tree at ``dest`` (which must not exist)."""
    sdist = fetch(package, cache)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp, tarfile.open(sdist) as archive:
        archive.extractall(tmp, filter="data")
        [top] = list(Path(tmp).iterdir())
        shutil.move(str(top), dest)
    return dest


def prepare(task: Task, cache: Path, where: Path) -> Path:
    """A fresh git repository at ``where/repo`` holding the task's starting tree."""
    repo = unpack(task.package, cache, where / "repo")
    for plant in task.plant:
        plant.apply(repo, task=task.id)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", f"task {task.id}: starting point")
    return repo


def task_env(task: Task, repo: Path) -> dict[str, str]:
    """The environment the agent's commands and the checks run with: this Python first on
    PATH (it has pytest), the package importable from its source tree."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {
        **os.environ,
        "PATH": path,
        "PYTHONPATH": str(repo / task.package.pythonpath),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
