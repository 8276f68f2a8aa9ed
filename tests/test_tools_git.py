"""git_status, git_diff, git_commit on real temporary repositories with no git identity."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tools.base import ToolContext, ToolResult
from tools.registry import default_registry
from tools.sandbox import bwrap_status
from tools.workspace import Workspace

REGISTRY = default_registry()
GIT_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin"}


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True, env=GIT_ENV
    ).stdout


@pytest.fixture(params=["none", "auto"])
def ctx(request: pytest.FixtureRequest, tmp_path: Path) -> ToolContext:
    required = os.environ.get("MARATHON_REQUIRE_SANDBOX")  # set by CI where bwrap works
    if request.param == "auto" and not bwrap_status().available and not required:
        pytest.skip(f"no working bwrap: {bwrap_status().reason}")
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "work")
    (root / "a.txt").write_text("one\ntwo\n")
    return ToolContext(
        workspace=Workspace(root),
        artifacts_dir=tmp_path / "art",
        sandbox=request.param,
        work_branch="work",
        call_id="c9",
    )


def call(ctx: ToolContext, name: str, **args: object) -> ToolResult:
    return REGISTRY.invoke(name, args, ctx)


def test_commit_without_any_configured_identity_uses_the_agent_identity(ctx: ToolContext) -> None:
    res = call(ctx, "git_commit", message="Add a.txt\n\nDetails here.")
    assert not res.is_error, res.output
    assert res.output.startswith("Committed ") and "on work: Add a.txt" in res.output
    assert "1 file changed" in res.output
    root = ctx.workspace.root
    assert git(root, "log", "-1", "--format=%an <%ae>|%cn|%B").startswith(
        "Marathon Agent <agent@marathon.local>|Marathon Agent|Add a.txt\n\nDetails here."
    )


def test_nothing_to_commit_is_a_normal_answer(ctx: ToolContext) -> None:
    call(ctx, "git_commit", message="first")
    res = call(ctx, "git_commit", message="again")
    assert not res.is_error and res.output.startswith("Nothing to commit")


def test_commit_stages_new_modified_and_deleted_files(ctx: ToolContext) -> None:
    root = ctx.workspace.root
    (root / "gone.txt").write_text("x")
    call(ctx, "git_commit", message="base")
    (root / "a.txt").write_text("changed\n")
    (root / "gone.txt").unlink()
    (root / "new").mkdir()
    (root / "new" / "n.txt").write_text("n\n")
    res = call(ctx, "git_commit", message="second")
    assert "3 files changed" in res.output, res.output
    assert git(root, "status", "--porcelain") == ""


def test_commit_refused_off_the_work_branch(ctx: ToolContext) -> None:
    root = ctx.workspace.root
    call(ctx, "git_commit", message="base")
    git(root, "switch", "-q", "-c", "other")
    (root / "a.txt").write_text("edit\n")
    res = call(ctx, "git_commit", message="sneaky")
    assert res.is_error and "on branch 'other'" in res.output and "'work'" in res.output
    assert "git switch work" in res.output
    git(root, "switch", "-q", "--detach")
    res = call(ctx, "git_commit", message="sneaky")
    assert res.is_error and "detached" in res.output


def test_commit_skips_hooks_the_agent_may_have_planted(ctx: ToolContext, tmp_path: Path) -> None:
    root = ctx.workspace.root
    marker = tmp_path / "hook-ran"
    hook = root / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    hook.chmod(0o755)
    git(root, "config", "core.fsmonitor", f"touch {marker}; false")
    res = call(ctx, "git_commit", message="with hook present")
    assert not res.is_error, res.output
    assert call(ctx, "git_status").output
    assert not marker.exists()


def test_diff_sees_a_same_size_edit_that_only_git_s_racy_check_can_catch(
    ctx: ToolContext,
) -> None:
    """A same-size edit in the second the index was written has the stat the index recorded:
    git looks at the content only because the index is not older than the file. The diff's
    throwaway index must keep the real index's time, or the edit vanishes from the diff."""
    root = ctx.workspace.root
    call(ctx, "git_commit", message="base")
    git(root, "config", "core.trustctime", "false")  # the ctime would give the edit away
    a = root / "a.txt"
    before = a.stat()
    a.write_text("one\nTWO\n")
    os.utime(a, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.utime(root / ".git" / "index", ns=(before.st_atime_ns, before.st_mtime_ns))
    assert "-two\n+TWO" in call(ctx, "git_diff").output


def test_status_shows_branch_and_short_changes(ctx: ToolContext) -> None:
    res = call(ctx, "git_status")
    assert res.output.splitlines() == ["## No commits yet on work", "?? a.txt"]
    call(ctx, "git_commit", message="base")
    assert call(ctx, "git_status").output == "## work\nworking tree clean (nothing to commit)"


def test_diff_includes_untracked_files_without_touching_the_index(ctx: ToolContext) -> None:
    root = ctx.workspace.root
    res = call(ctx, "git_diff")  # no commit yet: against the empty tree
    assert "+++ b/a.txt" in res.output and "+one" in res.output
    call(ctx, "git_commit", message="base")
    (root / "a.txt").write_text("one\nTWO\n")
    (root / "fresh.py").write_text("print('new')\n")
    res = call(ctx, "git_diff")
    assert "-two\n+TWO" in res.output
    assert "new file mode" in res.output and "+print('new')" in res.output
    assert "?? fresh.py" in git(root, "status", "--porcelain")  # still untracked
    assert not list((root / ".git").glob("marathon-diff-index-*"))
    only = call(ctx, "git_diff", path="fresh.py").output
    assert "fresh.py" in only and "a.txt" not in only
    call(ctx, "git_commit", message="more")
    assert call(ctx, "git_diff").output == "No changes since the last commit."


def test_diff_is_capped_with_the_full_diff_kept(ctx: ToolContext) -> None:
    call(ctx, "git_commit", message="base")
    root = ctx.workspace.root
    (root / "big.txt").write_text("".join(f"line {i}\n" for i in range(5000)))
    (root / "a.txt").write_text("changed\n")
    res = call(ctx, "git_diff")
    assert res.truncated and "more diff lines not shown" in res.output
    assert "Files changed:" in res.output and "big.txt" in res.output.split("Files changed:")[1]
    [artifact] = res.artifacts
    assert artifact.name == "diff-c9.diff" and "line 4999" in Path(artifact.path).read_text()


def test_diff_refuses_paths_outside(ctx: ToolContext) -> None:
    assert call(ctx, "git_diff", path="../x").is_error
    assert call(ctx, "git_diff", path=".git").is_error


def test_git_tools_outside_a_repository_say_so(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    ctx = ToolContext(workspace=Workspace(root), artifacts_dir=tmp_path / "a", sandbox="none")
    for name, args in (("git_status", {}), ("git_diff", {}), ("git_commit", {"message": "m"})):
        res = REGISTRY.invoke(name, args, ctx)
        assert res.is_error and "not a git repository" in res.output, (name, res.output)


def test_git_diff_since_start_includes_committed_work(tmp_path):
    import subprocess

    from tools.base import ToolContext
    from tools.registry import default_registry
    from tools.workspace import Workspace

    root = tmp_path / "ws"
    root.mkdir()
    env_args = ["-c", "user.name=T", "-c", "user.email=t@x"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / "a.txt").write_text("one\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", *env_args, "commit", "-qm", "base"], cwd=root, check=True)
    base = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()
    (root / "a.txt").write_text("two\n")
    subprocess.run(["git", *env_args, "commit", "-qam", "work"], cwd=root, check=True)
    ctx = ToolContext(
        workspace=Workspace(root), artifacts_dir=tmp_path / "art", sandbox="none", base_commit=base
    )
    registry = default_registry()
    assert "No changes since the last commit" in registry.invoke("git_diff", {}, ctx).output
    whole = registry.invoke("git_diff", {"since_start": True}, ctx).output
    assert "-one" in whole and "+two" in whole


def test_commit_never_stages_build_artefacts_even_without_a_gitignore(ctx: ToolContext) -> None:
    root = ctx.workspace.root
    assert not (root / ".gitignore").exists()
    for rel in [
        "pkg/__pycache__/mod.cpython-311.pyc",
        "pkg/__pycache__/__init__.cpython-311.pyc",
        "top.pyc",
        ".pytest_cache/v/cache/nodeids",
        "web/node_modules/left-pad/index.js",
        "pkg.egg-info/PKG-INFO",
        "env/pyvenv.cfg",
        "env/lib/site.py",
    ]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n")
    (root / "pkg" / "mod.py").write_text("VALUE = 1\n")
    res = call(ctx, "git_commit", message="add mod")
    assert not res.is_error, res.output
    assert sorted(git(root, "ls-files").split()) == ["a.txt", "pkg/mod.py"]
    assert "Left out 8 build artefact file(s), never committed" in res.output
