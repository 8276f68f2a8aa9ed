"""The confinement boundary: every path a tool touches resolves inside the workspace root.

Resolution is done by hand, one component at a time, following symlinks the way the kernel
would, so that a symlink anywhere in the chain (including one the agent made itself, a
dangling one, or a loop) can never lead outside the root. ``.git`` is off limits to file tools
in both directions: writing would let the agent corrupt history or plant hooks, and reading
``.git/config`` can expose credentials kept in remote URLs; the git tools cover what the
agent needs. This module also builds the scrubbed environment commands run with.

It must not import ``pilot`` or ``brain``, and it never changes the file system except for a
one-off probe file when it has to find out whether the root is case-insensitive.
"""

from __future__ import annotations

import fnmatch
import os
import tempfile
import unicodedata
from collections.abc import Iterable
from pathlib import Path

MAX_SYMLINK_HOPS = 40

# Code points a name can carry invisibly: Unicode's format characters (category Cf: zero-width
# space and joiners, bidi marks, the BOM, tags...) and the other default-ignorable ones
# (variation selectors, fillers). HFS+ ignores some of them in names (CVE-2014-9390:
# ".g\u200cit" is ".git" there); all of them are dropped before a name is compared with ".git".
_OTHER_IGNORABLE = (
    0x034F,
    0x115F,
    0x1160,
    0x17B4,
    0x17B5,
    *range(0x180B, 0x1810),
    0x3164,
    *range(0xFE00, 0xFE10),
    0xFFA0,
    *range(0xE0100, 0xE01F0),
)


_OTHER_IGNORABLE_SET = frozenset(_OTHER_IGNORABLE)


def _visible(name: str) -> str:
    """``name`` without its invisible code points (ASCII has none)."""
    if name.isascii():
        return name
    return "".join(
        c for c in name if ord(c) not in _OTHER_IGNORABLE_SET and unicodedata.category(c) != "Cf"
    )


SANDBOX_ROOTS = frozenset({"workspace", "testbed", "repo", "app", "project"})
"""Where agent sandboxes put the repository; models write these roots from habit."""


class WorkspaceEscape(Exception):
    """A path was refused because it would leave the workspace or touch a protected place."""


def is_git_name(name: str) -> bool:
    """Whether a path component names git's own directory, under any disguise a file system
    might accept or a reader might not see: case, compatibility forms (fullwidth letters),
    invisible code points (zero-width, bidi, variation selectors), trailing dots or spaces
    and an alternate data stream on NTFS (``.git::$INDEX_ALLOCATION``), the 8.3 short name."""
    norm = _visible(unicodedata.normalize("NFKC", name))
    norm = norm.split(":", 1)[0].rstrip(" .").casefold()
    return norm in {".git", "git~1"}


class Workspace:
    """A directory the agent owns; ``resolve`` is the only way tools turn names into paths."""

    def __init__(self, root: Path | str, *, case_insensitive: bool | None = None) -> None:
        root_path = Path(root).expanduser()
        if not root_path.is_dir():
            raise ValueError(f"workspace root {root_path} is not a directory")
        self.root: Path = Path(os.path.realpath(root_path))
        self._case_insensitive = case_insensitive
        self.written: list[str] = []
        """Every path resolved ``for_write`` (relative, POSIX): what a file tool may have
        changed, so the pilot's snapshot hashes those paths only."""

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    @property
    def case_insensitive(self) -> bool:
        """Whether the root's file system ignores case (detected once, lazily)."""
        if self._case_insensitive is None:
            self._case_insensitive = _detect_case_insensitive(self.root)
        return self._case_insensitive

    # -- resolution -----------------------------------------------------------------------

    def resolve(self, path: str, *, for_write: bool = False) -> Path:
        """The real absolute path ``path`` names, guaranteed inside the root and outside
        ``.git``.

        ``path`` may be relative to the root or absolute inside it. Raises ``WorkspaceEscape``
        with a message that says what was refused, why, and what is allowed.
        """
        if not isinstance(path, str):
            raise WorkspaceEscape(f"path must be a string, got {type(path).__name__}")
        if "\x00" in path:
            raise WorkspaceEscape(
                "refused a path containing a NUL byte; use a plain path relative to the "
                "workspace root"
            )
        shown = path
        path = path.strip() or "."
        if path.startswith("~"):
            raise WorkspaceEscape(
                f"refused {shown!r}: '~' is not expanded and the home directory is outside "
                "the workspace; use a path relative to the workspace root"
            )
        rel = self._relative_from_absolute(path, shown) if os.path.isabs(path) else path
        parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
        real = self._walk(parts, shown)
        rel_parts = self.relative_parts(real)
        if rel_parts is None:
            raise WorkspaceEscape(
                f"refused {shown!r}: it resolves to {real}, outside the workspace "
                f"{self.root}; only paths inside the workspace are allowed"
            )
        if any(is_git_name(p) for p in rel_parts):
            verb = "writing" if for_write else "reading"
            raise WorkspaceEscape(
                f"refused {verb} {shown!r}: the .git directory is off limits to file tools; "
                "use git_status, git_diff and git_commit instead"
            )
        if for_write:
            self.written.append("/".join(rel_parts))
        return real

    def relative(self, path: Path) -> str:
        """``path`` (already resolved) relative to the root, POSIX style; "." for the root."""
        parts = self.relative_parts(path)
        if parts is None:
            raise WorkspaceEscape(f"{path} is outside the workspace {self.root}")
        return "/".join(parts) or "."

    def relative_parts(self, real: Path) -> list[str] | None:
        """The components of ``real`` below the root, or None if it is not inside."""
        root_parts = self.root.parts
        parts = real.parts
        if len(parts) < len(root_parts):
            return None
        head = parts[: len(root_parts)]
        if self.case_insensitive:
            same = [_fold(a) for a in head] == [_fold(b) for b in root_parts]
        else:
            same = tuple(head) == root_parts
        return list(parts[len(root_parts) :]) if same else None

    def _relative_from_absolute(self, path: str, shown: str) -> str:
        # Resolve the absolute path's prefix through the file system, so that e.g. a root
        # reached through a symlinked /tmp is still recognised.
        real = Path(os.path.realpath(path))
        rel_parts = self.relative_parts(real)
        if rel_parts is None:
            lexical = Path(os.path.normpath(path))
            rel_parts = self.relative_parts(lexical)
        if rel_parts is None:
            sandboxed = self._sandbox_path(path)
            if sandboxed is not None:
                return sandboxed
            raise WorkspaceEscape(
                f"refused {shown!r}: absolute paths must be inside the workspace {self.root}; "
                f"use a path relative to the workspace root instead{self._meant(path)}"
            )
        # Re-walk from the root by hand so every symlink below it is checked.
        lexical = Path(os.path.normpath(path))
        lex_parts = self.relative_parts(lexical)
        return "/".join(lex_parts if lex_parts is not None else rel_parts)

    def _sandbox_path(self, path: str) -> str | None:
        """``/workspace/pkg/mod.py`` read as ``pkg/mod.py`` when that is in the workspace and
        no such outside path exists: small models trained in sandboxes write their root
        before every path, and a refusal never changes their mind."""
        parts = Path(path).parts
        if len(parts) < 3 or parts[1] not in SANDBOX_ROOTS or os.path.lexists(path):
            return None
        tail = "/".join(p for p in parts[2:] if p not in ("", "."))
        if ".." in tail.split("/") or not os.path.lexists(self.root / tail):
            return None
        return tail

    def _meant(self, path: str) -> str:
        """ ", e.g. 'pkg/mod.py'" when a tail of an outside absolute path names something in
        the workspace: models trained in sandboxes write /workspace/... or /testbed/..."""
        parts = [p for p in Path(path).parts[1:] if p not in ("", ".", "..")]
        for start in range(1, len(parts)):
            tail = "/".join(parts[start:])
            if os.path.lexists(self.root / tail):
                return f": {tail!r}"
        return ""

    def _walk(self, parts: list[str], shown: str) -> Path:
        """Follow ``parts`` from the root, resolving symlinks and '..' physically."""
        pending = list(reversed(parts))
        current = self.root
        hops = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if self.relative_parts(current) == [] and hops:
                    raise WorkspaceEscape(
                        f"refused {shown!r}: a symbolic link in it leads outside the workspace "
                        f"{self.root}; only paths inside the workspace are allowed"
                    )
                if self.relative_parts(current) == []:
                    raise WorkspaceEscape(
                        f"refused {shown!r}: '..' would climb above the workspace root "
                        f"{self.root}; only paths inside the workspace are allowed"
                    )
                current = current.parent
                continue
            candidate = current / part
            if os.path.islink(candidate):
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise WorkspaceEscape(
                        f"refused {shown!r}: too many symbolic links (a symlink loop?) while "
                        "resolving it"
                    )
                target = os.readlink(candidate)
                if "\x00" in target:
                    raise WorkspaceEscape(f"refused {shown!r}: a symlink target is invalid")
                target_parts = [p for p in target.split("/") if p not in ("", ".")]
                if os.path.isabs(target):
                    # An absolute target is followed from '/'. Being outside the root midway
                    # is harmless: only where the walk ends is judged.
                    current = Path("/")
                pending.extend(reversed(target_parts))
                continue
            current = candidate
        return current


def _fold(name: str) -> str:
    return _visible(unicodedata.normalize("NFC", name)).casefold()


def _detect_case_insensitive(root: Path) -> bool:
    """Whether ``root``'s file system ignores case, judged without guessing from the OS."""
    name = root.name
    if name != name.swapcase():
        other = root.with_name(name.swapcase())
        try:
            return other.exists() and os.path.samefile(other, root)
        except OSError:
            return False
    try:
        fd, probe = tempfile.mkstemp(prefix=".MarathonCaseProbe", dir=root)
    except OSError:
        return False
    try:
        os.close(fd)
        other = os.path.join(root, os.path.basename(probe).swapcase())
        return os.path.exists(other)
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass


# -- environment --------------------------------------------------------------------------

SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Never passed through unless allow-listed by exact name.
SECRET_PATTERNS = (
    "*_KEY",
    "*_KEYS",
    "*KEY_*",
    "*_TOKEN",
    "*_TOKENS",
    "*TOKEN_*",
    "*_SECRET",
    "*_SECRETS",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*_PASS",
    "*CREDENTIAL*",
    "*_AUTH",
    "*_COOKIE",
    "AWS_*",
    "AZURE_*",
    "GOOGLE_*",
    "GCP_*",
    "HF_*",
    "HUGGING*",
    "OPENAI_*",
    "ANTHROPIC_*",
    "GITHUB_*",
    "GH_*",
    "SSH_*",
    "GPG_*",
    "DOCKER_*",
)


def looks_secret(name: str) -> bool:
    """Whether an environment variable name looks like it carries a credential."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_PATTERNS)


def command_env(
    allowlist: Iterable[str] = (),
    *,
    home: str | os.PathLike[str] | None = None,
    tmpdir: str | os.PathLike[str] | None = None,
    source: dict[str, str] | None = None,
) -> dict[str, str]:
    """A scrubbed environment for commands the agent runs.

    Only a fixed base (PATH, HOME, LANG/LC_ALL, TERM=dumb, TMPDIR, and settings that keep
    tools non-interactive) plus caller variables named in ``allowlist`` pass. An allow-list
    entry may be a glob (``PYTHON*``); globs never match secret-looking names (``*_KEY``,
    ``*_TOKEN``, ``AWS_*``, ...) nor the base variables: those pass only when listed by their
    exact name.
    """
    source = dict(os.environ) if source is None else source
    tmp = str(tmpdir) if tmpdir is not None else tempfile.gettempdir()
    env = {
        "PATH": SAFE_PATH,
        "HOME": str(home) if home is not None else tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "TMPDIR": tmp,
        "PAGER": "cat",
        "GIT_PAGER": "cat",
        "GIT_TERMINAL_PROMPT": "0",
        "NO_COLOR": "1",
        "PYTHONUNBUFFERED": "1",
        "DEBIAN_FRONTEND": "noninteractive",
        "CI": "1",
    }
    if source.get("PATH"):
        # Keep the caller's tool locations (venvs, ~/.cargo/bin, ...) reachable: PATH is not
        # a secret, and without it the agent could not run the project's own toolchain.
        # Relative entries ("", ".") are dropped, or a file the agent wrote into the
        # workspace could shadow `git` for the harness's own git calls.
        kept = [p for p in source["PATH"].split(os.pathsep) if os.path.isabs(p)]
        if kept:
            env["PATH"] = os.pathsep.join(dict.fromkeys(kept))
    base = set(env)
    for entry in allowlist:
        if any(ch in entry for ch in "*?["):
            for name, value in source.items():
                if fnmatch.fnmatchcase(name, entry) and not looks_secret(name) and name not in base:
                    env[name] = value
        elif entry in source:
            env[entry] = source[entry]
    return env
