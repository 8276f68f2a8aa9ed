"""Workspace snapshots on a private ref, on real git repositories."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pilot.errors import ConfigurationError
from pilot.snapshot import (
    GitRepo,
    diff_snapshots,
    ensure_repository,
    restore_snapshot,
    start_work_branch,
    take_snapshot,
    tree_of,
)


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    root = tmp_path / "ws"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("one\n")
    (root / ".gitignore").write_text("build/\n")
    git(root, "add", "-A")
    git(
        root,
        "-c",
        "user.name=U",
        "-c",
        "user.email=u@x",
        "commit",
        "-qm",
        "init",
    )
    return GitRepo(root)


def test_snapshot_never_touches_user_head_index_or_branches(repo: GitRepo) -> None:
    root = repo.root
    (root / "staged.txt").write_text("s\n")
    git(root, "add", "staged.txt")
    before = (git(root, "rev-parse", "HEAD"), git(root, "status", "--porcelain"))
    branches = git(root, "branch", "--list")
    (root / "new.txt").write_text("n\n")
    snap = take_snapshot(repo, "r1", "after tool")
    assert git(root, "rev-parse", "HEAD") == before[0]
    assert git(root, "status", "--porcelain") == before[1] + "\n?? new.txt"
    assert git(root, "branch", "--list") == branches
    files = git(root, "ls-tree", "-r", "--name-only", snap).split()
    assert {"a.txt", "staged.txt", "new.txt", ".gitignore"} == set(files)
    assert git(root, "rev-parse", "refs/marathon/r1") == snap


def test_unchanged_tree_reuses_the_last_snapshot(repo: GitRepo) -> None:
    first = take_snapshot(repo, "r1", "one")
    assert take_snapshot(repo, "r1", "two") == first
    (repo.root / "a.txt").write_text("two\n")
    second = take_snapshot(repo, "r1", "three")
    assert second != first
    assert git(repo.root, "rev-parse", f"{second}^") == first


def test_restore_undoes_partial_effects_but_keeps_ignored_files(repo: GitRepo) -> None:
    root = repo.root
    head = start_work_branch(repo, "marathon/r1")
    snap = take_snapshot(repo, "r1", "base")
    (root / "a.txt").write_text("half-written")
    (root / "junk.txt").write_text("created by the interrupted tool")
    (root / "sub").mkdir()
    (root / "sub" / "deep.txt").write_text("x")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_text("ignored")
    restore_snapshot(repo, "r1", snap, head)
    assert (root / "a.txt").read_text() == "one\n"
    assert not (root / "junk.txt").exists()
    assert not (root / "sub" / "deep.txt").exists()
    assert (root / "build" / "out.o").exists()
    assert tree_of(repo, take_snapshot(repo, "r1", "again")) == tree_of(repo, snap)


def test_restore_moves_the_work_branch_back_after_an_interrupted_commit(repo: GitRepo) -> None:
    root = repo.root
    head = start_work_branch(repo, "marathon/r2")
    snap = take_snapshot(repo, "r2", "base")
    (root / "a.txt").write_text("changed\n")
    git(root, "-c", "user.name=U", "-c", "user.email=u@x", "commit", "-qam", "agent")
    assert repo.head() != head
    restore_snapshot(repo, "r2", snap, head)
    assert repo.head() == head
    assert git(root, "rev-parse", "main") == head
    assert git(root, "status", "--porcelain") == ""


def test_work_branch_leaves_the_user_branch_alone(repo: GitRepo) -> None:
    main_head = git(repo.root, "rev-parse", "main")
    start_work_branch(repo, "marathon/r3")
    assert repo.current_branch() == "marathon/r3"
    assert git(repo.root, "rev-parse", "main") == main_head


def test_diff_between_snapshots(repo: GitRepo) -> None:
    base = take_snapshot(repo, "r4", "base")
    (repo.root / "a.txt").write_text("one\ntwo\n")
    latest = take_snapshot(repo, "r4", "later")
    assert "+two" in diff_snapshots(repo, base, latest)
    assert "a.txt" in diff_snapshots(repo, base, latest, stat=True)


def test_non_repository_is_refused_or_initialised(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "f.txt").write_text("x")
    with pytest.raises(ConfigurationError, match=r"not a git repository.*workspace\.init"):
        ensure_repository(plain, init=False)
    repo = ensure_repository(plain, init=True)
    assert repo.head() is not None
    with pytest.raises(ConfigurationError, match="does not exist"):
        ensure_repository(tmp_path / "missing", init=True)
