"""Workspace snapshots on a private ref, and the run's work branch.

After each mutating tool the working tree (every file git would not ignore) is written as a
commit on ``refs/marathon/<run-id>`` through a separate index file, so the user's HEAD, index and
branches are never touched by a snapshot. On resume after a crash inside a tool, the tree is put
back to the last snapshot, which makes re-running that tool safe: its partial effects are gone.

A snapshot costs what changed, not the repository's size. When the caller knows every path the
tool wrote (the file tools), the new tree is the last snapshot's with those paths replaced: their
blobs and the trees above them are written in-process with libgit2 (``pygit2``), a handful of
objects whatever the repository holds. Otherwise (a command may have written anything) ``git add
-A`` refreshes the run's private index, whose stat cache and untracked cache let git skip every
file and directory unchanged since the last snapshot, and ``git write-tree`` reuses the index's
cached subtrees; the commit and the ref are written in-process.

Ignored files (build outputs, caches, virtualenvs) are neither snapshotted nor restored, and
neither are untracked files over ``MAX_FILE_BYTES`` (a 20 GB dump a command wrote would be
hashed into the repository): they are left as they are, and the snapshot's commit message
names them. A restore leaves them as the interrupted tool left them (README, "What a run
guarantees").

A run works in its own linked worktree (``add_worktree``) on its own branch, so the user's
checkout is never touched; or, when its workflow says ``workspace.in_place``, in the user's
checkout switched to the run's branch (``start_work_branch``).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pilot.errors import ConfigurationError
from pilot.failpoints import kill_at
from tools.git import artefact_excludes
from tools.gitcmd import SAFE_GIT_CONFIG

AGENT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Marathon",
    "GIT_AUTHOR_EMAIL": "marathon@localhost",
    "GIT_COMMITTER_NAME": "Marathon",
    "GIT_COMMITTER_EMAIL": "marathon@localhost",
}


NO_CONTENT_COMMANDS = frozenset(
    {"rev-parse", "symbolic-ref", "update-ref", "commit-tree", "write-tree", "init"}
)
"""Git commands that never read or write a file's content, so never run a filter: they need
no ``_filter_overrides`` (one ``git config`` process fewer each)."""


class GitError(ConfigurationError):
    """A git command failed; the message carries git's own words."""


@dataclass(frozen=True)
class GitRepo:
    root: Path
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    """The git directory and the libgit2 handle, found once per ``GitRepo``."""

    def git(
        self,
        *args: str,
        index_file: Path | None = None,
        check: bool = True,
        input: str = "",
        config: tuple[str, ...] | None = None,
    ) -> str:
        """Run git in the workspace. ``config``: the ``-c`` options to neutralise the
        workspace's filters (``_filter_overrides``), when the caller already has them."""
        if config is None:
            config = () if args and args[0] in NO_CONTENT_COMMANDS else self._filter_overrides()
        env = {
            **os.environ,
            **AGENT_IDENTITY,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            # No refresh of the checkout's index as a side effect (``git status`` rewrites it
            # otherwise): the user's index stays byte for byte as it was.
            "GIT_OPTIONAL_LOCKS": "0",
        }
        for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
            env.pop(name, None)
        if index_file is not None:
            env["GIT_INDEX_FILE"] = str(index_file)
        proc = subprocess.run(
            [
                "git",
                *SAFE_GIT_CONFIG,
                *config,
                *args,
            ],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            input=input,
        )
        if check and proc.returncode != 0:
            raise GitError(
                f"git {' '.join(args)} failed in {self.root}: {proc.stderr.strip() or proc.stdout}"
            )
        return proc.stdout.strip()

    def _filter_overrides(self) -> tuple[str, ...]:
        """Neutralise clean/smudge filters the agent may have configured in .git/config.

        The agent can write .git/config through its (sandboxed) shell; a filter command there
        would otherwise run unsandboxed when the harness snapshots the tree.
        """
        proc = subprocess.run(
            ["git", "config", "--local", "--name-only", "--get-regexp", r"^filter\."],
            cwd=self.root,
            capture_output=True,
            text=True,
            env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull},
        )
        overrides: list[str] = []
        for key in sorted({line.rsplit(".", 1)[0] for line in proc.stdout.split()}):
            for part in ("clean", "smudge", "process"):
                overrides += ["-c", f"{key}.{part}="]
            overrides += ["-c", f"{key}.required=false"]
        return tuple(overrides)

    @property
    def git_dir(self) -> Path:
        cached = self._cache.get("git_dir")
        if cached is None:
            layout = self._layout()
            cached = self._cache["git_dir"] = (
                layout[0] if layout else Path(self.git("rev-parse", "--absolute-git-dir"))
            )
        return cached

    def _layout(self) -> tuple[Path, Path] | None:
        """The git directory and the shared one, read from ``root/.git`` (kept once found;
        None when it is not there: git is asked)."""
        layout = self._cache.get("layout")
        if layout is None:
            layout = self._cache["layout"] = read_git_layout(self.root)
        return layout  # type: ignore[no-any-return]

    def lib(self) -> Any:
        """The repository through libgit2 (``pygit2.Repository``), opened once. libgit2 runs
        no program named in the repository's config (no filters, hooks or fsmonitor)."""
        handle = self._cache.get("lib")
        if handle is None:
            import pygit2  # here: only snapshots need it

            handle = self._cache["lib"] = pygit2.Repository(str(self.root))
        return handle

    @property
    def common_dir(self) -> Path:
        """The repository's shared git directory (a linked worktree's ``git_dir`` is not)."""
        layout = self._layout()
        if layout is not None:
            return layout[1]
        path = Path(self.git("rev-parse", "--git-common-dir"))
        return path if path.is_absolute() else (self.root / path).resolve()

    def is_repo(self) -> bool:
        """Whether ``root`` is in a git work tree (a ``.git`` of its own is read, not run)."""
        if self._layout() is not None:
            return True
        return (
            subprocess.run(
                ["git", "rev-parse", "--is-inside-work-tree"],
                cwd=self.root,
                capture_output=True,
            ).returncode
            == 0
        )

    def head(self) -> str | None:
        """The commit HEAD points at (None on an unborn branch), read in-process: every
        snapshot records it."""
        import pygit2

        try:
            return str(self.lib().head.target)
        except pygit2.GitError:
            return None

    def current_branch(self) -> str | None:
        """The branch HEAD names (None when detached), read in-process."""
        import pygit2

        head = self.lib().references.get("HEAD")
        if head is None or head.type != pygit2.enums.ReferenceType.SYMBOLIC:
            return None
        return str(head.target).removeprefix("refs/heads/") or None


def check_repository(root: Path, *, init: bool) -> GitRepo | None:
    """Refuse a workspace a run cannot use, changing nothing: the repository, or None when
    ``init`` allows making one there."""
    if not root.is_dir():
        raise ConfigurationError(
            f"workspace {root} does not exist or is not a directory; create it or pass another "
            "path (e.g. --param repo=PATH)"
        )
    repo = GitRepo(root)
    if repo.is_repo():
        top = Path(repo.git("rev-parse", "--show-toplevel")).resolve()
        if top != root.resolve():
            raise ConfigurationError(
                f"workspace {root} is inside the git repository {top} but not its top level; "
                "use the repository's root as the workspace"
            )
        return repo
    if not init:
        raise ConfigurationError(
            f"workspace {root} is not a git repository; run `git init` there, or set "
            "`workspace.init: true` in the workflow to let Marathon do it"
        )
    return None


def ensure_repository(root: Path, *, init: bool) -> GitRepo:
    """The workspace must be a git repository (snapshots and the work branch need one)."""
    repo = check_repository(root, init=init)
    if repo is not None:
        return repo
    repo = GitRepo(root)
    repo.git("init", "-q")
    repo.git("add", "-A")
    repo.git("commit", "-q", "--allow-empty", "-m", "Initial state (marathon: git init)")
    return repo


def start_work_branch(repo: GitRepo, branch: str) -> str | None:
    """Switch the workspace to the run's own branch (created from HEAD) and return HEAD.

    Uncommitted changes are carried over, as ``git switch -c`` does; the user's branch is
    left where it was.
    """
    if repo.head() is None:
        repo.git("commit", "-q", "--allow-empty", "-m", "Initial commit (marathon)")
    if repo.current_branch() != branch:
        exists = repo.git("rev-parse", "--verify", "-q", f"refs/heads/{branch}", check=False)
        if exists:
            repo.git("switch", "-q", branch)
        else:
            repo.git("switch", "-q", "-c", branch)
    return repo.head()


def uncommitted_changes(repo: GitRepo) -> list[str]:
    """What ``git status`` lists in the checkout (changed, staged, untracked; ignored files
    are not listed), read without refreshing its index."""
    out = repo.git("status", "--porcelain", "-z", "--untracked-files=normal")
    # "XY path" entries (the output's first space may be stripped, so split at the first one)
    entries = (entry.lstrip(" ") for entry in out.split("\0"))
    return [entry.split(" ", 1)[1] for entry in entries if " " in entry]


def refuse_uncommitted(source: GitRepo, changes: list[str] | None = None) -> None:
    """A run in its own worktree starts from the checkout's last commit: uncommitted changes
    there would be silently left out, so they are refused with what they are."""
    changes = uncommitted_changes(source) if changes is None else changes
    if not changes:
        return
    listed = ", ".join(changes[:5]) + (f" and {len(changes) - 5} more" if changes[5:] else "")
    raise ConfigurationError(
        f"the checkout {source.root} has uncommitted changes ({listed}); the run works in "
        "its own worktree from the last commit and would not see them. Commit or stash "
        "them, or set `workspace.carry_changes: true` in the workflow to copy them into "
        "the run's worktree"
    )


def _empty_root_commit(repo: GitRepo) -> str:
    """A commit of the empty tree, on no branch: the start of a run in a repository without
    commits, so that the user's unborn branch stays unborn."""
    tree = repo.git("hash-object", "-t", "tree", "-w", "--stdin")
    return repo.git("commit-tree", tree, "-m", "Initial commit (marathon)")


def _worktree_admin_dirs(source: GitRepo, path: Path) -> list[Path]:
    """The repository's records (``.git/worktrees/<name>``) of a worktree at ``path``."""
    found = []
    folder = source.common_dir / "worktrees"
    if not folder.is_dir():
        return found
    target = str(path / ".git")
    for admin in folder.iterdir():
        try:
            gitdir = (admin / "gitdir").read_text().strip()
        except OSError:
            continue
        if gitdir == target or os.path.realpath(gitdir) == os.path.realpath(target):
            found.append(admin)
    return found


def _worktree_complete(source: GitRepo, path: Path, branch: str) -> bool:
    admins = _worktree_admin_dirs(source, path)
    if len(admins) != 1 or (admins[0] / "locked").exists() or not (path / ".git").is_file():
        return False  # git keeps "locked" until the checkout is done: a kill left it half-made
    repo = GitRepo(path)
    return repo.current_branch() == branch and bool(
        repo.git("rev-parse", "--verify", "-q", "HEAD", check=False)
    )


def add_worktree(
    source: GitRepo, path: Path, branch: str, *, carry_changes: bool, check: bool = True
) -> GitRepo:
    """The run's own worktree at ``path`` on ``branch`` (created from the checkout's HEAD).

    Idempotent, so that a start-up killed anywhere is simply done again on resume: a
    complete worktree is kept, a half-made one (a kill inside ``git worktree add``) is
    removed and made again. Uncommitted changes in the user's checkout are refused unless
    ``carry_changes``: then they are copied into the worktree (uncommitted there too),
    read through a private index, so the checkout's own index is never written.
    ``check=False`` (a run's worktree made again on resume) neither looks at nor copies them.
    """
    changes = uncommitted_changes(source) if check else []
    if changes and not carry_changes:
        refuse_uncommitted(source, changes)
    if not _worktree_complete(source, path, branch):
        for admin in _worktree_admin_dirs(source, path):
            shutil.rmtree(admin, ignore_errors=True)
        shutil.rmtree(path, ignore_errors=True)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.parent.chmod(0o700)  # beside the store: private like the rest of it
        exists = source.git("rev-parse", "--verify", "-q", f"refs/heads/{branch}", check=False)
        kill_at("worktree_add")
        if exists:
            source.git("worktree", "add", "-q", str(path), branch)
        else:
            start = source.head() or _empty_root_commit(source)
            source.git("worktree", "add", "-q", "-b", branch, str(path), start)
        kill_at("worktree_added")
    repo = GitRepo(path)
    if changes and carry_changes:
        _carry_changes(source, repo)
    return repo


def _carry_changes(source: GitRepo, repo: GitRepo) -> None:
    """Make the worktree's files those of the checkout (tracked changes, deletions and
    untracked files; not ignored ones), leaving both real indexes alone."""
    scratch = repo.git_dir / "marathon" / "carry.index"
    scratch.parent.mkdir(parents=True, exist_ok=True)
    source.git("read-tree", "HEAD", index_file=scratch)
    source.git("add", "-A", ".", index_file=scratch)
    tree = source.git("write-tree", index_file=scratch)
    repo.git("read-tree", "HEAD", index_file=scratch)
    repo.git("read-tree", "--reset", "-u", tree, index_file=scratch)
    scratch.unlink(missing_ok=True)


def remove_worktree(source: GitRepo, path: Path) -> bool:
    """Remove a run's worktree (its files and the repository's record of it); the branch
    stays. True when there was one."""
    admins = _worktree_admin_dirs(source, path)
    found = bool(admins) or path.exists()
    for admin in admins:
        shutil.rmtree(admin, ignore_errors=True)
    shutil.rmtree(path, ignore_errors=True)
    return found


def clear_stale_locks(repo: GitRepo, run_id: str) -> list[Path]:
    """Lock files a killed git left in what only this run uses: its private snapshot index
    and ref and, for a run's own worktree, the worktree's index. Call only while holding the
    run's lease (nothing else of ours can be writing them). Returns what was removed."""
    git_dir = repo.git_dir
    candidates = [
        git_dir / "marathon" / f"{run_id}.index.lock",
        repo.common_dir / f"{snapshot_ref(run_id)}.lock",
    ]
    if git_dir != repo.common_dir:  # a linked worktree: its index is the run's own
        candidates.append(git_dir / "index.lock")
    removed = []
    for lock in candidates:
        if lock.exists():
            lock.unlink(missing_ok=True)
            removed.append(lock)
    return removed


def read_git_layout(root: Path) -> tuple[Path, Path] | None:
    """The git directory of the work tree ``root`` and its shared (common) directory, read as
    git reads them (gitrepository-layout(5)): ``root/.git`` is the git directory, or a file
    ``gitdir: <path>`` naming it (a linked worktree), whose ``commondir`` file names the shared
    one. Three small reads instead of a git process for each (a resume asked three times).
    None when ``root/.git`` is neither, or names no git directory."""
    dot = root / ".git"
    try:
        if dot.is_dir():
            git_dir = dot
        elif dot.is_file():
            text = dot.read_text(encoding="utf-8").strip()
            if not text.startswith("gitdir:"):
                return None
            git_dir = root / text.removeprefix("gitdir:").strip()
        else:
            return None
        if not (git_dir / "HEAD").is_file():
            return None
        common = git_dir
        if (git_dir / "commondir").is_file():
            common = git_dir / (git_dir / "commondir").read_text(encoding="utf-8").strip()
        return git_dir.resolve(), common.resolve()
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def snapshot_ref(run_id: str) -> str:
    return f"refs/marathon/{run_id}"


def _index_path(repo: GitRepo, run_id: str) -> Path:
    path = repo.git_dir / "marathon" / f"{run_id}.index"
    if path.parent.is_symlink():  # planted by a command: git would write the index through it
        path.parent.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


SNAPSHOT_INDEX_CONFIG = ("-c", "core.untrackedCache=true", "-c", "core.preloadIndex=true")
"""For the run's private index only: the untracked cache remembers which directories held no
new file, so ``git add -A`` reads only the directories whose mtime changed."""

NOT_BY_PATH = frozenset({".gitignore", ".gitattributes", ".gitmodules"})
"""Files whose change alters how git sees other paths: their writer gets a full snapshot."""


MAX_FILE_BYTES = 100 * 1024 * 1024
"""Untracked files above this size are not snapshotted (nor removed by a restore)."""


def _oversized(repo: GitRepo, index: Path) -> list[tuple[str, int]]:
    """Files the run's index does not hold that are over ``MAX_FILE_BYTES``: listed by git
    through the untracked cache (only directories that changed are read), then sized."""
    listed = repo.git(
        "ls-files", "-z", "--others", "--exclude-standard", index_file=index,
        config=SNAPSHOT_INDEX_CONFIG,
    )  # fmt: skip
    found = []
    for name in listed.split("\0"):
        if name:
            try:
                size = os.lstat(repo.root / name).st_size
            except OSError:
                continue
            if size > MAX_FILE_BYTES:
                found.append((name, size))
    return found


def _excluding(big: list[tuple[str, int]]) -> tuple[str, ...]:
    return tuple(f":(exclude,literal){name}" for name, _ in big)


def take_snapshot(
    repo: GitRepo, run_id: str, message: str, *, paths: Collection[str] | None = None
) -> str:
    """Commit the working tree to the run's private ref; returns the snapshot commit id.

    ``paths``: every path (relative to the root, POSIX) changed since the last snapshot, when
    the caller knows them (a file tool's writes); then only they are hashed. Without them, or
    when they cannot be applied that way (no snapshot yet, a nested repository, a directory,
    a ``.gitignore``), the whole tree is refreshed through the run's persistent index, which
    re-hashes only files whose stat changed.
    """
    if paths is not None:
        try:
            commit = _snapshot_paths(repo, run_id, message, paths)
        except Exception:  # libgit2 refused something: the full refresh is always right
            commit = None
        if commit is not None:
            return commit
    index = _index_path(repo, run_id)
    config = repo._filter_overrides()
    big = _oversized(repo, index)
    repo.git(
        "add", "-A", ".", *_excluding(big), index_file=index,
        config=(*config, *SNAPSHOT_INDEX_CONFIG),
    )  # fmt: skip
    if big:
        listed = ", ".join(f"{name} ({size / 1024**2:,.0f} MB)" for name, size in big[:20])
        message += (
            f"\n\nNot snapshotted (over {MAX_FILE_BYTES // 1024**2} MB; a restore leaves them "
            f"as they are): {listed}" + (f" and {len(big) - 20} more" if len(big) > 20 else "")
        )
    tree = repo.git("write-tree", index_file=index, config=config)
    return _commit(repo, run_id, tree, message)


def _commit(repo: GitRepo, run_id: str, tree: Any, message: str) -> str:
    """The snapshot commit of ``tree`` on the run's ref (the parent itself if the tree did not
    change), written in-process."""
    import pygit2

    kill_at("snapshot_mid")
    lib = repo.lib()
    ref = snapshot_ref(run_id)
    existing = lib.references.get(ref)
    parent = existing.target if existing is not None else None
    tree_id = pygit2.Oid(hex=tree) if isinstance(tree, str) else tree
    if parent is not None and lib[parent].tree_id == tree_id:
        return str(parent)
    author = pygit2.Signature(AGENT_IDENTITY["GIT_AUTHOR_NAME"], AGENT_IDENTITY["GIT_AUTHOR_EMAIL"])
    commit = lib.create_commit(
        None, author, author, message + "\n", tree_id, [parent] if parent is not None else []
    )
    lib.references.create(ref, commit, force=True)
    return str(commit)


def _snapshot_paths(repo: GitRepo, run_id: str, message: str, paths: Collection[str]) -> str | None:
    """The last snapshot's tree with ``paths`` replaced by what is on disk now, committed; None
    when that would not be what ``git add -A`` records (the caller then takes a full one)."""
    import pygit2

    lib = repo.lib()
    existing = lib.references.get(snapshot_ref(run_id))
    if existing is None:
        return None
    base = lib[existing.target].tree
    changes: dict[str, Any] = {}
    for rel in paths:
        parts = rel.split("/")
        if any(part in ("", ".", "..", ".git") for part in parts) or parts[-1] in NOT_BY_PATH:
            return None
        folder = repo.root
        for part in parts[:-1]:  # a nested repository is recorded as a gitlink, not its files
            folder = folder / part
            if os.path.lexists(folder / ".git"):
                return None
        full = repo.root / rel
        try:
            info = os.lstat(full)
        except FileNotFoundError:
            blob = None
        else:
            if not stat.S_ISREG(info.st_mode) and not stat.S_ISLNK(info.st_mode):
                return None
            if not _in_tree(lib, base, parts) and lib.path_is_ignored(rel):
                continue  # git add -A leaves an ignored, untracked file out
            if stat.S_ISLNK(info.st_mode):
                blob = (lib.create_blob(os.readlink(os.fsencode(full))), pygit2.GIT_FILEMODE_LINK)
            else:
                mode = pygit2.GIT_FILEMODE_BLOB_EXECUTABLE if info.st_mode & 0o100 else (
                    pygit2.GIT_FILEMODE_BLOB
                )  # fmt: skip
                blob = (lib.create_blob_fromworkdir(rel), mode)
        level = changes
        for part in parts[:-1]:
            level = level.setdefault(part, {})
            if not isinstance(level, dict):
                return None  # a path both a file and a folder among the changes
        if isinstance(level.get(parts[-1]), dict):
            return None
        level[parts[-1]] = blob
    tree = _edited_tree(lib, base, changes)
    if tree is None:
        tree = lib.TreeBuilder().write()
    return _commit(repo, run_id, tree, message)


def unwatched(repo: GitRepo, run_id: str, folder: str) -> bool:
    """Whether a command's changes in ``folder`` can never reach a snapshot: git ignores it
    and the run's last snapshot holds nothing in it (``pilot.workspace.watch`` skips it)."""
    lib = repo.lib()
    if not lib.path_is_ignored(folder + "/"):
        return False
    existing = lib.references.get(snapshot_ref(run_id))
    if existing is None:
        return False
    return not _in_tree(lib, lib[existing.target].tree, folder.split("/"))


def _in_tree(lib: Any, tree: Any, parts: list[str]) -> bool:
    for part in parts[:-1]:
        if part not in tree:
            return False
        entry = tree[part]
        if entry.filemode != 0o040000:
            return False
        tree = lib[entry.id]
    return parts[-1] in tree


def _edited_tree(lib: Any, tree: Any, changes: dict[str, Any]) -> Any:
    """``tree`` (None for none) with ``changes`` applied: name -> (blob, mode), None (removed)
    or a dict (the changes inside that folder). Returns the new tree's id, None when empty."""
    import pygit2

    builder = lib.TreeBuilder(tree) if tree is not None else lib.TreeBuilder()
    for name, change in changes.items():
        entry = tree[name] if tree is not None and name in tree else None
        if isinstance(change, dict):
            inner = lib[entry.id] if entry is not None and entry.filemode == 0o040000 else None
            change = _edited_tree(lib, inner, change)
            if change is not None:
                change = (change, pygit2.GIT_FILEMODE_TREE)
        if change is None:
            if entry is not None:
                builder.remove(name)
        else:
            builder.insert(name, *change)
    return builder.write() if len(builder) else None


def restore_snapshot(repo: GitRepo, run_id: str, snapshot: str, branch_head: str | None) -> None:
    """Make the working tree equal to ``snapshot`` and the work branch point at ``branch_head``.

    Files the snapshot has are written back; files it lacks (and git would not ignore) are
    removed. The real index is reset to the branch head so `git status` tells the truth.
    """
    index = _index_path(repo, run_id)
    repo.git("read-tree", snapshot, index_file=index)
    for extra in repo.git(
        "ls-files", "--others", "--exclude-standard", "-z", index_file=index
    ).split("\0"):
        if extra:
            path = repo.root / extra
            if path.is_symlink() or (path.is_file() and path.stat().st_size <= MAX_FILE_BYTES):
                path.unlink()
    repo.git("checkout-index", "-a", "-f", index_file=index)
    branch = repo.current_branch()
    if branch_head and branch and repo.head() != branch_head:
        repo.git("update-ref", f"refs/heads/{branch}", branch_head)
    repo.git("reset", "-q")
    # The private index must describe the restored tree for the next incremental snapshot.
    repo.git("add", "-A", ".", *_excluding(_oversized(repo, index)), index_file=index)


def tree_of(repo: GitRepo, commit: str) -> str:
    return repo.git("rev-parse", f"{commit}^{{tree}}")


def snapshot_diff(repo: GitRepo, base: str, latest: str, *options: str) -> str:
    """``git diff <options> base latest`` over what a person calls the change: build
    artefacts (the ``.pyc`` a test run leaves, virtualenvs...) are snapshotted, so a restore
    brings them back, but they are no change to the code, here as for ``require_change``."""
    excludes = artefact_excludes(repo.root)
    return repo.git("diff", "--no-ext-diff", *options, base, latest, "--", ".", *excludes)


def diff_snapshots(repo: GitRepo, base: str, latest: str, *, stat: bool = False) -> str:
    return snapshot_diff(repo, base, latest, "--stat" if stat else "--patch")
