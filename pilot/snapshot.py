"""Workspace snapshots on a private ref, and the run's work branch.

After each mutating tool the working tree (every file git would not ignore) is written as a
commit on ``refs/marathon/<run-id>`` through a separate index file, so the user's HEAD, index and
branches are never touched by a snapshot. On resume after a crash inside a tool, the tree is put
back to the last snapshot, which makes re-running that tool safe: its partial effects are gone.

Ignored files (build outputs, caches, virtualenvs) are neither snapshotted nor restored.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pilot.errors import ConfigurationError
from tools.gitcmd import SAFE_GIT_CONFIG

AGENT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Marathon",
    "GIT_AUTHOR_EMAIL": "marathon@localhost",
    "GIT_COMMITTER_NAME": "Marathon",
    "GIT_COMMITTER_EMAIL": "marathon@localhost",
}


class GitError(ConfigurationError):
    """A git command failed; the message carries git's own words."""


@dataclass(frozen=True)
class GitRepo:
    root: Path

    def git(
        self, *args: str, index_file: Path | None = None, check: bool = True, input: str = ""
    ) -> str:
        env = {
            **os.environ,
            **AGENT_IDENTITY,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
        }
        for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
            env.pop(name, None)
        if index_file is not None:
            env["GIT_INDEX_FILE"] = str(index_file)
        proc = subprocess.run(
            ["git", *SAFE_GIT_CONFIG, *self._filter_overrides(), *args],
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

    def _filter_overrides(self) -> list[str]:
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
        return overrides

    @property
    def git_dir(self) -> Path:
        return Path(self.git("rev-parse", "--absolute-git-dir"))

    def is_repo(self) -> bool:
        return (
            subprocess.run(
                ["git", "rev-parse", "--is-inside-work-tree"],
                cwd=self.root,
                capture_output=True,
            ).returncode
            == 0
        )

    def head(self) -> str | None:
        out = self.git("rev-parse", "--verify", "-q", "HEAD", check=False)
        return out or None

    def current_branch(self) -> str | None:
        out = self.git("symbolic-ref", "-q", "HEAD", check=False)
        return out.removeprefix("refs/heads/") or None


def ensure_repository(root: Path, *, init: bool) -> GitRepo:
    """The workspace must be a git repository (snapshots and the work branch need one)."""
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


def snapshot_ref(run_id: str) -> str:
    return f"refs/marathon/{run_id}"


def _index_path(repo: GitRepo, run_id: str) -> Path:
    path = repo.git_dir / "marathon" / f"{run_id}.index"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def take_snapshot(repo: GitRepo, run_id: str, message: str) -> str:
    """Commit the working tree to the run's private ref; returns the snapshot commit id.

    The per-run index file persists between snapshots so ``git add -A`` only re-hashes files
    whose stat changed: the cost follows what the tool touched, not the repository's size.
    """
    index = _index_path(repo, run_id)
    repo.git("add", "-A", ".", index_file=index)
    tree = repo.git("write-tree", index_file=index)
    ref = snapshot_ref(run_id)
    parent = repo.git("rev-parse", "--verify", "-q", ref, check=False)
    if parent and repo.git("rev-parse", f"{parent}^{{tree}}") == tree:
        return parent
    args = ["commit-tree", tree, "-m", message]
    if parent:
        args[2:2] = ["-p", parent]
    commit = repo.git(*args)
    repo.git("update-ref", ref, commit)
    return commit


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
            if path.is_file() or path.is_symlink():
                path.unlink()
    repo.git("checkout-index", "-a", "-f", index_file=index)
    branch = repo.current_branch()
    if branch_head and branch and repo.head() != branch_head:
        repo.git("update-ref", f"refs/heads/{branch}", branch_head)
    repo.git("reset", "-q")
    # The private index must describe the restored tree for the next incremental snapshot.
    repo.git("add", "-A", ".", index_file=index)


def tree_of(repo: GitRepo, commit: str) -> str:
    return repo.git("rev-parse", f"{commit}^{{tree}}")


def diff_snapshots(repo: GitRepo, base: str, latest: str, *, stat: bool = False) -> str:
    args = ["diff", "--no-ext-diff", "--stat" if stat else "--patch", base, latest]
    return repo.git(*args)
