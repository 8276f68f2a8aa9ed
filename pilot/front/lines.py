"""One event as one line of text, in styled parts: what every view of a run prints.

No rich here: a run whose output is not a terminal (CI, a log file, a pipe, ``--detach``)
prints :func:`plain_line` from the printer's thread and never pays for markup; the rich views
(:mod:`pilot.front.ui`) assemble the same parts with their styles, so both say the same words.
"""

from __future__ import annotations

from datetime import datetime

from pilot import events as ev
from pilot.agent.call_modes import choice_line
from pilot.run.confinement import is_unconfined

PIPE_WIDTH = 100_000
"""How wide a line may be when nobody's terminal cuts it: no limit, in effect."""


class _Parts:
    """The (text, style) pieces of one line, appended in order."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, str]] = []

    def append(self, text: str, style: str = "") -> None:
        self.parts.append((text, style))


def event_parts(event: ev.Event, *, width: int = 110) -> list[tuple[str, str]]:
    """One readable line per event, for the live view, `pilot show` and `pilot logs`; long
    fields are cut to fit ``width`` (the terminal's; a pipe's is unlimited, see
    :func:`line_width`)."""
    stamp = event.at.astimezone().strftime("%H:%M:%S")
    text = _Parts()
    text.append(f"{stamp} ", style="dim")
    match event:
        case ev.RunStarted():
            text.append(f"run started: {event.workflow} in {event.workspace} ", style="bold")
            text.append(f"(branch {event.branch})", style="dim")
            if is_unconfined(event.sandbox):
                text.append(f"\n  sandbox: {event.sandbox}", style="yellow")
        case ev.ModelResolved():
            if event.max_model_len is None:
                text.append(
                    f"model {event.model}, context window unknown "
                    f"({event.window_source or 'not reported'}): nothing is budgeted until a "
                    "context error names it; set model.context_window to budget from the start"
                )
            else:
                source = f" ({event.window_source})" if event.window_source else ""
                text.append(
                    f"model {event.model}, context window {event.max_model_len} tokens{source}"
                )
        case ev.PhaseStarted():
            text.append(f"phase {event.index + 1}: {event.name}", style="bold cyan")
        case ev.ModelRequest():
            text.append(f"step {event.step}: asking the model", style="dim")
            if event.temperature is not None:
                text.append(
                    f" (temperature {event.temperature}: hotter after a repeat or a fresh try)",
                    style="dim",
                )
        case ev.AssistantMessage():
            usage = event.usage
            tokens = f" [{usage.prompt_tokens}+{usage.completion_tokens} tok]" if usage else ""
            calls = ", ".join(c.name for c in event.tool_calls) or "no tool call"
            text.append(f"step {event.step}: {calls}{tokens}")
            if event.call_mode not in (None, "native", "none"):
                text.append(f" ({event.call_mode})", style="dim")
            if event.endpoint:
                text.append(f" @{short_endpoint(event.endpoint)}", style="dim")
            if event.content:
                text.append(f"  {_short(event.content, max(60, width - 70))}", style="italic")
            if event.repairs:
                text.append(f"  (repaired: {'; '.join(event.repairs)})", style="yellow")
        case ev.ToolStarted():
            text.append(f"  -> {event.name}", style="dim")
        case ev.ToolFinished():
            style = "red" if event.is_error else "green"
            text.append(f"  <- {event.name}: ", style=style)
            text.append(_short(event.output, width - 30))
        case ev.CheckStarted():
            when = "after the edit" if event.after_edit else f"attempt {event.attempt}"
            text.append(f"check ({when}): {event.command}", style="magenta")
        case ev.CheckFinished():
            verdict = "passed" if event.passed else f"failed (exit {event.exit_code})"
            text.append(f"check {verdict}", style="green" if event.passed else "red")
        case ev.AnswerCut():
            calls = f"; not run: {', '.join(event.calls)}" if event.calls else ""
            text.append(f"answer cut ({_short(event.reason, width - 40)}){calls}", "red")
        case ev.CheckBaseline():
            verdict = "passes" if event.passed else f"fails (exit {event.exit_code})"
            text.append(f"check before any change {verdict}: {event.command}", style="magenta")
        case ev.PhaseEvidence():
            style = "green" if event.accepted else "red"
            text.append(f"evidence {_short(event.line(), width - 30)}", style)
        case ev.Nudge():
            text.append(f"nudge ({event.reason})", style="yellow")
        case ev.CallModeChosen():
            text.append(f"call mode {_short(choice_line(event), width - 30)}", style="cyan")
        case ev.CodeAsked():
            text.append(
                f"  {event.name} came without its `{event.argument}`: asked for as a fenced block",
                style="yellow",
            )
        case ev.PhaseFinished():
            style = "bold green" if event.outcome == "succeeded" else "bold red"
            text.append(f"phase {event.name} {event.outcome}", style=style)
            if event.reason:
                text.append(f": {event.reason}")
        case ev.ServerAway():
            text.append(
                f"server unavailable, waiting: {_short(event.error, width - 40)}", style="yellow"
            )
        case ev.Compaction():
            text.append(
                f"context compacted ({event.reason}): {event.replaced_count} messages -> "
                f"summary ({event.summary_source}), {event.tokens_before} -> "
                f"{event.tokens_after} tokens",
                style="cyan",
            )
            if event.summary_error:
                text.append(f"  summary error: {_short(event.summary_error, width - 60)}")
        case ev.Question():
            text.append(f"step {event.step}: the model asked: ", style="yellow")
            text.append(_short(event.text, max(40, width // 2 - 20)))
            text.append(f"  answered: {_short(event.reply, max(30, width // 2 - 30))}", "dim")
        case ev.LoopDetected():
            text.append(f"loop detected ({event.kind}, {event.action}): ", style="yellow")
            text.append(_short(event.detail or event.message, width - 40))
        case ev.ImageFallback():
            verb = "resent as a data URL" if event.action == "data_url" else "dropped"
            text.append(f"image {verb}: {_short(event.error, width - 40)}", style="yellow")
        case ev.ServerBack():
            text.append(f"server back after {event.waited_s:.1f}s", style="green")
        case ev.WorkspaceSnapshot():
            text.append(f"  snapshot {event.snapshot[:10]}", style="dim")
        case ev.AttemptRestarted():
            text.append(f"starting the phase's try again: {event.reason}", style="yellow")
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
    return text.parts


def plain_line(event: ev.Event, *, width: int = PIPE_WIDTH) -> str:
    """The event's line without styles: what a pipe or a log file gets."""
    return "".join(text for text, _style in event_parts(event, width=width))


def short_endpoint(url: str) -> str:
    """``http://10.0.0.5:8001/v1`` -> ``10.0.0.5:8001``: which server answered, briefly."""
    rest = url.split("://", 1)[-1].rstrip("/")
    return rest.removesuffix("/v1")


def _short(value: str, limit: int) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


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
