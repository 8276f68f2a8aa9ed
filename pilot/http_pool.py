"""An HTTP transport that keeps connection pools small when hundreds of runs share a server.

httpcore's pool looks at every connection it holds each time a request starts or ends (is it
idle, expired, readable?), which is one ``poll`` system call per idle connection. With 128 runs
streaming from one vLLM server that is 128 checks per event, and it dominated the pilot's CPU:
41 ms per step, 82 of 137 s in ``_assign_requests_to_connections`` (``bench/parallel.py`` under
cProfile). Splitting the connections into small pools ("shards") bounds that scan by the shard
size, whatever the number of runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

__all__ = ["ShardedTransport"]


class _Shard:
    __slots__ = ("active", "transport")

    def __init__(self, transport: httpx.AsyncHTTPTransport) -> None:
        self.transport = transport
        self.active = 0


class _ReleasingStream(httpx.AsyncByteStream):
    """The response body; hands the request's slot back to its shard when closed."""

    def __init__(self, inner: httpx.AsyncByteStream, shard: _Shard) -> None:
        self._inner = inner
        self._shard: _Shard | None = shard

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        shard, self._shard = self._shard, None
        if shard is not None:
            shard.active -= 1
        await self._inner.aclose()


class ShardedTransport(httpx.AsyncBaseTransport):
    """Several ``AsyncHTTPTransport`` pools of at most ``shard_size`` connections each.

    A request goes to the least busy shard; a new shard opens only when every open one is
    full, so a single run keeps reusing one warm connection. Busy means requests in flight,
    counted until the response body is closed (a stream holds its connection until then).
    Past ``max_shards`` full shards, requests queue in the least busy one.
    """

    def __init__(self, *, shard_size: int = 8, max_shards: int = 128, **transport: Any) -> None:
        if shard_size < 1 or max_shards < 1:
            raise ValueError("shard_size and max_shards must be at least 1")
        self._shard_size = shard_size
        self._max_shards = max_shards
        self._transport_kwargs = transport
        if "verify" not in transport:
            # One TLS context for every shard: building one loads the CA bundle (~30 ms).
            self._transport_kwargs["verify"] = httpx.create_ssl_context()
        self._shards: list[_Shard] = []

    @property
    def shards(self) -> int:
        """How many pools are open (tests and benchmarks watch this)."""
        return len(self._shards)

    def _pick(self) -> _Shard:
        best: _Shard | None = None
        for shard in self._shards:
            if best is None or shard.active < best.active:
                best = shard
                if shard.active == 0:
                    break
        if best is not None and (
            best.active < self._shard_size or len(self._shards) >= self._max_shards
        ):
            return best
        limits = httpx.Limits(
            max_connections=self._shard_size, max_keepalive_connections=self._shard_size
        )
        shard = _Shard(httpx.AsyncHTTPTransport(limits=limits, **self._transport_kwargs))
        self._shards.append(shard)
        return shard

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        shard = self._pick()
        shard.active += 1
        try:
            response = await shard.transport.handle_async_request(request)
        except BaseException:
            shard.active -= 1
            raise
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        response.stream = _ReleasingStream(stream, shard)
        return response

    async def aclose(self) -> None:
        shards, self._shards = self._shards, []
        for shard in shards:
            await shard.transport.aclose()
