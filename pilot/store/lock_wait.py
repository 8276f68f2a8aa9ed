"""Waiting out a database another process holds, and naming one that went away.

A write that meets SQLite's "database is locked" (another process's transaction, a backup)
is tried again with exponential backoff for ``MARATHON_DB_LOCK_WAIT`` seconds (600 by
default); a stop (``interrupt``, set by the CLI's signal handler) ends the wait at once. A
database that cannot be reached (PostgreSQL stopped or restarting, the connection cut) is
tried again for a few seconds, then given up. Each ends in :class:`StoreBusy` or
:class:`StoreGone`, one line a user can act on, never a traceback; the runner turns either
into a paused run (exit code 74) that resumes from its last committed event. A failed write
rolled back, so trying it again cannot write twice.

The retries are tenacity's, imported only when a first try failed: every write passes here,
and importing tenacity costs a fresh process 10 to 26 ms (bench/README.md, "libraries").
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol, TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError

from pilot.errors import ConfigurationError, MarathonError

DEFAULT_LOCK_WAIT = 600.0
"""Seconds a write waits out a database locked by another process before giving up
(``$MARATHON_DB_LOCK_WAIT`` overrides it)."""
GONE_WAIT = 5.0
"""Seconds a statement is tried again while the database cannot be reached (a restart's
blip) before the run stops."""
LOCK_WAIT_NOTE = "note: the database is locked by another process"
"""The start of the one line a run prints on stderr once a lock has held it past a second."""
FIRST_PAUSE = 0.02
LONGEST_PAUSE = 1.0

_T = TypeVar("_T")
_P = ParamSpec("_P")


class StoreBusy(MarathonError):
    """The database stayed locked by another process past the bound (or a stop was asked for
    while waiting): nothing can be recorded, so the run stops where its last committed event
    left it, and resumes from there."""


class StoreGone(StoreBusy):
    """The database cannot be reached (its server stopped, the connection was cut, the file
    was removed): handled as a busy store is, a paused run that resumes once it is back."""


_GONE_MARKS = (
    "connection refused",
    "could not connect",
    "server closed the connection",
    "terminating connection",
    "connection is closed",
    "connection already closed",
    "the database system is shutting down",
    "the database system is starting up",
    "consuming input failed",
    "ssl syscall error",
    "no such file or directory",
    "unable to open database file",
    "disk i/o error",
)


def is_locked(error: BaseException) -> bool:
    """SQLite's (or a server's) "locked" or "busy": another process holds the database."""
    text = str(error).lower()
    return isinstance(error, OperationalError) and ("locked" in text or "busy" in text)


def is_gone(error: BaseException) -> bool:
    """The database is not there to answer: a lost connection or a stopped server."""
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    text = str(getattr(error, "orig", None) or error).lower()
    return isinstance(error, DBAPIError) and any(mark in text for mark in _GONE_MARKS)


def is_storage_full(error: BaseException) -> bool:
    return isinstance(error, OperationalError) and "full" in str(error).lower()


def lock_wait_from_env() -> float:
    value = os.environ.get("MARATHON_DB_LOCK_WAIT", "")
    try:
        return max(0.0, float(value)) if value else DEFAULT_LOCK_WAIT
    except ValueError:
        raise ConfigurationError(
            f"MARATHON_DB_LOCK_WAIT={value!r} is not a number of seconds; set it to e.g. 600"
        ) from None


class Waiter(Protocol):
    """What the wait needs of a store."""

    shown_url: str
    lock_wait: float
    interrupt: threading.Event


def wait_out_locks(store: Waiter, action: Callable[[], _T]) -> _T:
    """``action()``, tried again while the database is locked (up to ``store.lock_wait`` s) or
    unreachable (up to ``GONE_WAIT`` s); ``StoreBusy`` / ``StoreGone`` when it stays so or a
    stop is asked for. The first try is a plain call."""
    try:
        return action()
    except OperationalError as exc:
        if not (is_locked(exc) or is_gone(exc)):
            raise
        first = exc
    except DBAPIError as exc:
        if not is_gone(exc):
            raise
        first = exc
    return _retried(store, action, first)


def _retried(store: Waiter, action: Callable[[], _T], first: BaseException) -> _T:
    import time

    from tenacity import (
        RetryCallState,
        Retrying,
        retry_if_exception,
        stop_after_delay,
        wait_exponential,
    )

    gone = is_gone(first) and not is_locked(first)
    bound = GONE_WAIT if gone else store.lock_wait
    told = threading.Event()
    started = time.monotonic()

    def retryable(exc: BaseException) -> bool:
        return is_gone(exc) if gone else is_locked(exc)

    def stopped(_state: RetryCallState) -> bool:
        return store.interrupt.is_set()

    def note_once(_state: RetryCallState) -> None:
        if not gone and not told.is_set() and time.monotonic() - started > 1.0:
            told.set()  # a lock held past a second is worth a word, once
            print(
                f"{LOCK_WAIT_NOTE}; waiting up to {store.lock_wait:.0f} s (Ctrl-C pauses)",
                file=sys.stderr,
                flush=True,
            )

    def give_up(state: RetryCallState) -> Any:
        error = state.outcome.exception() if state.outcome else first
        if error is not None and not retryable(error):
            raise error
        raise _unavailable(store, gone, bound) from None

    retrying = Retrying(
        retry=retry_if_exception(retryable),
        stop=stop_after_delay(bound) | stopped,
        wait=wait_exponential(multiplier=FIRST_PAUSE, min=FIRST_PAUSE, max=LONGEST_PAUSE),
        sleep=store.interrupt.wait,
        before_sleep=note_once,
        retry_error_callback=give_up,
    )
    if store.interrupt.is_set():
        raise _unavailable(store, gone, bound)
    return retrying(action)


def _unavailable(store: Waiter, gone: bool, bound: float) -> StoreBusy:
    if gone:
        return StoreGone(
            f"the database {store.shown_url} cannot be reached (its server stopped or the "
            f"connection was cut; tried for {bound:.0f} s); nothing more could be recorded. "
            "Once it is back"
        )
    if store.interrupt.is_set():
        return StoreBusy(
            "stopped while the database was locked by another process; resume once it is free"
        )
    return StoreBusy(
        f"the database {store.shown_url} stayed locked by another process for "
        f"{store.lock_wait:.0f} s (set MARATHON_DB_LOCK_WAIT to wait longer); find what "
        "holds it (e.g. `fuser` on the file), then resume"
    )


def waits_out_locks(method: Callable[_P, _T]) -> Callable[_P, _T]:
    """A store method that waits out another process's lock (``wait_out_locks``)."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        return wait_out_locks(args[0], lambda: method(*args, **kwargs))  # type: ignore[arg-type]

    return wrapper
