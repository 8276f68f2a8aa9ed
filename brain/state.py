"""Where the brain keeps what it started, so ``brain ps/down/status/logs`` work across commands.

A small JSON registry in the brain's state directory: one record per server (its spec, the
launcher handle, who supervises it) and one per preload daemon (its handle and the fingerprint
it was started with). Writes are atomic (temp file + rename) under an exclusive lock, so two
``brain`` commands never lose each other's records. Nothing here talks to Docker or processes.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from brain.spec import ServerSpec, default_state_dir


def state_dir() -> Path:
    """``$MARATHON_HOME/brain`` when set (tests, several installs), else the XDG state dir."""
    home = os.environ.get("MARATHON_HOME")
    return Path(home) / "brain" if home else default_state_dir()


def logs_dir() -> Path:
    return state_dir() / "logs"


def events_db_url() -> str:
    """The database the pilot uses too: ``$MARATHON_DB``, else ``marathon.db`` beside the
    brain's state (same rule as ``pilot.environ.default_db_url``, without importing
    the pilot)."""
    if url := os.environ.get("MARATHON_DB"):
        return url
    home = os.environ.get("MARATHON_HOME")
    base = Path(home) if home else default_state_dir().parent
    return f"sqlite:///{base / 'marathon.db'}"


class ServerRecord(BaseModel):
    """One server the brain started: enough to find, stop and describe it later."""

    name: str
    backend: str
    spec: dict[str, Any]
    handle: dict[str, Any]
    started_at: float = Field(default_factory=time.time)
    supervisor_pid: int | None = None
    """The ``brain up --watch`` process keeping it alive; ``brain down`` asks it to stop."""
    preload: bool = False
    fleet: str | None = None
    """The fleet this server is a replica of (``brain up --replicas`` / ``--fleet``), if any."""
    replica: int | None = None
    """Its index in the fleet (``<fleet>-r<replica>``)."""

    def server_spec(self) -> ServerSpec:
        return ServerSpec.model_validate(self.spec)


class PreloadRecord(BaseModel):
    """A running weight-cache daemon and the fingerprint (WeightCacheKey fields) it holds."""

    name: str
    backend: str
    spec: dict[str, Any]
    handle: dict[str, Any]
    fingerprint: dict[str, Any]
    started_at: float = Field(default_factory=time.time)

    def server_spec(self) -> ServerSpec:
        return ServerSpec.model_validate(self.spec)


class Registry:
    """The JSON file ``servers.json`` in the state dir: ``{"servers": {...}, "preload": {...}}``."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or state_dir()
        self.path = self.directory / "servers.json"

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / ".servers.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                data = self._read()
                before = json.dumps(data, sort_keys=True)
                yield data
                if json.dumps(data, sort_keys=True) != before:
                    self._write(data)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            data = {}
        data.setdefault("servers", {})
        data.setdefault("preload", {})
        return data

    def _write(self, data: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
        os.replace(tmp, self.path)

    # servers -----------------------------------------------------------------------------

    def servers(self) -> list[ServerRecord]:
        return [ServerRecord.model_validate(v) for v in self._read()["servers"].values()]

    def get(self, name: str) -> ServerRecord | None:
        raw = self._read()["servers"].get(name)
        return ServerRecord.model_validate(raw) if raw else None

    def put(self, record: ServerRecord) -> None:
        with self._locked() as data:
            data["servers"][record.name] = record.model_dump(mode="json")

    def remove(self, name: str) -> None:
        with self._locked() as data:
            data["servers"].pop(name, None)

    # preload daemons ---------------------------------------------------------------------

    def preloads(self) -> list[PreloadRecord]:
        return [PreloadRecord.model_validate(v) for v in self._read()["preload"].values()]

    def get_preload(self, name: str) -> PreloadRecord | None:
        raw = self._read()["preload"].get(name)
        return PreloadRecord.model_validate(raw) if raw else None

    def put_preload(self, record: PreloadRecord) -> None:
        with self._locked() as data:
            data["preload"][record.name] = record.model_dump(mode="json")

    def remove_preload(self, name: str) -> None:
        with self._locked() as data:
            data["preload"].pop(name, None)
