"""Several servers of one model: each run's requests routed to one of them.

A workflow's ``model.endpoints`` (or ``--endpoint`` given several times) names several
OpenAI-compatible servers serving the same model. :class:`Router` holds one
:class:`~pilot.model.client.OpenAIModelClient` per endpoint, shared by every run of the process (as
``Runner`` shares one client per endpoint), and ``Router.for_run(run_id)`` gives each run its
:class:`RoutedModelClient`, the ``ModelClient`` its loop talks to. The policy:

* **Sticky.** A run's requests go to its endpoint for as long as that endpoint is healthy, so
  the server's prefix cache keeps serving the run's long and growing prompt. A run moves only
  when its endpoint is dead, and then stays where it moved.
* **Least outstanding.** A run without an endpoint (its first request, or its endpoint died)
  gets the healthy endpoint with the fewest outstanding requests: the requests this process
  has in flight there now, plus everybody else's (``vllm:num_requests_running`` +
  ``vllm:num_requests_waiting`` from ``/metrics`` at the last refresh, less ours then). Ties
  go to the endpoint with fewer of this process's runs on it.
* **Dead endpoints are skipped.** An endpoint is dead when a request still fails after the
  client's quick retries (``failover_wait``; a refused connection gives up at once while
  another endpoint is healthy) or its ``/health`` fails. It gets no request until ``/health``
  answers 200 again: a background refresh (every ``refresh_interval``: each endpoint's
  ``/health``, and ``/metrics`` of the healthy) and a probe whenever nothing is healthy.
* **All dead: the usual server wait.** A request then waits and probes for
  ``model.server_wait`` from its first failure (the run records ``server_unavailable``, then
  ``server_back``), then raises :class:`ServerUnavailable`: the run pauses, as with one server.

All endpoints must serve the same model: what each serves is learnt the first time a run
uses it (and again after it was dead), and endpoints that disagree are a
:class:`ConfigurationError` naming each one's models. Every answer carries the endpoint that
gave it (``ModelResponse.endpoint``), which the run records in its ``assistant_message``.

The assignment of runs to endpoints lives in the process, but each answer's endpoint is an
event: a run resumed by another process goes back to the endpoint that last answered it
(``RunState.endpoint``) while that one is healthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from pilot.errors import ConfigurationError, ServerUnavailable
from pilot.model.client import OpenAIModelClient, notify_wait
from pilot.model.errors import is_refused
from pilot.model.servers import PROBE_TIMEOUT_S, server_up
from pilot.model.settings import ClientSettings
from pilot.model.types import (
    ChatRequest,
    ModelResponse,
    RetryPolicy,
    ServedModel,
    WaitCallback,
    WaitEvent,
)

if TYPE_CHECKING:
    import httpx

__all__ = [
    "FAILOVER_WAIT",
    "REFRESH_INTERVAL",
    "EndpointState",
    "RoutedModelClient",
    "Router",
    "is_refused",
]

T = TypeVar("T")

FAILOVER_WAIT = 5.0
"""Seconds one endpoint may keep failing (the client's quick retries) before it is dead."""
REFRESH_INTERVAL = 1.0
"""Seconds between two refreshes of the endpoints' health (/health) and load (/metrics)."""
QUICK_RETRY = RetryPolicy(initial_backoff=0.25, max_backoff=2.0, jitter=0.25)
"""Backoff of the per-endpoint clients: short, since another endpoint may take the request."""
STICKY_MEMORY = 10_000
"""Runs whose endpoint is remembered after they stop (a resume in this process returns)."""


@dataclass(eq=False)
class EndpointState:
    """One endpoint as the router sees it."""

    url: str
    index: int
    client: OpenAIModelClient
    healthy: bool = True
    dead_reason: str = ""
    inflight: int = 0
    """Completions this process has in flight there now."""
    others: float = 0.0
    """Everybody else's outstanding requests there, as of the last /metrics."""
    runs: int = 0
    """Runs of this process routed there now."""
    assigned: int = 0
    """Runs ever routed there (the last tie-break, so equal endpoints take turns)."""
    requests: int = 0
    """Completions it answered."""
    models: list[str] | None = None
    """What it serves (``/v1/models``), once known; forgotten when it dies."""
    last_probe: float = 0.0
    learning: asyncio.Future[None] | None = None

    @property
    def outstanding(self) -> float:
        return self.inflight + self.others


class Router:
    """The endpoints, their health and load, and which run is on which; shared by the runs."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        model: str = "auto",
        settings: ClientSettings = ClientSettings(),
        failover_wait: float = FAILOVER_WAIT,
        refresh_interval: float = REFRESH_INTERVAL,
        retry: RetryPolicy | None = None,
    ) -> None:
        urls = [url.rstrip("/") for url in endpoints]
        if not urls or len(set(urls)) != len(urls):
            raise ValueError(f"a router needs distinct endpoints, got {list(endpoints)}")
        self.model = model
        self.server_wait = server_wait = settings.server_wait
        self.failover_wait = min(failover_wait, server_wait)
        # Each endpoint's own wait is short: the router, not the client, waits server_wait.
        per_endpoint = replace(settings, server_wait=self.failover_wait)
        self.refresh_interval = refresh_interval
        self.endpoints: list[EndpointState] = []
        for index, url in enumerate(urls):
            state = EndpointState(url=url, index=index, client=None)  # type: ignore[arg-type]
            state.client = OpenAIModelClient(
                url,
                per_endpoint,
                retry=retry or QUICK_RETRY,
                give_up=lambda exc, state=state: self._give_up(state, exc),
            )
            self.endpoints.append(state)
        self._active: dict[str, EndpointState] = {}
        self._sticky: OrderedDict[str, EndpointState] = OrderedDict()
        self._refresher: asyncio.Task[None] | None = None
        self._http: httpx.AsyncClient | None = None
        self._http_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def urls(self) -> list[str]:
        return [ep.url for ep in self.endpoints]

    def for_run(self, run_id: str, previous: str | None = None) -> RoutedModelClient:
        """The run's own ``ModelClient``: its requests stay on one endpoint while it is up.

        ``previous`` is the endpoint that last answered the run (from its events): a run
        resumed by a new process goes back there while it is healthy, where vLLM's prefix
        cache may still hold its prompt, instead of being placed afresh.
        """
        if previous is not None and run_id not in self._sticky:
            wanted = previous.rstrip("/")
            known = next((ep for ep in self.endpoints if ep.url.rstrip("/") == wanted), None)
            if known is not None:
                self._sticky[run_id] = known
        return RoutedModelClient(self, run_id)

    def endpoint_of(self, run_id: str) -> str | None:
        """The endpoint the run is (or was last) routed to."""
        state = self._sticky.get(run_id)
        return state.url if state is not None else None

    def load(self) -> dict[str, dict[str, Any]]:
        """Each endpoint's health, load and counts (for views, tests and benchmarks)."""
        return {
            ep.url: {
                "healthy": ep.healthy,
                "dead_reason": ep.dead_reason,
                "inflight": ep.inflight,
                "others": ep.others,
                "runs": ep.runs,
                "assigned": ep.assigned,
                "requests": ep.requests,
            }
            for ep in self.endpoints
        }

    # -- routing ----------------------------------------------------------------------------

    def pick(self, run_id: str) -> EndpointState | None:
        """The run's endpoint: its own while healthy, else the least loaded healthy one (the
        run moves there); None when every endpoint is dead."""
        current = self._sticky.get(run_id)
        if current is not None and current.healthy:
            if self._active.get(run_id) is not current:
                self._place(run_id, current, new=False)
            return current
        healthy = [ep for ep in self.endpoints if ep.healthy]
        if not healthy:
            return None
        best = min(healthy, key=lambda ep: (ep.outstanding, ep.runs, ep.assigned, ep.index))
        self._place(run_id, best, new=True)
        return best

    def _place(self, run_id: str, state: EndpointState, *, new: bool) -> None:
        previous = self._active.pop(run_id, None)
        if previous is not None:
            previous.runs -= 1
        state.runs += 1
        if new:
            state.assigned += 1
        self._active[run_id] = state
        self._sticky[run_id] = state
        self._sticky.move_to_end(run_id)
        while len(self._sticky) > STICKY_MEMORY:
            self._sticky.popitem(last=False)

    def release(self, run_id: str) -> None:
        """The run stopped: it no longer counts on its endpoint (which is remembered)."""
        state = self._active.pop(run_id, None)
        if state is not None:
            state.runs -= 1

    def _give_up(self, state: EndpointState, exc: BaseException) -> bool:
        """A refused connection ends the quick retries at once if another endpoint is up."""
        return is_refused(exc) and any(ep.healthy for ep in self.endpoints if ep is not state)

    def mark_dead(self, state: EndpointState, reason: str) -> None:
        if state.healthy:
            state.healthy = False
            state.dead_reason = reason
            state.models = None  # it may come back serving something else
            state.others = 0.0

    def mark_healthy(self, state: EndpointState) -> None:
        state.healthy = True
        state.dead_reason = ""

    # -- what they serve ----------------------------------------------------------------------

    def check_models(self) -> None:
        """Raise :class:`ConfigurationError` when endpoints serve different models."""
        known = [ep for ep in self.endpoints if ep.models is not None]
        if len(known) < 2:
            return
        if self.model == "auto":
            firsts = {tuple(ep.models[:1]) for ep in known}  # type: ignore[index]
            agree = len(firsts) == 1
        else:
            agree = all(self.model in (ep.models or ()) for ep in known)
        if agree:
            return
        served = "; ".join(
            f"{ep.url} serves {', '.join(ep.models or []) or 'nothing'}" for ep in known
        )
        wanted = "the same first model (model.name: auto)" if self.model == "auto" else self.model
        raise ConfigurationError(
            f"the endpoints of this run must all serve {wanted}, but {served}. Point every "
            "endpoint at one model (or set model.name to a model they all serve)."
        )

    async def _learn_models(self, state: EndpointState, on_wait: WaitCallback | None) -> None:
        served = await state.client.list_models(on_wait=on_wait)
        state.models = [m.id for m in served]
        self.check_models()

    def _learn_in_background(self, state: EndpointState) -> asyncio.Future[None]:
        task = state.learning
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            task = asyncio.ensure_future(self._learn_models(state, None))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            state.learning = task
        return task

    async def learn_all(self) -> None:
        """Ask every healthy endpoint whose models are unknown (at most ``failover_wait``),
        so that endpoints serving different models are found when a run starts."""
        pending = [
            self._learn_in_background(ep)
            for ep in self.endpoints
            if ep.healthy and ep.models is None
        ]
        if pending:
            await asyncio.wait(pending, timeout=self.failover_wait)
        self.check_models()

    # -- health and load ------------------------------------------------------------------------

    def _http_client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._http is None or self._http_loop is not loop:
            import httpx

            self._http = httpx.AsyncClient(timeout=PROBE_TIMEOUT_S)
            self._http_loop = loop
        return self._http

    async def _health_ok(self, state: EndpointState) -> bool:
        state.last_probe = time.monotonic()
        return await server_up(self._http_client(), state.url)

    async def probe_dead(self) -> None:
        """GET /health of the dead endpoints not probed in the last half interval."""
        now = time.monotonic()
        due = [
            ep
            for ep in self.endpoints
            if not ep.healthy and now - ep.last_probe >= self.refresh_interval / 2
        ]
        results = await asyncio.gather(*(self._health_ok(ep) for ep in due))
        for ep, ok in zip(due, results, strict=True):
            if ok:
                self.mark_healthy(ep)

    async def _refresh_one(self, state: EndpointState) -> None:
        healthy = await self._health_ok(state)
        if not state.healthy:
            if healthy:
                self.mark_healthy(state)
            return
        if not healthy:
            self.mark_dead(state, "/health failed")
            return
        import httpx

        from brain.metrics import fetch_metrics

        ours = state.inflight
        try:
            snapshot = await fetch_metrics(state.url, self._http_client())
        except (httpx.HTTPError, ValueError):
            return  # no (readable) /metrics there: our own count is all there is
        total = (snapshot.requests_running or 0.0) + (snapshot.requests_waiting or 0.0)
        state.others = max(0.0, total - min(ours, state.inflight))

    async def refresh(self) -> None:
        """One refresh: every endpoint's /health, and the load of the healthy ones."""
        await asyncio.gather(
            *(self._refresh_one(ep) for ep in self.endpoints), return_exceptions=True
        )

    async def _refresh_forever(self) -> None:
        while not self._closed:
            await self.refresh()
            await asyncio.sleep(self.refresh_interval)

    def _start_refresher(self) -> None:
        loop = asyncio.get_running_loop()
        task = self._refresher
        if self._closed or (task is not None and not task.done() and task.get_loop() is loop):
            return
        self._refresher = loop.create_task(self._refresh_forever(), name="pilot-router-refresh")

    async def wait_for_healthy(self, timeout: float) -> None:
        """Probe the dead endpoints until one is healthy or ``timeout`` seconds passed."""
        deadline = time.monotonic() + timeout
        while True:
            await self.probe_dead()
            remaining = deadline - time.monotonic()
            if any(ep.healthy for ep in self.endpoints) or remaining <= 0:
                return
            await asyncio.sleep(min(self.refresh_interval / 2, remaining))

    def describe_dead(self) -> str:
        return "; ".join(f"{ep.url}: {ep.dead_reason or 'dead'}" for ep in self.endpoints)

    async def aclose(self) -> None:
        """Stop the refresh and close every endpoint's connections."""
        self._closed = True
        task, self._refresher = self._refresher, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                if task.get_loop() is asyncio.get_running_loop():
                    await task
        for ep in self.endpoints:
            with contextlib.suppress(Exception):
                await ep.client.aclose()
        if self._http is not None:
            with contextlib.suppress(Exception):
                await self._http.aclose()
            self._http = None


class RoutedModelClient:
    """One run's :class:`~pilot.model.types.ModelClient` over a :class:`Router`.

    Every call goes to the run's endpoint; when that one is dead, to the least loaded healthy
    one (which becomes the run's). The run's ``on_wait`` hears one ``unavailable`` when a call
    first fails and one ``back`` when it finally got an answer, wherever that came from.
    """

    def __init__(self, router: Router, run_id: str) -> None:
        self.router = router
        self.run_id = run_id

    @property
    def endpoint(self) -> str | None:
        """The endpoint the run is routed to (None before its first call)."""
        return self.router.endpoint_of(self.run_id)

    async def _call(
        self,
        operation: Callable[[EndpointState, WaitCallback], Awaitable[T]],
        on_wait: WaitCallback | None,
    ) -> tuple[T, int]:
        """Run ``operation`` on the run's endpoint, moving on when it is dead; returns the
        result and how many endpoints were tried."""
        router = self.router
        router._start_refresher()
        first_failure: float | None = None
        told = False
        tries = 0
        state: EndpointState | None = None

        async def unavailable(error: str, attempt: int) -> None:
            nonlocal first_failure, told
            if first_failure is None:
                first_failure = time.monotonic()
            if not told and on_wait is not None:
                told = True
                await notify_wait(
                    on_wait, WaitEvent(kind="unavailable", error=error, attempt=attempt)
                )

        async def inner_wait(event: WaitEvent) -> None:
            # The endpoint's own "back" is folded into ours, told once the call succeeded.
            if event.kind == "unavailable" and state is not None:
                await unavailable(f"{state.url}: {event.error}", event.attempt)

        while True:
            router.check_models()
            state = router.pick(self.run_id)
            if state is None:
                await unavailable(f"every endpoint is down: {router.describe_dead()}", tries + 1)
                assert first_failure is not None
                waited = time.monotonic() - first_failure
                if waited >= router.server_wait:
                    raise ServerUnavailable(
                        ", ".join(router.urls),
                        f"no endpoint answered (server_wait={router.server_wait:g}s); "
                        f"{router.describe_dead()}",
                        waited=waited,
                    )
                await router.wait_for_healthy(router.server_wait - waited)
                continue
            tries += 1
            try:
                result = await operation(state, inner_wait)
            except ServerUnavailable as exc:
                router.mark_dead(state, exc.reason)
                await unavailable(f"{state.url}: {exc.reason}", tries)
                continue
            if told and first_failure is not None:
                await notify_wait(
                    on_wait,
                    WaitEvent(
                        kind="back",
                        waited_s=time.monotonic() - first_failure,
                        attempts=tries,
                    ),
                )
            return result, tries

    async def complete(
        self, request: ChatRequest, *, on_wait: WaitCallback | None = None
    ) -> ModelResponse:
        """One completion on the run's endpoint (see :meth:`OpenAIModelClient.complete`)."""
        router = self.router

        async def operation(state: EndpointState, wait: WaitCallback) -> ModelResponse:
            if state.models is None:
                await router._learn_models(state, wait)
            state.inflight += 1
            try:
                response = await state.client.complete(request, on_wait=wait)
            finally:
                state.inflight -= 1
            state.requests += 1
            return response

        response, tries = await self._call(operation, on_wait)
        return response.model_copy(update={"attempts": response.attempts + tries - 1})

    async def list_models(self, *, on_wait: WaitCallback | None = None) -> list[ServedModel]:
        """What the run's endpoint serves; also checks that every endpoint serves the same."""
        router = self.router

        async def operation(state: EndpointState, wait: WaitCallback) -> list[ServedModel]:
            served = await state.client.list_models(on_wait=wait)
            state.models = [m.id for m in served]
            return served

        served, _ = await self._call(operation, on_wait)
        await router.learn_all()
        return served

    async def count_tokens(
        self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> int | None:
        """The prompt's size from the run's endpoint's tokenizer."""

        async def operation(state: EndpointState, wait: WaitCallback) -> int | None:
            return await state.client.count_tokens(model, messages, tools)

        count, _ = await self._call(operation, None)
        return count

    def release(self) -> None:
        """The run stopped: its endpoint is remembered but no longer counts it."""
        self.router.release(self.run_id)

    async def aclose(self) -> None:
        """Release the run (the router and its connections stay open for the other runs)."""
        self.release()
