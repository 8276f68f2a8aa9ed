"""What a person sees of a run: the rich live view, the timeline, and JSON lines.

All three are fed by the same events the store holds (one source, many views); none of them
keeps its own truth.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from brain.urls import server_root
from pilot import events as ev
from pilot.agent.call_modes import compact
from pilot.agent.state import RunState
from pilot.front.lines import PIPE_WIDTH, event_parts, format_duration, short_endpoint


def event_line(event: ev.Event, *, width: int = 110) -> Text:
    """One readable line per event, for the live view, `pilot show` and `pilot logs`; long
    fields are cut to fit ``width`` (the terminal's; a pipe's is unlimited, see
    :func:`line_width`)."""
    return Text.assemble(*event_parts(event, width=width))


def line_width(console: Console) -> int:
    """How wide an event line may be: the terminal's width, or no limit in a pipe or file."""
    return console.width if console.is_terminal else PIPE_WIDTH


def event_json(run_id: str, seq: int, event: ev.Event) -> str:
    payload: dict[str, Any] = json.loads(ev.event_to_json(event))
    return json.dumps({"run_id": run_id, "seq": seq, **payload}, ensure_ascii=False)


class LiveView:
    """A rich live panel (status line + recent events) while a run is driven.

    Rendered at each refresh, not only at each event, so the clock and the wait for a server
    move while nothing happens. The token rate counts only this process's tokens (a resumed
    run's earlier ones were not made in this elapsed time).
    """

    def __init__(
        self, console: Console, *, recent: int = 12, server_wait: float | None = None
    ) -> None:
        self.console = console
        self.recent: list[ev.Event] = []
        self.keep = recent
        self.run_id = ""
        self.state: RunState | None = None
        self.last_tool = "-"
        self.last_phase = "-"
        self.server = "ok"
        self.server_wait = server_wait
        self.waiting_since: float | None = None
        self.tokens_before: int | None = None
        self.started = time.monotonic()
        self.live = Live(
            console=console, get_renderable=self._render, refresh_per_second=4, transient=False
        )

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.refresh()
        self.live.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, run_id: str, seq: int, event: ev.Event, state: RunState) -> None:
        self.run_id, self.state = run_id, state
        if self.tokens_before is None:
            before = isinstance(event, ev.RunResumed | ev.RunStarted)
            self.tokens_before = state.completion_tokens if before else 0
        if state.phase is not None:
            self.last_phase = state.phase.name
        if isinstance(event, ev.ToolStarted):
            self.last_tool = event.name
        elif isinstance(event, ev.ServerAway):
            self.server = "waiting"
            if self.waiting_since is None:
                self.waiting_since = time.monotonic()
        elif isinstance(event, ev.ServerBack | ev.AssistantMessage):
            self.server = "ok"
            self.waiting_since = None
        if not isinstance(event, ev.ModelRequest | ev.ToolStarted):
            self.recent.append(event)
            self.recent = self.recent[-self.keep :]
        self.live.refresh()

    def rate(self, elapsed: float) -> float:
        """Completion tokens a second made by this process."""
        if self.state is None or elapsed <= 0:
            return 0.0
        return max(0, self.state.completion_tokens - (self.tokens_before or 0)) / elapsed

    def waiting_line(self) -> Text | None:
        """How long the run has waited for its server, how long it will, and what to do."""
        if self.waiting_since is None:
            return None
        waited = time.monotonic() - self.waiting_since
        where = ""
        if self.state is not None and self.state.started is not None:
            where = f" at {short_endpoint(self.state.started.endpoint)}"
        limit = (
            f"up to {format_duration(self.server_wait)} (model.server_wait), then the run "
            "pauses (exit 75)"
            if self.server_wait
            else "up to model.server_wait, then the run pauses (exit 75)"
        )
        return Text(
            f"waiting for the model server{where}: {format_duration(waited)} so far, {limit}. "
            "Start or fix the server (brain up / brain status), or press Ctrl-C to pause now "
            "and `pilot resume` later.",
            style="yellow",
        )

    def _render(self) -> Group:
        state = self.state
        table = Table.grid(padding=(0, 2))
        elapsed = time.monotonic() - self.started
        if state is not None:
            phase = state.phase.name if state.phase else self.last_phase
            server = self.server
            if self.waiting_since is not None:
                server = f"waiting {format_duration(time.monotonic() - self.waiting_since)}"
            table.add_row(
                Text(f"run {self.run_id}", style="bold"),
                f"phase {phase}",
                f"step {state.steps}",
                f"last tool {self.last_tool}",
                f"{state.total_tokens} tok ({self.rate(elapsed):.0f} out/s)",
                f"calls {compact(state.call_book)}",
                format_duration(elapsed),
                Text(f"server {server}", style="green" if self.server == "ok" else "yellow"),
            )
        width = self.console.width
        lines = [event_line(e, width=width) for e in self.recent]
        waiting = self.waiting_line()
        return Group(table, *lines, *([waiting] if waiting is not None else []))


class ServerWatch:
    """The server's running/waiting requests and KV cache use, read from its /metrics in a
    background thread (a view must never slow the runs down)."""

    def __init__(self, endpoint: str, interval: float = 2.0, label: str = "server") -> None:
        import threading

        self.url = server_root(endpoint) + "/metrics"
        self.interval = interval
        self.label = label
        self.text = f"{label}: -"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> ServerWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _poll(self) -> None:
        import httpx

        from brain.metrics import MetricsSnapshot

        while not self._stop.is_set():
            try:
                snap = MetricsSnapshot.from_text(httpx.get(self.url, timeout=2).text)
                kv = f"{snap.kv_cache_usage:.0%}" if snap.kv_cache_usage is not None else "-"
                self.text = (
                    f"{self.label}: {snap.requests_running or 0:.0f} running, "
                    f"{snap.requests_waiting or 0:.0f} waiting, KV cache {kv}"
                )
            except Exception as exc:  # the view reports, it never fails the runs
                self.text = f"{self.label}: unreachable ({type(exc).__name__})"
            self._stop.wait(self.interval)


class MultiRunView:
    """One line per active run, for `pilot run --matrix` and `pilot worker`, and each server's
    load when the endpoints are known (one line per server when runs are routed)."""

    def __init__(self, console: Console, *, recent: int = 6, endpoints: Sequence[str] = ()) -> None:
        self.console = console
        self.servers = [
            ServerWatch(url, label="server" if len(endpoints) == 1 else short_endpoint(url)).start()
            for url in endpoints
        ]
        self.runs: dict[str, dict[str, Any]] = {}
        self.recent: list[Text] = []
        self.keep = recent
        self.started = time.monotonic()
        self.live = Live(
            console=console, get_renderable=self._render, refresh_per_second=2, transient=False
        )

    def __enter__(self) -> MultiRunView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.servers:
            server.stop()
        self.live.refresh()
        self.live.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, run_id: str, seq: int, event: ev.Event, state: RunState) -> None:
        row = self.runs.setdefault(run_id, {"tool": "-", "status": "running"})
        if state.phase is not None or "phase" not in row:
            row["phase"] = state.phase.name if state.phase else "-"
        row["steps"] = state.steps
        row["tokens"] = state.total_tokens
        row["calls"] = compact(state.call_book)
        if isinstance(event, ev.ToolStarted):
            row["tool"] = event.name
        elif isinstance(event, ev.ServerAway):
            row["status"] = "waiting for server"
        elif isinstance(event, ev.ServerBack | ev.RunResumed | ev.RunStarted):
            row["status"] = "running"
        elif isinstance(event, ev.RunPaused):
            row["status"] = "paused"
        elif isinstance(event, ev.RunFinished):
            row["status"] = event.status
        if isinstance(event, ev.PhaseFinished | ev.RunFinished | ev.RunPaused | ev.CallModeChosen):
            line = Text(f"{run_id} ")
            line.append_text(event_line(event, width=self.console.width - len(line)))
            self.recent = [*self.recent, line][-self.keep :]
        self.live.refresh()

    def _render(self) -> Group:
        table = Table(box=None, header_style="bold", padding=(0, 2))
        for column in ("run", "status", "phase", "step", "last tool", "tokens", "calls"):
            table.add_column(column)
        for run_id, row in self.runs.items():
            table.add_row(
                run_id,
                row["status"],
                row.get("phase", "-"),
                str(row.get("steps", 0)),
                row["tool"],
                str(row.get("tokens", 0)),
                row.get("calls", "-"),
            )
        active = sum(1 for r in self.runs.values() if r["status"] == "running")
        elapsed = time.monotonic() - self.started
        header = Text(f"{len(self.runs)} runs, {active} active, {elapsed:.0f}s", style="bold")
        if len(self.servers) == 1:
            header.append(f"   {self.servers[0].text}", style="cyan")
            return Group(header, table, *self.recent)
        servers = [Text(f"  {server.text}", style="cyan") for server in self.servers]
        return Group(header, *servers, table, *self.recent)  # one line per routed server


def evidence_lines(events: Sequence[ev.Event]) -> list[str]:
    """Per phase, what its end was judged on (its last ``phase_evidence``): ``pilot show``'s
    closing list, so a success says what it rests on."""
    names: dict[int, str] = {}
    last: dict[int, ev.PhaseEvidence] = {}
    for event in events:
        if isinstance(event, ev.PhaseStarted):
            names[event.index] = event.name
        elif isinstance(event, ev.PhaseEvidence):
            last[event.phase] = event
    return [f"phase {names.get(i, i)}: evidence {last[i].line()}" for i in sorted(last)]
