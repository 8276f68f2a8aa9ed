"""The run's emit path: events held back by ``emit(commit=False)`` are committed with the next
event, or as soon as the loop waits on anything, and never lost or reordered on the way."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from pilot import events as ev
from pilot.runner import Runner, _Run
from pilot.state import RunState
from pilot.store.event_store import EventStore


def open_run(db: Path) -> tuple[EventStore, _Run, list[str]]:
    """A run with an observer that lists the types it was shown."""
    store = EventStore(f"sqlite:///{db}")
    shown: list[str] = []
    runner = Runner(store=store, registry=None)  # type: ignore[arg-type]
    runner.observers.append(lambda _run_id, _seq, event, _state: shown.append(event.type))
    run_id = store.create_run(
        workflow_name="w",
        workflow_path="w.yaml",
        workflow_text="",
        params={},
        workspace=str(db.parent / "ws"),
        owner=runner.owner,
    )
    return store, _Run(runner, run_id, None, RunState()), shown  # type: ignore[arg-type]


def nudge(text: str) -> ev.Nudge:
    return ev.Nudge(reason="no_tool_call", text=text)


def stored(store: EventStore, run: _Run) -> list[str]:
    return [e.text for e in store.load_events(run.run_id)]  # type: ignore[attr-defined]


def test_a_held_event_is_stored_and_shown_with_the_next_one_in_order(tmp_path: Path) -> None:
    store, run, shown = open_run(tmp_path / "m.db")

    async def scenario() -> list[list[str]]:
        run.emit(nudge("first"), commit=False)
        seen = [stored(store, run), list(shown)]
        run.emit(nudge("second"))
        return [*seen, stored(store, run), list(shown)]

    before, shown_before, after, shown_after = asyncio.run(scenario())
    assert before == [] and shown_before == []  # not durable yet, so not shown either
    assert run.state.messages[-1]["content"] == "second"  # the state had it at once
    assert after == ["first", "second"] and shown_after == ["nudge", "nudge"]


def test_a_held_event_is_committed_as_soon_as_the_loop_waits(tmp_path: Path) -> None:
    store, run, shown = open_run(tmp_path / "m.db")

    async def scenario() -> list[str]:
        run.emit(nudge("held"), commit=False)
        await asyncio.sleep(0)  # a request sent, a thread started: the task yields
        return stored(store, run)

    assert asyncio.run(scenario()) == ["held"]
    assert shown == ["nudge"] and run.unsaved == []


def test_a_failed_commit_at_a_wait_keeps_the_events_for_the_next_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run, _shown = open_run(tmp_path / "m.db")
    real = store.append_many
    failures = [OperationalError("INSERT", {}, Exception("database is locked"))]

    def flaky(*args: Any, **kwargs: Any) -> None:
        if failures:
            raise failures.pop()
        real(*args, **kwargs)

    monkeypatch.setattr(store, "append_many", flaky)

    async def scenario() -> list[list[str]]:
        run.emit(nudge("held"), commit=False)
        await asyncio.sleep(0)
        during = stored(store, run)
        run.emit(nudge("next"))
        return [during, stored(store, run)]

    during, after = asyncio.run(scenario())
    assert during == [] and after == ["held", "next"]
    assert [e.type for e in store.load_events(run.run_id)] == ["nudge", "nudge"]
    assert store.get_run(run.run_id).last_seq == 2


def test_without_an_event_loop_a_held_event_is_committed_at_once(tmp_path: Path) -> None:
    store, run, _shown = open_run(tmp_path / "m.db")
    run.emit(nudge("alone"), commit=False)
    assert stored(store, run) == ["alone"]
