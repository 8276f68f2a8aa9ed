"""Runs routed over several servers of one model (``model.endpoints``, ``pilot.model.router``).

Real parts throughout: simulated vLLM servers on loopback (in-process threads, or processes
of their own where one must die by SIGKILL), real pilot runs on git workspaces, SQLite, and
PostgreSQL when one is available. Every server takes an OS-assigned port.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pilot_harness import (
    call,
    make_repo,
    pilot_cmd,
    run_in_process,
    worktree_of,
    write_script,
    write_workflow,
)
from test_pilot_postgres import (  # noqa: F401  (pg_url: the fixture: a fresh database, or skip)
    pg_url,
    start_workers,
)

from brain.sim.config import FaultRule, SimConfig, Timing
from brain.sim.process import SimProcess
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.errors import WorkflowError
from pilot.front.ui import event_line
from pilot.model.client import OpenAIModelClient
from pilot.model.router import Router
from pilot.model.settings import ClientSettings
from pilot.model.types import ChatRequest, ModelResponse, RetryPolicy, WaitEvent
from pilot.report.build import build_report
from pilot.report.markdown import render_markdown
from pilot.run.launch import build_plan, load_for_run, split_endpoints, start_run
from pilot.run.outcomes import RunOutcome
from pilot.run.queue import enqueue
from pilot.run.runner import Runner
from pilot.store.event_store import EventStore
from pilot.workflow import parse_workflow_text

REPO = Path(__file__).resolve().parents[1]
KEY = "routing-flow"
ANSWER = "Working on the next step of the task, carefully. " * 3  # ~40 tokens to stream


def steps_script(path: Path, steps: int, *, command: str | None = None) -> Path:
    """``steps`` tool calls (``command`` with {i}, or read_file), then finish."""
    turns = [
        {
            "content": ANSWER,
            "tool_calls": [
                call("run", command=command.format(i=i))
                if command
                else call("read_file", path="README.md")
            ],
        }
        for i in range(steps)
    ]
    turns.append({"tool_calls": [call("finish", summary="done")]})
    return write_script(path, KEY, turns)


def sim_config(script: Path, **kw: object) -> SimConfig:
    return SimConfig(
        model="fleet-model",
        max_model_len=32768,
        policy=f"script:{script}",
        timing=Timing(ttft=0.01, itl=0.004),
        **kw,
    )


def flow(tmp_path: Path, endpoints: list[str], **model: object) -> Path:
    return write_workflow(
        tmp_path / "wf.yaml",
        key=KEY,
        endpoint=endpoints,
        phases=[{"name": "work", "prompt": "p"}],
        model=dict(model),
    )


def run_together(runner: Runner, loaded: list) -> list[RunOutcome]:
    """Start every loaded workflow at once in ``runner`` (one process, one router)."""

    async def main() -> list[RunOutcome]:
        try:
            return list(await asyncio.gather(*(start_run(runner, item) for item in loaded)))
        finally:
            await runner.aclose()

    return asyncio.run(main())


def endpoints_of(store: EventStore, run_id: str) -> list[str | None]:
    """The server that answered each request of the run, in order."""
    return [e.endpoint for e in store.load_events(run_id) if isinstance(e, ev.AssistantMessage)]


def the_router(runner: Runner) -> Router:
    routers = [c for c in runner._clients.values() if isinstance(c, Router)]
    assert len(routers) == 1
    return routers[0]


@contextlib.contextmanager
def sim_processes(n: int, args: list[str], folder: Path) -> Iterator[list[SimProcess]]:
    sims = [SimProcess(args, folder / f"sim{i}.log") for i in range(n)]
    try:
        for sim in sims:
            sim.start()
        for sim in sims:
            sim.wait_ready()
        yield sims
    finally:
        for sim in sims:
            sim.kill()


# -- the workflow and the command line --------------------------------------------------------

MINIMAL = """name: demo
workspace: {path: /tmp/x}
tools: [read_file, finish]
phases:
  - name: a
    prompt: p
"""


def problems(model_yaml: str) -> list[str]:
    try:
        parse_workflow_text(MINIMAL + model_yaml, "wf.yaml", {}, tool_names=["read_file", "finish"])
    except WorkflowError as exc:
        return [str(e) for e in getattr(exc, "errors", [exc])]
    return []


def test_endpoints_in_the_workflow_are_checked_with_file_line_and_field() -> None:
    assert problems("model: {endpoints: ['http://a:1/v1', 'http://b:2/v1/']}\n") == []
    assert problems("model:\n  endpoint: http://a:1/v1\n  endpoints: [http://b:1/v1]\n") == [
        "wf.yaml:8:3: model: give either `endpoints` (several servers of one model) or "
        "`endpoint`, not both"
    ]
    assert problems("model:\n  profile: p\n  endpoints: [http://b:1/v1]\n") == [
        "wf.yaml:8:3: model: give either `endpoints` (several servers of one model) or "
        "`profile`, not both"
    ]
    assert problems("model: {endpoints: ['http://a:1/v1', 'ftp://b']}\n") == [
        "wf.yaml:7:38: model.endpoints[1]: endpoint 'ftp://b' must be an http(s) URL like "
        "'http://127.0.0.1:8000/v1'"
    ]
    assert problems("model:\n  endpoints:\n    - http://a:1/v1\n    - http://a:1/v1/\n") == [
        "wf.yaml:10:7: model.endpoints[1]: http://a:1/v1 is already endpoints[0]; list each "
        "server once"
    ]
    assert problems("model: {endpoints: []}\n") == [
        "wf.yaml:7:20: model.endpoints: list at least one server, like "
        "[http://127.0.0.1:8000/v1, http://127.0.0.1:8001/v1]; or leave `endpoints` out"
    ]


def test_plan_targets_come_from_the_command_line_or_the_workflow(tmp_path: Path) -> None:
    assert split_endpoints(["http://a:1/v1,http://b:2/v1", " http://c:3/v1 "]) == [
        "http://a:1/v1",
        "http://b:2/v1",
        "http://c:3/v1",
    ]
    repo = make_repo(tmp_path / "repo")
    workflow = flow(tmp_path, ["http://a:1/v1", "http://b:2/v1"])
    loaded = load_for_run(workflow, [f"repo={repo}"])
    plan = build_plan(loaded, "r1")
    assert plan.model.targets == ("http://a:1/v1", "http://b:2/v1")
    assert plan.model.endpoint == "http://a:1/v1"
    one = build_plan(loaded, "r1", endpoint="http://c:3/v1/")
    assert (one.model.endpoint, one.model.endpoints) == ("http://c:3/v1", ())
    many = build_plan(loaded, "r1", endpoint=["http://c:3/v1", "http://d:4/v1,http://c:3/v1"])
    assert many.model.targets == ("http://c:3/v1", "http://d:4/v1")


def test_old_assistant_messages_without_an_endpoint_still_load() -> None:
    old = '{"type": "assistant_message", "at": "2026-01-01T00:00:00Z", "step": 1}'
    event = ev.event_from_json(old)
    assert isinstance(event, ev.AssistantMessage) and event.endpoint is None
    assert "@" not in event_line(event).plain
    new = event.model_copy(update={"endpoint": "http://10.0.0.5:8001/v1"})
    assert event_line(new).plain.endswith("step 1: no tool call @10.0.0.5:8001")


# -- (a) a fleet of three: the load is spread, each run sticks to its server ------------------


def test_many_runs_spread_over_three_servers_and_each_sticks_to_one(tmp_path: Path) -> None:
    script = steps_script(tmp_path / "s.yaml", 3)
    runs = 12
    with contextlib.ExitStack() as stack:
        sims = [stack.enter_context(running_sim(sim_config(script))) for _ in range(3)]
        urls = [sim.openai_base_url for sim in sims]
        workflow = flow(tmp_path, urls)
        loaded = [
            load_for_run(workflow, [f"repo={make_repo(tmp_path / f'repo{i}')}"])
            for i in range(runs)
        ]
        store = EventStore(f"sqlite:///{tmp_path / 'm.db'}")
        runner = Runner(store)

        outcomes = run_together(runner, loaded)
        served = [sim.state.next_request_number() - 1 for sim in sims]  # chat requests seen

    assert [o.status for o in outcomes] == ["succeeded"] * runs, [o.reason for o in outcomes]
    runs_per_endpoint: Counter[str] = Counter()
    requests_per_endpoint: Counter[str] = Counter()
    for outcome in outcomes:
        answered_by = endpoints_of(store, outcome.run_id)
        assert len(answered_by) == 4
        assert len(set(answered_by)) == 1, f"run {outcome.run_id} moved: {answered_by}"
        runs_per_endpoint[answered_by[0]] += 1  # type: ignore[index]
        requests_per_endpoint.update(answered_by)  # type: ignore[arg-type]
        started = store.load_events(outcome.run_id)[0]
        assert isinstance(started, ev.RunStarted) and started.endpoints == urls
    print("\nruns per endpoint:", dict(runs_per_endpoint))
    print("requests per endpoint:", dict(requests_per_endpoint), "sims counted:", served)
    assert set(runs_per_endpoint) == set(urls)
    assert all(runs // 3 - 1 <= n <= runs // 3 + 1 for n in runs_per_endpoint.values())
    assert [requests_per_endpoint[url] for url in urls] == served
    report = render_markdown(build_report(store, [outcomes[0].run_id]))
    url = endpoints_of(store, outcomes[0].run_id)[0]
    assert f"- Requests per endpoint: {url.split('://')[1].removesuffix('/v1')} 4" in report


# -- (b) a server killed mid-run: its runs go on elsewhere; restarted, it gets runs again -----


def test_a_server_killed_mid_run_loses_nothing_and_gets_runs_again_once_back(
    tmp_path: Path,
) -> None:
    script = steps_script(tmp_path / "s.yaml", 3, command="echo {i} >> log.txt")
    args = ["--model", "fleet-model", "--max-model-len", "32768", "--policy", f"script:{script}",
            "--ttft", "0.01", "--itl", "0.004"]  # fmt: skip
    first = [make_repo(tmp_path / f"repo{i}") for i in range(6)]
    later = [make_repo(tmp_path / f"later{i}") for i in range(2)]
    with (
        sim_processes(1, args, tmp_path) as (victim,),
        running_sim(sim_config(script)) as b,
        running_sim(sim_config(script)) as c,
    ):
        urls = [victim.url, b.openai_base_url, c.openai_base_url]
        workflow = flow(tmp_path, urls, server_wait=30)
        store = EventStore(f"sqlite:///{tmp_path / 'm.db'}")
        runner = Runner(store)

        async def batch(repos: list[Path]) -> list[RunOutcome]:
            items = [load_for_run(workflow, [f"repo={repo}"]) for repo in repos]
            return list(await asyncio.gather(*(start_run(runner, item) for item in items)))

        async def main() -> tuple[list[RunOutcome], list[RunOutcome], dict, dict]:
            try:
                running = asyncio.ensure_future(batch(first))
                deadline = time.monotonic() + 60
                while True:  # every run answered once; kill the victim mid-answer
                    routers = [c for c in runner._clients.values() if isinstance(c, Router)]
                    if (
                        routers
                        and routers[0].load()[victim.url]["inflight"] > 0
                        and all(r.steps > 0 for r in store.list_runs())
                        and len(store.list_runs()) == len(first)
                    ):
                        break
                    assert time.monotonic() < deadline and not running.done()
                    await asyncio.sleep(0.02)
                victim.kill()
                outcomes = await running
                router = the_router(runner)
                after_kill = router.load()
                await asyncio.to_thread(lambda: victim.start().wait_ready())
                deadline = time.monotonic() + 30
                while not router.load()[victim.url]["healthy"]:
                    assert time.monotonic() < deadline, "the restarted server stayed dead"
                    await asyncio.sleep(0.05)
                again = await batch(later)
                return outcomes, again, after_kill, router.load()
            finally:
                await runner.aclose()

        outcomes, again, after_kill, final = asyncio.run(main())

    assert [o.status for o in outcomes + again] == ["succeeded"] * 8, [
        o.reason for o in outcomes + again
    ]
    for repo in first + later:
        work = worktree_of(store, repo)
        assert (work / "log.txt").read_text().split() == ["0", "1", "2"], "no step twice"
    assert after_kill[victim.url]["healthy"] is False
    moved = 0
    for outcome in outcomes:
        answered_by = endpoints_of(store, outcome.run_id)
        switches = [i for i in range(1, len(answered_by)) if answered_by[i] != answered_by[i - 1]]
        if answered_by[0] == victim.url:
            moved += 1
            assert len(switches) == 1, answered_by  # moved once, then stayed
            assert answered_by[-1] != victim.url
        else:
            assert switches == [], answered_by  # the others never moved
    assert moved >= 1
    print("\nload after the kill:", after_kill, "\nat the end:", final)
    back_on_victim = [o for o in again if endpoints_of(store, o.run_id)[0] == victim.url]
    assert back_on_victim, [endpoints_of(store, o.run_id) for o in again]


# -- the router on its own: load from /metrics, a failing server --------------------------------


def request_for(key: str = KEY) -> ChatRequest:
    return ChatRequest(
        model="fleet-model",
        messages=[
            {"role": "system", "content": f"Test conversation {key}."},
            {"role": "user", "content": "go"},
        ],
    )


def test_a_new_run_avoids_the_server_busy_with_other_clients_requests(tmp_path: Path) -> None:
    slow = write_script(tmp_path / "slow.yaml", "busy", [{"content": "word " * 200}])
    config = sim_config(slow).model_copy(update={"timing": Timing(ttft=0.01, itl=0.02)})

    async def main(busy_url: str, idle_url: str) -> tuple[dict, list[str | None]]:
        other = OpenAIModelClient(
            busy_url, ClientSettings(request_timeout=30, idle_timeout=30, server_wait=5)
        )
        router = Router([busy_url, idle_url], model="fleet-model", refresh_interval=0.1)
        try:
            load = [asyncio.ensure_future(other.complete(request_for("busy"))) for _ in range(3)]
            deadline = time.monotonic() + 10
            while router.load()[busy_url]["others"] < 3:  # another client's 3 requests
                assert time.monotonic() < deadline
                await router.refresh()
            picked = [router.pick(f"run{i}") for i in range(2)]
            for task in load:
                task.cancel()
            return router.load(), [p.url if p else None for p in picked]
        finally:
            await router.aclose()
            await other.aclose()

    with running_sim(config) as busy, running_sim(config) as idle:
        load, picked = asyncio.run(main(busy.openai_base_url, idle.openai_base_url))
    assert load[busy.openai_base_url]["inflight"] == 0
    assert picked == [idle.openai_base_url] * 2, load


def test_a_run_resumed_by_a_new_process_goes_back_to_the_server_that_last_answered_it(
    tmp_path: Path,
) -> None:
    script = steps_script(tmp_path / "s.yaml", 1)

    async def main(urls: list[str]) -> list[str | None]:
        router = Router(urls, model="fleet-model", refresh_interval=0.1)
        try:
            back = router.for_run("old-run", previous=urls[1] + "/")  # as recorded, any slash
            fresh = router.for_run("new-run", previous="http://127.0.0.1:9/v1")  # not ours
            answers = [await back.complete(request_for()), await fresh.complete(request_for())]
            return [a.endpoint for a in answers]
        finally:
            await router.aclose()

    with running_sim(sim_config(script)) as a, running_sim(sim_config(script)) as b:
        urls = [a.openai_base_url, b.openai_base_url]
        served = asyncio.run(main(urls))
    # Without `previous` both would be placed on the idle first server (ties go by index).
    assert served == [urls[1], urls[0]]


def test_a_server_answering_500_is_left_after_quick_retries_and_its_health_watched(
    tmp_path: Path,
) -> None:
    script = steps_script(tmp_path / "s.yaml", 1)
    broken = sim_config(script, faults=[FaultRule(kind="engine_dead")])
    waits: list[WaitEvent] = []

    async def main(urls: list[str]) -> tuple[ModelResponse, dict]:
        router = Router(
            urls,
            model="fleet-model",
            failover_wait=0.5,
            retry=RetryPolicy(initial_backoff=0.05, max_backoff=0.1, jitter=0.01),
        )
        try:
            response = await router.for_run("r1").complete(request_for(), on_wait=waits.append)
            dead = router.endpoints[0]
            assert not dead.healthy
            await router.refresh()  # its /health says 503 (engine dead): it stays dead
            assert not dead.healthy
            router.mark_healthy(dead)
            await router.refresh()  # and a healthy one whose /health fails is dead
            return response, router.load()
        finally:
            await router.aclose()

    with running_sim(broken) as a, running_sim(sim_config(script)) as b:
        response, load = asyncio.run(main([a.openai_base_url, b.openai_base_url]))
    assert response.endpoint == b.openai_base_url
    assert response.content == ANSWER
    assert load[a.openai_base_url]["healthy"] is False
    assert load[a.openai_base_url]["dead_reason"] == "/health failed"
    assert load[b.openai_base_url]["healthy"] is True
    assert [w.kind for w in waits] == ["unavailable", "back"]
    assert waits[0].error.startswith(f"{a.openai_base_url}: HTTP 500")  # type: ignore[union-attr]


# -- misconfigured fleets ------------------------------------------------------------------------


def test_endpoints_serving_different_models_fail_the_run_clearly(tmp_path: Path) -> None:
    script = steps_script(tmp_path / "s.yaml", 1)
    with (
        running_sim(sim_config(script)) as a,
        running_sim(sim_config(script).model_copy(update={"model": "other-model"})) as b,
    ):
        workflow = flow(tmp_path, [a.openai_base_url, b.openai_base_url])
        outcome = run_in_process(workflow, make_repo(tmp_path / "repo"), tmp_path / "m.db")
    assert outcome.status == "failed"
    assert "must all serve the same first model" in outcome.reason
    assert f"{a.openai_base_url} serves fleet-model" in outcome.reason
    assert f"{b.openai_base_url} serves other-model" in outcome.reason


def test_when_every_endpoint_is_down_the_run_waits_server_wait_then_pauses(
    tmp_path: Path,
) -> None:
    ports = []
    for _ in range(2):
        with running_sim(SimConfig()) as gone:  # a port that served once, closed now
            ports.append(gone.port)
    workflow = flow(tmp_path, [f"http://127.0.0.1:{p}/v1" for p in ports], server_wait=1.5)
    started = time.monotonic()
    outcome = run_in_process(workflow, make_repo(tmp_path / "repo"), tmp_path / "m.db")
    assert outcome.status == "paused" and outcome.exit_code == 75, outcome.reason
    assert "model server unavailable" in outcome.reason
    assert 1.4 < time.monotonic() - started < 15
    kinds = [e.type for e in EventStore(f"sqlite:///{tmp_path / 'm.db'}").load_events(
        outcome.run_id
    )]  # fmt: skip
    assert kinds.count("server_unavailable") == 1 and kinds[-1] == "run_paused"


def test_the_command_line_routes_with_endpoint_given_twice_or_comma_separated(
    tmp_path: Path,
) -> None:
    script = steps_script(tmp_path / "s.yaml", 1)
    env = {**os.environ, "MARATHON_HOME": str(tmp_path / "home")}
    db = f"sqlite:///{tmp_path / 'm.db'}"
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(running_sim(sim_config(script))).openai_base_url for _ in "abc"]
        workflow = flow(tmp_path, ["http://127.0.0.1:9/v1"])  # the command line's win
        proc = subprocess.run(
            pilot_cmd(
                "run", str(workflow), "-p", f"repo={make_repo(tmp_path / 'repo')}", "--db", db,
                "--endpoint", urls[0], "--endpoint", f"{urls[1]},{urls[2]}",
            ),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = EventStore(db)
    (record,) = store.list_runs()
    started = store.load_events(record.id)[0]
    assert isinstance(started, ev.RunStarted) and started.endpoints == urls
    answered_by = endpoints_of(store, record.id)
    assert len(answered_by) == 2 and answered_by[0] in urls and len(set(answered_by)) == 1


# -- (c) two workers on one PostgreSQL queue, a two-server fleet ---------------------------------


@pytest.mark.postgres
def test_two_workers_on_one_postgres_queue_share_a_two_server_fleet(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    script = steps_script(tmp_path / "s.yaml", 2, command="sleep 0.2; echo {i} >> log.txt")
    env = {**os.environ, "MARATHON_HOME": str(tmp_path / "home")}
    store = EventStore(pg_url)
    with running_sim(sim_config(script)) as a, running_sim(sim_config(script)) as b:
        workflow = flow(tmp_path, [a.openai_base_url, b.openai_base_url])
        repos = [make_repo(tmp_path / f"repo{i}") for i in range(6)]
        for repo in repos:
            enqueue(store, workflow, [f"repo={repo}"])
        workers = start_workers(pg_url, env, 2)
        for worker in workers:
            assert worker.wait(timeout=180) == 0, worker.stderr.read()  # type: ignore[union-attr]
    runs = store.list_runs()
    assert sorted(r.status for r in runs) == ["succeeded"] * 6
    owners: Counter[str] = Counter()
    served: Counter[str] = Counter()
    for record in runs:
        events = store.load_events(record.id)
        starts = [e for e in events if isinstance(e, ev.RunStarted)]
        assert len(starts) == 1
        owners[starts[0].owner] += 1
        answered_by = endpoints_of(store, record.id)
        assert len(set(answered_by)) == 1, answered_by  # sticky
        served.update(answered_by)  # type: ignore[arg-type]
    print("\nruns per worker:", dict(owners), "requests per endpoint:", dict(served))
    assert len(owners) == 2, "both workers took runs"
    assert set(served) == {a.openai_base_url, b.openai_base_url}, "both servers served"
    for repo in repos:
        assert (worktree_of(store, repo) / "log.txt").read_text().split() == ["0", "1"]


# -- model.fleet: a brain fleet's replicas become the run's endpoints ------------------------


def test_a_workflow_naming_a_brain_fleet_routes_over_its_running_replicas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from brain.cli import app as brain_app
    from brain.fleet.plan import fleet_endpoints

    monkeypatch.setenv("MARATHON_HOME", str(tmp_path / "home"))
    script = steps_script(tmp_path / "s.yaml", 2)
    workflow = write_workflow(
        tmp_path / "wf.yaml",
        key=KEY,
        endpoint="http://unused.invalid/v1",
        phases=[{"name": "work", "prompt": "p"}],
    )
    text = workflow.read_text().replace("endpoint: http://unused.invalid/v1", "fleet: duo")
    workflow.write_text(text)
    cli = CliRunner()

    missing = run_in_process(workflow, make_repo(tmp_path / "r0"), tmp_path / "m0.db")
    assert missing.status == "failed"
    assert re.search(r"model.fleet 'duo': no replica .* brain up", missing.reason), missing.reason

    up = cli.invoke(brain_app, ["up", "sim", "--replicas", "2", "--port", "0",
                                "--set", "name=duo", "--set",
                                f"env.BRAIN_SIM_POLICY=script:{script}"])  # fmt: skip
    assert up.exit_code == 0, up.output
    try:
        urls = fleet_endpoints("duo")
        assert len(urls) == 2
        loaded = [load_for_run(workflow, [f"repo={make_repo(tmp_path / f'r{i}')}"]) for i in (1, 2)]
        runner = Runner(EventStore(f"sqlite:///{tmp_path / 'm.db'}"))

        outcomes = run_together(runner, loaded)
    finally:
        down = cli.invoke(brain_app, ["down", "duo"])
    assert down.exit_code == 0, down.output
    store = EventStore(f"sqlite:///{tmp_path / 'm.db'}")
    assert [o.status for o in outcomes] == ["succeeded"] * 2, [o.reason for o in outcomes]
    served = [set(endpoints_of(store, o.run_id)) for o in outcomes]
    # Two runs at once: each sticks to one replica, and they take one each.
    assert all(len(s) == 1 for s in served)
    assert set().union(*served) == set(urls)


def test_the_live_view_of_routed_runs_shows_each_servers_load(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from pilot.front.ui import MultiRunView, short_endpoint

    script = steps_script(tmp_path / "s.yaml", 1)
    with running_sim(sim_config(script)) as a, running_sim(sim_config(script)) as b:
        urls = [a.openai_base_url, b.openai_base_url]
        out = io.StringIO()
        view = MultiRunView(Console(file=out, width=80), endpoints=urls)
        deadline = time.monotonic() + 10
        while any(w.text.endswith(": -") for w in view.servers):  # the first /metrics read
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with view:
            pass
    shown = out.getvalue()
    for url in urls:
        assert f"{short_endpoint(url)}: 0 running, 0 waiting, KV cache" in shown, shown
