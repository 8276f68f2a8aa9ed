"""Through a real LiteLLM proxy in front of the simulated vLLM (optional: skipped, with the
reason, when no ``litellm`` command is here). Install it apart from the project:

    python3 -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'
    .venv/bin/pytest -m slow tests/test_real_litellm.py

``MARATHON_LITELLM`` names another ``litellm`` command. The proxy (1.108.7) puts the
deployment's ``model_info.max_input_tokens`` in its ``/v1/models`` cards (older ones only in
``/v1/model/info``); the pilot takes it as the window and refuses a workflow that cannot fit
in it. The proxy wants a master key (it will not start without one), sent as the workflow's
``model.api_key_env``; its start takes a minute or more on a busy machine.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pilot_harness import make_repo, run_in_process, write_script, write_workflow

from brain.launchers.ports import free_port
from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.model.client import OpenAIModelClient
from pilot.model.servers import _litellm_model_info
from pilot.model.settings import ClientSettings
from pilot.store.event_store import EventStore

pytestmark = pytest.mark.slow

KEY = "sk-4f8a2c9e7b1d6f3a0e5c8b2d9f7a1e4c"
"""The proxy's master key for these tests (a random string, not a secret)."""
TURNS = [
    {"tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]},
    {"tool_calls": [{"name": "finish", "arguments": {"summary": "read it"}}]},
]


def _litellm_or_skip() -> str:
    apart = Path("/tmp/litellm-venv/bin/litellm")
    found = os.environ.get("MARATHON_LITELLM") or shutil.which("litellm")
    found = found or (str(apart) if apart.is_file() else None)
    if not found:
        pytest.skip("no litellm command: pip install 'litellm[proxy]' (see the docstring)")
    return found


@pytest.fixture
def proxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """(the proxy's /v1 URL, the sim's /v1 URL): a LiteLLM proxy whose model "qwen" is the
    sim, with model_info.max_input_tokens 8192."""
    litellm = _litellm_or_skip()
    script = write_script(tmp_path / "s.yaml", "litellm", TURNS)
    config = SimConfig(model="qwen", max_model_len=8192, policy=f"script:{script}")
    with running_sim(config) as sim:
        port = free_port()
        cfg = tmp_path / "litellm.yaml"
        cfg.write_text(
            "model_list:\n"
            "  - model_name: qwen\n"
            "    litellm_params:\n"
            "      model: openai/qwen\n"
            f"      api_base: {sim.openai_base_url}\n"
            "      api_key: none\n"
            "    model_info:\n"
            "      max_input_tokens: 8192\n"
        )
        log = (tmp_path / "litellm.log").open("wb")
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_MASTER_KEY": KEY}
        monkeypatch.setenv("MARATHON_TEST_LITELLM_KEY", KEY)
        process = subprocess.Popen(
            [litellm, "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                assert process.poll() is None, (tmp_path / "litellm.log").read_text()[-3000:]
                try:
                    live = f"http://127.0.0.1:{port}/health/liveliness"
                    if httpx.get(live, timeout=2).is_success:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            else:
                pytest.fail("the LiteLLM proxy did not answer in 300 s")
            yield f"http://127.0.0.1:{port}/v1", sim.openai_base_url
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def test_the_window_is_max_input_tokens_and_a_run_goes_through(
    proxy: tuple[str, str], tmp_path: Path
) -> None:
    url, _ = proxy

    async def models():  # type: ignore[no-untyped-def]
        settings = ClientSettings(api_key=KEY, server_wait=5)
        async with OpenAIModelClient(url, settings) as client:
            served = await client.list_models()
            info = await client._http_client().get(
                f"{url}/model/info", headers={"Authorization": f"Bearer {KEY}"}
            )
        return served, info.json()

    [model], info = asyncio.run(models())
    assert (model.id, model.max_model_len, model.server) == ("qwen", 8192, "LiteLLM")
    assert model.window_source == "LiteLLM /v1/models max_input_tokens"
    # An older proxy states it only in /v1/model/info: read the same from there.
    assert _litellm_model_info(info, "qwen") == 8192
    repo = make_repo(tmp_path / "repo")
    wf = write_workflow(
        tmp_path / "wf.yaml",
        key="litellm",
        endpoint=url,
        tools=["read_file", "finish"],
        phases=[{"name": "read", "prompt": "Read app.py."}],
        model={"api_key_env": "MARATHON_TEST_LITELLM_KEY"},
    )
    outcome = run_in_process(wf, repo, tmp_path / "m.db")
    assert outcome.status == "succeeded", outcome.reason
    events = EventStore(f"sqlite:///{tmp_path / 'm.db'}").load_events(outcome.run_id)
    answers = [e for e in events if isinstance(e, ev.AssistantMessage)]
    print([a.usage for a in answers])
    assert answers and all(a.usage is not None and a.usage.prompt_tokens > 0 for a in answers)


def test_a_workflow_wanting_more_than_max_input_tokens_is_refused_at_start(
    proxy: tuple[str, str], tmp_path: Path
) -> None:
    url, _ = proxy
    repo = make_repo(tmp_path / "repo")
    wf = write_workflow(
        tmp_path / "wf.yaml",
        key="litellm-small",
        endpoint=url,
        tools=["read_file", "finish"],
        phases=[{"name": "read", "prompt": "Read app.py."}],
        model={"max_tokens": 8000, "api_key_env": "MARATHON_TEST_LITELLM_KEY"},
    )
    outcome = run_in_process(wf, repo, tmp_path / "m.db")
    print(outcome.reason)
    assert outcome.status == "failed"
    assert "gives 8192 tokens (from LiteLLM /v1/models max_input_tokens)" in outcome.reason
    assert "model_info.max_input_tokens" in outcome.reason
