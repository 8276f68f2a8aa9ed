"""State checkpoints: a live run's folded state, so that a resume replays only the events since.

Folding every event of a run (fetch, JSON validation, fold) grows with the run (figures in
bench/README.md). Every ``CHECKPOINT_EVERY`` events (and at
a pause) the runner saves its ``RunState``, and a resume starts from it and folds only the
events after it.

The checkpoint is not a second copy of the context: ``state.json`` holds the state without its
messages, and the messages as references to the stored events they were made from (an
assistant message, a tool result: the context's bulk) or, for the few made of several events
or of none (the system prompt, a phase's prompt, a nudge, a compaction's summary, the images
shown after a turn), the message itself.

The messages a checkpoint refers to are not read by the resume itself: the fold of the events
after it decides what to do next without them, and they are read the first time the state's
``messages`` are used (the first request), in one scan (``RunState.defer_messages``). So the
file is sealed (its JSON's SHA-256 on a last line): what it says of the stored events is
trusted only if it is the file as written.

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
  the modules the state is made of), sealed, for this run and workspace, with the event it ends
  at still the one in the store (its payload digest); otherwise, and on any error reading it,
  the resume folds every event;
- it is deleted when the run ends.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from pilot import events as ev
from pilot.agent import progress, state
from pilot.agent.progress import ProgressLimits
from pilot.agent.state import RunState, assistant_message, fold, tool_message
from pilot.errors import RunError
from pilot.private_files import inside, private_dirs, write_private
from pilot.redact import redactor_for
from pilot.store import queries, statecodec
from pilot.store.event_store import EventStore

CHECKPOINT_EVERY = 128
"""Events between two checkpoints: a resume folds at most this many."""
FILE_NAME = "state.json"
MESSAGES_FILE_NAME = "messages.jsonl"
FORMAT = 5
LEGACY_FILE_NAMES = ("state.checkpoint", "state.messages")
"""The pickle checkpoints older versions kept in a run's artifacts: never read, deleted."""
MESSAGE_EVENTS = frozenset({"assistant_message", "tool_finished"})
"""The events a checkpoint refers to for their message instead of keeping it."""


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


_PLAIN_JSON_ONLY = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _json_bytes(data: Any) -> bytes:
    """Compact JSON; a value JSON cannot hold is an error, never pickled or stringified (the
    messages are the chat API's JSON already, so they are written as they are). orjson's own
    conversions of dataclasses and dates are off: ``statecodec`` makes every value."""
    return orjson.dumps(data, default=_refuse, option=_PLAIN_JSON_ONLY)


def _refuse(value: Any) -> Any:
    raise TypeError(f"a {type(value).__name__} cannot be written to a state checkpoint")


class CheckpointWriter:
    """Saves one run's state."""

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
        self._old_log_gone = False
        self._refs: tuple[list[Any], int, list[Any]] | None = None
        """The messages list, its length and its references at the last write."""

    def write(self, run_state: RunState, last_payload: str) -> None:
        """Save ``run_state`` (every event up to ``run_state.last_seq`` committed, the last
        one's JSON being ``last_payload``)."""
        if not self.usable:
            return
        private_dirs(self.directory.parent)
        private_dirs(self.directory)
        if not self._old_log_gone:  # an older version's copy of the context
            with contextlib.suppress(FileNotFoundError):
                messages_path(self.directory).unlink()
            self._old_log_gone = True
        refs = message_refs(run_state, self._refs)
        self._refs = (run_state.messages, len(run_state.messages), refs)
        rest = copy.copy(run_state)
        rest.messages, rest.message_seqs = [], []
        record = {
            "format": FORMAT,
            "code": code_digest(),
            "run": self.run_id,
            "workspace": run_state.started.workspace if run_state.started else None,
            "seq": run_state.last_seq,
            "event": payload_digest(last_payload),
            "messages": refs,
            "state": statecodec.encode(rest),
        }
        blob = _json_bytes(record)
        if self.redactor.may_match(blob.decode()):
            blob = _json_bytes(self.redactor.value(record))
        target = checkpoint_path(self.directory)
        temporary = target.with_name(f".{FILE_NAME}.{os.getpid()}")
        write_private(temporary, sealed(blob))
        os.replace(temporary, target)


def message_refs(
    run_state: RunState, known: tuple[list[Any], int, list[Any]] | None = None
) -> list[list[int] | dict[str, Any]]:
    """The messages as written: a message itself, or ``[first, step, count]`` for ``count``
    messages made of the stored events ``first``, ``first + step``, ... (a run's answers and
    results alternate at a fixed distance, so a long run's references are a few runs).

    ``known``: the messages list, its length and the references returned for it last time;
    when the list is the same one, grown (messages are only appended until a compaction
    replaces it), only the new messages are looked at, and that list is extended in place."""
    messages, seqs = run_state.messages, run_state.message_seqs
    if len(seqs) != len(messages):
        return list(messages)
    start, out = 0, []
    if known is not None and known[0] is messages and known[1] <= len(messages):
        start, out = known[1], known[2]
    for position in range(start, len(messages)):
        seq, last = seqs[position], out[-1] if out else None
        if not seq:
            out.append(messages[position])
        elif isinstance(last, list) and last[2] == 1 and seq > last[0]:
            last[1], last[2] = seq - last[0], 2
        elif isinstance(last, list) and seq == last[0] + last[1] * last[2]:
            last[2] += 1
        else:
            out.append([seq, 1, 1])
    return out


def expand_refs(refs: list[Any], seq: int) -> list[int | dict[str, Any]] | None:
    """Per message, the seq of its event or the message itself; None for anything
    ``message_refs`` would not have written, or an event after ``seq``."""
    out: list[int | dict[str, Any]] = []
    for ref in refs:
        if isinstance(ref, dict):
            out.append(ref)
            continue
        if not (isinstance(ref, list) and len(ref) == 3 and all(type(v) is int for v in ref)):
            return None
        first, step, count = ref
        if first < 1 or step < 1 or count < 1 or first + step * (count - 1) > seq:
            return None
        out.extend(range(first, first + step * count, step))
    return out


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


def sealed(blob: bytes) -> bytes:
    """The checkpoint's JSON followed by a line with its SHA-256: a resume trusts what the
    file says of the stored events (which of them its messages are) only when the file is
    the one written, and checks that without reading those events."""
    return blob + b"\n" + hashlib.sha256(blob).hexdigest().encode()


def unsealed(data: bytes) -> bytes | None:
    """The JSON of a file ``sealed`` wrote; None for anything else."""
    blob, newline, digest = data.rpartition(b"\n")
    if not newline or hashlib.sha256(blob).hexdigest().encode() != digest:
        return None
    return blob


def _read_private(path: Path) -> bytes:
    """The bytes of a regular file of ours (not a link, owned by this user)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise ValueError(f"{path} is not a file of this user")
        return file.read()


def _read(
    directory: Path, run_id: str, workspace: str | None
) -> tuple[int, str, RunState, list[Any]] | None:
    try:
        blob = unsealed(_read_private(checkpoint_path(directory)))
        if blob is None:
            return None
        record = orjson.loads(blob)
        if (
            not isinstance(record, dict)
            or record.get("format") != FORMAT
            or record.get("code") != code_digest()
            or record.get("run") != run_id
            or record.get("workspace") != workspace
            or type(record.get("seq")) is not int
            or not isinstance(record.get("messages"), list)
        ):
            return None
        saved = statecodec.decode(record["state"])
        if not isinstance(saved, RunState):
            return None
    except Exception:  # missing, cut short, written by other code: not ours to trust
        return None
    return record["seq"], record["event"], saved, record["messages"]


def _resume_from(
    store: EventStore, run_id: str, seq: int, digest: str, saved: RunState, refs: list[Any]
) -> RunState | None:
    """``saved`` with the events after ``seq`` folded, its messages left in the store until
    first used (``RunState.defer_messages``); None when the store does not hold what the
    checkpoint says (then the caller folds every event)."""
    wanted: dict[int, int] = {}
    messages: list[Any] = []
    seqs: list[int] = []
    expanded = expand_refs(refs, seq)
    if expanded is None:
        return None
    for position, ref in enumerate(expanded):
        if type(ref) is int:
            wanted[ref] = position
            messages.append(None)
            seqs.append(ref)
        elif isinstance(ref, dict):
            messages.append(ref)
            seqs.append(0)
        else:
            return None
    reached = False
    rows = queries.events_from(store, run_id, seq)
    try:
        for at, payload in rows:
            if at == seq:
                if payload_digest(payload) != digest:
                    return None
                if at in wanted:
                    messages[wanted.pop(at)] = message_of_payload(payload)
                saved.defer_messages(messages, _message_loader(store, run_id, wanted))
                saved.message_seqs = seqs
                reached = True
            elif not reached:
                return None
            else:
                saved.apply(ev.event_from_json(payload))
    finally:
        rows.close()  # type: ignore[attr-defined]
    return saved if reached else None


def _message_loader(store: EventStore, run_id: str, wanted: dict[int, int]) -> state.MessageLoader:
    """What reads a resumed state's messages when they are first used: each referenced event
    (``wanted``: seq -> position) made into its message again, in one ordered scan. The
    sealed checkpoint names them, its last event is the store's, and a run's events are only
    ever appended: only a database changed behind Marathon's back can lack one."""

    def load(messages: list[Any]) -> None:
        missing = set(wanted)
        if wanted:
            for at, payload in queries.message_rows(
                store, run_id, min(wanted), max(wanted), MESSAGE_EVENTS
            ):
                position = wanted.get(at)
                if position is not None:
                    messages[position] = message_of_payload(payload)
                    missing.discard(at)
        if missing:
            named = ", ".join(str(seq) for seq in sorted(missing)[:5])
            raise RunError(
                f"run {run_id} lost {len(missing)} of the events its conversation is made of "
                f"(seq {named}{', ...' if len(missing) > 5 else ''}): its database was changed "
                "by something other than Marathon; restore it from a backup to resume"
            )

    return load


def message_of_payload(payload: str) -> dict[str, Any]:
    """The message the fold makes of a stored assistant message or tool result (the stored
    JSON, read without building the event)."""
    data = orjson.loads(payload)  # the referenced events' JSON: most of a resume's reading
    kind = data.get("type")
    if kind not in MESSAGE_EVENTS:
        raise ValueError(f"a checkpoint refers to a {kind!r} event for a message")
    if kind == "tool_finished":
        return tool_message(data["call_id"], data["output"])
    calls = [(c["id"], c["name"], c["arguments"]) for c in data.get("tool_calls") or ()]
    return assistant_message(data.get("content"), calls)


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
        seq, last_digest, saved, refs = found
        if saved.progress_limits == limits and saved.last_seq == seq:
            try:
                resumed = _resume_from(store, run_id, seq, last_digest, saved, refs)
            except Exception:  # an event that is not what the checkpoint says
                resumed = None
            if resumed is not None:
                return resumed, seq
    return fold(store.load_events(run_id), progress_limits=limits), None
