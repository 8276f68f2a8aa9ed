"""State checkpoints: a live run's folded state, so that a resume replays only the events since.

Folding every event of a run (fetch, JSON validation, fold) grows with the run (figures in
bench/README.md). Every ``CHECKPOINT_EVERY`` events (and at
a pause) the runner saves its ``RunState``, and a resume starts from it and folds only the
events after it.

Two files, so that a checkpoint costs what happened since the last one, not the whole context
again: ``messages.jsonl`` is an append-only log of the conversation's messages (they are never
changed in place; a compaction replaces the list, and the log is then rewritten), one JSON
line per checkpoint (the messages are the chat API's JSON, written as they are), and
``state.json`` is the rest of the state, with how many bytes of the log it covers and their
sha256.

What a checkpoint may never do is run code: it is read by ``pilot resume``, and a file planted
by the agent's own commands must not execute there. So:
- it is JSON data (``pilot.store.statecodec``: only JSON values and the state's own classes are
  built from it), never pickle;
- it lives in the store's state directory (``checkpoints/<run>``, mode 0700, files 0600), not
  beside the artifacts the tools write, and never inside the run's workspace (a database kept
  in the workspace gets no checkpoint);
- it is redacted as the events are (the state directory must hold no secret in clear; folding
  the stored, redacted events gives the same messages);
- it is a cache, never a source of truth: used only if written by this very code (a digest of
  the modules the state is made of), for this run and workspace, with the event it ends at
  still the one in the store (its payload digest) and its log intact (length and sha256);
  otherwise, and on any error reading it, the resume folds every event;
- it is deleted when the run ends. A live run carries about one copy of its context.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pilot import events as ev
from pilot import progress, state
from pilot.private_files import inside, private_dirs, write_private
from pilot.progress import ProgressLimits
from pilot.redact import redactor_for
from pilot.state import RunState, fold
from pilot.store import statecodec
from pilot.store.event_store import EventStore

CHECKPOINT_EVERY = 256
"""Events between two checkpoints: a resume folds at most this many."""
FILE_NAME = "state.json"
MESSAGES_FILE_NAME = "messages.jsonl"
FORMAT = 2
LEGACY_FILE_NAMES = ("state.checkpoint", "state.messages")
"""The pickle checkpoints older versions kept in a run's artifacts: never read, deleted."""


@functools.cache
def code_digest() -> str:
    """What the saved state depends on: the source of the modules that define it."""
    digest = hashlib.sha256()
    for module in (state, progress, ev, statecodec):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()


def payload_digest(payload: str) -> str:
    return hashlib.sha256(payload.encode()).hexdigest()


def checkpoint_path(directory: Path) -> Path:
    return directory / FILE_NAME


def messages_path(directory: Path) -> Path:
    return directory / MESSAGES_FILE_NAME


def _json_bytes(data: Any) -> bytes:
    """Compact JSON; a value JSON cannot hold is an error, never pickled or stringified (the
    messages are the chat API's JSON already, so they are written as they are)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=_refuse).encode()


def _refuse(value: Any) -> Any:
    raise TypeError(f"a {type(value).__name__} cannot be written to a state checkpoint")


class CheckpointWriter:
    """Saves one run's state; remembers what its message log already holds."""

    def __init__(
        self,
        directory: Path,
        run_id: str,
        *,
        redact: Sequence[str] = (),
        workspace: Path | str | None = None,
    ) -> None:
        self.directory = directory
        self.run_id = run_id
        self.redactor = redactor_for(tuple(redact))
        self.usable = not inside(directory, workspace)
        """False when the directory is inside the run's workspace: no checkpoint is written
        where the agent's commands can write."""
        self._generation = ""
        self._logged_list: list[dict[str, Any]] | None = None
        self._logged = 0
        self._log_bytes = 0
        self._log_digest = hashlib.sha256()

    def write(self, run_state: RunState, last_payload: str) -> None:
        """Save ``run_state`` (every event up to ``run_state.last_seq`` committed, the last
        one's JSON being ``last_payload``)."""
        if not self.usable:
            return
        try:
            self._write(run_state, last_payload)
        except BaseException:
            self._logged_list = None  # the log may end in a partial record: start a new one
            raise

    def _redacted(self, data: Any) -> bytes:
        """``data`` as JSON, every string in it redacted as a stored event's would be."""
        blob = _json_bytes(data)
        if self.redactor.may_match(blob.decode()):
            blob = _json_bytes(self.redactor.value(data))
        return blob

    def _write(self, run_state: RunState, last_payload: str) -> None:
        messages = run_state.messages
        private_dirs(self.directory.parent)
        private_dirs(self.directory)
        log = messages_path(self.directory)
        if messages is self._logged_list and self._logged <= len(messages):
            added = messages[self._logged :]
            if added:
                line = self._redacted(added) + b"\n"
                with log.open("ab") as file:
                    file.write(line)
                self._log_bytes += len(line)
                self._log_digest.update(line)
        else:  # first write, or compacted: a new log, swapped in whole
            self._generation = secrets.token_hex(8)
            head = _json_bytes({"generation": self._generation}) + b"\n"
            body = self._redacted(messages) + b"\n" if messages else b""
            temporary = log.with_name(f".{MESSAGES_FILE_NAME}.{os.getpid()}")
            write_private(temporary, head + body)
            os.replace(temporary, log)
            self._logged_list = messages
            self._log_bytes = len(head) + len(body)
            self._log_digest = hashlib.sha256(head + body)
        self._logged = len(messages)
        rest = copy.copy(run_state)
        rest.messages = []
        record = {
            "format": FORMAT,
            "code": code_digest(),
            "run": self.run_id,
            "workspace": run_state.started.workspace if run_state.started else None,
            "seq": run_state.last_seq,
            "event": payload_digest(last_payload),
            "generation": self._generation,
            "messages": len(messages),
            "log_bytes": self._log_bytes,
            "log_sha256": self._log_digest.hexdigest(),
            "state": statecodec.encode(rest),
        }
        target = checkpoint_path(self.directory)
        temporary = target.with_name(f".{FILE_NAME}.{os.getpid()}")
        write_private(temporary, self._redacted(record))
        os.replace(temporary, target)


def delete_checkpoint(directory: Path) -> None:
    for path in (checkpoint_path(directory), messages_path(directory)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    with contextlib.suppress(OSError):
        directory.rmdir()


def delete_legacy(artifacts_dir: Path) -> None:
    """Remove the pickle checkpoint files older versions wrote beside a run's artifacts (they
    hold the context in clear and are never read)."""
    for name in LEGACY_FILE_NAMES:
        with contextlib.suppress(FileNotFoundError):
            (artifacts_dir / name).unlink()


def _read_private(path: Path) -> bytes:
    """The bytes of a regular file of ours (not a link, owned by this user)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise ValueError(f"{path} is not a file of this user")
        return file.read()


def _read_messages(directory: Path, record: dict[str, Any]) -> list[dict[str, Any]]:
    data = _read_private(messages_path(directory))
    size = record["log_bytes"]
    if type(size) is not int or len(data) < size:
        raise ValueError("the message log is shorter than the checkpoint says")
    data = data[:size]
    if hashlib.sha256(data).hexdigest() != record["log_sha256"]:
        raise ValueError("the message log is not the one the checkpoint was written with")
    lines = data.split(b"\n")
    if json.loads(lines[0]) != {"generation": record["generation"]}:
        raise ValueError("the message log is of another generation")
    messages: list[dict[str, Any]] = []
    for line in lines[1:]:
        if line:
            added = json.loads(line)
            if not isinstance(added, list) or not all(isinstance(m, dict) for m in added):
                raise ValueError("a message log record is not a list")
            messages.extend(added)
    if len(messages) != record["messages"]:
        raise ValueError("the message log does not end where the header says")
    return messages


def _read(directory: Path, run_id: str, workspace: str | None) -> tuple[int, str, RunState] | None:
    try:
        record = json.loads(_read_private(checkpoint_path(directory)))
        if (
            not isinstance(record, dict)
            or record.get("format") != FORMAT
            or record.get("code") != code_digest()
            or record.get("run") != run_id
            or record.get("workspace") != workspace
            or type(record.get("seq")) is not int
        ):
            return None
        saved = statecodec.decode(record["state"])
        if not isinstance(saved, RunState):
            return None
        saved.messages = _read_messages(directory, record)
    except Exception:  # missing, cut short, written by other code: not ours to trust
        return None
    return record["seq"], record["event"], saved


def load_run_state(
    store: EventStore,
    run_id: str,
    directory: Path | None,
    progress_limits: ProgressLimits | None = None,
) -> tuple[RunState, int | None]:
    """The run's state, and the seq of the checkpoint it started from: the checkpoint plus
    the events after it when there is a valid one, else every event folded (None). Either way
    the same state."""
    limits = progress_limits or ProgressLimits()
    found = None
    if directory is not None:
        workspace = store.get_run(run_id).workspace
        if not inside(directory, workspace):
            found = _read(directory, run_id, workspace)
    if found is not None:
        seq, last_digest, saved = found
        if saved.progress_limits == limits:
            rows = store.iter_event_payloads(run_id, after_seq=seq - 1)
            first = next(rows, None)
            if first is not None and first[0] == seq and payload_digest(first[1]) == last_digest:
                for _seq, payload in rows:
                    saved.apply(ev.event_from_json(payload))
                return saved, seq
            rows.close()
    return fold(store.load_events(run_id), progress_limits=limits), None
