"""Workspace snapshots on a private ref, on real git repositories."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pilot.errors import ConfigurationError
from pilot.workspace.snapshot import (
    GitRepo,
    diff_snapshots,
    ensure_repository,
    read_git_layout,
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


def _executor(repo: GitRepo, tmp_path: Path):
    from pilot.workspace.executor import GitWorkspace, RegistryExecutor
    from tools.registry import default_registry

    executor = RegistryExecutor(
        registry=default_registry(),
        workspace_root=repo.root,
        artifacts_dir=tmp_path / "artifacts",
        settings={},
        env_allowlist=[],
        sandbox="none",
        work_branch=None,
    )
    return executor, GitWorkspace(repo, "r1", executor.take_written)


def _listing(repo: GitRepo, commit: str) -> str:
    return git(repo.root, "ls-tree", "-r", "--full-tree", commit)


def test_a_file_tool_snapshot_hashes_only_its_paths_and_equals_a_full_one(
    repo: GitRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = repo.root
    (root / "build").mkdir()
    (root / "build" / "tracked.txt").write_text("old\n")
    git(root, "add", "-f", "build/tracked.txt")
    git(root, "-c", "user.name=U", "-c", "user.email=u@x", "commit", "-qm", "tracked ignored")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    executor, workspace = _executor(repo, tmp_path)
    workspace.snapshot("run start")  # the first one is full
    calls = _recording_git(monkeypatch)
    steps = [
        ("write_file", {"path": "deep/new/dir/x.py", "content": "x = 1\n"}),
        ("write_file", {"path": "a.txt", "content": "two\n"}),
        ("edit_file", {"path": "a.txt", "old": "two", "new": "three"}),
        ("write_file", {"path": "build/ignored.txt", "content": "ignored, untracked\n"}),
        ("write_file", {"path": "build/tracked.txt", "content": "ignored but tracked\n"}),
        ("write_file", {"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}),
    ]
    for name, arguments in steps:
        finished = executor.invoke(name, arguments, f"call-{name}")
        assert not finished.is_error, finished.output
        snap, _head = workspace.snapshot(f"after {name}")
    assert not any(call[:1] == ("add",) for call in calls)  # no git add -A: paths only
    monkeypatch.undo()
    full = take_snapshot(repo, "r2", "full")  # another run's index: a full git add -A
    assert _listing(repo, snap) == _listing(repo, full)
    listing = _listing(repo, snap)
    assert "deep/new/dir/x.py" in listing and "build/ignored.txt" not in listing
    assert "100755 blob" in next(line for line in listing.splitlines() if "run.sh" in line)
    assert git(root, "show", f"{snap}:a.txt") == "three"
    # the run's index started from the first snapshot, which (as git add -A into a fresh
    # index) left the ignored file out even though the user's HEAD tracks it
    assert "build/tracked.txt" not in listing
    # unchanged trees reuse the parent (the two ignored writes): start + 4 commits
    assert git(root, "rev-list", "--count", "refs/marathon/r1") == "5"
    assert take_snapshot(repo, "r1", "full refresh") == snap  # the run's own git add -A agrees


def test_a_snapshot_falls_back_to_the_whole_tree_when_paths_are_not_enough(
    repo: GitRepo, tmp_path: Path
) -> None:
    root = repo.root
    take_snapshot(repo, "r1", "start")
    # a .gitignore changes what git sees elsewhere: the new ignore rule must apply
    (root / "logs").mkdir()
    (root / "logs" / "x.log").write_text("log\n")
    take_snapshot(repo, "r1", "log")
    (root / ".gitignore").write_text("build/\nlogs/\n")
    snap = take_snapshot(repo, "r1", "ignore logs", paths=[".gitignore"])
    assert "logs/x.log" in _listing(repo, snap)  # tracked in the snapshot already: kept
    (root / "logs" / "y.log").write_text("new\n")
    snap = take_snapshot(repo, "r1", "y", paths=[])
    # paths=[] says nothing changed: the snapshot is the parent
    assert snap == git(root, "rev-parse", "refs/marathon/r1")
    # a nested repository is a gitlink for git add -A: the full refresh decides
    nested = root / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "f.txt").write_text("f\n")
    git(nested, "add", "f.txt")
    git(nested, "-c", "user.name=U", "-c", "user.email=u@x", "commit", "-qm", "nested")
    snap = take_snapshot(repo, "r1", "nested", paths=["vendor/lib/f.txt"])
    assert "160000 commit" in _listing(repo, snap)  # the gitlink, as git add -A records it
    assert take_snapshot(repo, "r1", "full refresh") == snap
    # no snapshot yet for this run: a full one
    (root / "b.txt").write_text("b\n")
    first = take_snapshot(repo, "r4", "first", paths=["b.txt"])
    assert _listing(repo, first) == _listing(repo, take_snapshot(repo, "r5", "full"))


def test_files_over_the_size_cap_are_left_out_of_snapshots_and_left_alone_by_restore(
    repo: GitRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A huge file a command wrote is never hashed into the repository at every step: it is
    named in the snapshot's message, and a restore neither deletes nor rewrites it."""
    from pilot.workspace import snapshot

    monkeypatch.setattr(snapshot, "MAX_FILE_BYTES", 1024 * 1024)
    base = take_snapshot(repo, "r1", "base")
    dump = repo.root / "dump.bin"
    with dump.open("wb") as fh:
        fh.truncate(3 * 1024 * 1024)  # sparse: no disk used
    (repo.root / "small.txt").write_text("kept\n")
    shot = take_snapshot(repo, "r1", "after")
    files = git(repo.root, "ls-tree", "-r", "--name-only", shot).split()
    assert "small.txt" in files and "dump.bin" not in files
    assert "dump.bin (3 MB)" in git(repo.root, "log", "-1", "--format=%B", shot)
    restore_snapshot(repo, "r1", base, repo.head())
    assert dump.stat().st_size == 3 * 1024 * 1024, "a restore leaves it as it is"
    assert not (repo.root / "small.txt").exists(), "files under the cap are restored as before"


def test_a_linked_index_folder_is_replaced_not_written_through(
    repo: GitRepo, tmp_path: Path
) -> None:
    """A command can write .git: a link at .git/marathon must not make the pilot write the
    run's index outside the repository."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo.root / ".git" / "marathon").symlink_to(outside)
    (repo.root / "b.txt").write_text("b\n")
    take_snapshot(repo, "r1", "after")
    assert list(outside.iterdir()) == []
    assert (repo.root / ".git" / "marathon" / "r1.index").is_file()


def test_a_diff_between_snapshots_leaves_build_artefacts_out(repo: GitRepo) -> None:
    """The ``.pyc`` files a test run leaves in a repository without a ``.gitignore`` are kept
    in the snapshot (a restore brings them back) but are no change to show."""
    root = repo.root
    base = take_snapshot(repo, "r1", "base")
    (root / "a.txt").write_text("two\n")
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\x00compiled")
    latest = take_snapshot(repo, "r1", "after tests")
    assert "pkg/__pycache__/mod.cpython-311.pyc" in git(
        root, "ls-tree", "-r", "--name-only", latest
    )
    stat = diff_snapshots(repo, base, latest, stat=True)
    assert "a.txt" in stat and "pyc" not in stat and "1 file changed" in stat
    assert "pyc" not in diff_snapshots(repo, base, latest)


def test_the_git_layout_is_read_as_git_reports_it(repo: GitRepo, tmp_path: Path) -> None:
    # A checkout, a linked worktree named by a relative path, and a folder inside a checkout
    # (no .git of its own: git is asked), each against git's own answer.
    git(repo.root, "worktree", "add", "-q", "-b", "side", str(tmp_path / "linked"))
    linked = tmp_path / "linked"
    dot = linked / ".git"
    gitdir = Path(dot.read_text().removeprefix("gitdir:").strip())
    dot.write_text(f"gitdir: {Path('..') / gitdir.relative_to(tmp_path)}\n")
    (repo.root / "sub").mkdir()
    for root in (repo.root, linked, repo.root / "sub"):
        fresh = GitRepo(root)
        assert fresh.is_repo()
        assert fresh.git_dir == Path(git(root, "rev-parse", "--absolute-git-dir")).resolve()
        common = Path(git(root, "rev-parse", "--git-common-dir"))
        assert fresh.common_dir == (common if common.is_absolute() else root / common).resolve()
    assert read_git_layout(repo.root / "sub") is None
    assert read_git_layout(linked) == (gitdir.resolve(), (repo.root / ".git").resolve())
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / ".git").write_text("not a pointer\n")
    assert read_git_layout(tmp_path / "plain") is None


def _recording_git(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []
    real_git = GitRepo.git

    def recording(self: GitRepo, *args: str, **kwargs: object) -> str:
        calls.append(args)
        return real_git(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(GitRepo, "git", recording)
    return calls


def test_a_commands_snapshot_hashes_only_what_the_kernel_saw_change(
    repo: GitRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = repo.root
    (root / "src" / "deep").mkdir(parents=True)
    (root / "src" / "deep" / "m.py").write_text("x = 1\n")
    (root / "gone.txt").write_text("bye\n")
    (root / "tool.sh").write_text("#!/bin/sh\n")
    executor, workspace = _executor(repo, tmp_path)
    workspace.snapshot("run start")  # the first is full; the watch starts with it
    assert workspace.watch is not None
    calls = _recording_git(monkeypatch)
    commands = [
        "echo 'y = 2' >> src/deep/m.py",
        "rm gone.txt",
        "chmod +x tool.sh",
        "mv a.txt b.txt",
        "mkdir -p build && echo junk > build/out.o",  # an ignored folder: no snapshot change
    ]
    for k, command in enumerate(commands):
        finished = executor.invoke("run", {"command": command}, f"r{k}")
        assert not finished.is_error, finished.output
        snap, _head = workspace.snapshot(f"after {command}")
    assert not any(call[:1] == ("add",) for call in calls)  # never git add -A: the paths only
    monkeypatch.undo()
    full = take_snapshot(repo, "other", "full")  # another run's index: a whole-tree git add -A
    assert _listing(repo, snap) == _listing(repo, full)
    listing = _listing(repo, snap)
    assert "gone.txt" not in listing and "a.txt" not in listing and "b.txt" in listing
    assert "100755 blob" in next(line for line in listing.splitlines() if "tool.sh" in line)
    assert git(root, "show", f"{snap}:src/deep/m.py") == "x = 1\ny = 2"
    workspace.close()


def test_a_folder_made_or_removed_by_a_command_refreshes_the_whole_tree(
    repo: GitRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    executor, workspace = _executor(repo, tmp_path)
    workspace.snapshot("run start")
    calls = _recording_git(monkeypatch)
    made = executor.invoke("run", {"command": "mkdir -p n/m && echo 1 > n/m/f.txt"}, "r1")
    assert not made.is_error, made.output
    snap, _ = workspace.snapshot("after mkdir")
    assert any(call[:1] == ("add",) for call in calls)  # its files came unseen: git looks
    assert "n/m/f.txt" in _listing(repo, snap)
    calls.clear()
    # the new folder is watched from then on: a write in it is seen by path again
    edited = executor.invoke("run", {"command": "echo 2 >> n/m/f.txt"}, "r2")
    assert not edited.is_error, edited.output
    snap, _ = workspace.snapshot("after edit")
    assert not any(call[:1] == ("add",) for call in calls)
    assert git(repo.root, "show", f"{snap}:n/m/f.txt") == "1\n2"
    removed = executor.invoke("run", {"command": "rm -r n"}, "r3")
    assert not removed.is_error, removed.output
    snap, _ = workspace.snapshot("after rm -r")
    assert any(call[:1] == ("add",) for call in calls)
    assert "n/m/f.txt" not in _listing(repo, snap)
    workspace.close()


def test_a_folder_moved_inside_the_tree_is_watched_under_its_new_name(
    repo: GitRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo.root / "old" / "in").mkdir(parents=True)
    (repo.root / "old" / "in" / "f.txt").write_text("1\n")
    executor, workspace = _executor(repo, tmp_path)
    workspace.snapshot("run start")
    moved = executor.invoke("run", {"command": "mv old new"}, "r1")
    assert not moved.is_error, moved.output
    workspace.snapshot("after mv")  # a folder moved: the whole tree
    calls = _recording_git(monkeypatch)
    edited = executor.invoke("run", {"command": "echo 2 >> new/in/f.txt"}, "r2")
    assert not edited.is_error, edited.output
    snap, _ = workspace.snapshot("after edit")
    assert not any(call[:1] == ("add",) for call in calls)
    assert git(repo.root, "show", f"{snap}:new/in/f.txt") == "1\n2"
    assert "old/" not in _listing(repo, snap)
    workspace.close()


def test_a_change_through_a_hard_link_from_outside_waits_for_the_next_full_snapshot(
    repo: GitRepo, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    executor, workspace = _executor(repo, tmp_path)
    workspace.snapshot("run start")
    made = executor.invoke("run", {"command": f"ln a.txt {outside}"}, "r1")
    assert not made.is_error, made.output
    workspace.snapshot("after ln")
    outside.write_text("changed outside\n")  # no event reaches a watched folder
    seen, _ = workspace.snapshot("after the outside write")
    assert git(repo.root, "show", f"{seen}:a.txt") == "one"
    workspace.close()
    _, again = _executor(repo, tmp_path)  # a new sitting: its first snapshot is full
    full, _ = again.snapshot("resumed")
    assert git(repo.root, "show", f"{full}:a.txt") == "changed outside"
    again.close()


def test_after_a_restore_the_next_snapshot_is_full_and_the_watch_starts_again(
    repo: GitRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    executor, workspace = _executor(repo, tmp_path)
    first, head = workspace.snapshot("run start")
    executor.invoke("run", {"command": "echo two >> a.txt"}, "r1")
    workspace.snapshot("after r1")
    workspace.restore(first, head)
    assert workspace.watch is None
    calls = _recording_git(monkeypatch)
    executor.invoke("run", {"command": "echo three >> a.txt"}, "r2")
    snap, _ = workspace.snapshot("after r2")
    assert any(call[:1] == ("add",) for call in calls)  # full: the restore's writes unseen
    assert git(repo.root, "show", f"{snap}:a.txt") == "one\nthree"
    calls.clear()
    executor.invoke("run", {"command": "echo four >> a.txt"}, "r3")
    snap, _ = workspace.snapshot("after r3")
    assert not any(call[:1] == ("add",) for call in calls)  # watched again
    assert git(repo.root, "show", f"{snap}:a.txt") == "one\nthree\nfour"
    workspace.close()
