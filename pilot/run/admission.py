"""KV-aware admission: start another run only while the runs' contexts fit the server's KV cache.

vLLM batches many runs nearly for free while their contexts fit its KV cache; past that it
evicts their cached prefixes (each step prefills its whole prompt again) and, when the running
requests themselves no longer fit, preempts some and recomputes them later. ``--parallel N``
alone cannot know where that point is; this module reads it from the server and admits runs so
that their contexts fit, with ``--parallel`` as the upper bound:

* **Capacity** is the KV cache's size in tokens, from ``vllm:cache_config_info``
  (``kv_cache_size_tokens``, else ``num_gpu_blocks x block_size``), summed over the servers.
* **A run's context** is its peak footprint: prompt + answer, from the answers' ``usage``. The
  expected peak is the largest peak of the finished runs of the same workflow: this process's
  and, from the store, the last ones before it (``history``), so that a workflow run before
  starts at the size it had, not at a guess. Without ``learn_after`` of them it is the pilot's
  own ceiling for a run: the compaction threshold of the window (no prompt is sent above it)
  plus the longest answer seen so far; a finished peak above that ceiling (an earlier, larger
  window) is capped by it. A run that grows past the estimate raises it at once (runs already
  started stay; a preemption then holds admission back, below).
* **Cold start**: before any answer has come back, the answer's size is unknown, so one run
  starts and the others wait for its first answer (up to ``first_answer_wait_s``, then
  ``output_reserve`` stands in for it) instead of being sized on a guess.
* **Admit** while (admitted + 1) x peak (in whole blocks) <= capacity x (1 - headroom) and
  below ``--parallel``; after the server preempted (``vllm:num_preemptions``: someone else's
  traffic, or runs larger than estimated), not above one run fewer than were running then, for
  ``backoff_s``.
* A server that does not say its capacity (not vLLM, or an old one) gets ``--parallel`` as is,
  but no run while its live usage (``vllm:kv_cache_usage_perc``) is at ``high_water``; the
  admission says so once.

A run that waits is told through ``on_wait`` (the CLI's status line) with the reason. The
server is read through the :class:`KvSource` Protocol: :class:`MetricsKvSource` reads
``/metrics`` and ``/v1/models`` of the run's endpoints (every server behind the router).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import httpx

from pilot import events as ev

if TYPE_CHECKING:
    from pilot.store.event_store import EventStore

HEADROOM = 0.0
"""Share of the KV cache left free beyond the runs' peaks (each already rounded up to whole
blocks): a run's context is at its peak only at its end, so peaks that fit leave room."""
HIGH_WATER = 0.95
"""Live KV usage at which no run is admitted, whatever the estimates say."""
BACKOFF_S = 30.0
"""Seconds after a preemption during which admission stays below the count that caused it."""
OUTPUT_RESERVE = 1024
"""Tokens of answer added to a run's prompt ceiling when no answer came back in time."""
FIRST_ANSWER_WAIT_S = 120.0
"""Seconds the other runs wait for the first run's first answer before sizing on the reserve."""
HISTORY_RUNS = 20
"""Finished runs of the same workflow read from the store to seed the peak estimate."""


@dataclass(frozen=True)
class KvView:
    """What the server(s) say about their KV cache; None where they do not say."""

    capacity_tokens: int | None = None
    usage: float | None = None
    """0-1, the share of KV blocks held by running requests (mean over servers, by size)."""
    preemptions: float | None = None
    """Cumulative, summed over the servers."""
    max_model_len: int | None = None
    block_size: int = 16
    servers: int = 1


class KvSource(Protocol):
    """Where admission reads the server's KV capacity and use."""

    async def read(self) -> KvView: ...

    async def aclose(self) -> None: ...


class MetricsKvSource:
    """``/metrics`` (cache config, usage, preemptions) and ``/v1/models`` (the window) of one or
    several endpoints; an endpoint that does not answer is left out of that reading."""

    def __init__(
        self, endpoints: Sequence[str], *, api_key: str | None = None, timeout: float = 5.0
    ) -> None:
        if not endpoints:
            raise ValueError("a KV source needs at least one endpoint")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout
        self._http: httpx.AsyncClient | None = None
        self._windows: dict[str, int] = {}

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self._timeout, headers=self._headers)
        return self._http

    async def _window(self, url: str) -> int | None:
        if url not in self._windows:
            from pilot.model.servers import server_root

            try:
                response = await self._client().get(f"{server_root(url)}/v1/models")
                data = response.json()["data"]
                self._windows[url] = int(data[0]["max_model_len"])
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
                return None
        return self._windows[url]

    async def _one(self, url: str) -> tuple[KvView, bool]:
        from brain.metrics import fetch_metrics

        try:
            snapshot = await fetch_metrics(url, self._client())
        except (httpx.HTTPError, ValueError):
            return KvView(), False
        try:
            block_size = int((snapshot.cache_config or {}).get("block_size", 16))
        except ValueError:
            block_size = 16
        return (
            KvView(
                capacity_tokens=snapshot.kv_capacity_tokens,
                usage=snapshot.kv_cache_usage,
                preemptions=snapshot.preemptions,
                max_model_len=await self._window(url),
                block_size=max(1, block_size),
            ),
            True,
        )

    async def read(self) -> KvView:
        results = await asyncio.gather(*(self._one(url) for url in self.endpoints))
        views = [view for view, ok in results if ok]
        return combine(views)

    async def aclose(self) -> None:
        if self._http is not None:
            with contextlib.suppress(Exception):
                await self._http.aclose()
            self._http = None


def combine(views: Sequence[KvView]) -> KvView:
    """Several servers as one: capacities and preemptions add up, usage is weighted by size,
    the window is the smallest (a run may land on any of them)."""
    if not views:
        return KvView(servers=0)
    sized = [v for v in views if v.capacity_tokens]
    capacity = sum(v.capacity_tokens or 0 for v in sized) if len(sized) == len(views) else None
    if capacity:
        used = [v for v in sized if v.usage is not None]
        usage = (
            sum((v.usage or 0.0) * (v.capacity_tokens or 0) for v in used)
            / sum(v.capacity_tokens or 0 for v in used)
            if used
            else None
        )
    else:
        known = [v.usage for v in views if v.usage is not None]
        usage = sum(known) / len(known) if known else None
    preempt = [v.preemptions for v in views if v.preemptions is not None]
    windows = [v.max_model_len for v in views if v.max_model_len]
    return KvView(
        capacity_tokens=capacity,
        usage=usage,
        preemptions=sum(preempt) if preempt else None,
        max_model_len=min(windows) if windows else None,
        block_size=max(v.block_size for v in views),
        servers=len(views),
    )


@dataclass(frozen=True)
class Decision:
    admit: bool
    reason: str = ""
    kv_limit: int | None = None
    """Runs whose contexts fit at once (None: the server does not say its capacity)."""


def kv_limit(
    capacity_tokens: int, peak_tokens: int, headroom: float = HEADROOM, block_size: int = 16
) -> int:
    """Runs of ``peak_tokens`` each (in whole blocks) that fit ``capacity_tokens`` less the
    headroom (>= 1)."""
    per_run = max(1, math.ceil(peak_tokens / block_size)) * block_size
    return max(1, math.floor(capacity_tokens * (1.0 - headroom) / per_run))


def decide(
    view: KvView | None,
    *,
    admitted: int,
    parallel: int,
    peak_tokens: int | None,
    headroom: float = HEADROOM,
    high_water: float = HIGH_WATER,
    backoff_cap: int | None = None,
) -> Decision:
    """Whether one more run may start now (pure). A first run always may."""
    if admitted >= parallel:
        return Decision(False, f"--parallel {parallel} runs are running")
    if admitted == 0:
        return Decision(True)
    limit = None
    if view is not None and view.capacity_tokens and peak_tokens:
        limit = kv_limit(view.capacity_tokens, peak_tokens, headroom, view.block_size)
        if admitted >= limit:
            return Decision(
                False,
                f"{admitted} running runs of up to ~{peak_tokens:,} tokens each fill the "
                f"{view.capacity_tokens:,}-token KV cache",
                limit,
            )
    if limit is None and view is not None and view.usage is not None and view.usage >= high_water:
        return Decision(False, f"the KV cache is {view.usage:.0%} used", limit)
    if backoff_cap is not None and admitted >= backoff_cap:
        return Decision(
            False, f"the server preempted requests with {backoff_cap + 1} runs running", limit
        )
    return Decision(True, "", limit)


WaitNotice = Callable[[str], None]


@dataclass
class Admission:
    """The admission of one process's runs against one server or a fleet behind the router."""

    source: KvSource | None
    parallel: int
    compact_at: float = 0.75
    output_reserve: int = OUTPUT_RESERVE
    headroom: float = HEADROOM
    high_water: float = HIGH_WATER
    backoff_s: float = BACKOFF_S
    learn_after: int = 1
    history: Sequence[int] = ()
    """Peaks of earlier finished runs of the same workflow (:func:`peak_history`)."""
    first_answer_wait_s: float = FIRST_ANSWER_WAIT_S
    poll: float = 1.0
    on_wait: WaitNotice | None = None
    clock: Callable[[], float] = time.monotonic
    admitted: int = 0
    waiting: int = 0
    view: KvView | None = None
    _read_at: float = field(default=-math.inf, repr=False)
    _peaks: dict[str, int] = field(default_factory=dict, repr=False)
    _finished_peaks: list[int] = field(default_factory=list, repr=False)
    _longest_answer: int = field(default=0, repr=False)
    _backoff_cap: int | None = field(default=None, repr=False)
    _backoff_until: float = field(default=-math.inf, repr=False)
    _changed: asyncio.Event | None = field(default=None, repr=False)
    _reading: asyncio.Lock | None = field(default=None, repr=False)
    _first_admit_at: float | None = field(default=None, repr=False)
    _told_unknown: bool = field(default=False, repr=False)
    _told: str = field(default="", repr=False)
    """The last wait reason said: each reason is said once, not once a waiting run."""
    preemptions_seen: float = 0.0
    """Preemptions the server counted while this admission watched it."""

    # -- estimates --------------------------------------------------------------------------

    def peak_estimate(self) -> int | None:
        """Tokens a run's context is expected to reach (see the module docstring)."""
        window = self.view.max_model_len if self.view else None
        live = max(self._peaks.values(), default=0)
        ceiling = None
        if window:
            answer = self._longest_answer or self.output_reserve
            ceiling = min(window, int(self.compact_at * window) + answer)
        finished = [*self.history, *self._finished_peaks]
        if finished and len(finished) >= self.learn_after:
            learned = max(finished)
            return max(min(learned, ceiling) if ceiling else learned, live)
        if ceiling:
            return max(ceiling, live)
        return live or None

    def sizing(self) -> bool:
        """True while the first run's first answer is awaited: nothing is known of a run's
        size yet (no answer, no finished run, no history), so no second run starts."""
        if self._longest_answer or self.history or self._finished_peaks:
            return False
        if self._first_admit_at is None:
            return False
        return self.clock() - self._first_admit_at < self.first_answer_wait_s

    def observe(self, run_id: str, _seq: int, event: ev.Event, _state: object = None) -> None:
        """A ``Runner`` observer: every answer's usage is its run's footprint at that moment."""
        if isinstance(event, ev.AssistantMessage) and event.usage is not None:
            tokens = event.usage.prompt_tokens + event.usage.completion_tokens
            first = not self._longest_answer
            self._longest_answer = max(self._longest_answer, event.usage.completion_tokens, 1)
            if tokens > self._peaks.get(run_id, 0):
                self._peaks[run_id] = tokens
            if first and self._changed is not None:
                self._changed.set()  # the runs waiting for the first answer may go now
        elif isinstance(event, ev.RunFinished):
            peak = self._peaks.pop(run_id, None)
            if peak:
                self._finished_peaks.append(peak)
        elif isinstance(event, ev.RunPaused):
            self._peaks.pop(run_id, None)

    # -- the server -------------------------------------------------------------------------

    async def refresh(self, force: bool = False) -> KvView | None:
        """Read the server when the last reading is older than ``poll`` (or ``force``); runs
        asking meanwhile wait for that one reading (none decides on no reading at all)."""
        if self.source is None:
            return self.view
        if self._reading is None:
            self._reading = asyncio.Lock()
        async with self._reading:
            if not force and self.clock() - self._read_at < self.poll:
                return self.view
            return await self._read()

    async def _read(self) -> KvView | None:
        assert self.source is not None
        self._read_at = self.clock()
        return self.take(await self.source.read())

    def take(self, view: KvView) -> KvView | None:
        """Apply one reading: a rise of the preemption counter starts the backoff."""
        now = self.clock()
        if view.servers == 0:
            return self.view  # nobody answered: keep the last reading
        previous, self.view = self.view, view
        if (
            previous is not None
            and previous.preemptions is not None
            and view.preemptions is not None
            and view.preemptions > previous.preemptions
        ):
            self.preemptions_seen += view.preemptions - previous.preemptions
            self._backoff_cap = max(1, self.admitted - 1)
            self._backoff_until = now + self.backoff_s
        if now >= self._backoff_until:
            self._backoff_cap = None
        if not view.capacity_tokens and not self._told_unknown and self.on_wait is not None:
            self._told_unknown = True
            self.on_wait(
                "admission: the server does not report its KV cache size "
                "(vllm:cache_config_info); admitting up to --parallel runs"
            )
        return view

    def decision(self) -> Decision:
        if 0 < self.admitted < self.parallel and self.sizing():
            return Decision(False, "the first run's first answer sizes the runs: waiting for it")
        return decide(
            self.view,
            admitted=self.admitted,
            parallel=self.parallel,
            peak_tokens=self.peak_estimate(),
            headroom=self.headroom,
            high_water=self.high_water,
            backoff_cap=self._backoff_cap,
        )

    async def can_admit(self) -> Decision:
        """Whether one more run may start now, from a fresh enough reading."""
        if self.admitted and self.admitted < self.parallel:
            await self.refresh()
        return self.decision()

    # -- slots --------------------------------------------------------------------------------

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def admit(self) -> None:
        self.admitted += 1
        if self._first_admit_at is None:
            self._first_admit_at = self.clock()

    def release(self) -> None:
        self.admitted = max(0, self.admitted - 1)
        self._event().set()

    @contextlib.asynccontextmanager
    async def slot(self, name: str = "a run") -> AsyncIterator[None]:
        """Wait until one more run may start, hold its place while it runs."""
        self.waiting += 1
        try:
            while True:
                decision = await self.can_admit()
                if decision.admit:
                    break
                if decision.reason != self._told and self.on_wait is not None:
                    self._told = decision.reason
                    others = f" (and {self.waiting - 1} more)" if self.waiting > 1 else ""
                    self.on_wait(f"{name}{others} waits for room: {decision.reason}")
                changed = self._event()
                changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), timeout=self.poll)
        finally:
            self.waiting -= 1
        self.admit()
        try:
            yield
        finally:
            self.release()

    async def aclose(self) -> None:
        if self.source is not None:
            await self.source.aclose()


def peak_history(
    store: EventStore, workflows: Collection[str], limit: int = HISTORY_RUNS
) -> list[int]:
    """Peak contexts (prompt + answer) of the last ``limit`` succeeded runs of these workflows
    in the store, newest first: what a run of them took before."""
    peaks: list[int] = []
    for record in store.list_runs(limit=max(200, limit * 10)):
        if len(peaks) >= limit:
            break
        if record.status != "succeeded" or record.workflow_name not in workflows:
            continue
        peak = 0
        for _seq, event in store.iter_events(record.id):
            if isinstance(event, ev.AssistantMessage) and event.usage is not None:
                peak = max(peak, event.usage.prompt_tokens + event.usage.completion_tokens)
        if peak:
            peaks.append(peak)
    return peaks
