"""Which files the agent sees: the workspace's files minus what git ignores, never ``.git``.

In a git work tree the list comes from ``git ls-files --cached --others --exclude-standard``
(so .gitignore, .git/info/exclude and the global excludes file are honoured exactly as git
does); elsewhere a plain walk that skips ``.git`` and does not follow directory symlinks.
Also: glob patterns as the search tools accept them. Must not import ``pilot`` or ``brain``.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass, field

from tools.gitcmd import run_git
from tools.workspace import Workspace, is_git_name

MAX_WALK_FILES = 200_000


@dataclass
class FileList:
    """Files (POSIX paths relative to the root, sorted) and how they were found."""

    files: list[str]
    source: str  # "git" or "walk"
    notes: list[str] = field(default_factory=list)


def visible_files(ws: Workspace, under: str = ".") -> FileList:
    """Every file below ``under`` (a root-relative path) the agent should see, sorted."""
    listed = _git_files(ws, under)
    if listed is not None:
        return listed
    return _walk_files(ws, under)


def _git_files(ws: Workspace, under: str) -> FileList | None:
    args = ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", under]
    try:
        proc = run_git(ws.root, args, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    names: dict[str, None] = {}
    for raw in proc.stdout.split(b"\0"):
        if not raw or raw.endswith(b"/"):
            continue  # nested repositories are listed as "dir/"
        rel = os.fsdecode(raw)
        if any(is_git_name(p) for p in rel.split("/")):
            continue
        full = os.path.join(ws.root, rel)
        if os.path.islink(full) or (os.path.lexists(full) and not os.path.isdir(full)):
            names[rel] = None
    return FileList(sorted(names), "git")


def _walk_files(ws: Workspace, under: str) -> FileList:
    start = ws.root if under in ("", ".") else ws.root / under
    out: list[str] = []
    notes: list[str] = []
    for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not is_git_name(d))
        rel_dir = os.path.relpath(dirpath, ws.root)
        for name in filenames:
            if is_git_name(name):
                continue
            out.append(name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/"))
        # Symlinks to directories are listed as entries, not followed.
        for d in list(dirnames):
            if os.path.islink(os.path.join(dirpath, d)):
                dirnames.remove(d)
                out.append(d if rel_dir == "." else f"{rel_dir}/{d}".replace(os.sep, "/"))
        if len(out) >= MAX_WALK_FILES:
            notes.append(f"listing stopped after {MAX_WALK_FILES:,} files")
            break
    return FileList(sorted(out), "walk", notes)


# -- globs ------------------------------------------------------------------------------------


def expand_braces(pattern: str) -> list[str]:
    """``*.{py,md}`` -> ``["*.py", "*.md"]`` (nested braces too)."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m or "," not in m.group(1):
        return [pattern]
    out: list[str] = []
    for option in m.group(1).split(","):
        out.extend(expand_braces(pattern[: m.start()] + option + pattern[m.end() :]))
    return out


@functools.lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    i, n, out = 0, len(pattern), []
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern[i : i + 3] == "**/":
                out.append("(?:.*/)?")
                i += 3
                continue
            if pattern[i : i + 2] == "**":
                out.append(".*")
                i += 2
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 2)
            if j == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
                i = j + 1
                continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


class GlobMatcher:
    """Matches root-relative POSIX paths against a glob.

    ``**`` spans directories, ``*`` and ``?`` stay within one name, ``{a,b}`` alternatives
    are expanded. A pattern without "/" matches file names at any depth (``*.py``); one with
    "/" matches the whole path from the workspace root (``src/**/*.py``).
    """

    def __init__(self, pattern: str) -> None:
        pattern = pattern.strip()
        while pattern.startswith("./"):
            pattern = pattern[2:]
        pattern = pattern.lstrip("/")
        self.pattern = pattern or "**"
        self._alternatives = [
            (("/" in p), _glob_regex(p)) for p in expand_braces(self.pattern) if p
        ]

    def __call__(self, rel: str) -> bool:
        name = rel.rsplit("/", 1)[-1]
        return any(rx.match(rel if anchored else name) for anchored, rx in self._alternatives)
