"""`pilot cancel` is a stop: a live run is told at once (a signal to its owner, as it hears
SIGTERM) and ends cancelled, recorded as its last event; a run asked to cancel never ends
succeeded, even when it reaches its end before it hears the request."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import yaml
from pilot_harness import _closing, call, make_repo, pilot_cmd, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.run.cancel import request_cancel
from pilot.run.launch import load_for_run, start_run
from pilot.run.runner import Runner
from pilot.store.event_store import EventStore

TURNS = 300


def _long_script(path: Path, key: str) -> Path:
    turns = [{"tool_calls": [call("run", command=f"sleep 0.2; echo {i}")]} for i in range(TURNS)]
    return write_script(path, key, [*turns, {"tool_calls": [call("finish", summary="done")]}])


def test_pilot_cancel_stops_a_live_run_at_once_and_records_it(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", make_repo(tmp_path / "repo")
    script = _long_script(tmp_path / "s.yaml", "cancel-live")
    env = {**os.environ, "MARATHON_HOME": str(home)}
    env.pop("MARATHON_DB", None)
    with running_sim(SimConfig(model="m", max_model_len=32768, policy=f"script:{script}")) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="cancel-live",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        pilot = subprocess.Popen(
            [*pilot_cmd(), "run", str(workflow), "-p", f"repo={repo}", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert pilot.stdout is not None
            run_id, tools = None, 0
            for line in pilot.stdout:
                record = json.loads(line)
                run_id = run_id or record.get("run_id")
                tools += record.get("type") == "tool_finished"
                if tools == 2:
                    break
            cancel = subprocess.run(
                [*pilot_cmd(), "cancel", str(run_id)],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            pilot.communicate(timeout=60)
        finally:
            if pilot.poll() is None:
                pilot.kill()
    assert cancel.returncode == 0, cancel.stderr
    assert "told it to stop" in cancel.stdout, cancel.stdout
    assert pilot.returncode != 0
    store = EventStore(f"sqlite:///{home / 'marathon.db'}")
    events = store.load_events(str(run_id))
    end = events[-1]
    assert isinstance(end, ev.RunFinished) and end.status == "cancelled", end
    assert "cancelled by the user" in end.reason
    assert store.get_run(str(run_id)).status == "cancelled"
    done = sum(isinstance(e, ev.ToolFinished) for e in events)
    assert done < TURNS, "the run stopped long before its script's end"


def test_a_run_asked_to_cancel_that_reaches_its_end_first_ends_cancelled(tmp_path: Path) -> None:
    """An owner that cannot be signalled (this test process) hears the request only at its
    next renewal; the run reaches its end before that, and still ends cancelled."""
    repo = make_repo(tmp_path / "repo")
    script = write_script(
        tmp_path / "s.yaml",
        "cancel-late",
        [
            {"tool_calls": [call("run", command="true")]},
            {"tool_calls": [call("finish", summary="done")]},
        ],
    )
    store = EventStore(f"sqlite:///{tmp_path / 'marathon.db'}")
    said: list[str] = []

    def cancel_after_first_tool(run_id: str, _seq: int, event: ev.Event, _s: object) -> None:
        if isinstance(event, ev.ToolFinished) and not said:
            said.append(request_cancel(EventStore(store.url), run_id))

    with running_sim(SimConfig(model="m", max_model_len=32768, policy=f"script:{script}")) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="cancel-late",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        runner = Runner(store, observers=[cancel_after_first_tool])
        loaded = load_for_run(workflow, [f"repo={repo}"])
        outcome = asyncio.run(_closing(runner, start_run(runner, loaded)))
    assert said and "within 20 s" in said[0], said
    assert outcome.status == "cancelled", outcome
    end = store.load_events(outcome.run_id)[-1]
    assert isinstance(end, ev.RunFinished) and end.status == "cancelled"
    assert "it had succeeded" in end.reason


def test_cancelling_one_of_two_runs_in_one_process_stops_that_run_only(tmp_path: Path) -> None:
    """A worker drives several runs in one process: a cancel of one stops it alone, the other
    goes on to its end (the process-wide stop is for signals)."""
    store = EventStore(f"sqlite:///{tmp_path / 'marathon.db'}")
    repos = [make_repo(tmp_path / f"repo{i}") for i in range(2)]
    asked: list[str] = []

    def cancel_the_first_run(run_id: str, _seq: int, event: ev.Event, _s: object) -> None:
        if isinstance(event, ev.ToolFinished) and not asked:
            asked.append(run_id)
            request_cancel(EventStore(store.url), run_id)

    long_turns = [
        {"tool_calls": [call("run", command=f"sleep 0.2; echo {i}")]} for i in range(TURNS)
    ]
    short_turns = [
        *({"tool_calls": [call("run", command=f"sleep 0.3; echo {i}")]} for i in range(12)),
        {"tool_calls": [call("finish", summary="done")]},
    ]
    script = tmp_path / "s.yaml"
    script.write_text(
        yaml.safe_dump(
            {
                "conversations": [
                    {"key": "cancel-one", "turns": long_turns},
                    {"key": "cancel-other", "turns": short_turns},
                ]
            }
        )
    )
    policy = f"script:{script}"
    with running_sim(SimConfig(model="m", max_model_len=32768, policy=policy)) as sim:
        flows = [
            write_workflow(
                tmp_path / f"wf{i}.yaml",
                key=key,
                endpoint=sim.openai_base_url,
                phases=[{"name": "work", "prompt": "p"}],
            )
            for i, key in enumerate(("cancel-one", "cancel-other"))
        ]
        runner = Runner(store, observers=[cancel_the_first_run], lease_seconds=0.9)
        runner.stop = asyncio.Event()  # the process-wide stop, as the CLI gives its runner

        async def both() -> list:
            first = asyncio.ensure_future(
                start_run(runner, load_for_run(flows[0], [f"repo={repos[0]}"]))
            )
            await asyncio.sleep(0.5)  # the first run's tool finishes before the second starts
            second = start_run(runner, load_for_run(flows[1], [f"repo={repos[1]}"]))
            return list(await asyncio.gather(first, second))

        outcomes = asyncio.run(_closing(runner, both()))
    by_id = {o.run_id: o for o in outcomes}
    assert by_id[asked[0]].status == "cancelled"
    (other,) = [o for o in outcomes if o.run_id != asked[0]]
    assert other.status == "succeeded", other.reason
