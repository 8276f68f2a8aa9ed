"""File tools: read_file, write_file, edit_file.

Every path goes through ``Workspace.resolve``; reads are streamed and capped so a huge file
never sits in memory; writes are atomic (temporary file + rename) so a crash never leaves half
a file. Line endings: a file's existing style is kept (a CRLF file stays CRLF after
write_file and edit_file). Must not import ``pilot`` or ``brain``.
"""

from __future__ import annotations

import difflib
import mimetypes
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from tools.base import ToolArgs, ToolContext, ToolError, ToolResult

SAMPLE_BYTES = 8192
COUNT_LINES_LIMIT = 256 * 1024 * 1024  # beyond this, "more lines" is not counted exactly
EDIT_MAX_BYTES = 16 * 1024 * 1024
"""edit_file holds the file (and the edited copy) in memory: larger files are refused before
they are read (the ``max_file_bytes`` setting of edit_file changes it)."""

_SIGNATURES: list[tuple[bytes, str]] = [
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"%PDF", "PDF document"),
    (b"PK\x03\x04", "ZIP archive (or jar/wheel/docx)"),
    (b"\x1f\x8b", "gzip archive"),
    (b"BZh", "bzip2 archive"),
    (b"\xfd7zXZ\x00", "xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "7z archive"),
    (b"\x7fELF", "ELF executable or library"),
    (b"\xcf\xfa\xed\xfe", "Mach-O binary"),
    (b"MZ", "Windows executable"),
    (b"SQLite format 3\x00", "SQLite database"),
    (b"\x00asm", "WebAssembly module"),
    (b"RIFF", "RIFF media (WAV/AVI/WebP)"),
    (b"OggS", "Ogg media"),
    (b"ID3", "MP3 audio"),
]


def guess_binary_type(path: Path, sample: bytes) -> str:
    """A short human guess at what a binary file is, from its first bytes or its name."""
    for magic, label in _SIGNATURES:
        if sample.startswith(magic):
            return label
    if len(sample) > 8 and sample[4:8] == b"ftyp":
        return "MP4/QuickTime media"
    guessed, _ = mimetypes.guess_type(path.name)
    return guessed or "unknown binary data"


def looks_binary(sample: bytes) -> bool:
    """NUL bytes, or mostly control characters, mean binary (what git and grep do too)."""
    if b"\x00" in sample:
        return True
    if not sample:
        return False
    try:
        sample.decode("utf-8")
        return False
    except UnicodeDecodeError as exc:
        if exc.start >= len(sample) - 4:  # a multi-byte character cut by the sample's end
            return False
    controls = sum(1 for b in sample if b < 9 or 13 < b < 32)
    return controls / len(sample) > 0.1


def _regular_file(ctx: ToolContext, path: str, *, for_write: bool = False) -> Path:
    """The resolved path of an existing regular file, or a ToolError saying what it is."""
    real = ctx.workspace.resolve(path, for_write=for_write)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise ToolError(
            f"no such file {path!r}. Use find_files or list_dir to locate the right path"
            + ("" if for_write else ", or write_file to create it")
            + "."
        ) from None
    except NotADirectoryError:
        raise ToolError(f"no such file {path!r}: a part of the path is a file") from None
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{path!r} is a directory; use list_dir to see what it contains.")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{path!r} is not a regular file (a device, pipe or socket); refused.")
    return real


def _size(n: int) -> str:
    return f"{n:,} bytes" if n < 10_000 else f"{n:,} bytes ({n / 1024:,.0f} KB)"


# -- read_file ------------------------------------------------------------------------------


class ReadFileArgs(ToolArgs):
    path: str = Field(description="File path, relative to the workspace root.")
    offset: int = Field(default=1, ge=1, description="First line to show (1-based).")
    limit: int | None = Field(
        default=None, ge=1, description="How many lines to show (default and maximum 2000)."
    )


class ReadFile:
    """Numbered lines of a text file, capped in lines and bytes, with how to read on."""

    name = "read_file"
    description = (
        "Read a text file from the workspace; shows numbered lines (up to 2000 lines / 50 KB "
        "per call; use offset to read further). Use it before editing a file; use grep to "
        "find where something is instead of reading many files."
    )
    args_model = ReadFileArgs
    mutates = False

    def run(self, args: ReadFileArgs, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        settings = ctx.tool_settings(self.name)
        max_lines = int(settings.get("max_lines", 2000))
        max_bytes = int(settings.get("max_bytes", 50_000))
        max_line_chars = int(settings.get("max_line_chars", 2000))
        real = _regular_file(ctx, args.path)
        rel = ctx.workspace.relative(real)
        size = real.stat().st_size
        if size == 0:
            return ToolResult.ok(f"{rel} is an empty file (0 bytes).")
        limit = min(args.limit or max_lines, max_lines)

        with open(real, "rb") as fh:
            sample = fh.read(SAMPLE_BYTES)
            if looks_binary(sample):
                kind = guess_binary_type(real, sample)
                return ToolResult.ok(
                    f"{rel} is a binary file ({_size(size)}, looks like: {kind}); not shown. "
                    "Use run with a suitable command (e.g. `file`, `xxd | head`) to inspect it."
                )
            fh.seek(0)
            out: list[str] = []
            used = 0
            lineno = 0
            crlf = invalid = cut_lines = False
            last_line_ended = True
            stopped_at: int | None = None  # first line not shown, when capped
            for raw, skipped in _bounded_lines(fh, 4 * max_line_chars + 4):
                lineno += 1
                if lineno < args.offset:
                    continue
                if len(out) >= limit:
                    stopped_at = lineno
                    break
                ended = raw.endswith(b"\n")
                body = raw[:-1] if ended else raw
                if body.endswith(b"\r"):
                    body = body[:-1]
                    crlf = True
                try:
                    text = body.decode("utf-8")
                except UnicodeDecodeError:
                    text = body.decode("utf-8", errors="replace")
                    invalid = True
                if len(text) > max_line_chars or skipped:
                    more = len(text) - max_line_chars + skipped
                    text = text[:max_line_chars] + f" ... [line cut: {more:,} more characters]"
                    cut_lines = True
                entry = f"{lineno:>6}\t{text}"
                if out and used + len(entry) + 1 > max_bytes:
                    stopped_at = lineno
                    break
                out.append(entry)
                used += len(entry) + 1
                last_line_ended = ended
            total_known = stopped_at is None
            if stopped_at is None:
                total = lineno
            else:
                total = _count_rest(fh, real, size, lineno)
                total_known = total is not None

        if not out and args.offset > lineno:
            return ToolResult.error(
                f"offset {args.offset} is past the end of {rel}, which has {lineno} "
                f"line{'s' if lineno != 1 else ''}."
            )
        notes: list[str] = []
        truncated = False
        if stopped_at is not None:
            truncated = True
            if total_known and total is not None:
                more = total - stopped_at + 1
                notes.append(
                    f"... {more:,} more line{'s' if more != 1 else ''}: call read_file with "
                    f"offset={stopped_at} to read on."
                )
            else:
                notes.append(
                    f"... more lines follow: call read_file with offset={stopped_at} to read on."
                )
        elif not last_line_ended:
            notes.append("(no newline at end of file)")
        if crlf:
            notes.append("(this file has CRLF line endings; shown without the \\r)")
        if invalid:
            notes.append("(the file is not valid UTF-8; undecodable bytes are shown as \ufffd)")
        if cut_lines:
            notes.append(f"(lines longer than {max_line_chars} characters were cut)")
        text = "\n".join(out)
        if notes:
            text += "\n" + "\n".join(notes)
        return ToolResult.ok(text, truncated=truncated)


def _bounded_lines(fh, cap: int):
    """Each line of ``fh`` as (its first ``cap`` bytes with its end of line, how many bytes of
    it were skipped): a file of one 2 GB line is read in pieces, never held whole."""
    while raw := fh.readline(cap):
        skipped = 0
        if not raw.endswith(b"\n") and len(raw) >= cap:
            while piece := fh.readline(1 << 20):
                if piece.endswith(b"\n"):
                    skipped += len(piece) - 1
                    raw += b"\n"
                    break
                skipped += len(piece)
        yield raw, skipped


def _count_rest(fh, real: Path, size: int, lines_so_far: int) -> int | None:
    """Total line count, counting what is left of ``fh`` in chunks (None if too big)."""
    if size > COUNT_LINES_LIMIT:
        return None
    total = lines_so_far
    last = b"\n"
    while chunk := fh.read(1 << 20):
        total += chunk.count(b"\n")
        last = chunk[-1:]
    # ``lines_so_far`` counted the line we stopped at; it ended with "\n" or was the last.
    if last != b"\n":
        total += 1
    return total


# -- writing helpers ----------------------------------------------------------------------


def atomic_write(real: Path, data: bytes) -> None:
    """Write ``data`` to ``real`` via a sibling temporary file and a rename.

    A crash leaves either the old or the new file, never half of one; an existing file's
    permission bits are kept. The temporary file is created with O_EXCL and the process umask.
    """
    try:
        mode = stat.S_IMODE(os.stat(real).st_mode)
    except FileNotFoundError:
        mode = 0o666
    tmp = real.with_name(f".{real.name}.marathon-{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if mode != 0o666:
            os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if real.suffix == ".py":
        drop_stale_bytecode(real)


def drop_stale_bytecode(source: Path) -> None:
    """Remove ``source``'s compiled copies in ``__pycache__``. Python trusts a .pyc whose
    recorded mtime (whole seconds) and size match the source: an edit of the same size within
    the second of the last import (an agent's edit, then its test run, then the next edit)
    would run the old code."""
    cache = source.parent / "__pycache__"
    try:
        names = os.listdir(cache)
    except OSError:
        return
    prefix = source.stem + "."
    for name in names:
        if name.startswith(prefix) and name.endswith(".pyc"):
            try:
                os.unlink(cache / name)
            except OSError:
                pass


def line_ending_of(data: bytes) -> str:
    """ "\\r\\n" if the file's lines mostly end so, else "\\n"."""
    crlf = data.count(b"\r\n")
    return "\r\n" if crlf and crlf >= data.count(b"\n") - crlf else "\n"


# -- write_file -----------------------------------------------------------------------------


SHRINK_GUARD_BYTES = 4096
SHRINK_GUARD_SHARE = 0.1
"""write_file refuses to replace a file of ``SHRINK_GUARD_BYTES`` or more with content under
this share of its size: a small model wrote one import line as cachetools' whole 27,779-byte
``__init__.py`` (it meant to add the line)."""


class WriteFileArgs(ToolArgs):
    path: str = Field(description="File path, relative to the workspace root.")
    content: str = Field(description="The complete new content of the file.")


class WriteFile:
    """Create or replace a whole file."""

    name = "write_file"
    description = (
        "Create a file, or replace a file's whole content; parent directories are created. "
        "To change part of an existing file use edit_file instead (safer and shorter)."
    )
    args_model = WriteFileArgs
    mutates = True
    known_writes = True  # it writes only the path it resolved for writing

    def run(self, args: WriteFileArgs, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        real = ctx.workspace.resolve(args.path, for_write=True)
        rel = ctx.workspace.relative(real)
        if rel == ".":
            raise ToolError("write_file needs a file path, not the workspace root.")
        existed = os.path.lexists(real)
        old_size = 0
        content = args.content
        note = ""
        if existed:
            st = os.stat(real)
            if stat.S_ISDIR(st.st_mode):
                raise ToolError(f"{args.path!r} is a directory; choose a file path.")
            if not stat.S_ISREG(st.st_mode):
                raise ToolError(f"{args.path!r} is not a regular file; refused.")
            old_size = st.st_size
            with open(real, "rb") as fh:
                head = fh.read(1 << 20)
            shrunk = len(content.encode("utf-8", errors="surrogateescape"))
            if old_size >= SHRINK_GUARD_BYTES and shrunk < old_size * SHRINK_GUARD_SHARE:
                raise ToolError(
                    f"write_file would replace all {old_size:,} bytes of {rel} with {shrunk:,}: "
                    "it writes the whole file, not the lines given. To add or change lines, "
                    "use edit_file (or replace_definition for a function or class); to replace "
                    f"the file with this short content on purpose, remove it first (run: rm "
                    f"{rel}). Nothing was changed."
                )
            if (
                line_ending_of(head) == "\r\n"
                and "\n" in content
                and "\r\n" not in content
                and not looks_binary(head)
            ):
                content = content.replace("\n", "\r\n")
                note = " Kept the file's CRLF line endings."
        else:
            parent = real.parent
            if parent.exists() and not parent.is_dir():
                raise ToolError(f"cannot create {args.path!r}: a part of the path is a file.")
            parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8", errors="surrogateescape")
        atomic_write(real, data)
        lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        if existed:
            msg = (
                f"Overwrote {rel} (was {old_size:,} bytes, now {len(data):,} bytes, {lines} lines)."
            )
        else:
            msg = f"Created {rel} ({len(data):,} bytes, {lines} lines)."
        return ToolResult.ok(msg + note)


# -- edit_file ------------------------------------------------------------------------------


class EditFileArgs(ToolArgs):
    path: str = Field(description="File path, relative to the workspace root.")
    old: str = Field(description="The exact text to replace, as it appears in the file.")
    new: str = Field(description="The replacement text.")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence instead of exactly one."
    )


@dataclass
class _Match:
    start: int
    end: int
    replacement: str
    how: str = ""  # non-empty when a tolerant fallback was used


class EditFile:
    """Replace an exact snippet of a file; answer with a unified diff."""

    name = "edit_file"
    description = (
        "Replace text in a file: `old` must match the file exactly once (include a few "
        "surrounding lines to make it unique) unless replace_all is true. Answers with a diff. "
        "Read the file first; use write_file only for new files or full rewrites."
    )
    args_model = EditFileArgs
    mutates = True
    known_writes = True  # it writes only the path it resolved for writing

    def run(self, args: EditFileArgs, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        if args.old == "":
            raise ToolError(
                "`old` is empty; give the exact text to replace. To create or rewrite a whole "
                "file use write_file."
            )
        if args.old == args.new:
            raise ToolError("`old` and `new` are the same; nothing would change.")
        real = _regular_file(ctx, args.path, for_write=True)
        rel = ctx.workspace.relative(real)
        limit = int(ctx.tool_settings(self.name).get("max_file_bytes", EDIT_MAX_BYTES))
        with open(real, "rb") as fh:  # judged before the whole file is read
            if looks_binary(fh.read(SAMPLE_BYTES)):
                raise ToolError(f"{rel} is a binary file; edit_file only edits text.")
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise ToolError(
                    f"{rel} is {_size(size)}, over edit_file's limit of {_size(limit)}; "
                    "change it with the run tool instead (e.g. `sed -i` or a short script)."
                )
            fh.seek(0)
            data = fh.read(limit + 1)
        if len(data) > limit:  # it grew since: never write back a part of it
            raise ToolError(f"{rel} is growing past edit_file's limit; change it with run.")
        text = data.decode("utf-8", errors="surrogateescape")

        matches = self._find(text, args.old, args.new, args.replace_all, rel)
        pieces, pos = [], 0
        for m in matches:
            pieces += [text[pos : m.start], m.replacement]
            pos = m.end
        pieces.append(text[pos:])
        updated = "".join(pieces)
        atomic_write(real, updated.encode("utf-8", errors="surrogateescape"))

        diff = unified_diff(text, updated, rel)
        count = len(matches)
        head = f"Edited {rel}: replaced {count} occurrence{'s' if count != 1 else ''}."
        hows = sorted({m.how for m in matches if m.how})
        if hows:
            head += f" Note: no exact match; matched {' and '.join(hows)}."
        return ToolResult.ok(f"{head}\n{diff}")

    def _find(self, text: str, old: str, new: str, replace_all: bool, rel: str) -> list[_Match]:
        variants = [(old, new)]
        if "\r\n" in text and "\r\n" not in old and "\n" in old:
            variants.append(
                (old.replace("\n", "\r\n"), new.replace("\r\n", "\n").replace("\n", "\r\n"))
            )
        for o, n in variants:
            starts = _occurrences(text, o)
            if len(starts) == 1 or (replace_all and starts):
                return [_Match(s, s + len(o), n) for s in starts]
            if len(starts) > 1:
                lines = [text.count("\n", 0, s) + 1 for s in starts]
                shown = ", ".join(str(n) for n in lines[:20]) + (", ..." if len(lines) > 20 else "")
                raise ToolError(
                    f"`old` occurs {len(starts)} times in {rel} (at lines {shown}); include more "
                    "surrounding lines to make it unique, or set replace_all=true to replace "
                    "every one."
                )
        for level, how in ((1, "ignoring trailing whitespace"), (2, "ignoring indentation")):
            found = _line_matches(text, old, level)
            if len(found) == 1:
                return [_line_replacement(text, old, new, found[0], level, how)]
            if len(found) > 1:
                raise ToolError(
                    f"`old` does not occur exactly in {rel}; {how} it matches "
                    f"{len(found)} places, so nothing was changed. Copy the exact text from "
                    "read_file output (without the line numbers)."
                )
        raise ToolError(f"`old` was not found in {rel}; nothing was changed.{_closest(text, old)}")


def _occurrences(text: str, needle: str) -> list[int]:
    out, pos = [], text.find(needle)
    while pos != -1:
        out.append(pos)
        pos = text.find(needle, pos + len(needle))
    return out


def _split_lines(text: str) -> list[tuple[int, str]]:
    """(start offset, line with its ending) for every line of ``text``."""
    out, pos = [], 0
    for line in text.splitlines(keepends=True):
        out.append((pos, line))
        pos += len(line)
    return out


def _norm(line: str, level: int) -> str:
    line = line.rstrip("\r\n").rstrip()
    return line.lstrip() if level == 2 else line


def _old_lines(old: str) -> list[str]:
    lines = old.replace("\r\n", "\n").split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def _line_matches(text: str, old: str, level: int) -> list[int]:
    """Indexes of the lines where ``old`` matches line by line at a tolerance level."""
    want = [_norm(line, level) for line in _old_lines(old)]
    if not any(want):
        return []
    have = [_norm(line, level) for _, line in _split_lines(text)]
    k = len(want)
    return [i for i in range(len(have) - k + 1) if have[i : i + k] == want]


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _line_replacement(text: str, old: str, new: str, first: int, level: int, how: str) -> _Match:
    lines = _split_lines(text)
    k = len(_old_lines(old))
    window = lines[first : first + k]
    start = window[0][0]
    end = window[-1][0] + len(window[-1][1])
    last = window[-1][1]
    eol = last[len(last.rstrip("\r\n")) :]
    new_text = new.replace("\r\n", "\n")
    if level == 2:
        old_first = next((ln for ln in _old_lines(old) if ln.strip()), "")
        file_first = next((ln for _, ln in window if ln.strip()), "")
        have, want = _indent(old_first), _indent(file_first.rstrip("\r\n"))
        out = []
        for ln in new_text.split("\n"):
            if not ln.strip():
                out.append(ln)
            elif want.startswith(have):
                out.append(want[len(have) :] + ln)
            elif have.startswith(want) and ln.startswith(have[len(want) :]):
                out.append(ln[len(have) - len(want) :])
            else:
                out.append(ln)
        new_text = "\n".join(out)
    if eol and not new_text.endswith("\n"):
        new_text += "\n"
    if eol == "\r\n":
        new_text = new_text.replace("\n", "\r\n")
    if not eol and new_text.endswith("\n") and not new.endswith("\n"):
        new_text = new_text[:-1]
    return _Match(start, end, new_text, how)


def _closest(text: str, old: str) -> str:
    """A hint with the file lines most like the first line of ``old`` (skipped when costly)."""
    first = next((ln.strip() for ln in _old_lines(old) if ln.strip()), "")
    lines = text.splitlines()
    if not first or len(lines) > 20_000:
        return " Read the file again and copy the exact text."
    scored = []
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if not s:
            continue
        sm = difflib.SequenceMatcher(None, first, s, autojunk=False)
        if sm.real_quick_ratio() < 0.5 or sm.quick_ratio() < 0.5:
            continue
        ratio = sm.ratio()
        if ratio >= 0.5:
            scored.append((ratio, i, line))
    if not scored:
        return " Read the file again and copy the exact text."
    scored.sort(key=lambda t: (-t[0], t[1]))
    shown = "\n".join(
        f"{i:>6}\t{line[:200]}" for _, i, line in sorted(scored[:3], key=lambda t: t[1])
    )
    return (
        f" The closest lines in the file are:\n{shown}\nCopy the exact text (without line numbers)."
    )


def unified_diff(before: str, after: str, rel: str, max_lines: int = 80) -> str:
    """A short unified diff of an edit, capped at ``max_lines`` lines."""
    a = [ln.rstrip("\r\n") for ln in before.splitlines()]
    b = [ln.rstrip("\r\n") for ln in after.splitlines()]
    lines = list(difflib.unified_diff(a, b, f"a/{rel}", f"b/{rel}", n=2, lineterm=""))
    if len(lines) > max_lines:
        more = len(lines) - max_lines
        lines = [*lines[:max_lines], f"... [{more} more diff lines not shown; use git_diff]"]
    return "\n".join(lines)
