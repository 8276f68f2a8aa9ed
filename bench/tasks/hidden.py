"""The hidden check: run after the agent stops, against the original sdist's tests.

What an agent did to the task's own tests is never evidence. The check:

1. finds every test of the task's test files (the original's, after ``tests_after``) still
   in the agent's tree: a try that deleted or renamed a test fails, even with the code right;
2. runs in a copy of the agent's tree in which the task's test files are the original's and
   every pytest configuration file or conftest.py the original lacks is removed (the
   original's are put back), so a weakened assertion, a skip or a config that deselects
   cannot pass;
3. for the doctests a task names, finds every original example (its source and expected
   output) still in the docstring, and runs them: a deleted doctest is no fix;
4. finds the tests a task asks the agent to write in the agent's file, and runs them from
   that copy;
5. runs the task's hidden assertions and the package's own tests in that copy.
"""

from __future__ import annotations

import ast
import doctest
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.tasks.suite import NewTest, Task, task_env, unpack

CHECK_TIMEOUT_S = 300
# Files that change what pytest or Python runs: the copy keeps only the original's.
_CONFIG_NAMES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "sitecustomize.py",
        "usercustomize.py",
    }
)
_PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    reason: str


def test_names(source: str) -> set[str]:
    """The tests a test file defines: ``test*`` functions, and ``Class.test*`` methods."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.update(
                f"{node.name}.{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                and item.name.startswith("test")
            )
    return names


def _test_sources(source: str) -> dict[str, str]:
    """Each test's source text, by the name ``test_names`` gives it."""
    tree = ast.parse(source)
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = ast.get_source_segment(source, node) or ""
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[f"{node.name}.{item.name}"] = ast.get_source_segment(source, item) or ""
    return {name: text for name, text in found.items() if name.split(".")[-1].startswith("test")}


def expected_tests(task: Task, original: Path) -> Path:
    """``original`` with ``tests_after`` applied: the tests the finished task must pass."""
    for edit in task.tests_after:
        edit.apply(original, task=task.id)
    return original


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def deleted_tests(task: Task, expected: Path, repo: Path) -> list[str]:
    """``file: test`` for each expected test the agent's tree no longer defines."""
    gone = []
    for rel in task.tests:
        text = _read(repo / rel)
        mine = test_names(text)
        lost = sorted(test_names(_read(expected / rel)) - mine)
        if lost and text and not _parses(text):
            gone.append(f"{rel} (it no longer parses)")
        else:
            gone += [f"{rel}: {name}" for name in lost]
    return gone


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


def restored_copy(task: Task, repo: Path, expected: Path, dest: Path) -> Path:
    """The agent's tree at ``dest`` with the task's tests and the test configuration put
    back as the original has them."""
    shutil.copytree(repo, dest, ignore=shutil.ignore_patterns(".git"), symlinks=True)
    for path in sorted(dest.rglob("*")):
        rel = path.relative_to(dest)
        if path.name in _CONFIG_NAMES and not (expected / rel).exists():
            path.unlink()
    for path in sorted(expected.rglob("*")):
        rel = path.relative_to(expected)
        if path.is_file() and (path.name in _CONFIG_NAMES or str(rel) in task.tests):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest / rel)
    return dest


def _module_of(task: Task, path: str) -> str:
    rel = Path(path).relative_to(task.package.pythonpath)
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def doctest_examples(source: str, qualname: str) -> list[tuple[str, str]]:
    """The (source, expected output) of each doctest example of ``qualname`` in ``source``."""
    node: ast.AST = ast.parse(source)
    for part in qualname.split("."):
        body = getattr(node, "body", [])
        node = next(
            (
                n
                for n in body
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and n.name == part
            ),
            None,
        )
        if node is None:
            return []
    doc = ast.get_docstring(node, clean=False) or ""  # type: ignore[arg-type]
    return [(e.source, e.want) for e in doctest.DocTestParser().get_examples(doc)]


# Run in the copy: the object's doctest examples must hold each expected one, and pass.
_DOCTEST_PROBE = """
import doctest, importlib, json, sys
module, qualname, expected = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
mod = obj = importlib.import_module(module)
for part in qualname.split("."):
    obj = getattr(obj, part)
found = doctest.DocTestFinder(recurse=False).find(obj, qualname, module=mod, globs=vars(mod))
have = {(e.source, e.want) for test in found for e in test.examples}
gone = [src for src, want in expected if (src, want) not in have]
if gone:
    sys.exit(f"the doctest example {gone[0].strip()!r} of {qualname} is gone or changed")
runner = doctest.DocTestRunner(verbose=False)
for test in found:
    runner.run(test, out=lambda _text: None)
result = runner.summarize(verbose=False)
if result.failed:
    sys.exit(f"{result.failed} of {result.attempted} doctest examples of {qualname} fail")
"""


def _run(cmd: list[str] | str, cwd: Path, task: Task) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            cmd,
            shell=isinstance(cmd, str),
            cwd=cwd,
            env=task_env(task, cwd),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None


def _last_line(proc: subprocess.CompletedProcess[str], *, stderr_first: bool = True) -> str:
    text = (proc.stderr or proc.stdout) if stderr_first else (proc.stdout or proc.stderr)
    return (text.strip().splitlines()[-1:] or ["(no output)"])[0][:200]


def _new_tests(spec: NewTest, original: Path, repo: Path) -> list[str]:
    mine = _read(repo / spec.file)
    try:
        sources = _test_sources(mine)
    except SyntaxError:
        return []
    before = test_names(_read(original / spec.file))
    return sorted(
        name
        for name, text in sources.items()
        if name not in before
        and (spec.name is None or name.split(".")[-1] == spec.name)
        and (spec.mentions is None or spec.mentions in text)
    )


def _check_new_tests(task: Task, original: Path, repo: Path, copy: Path) -> CheckResult | None:
    for spec in task.new_tests:
        names = _new_tests(spec, original, repo)
        if not names:
            what = spec.name or f"a new test mentioning {spec.mentions!r}"
            return CheckResult(False, f"hidden check: {what} is not in {spec.file}")
        mine = Path(spec.file)
        runnable = copy / mine.with_name(f"{mine.stem}_by_agent.py")
        shutil.copyfile(repo / spec.file, runnable)
        selector = " or ".join(name.split(".")[-1] for name in names)
        proc = _run([*_PYTEST, str(runnable.relative_to(copy)), "-k", selector], copy, task)
        if proc is None:
            return CheckResult(False, "the agent's new tests timed out")
        if proc.returncode != 0:
            return CheckResult(
                False, f"the agent's new tests fail: {_last_line(proc, stderr_first=False)}"
            )
    return None


def hidden_check(task: Task, repo: Path, cache: Path) -> CheckResult:
    """Decide the try on ``repo`` (the agent's tree after it stopped); exit 0 = success."""
    with tempfile.TemporaryDirectory(prefix=f"hidden-{task.id}-") as tmp:
        original = unpack(task.package, cache, Path(tmp) / "original")
        expected = expected_tests(task, unpack(task.package, cache, Path(tmp) / "expected"))
        gone = deleted_tests(task, expected, repo)
        if gone:
            more = f" (+{len(gone) - 1} more)" if len(gone) > 1 else ""
            return CheckResult(False, f"hidden check: the try deleted or renamed {gone[0]}{more}")
        copy = restored_copy(task, repo, expected, Path(tmp) / "check")
        for spec in task.doctests:
            path, qualname = spec.split(":")
            want = doctest_examples(_read(original / path), qualname)
            probe = [sys.executable, "-c", _DOCTEST_PROBE, _module_of(task, path), qualname]
            proc = _run([*probe, json.dumps(want)], copy, task)
            if proc is None:
                return CheckResult(False, "hidden check: the doctests timed out")
            if proc.returncode != 0:
                return CheckResult(False, f"hidden check: {_last_line(proc)}")
        new = _check_new_tests(task, original, repo, copy)
        if new is not None:
            return new
        script = Path(tmp) / "hidden_check.py"
        script.write_text(task.hidden)
        proc = _run([sys.executable, str(script)], copy, task)
        if proc is None:
            return CheckResult(False, "hidden check timed out")
        if proc.returncode != 0:
            return CheckResult(False, f"hidden check: {_last_line(proc)}")
        if task.hidden_tests:
            proc = _run(task.hidden_tests, copy, task)
            if proc is None:
                return CheckResult(False, "package tests timed out")
            if proc.returncode != 0:
                return CheckResult(
                    False, f"package tests fail: {_last_line(proc, stderr_first=False)}"
                )
    return CheckResult(True, "hidden check passed")
