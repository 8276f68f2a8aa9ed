"""Opening the store from a URL a user gave, with an error that names what is wrong with it.

A bad URL, a missing driver, a database server that refuses the login, a SQLite path that is
a folder: each becomes a ``ConfigurationError`` saying which part to fix (the CLI prints it as
one ``error:`` line). The URL is read with SQLAlchemy's own parser, so this lives in the store
wing; passwords never reach a message (``shown_url``). SQLAlchemy and the store are imported
when a store is opened, not with the CLI.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pilot.errors import ConfigurationError
from pilot.store.records import DURABILITIES, RunRecord

POSTGRES_EXTRA = "pip install 'marathon[postgres]'"
URL_FORMS = "sqlite:///PATH (a file) or postgresql+psycopg://USER@HOST:PORT/DATABASE"


class NoDatabase(ConfigurationError):
    """A read-only command was pointed at a SQLite file that does not exist (nothing ran there)."""


def shown_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (messages are pasted into issues)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return url if "@" not in url else "<the --db URL>"


def state_dir_problem() -> str | None:
    """What is wrong with ``$MARATHON_HOME``, if anything: a file, or a folder that cannot be
    made where it is asked for (under a read-only or pseudo file system such as /proc)."""
    home = os.environ.get("MARATHON_HOME")
    if not home:
        return None
    path = Path(home).expanduser()
    if path.exists() and not path.is_dir():
        return (
            f"MARATHON_HOME={home} is a file, not a folder: point MARATHON_HOME at a folder "
            "(it is created if missing) or unset it to use ~/.local/state/marathon"
        )
    if path.exists():
        return None
    parent = next((p for p in path.absolute().parents if p.exists()), Path("/"))
    if not parent.is_dir() or not _can_make_in(parent):
        return (
            f"MARATHON_HOME={home} does not exist and cannot be created ({parent} takes no "
            "new folders): point MARATHON_HOME at a writable folder or unset it to use "
            "~/.local/state/marathon"
        )
    return None


def _can_make_in(folder: Path) -> bool:
    """Whether a folder can be made in ``folder``: writable, on a file system that stores
    files (/proc and /sys report no blocks and refuse them)."""
    try:
        return os.access(folder, os.W_OK) and os.statvfs(folder).f_blocks > 0
    except OSError:
        return False


def _sqlite_path(url: str) -> Path | None:
    rest = url.split("///", 1)[1] if "///" in url else ""
    if not rest or rest.startswith(":memory:") or rest.startswith("file:"):
        return None
    return Path(rest.split("?", 1)[0]).expanduser()


def _url_source(url: str | None, given: bool) -> str:
    """Where the URL came from, as the user would name it (the CLI's ``--db`` falls back to
    ``$MARATHON_DB``, so an equal value came from there)."""
    env = os.environ.get("MARATHON_DB")
    if url is not None and url != env:
        return "--db"
    return "MARATHON_DB" if env else "the default database"


def normalize_url(url: str) -> str:
    """A plain ``postgresql://`` URL means psycopg 3 (the driver the postgres extra installs),
    whichever driver the installed SQLAlchemy would pick by default."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def read_runs(url: str | None, limit: int) -> list[RunRecord] | None:
    """``open_store(url, create=False).list_runs(limit=limit)`` on a plain ``sqlite:///FILE``
    store through sqlite3 alone (``pilot.store.sqlite_list``): no SQLAlchemy import. The same
    refusals as ``open_store`` (a missing file, a folder, a file not SQLite or not ours);
    None when the store must be opened the usual way (another database, another URL form,
    a file to migrate, a lock)."""
    from pilot.environ import default_db_url
    from pilot.private_files import private_file
    from pilot.store.sqlite_check import check_sqlite_file
    from pilot.store.sqlite_list import list_runs

    given = url is not None or bool(os.environ.get("MARATHON_DB"))
    if not given and state_dir_problem():
        return None
    target = normalize_url(url or default_db_url())
    file = target.removeprefix("sqlite:///")
    if file == target or not file or "?" in file or "%" in file or file.startswith(":memory:"):
        return None
    path = _sqlite_path(target)
    if path is None:
        return None
    _check_sqlite_target(path, _url_source(url, given), False)
    check_sqlite_file(path)
    found = list_runs(path, limit)
    if found is not None:
        private_file(path)  # as an opened store makes it
    return found


def open_store(url: str | None, durability: str = "normal", *, create: bool = True) -> Any:
    """The store at ``url`` (default: the state directory's SQLite file), or a
    ``ConfigurationError`` saying what is wrong with the URL, the driver or the server.

    With ``create=False`` (commands that only read) a SQLite file that does not exist is not
    created, nor its folder: :class:`NoDatabase` is raised instead.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

    from pilot.environ import default_db_url
    from pilot.store.event_store import EventStore

    if durability not in DURABILITIES:
        raise ConfigurationError(
            f"--durability {durability!r} is not one of {', '.join(DURABILITIES)}: normal "
            "survives any process death, full also survives a power cut (fsync)"
        )
    given = url is not None or bool(os.environ.get("MARATHON_DB"))
    if not given and (problem := state_dir_problem()):
        raise ConfigurationError(problem)
    target = normalize_url(url or default_db_url())
    flag = _url_source(url, given)
    try:
        parsed = make_url(target)
    except ArgumentError:
        raise ConfigurationError(
            f"{flag} {shown_url(target)!r} is not a database URL; use {URL_FORMS}"
        ) from None
    if parsed.drivername.startswith("sqlite"):
        _check_sqlite_target(_sqlite_path(target), flag, create)
    try:
        return EventStore(target, durability=durability)
    except NoSuchModuleError:
        raise ConfigurationError(
            f"{flag} {shown_url(target)!r}: no database driver {parsed.drivername!r}; "
            f"use {URL_FORMS}"
        ) from None
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("psycopg", "psycopg2", "psycopg_binary"):
            raise ConfigurationError(
                f"{flag} {shown_url(target)!r} needs the PostgreSQL driver psycopg, which is not "
                f"installed: {POSTGRES_EXTRA} (and use a postgresql+psycopg:// URL)"
            ) from None
        raise ConfigurationError(
            f"{flag} {shown_url(target)!r} needs the Python module {exc.name!r}, which is not "
            f"installed: pip install it, or use {URL_FORMS}"
        ) from None
    except OperationalError as exc:
        raise ConfigurationError(_operational(target, parsed, exc)) from None
    except OSError as exc:
        raise ConfigurationError(f"cannot open the database {shown_url(target)}: {exc}") from None


def _check_sqlite_target(path: Path | None, flag: str, create: bool) -> None:
    """A SQLite file's path refused when it is missing (``create=False``), a folder, or in a
    folder that is a file."""
    if path is not None and not create and not path.exists():
        raise NoDatabase(
            f"no database at {path} ({flag}): no run has been started with it; check the "
            "path (--db, MARATHON_DB, MARATHON_HOME) or start a run with `pilot run FILE`"
        )
    if path is not None and path.is_dir():
        raise ConfigurationError(
            f"{flag} names {path}, which is a folder: give the database file's path "
            f"(e.g. sqlite:///{path / 'marathon.db'})"
        )
    if path is not None and path.parent.exists() and not path.parent.is_dir():
        raise ConfigurationError(
            f"cannot create the database {path}: {path.parent} is a file, not a folder"
        )


def _operational(url: str, parsed: Any, exc: Exception) -> str:
    detail = str(getattr(exc, "orig", exc)).strip().splitlines()[0] if str(exc) else ""
    if parsed.drivername.startswith("sqlite"):
        return (
            f"cannot open the SQLite database {_sqlite_path(url) or url}: {detail}; check that "
            "its folder exists and is writable"
        )
    where = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
    if "does not exist" in detail and "database" in detail:
        return (
            f"the database {parsed.database!r} does not exist on {where}: create it "
            f"(createdb {parsed.database}) or fix the name in --db / MARATHON_DB"
        )
    if "password" in detail or "authentication" in detail:
        return (
            f"the database server at {where} refused the login ({detail}): check the user and "
            "password in --db / MARATHON_DB"
        )
    return (
        f"cannot connect to the database at {where} ({detail}): is PostgreSQL running and "
        "reachable there? Check --db / MARATHON_DB"
    )
