"""State checkpoints: a live run's folded state, so that a resume replays only the events since.

A resume used to fold every event of the run: about 20 µs an event (fetch, JSON validation,
fold), 80 ms for a run of a thousand steps, growing with the run. Every ``CHECKPOINT_EVERY``
events the runner now writes its ``RunState`` (pickled) to ``state.checkpoint`` in the run's
artifacts directory, and a resume starts from it and folds only the tail.

A checkpoint is a cache, never a source of truth:
- it is written only when every event it covers is committed, and atomically (temporary file,
  then rename); the events stay the run's only truth;
- it is used only if it was written by this very code (a digest of the modules the state is
  made of), for this run, and the event it ends at is still the one in the store (its payload
  digest): otherwise, and on any error reading it, the resume folds every event as before;
- it lives beside the database, not in it: rewriting a context-sized blob in the database
  every few hundred events would double its WAL traffic and leave its size behind in the file;
- it is deleted when the run ends. A live run carries one file about the size of its context.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
from pathlib import Path

from pilot import events as ev
from pilot import progress, state
from pilot.progress import ProgressLimits
from pilot.state import RunState
from pilot.store import EventStore

CHECKPOINT_EVERY = 256
"""Events between two checkpoints: a resume folds at most this many (about 5 ms' worth)."""
FILE_NAME = "state.checkpoint"


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


def write_checkpoint(
    artifacts_dir: Path, run_id: str, run_state: RunState, last_payload: str
) -> None:
    """Save ``run_state`` (every event up to ``run_state.last_seq`` committed, the last one's
    JSON being ``last_payload``)."""
    artifacts_dir.mkdir(parents=True, exist_ok=True)
    record = (code_digest(), run_id, run_state.last_seq, payload_digest(last_payload), run_state)
    target = checkpoint_path(artifacts_dir)
    temporary = target.with_name(f".{FILE_NAME}.{os.getpid()}")
    temporary.write_bytes(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
    os.replace(temporary, target)


def delete_checkpoint(artifacts_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        checkpoint_path(artifacts_dir).unlink()


def _read(artifacts_dir: Path, run_id: str) -> tuple[int, str, RunState] | None:
    try:
        blob = checkpoint_path(artifacts_dir).read_bytes()
    except OSError:
        return None
    try:
        digest, owner, seq, last_digest, saved = pickle.loads(blob)
    except Exception:  # written by other code, cut short: not ours to trust
        return None
    if digest != code_digest() or owner != run_id or not isinstance(saved, RunState):
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
    run_state = RunState(progress_limits=limits)
    for event in store.load_events(run_id):
        run_state.apply(event)
    return run_state, None
