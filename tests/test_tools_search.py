"""list_dir, find_files and grep: git's view of the files, caps, sorted output."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tools.base import ToolContext, ToolResult
from tools.listing import GlobMatcher, expand_braces
from tools.registry import default_registry
from tools.workspace import Workspace

REGISTRY = default_registry()


def make_tree(root: Path) -> None:
    files = {
        "README.md": "# demo\nhello world\n",
        "src/app.py": "import os\n\ndef main():\n    print('hello')\n",
        "src/util/helpers.py": "def helper():\n    return 'Hello'\n",
        "src/util/data.json": '{"hello": 1}\n',
        "tests/test_app.py": "def test_main():\n    assert True\n",
        "build/out.txt": "hello from build\n",
        "notes.log": "hello log\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "logo.bin").write_bytes(b"\x00hello\x00")
    (root / ".gitignore").write_text("build/\n*.log\n")
    (root / "empty_dir").mkdir()


@pytest.fixture(params=["git", "plain"])
def ctx(request: pytest.FixtureRequest, tmp_path: Path) -> ToolContext:
    root = tmp_path / "ws"
    root.mkdir()
    make_tree(root)
    if request.param == "git":
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return ToolContext(workspace=Workspace(root), artifacts_dir=tmp_path / "art", sandbox="none")


@pytest.fixture
def git_ctx(tmp_path: Path) -> ToolContext:
    root = tmp_path / "ws"
    root.mkdir()
    make_tree(root)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return ToolContext(workspace=Workspace(root), artifacts_dir=tmp_path / "art", sandbox="none")


def call(ctx: ToolContext, name: str, **args: object) -> ToolResult:
    return REGISTRY.invoke(name, args, ctx)


def test_list_dir_shows_a_sorted_tree_without_git_or_ignored_files(git_ctx: ToolContext) -> None:
    res = call(git_ctx, "list_dir")
    assert not res.is_error, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("./")
    body = [ln.split("  ")[0] for ln in lines[1:]]
    assert body == [
        "empty_dir/",
        "src/",
        "src/util/",
        "src/app.py",
        "tests/",
        "tests/test_app.py",
        ".gitignore",
        "README.md",
        "logo.bin",
    ]
    assert "src/util/  (2 files inside)" in res.output
    assert ".git" not in body and "build/" not in body and "notes.log" not in body


def test_list_dir_in_a_plain_directory_skips_dot_git(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f.txt").write_text("x")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref")
    ctx = ToolContext(workspace=Workspace(root), artifacts_dir=tmp_path / "art", sandbox="none")
    out = call(ctx, "list_dir", depth=3).output
    assert "a/f.txt" in out and ".git" not in out


def test_list_dir_subdirectory_depth_cap_and_errors(ctx: ToolContext) -> None:
    res = call(ctx, "list_dir", path="src", depth=1)
    assert "src/util/  (2 files inside)" in res.output and "src/app.py" in res.output
    assert "helpers.py" not in res.output
    assert "is a file" in call(ctx, "list_dir", path="README.md").output
    assert "no such directory" in call(ctx, "list_dir", path="nope").output
    assert call(ctx, "list_dir", path="..").is_error
    assert call(ctx, "list_dir", path=".git").is_error
    assert call(ctx, "list_dir", depth=0).is_error


def test_list_dir_caps_entries(tmp_path: Path) -> None:
    root = tmp_path / "many"
    root.mkdir()
    for i in range(50):
        (root / f"f{i:03}.txt").write_text("x")
    ctx = ToolContext(
        workspace=Workspace(root),
        artifacts_dir=tmp_path / "art",
        settings={"list_dir": {"max_entries": 10}},
        sandbox="none",
    )
    res = call(ctx, "list_dir")
    assert "f009.txt" in res.output and "f010.txt" not in res.output
    assert "40 more entries not shown" in res.output and res.truncated


def test_find_files_globs(ctx: ToolContext) -> None:
    assert call(ctx, "find_files", glob="*.py").output.splitlines() == [
        "src/app.py",
        "src/util/helpers.py",
        "tests/test_app.py",
    ]
    assert call(ctx, "find_files", glob="src/**/*.py").output.splitlines() == [
        "src/app.py",
        "src/util/helpers.py",
    ]
    assert call(ctx, "find_files", glob="src/*.py").output == "src/app.py"
    assert call(ctx, "find_files", glob="*.{json,md}").output.splitlines() == [
        "README.md",
        "src/util/data.json",
    ]
    assert "No files match" in call(ctx, "find_files", glob="*.rs").output
    assert call(ctx, "find_files", glob="../*").is_error


def test_find_files_respects_gitignore_and_caps(git_ctx: ToolContext) -> None:
    assert "No files match" in call(git_ctx, "find_files", glob="*.log").output
    assert "build" not in call(git_ctx, "find_files", glob="**").output
    root = git_ctx.workspace.root
    for i in range(30):
        (root / "gen" / f"m{i:02}.py").parent.mkdir(exist_ok=True)
        (root / "gen" / f"m{i:02}.py").write_text("")
    git_ctx.settings["find_files"] = {"max_results": 5}
    res = call(git_ctx, "find_files", glob="gen/*.py")
    assert res.output.splitlines()[:5] == [f"gen/m{i:02}.py" for i in range(5)]
    assert "25 more not shown" in res.output


def test_grep_shows_path_line_text_sorted_and_skips_binary(git_ctx: ToolContext) -> None:
    res = call(git_ctx, "grep", pattern="hello")
    assert not res.is_error, res.output
    lines = res.output.splitlines()
    assert lines[:3] == [
        "README.md:2: hello world",
        "src/app.py:4:     print('hello')",
        'src/util/data.json:1: {"hello": 1}',
    ]
    assert "build/" not in res.output and "notes.log" not in res.output  # ignored
    assert "logo.bin" not in "\n".join(lines[:-1]) and "1 binary" in res.output


def test_grep_path_glob_regex_and_no_match(ctx: ToolContext) -> None:
    res = call(ctx, "grep", pattern=r"[Hh]ello'", path="src", glob="*.py")
    assert res.output.splitlines() == [
        "src/app.py:4:     print('hello')",
        "src/util/helpers.py:2:     return 'Hello'",
    ]
    res = call(ctx, "grep", pattern="def", path="src/app.py")
    assert res.output == "src/app.py:3: def main():"
    res = call(ctx, "grep", pattern="nothing-like-this")
    assert not res.is_error and res.output.startswith("No matches for")
    res = call(ctx, "grep", pattern="(unclosed")
    assert res.is_error and "invalid regular expression" in res.output
    assert call(ctx, "grep", pattern="x", path="../").is_error


def test_grep_caps_matches(git_ctx: ToolContext) -> None:
    (git_ctx.workspace.root / "many.txt").write_text("match\n" * 500)
    git_ctx.settings["grep"] = {"max_matches": 10}
    res = call(git_ctx, "grep", pattern="^match$")
    assert len([ln for ln in res.output.splitlines() if ln.startswith("many.txt:")]) == 10
    assert "490 more matches not shown" in res.output and res.truncated


def test_grep_stops_a_catastrophic_regex(git_ctx: ToolContext) -> None:
    (git_ctx.workspace.root / "evil.txt").write_text("a" * 40 + "!\n")
    git_ctx.settings["grep"] = {"timeout": 1}
    res = call(git_ctx, "grep", pattern=r"^(a+)+$", path="evil.txt")
    assert res.is_error and "longer than 1 s" in res.output


def test_grep_skips_symlinks_that_lead_outside(git_ctx: ToolContext, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("hello secret\n")
    (git_ctx.workspace.root / "leak.txt").symlink_to(tmp_path / "secret.txt")
    res = call(git_ctx, "grep", pattern="secret")
    assert "hello secret" not in res.output
    assert "symlinks leading outside" in res.output


def test_glob_matcher_semantics() -> None:
    assert expand_braces("a.{x,y}") == ["a.x", "a.y"]
    m = GlobMatcher("**/test_*.py")
    assert m("test_a.py") and m("a/b/test_c.py") and not m("a/b/c.py")
    assert GlobMatcher("src/*")("src/a") and not GlobMatcher("src/*")("src/a/b")
    assert GlobMatcher("./src/**")("src/a/b") and GlobMatcher("[ab].txt")("x/a.txt")
