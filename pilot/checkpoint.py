"""State checkpoints: a live run's folded state, so that a resume replays only the events since.

A resume used to fold every event of the run: about 20 µs an event (fetch, JSON validation,
fold), 80 ms for a run of a thousand steps, growing with the run. Every ``CHECKPOINT_EVERY``
events (and at a pause) the runner now saves its ``RunState`` in the run's artifacts
directory, and a resume starts from it and folds only the events after it.

Two files, so that a checkpoint costs what happened since the last one, not the whole
context again (pickling a 10 MB context every 256 events made the steps of a long run slower
and slower): ``state.messages`` is an append-only log of the conversation's messages (they
are never changed in place; a compaction replaces the list, and the log is then rewritten),
and ``state.checkpoint`` is the rest of the state, with how many logged messages it has.

A checkpoint is a cache, never a source of truth:
- it is written only when every event it covers is committed; the log is appended (or
  replaced by rename) before the header is replaced by rename, so a header never counts a
  message its log does not have, and a log of another generation is never read;
- it is used only if it was written by this very code (a digest of the modules the state is
  made of), for this run, and the event it ends at is still the one in the store (its payload
  digest): otherwise, and on any error reading it, the resume folds every event as before;
- it lives beside the database, not in it: rewriting state in the database every few hundred
  events would double its WAL traffic and leave its size behind in the file;
- it is deleted when the run ends. A live run carries about one copy of its context.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import os
import pickle
import secrets
import struct
from pathlib import Path
from typing import Any

from pilot import events as ev
from pilot import progress, state
from pilot.progress import ProgressLimits
from pilot.state import RunState, fold
from pilot.store import EventStore

CHECKPOINT_EVERY = 256
"""Events between two checkpoints: a resume folds at most this many (about 5 ms' worth)."""
FILE_NAME = "state.checkpoint"
MESSAGES_FILE_NAME = "state.messages"
_LENGTH = struct.Struct("<I")


@functools.cache
def code_digest() -> str:
    """What the pickled state depends on: the source of the modules that define it."""
    digest = hashlib.sha256()
    for module in (state, progress, ev):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()


def payload_digest(payload: str) -> str:
    return hashlib.sha256(payload.encode()).hexdigest()


def checkpoint_path(artifacts_dir: Path) -> Path:
    return artifacts_dir / FILE_NAME


def messages_path(artifacts_dir: Path) -> Path:
    return artifacts_dir / MESSAGES_FILE_NAME


def _record(messages: list[dict[str, Any]]) -> bytes:
    """One length-prefixed pickle of the messages a checkpoint adds (one per checkpoint:
    unpickling one list is several times faster than one pickle per message)."""
    if not messages:
        return b""
    blob = pickle.dumps(messages, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(blob)) + blob


class CheckpointWriter:
    """Saves one run's state; remembers what its message log already holds."""

    def __init__(self, artifacts_dir: Path, run_id: str) -> None:
        self.directory = artifacts_dir
        self.run_id = run_id
        self._generation = ""
        self._logged_list: list[dict[str, Any]] | None = None
        self._logged = 0

    def write(self, run_state: RunState, last_payload: str) -> None:
        """Save ``run_state`` (every event up to ``run_state.last_seq`` committed, the last
        one's JSON being ``last_payload``)."""
        try:
            self._write(run_state, last_payload)
        except BaseException:
            self._logged_list = None  # the log may end in a partial record: start a new one
            raise

    def _write(self, run_state: RunState, last_payload: str) -> None:
        messages = run_state.messages
        self.directory.mkdir(parents=True, exist_ok=True)
        log = messages_path(self.directory)
        if messages is self._logged_list and self._logged <= len(messages):
            with log.open("ab") as file:
                file.write(_record(messages[self._logged :]))
        else:  # first write, or compacted: a new log, swapped in whole
            self._generation = secrets.token_hex(8)
            temporary = log.with_name(f".{MESSAGES_FILE_NAME}.{os.getpid()}")
            header = self._generation.encode()
            temporary.write_bytes(_LENGTH.pack(len(header)) + header + _record(messages))
            os.replace(temporary, log)
            self._logged_list = messages
        self._logged = len(messages)
        rest = copy.copy(run_state)
        rest.messages = []
        record = (
            code_digest(),
            self.run_id,
            run_state.last_seq,
            payload_digest(last_payload),
            self._generation,
            len(messages),
            rest,
        )
        target = checkpoint_path(self.directory)
        temporary = target.with_name(f".{FILE_NAME}.{os.getpid()}")
        temporary.write_bytes(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(temporary, target)


def delete_checkpoint(artifacts_dir: Path) -> None:
    for path in (checkpoint_path(artifacts_dir), messages_path(artifacts_dir)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _read_messages(artifacts_dir: Path, generation: str, count: int) -> list[dict[str, Any]]:
    data = memoryview(messages_path(artifacts_dir).read_bytes())
    size = _LENGTH.size
    (length,) = _LENGTH.unpack_from(data, 0)
    if bytes(data[size : size + length]).decode() != generation:
        raise ValueError("the message log is of another generation")
    at = size + length
    messages: list[dict[str, Any]] = []
    while len(messages) < count:
        (length,) = _LENGTH.unpack_from(data, at)
        at += size
        messages.extend(pickle.loads(data[at : at + length]))
        at += length
    if len(messages) != count:
        raise ValueError("the message log does not end where the header says")
    return messages


def _read(artifacts_dir: Path, run_id: str) -> tuple[int, str, RunState] | None:
    try:
        blob = checkpoint_path(artifacts_dir).read_bytes()
        digest, owner, seq, last_digest, generation, count, saved = pickle.loads(blob)
        if digest != code_digest() or owner != run_id or not isinstance(saved, RunState):
            return None
        saved.messages = _read_messages(artifacts_dir, generation, count)
    except Exception:  # missing, cut short, written by other code: not ours to trust
        return None
    return seq, last_digest, saved


def load_run_state(
    store: EventStore,
    run_id: str,
    artifacts_dir: Path | None,
    progress_limits: ProgressLimits | None = None,
) -> tuple[RunState, int | None]:
    """The run's state, and the seq of the checkpoint it started from: the checkpoint plus
    the events after it when there is a valid one, else every event folded (None). Either way
    the same state."""
    limits = progress_limits or ProgressLimits()
    found = _read(artifacts_dir, run_id) if artifacts_dir is not None else None
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
