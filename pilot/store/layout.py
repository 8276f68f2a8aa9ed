"""Where a store keeps each run's files: its artifacts, its state checkpoint, its own worktree.

One rule, for the runner that writes them and for retention that removes them: a SQLite
store keeps them in the folder of its database file, any other store (a server) in the state
directory (``$MARATHON_HOME``, else ``~/.local/state/marathon``). Checkpoints and worktrees sit
beside the artifacts, never among them (the tools write there).
"""

from __future__ import annotations

from pathlib import Path

from pilot.environ import state_dir
from pilot.store.event_store import EventStore


def files_root(store: EventStore) -> Path:
    """The folder under which the store's runs keep their files."""
    url = store.url
    if url.startswith("sqlite:///") and ":memory:" not in url:
        return Path(url.removeprefix("sqlite:///")).parent
    return state_dir()


def artifacts_dir(store: EventStore, run_id: str) -> Path:
    """The files a run's tools kept (full outputs, diffs, images)."""
    return files_root(store) / "artifacts" / run_id


def checkpoint_dir(store: EventStore, run_id: str) -> Path:
    """A live run's folded state (``pilot.store.checkpoint``)."""
    return files_root(store) / "checkpoints" / run_id


def worktree_dir(store: EventStore, run_id: str) -> Path:
    """A run's own git worktree (unless its workflow works in place)."""
    return (files_root(store) / "worktrees" / run_id).resolve()


def sqlite_file(store: EventStore) -> Path | None:
    """The SQLite database file (None for a server or an in-memory database)."""
    url = store.url
    if store.is_sqlite and url.startswith("sqlite:///") and ":memory:" not in url:
        return Path(url.removeprefix("sqlite:///")).expanduser()
    return None
