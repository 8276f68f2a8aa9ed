"""Git tools: git_status, git_diff, git_commit, acting on the run's work branch only.

Commits use a fixed identity ("Marathon Agent <agent@marathon.local>" unless the workflow's
settings say otherwise) so they work where no git identity is configured, and skip hooks.
Every git call goes through ``tools.gitcmd.run_git`` (safe config, sandbox when available).
Must not import ``pilot`` or ``brain``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

from pydantic import Field

from tools.base import Artifact, ToolArgs, ToolContext, ToolError, ToolResult
from tools.gitcmd import run_git
from tools.sandbox import SandboxUnavailable

AGENT_NAME = "Marathon Agent"
AGENT_EMAIL = "agent@marathon.local"


def _git(
    ctx: ToolContext, *args: str, extra_env: dict[str, str] | None = None, timeout: float = 120
):
    root = ctx.workspace.root
    writable = [d for d in _git_dirs(root) if not _inside(d, root)]
    try:
        return run_git(
            root, args, sandbox=ctx.sandbox, writable=writable, extra_env=extra_env, timeout=timeout
        )
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from None
    except subprocess.TimeoutExpired:
        raise ToolError(
            f"git {args[0]} took longer than {timeout:.0f} s and was stopped."
        ) from None


BUILD_ARTEFACTS = (
    "__pycache__",
    "*.pyc",
    "*.pyo",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    ".tox",
    ".nox",
    "*.egg-info",
    ".eggs",
    ".venv",
    "venv",
    "node_modules",
    ".coverage",
    ".DS_Store",
)
"""Names git_commit never stages, with or without a .gitignore: running the tests leaves them
behind, and a commit of 15 ``.pyc`` files is noise a reviewer must undo."""


def artefact_excludes(root: Path) -> list[str]:
    """Pathspecs excluding build artefacts anywhere in the tree, plus every virtualenv (a
    directory holding ``pyvenv.cfg``, whatever its name) in the top two levels."""
    specs = [f":(exclude,glob)**/{name}" for name in BUILD_ARTEFACTS]
    specs += [f":(exclude,glob)**/{name}/**" for name in BUILD_ARTEFACTS]
    for cfg in [*root.glob("*/pyvenv.cfg"), *root.glob("*/*/pyvenv.cfg")]:
        rel = cfg.parent.relative_to(root).as_posix()
        specs += [f":(exclude,literal){rel}", f":(exclude,glob){rel}/**"]
    return specs


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _git_dirs(root: Path) -> list[Path]:
    """The repository's git directories (they may live outside the workspace)."""
    proc = run_git(root, ["rev-parse", "--absolute-git-dir", "--git-common-dir"], timeout=30)
    if proc.returncode != 0:
        raise ToolError(
            "the workspace is not a git repository; the git tools need one (you can create it "
            "with run: `git init`)."
        )
    dirs = []
    for line in proc.stdout.decode(errors="replace").splitlines():
        path = Path(line) if os.path.isabs(line) else root / line
        dirs.append(Path(os.path.realpath(path)))
    return dirs


def _text(proc: subprocess.CompletedProcess[bytes]) -> str:
    return proc.stdout.decode("utf-8", errors="replace")


def _fail(what: str, proc: subprocess.CompletedProcess[bytes]) -> ToolError:
    msg = (proc.stderr or proc.stdout).decode("utf-8", errors="replace").strip()
    return ToolError(f"{what} failed: {msg or 'exit code ' + str(proc.returncode)}")


def current_branch(ctx: ToolContext) -> str | None:
    """The branch HEAD points to (also an unborn one), or None when HEAD is detached."""
    proc = _git(ctx, "symbolic-ref", "--short", "-q", "HEAD")
    return _text(proc).strip() or None if proc.returncode == 0 else None


def _cap(text: str, max_lines: int, max_bytes: int) -> tuple[str, bool, int]:
    lines = text.splitlines()
    out: list[str] = []
    used = 0
    for line in lines:
        if len(out) >= max_lines or used + len(line) + 1 > max_bytes:
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out), len(out) < len(lines), len(lines) - len(out)


# -- git_status -------------------------------------------------------------------------------


class GitStatusArgs(ToolArgs):
    pass


class GitStatus:
    """Branch and changed files, short format."""

    name = "git_status"
    description = (
        "Show the current branch and which files are modified, added, deleted or untracked "
        "(short format: 'M' modified, 'A' added, 'D' deleted, '??' untracked). Use git_diff to "
        "see the changes themselves."
    )
    args_model = GitStatusArgs
    mutates = False

    def run(self, args: GitStatusArgs, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        max_lines = int(ctx.tool_settings(self.name).get("max_lines", 200))
        proc = _git(ctx, "status", "--short", "--branch", "--untracked-files=all", "--", ".")
        if proc.returncode != 0:
            raise _fail("git status", proc)
        text = _text(proc).rstrip("\n")
        lines = text.splitlines()
        if len(lines) <= 1:
            return ToolResult.ok(f"{text}\nworking tree clean (nothing to commit)".lstrip("\n"))
        shown, truncated, more = _cap(text, max_lines, 32_000)
        if truncated:
            shown += f"\n... {more} more files not shown; use git_diff with a path, or find_files."
        return ToolResult.ok(shown, truncated=truncated)


# -- git_diff ---------------------------------------------------------------------------------


class GitDiffArgs(ToolArgs):
    path: str | None = Field(
        default=None, description="Only this file or directory (default: everything)."
    )
    since_start: bool = Field(
        default=False,
        description="Everything changed since this run started, commits included "
        "(default: only what changed since the last commit).",
    )


class GitDiff:
    """Working tree against HEAD, untracked files included."""

    name = "git_diff"
    description = (
        "Show what changed in the working tree since the last commit, as a unified diff "
        "(new untracked files included; long diffs are cut, pass path to see one file). Use it "
        "to review your work before git_commit; since_start=true shows the whole run's work."
    )
    args_model = GitDiffArgs
    mutates = False

    def run(self, args: GitDiffArgs, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        settings = ctx.tool_settings(self.name)
        max_lines = int(settings.get("max_lines", 800))
        max_bytes = int(settings.get("max_bytes", 40_000))
        pathspec = "."
        if args.path not in (None, "", "."):
            real = ctx.workspace.resolve(args.path)
            pathspec = ctx.workspace.relative(real)
        git_dir = _git_dirs(ctx.workspace.root)[0]
        has_head = _git(ctx, "rev-parse", "--verify", "-q", "HEAD").returncode == 0
        if args.since_start and ctx.base_commit:
            base = ctx.base_commit
        elif has_head:
            base = "HEAD"
        else:
            empty = _git(ctx, "hash-object", "-t", "tree", os.devnull)
            base = _text(empty).strip()
        # Untracked files are shown by marking them intent-to-add in a throwaway copy of the
        # index, so the user's real index is never touched.
        tmp_index = git_dir / f"marathon-diff-index-{uuid.uuid4().hex[:8]}"
        real_index = git_dir / "index"
        try:
            if real_index.exists():
                # copy2 keeps the index's mtime: git re-reads a file whose stat matches its
                # entry only when the index is not older than it ("racily clean"); a fresh
                # copy would hide a same-size edit made in the second of the last commit.
                shutil.copy2(real_index, tmp_index)
            env = {"GIT_INDEX_FILE": str(tmp_index)}
            added = _git(ctx, "add", "--intent-to-add", "--", pathspec, extra_env=env)
            if added.returncode != 0:
                raise _fail("git add --intent-to-add", added)
            diff_args = ["diff", "--no-ext-diff", "--no-textconv", "--no-color", base]
            proc = _git(ctx, *diff_args, "--", pathspec, extra_env=env)
            if proc.returncode != 0:
                raise _fail("git diff", proc)
            text = _text(proc)
            stat = ""
            if text.count("\n") > max_lines or len(text) > max_bytes:
                st = _git(
                    ctx, "diff", "--stat=120", "--no-color", base, "--", pathspec, extra_env=env
                )
                stat = _text(st)
        finally:
            try:
                tmp_index.unlink()
            except OSError:
                pass
        if not text.strip():
            where = "" if pathspec == "." else f" in {pathspec}"
            since = "since the run started" if args.since_start else "since the last commit"
            return ToolResult.ok(f"No changes{where} {since}.")
        shown, truncated, more = _cap(text, max_lines, max_bytes)
        if not truncated:
            return ToolResult.ok(shown)
        path = ctx.artifact_path("diff", ".diff")
        path.write_text(text, encoding="utf-8")
        artifact = Artifact(
            name=path.name,
            path=str(path.resolve()),
            size=path.stat().st_size,
            media_type="text/x-diff",
        )
        stat_text, _, _ = _cap(stat, 60, 8000)
        out = (
            f"{shown}\n... [{more:,} more diff lines not shown; the full diff was kept as "
            f"artifact {path.name}. Call git_diff with path=<file> to see one file.]\n"
            f"Files changed:\n{stat_text}"
        )
        return ToolResult.ok(out, truncated=True, artifacts=[artifact])


# -- git_commit -------------------------------------------------------------------------------


class GitCommitArgs(ToolArgs):
    message: str = Field(description="The commit message: a short summary line, then details.")


class GitCommit:
    """Stage everything and commit on the work branch."""

    name = "git_commit"
    description = (
        "Stage all changes (new, modified and deleted files) and commit them with this message "
        "on the run's work branch. Commit after each working step; check with git_diff first."
    )
    args_model = GitCommitArgs
    mutates = True

    def run(self, args: GitCommitArgs, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        settings = ctx.tool_settings(self.name)
        message = args.message.strip()
        if not message:
            raise ToolError("the commit message is empty; say in one line what changed.")
        _git_dirs(ctx.workspace.root)  # a clear error outside a repository
        branch = current_branch(ctx)
        if ctx.work_branch and branch != ctx.work_branch:
            where = f"on branch {branch!r}" if branch else "detached (not on a branch)"
            raise ToolError(
                f"refused to commit: HEAD is {where}, but this run commits only to its work "
                f"branch {ctx.work_branch!r}. Switch back first, e.g. run "
                f"`git switch {ctx.work_branch}` (your changes come along), then commit again."
            )
        if branch is None:
            raise ToolError(
                "refused to commit: HEAD is detached (not on a branch); switch to a branch first."
            )
        excludes = artefact_excludes(ctx.workspace.root)
        added = _git(ctx, "add", "-A", "--", ".", *excludes)
        if added.returncode != 0:
            raise _fail("git add", added)
        left = _left_out(ctx, excludes)
        staged = _git(ctx, "diff", "--cached", "--quiet", "--no-ext-diff")
        if staged.returncode == 0:
            return ToolResult.ok(
                f"Nothing to commit: no changes since the last commit on {branch}.{left}"
            )
        name = str(settings.get("author_name", AGENT_NAME))
        email = str(settings.get("author_email", AGENT_EMAIL))
        identity = {
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
        }
        proc = _git(ctx, "commit", "-q", "--no-verify", "-m", message, extra_env=identity)
        if proc.returncode != 0:
            raise _fail("git commit", proc)
        info = _git(ctx, "log", "-1", "--format=%h%x00%s")
        short, _, subject = _text(info).strip().partition("\0")
        stat = _git(ctx, "show", "--shortstat", "--format=", "--no-ext-diff", "HEAD")
        summary = _text(stat).strip()
        return ToolResult.ok(f"Committed {short} on {branch}: {subject}\n{summary}".rstrip() + left)


def _left_out(ctx: ToolContext, excludes: list[str]) -> str:
    """A note naming the build artefacts present but not committed (empty when none)."""
    everything = _git(ctx, "ls-files", "--others", "--exclude-standard", "-z", "--", ".")
    kept = _git(ctx, "ls-files", "--others", "--exclude-standard", "-z", "--", ".", *excludes)
    left = set(_text(everything).split("\0")) - set(_text(kept).split("\0")) - {""}
    if not left:
        return ""
    shown = ", ".join(sorted(left)[:3]) + (", ..." if len(left) > 3 else "")
    return f"\nLeft out {len(left)} build artefact file(s), never committed ({shown})."
