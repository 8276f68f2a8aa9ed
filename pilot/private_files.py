"""The state directory is private: folders 0700, files 0600, whatever the umask.

It holds the database, the tools' artifacts, the state checkpoints and the background logs:
a run's whole record, readable by this user only. Folders Marathon creates are made 0700 one
component at a time (``mkdir -p`` gives the parents the umask's mode), and its own folders
(``artifacts``, ``checkpoints``, ``logs``, a run's folders) are made 0700 when they exist
already; a folder the user chose for the database is left as it is.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dirs(path: Path) -> Path:
    """``path`` and any missing parents created with mode 0700; ``path`` itself made 0700
    if it existed with another mode. Returns ``path``."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:
            pass
        folder.chmod(PRIVATE_DIR)
    if not missing and stat.S_IMODE(path.stat().st_mode) != PRIVATE_DIR:
        path.chmod(PRIVATE_DIR)
    return path


def private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (an empty file is a valid new
    SQLite database, and SQLite gives its -wal and -shm files the database file's mode)."""
    private_dirs_for_new(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        return
    os.close(fd)


def private_dirs_for_new(path: Path) -> None:
    """Missing folders up to ``path`` created 0700; existing ones left alone."""
    if not path.exists():
        private_dirs(path)


def make_private(path: Path) -> None:
    """A file Marathon wrote, made 0600 (a missing one is skipped)."""
    try:
        if stat.S_IMODE(os.lstat(path).st_mode) != PRIVATE_FILE and path.is_file():
            path.chmod(PRIVATE_FILE)
    except FileNotFoundError:
        pass


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (created or truncated) with mode 0600, never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, PRIVATE_FILE)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    make_private(path)


def inside(path: Path, folder: Path | str | None) -> bool:
    """Whether ``path`` is ``folder`` or below it (both resolved)."""
    if folder is None:
        return False
    try:
        real, top = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    except OSError:
        return True
    return real == top or top in real.parents
