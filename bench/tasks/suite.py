"""Tasks on real open-source code: fetch by pinned version and sha256, plant, check hidden.

The sdists come from the package registry through pip (``pip download --no-deps
--no-binary :all:``) into a cache, and are refused if their sha256 is not the pinned one, so
every machine runs the very same code. A task's starting tree is the sdist plus its planted
edits, committed as the first commit of a fresh git repository (no .gitignore: the agent's
tools must keep build artefacts out on their own). Success is decided only by the hidden
check, run after the agent stops, outside anything the agent could read.
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
    file: str
    old: str
    new: str


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


def load_catalog(path: Path = CATALOG) -> list[Task]:
    """The tasks of ``path``, each with its package resolved."""
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    packages = {
        name: Package(name=name, **{k: str(v) for k, v in spec.items()})
        for name, spec in data["packages"].items()
    }
    tasks = []
    for raw in data["tasks"]:
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


def prepare(task: Task, cache: Path, where: Path) -> Path:
    """A fresh git repository at ``where/repo`` holding the task's starting tree."""
    sdist = fetch(task.package, cache)
    with tempfile.TemporaryDirectory(dir=where) as tmp, tarfile.open(sdist) as archive:
        archive.extractall(tmp, filter="data")
        [top] = list(Path(tmp).iterdir())
        repo = where / "repo"
        shutil.move(str(top), repo)
    for plant in task.plant:
        target = repo / plant.file
        text = target.read_text()
        if text.count(plant.old) != 1:
            raise SuiteError(
                f"{task.id}: the plant's text occurs {text.count(plant.old)} times in "
                f"{plant.file} (must be once)"
            )
        target.write_text(text.replace(plant.old, plant.new))
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


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    reason: str


def hidden_check(task: Task, repo: Path) -> CheckResult:
    """Run the task's hidden check on ``repo`` (from a file outside it); exit 0 = success."""
    env = task_env(task, repo)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "hidden_check.py"
        script.write_text(task.hidden)
        try:
            proc = subprocess.run(
                [sys.executable, str(script)],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
                timeout=CHECK_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return CheckResult(False, "hidden check timed out")
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return CheckResult(False, f"hidden check: {last[0][:200]}")
    if task.hidden_tests:
        try:
            proc = subprocess.run(
                task.hidden_tests,
                shell=True,
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
                timeout=CHECK_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return CheckResult(False, "package tests timed out")
        if proc.returncode != 0:
            tail = proc.stdout.strip().splitlines()[-1:] or ["(no output)"]
            return CheckResult(False, f"package tests fail: {tail[0][:200]}")
    return CheckResult(True, "hidden check passed")
