"""The paths a command changed in a run's workspace, known from the kernel (Linux inotify).

A ``run`` step's command may write anything, so without this its snapshot must ask git to look
at every file (``git add -A``: an ``lstat`` per file and the whole index read and written,
linear in the repository). A :class:`TreeWatch` started before the command watches every
directory git would look at (not ``.git``, not an ignored directory the last snapshot does not
hold) and collects the names written, created, deleted, moved or chmodded in them; the snapshot
then hashes only those paths (``take_snapshot(paths=...)``, in-process with libgit2).

It says "unknown" (``None``) whenever it cannot vouch for the list, and the snapshot then
refreshes the whole tree as before: a directory created, removed or moved (its contents came
or went without an event each), the kernel's queue overflowing, a watched directory gone, a
watch refused (the user's ``fs.inotify.max_user_watches``), or more than ``MAX_PATHS`` paths.
A file changed through a hard link from outside the workspace is not seen (no event reaches a
watched directory); the stat cache of the run's index still catches it at the next full
refresh. No new dependency: the three system calls through ctypes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
import weakref
from collections.abc import Callable
from pathlib import Path

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

FILE_EVENTS = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO
ENTRY_EVENTS = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
WATCH_MASK = (
    FILE_EVENTS | ENTRY_EVENTS | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW
) | IN_EXCL_UNLINK
HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)

MAX_PATHS = 2000
"""Above this many changed paths, git's own refresh of the index is the cheaper way."""


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        lib = ctypes.CDLL(name or "libc.so.6", use_errno=True)
        lib.inotify_init1, lib.inotify_add_watch  # noqa: B018 (present: a Linux libc)
    except (OSError, AttributeError):
        return None
    return lib


class TreeWatch:
    """Changed paths under ``root`` since the last :meth:`take`, or None when unknown.

    ``skip(rel)`` says whether the directory ``rel`` (relative, POSIX, never the root) need not
    be watched (git ignores it and the last snapshot does not hold it).
    """

    def __init__(self, root: Path, skip: Callable[[str], bool]) -> None:
        self.root = root
        self.skip = skip
        self._dirs: dict[int, str] = {}  # watch descriptor -> directory, relative ("" the root)
        self._changed: set[str] = set()
        self._unknown = False
        self._broken = False  # a new folder could not be watched: unknown from now on
        self._fd = -1
        libc = _libc()
        if libc is None:
            raise OSError(errno.ENOSYS, "no inotify here")
        self._libc = libc
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)
        self._watch_tree("")

    @classmethod
    def start(cls, root: Path, skip: Callable[[str], bool]) -> TreeWatch | None:
        """A watch of ``root``, or None where inotify is missing or refused (too many
        watches, too many instances): the snapshots then refresh the whole tree, as before."""
        try:
            return cls(root, skip)
        except OSError:
            return None

    def close(self) -> None:
        self._closer()

    def take(self) -> set[str] | None:
        """The paths changed since the last call (relative, POSIX), or None when unknown;
        either way the next call counts from now."""
        self._drain()
        changed, unknown = self._changed, self._unknown
        self._changed, self._unknown = set(), False
        if unknown or self._broken or len(changed) > MAX_PATHS:
            return None
        return changed

    def _watch_tree(self, rel: str) -> None:
        """Watch ``rel`` and every directory below it that git would look at."""
        stack = [rel]
        while stack:
            folder = stack.pop()
            path = self.root / folder if folder else self.root
            wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), WATCH_MASK)
            if wd < 0:
                code = ctypes.get_errno()
                if code in (errno.ENOENT, errno.ENOTDIR):  # gone already: its event says so
                    self._unknown = True
                    continue
                raise OSError(code, f"inotify_add_watch {path} failed")
            self._dirs[wd] = folder
            try:
                entries = list(os.scandir(path))
            except OSError:
                self._unknown = True
                continue
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                child = f"{folder}/{entry.name}" if folder else entry.name
                if child == ".git" or self.skip(child):
                    continue
                stack.append(child)

    def _drain(self) -> None:
        if self._closer.alive is False:
            self._unknown = True
            return
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, size = HEADER.unpack_from(data, offset)
                offset += HEADER.size
                name = data[offset : offset + size].rstrip(b"\0").decode("utf-8", "surrogateescape")
                offset += size
                self._event(wd, mask, name)

    def _event(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            self._unknown = True
            return
        folder = self._dirs.get(wd)
        if mask & IN_IGNORED:
            self._dirs.pop(wd, None)
            return
        if folder is None:
            return
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            self._unknown = True
            return
        rel = f"{folder}/{name}" if folder else name
        if mask & IN_ISDIR:
            if mask & ENTRY_EVENTS and rel != ".git" and not self.skip(rel):
                self._unknown = True  # a folder came or went: its files came or went unseen
                if mask & (IN_CREATE | IN_MOVED_TO):
                    try:
                        self._watch_tree(rel)
                    except OSError:
                        self._broken = True
            return
        if name and rel != ".git":
            self._changed.add(rel)
        elif name:
            self._unknown = True
