"""What ``brain bench`` asks an endpoint besides chat: its root URL, its model (``/v1/models``)
and its ``/metrics`` (speculative-decoding counters before and after a point); and the one
HTTP client and endpoint list that the synthetic bench and the replay both start from.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from brain import urls
from brain.bench.models import BenchError, EndpointConfig
from brain.bench.sender import error_text
from brain.metrics import MetricsParseError, MetricsSnapshot, SpecDecodeStats, spec_decode_delta


def server_root(url: str) -> str:
    """``http://host:8000/v1/`` -> ``http://host:8000`` (vLLM's /metrics and /tokenize sit at
    the root; the OpenAI routes under /v1)."""
    if not url.strip().startswith(("http://", "https://")):
        raise BenchError(f"endpoint {url!r}: expected an http:// or https:// URL")
    return urls.server_root(url)


@dataclass
class Endpoint:
    label: str
    root: str
    model: str = ""

    @property
    def chat_url(self) -> str:
        return f"{self.root}/v1/chat/completions"


async def discover_model(client: httpx.AsyncClient, root: str) -> str:
    """The first served model name from ``/v1/models``."""
    try:
        resp = await client.get(f"{root}/v1/models")
    except httpx.HTTPError as exc:
        raise BenchError(f"cannot reach {root}: {type(exc).__name__}: {exc}") from exc
    if resp.status_code != 200:
        raise BenchError(
            f"{root}/v1/models answered {error_text(resp.status_code, resp.content)}; "
            "pass --model if the server does not list its models"
        )
    try:
        data = resp.json()["data"]
        return str(data[0]["id"])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise BenchError(f"{root}/v1/models lists no model; pass --model") from exc


async def snapshot(client: httpx.AsyncClient, root: str) -> MetricsSnapshot | None:
    """The server's /metrics, or None when it has none (not vLLM, or unreachable)."""
    try:
        resp = await client.get(f"{root}/metrics")
        if resp.status_code != 200:
            return None
        return MetricsSnapshot.from_text(resp.text)
    except (httpx.HTTPError, MetricsParseError):
        return None


def spec_delta(
    before: MetricsSnapshot | None, after: MetricsSnapshot | None
) -> SpecDecodeStats | None:
    if before is None or after is None:
        return None
    return spec_decode_delta(before, after)


def bench_client(config: EndpointConfig) -> httpx.AsyncClient:
    """The run's one HTTP client: the bearer key, the request timeout (connecting at most
    30 s of it) and no cap on connections, so the concurrency is the bench's, not the pool's."""
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    timeout = httpx.Timeout(config.timeout, connect=min(30.0, config.timeout))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    return httpx.AsyncClient(headers=headers, timeout=timeout, limits=limits)


async def open_endpoints(client: httpx.AsyncClient, config: EndpointConfig) -> list[Endpoint]:
    """The endpoint, and the ``--compare`` one, each with its model: the one given, else the
    first the server lists (``--compare-model`` defaults to ``--model``)."""
    endpoints = [Endpoint(config.labels[0], server_root(config.url))]
    if config.compare_url:
        endpoints.append(Endpoint(config.labels[1], server_root(config.compare_url)))
    for ep, model in zip(
        endpoints, (config.model, config.compare_model or config.model), strict=False
    ):
        ep.model = model or await discover_model(client, ep.root)
    return endpoints
