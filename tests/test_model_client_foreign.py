"""The model client against servers that are not vLLM, over real loopback HTTP with the openai
SDK: a plain web server (Python's own http.server) and a LiteLLM proxy refusing the key (its
recorded answer, tests/fixtures/litellm-1.108, and a real proxy when one is installed)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from plain_http import plain_web_server

from pilot.errors import ConfigurationError
from pilot.model.client import OpenAIModelClient
from pilot.model.settings import ClientSettings
from pilot.model.types import ChatRequest, RetryPolicy

pytestmark = pytest.mark.anyio

FIX = Path(__file__).parent / "fixtures" / "litellm-1.108"
FAST = RetryPolicy(initial_backoff=0.05, max_backoff=0.25, jitter=0.02)
HI = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def client(base_url: str, api_key: str | None = None) -> OpenAIModelClient:
    settings = ClientSettings(
        api_key=api_key, request_timeout=5.0, idle_timeout=2.0, server_wait=5.0
    )
    return OpenAIModelClient(base_url, settings, retry=FAST)


async def _refusal(base_url: str) -> list[str]:
    """What list_models and complete raise, as the messages a user reads."""
    messages = []
    c = client(base_url)
    try:
        for call in (c.list_models, lambda: c.complete(HI)):
            with pytest.raises(ConfigurationError) as err:
                await call()
            messages.append(str(err.value))
    finally:
        await c.aclose()
    return messages


async def test_a_plain_web_server_is_named_in_one_line_with_the_fix_for_its_url(tmp_path):
    with plain_web_server(tmp_path) as root:
        at_v1 = await _refusal(f"{root}/v1")
        at_root = await _refusal(root)
    for message, status in zip(at_v1 + at_root, ["404", "501", "404", "501"], strict=True):
        assert "\n" not in message and "<" not in message  # no page pasted
        assert "not an OpenAI-compatible API" in message
        assert f"HTTP {status} with a text/html page titled 'Error response'" in message
    # It already ends in /v1: the host and port are wrong, not the path.
    assert all("host and port" in m and "ending in /v1" not in m for m in at_v1)
    assert all(f"(try {root}/v1)" in m for m in at_root)


def _recorded(name: str) -> tuple[int, str, bytes]:
    """(status, content type, body) of a recorded exchange."""
    text = (FIX / name).read_text()
    response = text.split("\nHTTP/1.1 ", 1)[1]
    head, body = response.split("\n\n", 1)
    status = int(head.split()[0])
    kind = next(
        ln.split(":", 1)[1].strip() for ln in head.splitlines() if ln.startswith("content-type:")
    )
    return status, kind, body.strip().encode()


@contextlib.asynccontextmanager
async def replaying(status: int, kind: str, body: bytes, seen: list[bytes]) -> AsyncIterator[str]:
    """A loopback server giving every request the recorded answer."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (int(ln.split(b":")[1]) for ln in head.split(b"\r\n")
                     if ln.lower().startswith(b"content-length:")),
                    0,
                )  # fmt: skip
                if length:
                    await reader.readexactly(length)
                seen.append(head.split(b"\r\n", 1)[0])
                writer.write(
                    f"HTTP/1.1 {status} Bad Request\r\ncontent-type: {kind}\r\n"
                    f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    finally:
        server.close()
        await server.wait_closed()


async def test_a_litellm_proxys_no_connected_db_is_an_api_key_failure():
    status, kind, body = _recorded("no_connected_db.txt")
    assert status == 400 and b"No connected db." in body
    seen: list[bytes] = []
    async with replaying(status, kind, body, seen) as url:
        messages = await _refusal(url)
    for message in messages:
        assert "refused the request's API key" in message and "No connected db." in message
        assert "model.api_key_env" in message and "LiteLLM" in message
    # Not waited out as an outage: the chat request is sent once (the model list is asked
    # once shared, then once by the caller itself, as for any failure of the shared request).
    assert seen.count(b"POST /v1/chat/completions HTTP/1.1") == 1
    assert seen.count(b"GET /v1/models HTTP/1.1") <= 2


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def litellm_proxy(tmp_path: Path) -> Iterator[str]:
    """A real LiteLLM proxy with a master key and no database (MARATHON_LITELLM names its
    ``litellm`` executable, from ``pip install 'litellm[proxy]'``)."""
    exe = os.environ.get("MARATHON_LITELLM") or ""
    if not (exe and shutil.which(exe)):
        pytest.skip("no LiteLLM proxy: set MARATHON_LITELLM to a litellm executable")
    port = _free_port()
    config = tmp_path / "litellm.yaml"
    config.write_text(
        "model_list:\n  - model_name: m\n    litellm_params: {model: openai/m, "
        f'api_base: "http://127.0.0.1:{_free_port()}/v1", api_key: x}}\n'
        "general_settings: {master_key: sk-master}\n"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("DATABASE_URL", None)
    log = (tmp_path / "litellm.log").open("w")
    proc = subprocess.Popen(
        [exe, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health/liveliness").status_code == 200:
                    break
            assert proc.poll() is None, (tmp_path / "litellm.log").read_text()
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


async def test_a_real_litellm_proxy_refusing_the_key_is_an_api_key_failure(litellm_proxy):
    for key in (None, "sk-wrong"):  # None: the pilot sends a placeholder bearer
        c = client(litellm_proxy, api_key=key)
        try:
            with pytest.raises(ConfigurationError, match=r"model\.api_key_env"):
                await c.complete(HI)
        finally:
            await c.aclose()
