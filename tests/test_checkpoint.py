"""State checkpoints: a resume starts from the last one and folds only the events after it, and
ignores any it cannot trust. (The kill-at-every-boundary test in test_pilot_crash.py resumes
from a checkpoint at every boundary and checks the transcript against an uninterrupted run.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pilot import events as ev
from pilot.agent.state import RunState, fold
from pilot.errors import RunError
from pilot.front.ui import event_line
from pilot.run.runner import Runner, RunSession
from pilot.store import checkpoint
from pilot.store.checkpoint import checkpoint_path, load_run_state
from pilot.store.event_store import EventStore


def start(
    db: Path, run_id: str, *, every: int = 4, url: str | None = None
) -> tuple[EventStore, Runner, RunSession]:
    """A run in the SQLite file ``db`` (or the database at ``url``; its workspace path in
    ``db``'s folder), checkpointed every ``every`` events."""
    store = EventStore(url or f"sqlite:///{db}")
    runner = Runner(store=store, registry=None, checkpoint_every=every)  # type: ignore[arg-type]
    store.create_run(
        workflow_name="w",
        workflow_path="w.yaml",
        workflow_text="",
        params={},
        workspace=str(db.parent / f"ws-{run_id}"),
        owner=runner.owner,
        run_id=run_id,
    )
    run = RunSession(runner, run_id, None, RunState())  # type: ignore[arg-type]
    run.emit(
        ev.RunStarted(
            workflow="w",
            workspace=str(db.parent / f"ws-{run_id}"),
            branch="b",
            endpoint="http://model/v1",
            system="You are careful.",
            phases=["work"],
            owner=runner.owner,
        )
    )
    run.emit(ev.PhaseStarted(index=0, name="work", prompt="Do the work."))
    return store, runner, run


def steps(run: RunSession, first: int, count: int, tag: str = "") -> None:
    """Steps as the loop writes them: request, answer with a call (held back), tool."""
    for step in range(first, first + count):
        call = ev.ToolCall(
            id=f"call_{step}", name="read_file", arguments=json.dumps({"path": f"f{step}.py"})
        )
        run.emit(ev.ModelRequest(step=step, messages=len(run.state.messages)))
        run.emit(
            ev.AssistantMessage(step=step, content=f"step {step}{tag}", tool_calls=[call]),
            commit=False,
        )
        run.emit(ev.ToolStarted(call_id=call.id, name=call.name, mutates=False))
        run.emit(ev.ToolFinished(call_id=call.id, name=call.name, output=f"contents {step}{tag}"))


def compact_first_steps(run: RunSession) -> None:
    """A compaction of steps 1 to 4 into a summary, the system and phase prompts kept."""
    run.emit(
        ev.Compaction(
            pinned=[0, 1],
            replaced_to=10,
            replaced_count=8,
            summary="Steps 1 to 4 read f1.py to f4.py.",
            tokens_before=9000,
            tokens_after=3000,
            reason="threshold",
        )
    )


def essence(state: RunState) -> dict[str, Any]:
    """What the loop acts on: equal essences mean the resume goes on exactly the same way."""
    phase = state.phase
    return {
        "messages": state.messages,
        "last_seq": state.last_seq,
        "steps": state.steps,
        "pending": state.pending_calls,
        "started_call": state.started_call,
        "phase": None if phase is None else (phase.index, phase.steps, phase.message_index),
        "tracker": None if phase is None else vars(phase.tracker),
        "active": (state.active_seconds, state._segment_start, state._last_at),
    }


def test_a_resume_starts_from_the_last_checkpoint_and_equals_a_full_fold(tmp_path: Path) -> None:
    store, runner, run = start(tmp_path / "m.db", "r1")
    steps(run, 1, 10)  # 2 + 40 events: checkpoints every 4 (or more, with held-back events)
    path = checkpoint_path(runner.checkpoint_dir("r1"))
    assert path.exists()
    loaded, seq = load_run_state(store, "r1", runner.checkpoint_dir("r1"))
    assert seq is not None and 42 - 4 <= seq < 42
    assert essence(loaded) == essence(fold(store.load_events("r1")))
    # The resumed run goes on from it like the uninterrupted one.
    again = RunSession(runner, "r1", None, loaded)  # type: ignore[arg-type]
    steps(again, 11, 3)
    assert essence(again.state) == essence(fold(store.load_events("r1")))


def test_the_checkpoint_refers_to_the_events_instead_of_copying_the_context(
    tmp_path: Path,
) -> None:
    _store, runner, run = start(tmp_path / "m.db", "r1")
    steps(run, 1, 10, tag=" " + "x" * 2000)  # every answer and result 2 KB
    directory = runner.checkpoint_dir("r1")
    text = checkpoint.unsealed(checkpoint_path(directory).read_bytes()).decode()
    assert "x" * 100 not in text, "no assistant message nor tool result copied"
    assert "You are careful." in text and "Do the work." in text  # made of no single event
    assert sorted(p.name for p in directory.iterdir()) == ["state.json"]
    assert len(text) < 10_000  # the context is 40 KB
    refs = json.loads(text)["messages"]
    assert refs[2:] == [[4, 2, 19]]  # the answers and results so far, 2 apart: one run


def test_a_compaction_is_checkpointed_and_still_folds_equal(tmp_path: Path) -> None:
    store, runner, run = start(tmp_path / "m.db", "r1")
    steps(run, 1, 6)
    compact_first_steps(run)
    steps(run, 7, 4)
    loaded, seq = load_run_state(store, "r1", runner.checkpoint_dir("r1"))
    assert seq is not None and seq > 26
    assert essence(loaded) == essence(fold(store.load_events("r1")))
    assert loaded.message_seqs == fold(store.load_events("r1")).message_seqs
    assert any("f1.py to f4.py" in str(m["content"]) for m in loaded.messages)


def test_a_compaction_after_the_checkpoint_reads_the_messages_in_the_fold(
    tmp_path: Path,
) -> None:
    # The tail's compaction needs what was said: the fold reads the conversation then, while
    # it is still scanning the tail, and ends equal to folding every event.
    store, runner, run = start(tmp_path / "m.db", "r1", every=1000)
    steps(run, 1, 6)
    run.emit(ev.RunPaused(reason="stopped"))  # a pause writes a checkpoint
    run.emit(ev.RunResumed(owner=runner.owner))
    compact_first_steps(run)
    steps(run, 7, 2)
    loaded, seq = load_run_state(store, "r1", runner.checkpoint_dir("r1"))
    compaction = next(s for s, e in store.iter_events("r1") if e.type == "compaction")
    assert seq is not None and seq < compaction
    assert essence(loaded) == essence(fold(store.load_events("r1")))
    assert loaded.message_seqs == fold(store.load_events("r1")).message_seqs


def test_an_older_checkpoint_is_ignored_and_its_copy_of_the_context_removed(
    tmp_path: Path,
) -> None:
    """A checkpoint of the previous format (state.json + messages.jsonl, the context copied)
    is never used; the run's next checkpoint deletes its message log."""
    store, runner, run = start(tmp_path / "m.db", "r1", every=1000)
    steps(run, 1, 3)
    directory = runner.checkpoint_dir("r1")
    directory.mkdir(parents=True)
    head = {"generation": "g"}
    log = json.dumps(head) + "\n" + json.dumps(run.state.messages) + "\n"
    checkpoint.messages_path(directory).write_text(log)
    checkpoint_path(directory).write_text(
        json.dumps({"format": 2, "code": checkpoint.code_digest(), "run": "r1", "seq": 14})
    )
    loaded, seq = load_run_state(store, "r1", directory)
    assert seq is None and essence(loaded) == essence(fold(store.load_events("r1")))
    run.emit(ev.RunPaused(reason="stop requested"))  # a checkpoint of this format
    assert not checkpoint.messages_path(directory).exists()
    assert load_run_state(store, "r1", directory)[1] == run.state.last_seq


def test_a_paused_run_is_checkpointed_at_its_last_event_and_a_finished_one_deletes_it(
    tmp_path: Path,
) -> None:
    store, runner, run = start(tmp_path / "m.db", "r1", every=1000)
    steps(run, 1, 3)
    assert not checkpoint_path(runner.checkpoint_dir("r1")).exists()  # not due yet
    run.emit(ev.RunPaused(reason="stop requested"))
    loaded, seq = load_run_state(store, "r1", runner.checkpoint_dir("r1"))
    assert seq == run.state.last_seq == 15
    assert essence(loaded) == essence(fold(store.load_events("r1")))
    run.emit(ev.RunFinished(status="succeeded", reason="done"))
    assert not checkpoint_path(runner.checkpoint_dir("r1")).exists()


Spoiled = tuple[EventStore, Path]
"""The store and checkpoint directory the resume then loads from."""


def _corrupt(store: EventStore, runner: Runner, **_: Any) -> Spoiled:
    checkpoint_path(runner.checkpoint_dir("r1")).write_bytes(b"not json")
    return store, runner.checkpoint_dir("r1")


def _cut_short(store: EventStore, runner: Runner, **_: Any) -> Spoiled:
    path = checkpoint_path(runner.checkpoint_dir("r1"))
    path.write_bytes(path.read_bytes()[:100])
    return store, runner.checkpoint_dir("r1")


def _refers_to_another_kind(store: EventStore, runner: Runner, **_: Any) -> Spoiled:
    # A message said to be made of event 3, which is a model_request, in a file not sealed.
    path = checkpoint_path(runner.checkpoint_dir("r1"))
    record = json.loads(checkpoint.unsealed(path.read_bytes()))
    refs = record["messages"]
    refs[next(i for i, r in enumerate(refs) if isinstance(r, list))] = [3, 1, 1]
    path.write_text(json.dumps(record))
    return store, runner.checkpoint_dir("r1")


def _refers_past_its_end(store: EventStore, runner: Runner, **_: Any) -> Spoiled:
    # Sealed, as if written so: the references themselves are checked.
    path = checkpoint_path(runner.checkpoint_dir("r1"))
    record = json.loads(checkpoint.unsealed(path.read_bytes()))
    record["messages"].append([record["seq"] + 1, 1, 1])
    path.write_bytes(checkpoint.sealed(json.dumps(record).encode()))
    return store, runner.checkpoint_dir("r1")


def _other_code(store: EventStore, runner: Runner, monkeypatch: pytest.MonkeyPatch) -> Spoiled:
    monkeypatch.setattr(checkpoint, "code_digest", lambda: "written by another version")
    return store, runner.checkpoint_dir("r1")


def _other_run(store: EventStore, runner: Runner, **_: Any) -> Spoiled:
    # r2's checkpoint copied over r1's: it names r2, so r1 must not use it.
    shutil.copy(
        checkpoint_path(runner.checkpoint_dir("r2")), checkpoint_path(runner.checkpoint_dir("r1"))
    )
    return store, runner.checkpoint_dir("r1")


def _other_history(store: EventStore, runner: Runner, **_: Any) -> Spoiled:
    # Another database has a run r1 with other events: r1's checkpoint moved over to it must
    # not be used there (the event it ends at differs).
    elsewhere = Path(str(store.url).removeprefix("sqlite:///")).parent / "elsewhere"
    elsewhere.mkdir()
    store2, runner2, run2 = start(elsewhere / "other.db", "r1")
    steps(run2, 1, 12, tag=" elsewhere")
    shutil.copy(
        checkpoint_path(runner.checkpoint_dir("r1")), checkpoint_path(runner2.checkpoint_dir("r1"))
    )
    return store2, runner2.checkpoint_dir("r1")


@pytest.mark.parametrize(
    "spoil",
    [
        _corrupt,
        _cut_short,
        _refers_to_another_kind,
        _refers_past_its_end,
        _other_code,
        _other_run,
        _other_history,
    ],
    ids=lambda f: f.__name__,
)
def test_a_checkpoint_that_cannot_be_trusted_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spoil: Any
) -> None:
    store, runner, run = start(tmp_path / "m.db", "r1")
    steps(run, 1, 10)
    _store, _runner, run2 = start(tmp_path / "m.db", "r2")
    steps(run2, 1, 5, tag=" of r2")
    assert load_run_state(store, "r1", runner.checkpoint_dir("r1"))[1] is not None
    target, directory = spoil(store=store, runner=runner, monkeypatch=monkeypatch)
    loaded, seq = load_run_state(target, "r1", directory)
    assert seq is None, "folded from every event"
    assert essence(loaded) == essence(fold(target.load_events("r1")))


def test_a_resumed_state_reads_its_messages_when_they_are_first_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, runner, run = start(tmp_path / "m.db", "r1")
    steps(run, 1, 10)
    reads: list[tuple[int, int]] = []
    real = checkpoint.queries.message_rows

    def counted(store: EventStore, run_id: str, first: int, last: int, kinds: Any) -> Any:
        reads.append((first, last))
        return real(store, run_id, first, last, kinds)

    monkeypatch.setattr(checkpoint.queries, "message_rows", counted)
    loaded, seq = load_run_state(store, "r1", runner.checkpoint_dir("r1"))
    assert seq is not None and reads == [], "the fold is done without the stored messages"
    assert len(loaded.message_seqs) == len(run.state.messages)
    assert essence(loaded) == essence(fold(store.load_events("r1")))
    assert len(reads) == 1, "read once, in one scan"
    loaded.messages  # noqa: B018 - a second use reads nothing
    assert len(reads) == 1


def test_a_checkpoint_edited_by_hand_is_ignored(tmp_path: Path) -> None:
    # The same state written back with one character changed: no longer the file as sealed.
    store, runner, run = start(tmp_path / "m.db", "r1")
    steps(run, 1, 10)
    path = checkpoint_path(runner.checkpoint_dir("r1"))
    path.write_bytes(path.read_bytes().replace(b"You are careful.", b"You are careless", 1))
    loaded, seq = load_run_state(store, "r1", runner.checkpoint_dir("r1"))
    assert seq is None
    assert essence(loaded) == essence(fold(store.load_events("r1")))


def test_events_lost_behind_the_checkpoint_are_named_when_the_messages_are_read(
    tmp_path: Path,
) -> None:
    store, runner, run = start(tmp_path / "m.db", "r1")
    steps(run, 1, 10)
    record = json.loads(
        checkpoint.unsealed(checkpoint_path(runner.checkpoint_dir("r1")).read_bytes())
    )
    first = next(ref for ref in record["messages"] if isinstance(ref, list))[0]
    with store.engine.begin() as conn:  # another program deletes a message the state refers to
        conn.exec_driver_sql(f"DELETE FROM events WHERE run_id = 'r1' AND seq = {first}")
    loaded, seq = load_run_state(store, "r1", runner.checkpoint_dir("r1"))
    assert seq is not None
    with pytest.raises(
        RunError, match=rf"lost 1 of the events .*\(seq {first}\).*changed by something other"
    ):
        loaded.messages  # noqa: B018
    with pytest.raises(RunError):  # and again, never a list with holes
        loaded.messages  # noqa: B018


def test_the_timeline_says_where_a_resume_started() -> None:
    assert (
        "checkpoint at event 42"
        in event_line(ev.RunResumed(owner="host:1:ab", from_checkpoint=42)).plain
    )
    assert "checkpoint" not in event_line(ev.RunResumed(owner="host:1:ab")).plain


def test_a_failed_write_is_quiet_and_the_next_checkpoint_is_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk fails a checkpoint's write: the run goes on, and the next one is usable."""
    store, runner, run = start(tmp_path / "m.db", "r1")
    steps(run, 1, 3)
    real = checkpoint.write_private

    def full_disk(path: Path, data: bytes) -> None:
        path.write_bytes(data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "write_private", full_disk)
    steps(run, 4, 2)  # its checkpoints fail half-written
    monkeypatch.setattr(checkpoint, "write_private", real)
    steps(run, 6, 2)
    loaded, seq = load_run_state(store, "r1", runner.checkpoint_dir("r1"))
    assert seq is not None and seq > 22
    assert essence(loaded) == essence(fold(store.load_events("r1")))


def test_message_references_are_runs_that_expand_back_to_every_seq() -> None:
    state = RunState()
    seqs = [0, 3, 5, 7, 8, 0, 12, 13, 20, 22]
    state.messages = [{"role": "user", "content": str(i)} for i in range(len(seqs))]
    state.message_seqs = list(seqs)
    refs = checkpoint.message_refs(state)
    assert refs[1:4] == [[3, 2, 3], [8, 1, 1], {"role": "user", "content": "5"}]
    expanded = checkpoint.expand_refs(json.loads(json.dumps(refs)), seq=22)
    assert expanded == [m if s == 0 else s for m, s in zip(state.messages, seqs, strict=True)]
    assert checkpoint.expand_refs(refs, seq=21) is None  # names an event after its own
    assert checkpoint.expand_refs([[3, 0, 2]], seq=22) is None


def test_references_continued_from_the_last_write_equal_references_made_anew() -> None:
    state = RunState()
    for seq in (0, 3, 5, 7, 0, 10, 11, 15, 17, 19, 20):
        state._add({"role": "user", "content": str(seq)}, seq)
        if seq in (5, 10, 17):
            known = (state.messages, len(state.messages), checkpoint.message_refs(state))
    later = checkpoint.message_refs(state, known)
    assert later == checkpoint.message_refs(state)
    compacted = RunState(messages=list(state.messages), message_seqs=list(state.message_seqs))
    assert checkpoint.message_refs(compacted, known) == later  # another list: made anew


def test_the_state_codec_round_trips_sets_of_digests_and_refuses_a_cut_one() -> None:
    from pilot.store import statecodec

    digests = {bytes([i]) * 12 for i in range(200)}
    for value in (
        digests | {"feedback:ab"},  # the tracker's: 12-byte digests and a few strings
        {b"short", b"a longer one", "text"},  # bytes of unequal length: each alone
        set(),
        {b""},
    ):
        data = json.loads(json.dumps(statecodec.encode(value)))
        assert statecodec.decode(data) == value
    data = statecodec.encode(digests)
    assert data["w"] == 12 and isinstance(data["b"], str), "one text for the digests"
    cut = {**data, "b": data["b"][:-8]}
    with pytest.raises(ValueError):
        statecodec.decode(cut)
    with pytest.raises(ValueError, match="width"):
        statecodec.decode({**data, "w": 7})
