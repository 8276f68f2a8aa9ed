"""Search tools: list_dir, find_files, grep.

All three see the same files (``tools.listing``: git's view, .gitignore honoured, never
``.git``), answer in a stable sorted order, and cap what they show with "N more not shown".
Must not import ``pilot`` or ``brain``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from pydantic import Field

from tools.base import ToolArgs, ToolContext, ToolError, ToolResult
from tools.listing import GlobMatcher, visible_files
from tools.workspace import WorkspaceEscape, command_env

WORKER = Path(__file__).with_name("grep_worker.py")


def _directory(ctx: ToolContext, path: str) -> tuple[Path, str]:
    real = ctx.workspace.resolve(path)
    rel = ctx.workspace.relative(real)
    if not real.exists():
        raise ToolError(f"no such directory {path!r}. Use find_files to locate it.")
    return real, rel


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


# -- list_dir ---------------------------------------------------------------------------------


class ListDirArgs(ToolArgs):
    path: str = Field(default=".", description="Directory, relative to the workspace root.")
    depth: int = Field(default=2, ge=1, le=10, description="How many levels deep to list.")


class ListDir:
    """A directory tree, git-ignored files left out."""

    name = "list_dir"
    description = (
        "List a directory's files and subdirectories as a tree (default 2 levels deep; files "
        "ignored by .gitignore are left out). Use it to get your bearings; use find_files to "
        "locate files by name anywhere."
    )
    args_model = ListDirArgs
    mutates = False

    def run(self, args: ListDirArgs, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        max_entries = int(ctx.tool_settings(self.name).get("max_entries", 400))
        real, rel = _directory(ctx, args.path)
        if not real.is_dir():
            raise ToolError(f"{rel!r} is a file, not a directory; use read_file to read it.")
        listed = visible_files(ctx.workspace, rel)
        prefix = "" if rel == "." else rel + "/"
        tree: dict = {}
        counts: dict[str, int] = {}
        for path in listed.files:
            if not path.startswith(prefix):
                continue
            parts = path[len(prefix) :].split("/")
            node = tree
            for i, part in enumerate(parts[:-1]):
                key = "/".join(parts[: i + 1])
                counts[key] = counts.get(key, 0) + 1
                node = node.setdefault(part + "/", {})
            node.setdefault(parts[-1], None)
        _add_empty_dirs(real, tree, args.depth)

        lines: list[str] = []
        total = [0]

        def emit(node: dict, base: str, level: int) -> None:
            dirs = sorted(k for k in node if k.endswith("/"))
            files = sorted(k for k in node if not k.endswith("/"))
            for key in dirs:
                total[0] += 1
                sub = base + key[:-1]
                if level >= args.depth and node[key]:
                    n = counts.get(sub, 0)
                    note = f"  ({n} file{'s' if n != 1 else ''} inside)" if n else ""
                    if len(lines) < max_entries:
                        lines.append(f"{prefix}{sub}/{note}")
                    continue
                if len(lines) < max_entries:
                    lines.append(f"{prefix}{sub}/")
                emit(node[key], sub + "/", level + 1)
            for key in files:
                total[0] += 1
                if len(lines) < max_entries:
                    full = real / (base + key)
                    lines.append(f"{prefix}{base}{key}{_file_note(full)}")

        emit(tree, "", 1)
        if not lines:
            return ToolResult.ok(f"{rel}/ is empty (or everything in it is git-ignored).")
        header = f"{rel}/ (paths are relative to the workspace root)"
        out = [header, *lines]
        truncated = total[0] > len(lines)
        if truncated:
            out.append(
                f"... {total[0] - len(lines)} more entries not shown; list a subdirectory or "
                "use a smaller depth."
            )
        out.extend(f"({n})" for n in listed.notes)
        return ToolResult.ok("\n".join(out), truncated=truncated)


def _file_note(full: Path) -> str:
    try:
        if full.is_symlink():
            return f"  -> {os.readlink(full)}"
        return f"  ({_human(full.stat().st_size)})"
    except OSError:
        return ""


def _add_empty_dirs(real: Path, tree: dict, depth: int, level: int = 1) -> None:
    """Show directories with no files at all (git does not list them)."""
    if level > depth:
        return
    try:
        entries = list(os.scandir(real))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_symlink() or not entry.is_dir() or entry.name.casefold() == ".git":
                continue
        except OSError:
            continue
        key = entry.name + "/"
        if key in tree:
            if tree[key] is not None:
                _add_empty_dirs(Path(entry.path), tree[key], depth, level + 1)
        elif _has_no_files(Path(entry.path)):
            tree[key] = {}


def _has_no_files(path: Path) -> bool:
    return all(not files for _dirpath, _dirs, files in os.walk(path))


# -- find_files -------------------------------------------------------------------------------


class FindFilesArgs(ToolArgs):
    glob: str = Field(
        description="Glob such as '*.py' (any depth), 'src/**/*.ts' or '**/test_*.{py,md}'."
    )


class FindFiles:
    """Files whose path matches a glob."""

    name = "find_files"
    description = (
        "Find files by name with a glob: '*.py' matches at any depth, 'src/**/*.py' matches "
        "from the workspace root; git-ignored files are left out, at most 200 results. Use "
        "grep to search file contents instead."
    )
    args_model = FindFilesArgs
    mutates = False

    def run(self, args: FindFilesArgs, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        max_results = int(ctx.tool_settings(self.name).get("max_results", 200))
        if not args.glob.strip():
            raise ToolError("glob is empty; try '*.py' or 'src/**/*'.")
        if ".." in args.glob.split("/"):
            raise ToolError("glob must not contain '..'; patterns match inside the workspace.")
        match = GlobMatcher(args.glob)
        listed = visible_files(ctx.workspace)
        found = [p for p in listed.files if match(p)]
        if not found:
            return ToolResult.ok(
                f"No files match {args.glob!r}. A pattern without '/' matches names at any "
                "depth; try a broader one like '*name*'."
            )
        shown = found[:max_results]
        out = list(shown)
        if len(found) > len(shown):
            out.append(
                f"... {len(found) - len(shown)} more not shown ({len(found)} files match); "
                "use a narrower glob."
            )
        out.extend(f"({n})" for n in listed.notes)
        return ToolResult.ok("\n".join(out), truncated=len(found) > len(shown))


# -- grep -------------------------------------------------------------------------------------


class GrepArgs(ToolArgs):
    pattern: str = Field(description="Python regular expression searched in each line.")
    path: str = Field(default=".", description="File or directory to search in.")
    glob: str | None = Field(
        default=None, description="Only files matching this glob, e.g. '*.py'."
    )


class Grep:
    """Lines matching a regex, as ``path:line: text``."""

    name = "grep"
    description = (
        "Search file contents with a Python regular expression; prints 'path:line: text' for "
        "each matching line (at most 200; binary and git-ignored files are skipped). Narrow "
        "it with path or glob (e.g. '*.py'). Use find_files to search file names."
    )
    args_model = GrepArgs
    mutates = False

    def run(self, args: GrepArgs, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        settings = ctx.tool_settings(self.name)
        max_matches = int(settings.get("max_matches", 200))
        timeout = float(settings.get("timeout", 30))
        try:
            re.compile(args.pattern)
        except re.error as exc:
            raise ToolError(
                f"invalid regular expression {args.pattern!r}: {exc}. Escape special "
                "characters such as ( ) [ ] . * + ? with a backslash to match them literally."
            ) from None
        real, rel = _directory(ctx, args.path)
        match = GlobMatcher(args.glob) if args.glob else None
        if real.is_file():
            candidates = [rel]
        else:
            listed = visible_files(ctx.workspace, rel)
            candidates = listed.files
        files: list[list[str]] = []
        outside = 0
        for name in candidates:
            if match and not match(name):
                continue
            try:
                target = ctx.workspace.resolve(name)
            except WorkspaceEscape:
                outside += 1
                continue
            if target.is_file():
                files.append([name, str(target)])
        request = {
            "pattern": args.pattern,
            "files": files,
            "max_matches": max_matches,
            "max_line_chars": int(settings.get("max_line_chars", 300)),
            "max_file_bytes": int(settings.get("max_file_bytes", 20 * 1024 * 1024)),
        }
        answer = _run_worker(request, timeout, ctx.workspace.root)
        lines = [f"{p}:{n}: {t}" for p, n, t in answer["matches"]]
        total = answer["total"]
        notes = []
        if total > len(lines):
            more = f"{total - len(lines)}{'+' if answer['capped'] else ''}"
            notes.append(
                f"... {more} more matches not shown ({answer['files_matched']} files); narrow "
                "the pattern, path or glob."
            )
        skipped = []
        if answer["binary"]:
            skipped.append(f"{answer['binary']} binary")
        if answer["large"]:
            skipped.append(f"{answer['large']} larger than {request['max_file_bytes']:,} bytes")
        if answer["unreadable"]:
            skipped.append(f"{answer['unreadable']} unreadable")
        if outside:
            skipped.append(f"{outside} symlinks leading outside the workspace")
        if skipped:
            notes.append(f"(skipped files: {', '.join(skipped)})")
        if not lines:
            where = "the workspace" if rel == "." else repr(rel)
            glob = f" matching {args.glob!r}" if args.glob else ""
            head = (
                f"No matches for {args.pattern!r} in {where}{glob} ({len(files)} files searched)."
            )
            return ToolResult.ok("\n".join([head, *notes]))
        return ToolResult.ok("\n".join(lines + notes), truncated=total > len(lines))


def _run_worker(request: dict, timeout: float, cwd: Path) -> dict:
    try:
        proc = subprocess.run(
            [sys.executable, "-I", str(WORKER)],
            input=json.dumps(request).encode(),
            capture_output=True,
            timeout=timeout,
            cwd=cwd,
            env=command_env(),
        )
    except subprocess.TimeoutExpired:
        raise ToolError(
            f"grep took longer than {timeout:.0f} s and was stopped; the pattern may backtrack "
            "badly (avoid nested quantifiers like (a+)+) or the search is too wide: narrow "
            "path or glob."
        ) from None
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise ToolError(f"grep failed: {tail[0] if tail else 'exit ' + str(proc.returncode)}")
    return json.loads(proc.stdout)
