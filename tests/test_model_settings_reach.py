"""Every workflow ``model.*`` setting reaches what uses it: the request body or its component.

One real run of the pilot against the simulated vLLM server over loopback, with every setting
given a non-default value; the sim's policy keeps the request bodies it received. ``CHECKS``
must name every field of ``ModelSettings``: a new setting without a mapping here fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from pilot_harness import call, make_repo, write_script, write_workflow

from brain.profiles import load_profile
from brain.sim.config import SimConfig
from brain.sim.policies import load_policy
from brain.sim.policy import Policy, SimChatRequest, SimTurn
from brain.sim.server import running_sim
from pilot.errors import ConfigurationError
from pilot.run.launch import build_plan, load_for_run, start_run
from pilot.run.runner import Runner
from pilot.store.event_store import EventStore
from pilot.workflow.plan import RunPlan
from pilot.workflow.schema import ModelSettings

KEY = "settings-reach"
MODEL = "settings-model"
API_KEY_ENV = "MARATHON_TEST_SETTINGS_KEY"
API_KEY = "sk-settings-test"

REQUEST = {"temperature": 0.7, "top_p": 0.9, "seed": 1234, "max_tokens": 777, "stream_interval": 4}
"""Settings that are request fields of the same name, with values unlike the schema's defaults."""

OTHER = {
    "name": MODEL,
    "api_key_env": API_KEY_ENV,
    "request_timeout": 321,
    "idle_timeout": 54,
    "server_wait": 43,
    "context_margin": 99,
    "context_window": 16384,
    "vision": False,
    "tool_calls": "forced",
}
"""Settings used by the pilot itself, with values unlike the schema's defaults."""


class RecordingPolicy:
    """The script's answers, keeping each request body as the sim parsed it (extras too)."""

    def __init__(self, script: Path) -> None:
        self.inner: Policy = load_policy(f"script:{script}")
        self.bodies: list[dict[str, Any]] = []

    def respond(self, request: SimChatRequest) -> SimTurn:
        self.bodies.append(request.model_dump())
        return self.inner.respond(request)


@dataclass
class Seen:
    """What one run showed: the bodies the server received, the plan, the runner's client."""

    sim_url: str
    bodies: list[dict[str, Any]]
    plan: RunPlan
    client: Any
    workflow: Path
    repo: Path
    extra: dict[str, Any] = field(default_factory=dict)


def _check_request_field(name: str) -> Callable[[Seen], None]:
    def check(seen: Seen) -> None:
        assert seen.bodies, "the server received no request"
        for body in seen.bodies:
            assert body.get(name) == REQUEST[name], f"request body has {name}={body.get(name)!r}"

    return check


def _with_model(seen: Seen, tmp: Path, **model: Any) -> RunPlan:
    """The plan of the run's workflow with its ``model`` section's endpoint keys replaced."""
    data = yaml.safe_load(seen.workflow.read_text())
    data["model"].pop("endpoint")
    data["model"].update(model)
    path = tmp / f"wf-{'-'.join(model)}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return build_plan(load_for_run(path, [f"repo={seen.repo}"]), "r")


def _endpoint(seen: Seen) -> None:
    assert seen.plan.model.targets == (seen.sim_url,)
    assert seen.client.base_url == seen.sim_url.rstrip("/")


def _endpoints(seen: Seen) -> None:
    other = "http://127.0.0.1:9/v1"
    plan = _with_model(seen, seen.extra["tmp"], endpoints=[seen.sim_url, other])
    assert plan.model.targets == (seen.sim_url, other)


def _profile(seen: Seen) -> None:
    plan = _with_model(seen, seen.extra["tmp"], profile="sim")
    spec = load_profile("sim")
    assert plan.model.endpoint.endswith(f":{spec.port}/v1")
    assert plan.media.server is not None  # the brain's spec, for its media settings


def _fleet(seen: Seen) -> None:
    with pytest.raises(ConfigurationError, match=r"model\.fleet 'no-such-fleet'"):
        _with_model(seen, seen.extra["tmp"], fleet="no-such-fleet")


def _name(seen: Seen) -> None:
    assert {body["model"] for body in seen.bodies} == {MODEL}


def _api_key_env(seen: Seen) -> None:
    # The sim answers 401 without the key, so received requests carried it.
    assert seen.bodies
    assert seen.client.settings.api_key == API_KEY


def _client_setting(name: str) -> Callable[[Seen], None]:
    def check(seen: Seen) -> None:
        assert getattr(seen.client.settings, name) == OTHER[name]

    return check


def _context_margin(seen: Seen) -> None:
    assert seen.plan.model.context_margin == OTHER["context_margin"]


def _context_window(seen: Seen) -> None:
    # The sim serves 32768; the run must budget with the setting instead.
    resolved = [e for e in seen.extra["events"] if e.type == "model_resolved"]
    assert resolved, "the run recorded no model_resolved event"
    assert resolved[-1].max_model_len == OTHER["context_window"]
    assert resolved[-1].window_source == "setting model.context_window"


def _vision(seen: Seen) -> None:
    assert seen.plan.media.vision is False


def _tool_calls(seen: Seen) -> None:
    # Forced: every request that offers tools constrains the answer to them.
    offered = [body for body in seen.bodies if body.get("tools")]
    assert offered, "no request offered tools"
    for body in offered:
        assert body["tool_choice"] == "required", f"tool_choice={body['tool_choice']!r}"


CHECKS: dict[str, Callable[[Seen], None]] = {
    **{name: _check_request_field(name) for name in REQUEST},
    "endpoint": _endpoint,
    "endpoints": _endpoints,
    "profile": _profile,
    "fleet": _fleet,
    "name": _name,
    "api_key_env": _api_key_env,
    "request_timeout": _client_setting("request_timeout"),
    "idle_timeout": _client_setting("idle_timeout"),
    "server_wait": _client_setting("server_wait"),
    "context_margin": _context_margin,
    "context_window": _context_window,
    "vision": _vision,
    "tool_calls": _tool_calls,
}


def test_every_model_setting_has_a_check_and_a_non_default_value() -> None:
    fields = ModelSettings.model_fields
    assert set(CHECKS) == set(fields), (
        "map each ModelSettings field to where it must arrive: "
        f"missing {sorted(set(fields) - set(CHECKS))}, stale {sorted(set(CHECKS) - set(fields))}"
    )
    for name, value in {**REQUEST, **OTHER}.items():
        assert value != fields[name].default, f"{name}: test with a value unlike the default"


def test_every_model_setting_reaches_the_request_or_its_component(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(API_KEY_ENV, API_KEY)
    script = write_script(
        tmp_path / "script.yaml",
        KEY,
        [{"content": "looking"}, {"tool_calls": [call("finish", summary="done")]}],
    )
    policy = RecordingPolicy(script)
    config = SimConfig(model=MODEL, api_keys=[API_KEY], max_model_len=32768)
    with running_sim(config, policy=policy) as sim:
        repo = make_repo(tmp_path / "repo")
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key=KEY,
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
            model={**REQUEST, **OTHER},
        )
        loaded = load_for_run(workflow, [f"repo={repo}"])
        store = EventStore(f"sqlite:///{tmp_path / 'm.db'}")
        runner = Runner(store)

        async def run() -> tuple[str, str, Any]:
            try:
                outcome = await start_run(runner, loaded, endpoint=None)
                plan = build_plan(loaded, outcome.run_id)
                # The runner's cached client for this plan: the one the run's requests used.
                assert len(runner._clients) == 1
                return outcome.status, outcome.run_id, runner._client(plan)
            finally:
                await runner.aclose()

        status, run_id, client = asyncio.run(run())
        assert status == "succeeded"
        seen = Seen(
            sim_url=sim.openai_base_url,
            bodies=[b for b in policy.bodies if b["messages"][0]["role"] == "system"],
            plan=build_plan(loaded, "r"),
            client=client,
            workflow=workflow,
            repo=repo,
            extra={"tmp": tmp_path, "events": store.load_events(run_id)},
        )
    failed = []
    for name in ModelSettings.model_fields:
        try:
            CHECKS[name](seen)
        except AssertionError as exc:
            failed.append(f"model.{name}: {str(exc).splitlines()[0]}")
    assert not failed, "settings that did not arrive:\n" + "\n".join(failed)
