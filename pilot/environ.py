"""What the environment tells the pilot: where its state lives, the database URL, and secrets
kept out of the pilot's own environment (and database URLs printed without them).

Without the sandbox a command the agent runs can read its parent's environment through
``/proc/$PPID/environ``, which shows the environment the pilot was started with, whatever
the pilot removed from ``os.environ`` since (the kernel reads the process's original
environment block). So before tools run, ``protect_environment`` overwrites, in that block,
the value of every secret-looking variable (the names ``tools.workspace.looks_secret``
flags, and every ``NAME=value`` or value the redaction rules of ``pilot.redact`` would
flag: ``MYSQL_PWD``, ``PASSPHRASE``, a Slack webhook URL, a JWT, a Stripe key, a URL with a
password, ...):
- ``MARATHON_DB`` is then dropped from ``os.environ`` too (the store is already open; the URL
  is remembered for ``default_db_url`` and for not printing it);
- the others stay in ``os.environ`` as fresh copies (the model client's API key, the
  ``notify`` command's webhook token), which ``/proc`` does not show.
Linux with glibc only; elsewhere it changes nothing.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from pilot.redact import Redactor, mask_url_credentials, redactor_for
from tools.workspace import looks_secret

DB_VARIABLE = "MARATHON_DB"
_taken: dict[str, str] = {}


def taken_db_url() -> str | None:
    """``$MARATHON_DB`` as it was before ``protect_environment`` dropped it."""
    return os.environ.get(DB_VARIABLE) or _taken.get(DB_VARIABLE)


def state_dir() -> Path:
    """Where Marathon keeps its database and artifacts unless told otherwise."""
    if home := os.environ.get("MARATHON_HOME"):
        return Path(home)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "marathon"


def default_db_url() -> str:
    """``$MARATHON_DB``, else ``marathon.db`` in the state directory."""
    return taken_db_url() or f"sqlite:///{state_dir() / 'marathon.db'}"


def _secret(name: str, value: str, redactor: Redactor) -> bool:
    if looks_secret(name) or name == DB_VARIABLE or mask_url_credentials(value) != value:
        return True
    assignment = f"{name}={value}"
    return redactor.text(assignment) != assignment or redactor.text(value) != value


def protect_environment() -> list[str]:
    """Hide secret-looking variables from ``/proc/<pid>/environ`` (see the module's doc);
    returns their names."""
    redactor = redactor_for(())
    names = [name for name, value in os.environ.items() if _secret(name, value, redactor)]
    if not names:
        return []
    values = {name: os.environ[name] for name in names}
    _wipe_original_block({name.encode() for name in names})
    for name, value in values.items():
        if name == DB_VARIABLE:
            _taken[name] = value
            del os.environ[name]
        else:
            os.environ[name] = value  # a fresh copy outside the original block
    return names


def _wipe_original_block(names: set[bytes]) -> None:
    """Zero the values of ``names`` where the C ``environ`` points at them (at start-up: the
    block ``/proc/<pid>/environ`` reads)."""
    try:
        libc = ctypes.CDLL(None)
        entries = ctypes.cast(
            ctypes.c_void_p.in_dll(libc, "environ").value, ctypes.POINTER(ctypes.c_void_p)
        )
    except (OSError, ValueError, AttributeError):
        return
    i = 0
    while entries[i]:
        address = entries[i]
        entry = ctypes.string_at(address)
        name, sep, value = entry.partition(b"=")
        if sep and name in names and value:
            ctypes.memset(address + len(name) + 1, 0, len(value))
        i += 1


def db_option(url: str) -> str:
    """`` --db URL`` for a command line Marathon prints, or "" when the URL is the default or
    came from ``$MARATHON_DB`` (the printed command then finds it the same way); the URL's
    password is shown as ``***``."""
    if url in (taken_db_url(), default_db_url()):
        return ""
    return f" --db {mask_url_credentials(url)}"
