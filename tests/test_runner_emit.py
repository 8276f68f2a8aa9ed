"""The run's emit path: events held back by ``emit(commit=False)`` are committed with the next
event, or once the loop has waited ``commit_wait`` on something, and never lost or reordered on
the way; a read-only step is one transaction, a mutating tool's call and its result each
durable before anything follows them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pilot_harness import call, make_repo, write_script, write_workflow
from sqlalchemy.exc import OperationalError

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.agent.state import RunState
from pilot.run.launch import load_for_run, start_run
from pilot.run.runner import Runner, RunSession
from pilot.store.event_store import EventStore


def open_run(db: Path) -> tuple[EventStore, RunSession, list[str]]:
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
    return store, RunSession(runner, run_id, None, RunState()), shown  # type: ignore[arg-type]


def nudge(text: str) -> ev.Nudge:
    return ev.Nudge(reason="no_tool_call", text=text)


def stored(store: EventStore, run: RunSession) -> list[str]:
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


def test_a_held_event_is_committed_once_the_loop_has_waited_commit_wait(tmp_path: Path) -> None:
    store, run, shown = open_run(tmp_path / "m.db")
    run.runner.commit_wait = 0.01

    async def scenario() -> list[str]:
        run.emit(nudge("held"), commit=False)
        await asyncio.sleep(0.2)  # a slow read-only tool, a request: the task waits
        return stored(store, run)

    assert asyncio.run(scenario()) == ["held"]
    assert shown == ["nudge"] and run.unsaved == []


def test_a_short_wait_leaves_held_events_for_the_next_commit(tmp_path: Path) -> None:
    store, run, shown = open_run(tmp_path / "m.db")
    run.runner.commit_wait = 60.0
    transactions = count_transactions(store)

    async def scenario() -> list[list[str]]:
        run.emit(nudge("held"), commit=False)
        await asyncio.sleep(0.01)  # a quick read-only tool in its thread
        during = stored(store, run)
        run.emit(nudge("next"))
        return [during, stored(store, run)]

    during, after = asyncio.run(scenario())
    assert during == [] and shown == ["nudge", "nudge"]
    assert after == ["held", "next"] and transactions == [["nudge", "nudge"]]


def count_transactions(store: EventStore) -> list[list[str]]:
    """The event types of every append transaction from now on, in order."""
    transactions: list[list[str]] = []
    real = store.append_many

    def recorded(run_id: str, events: Any, *, totals: dict[str, Any]) -> None:
        real(run_id, events, totals=totals)
        transactions.append([event.type for _seq, event, _payload in events])

    store.append_many = recorded  # type: ignore[method-assign]
    return transactions


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
    run.runner.commit_wait = 0.01

    async def scenario() -> list[list[str]]:
        run.emit(nudge("held"), commit=False)
        await asyncio.sleep(0.2)
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


def test_a_read_only_step_is_one_transaction_and_a_mutating_call_commits_around_it(
    tmp_path: Path,
) -> None:
    """Over the real registry (read_file runs in a worker thread), the sim and git: a read-only
    step's answer, call and result go in one transaction with the next model_request; a
    mutating call is committed before it runs and its result alone right after it returns,
    before its snapshot."""
    repo = make_repo(tmp_path / "repo")
    script = write_script(
        tmp_path / "s.yaml",
        "one-txn",
        [
            {"content": "Reading.", "tool_calls": [call("read_file", path="app.py")]},
            {"content": "Again.", "tool_calls": [call("read_file", path="README.md")]},
            {"tool_calls": [call("write_file", path="notes.txt", content="ok\n")]},
            {"tool_calls": [call("finish", summary="done")]},
        ],
    )
    db = tmp_path / "m.db"
    with running_sim(
        SimConfig(model="test-model", max_model_len=32768, policy=f"script:{script}")
    ) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="one-txn",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "Work."}],
        )
        store = EventStore(f"sqlite:///{db}")
        transactions = count_transactions(store)
        runner = Runner(store, commit_wait=60.0)  # no wait in this run commits on its own

        async def go() -> Any:
            try:
                return await start_run(runner, load_for_run(workflow, [f"repo={repo}"]))
            finally:
                await runner.aclose()

        outcome = asyncio.run(go())
    assert outcome.status == "succeeded", outcome.reason
    at = [i for i, t in enumerate(transactions) if "model_request" in t]
    step = ["assistant_message", "tool_started", "tool_finished", "model_request"]
    # each read-only step is one transaction, with the next step's model_request
    assert transactions[at[1]] == step and transactions[at[2]] == step
    assert at[2] == at[1] + 1
    write = at[2] + 1
    assert transactions[write] == ["assistant_message", "tool_started"]  # before it runs
    assert transactions[write + 1] == ["tool_finished"]  # alone, before its snapshot
    assert transactions[write + 2] == ["workspace_snapshot", "model_request"]
