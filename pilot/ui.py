"""What a person sees of a run: the rich live view, the timeline, and JSON lines.

All three are fed by the same events the store holds (one source, many views); none of them
keeps its own truth.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from pilot import events as ev
from pilot.state import RunState


def event_line(event: ev.Event, *, width: int = 110) -> Text:
    """One readable line per event, for the live view, `pilot show` and `pilot logs`."""
    stamp = event.at.astimezone().strftime("%H:%M:%S")
    text = Text(f"{stamp} ", style="dim")
    match event:
        case ev.RunStarted():
            text.append(f"run started: {event.workflow} in {event.workspace} ", style="bold")
            text.append(f"(branch {event.branch})", style="dim")
        case ev.ModelResolved():
            text.append(f"model {event.model}, context window {event.max_model_len} tokens")
        case ev.PhaseStarted():
            text.append(f"phase {event.index + 1}: {event.name}", style="bold cyan")
        case ev.ModelRequest():
            text.append(f"step {event.step}: asking the model", style="dim")
        case ev.AssistantMessage():
            usage = event.usage
            tokens = f" [{usage.prompt_tokens}+{usage.completion_tokens} tok]" if usage else ""
            calls = ", ".join(c.name for c in event.tool_calls) or "no tool call"
            text.append(f"step {event.step}: {calls}{tokens}")
            if event.endpoint:
                text.append(f" @{short_endpoint(event.endpoint)}", style="dim")
            if event.content:
                text.append(f"  {_short(event.content, 60)}", style="italic")
            if event.repairs:
                text.append(f"  (repaired: {'; '.join(event.repairs)})", style="yellow")
        case ev.ToolStarted():
            text.append(f"  -> {event.name}", style="dim")
        case ev.ToolFinished():
            style = "red" if event.is_error else "green"
            text.append(f"  <- {event.name}: ", style=style)
            text.append(_short(event.output, width - 30))
        case ev.CheckStarted():
            text.append(f"check (attempt {event.attempt}): {event.command}", style="magenta")
        case ev.CheckFinished():
            verdict = "passed" if event.passed else f"failed (exit {event.exit_code})"
            text.append(f"check {verdict}", style="green" if event.passed else "red")
        case ev.Nudge():
            text.append(f"nudge ({event.reason})", style="yellow")
        case ev.PhaseFinished():
            style = "bold green" if event.outcome == "succeeded" else "bold red"
            text.append(f"phase {event.name} {event.outcome}", style=style)
            if event.reason:
                text.append(f": {event.reason}")
        case ev.ServerUnavailable():
            text.append(f"server unavailable, waiting: {_short(event.error, 70)}", style="yellow")
        case ev.ServerBack():
            text.append(f"server back after {event.waited_s:.1f}s", style="green")
        case ev.WorkspaceRestored():
            text.append(f"workspace restored to {event.snapshot[:10]}: {event.reason}", "yellow")
        case ev.RunPaused():
            text.append(f"paused: {event.reason}", style="yellow bold")
        case ev.RunResumed():
            text.append(f"resumed by {event.owner} {event.note}", style="cyan")
            if event.from_checkpoint is not None:
                text.append(f" (state from its checkpoint at event {event.from_checkpoint})")
        case ev.RunFinished():
            style = "bold green" if event.status == "succeeded" else "bold red"
            text.append(f"run {event.status}", style=style)
            if event.reason:
                text.append(f": {event.reason}")
    return text


def short_endpoint(url: str) -> str:
    """``http://10.0.0.5:8001/v1`` -> ``10.0.0.5:8001``: which server answered, briefly."""
    rest = url.split("://", 1)[-1].rstrip("/")
    return rest.removesuffix("/v1")


def _short(value: str, limit: int) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def event_json(run_id: str, seq: int, event: ev.Event) -> str:
    payload: dict[str, Any] = json.loads(ev.event_to_json(event))
    return json.dumps({"run_id": run_id, "seq": seq, **payload}, ensure_ascii=False)


class LiveView:
    """A rich live panel (status line + recent events) while a run is driven."""

    def __init__(self, console: Console, *, recent: int = 12) -> None:
        self.console = console
        self.recent: list[Text] = []
        self.keep = recent
        self.run_id = ""
        self.state: RunState | None = None
        self.last_tool = "-"
        self.server = "ok"
        self.started = time.monotonic()
        self.live = Live(self._render(), console=console, refresh_per_second=4, transient=False)

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.update(self._render())
        self.live.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, run_id: str, seq: int, event: ev.Event, state: RunState) -> None:
        self.run_id, self.state = run_id, state
        if isinstance(event, ev.ToolStarted):
            self.last_tool = event.name
        elif isinstance(event, ev.ServerUnavailable):
            self.server = "waiting"
        elif isinstance(event, ev.ServerBack | ev.AssistantMessage):
            self.server = "ok"
        if not isinstance(event, ev.ModelRequest | ev.ToolStarted):
            self.recent.append(event_line(event))
            self.recent = self.recent[-self.keep :]
        self.live.update(self._render())

    def _render(self) -> Group:
        state = self.state
        table = Table.grid(padding=(0, 2))
        elapsed = time.monotonic() - self.started
        if state is not None:
            phase = state.phase.name if state.phase else "-"
            tokens = state.total_tokens
            rate = state.completion_tokens / elapsed if elapsed > 0 else 0.0
            table.add_row(
                Text(f"run {self.run_id}", style="bold"),
                f"phase {phase}",
                f"step {state.steps}",
                f"last tool {self.last_tool}",
                f"{tokens} tok ({rate:.0f} out/s)",
                f"{elapsed:.0f}s",
                Text(f"server {self.server}", style="green" if self.server == "ok" else "yellow"),
            )
        return Group(table, *self.recent)


def format_duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def local_time(value: datetime) -> str:
    return value.astimezone().strftime("%Y-%m-%d %H:%M")


class ServerWatch:
    """The server's running/waiting requests and KV cache use, read from its /metrics in a
    background thread (a view must never slow the runs down)."""

    def __init__(self, endpoint: str, interval: float = 2.0, label: str = "server") -> None:
        import threading

        self.url = endpoint.rstrip("/").removesuffix("/v1") + "/metrics"
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
        self.live = Live(self._render(), console=console, refresh_per_second=2, transient=False)

    def __enter__(self) -> MultiRunView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.servers:
            server.stop()
        self.live.update(self._render())
        self.live.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, run_id: str, seq: int, event: ev.Event, state: RunState) -> None:
        row = self.runs.setdefault(run_id, {"tool": "-", "status": "running"})
        row["phase"] = state.phase.name if state.phase else "-"
        row["steps"] = state.steps
        row["tokens"] = state.total_tokens
        if isinstance(event, ev.ToolStarted):
            row["tool"] = event.name
        elif isinstance(event, ev.ServerUnavailable):
            row["status"] = "waiting for server"
        elif isinstance(event, ev.ServerBack | ev.RunResumed | ev.RunStarted):
            row["status"] = "running"
        elif isinstance(event, ev.RunPaused):
            row["status"] = "paused"
        elif isinstance(event, ev.RunFinished):
            row["status"] = event.status
        if isinstance(event, ev.PhaseFinished | ev.RunFinished | ev.RunPaused):
            line = Text(f"{run_id} ")
            line.append_text(event_line(event))
            self.recent = [*self.recent, line][-self.keep :]
        self.live.update(self._render())

    def _render(self) -> Group:
        table = Table(box=None, header_style="bold", padding=(0, 2))
        for column in ("run", "status", "phase", "step", "last tool", "tokens"):
            table.add_column(column)
        for run_id, row in self.runs.items():
            table.add_row(
                run_id,
                row["status"],
                row.get("phase", "-"),
                str(row.get("steps", 0)),
                row["tool"],
                str(row.get("tokens", 0)),
            )
        active = sum(1 for r in self.runs.values() if r["status"] == "running")
        elapsed = time.monotonic() - self.started
        header = Text(f"{len(self.runs)} runs, {active} active, {elapsed:.0f}s", style="bold")
        if len(self.servers) == 1:
            header.append(f"   {self.servers[0].text}", style="cyan")
            return Group(header, table, *self.recent)
        servers = [Text(f"  {server.text}", style="cyan") for server in self.servers]
        return Group(header, *servers, table, *self.recent)  # one line per routed server
