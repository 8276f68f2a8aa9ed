"""Images end to end over loopback: workflow -> pilot -> view_image -> simulated vLLM.

One test per way an image can travel or fail: file:// inside the server's media directory,
a file outside it, a data URL (no brain-managed server), the server refusing file:// (one
recorded fallback to data URLs), an oversized image, a non-image file, a model without vision
(declared, and learned from the server's 400), phase images, and a resumed run sending the
bytes that were viewed even though the file changed meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from image_bytes import png
from pilot_harness import (
    GIT_ENV,
    call,
    final_state,
    make_repo,
    run_in_process,
    write_script,
    write_workflow,
)

import tools.images as timg
from brain.sim.config import FaultRule, SimConfig
from brain.sim.policy import SimChatRequest, SimTurn
from brain.sim.script_policy import ScriptPolicy
from brain.sim.server import running_sim
from brain.sim.tokenizer import IMAGE_TOKENS, count_chat
from pilot import events as ev
from pilot.run.launch import resume_run
from pilot.run.runner import Runner
from pilot.store.event_store import EventStore

KEY = "images-e2e"
TOOLS: list[Any] = ["view_image", "read_file", "finish"]


class Recording:
    """A script policy that keeps every request it answered (the sim checked its images)."""

    def __init__(self, script: Path) -> None:
        self.inner = ScriptPolicy.from_file(script)
        self.requests: list[list[dict[str, Any]]] = []
        self.tools: list[Any] = []

    def respond(self, request: SimChatRequest) -> SimTurn:
        self.requests.append(request.message_dicts())
        self.tools.append(request.tools)
        return self.inner.respond(request)


def image_urls(messages: list[dict[str, Any]]) -> list[str]:
    return [
        part["image_url"]["url"]
        for m in messages
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if part.get("type") == "image_url"
    ]


def texts(messages: list[dict[str, Any]]) -> str:
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            out += [p.get("text", "") for p in content if p.get("type") == "text"]
        elif content:
            out.append(str(content))
    return "\n".join(out)


def events_of(db: Path, run_id: str) -> list[ev.Event]:
    return EventStore(f"sqlite:///{db}").load_events(run_id)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = make_repo(tmp_path / "repo")
    (root / "shots").mkdir()
    (root / "shots" / "a.png").write_bytes(png(8, 6))
    (root / "docs").mkdir()
    (root / "docs" / "b.png").write_bytes(png(5, 5))
    env = {**GIT_ENV, "PATH": "/usr/bin:/bin"}
    for args in (["add", "-A"], ["commit", "-qm", "images"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
    return root


def managed(allowed: Path) -> dict[str, Any]:
    """The run's server as the brain manages it: the workflow names a profile (backend sim,
    ``allowed`` as its allowed_local_media_path: the sim sees host paths, like a process
    server) whose port is the running sim's; ``run_flow`` writes it once the sim is up."""
    return {"allowed_local_media_path": str(allowed)}


def profile_of(folder: Path, url: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The workflow's ``model`` naming a brain profile (backend sim) of the server at ``url``."""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    spec = {"name": "t", "model": "test-model", "backend": "sim", "host": "127.0.0.1",
            "port": port, **settings}  # fmt: skip
    path = folder / "server.yaml"
    path.write_text(yaml.safe_dump(spec))
    return {"endpoint": None, "profile": str(path)}


def run_flow(
    tmp_path: Path,
    repo: Path,
    turns: list[dict[str, Any]],
    *,
    tools: list[Any] | None = None,
    phases: list[dict[str, Any]] | None = None,
    model: dict[str, Any] | None = None,
    profile: dict[str, Any] | None = None,
    **sim: Any,
) -> tuple[Any, Recording, Path]:
    script = write_script(tmp_path / "s.yaml", KEY, turns)
    policy = Recording(script)
    config = SimConfig(model="test-model", max_model_len=32768, **sim)
    db = tmp_path / "runs.db"
    with running_sim(config, policy=policy) as server:
        if profile is not None:  # named by the workflow in place of an endpoint
            model = {**(model or {}), **profile_of(tmp_path, server.openai_base_url, profile)}
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key=KEY,
            endpoint=server.openai_base_url,
            phases=phases or [{"name": "look", "prompt": "Look at the screenshot."}],
            tools=tools or TOOLS,
            model=model,
            workspace=IN_PLACE,
        )
        outcome = run_in_process(workflow, repo, db)
    return outcome, policy, db


IN_PLACE = {"in_place": True}
"""The server's media directory is in the user's checkout (shots/): the run works there."""

LOOK_THEN_FINISH = [
    {"tool_calls": [call("view_image", path="shots/a.png")]},
    {"tool_calls": [call("read_file", path="README.md")]},
    {"tool_calls": [call("finish", summary="looked at shots/a.png and README.md")]},
]
"""A survey: its summary names what it read (the image, or the README when it is refused)."""


def test_image_inside_the_media_dir_travels_as_a_file_url_and_costs_its_image_tokens(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome, policy, db = run_flow(
        tmp_path,
        repo,
        LOOK_THEN_FINISH,
        profile=managed(repo / "shots"),
        allowed_local_media_path=str(repo / "shots"),
    )
    assert outcome.status == "succeeded", outcome.reason
    second = policy.requests[1]
    assert image_urls(second) == [(repo / "shots" / "a.png").as_uri()]
    assert [m["role"] for m in second[-3:]] == ["assistant", "tool", "user"]
    events = events_of(db, outcome.run_id)
    [finished] = [e for e in events if isinstance(e, ev.ToolFinished) and e.images]
    assert finished.images[0].url == (repo / "shots" / "a.png").as_uri()
    assert not [e for e in events if isinstance(e, ev.ImageFallback)]
    # The image is counted: usage equals the sim's count, which holds 256 tokens for it.
    usage = [e.usage for e in events if isinstance(e, ev.AssistantMessage)]
    assert usage[1] is not None
    assert usage[1].prompt_tokens == count_chat(second, policy.tools[1])
    without = [
        {**m, "content": [p for p in m["content"] if p["type"] != "image_url"]}
        if isinstance(m.get("content"), list)
        else m
        for m in second
    ]
    assert count_chat(second) - count_chat(without) == IMAGE_TOKENS


def test_image_outside_the_media_dir_travels_as_a_data_url(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = [
        {"tool_calls": [call("view_image", path="docs/b.png")]},
        {"tool_calls": [call("finish", summary="looked at docs/b.png")]},
    ]
    outcome, policy, db = run_flow(
        tmp_path,
        repo,
        turns,
        profile=managed(repo / "shots"),
        allowed_local_media_path=str(repo / "shots"),
    )
    assert outcome.status == "succeeded", outcome.reason
    [url] = image_urls(policy.requests[1])
    assert base64.b64decode(url.split(",", 1)[1]) == (repo / "docs" / "b.png").read_bytes()
    [finished] = [e for e in events_of(db, outcome.run_id) if getattr(e, "images", None)]
    assert finished.images[0].url is None and "not under" in finished.images[0].transport_note


def test_without_a_brain_managed_server_images_travel_as_base64_data_urls(
    tmp_path: Path, repo: Path
) -> None:
    outcome, policy, _ = run_flow(tmp_path, repo, LOOK_THEN_FINISH)
    assert outcome.status == "succeeded", outcome.reason
    [url] = image_urls(policy.requests[1])
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == (repo / "shots" / "a.png").read_bytes()


@pytest.mark.parametrize(
    ("server_allows", "error"),
    [(None, "Cannot load local files"), ("other", "must be a subpath of")],
)
def test_server_refusing_file_urls_falls_back_to_data_urls_once_and_records_it(
    tmp_path: Path,
    repo: Path,
    server_allows: str | None,
    error: str,
) -> None:
    allowed = None
    if server_allows:
        allowed = str(tmp_path / server_allows)
        Path(allowed).mkdir()
    outcome, policy, db = run_flow(
        tmp_path,
        repo,
        LOOK_THEN_FINISH,
        profile=managed(repo),  # the profile says the whole repo is readable; the server disagrees
        allowed_local_media_path=allowed,
    )
    assert outcome.status == "succeeded", outcome.reason
    fallbacks = [e for e in events_of(db, outcome.run_id) if isinstance(e, ev.ImageFallback)]
    assert [f.action for f in fallbacks] == ["data_url"]
    assert error in fallbacks[0].error
    [url] = image_urls(policy.requests[1])
    assert url.startswith("data:image/png;base64,")


def test_oversized_image_is_shrunk_said_so_and_sent_as_a_data_url(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("PIL.Image")
    (repo / "shots" / "big.png").write_bytes(png(400, 300, noise=True))
    turns = [
        {"tool_calls": [call("view_image", path="shots/big.png")]},
        {"tool_calls": [call("finish", summary="looked at shots/big.png")]},
    ]
    tools = [{"view_image": {"max_bytes": 60_000, "max_side": 160}}, "finish"]
    outcome, policy, db = run_flow(
        tmp_path,
        repo,
        turns,
        tools=tools,
        profile=managed(repo / "shots"),
        allowed_local_media_path=str(repo / "shots"),
    )
    assert outcome.status == "succeeded", outcome.reason
    tool = next(m for m in policy.requests[1] if m["role"] == "tool")
    assert "scaled from 400x300 to 160x120" in tool["content"]
    [url] = image_urls(policy.requests[1])
    sent = base64.b64decode(url.split(",", 1)[1])
    assert len(sent) <= 60_000 and timg.sniff_image(sent).width == 160  # type: ignore[union-attr]
    [finished] = [e for e in events_of(db, outcome.run_id) if getattr(e, "images", None)]
    assert not finished.images[0].original and finished.images[0].url is None


def test_oversized_image_without_pillow_is_a_tool_error_and_the_run_goes_on(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timg, "_pillow", lambda: None)
    (repo / "shots" / "big.png").write_bytes(png(400, 300, noise=True))
    turns = [
        {"tool_calls": [call("view_image", path="shots/big.png")]},
        {"tool_calls": [call("read_file", path="README.md")]},
        {"tool_calls": [call("finish", summary="could not look; README.md read")]},
    ]
    tools = [{"view_image": {"max_bytes": 60_000}}, "read_file", "finish"]
    outcome, policy, _ = run_flow(tmp_path, repo, turns, tools=tools)
    assert outcome.status == "succeeded", outcome.reason
    tool = next(m for m in policy.requests[1] if m["role"] == "tool")
    assert "Pillow is not installed" in tool["content"]
    assert image_urls(policy.requests[1]) == []


def test_non_image_file_is_a_tool_error_and_nothing_is_attached(tmp_path: Path, repo: Path) -> None:
    turns = [
        {"tool_calls": [call("view_image", path="README.md")]},
        {"tool_calls": [call("read_file", path="README.md")]},
        {"tool_calls": [call("finish", summary="README.md is not an image")]},
    ]
    outcome, policy, _ = run_flow(tmp_path, repo, turns)
    assert outcome.status == "succeeded", outcome.reason
    tool = next(m for m in policy.requests[1] if m["role"] == "tool")
    assert tool["content"].startswith("Error: README.md is not an image")
    assert image_urls(policy.requests[1]) == []


def test_model_declared_without_vision_gets_a_clear_tool_error(tmp_path: Path, repo: Path) -> None:
    outcome, policy, _ = run_flow(tmp_path, repo, LOOK_THEN_FINISH, model={"vision": False})
    assert outcome.status == "succeeded", outcome.reason
    tool = next(m for m in policy.requests[1] if m["role"] == "tool")
    assert "does not take images" in tool["content"] and tool["content"].startswith("Error:")
    assert all(image_urls(r) == [] for r in policy.requests)


def test_model_without_vision_learned_from_the_server_drops_images_and_refuses_more(
    tmp_path: Path, repo: Path
) -> None:
    turns = [
        {"tool_calls": [call("view_image", path="shots/a.png")]},
        {"tool_calls": [call("view_image", path="docs/b.png")]},
        {"tool_calls": [call("read_file", path="README.md")]},
        {"tool_calls": [call("finish", summary="no eyes; README.md read")]},
    ]
    outcome, policy, db = run_flow(tmp_path, repo, turns, vision=False)
    assert outcome.status == "succeeded", outcome.reason
    fallbacks = [e for e in events_of(db, outcome.run_id) if isinstance(e, ev.ImageFallback)]
    assert [f.action for f in fallbacks] == ["drop"]
    assert "At most 0 image(s)" in fallbacks[0].error
    assert all(image_urls(r) == [] for r in policy.requests)
    assert "[image not shown: the server refused images" in texts(policy.requests[1])
    second_tool = [m for m in policy.requests[2] if m["role"] == "tool"][-1]
    assert "does not take images" in second_tool["content"]


def test_phase_images_are_attached_to_the_prompt_and_problems_noted(
    tmp_path: Path, repo: Path
) -> None:
    phases = [
        {
            "name": "look",
            "prompt": "Compare with the mockup.",
            "images": ["shots/a.png", "{{ 'missing' }}.png"],
        }
    ]
    turns = [{"tool_calls": [call("finish", summary="compared")]}]
    outcome, policy, db = run_flow(tmp_path, repo, turns, tools=["finish"], phases=phases)
    assert outcome.status == "succeeded", outcome.reason
    prompt = next(m for m in policy.requests[0] if m["role"] == "user")
    assert [p["type"] for p in prompt["content"]] == ["text", "image_url"]
    assert "[image missing.png not attached: no such file" in prompt["content"][0]["text"]
    started = next(e for e in events_of(db, outcome.run_id) if isinstance(e, ev.PhaseStarted))
    assert [ref.source for ref in started.images] == ["shots/a.png"]


def test_resumed_run_sends_the_bytes_that_were_viewed_even_if_the_file_changed(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = write_script(tmp_path / "s.yaml", KEY, LOOK_THEN_FINISH)
    db = tmp_path / "runs.db"
    original = (repo / "shots" / "a.png").read_bytes()
    busy = SimConfig(
        model="test-model",
        max_model_len=32768,
        policy=f"script:{script}",
        allowed_local_media_path=str(repo / "shots"),
        faults=[FaultRule(kind="http_503", at=list(range(2, 50)))],
    )
    with running_sim(busy) as server:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key=KEY,
            endpoint=server.openai_base_url,
            phases=[{"name": "look", "prompt": "Look."}],
            tools=TOOLS,
            model={
                "server_wait": 1,
                **profile_of(tmp_path, server.openai_base_url, managed(repo / "shots")),
            },
            workspace=IN_PLACE,
        )
        first = run_in_process(workflow, repo, db)
    assert first.status == "paused", first.reason
    (repo / "shots" / "a.png").write_bytes(png(9, 9))  # the agent's file changes meanwhile

    policy = Recording(script)
    healthy = SimConfig(
        model="test-model", max_model_len=32768, allowed_local_media_path=str(repo / "shots")
    )
    with running_sim(healthy, policy=policy) as server:
        store = EventStore(f"sqlite:///{db}")
        outcome = asyncio.run(
            resume_run(Runner(store), store.find_run(first.run_id), endpoint=server.openai_base_url)
        )
    assert outcome.status == "succeeded", outcome.reason
    [url] = image_urls(policy.requests[0])
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == original
    state = final_state(db, first.run_id)
    assert len(state.images) == 1


def test_server_refusing_an_undecodable_image_mid_run_drops_it_and_the_run_goes_on(
    tmp_path: Path, repo: Path
) -> None:
    """The stored bytes of a viewed image go bad while the run is paused (a disk fault, or an
    image stored by an older Marathon that did not decode it): after the resume the server
    answers 400 "cannot identify image file"; that image is left out, the model is told, and
    the run finishes instead of failing."""
    turns = [
        {"tool_calls": [call("view_image", path="shots/a.png")]},
        {"tool_calls": [call("view_image", path="docs/b.png")]},
        {"tool_calls": [call("finish", summary="looked at shots/a.png")]},
    ]
    script = write_script(tmp_path / "s.yaml", KEY, turns)
    db = tmp_path / "runs.db"
    busy = SimConfig(
        model="test-model",
        max_model_len=32768,
        policy=f"script:{script}",
        faults=[FaultRule(kind="http_503", at=list(range(3, 50)))],
    )
    with running_sim(busy) as server:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key=KEY,
            endpoint=server.openai_base_url,
            phases=[{"name": "look", "prompt": "Look."}],
            tools=TOOLS,
            model={"server_wait": 1},
        )
        first = run_in_process(workflow, repo, db)
    assert first.status == "paused", first.reason
    state = final_state(db, first.run_id)
    bad = next(ref for ref in state.images.values() if ref.source == "shots/a.png")
    good = next(ref for ref in state.images.values() if ref.source == "docs/b.png")
    Path(bad.artifact).write_bytes(Path(bad.artifact).read_bytes()[:33] + bytes(range(256)) * 4)

    policy = Recording(script)
    with running_sim(SimConfig(model="test-model", max_model_len=32768), policy=policy) as server:
        store = EventStore(f"sqlite:///{db}")
        outcome = asyncio.run(
            resume_run(Runner(store), store.find_run(first.run_id), endpoint=server.openai_base_url)
        )
    assert outcome.status == "succeeded", outcome.reason
    fallbacks = [e for e in events_of(db, first.run_id) if isinstance(e, ev.ImageFallback)]
    assert [(f.action, f.images) for f in fallbacks] == [("drop", [bad.sha256])]
    assert "cannot identify image file" in fallbacks[0].error
    [url] = image_urls(policy.requests[0])  # the good image is still shown
    assert base64.b64decode(url.split(",", 1)[1]) == Path(good.artifact).read_bytes()
    assert "[image not shown: the server could not decode it" in texts(policy.requests[0])
